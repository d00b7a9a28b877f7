"""The anisotropy paper (arXiv 2604.08764) on a real pretrained decoder: continue training a causal LM on the shipped
text corpus under the live monitor, save checkpoints, replay them, and summarise every layer early and late.

Used by ``benchmarks/paper.py`` (SmolLM2-135M, the long run) and notebook 06 (a short run). The weights of
:func:`~interp_widgets.demo.load_lm` are a dequantised Q4_1 copy of SmolLM2-135M-Instruct, not the original
bf16 release: continuing training starts from quantisation-rounded weights.

Example (the tiny GPT-2 of the doctest namespace, 4 steps, a checkpoint every 2):
    >>> import copy, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     run = continue_training(copy.deepcopy(lm), lm_tokenizer, steps=4, layers=["layer:0", "layer:1"],
    ...                             config=MonitorConfig(rank=2, n_controls=3), checkpoint_every=2, length=16, directory=tmp, progress=False)
    >>> run["checkpoint_steps"], run["replay"].steps.tolist()
    ([0, 2, 4], [0, 1, 2])
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import torch

from interp_widgets.demo.text_corpus import load_text_corpus
from interp_widgets.geometry import AnisotropyMonitor, MonitorConfig, replay

__all__ = ["continue_training", "corpus_batches", "phase_summary"]


def corpus_batches(
    tokenizer, n_batches: int, *, batch_size: int = 4, length: int = 128, split: str = "train", offset: int = 0
) -> list[dict[str, torch.Tensor]]:
    """Disjoint ``batch_size × length`` causal-LM batches of the corpus's documents, in order: every token is seen
    once (no repetition, so a run measures learning, not memorisation). ``offset`` skips that many batches.

    Example:
        >>> batches = corpus_batches(lm_tokenizer, 3, batch_size=2, length=8)
        >>> len(batches), tuple(batches[0]["input_ids"].shape), bool((batches[0]["input_ids"] != batches[1]["input_ids"]).any())
        (3, (2, 8), True)
    """
    need = (n_batches + offset) * batch_size * length
    ids: list[int] = []
    for document in load_text_corpus(split, unit="document"):
        ids.extend(tokenizer(document)["input_ids"])
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise ValueError(
            f"the corpus's {split!r} split has {len(ids)} tokens, fewer than the {need} that {n_batches} "
            f"batches of {batch_size} × {length} need; use fewer steps or shorter batches"
        )
    rows = torch.tensor(ids[:need]).reshape(-1, length)
    batches = []
    for index in range(offset, offset + n_batches):
        chunk = rows[index * batch_size : (index + 1) * batch_size]
        batches.append({"input_ids": chunk, "attention_mask": torch.ones_like(chunk), "labels": chunk.clone()})
    return batches


def continue_training(
    model,
    tokenizer,
    *,
    steps: int,
    layers,
    config: MonitorConfig | None = None,
    checkpoint_every: int = 50,
    batch_size: int = 4,
    length: int = 128,
    lr: float = 3e-5,
    directory,
    probe_batches: int = 2,
    progress: bool = True,
) -> dict:
    """Train ``model`` (in place, AdamW) for ``steps`` steps on fresh corpus text under the live monitor
    (``fit="early"``), saving a checkpoint (safetensors state dict in ``directory``) at step 0 and every
    ``checkpoint_every`` steps, then :func:`~interp_widgets.geometry.monitor.replay` those checkpoints on a held-out probe
    (``probe_batches`` batches of the corpus's test split). ``config`` holds the monitor's settings (its defaults
    when None), for the live run and the replay alike.

    Returns ``{"monitor", "replay", "losses", "checkpoint_steps", "checkpoints"}``.

    Example:
        >>> import copy, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     run = continue_training(copy.deepcopy(lm), lm_tokenizer, steps=2, layers=["layer:1"],
        ...                             config=MonitorConfig(rank=2, n_controls=3), checkpoint_every=1, length=16, directory=tmp, progress=False)
        >>> len(run["losses"]), run["monitor"].meta["fit_window"]
        (2, [0, 1])
    """
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    batches = corpus_batches(tokenizer, steps, batch_size=batch_size, length=length)
    probe = corpus_batches(tokenizer, probe_batches, batch_size=batch_size, length=length, split="test")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    monitor = AnisotropyMonitor(model, layers, config, fit="early", total_steps=steps, optimizer=optimizer)
    checkpoints, checkpoint_steps, losses = [], [], []

    def save(step):
        path = directory / f"step-{step}.safetensors"
        state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
        seen, unique = set(), {}
        for key, value in state.items():  # tied weights (lm_head = embed_tokens) are stored once
            pointer = model.state_dict()[key].data_ptr()
            if pointer not in seen:
                seen.add(pointer)
                unique[key] = value
        save_file(unique, str(path))
        checkpoints.append(path)
        checkpoint_steps.append(step)

    save(0)
    with monitor:
        for step, batch in enumerate(tqdm(batches, disable=not progress, desc="training")):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            if (step + 1) % checkpoint_every == 0:
                save(step + 1)
    model.eval()
    record = replay(checkpoints, None, layers, model=model, batches=probe, config=config, progress=progress)
    return {
        "monitor": monitor,
        "replay": record,
        "losses": losses,
        "checkpoint_steps": checkpoint_steps,
        "checkpoints": checkpoints,
    }


#: The representation metrics :func:`phase_summary` reports next to the alignment.
SUMMARY_REPRESENTATION = ("avg_cosine", "isoscore", "effective_rank", "top1_explained_variance")


def phase_summary(record, layers, *, rows: int = 5):
    """Per layer, early (the first ``rows`` measurements after the fit window) and late (the last ``rows``):
    medians of the energy ratio, its p-value, ΔIsoScore* of the proxy and of the controls' mean with their
    5–95 % band, and the representation metrics. Works on a monitor or a replay record.

    Example:
        >>> import copy
        >>> net = copy.deepcopy(lm); opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> monitor = AnisotropyMonitor(net, ["layer:1"], rank=2, n_controls=3, total_steps=6, optimizer=opt)
        >>> with monitor:
        ...     for batch in corpus_batches(lm_tokenizer, 6, batch_size=2, length=16):
        ...         net(**batch).loss.backward(); opt.step(); opt.zero_grad()
        >>> phase_summary(monitor, ["layer:1"], rows=2)[["layer", "phase", "steps"]].values.tolist()
        [['layer:1', 'early', '2-3'], ['layer:1', 'late', '4-5']]
    """
    import pandas as pd

    history = getattr(record, "history", record)
    window = history.meta.get("fit_window", [0, 0])[1]
    records = []
    for layer in layers:
        steps, ratio = history.series(f"energy_ratio|{layer}")
        measured = [i for i, s in enumerate(steps) if s >= window and ratio[i] == ratio[i]]
        if not measured:
            continue
        for phase, chosen in (("early", measured[:rows]), ("late", measured[-rows:])):

            def median(metric, chosen=chosen):
                values = [v for v in history.series(f"{metric}|{layer}")[1][chosen] if v == v]
                return statistics.median(values) if values else math.nan

            row = {
                "layer": layer,
                "phase": phase,
                "steps": f"{steps[chosen[0]]}-{steps[chosen[-1]]}",
                "energy_ratio": median("energy_ratio"),
                "p_value": median("p_value"),
                "delta_iso_proxy": median("delta_isoscore_proxy"),
                "delta_iso_controls_mean": median("delta_isoscore_control_mean"),
                "delta_iso_controls_q05": median("delta_isoscore_control_q05"),
                "delta_iso_controls_q95": median("delta_isoscore_control_q95"),
            }
            row["proxy_above_band"] = bool(row["delta_iso_proxy"] > row["delta_iso_controls_q95"])
            for metric in SUMMARY_REPRESENTATION:
                row[metric] = median(metric)
            records.append(row)
    frame = pd.DataFrame(records)
    return frame.replace({np.nan: math.nan})
