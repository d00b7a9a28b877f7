"""Bounded-memory activation collection at scale, and concept-model fit time / error at 20, 50 and 100 concepts.

Run: ``python benchmarks/concepts.py [--tokens 1000000] [--budget 256MB] [--fit-rows 20000]`` from the repository
root. Prints ``bench:`` lines (with goals) and ``info:`` lines (measurements without a goal).

Setting: the demo classifier (all-MiniLM-L6-v2 fine-tuned, width 384; set ``INTERP_WIDGETS_CACHE`` to reuse a
cached copy), layer 3, on the demo corpus repeated until ``--tokens`` tokens (special tokens excluded). Rows above
the memory budget stream to a temporary directory as ``.npy`` chunks. Peak RSS is the process high-water mark
(``ru_maxrss``) and includes Python, torch and the model. After collection the whole store is streamed once more
(per-feature mean) to show that reading back is bounded too.

Then NMF (shift policy) and a TopK sparse autoencoder are fitted on ``--fit-rows`` random rows of the store at 20, 50
and 100 concepts with ``--fit-threads`` torch threads (default 1: on a shared 2-core machine, a second OpenMP thread
made SAE steps on these small matrices about 5× slower), reporting fit time and relative reconstruction error on
those rows. Interpreto's NMFConcepts and
TopK SAE are not compared here: Interpreto is not installed in this environment (its Linux dependencies include
CUDA wheels and bitsandbytes), so no numbers are claimed for it.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp_widgets import demo  # noqa: E402
from interp_widgets.concepts import NMFConcepts, SparseAutoencoder, collect_activations, evaluate  # noqa: E402


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench(name: str, value: float, op: str, target: float) -> None:
    print(f"bench: {name} = {value:.4g} (goal {op} {target:g})", flush=True)


def info(name: str, value) -> None:
    print(f"info: {name} = {value}", flush=True)


def corpus_for(tokens: int, tokenizer) -> list[str]:
    """The demo corpus repeated until it holds at least ``tokens`` non-special tokens."""
    texts = demo.corpus()
    per_pass = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    repeats = math.ceil(tokens / per_pass)
    return texts * repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--budget", default="256MB")
    parser.add_argument("--fit-rows", type=int, default=20_000)
    parser.add_argument("--skip-fit", action="store_true")
    parser.add_argument("--fit-threads", type=int, default=1,
                        help="torch threads for the fits (small matrices; extra threads only spin on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    model, tokenizer = demo.load_classifier(progress=False)
    texts = corpus_for(args.tokens, tokenizer)
    info("texts", len(texts))
    info("rss_before_collection_mb", f"{peak_rss_mb():.0f}")
    start = time.perf_counter()
    store = collect_activations(model, tokenizer, texts, layer="layer:3", memory_budget=args.budget,
                                max_batch_tokens=8192, progress=False)
    seconds = time.perf_counter() - start
    bench("concepts_collect_peak_rss_mb", peak_rss_mb(), "<=", 2000)
    info("store", repr(store))
    info("collect_seconds", f"{seconds:.1f}")
    bench("concepts_collected_tokens", len(store), ">=", args.tokens)
    bench("concepts_collected_width", store.dim, "==", 384)
    info("collect_tokens_per_second", f"{len(store) / seconds:.0f}")
    info("store_gb", f"{store.nbytes / 1e9:.2f}")
    total = np.zeros(store.dim)
    for _, block in store.iter_chunks():
        total += block.sum(0, dtype=np.float64)
    info("stream_read_mean_norm", f"{np.linalg.norm(total / len(store)):.4f}")
    bench("concepts_collect_and_read_peak_rss_mb", peak_rss_mb(), "<=", 2000)

    if args.skip_fit:
        return
    torch.set_num_threads(args.fit_threads)
    rows = store.sample(args.fit_rows, seed=0)
    for n in (20, 50, 100):
        start = time.perf_counter()
        nmf = NMFConcepts(n, nonnegative="shift", init="nndsvda", max_iter=200, random_state=0).fit(rows)
        nmf_seconds = time.perf_counter() - start
        nmf_error = evaluate(nmf, rows)["relative_reconstruction_error"]
        start = time.perf_counter()
        sae = SparseAutoencoder(n, activation="topk", k=max(1, n // 10), max_epochs=20, batch_size=1024,
                                lr=1e-3, progress=False).fit(rows)
        sae_seconds = time.perf_counter() - start
        sae_error = evaluate(sae, rows)["relative_reconstruction_error"]
        info(f"nmf{n}_fit_seconds", f"{nmf_seconds:.2f}")
        info(f"nmf{n}_relative_error", f"{nmf_error:.4f}")
        info(f"topk_sae{n}_fit_seconds", f"{sae_seconds:.2f} ({sae.fit_info_['epochs']} epochs)")
        info(f"topk_sae{n}_relative_error", f"{sae_error:.4f}")
    bench("concepts_fit_peak_rss_mb", peak_rss_mb(), "<=", 2000)


if __name__ == "__main__":
    main()
