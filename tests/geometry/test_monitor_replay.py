"""replay(): checkpoint series on a fixed probe batch, against a direct computation."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls, representation_metrics
from interp_widgets.geometry.monitor.replay import probe_batches, replay
from tests.conftest import model_fingerprint

PROBE = ["the cat sat on the mat", "a dog ran", "stocks fell sharply today", "it rained"]


def _checkpoints(model, tmp_path):
    """Three checkpoints of one short run: a state dict, a safetensors file and a saved HF directory."""
    from safetensors.torch import save_file

    model = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(0)
    states = []
    for _ in range(3):
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        ids = torch.randint(0, model.config.vocab_size, (4, 10), generator=g)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    save_file(
        {k: v.contiguous() for k, v in states[1].items() if k != "lm_head.weight"}, str(tmp_path / "c1.safetensors")
    )
    directory = tmp_path / "c2"
    template = copy.deepcopy(model)
    template.load_state_dict(states[2])
    template.save_pretrained(directory)
    return [states[0], tmp_path / "c1.safetensors", directory], states


def test_replay_equals_direct_measurement_per_checkpoint(gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    before = model_fingerprint(model, tokenizer)
    checkpoints, states = _checkpoints(model, tmp_path)
    record = replay(
        checkpoints, PROBE, ["layer:0"], model=model, tokenizer=tokenizer, rank=3, n_controls=8, seed=2, progress=False
    )
    assert model_fingerprint(model, tokenizer) == before
    assert record.x_label == "checkpoint" and record.steps.tolist() == [0, 1, 2]
    assert record.series("fitting")[1].tolist() == [1.0, 0.0, 0.0]  # window: ceil(0.3 · 3) = 1 checkpoint
    assert record.meta["fit_window"] == [0, 1]

    batch = probe_batches(PROBE, tokenizer, "causal-lm")[0]
    keep = batch["attention_mask"].reshape(-1).bool()
    clouds = []
    for state in states:
        net = copy.deepcopy(model).eval()
        net.load_state_dict(state)
        out = net(**batch, output_hidden_states=True)
        hidden = out.hidden_states[1]
        (grad,) = torch.autograd.grad(out.loss, hidden)
        d = hidden.shape[-1]
        clouds.append((hidden.detach().reshape(-1, d)[keep], grad.reshape(-1, d)[keep], out.loss.item()))
    proxy = TangentProxy.fit(clouds[0][0], 3)  # fitted on the window, then frozen
    controls = normal_controls(proxy, 8, seed=2)
    for index, (H, G, loss) in enumerate(clouds):
        expected = gradient_alignment(G, proxy, controls)
        assert record.series("energy_ratio|layer:0")[1][index] == pytest.approx(expected.ratio, rel=1e-6)
        assert record.series("proxy_energy|layer:0")[1][index] == pytest.approx(expected.energy_proxy, rel=1e-6)
        assert record.series("p_value|layer:0")[1][index] == expected.p_value
        assert record.series("isoscore|layer:0")[1][index] == pytest.approx(
            representation_metrics(H)["isoscore"], rel=1e-6
        )
        assert record.series("loss")[1][index] == pytest.approx(loss, rel=1e-6)
    assert len(set(record.series("proxy_energy|layer:0")[1].round(12))) == 3  # the checkpoints differ


def test_replay_refit_and_probe_errors(bert_masked_lm, bert_classifier, tmp_path):
    model, tokenizer = bert_masked_lm
    batches = probe_batches(PROBE, tokenizer, "masked-lm", batch_size=2, seed=1)
    assert len(batches) == 2
    for batch in batches:
        masked = batch["labels"] != -100
        assert masked.any(dim=1).all()
        assert (batch["input_ids"][masked] == tokenizer.mask_token_id).all()
    again = probe_batches(PROBE, tokenizer, "masked-lm", batch_size=2, seed=1)
    assert all(torch.equal(a["labels"], b["labels"]) for a, b in zip(batches, again))
    record = replay(
        [model, model], None, [1], batches=batches, rank=3, fit="refit", refit_every=1, n_controls=4, progress=False
    )
    ratio = record.series("energy_ratio|layer:1")[1]
    assert np.isnan(ratio[0]) and np.isfinite(ratio[1])
    classifier, _ = bert_classifier
    with pytest.raises(ValueError, match="needs labels="):
        replay([classifier], PROBE, ["layer:0"], tokenizer=tokenizer, progress=False)
    with pytest.raises(ValueError, match="pass model="):
        replay([{"x": torch.zeros(1)}], PROBE, ["layer:0"], tokenizer=tokenizer, progress=False)
