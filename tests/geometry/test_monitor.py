"""AnisotropyMonitor: bit-identical training, hook hygiene, true gradients, schedules, masks, errors, storage."""

from __future__ import annotations

import copy
import gc
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from interp_widgets.geometry import (
    AnisotropyMonitor,
    GeometryLog,
    LAYER_METRICS,
    TangentProxy,
    gradient_alignment,
    normal_controls,
    representation_metrics,
)
from interp_widgets.geometry._kernels.bundles import LINEAR_FAST_TOL
from tests.conftest import model_fingerprint

CONTRACT_METRICS = [
    "proxy_energy",
    "control_energy_mean",
    "control_energy_q05",
    "control_energy_q95",
    "energy_ratio",
    "control_ratio_q05",
    "control_ratio_q95",
    "enrichment",
    "z_score",
    "p_value",
    "isoscore_star_G",
    "delta_isoscore_proxy",
    "delta_isoscore_control_mean",
    "delta_isoscore_control_q05",
    "delta_isoscore_control_q95",
    "anisotropy_share",
    "avg_cosine",
    "isoscore",
    "effective_rank",
]


# ------------------------------------------------------------------------------------------------ helpers
def _lm_batches(vocab: int, n: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (3, 8), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0
        mask[2, 3:] = 0
        labels = ids.masked_fill(mask == 0, -100)
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return batches


def _train(model, batches, monitor_kwargs=None, seed=123):
    """Train a copy of ``model`` in train mode (dropout on); returns (losses, params, monitor)."""
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    monitor = None
    if monitor_kwargs is not None:
        monitor = AnisotropyMonitor(model, optimizer=optimizer, **monitor_kwargs)
        monitor.__enter__()
    torch.manual_seed(seed)
    losses = []
    try:
        for batch in batches:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    finally:
        if monitor is not None:
            monitor.__exit__(None, None, None)
    return losses, [p.detach().clone() for p in model.parameters()], monitor


class Planted(nn.Module):
    """h = W x (W = I at init, the monitored layer "lin"); loss = ½‖h S‖² + ⟨h, noise⟩·eps.

    dL/dh = (h S) Sᵀ + eps·noise: concentrated in span(S) when the activations are large along S.
    """

    def __init__(self, d: int, S: torch.Tensor, eps: float):
        super().__init__()
        self.lin = nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(torch.eye(d))
        self.S, self.eps = S, eps

    def forward(self, x, noise):
        h = self.lin(x)
        return 0.5 * (h @ self.S).pow(2).sum() + self.eps * (h * noise).sum()


# ------------------------------------------------------------------------------------------------ training unchanged
def test_gpt2_losses_and_parameters_bit_identical_with_monitor(gpt2_lm):
    model, tokenizer = gpt2_lm
    before = model_fingerprint(model, tokenizer)
    batches = _lm_batches(len(tokenizer), 50)
    plain_losses, plain_params, _ = _train(model, batches)
    kwargs = dict(layers=["layer:1"], rank=4, n_controls=20, total_steps=50, max_tokens=20)
    losses, params, monitor = _train(model, batches, kwargs)
    assert losses == plain_losses  # exact float equality, 50 momentum-SGD steps with dropout on
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))
    assert len(monitor) == 50 and np.isfinite(monitor.series("energy_ratio|layer:1")[1][-1])
    assert model_fingerprint(model, tokenizer) == before


def test_bert_classifier_losses_bit_identical_with_monitor(bert_classifier):
    model, tokenizer = bert_classifier
    enc = tokenizer(["a good film", "dull and far too long to watch", "fine", "bad"], padding=True, return_tensors="pt")
    batches = [dict(enc, labels=torch.tensor([2, 0, 1, 0]))] * 4
    plain_losses, plain_params, _ = _train(model, batches)
    # layer:0 only: without [CLS], the last layer of a classifier gets exactly zero gradient (the pooler reads [CLS])
    kwargs = dict(
        layers=["layer:0"],
        rank=4,
        fit="refit",
        refit_every=2,
        n_controls=5,
        special_token_ids=tokenizer.all_special_ids,
    )
    losses, params, monitor = _train(model, batches, kwargs)
    assert losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))
    content = int(sum(t not in tokenizer.all_special_ids for t in enc["input_ids"].flatten().tolist()))
    assert monitor.series("n_tokens|layer:0")[1].tolist() == [content] * 4


# ------------------------------------------------------------------------------------------------ hook hygiene
def _hooks(model, optimizer):
    return model_fingerprint(model, _FakeTok())["hooks"], len(optimizer._optimizer_step_pre_hooks)


class _FakeTok:
    vocab_size = 0

    def __len__(self):
        return 0


@pytest.mark.parametrize("error", [None, RuntimeError, KeyboardInterrupt])
def test_no_hooks_left_and_modes_kept_after_exit_error_and_ctrl_c(gpt2_lm, error):
    model, tokenizer = gpt2_lm
    model = copy.deepcopy(model)
    model.transformer.h[0].train()  # a mixed mode the monitor must leave as it is
    modes = [m.training for m in model.modules()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    hooks_before = _hooks(model, optimizer)
    monitor = AnisotropyMonitor(model, ["layer:0", "layer:1"], rank=4, total_steps=4, optimizer=optimizer, n_controls=3)
    flushed = []
    monitor.on_flush(lambda: flushed.append(True))
    batch = _lm_batches(len(tokenizer), 1)[0]
    with pytest.raises(error) if error else _nothing():
        with monitor:
            assert _hooks(model, optimizer) != hooks_before
            out = model(**batch)
            # interrupted between forward and backward: tensor hooks exist on the graph
            if error is not None:
                raise error("stop")
            out.loss.backward()
    assert _hooks(model, optimizer) == hooks_before
    assert [m.training for m in model.modules()] == modes
    assert flushed == [True]
    assert not monitor._capture.tensor_handles
    # the graph built inside the block still back-propagates without touching the monitor
    if error is not None:
        out.loss.backward()
        assert len(monitor) == 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ------------------------------------------------------------------------------------------------ true gradients
def test_recorded_energy_equals_direct_computation_on_true_gradients(gpt2_lm):
    model, tokenizer = gpt2_lm
    model = copy.deepcopy(model)
    d = model.config.n_embd
    basis = torch.linalg.qr(torch.randn(d, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)).Q
    monitor = AnisotropyMonitor(model, ["layer:0"], fit="fixed", basis=basis, n_controls=7, seed=3)
    batch = _lm_batches(len(tokenizer), 1)[0]
    with monitor:
        out = model(**batch, output_hidden_states=True)
        hidden = out.hidden_states[1]  # output of block 0 (the last entry would be after ln_f)
        (grad,) = torch.autograd.grad(out.loss, hidden, retain_graph=True)
        out.loss.backward()
        monitor.step()
    keep = batch["attention_mask"].reshape(-1).bool()
    G = grad.reshape(-1, d)[keep]
    H = hidden.detach().reshape(-1, d)[keep]
    proxy = TangentProxy.from_basis(basis)
    expected = gradient_alignment(G, proxy, normal_controls(proxy, 7, seed=3))
    row = {metric: monitor.series(f"{metric}|layer:0")[1][0] for metric in LAYER_METRICS}
    assert row["n_tokens"] == keep.sum()
    # the monitor's fast kernels (float32 Gram over 256-row blocks, float32 eigensolver) are within their tested
    # bounds (tests/geometry/test_fast_kernels.py), not bit-equal to the float64 reference
    assert row["proxy_energy"] == pytest.approx(expected.energy_proxy, rel=1e-6)
    assert row["energy_ratio"] == pytest.approx(expected.ratio, rel=1e-6)
    assert row["p_value"] == expected.p_value
    assert row["z_score"] == pytest.approx(expected.z_analytic, rel=1e-6)
    assert row["isoscore_star_G"] == pytest.approx(expected.iso_G, rel=1e-6)
    assert row["delta_isoscore_control_mean"] == pytest.approx(float(expected.delta_iso_controls.mean()), rel=1e-6)
    assert row["control_ratio_q95"] == pytest.approx(
        float(np.quantile(expected.energy_controls.numpy(), 0.95) / expected.energy_controls.mean()), rel=1e-6
    )
    reference = representation_metrics(H)
    assert row["avg_cosine"] == pytest.approx(reference["avg_cosine"], rel=1e-9)
    assert row["effective_rank"] == pytest.approx(reference["effective_rank_singular"], rel=2e-4)
    assert monitor.series("loss")[1][0] == pytest.approx(out.loss.item())
    np.testing.assert_allclose(
        monitor.raw("control_energy|layer:0")[0], expected.energy_controls.numpy(), rtol=1e-6
    )  # fast kernels: within their bounds


def test_weight_mode_uses_linear_weight_gradient_rows_and_input_activations(gpt2_lm):
    model, tokenizer = gpt2_lm
    model = copy.deepcopy(model)
    d = model.config.n_embd
    basis = torch.eye(d, dtype=torch.float64)[:, :3]
    layer = "transformer.h.1.mlp.c_fc"  # transformers Conv1D: weight is (in, out)
    monitor = AnisotropyMonitor(model, [layer], gradient="weight", fit="fixed", basis=basis, n_controls=4)
    with monitor:
        model(**_lm_batches(len(tokenizer), 1)[0]).loss.backward()
        monitor.step()
    G = model.transformer.h[1].mlp.c_fc.weight.grad.T  # rows live in the input space
    proxy = TangentProxy.from_basis(basis)
    expected = gradient_alignment(G, proxy, normal_controls(proxy, 4))
    assert monitor.series(f"proxy_energy|{layer}")[1][0] == pytest.approx(expected.energy_proxy, rel=1e-6)
    assert monitor.series(f"n_tokens|{layer}")[1][0] == G.shape[0]


def test_gradient_accumulation_equals_one_large_batch():
    d = 12
    S = torch.eye(d)[:, :2]
    x = torch.randn(40, d, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(40, d, generator=torch.Generator().manual_seed(1))

    def run(chunks):
        model = Planted(d, S, eps=0.3)
        monitor = AnisotropyMonitor(
            model, ["lin"], rank=2, fit="refit", refit_every=1, n_controls=5, representation=False
        )
        with monitor:
            for _ in range(2):
                for xs, ns in zip(x.chunk(chunks), noise.chunk(chunks)):
                    (model(xs, ns) / chunks).backward()
                monitor.step()
        return {name: monitor.series(name)[1][1] for name in monitor.series_names() if name != "monitor_ms"}

    one, two = run(1), run(2)
    assert one.keys() == two.keys()
    for name in one:
        assert one[name] == pytest.approx(two[name], rel=1e-9, nan_ok=True), name


# ------------------------------------------------------------------------------------------------ planted / isotropic
def test_planted_subspace_gives_large_ratio_and_minimum_p_value():
    d, k = 32, 4
    g = torch.Generator().manual_seed(0)
    S = torch.linalg.qr(torch.randn(d, k, generator=g)).Q
    model = Planted(d, S, eps=0.05)
    monitor = AnisotropyMonitor(model, ["lin"], rank=k, total_steps=10, n_controls=20)
    with monitor:
        for _ in range(10):
            x = torch.randn(256, d, generator=g) + 10 * torch.randn(256, k, generator=g) @ S.T
            model(x, torch.randn(256, d, generator=g)).backward()
            monitor.step()
    ratio = monitor.series("energy_ratio|lin")[1]
    p = monitor.series("p_value|lin")[1]
    assert np.isnan(ratio[:3]).all()  # fit window: first 30 % of 10 steps, no proxy yet
    assert (ratio[3:] > 10).all() and (p[3:] == 1 / 21).all()
    assert (
        monitor.series("delta_isoscore_proxy|lin")[1][3:] > monitor.series("delta_isoscore_control_q95|lin")[1][3:]
    ).all()
    # the fitted proxy is the planted subspace
    cosines = torch.linalg.svdvals(monitor.proxies["lin"].T @ S.double())
    assert float(cosines.min()) > 0.99


def test_isotropic_gradients_give_ratio_near_one():
    d = 32
    g = torch.Generator().manual_seed(5)
    model = Planted(d, torch.zeros(d, 1), eps=1.0)  # dL/dh = noise: isotropic
    monitor = AnisotropyMonitor(model, ["lin"], rank=4, total_steps=20, n_controls=20, representation=False)
    with monitor:
        for _ in range(20):
            model(
                torch.randn(512, d, generator=g) * torch.linspace(1, 3, d), torch.randn(512, d, generator=g)
            ).backward()
            monitor.step()
    ratio = monitor.series("energy_ratio|lin")[1][6:]
    assert 0.8 < float(np.mean(ratio)) < 1.2
    assert float(np.mean(monitor.series("p_value|lin")[1][6:])) > 0.2


# ------------------------------------------------------------------------------------------------ schedules, cadence
def test_early_window_fitting_series_and_frozen_proxy():
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, total_steps=10, fit_fraction=0.5, n_controls=3)
    g = torch.Generator().manual_seed(0)
    with monitor:
        for step in range(10):
            model(torch.randn(32, d, generator=g), torch.randn(32, d, generator=g)).backward()
            monitor.step()
            if step == 5:
                frozen = monitor.proxies["lin"].clone()
    assert monitor.series("fitting")[1].tolist() == [1.0] * 5 + [0.0] * 5
    assert torch.equal(monitor.proxies["lin"], frozen)
    assert monitor.meta["fit_window"] == [0, 5]


@pytest.mark.parametrize("spectrum_every", [1, 2])
def test_representation_metrics_in_and_after_the_fit_window_equal_the_direct_computation(spectrum_every):
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)  # never stepped: the layer output is its input
    monitor = AnisotropyMonitor(
        model, ["lin"], rank=2, total_steps=5, fit_fraction=0.4, n_controls=3, spectrum_every=spectrum_every
    )
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(40, d, generator=g) * torch.linspace(0.5, 2.0, d) + 1.0 for _ in range(5)]
    with monitor:
        for x in inputs:
            model(x, torch.randn(40, d, generator=g)).backward()
            monitor.step()
    assert monitor.series("fitting")[1].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # window steps share the fit's Gram
    for step, x in enumerate(inputs):
        reference = representation_metrics(x)
        for metric in ("avg_cosine", "avg_cosine_centered", "drift_share"):  # O(nd): every measurement
            # float64 on spectrum steps; else float32 passes whose proven bound is at most LINEAR_FAST_TOL
            tolerance = 1e-12 if step % spectrum_every == 0 else LINEAR_FAST_TOL
            assert monitor.series(f"{metric}|lin")[1][step] == pytest.approx(
                reference[metric], rel=1e-12, abs=tolerance
            ), metric
        for metric in (
            "isoscore",
            "effective_rank_eigen",
            "stable_rank",
            "participation_ratio",
            "top1_explained_variance",
        ):  # Gram + eigensolve: every spectrum_every-th measurement
            recorded = monitor.series(f"{metric}|lin")[1][step]
            if step % spectrum_every == 0:
                # after the window the Gram and eigensolve are the fast (float32, bounded-error) kernels
                assert recorded == pytest.approx(reference[metric], rel=1e-5), (metric, step)
            else:
                assert np.isnan(recorded), (metric, step)
    frame = monitor.to_dataframe()
    assert len(frame[frame.metric == "isoscore"]) == len(range(0, 5, spectrum_every))  # NaN rows are not rows


def test_every_measures_only_matching_steps_and_track_sets_step_numbers():
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, every=3, fit="refit", refit_every=3, n_controls=3)
    g = torch.Generator().manual_seed(0)
    with monitor:
        for step in range(10, 20):
            monitor.track(step)
            model(torch.randn(16, d, generator=g), torch.randn(16, d, generator=g)).backward()
            monitor.log(step, lr=0.1 * step)
    assert monitor.series("n_tokens|lin")[0][~np.isnan(monitor.series("n_tokens|lin")[1])].tolist() == [12, 15, 18]
    assert monitor.series("lr")[1] == pytest.approx([0.1 * s for s in range(10, 20)])


def test_nonfinite_gradients_are_flagged_rows_not_crashes():
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=1.0)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, fit="fixed", basis=torch.eye(d)[:, :2], n_controls=3)
    x = torch.randn(16, d)
    bad = torch.randn(16, d)
    bad[3, 2] = math.nan
    with monitor:
        model(x, torch.randn(16, d)).backward()
        monitor.step()
        with pytest.warns(RuntimeWarning, match="non-finite"):
            model(x, bad).backward()
            monitor.step()
        model(x, torch.randn(16, d)).backward()
        monitor.step()
    assert monitor.series("nonfinite|lin")[1].tolist() == [0.0, 1.0, 0.0]
    ratio = monitor.series("energy_ratio|lin")[1]
    assert np.isfinite(ratio[0]) and np.isnan(ratio[1]) and np.isfinite(ratio[2])


def test_custom_concept_estimator_proxy_is_orthonormalised():
    from sklearn.decomposition import FastICA

    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    estimator = FastICA(n_components=2, random_state=0, max_iter=400)
    monitor = AnisotropyMonitor(
        model, ["lin"], rank=2, total_steps=4, proxy_method=estimator, n_controls=3, representation=False
    )
    g = torch.Generator().manual_seed(0)
    with monitor, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            x = torch.randn(64, d, generator=g) * torch.tensor([5.0, 3.0] + [0.3] * (d - 2))
            model(x, torch.randn(64, d, generator=g)).backward()
            monitor.step()
    Q = monitor.proxies["lin"]
    assert torch.allclose(Q.T @ Q, torch.eye(2, dtype=Q.dtype), atol=1e-10)
    assert float(torch.linalg.svdvals(Q[:2]).min()) > 0.9  # ICA of the two loud axes spans them
    assert monitor.meta["proxy_method"] == "FastICA"


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_input_errors(gpt2_lm):
    model, tokenizer = gpt2_lm
    with pytest.raises(ValueError, match=r"layer index 9 is out of range.*layer:0\.\.layer:1"):
        AnisotropyMonitor(model, ["layer:9"], total_steps=5)
    with pytest.raises(ValueError, match=r"unknown layer 'transformer.nope'.*layer_names\(model\)"):
        AnisotropyMonitor(model, ["transformer.nope"], total_steps=5)
    with pytest.raises(ValueError, match="rank must be <= 16 at layer 'layer:0', got 32: d = 32"):
        AnisotropyMonitor(model, ["layer:0"], rank=32, total_steps=5)
    with pytest.raises(ValueError, match="n_controls must be an integer >= 1"):
        AnisotropyMonitor(model, ["layer:0"], rank=4, n_controls=0, total_steps=5)
    with pytest.raises(ValueError, match="spectrum_every must be an integer >= 1, got 0"):
        AnisotropyMonitor(model, ["layer:0"], rank=4, spectrum_every=0, total_steps=5)
    with pytest.raises(ValueError, match="needs refit_every="):
        AnisotropyMonitor(model, ["layer:0"], rank=4, fit="refit")
    with pytest.raises(ValueError, match="total_steps do\\(es\\) not apply to fit='refit'"):
        AnisotropyMonitor(model, ["layer:0"], rank=4, fit="refit", refit_every=2, total_steps=5)
    with pytest.raises(ValueError, match="needs nn.Linear"):
        AnisotropyMonitor(model, ["layer:0"], gradient="weight", total_steps=5)
    with pytest.raises(ValueError, match=r"zeta must be a number in \[0, 1\]"):
        AnisotropyMonitor(model, ["layer:0"], rank=4, total_steps=5, zeta=1.5)
    with pytest.raises(ValueError, match="coordinates must be 'full' or 'complement'"):
        AnisotropyMonitor(model, ["layer:0"], rank=4, total_steps=5, coordinates="reduced")
    model = copy.deepcopy(model)
    batch = _lm_batches(len(tokenizer), 1)[0]
    monitor = AnisotropyMonitor(model, ["layer:1"], rank=4, total_steps=5)
    with monitor:
        model(**batch)
        with pytest.raises(RuntimeError, match=r"call loss.backward\(\) before"):
            monitor.step()
    with monitor:
        with pytest.raises(RuntimeError, match="no forward pass was captured"):
            monitor.step()
    monitor = AnisotropyMonitor(model, ["layer:0"], rank=4)
    with monitor:
        model(**batch).loss.backward()
        with pytest.raises(ValueError, match="needs total_steps="):
            monitor.step()
    for p in (
        list(model.transformer.wte.parameters())
        + list(model.transformer.wpe.parameters())
        + list(model.transformer.h[0].parameters())
    ):
        p.requires_grad_(False)
    monitor = AnisotropyMonitor(model, ["layer:0"], rank=4, total_steps=5)
    with monitor:
        model(**batch).loss.backward()
        with pytest.raises(ValueError, match="frozen at that layer"):
            monitor.step()


def test_mask_of_the_wrong_shape_is_a_clear_error(gpt2_lm):
    model, tokenizer = gpt2_lm
    monitor = AnisotropyMonitor(copy.deepcopy(model), ["layer:0"], rank=4, total_steps=5)
    batch = _lm_batches(len(tokenizer), 1)[0]
    with monitor, pytest.raises(ValueError, match=r"attention_mask has shape \(4, 3\)"):
        monitor.track(0, attention_mask=torch.ones(4, 3))
        monitor.model(**batch)


# ------------------------------------------------------------------------------------------------ subscriptions, storage
def test_subscribers_get_flat_contract_names_once_per_step(tmp_path):
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, total_steps=4, n_controls=3)
    calls = []
    stop = monitor.subscribe(lambda step, values: calls.append((step, values)))
    g = torch.Generator().manual_seed(0)
    with monitor:
        for step in range(4):
            monitor.track(step)
            model(torch.randn(16, d, generator=g), torch.randn(16, d, generator=g)).backward()
            monitor.log(step, lr=0.5, accuracy=0.25 * step)
            monitor.step(loss=1.0 / (step + 1))
            if step == 2:
                stop()
    assert [step for step, _ in calls] == [0, 1, 2]
    for step, values in calls:
        assert {"loss", "fitting", "lr", "accuracy"} <= values.keys()
        assert {f"{m}|lin" for m in CONTRACT_METRICS} <= values.keys()
        assert all(isinstance(v, float) for v in values.values())
    assert math.isnan(calls[0][1]["energy_ratio|lin"]) and calls[0][1]["fitting"] == 1.0
    assert calls[2][1]["loss"] == pytest.approx(1 / 3) and math.isfinite(calls[2][1]["energy_ratio|lin"])
    assert monitor.layers == ["lin"] and monitor.x_label == "step"
    assert {"loss", "fitting", "lr", "energy_ratio|lin"} <= set(monitor.series_names())

    saved = monitor.save(tmp_path / "run")
    loaded = GeometryLog.load(saved)
    assert loaded.to_dataframe().equals(monitor.to_dataframe())
    assert torch.equal(loaded.proxies["lin"], monitor.proxies["lin"])
    np.testing.assert_array_equal(loaded.raw("control_energy|lin"), monitor.raw("control_energy|lin"))
    assert loaded.meta["fit_window"] == [0, 2] and loaded.layers == ["lin"]
    assert not list(tmp_path.glob("**/*.pkl")) and not list(tmp_path.glob("**/*.pt"))
    chart = monitor.chart("energy_ratio")
    assert chart.to_dict()["layer"][0]["mark"]["type"] == "rect"  # the fit window is shaded


def test_memory_stays_flat_over_1000_monitored_steps():
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(
        model, ["lin"], rank=2, fit="fixed", basis=torch.eye(d)[:, :2], n_controls=3, representation=False, max_rows=256
    )
    g = torch.Generator().manual_seed(0)

    def live_tensors():
        gc.collect()
        return sum(isinstance(o, torch.Tensor) for o in gc.get_objects())

    counts = {}
    with monitor:
        for step in range(1000):
            model(torch.randn(8, d, generator=g), torch.randn(8, d, generator=g)).backward()
            model.zero_grad()
            monitor.step()
            if step in (299, 999):
                counts[step] = (live_tensors(), monitor.history.nbytes)
    assert counts[999] == counts[299]
    assert len(monitor) <= 256 and monitor.steps[0] == 0 and monitor.steps[-1] == 996
    assert set(np.diff(monitor.steps).tolist()) == {4}  # thinned evenly over the run, not truncated


def test_geometry_log_rows_merge_and_order():
    log = GeometryLog(["a"])
    log.log(0, x=1.0)
    log.log(2, x=2.0)
    log.log(0, y=5.0)  # merges into the existing row
    assert log.series("y")[1].tolist()[0] == 5.0 and len(log) == 2
    with pytest.raises(ValueError, match="no row to merge"):
        log.log(1, x=0.0)
    with pytest.raises(ValueError, match="without '\\|'"):
        log.log(3, **{"a|b": 1.0})


def test_max_tokens_subsamples_the_same_rows_for_every_layer_within_budget(gpt2_lm):
    model, tokenizer = gpt2_lm
    model = copy.deepcopy(model)
    monitor = AnisotropyMonitor(
        model, ["layer:0", "layer:1"], rank=2, fit="refit", refit_every=5, n_controls=3, max_tokens=7, seed=4
    )
    batches = _lm_batches(len(tokenizer), 2)
    with monitor:
        for batch in batches:  # two micro-batches in one step: the budget spans them
            model(**batch).loss.backward()
        rows = {spec: torch.cat(list(monitor._capture.H[spec].values())) for spec in monitor.layers}
        monitor.step()
    assert monitor.series("n_tokens|layer:0")[1][0] == monitor.series("n_tokens|layer:1")[1][0] == 7
    # layer:0's kept rows are real tokens of the first micro-batch, picked the same way for layer:1
    with torch.no_grad():
        hidden = model(**batches[0], output_hidden_states=True).hidden_states
    keep = batches[0]["attention_mask"].reshape(-1).bool()
    real0 = hidden[1].reshape(-1, hidden[1].shape[-1])[keep]
    matches = (rows["layer:0"][:, None, :] == real0[None]).all(-1).any(1)
    assert bool(matches.all())


def test_monitor_widget_is_cached_and_receives_the_rows():
    d = 8
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, total_steps=3, n_controls=3, representation=False)
    widget = monitor.widget()
    assert monitor.widget() is widget
    g = torch.Generator().manual_seed(0)
    with monitor:
        for _ in range(3):
            model(torch.randn(16, d, generator=g), torch.randn(16, d, generator=g)).backward()
            monitor.step()
    steps, columns = widget.history()  # flushed on exit
    assert steps.tolist() == [0, 1, 2]
    np.testing.assert_allclose(columns["energy_ratio|lin"], monitor.series("energy_ratio|lin")[1], rtol=1e-6)
    data, _ = monitor._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id


def test_bf16_autocast_rows_are_upcast_and_measured():
    d = 16
    model = Planted(d, torch.eye(d)[:, :2], eps=0.1)
    monitor = AnisotropyMonitor(model, ["lin"], rank=2, fit="fixed", basis=torch.eye(d)[:, :2], n_controls=4)
    x, noise = torch.randn(64, d) * 3, torch.randn(64, d)
    with monitor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, noise)
        loss.backward()
        rows = torch.cat(list(monitor._capture.G["lin"].values()))
        monitor.step()
    assert rows.dtype == torch.float32
    # the proxy holds most of the energy (the planted head reads span(e1, e2)), measured on upcast bf16 gradients
    assert monitor.series("proxy_energy|lin")[1][0] > 0.5
    assert monitor.series("nonfinite|lin")[1][0] == 0.0


def test_the_unreleased_geometry_monitor_alias_is_gone():
    import interp_widgets.geometry as geometry

    with pytest.raises(ImportError):
        from interp_widgets.geometry import GeometryMonitor  # noqa: F401
    assert not hasattr(geometry, "GeometryMonitor")


def test_a_degenerate_layer_in_a_batched_step_is_recorded_alone():
    """The layers' alignments are computed as one batch; an all-zero gradient at one layer makes that layer NaN
    with a warning naming it, and the other layer is measured as usual."""

    class TwoBranches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x).pow(2).mean() + 0.0 * self.b(x).sum()  # b's output gets an all-zero gradient

    torch.manual_seed(0)
    net = TwoBranches()
    monitor = AnisotropyMonitor(net, ["a", "b"], rank=2, fit="fixed", basis=torch.eye(8)[:, :2], n_controls=3)
    with monitor, pytest.warns(RuntimeWarning, match=r"layer 'b': G is all zeros") as caught:
        net(torch.randn(32, 8)).backward()
        monitor.step()
    assert not any("layer 'a'" in str(w.message) for w in caught)
    assert np.isfinite(monitor.series("energy_ratio|a")[1][0]) and np.isnan(monitor.series("energy_ratio|b")[1][0])
    assert np.isfinite(monitor.series("avg_cosine|a")[1][0]) and np.isnan(monitor.series("avg_cosine|b")[1][0])
