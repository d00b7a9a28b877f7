"""Bounded-memory activation collection at scale, and concept-model fits against Interpreto at 20, 50 and 100 concepts.

Run: ``python -u benchmarks/concepts.py [--tokens 1000000] [--budget 256MB] [--fit-rows 20000]`` from the repository
root (``--skip-collect`` runs only the fit comparison, ``--skip-fit`` only the collection). Prints ``bench:`` lines
(with goals) and ``info:`` lines (measurements without a goal).

Collection: the demo classifier (all-MiniLM-L6-v2 fine-tuned, width 384; set ``INTERP_WIDGETS_CACHE`` to reuse a
cached copy), layer 3, on the demo corpus repeated until ``--tokens`` tokens (special tokens excluded). Rows above
the memory budget stream to a temporary directory as ``.npy`` chunks. Peak RSS is the process high-water mark
(``ru_maxrss``) and includes Python, torch and the model. After collection the whole store is streamed once more
(per-feature mean) to show that reading back is bounded too.

Fit comparison with Interpreto (``interpreto`` package, its ``NMFConcepts`` and ``TopKSAEConcepts`` around a
``ModelWithSplitPoints`` built on the same classifier at ``bert.encoder.layer.3``):

- Same activations: ``--fit-rows`` token rows collected by our ``collect_activations`` at ``layer:3``; both libraries
  fit that one matrix. A check first runs Interpreto's own ``get_activations`` (TOKEN granularity) on a few texts
  and compares it with ours (``concepts_interpreto_activation_max_abs_diff``).
- Same threads: ``--fit-threads`` torch and BLAS threads (threadpoolctl) for both (default 1: on a shared 2-core
  machine a second thread mostly spins on these small matrices).
- NMF: hidden states are signed and Interpreto's NMF only offers ReLU (``force_relu``), which discards the negative
  part. Both libraries therefore factorise the same non-negative matrix ``X − min(X)`` (per-feature minimum; our
  ``nonnegative="shift"`` policy, done by hand for Interpreto) and the minimum is added back when decoding. Ours
  wraps scikit-learn's coordinate-descent NMF, Interpreto uses its default HALS solver; both start from NNDSVDa.
  Interpreto runs up to ``--nmf-iter`` iterations (its default 500) with its default tolerance 1e-4. The goal is time to equal error: ours, with early stopping off (``tol=0``, since scikit-learn's rule
  stopped it after 2 iterations at 100 concepts), is fitted with 10, 20, 40, … iterations until its error is no
  higher than Interpreto's, and that fit's time is compared. An ``info`` line also reports ours at the same
  ``--nmf-iter`` iterations (per iteration, scikit-learn's coordinate descent costs more than Interpreto's HALS
  but gains more).
- TopK SAE: same epoch cap (``--epochs``, Interpreto's default 20), batch 1024, Adam at lr 1e-3, ``k = n // 10``.
  Ours centres and scales its input, holds out min(8192, rows/10) rows to monitor, stops early after 3 epochs
  without a 0.1 % improvement and resamples dead concepts; Interpreto trains on every row for every epoch. The
  pair is timed back to back (ours, then Interpreto) ``--sae-trials`` times per size; medians are reported. Then,
  as for NMF, time to equal error: ours with 2, 4, 6, 10, 15, … epochs until its error is no higher than
  Interpreto's median error after ``--epochs`` epochs.
- Error: relative reconstruction error ``‖X − decode(encode(X))‖ / ‖X‖`` on all fit rows with each library's own
  encoder and decoder (Interpreto's NMF encoder runs its HALS solver for 300 iterations; encoding time is not part
  of the fit time).
- Warm-up: one tiny untimed fit of each of the four models first, so that one-off imports (the first Adam step
  imports ``torch._dynamo``, about 3 s) are not billed to whichever library happens to run first.
- The goals: time ratio ours / Interpreto <= 1 at an error ratio ours / Interpreto <= 1.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp_widgets import demo  # noqa: E402
from interp_widgets.concepts import (  # noqa: E402
    NMFConcepts,
    SparseAutoencoder,
    collect_activations,
    relative_reconstruction_error,
)

SPLIT_POINT = "bert.encoder.layer.3"
NMF_LADDER = (10, 20, 40, 80, 160, 320)  # iteration caps tried for ours, in order, to reach Interpreto's error
SAE_LADDER = (2, 4, 6, 10, 15)  # epoch caps tried likewise for our SAE


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


def collection(model, tokenizer, args) -> None:
    """Collect ``--tokens`` rows under the memory budget and stream them back once."""
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


def interpreto_splitter(model, tokenizer):
    """Interpreto's ``ModelWithSplitPoints`` around our classifier, split after block 3."""
    from interpreto import ModelWithSplitPoints
    from transformers import AutoModelForSequenceClassification

    return ModelWithSplitPoints(model, split_point=SPLIT_POINT, automodel=AutoModelForSequenceClassification,
                                tokenizer=tokenizer, batch_size=16)


def check_same_activations(splitter, model, tokenizer, texts) -> None:
    """Interpreto's TOKEN activations of ``texts`` against ours (special tokens excluded by both)."""
    ours = collect_activations(model, tokenizer, texts, layer="layer:3", progress=False).to_numpy()
    theirs, _ = splitter.get_activations(texts, activation_granularity=splitter.activation_granularities.TOKEN)
    theirs = theirs.detach().float().numpy()
    if theirs.shape != ours.shape:
        raise RuntimeError(f"Interpreto gave {theirs.shape} token activations, we gave {ours.shape}")
    bench("concepts_interpreto_activation_max_abs_diff", float(np.abs(theirs - ours).max()), "<=", 1e-4)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def fit_ours_nmf(X, n, iters):
    model = NMFConcepts(n, nonnegative="shift",
                        estimator_params={"init": "nndsvda", "max_iter": iters, "tol": 0.0, "random_state": 0})
    return model.fit(X)


def fit_interpreto_nmf(splitter, X, n, iters):
    from interpreto.concepts import NMFConcepts as InterpretoNMF

    shift = X.min(0)
    explainer = InterpretoNMF(splitter, nb_concepts=n)
    explainer.fit(torch.from_numpy(X - shift), max_iter=iters)
    return explainer, shift


def interpreto_nmf_error(fitted, X) -> float:
    explainer, shift = fitted
    with torch.no_grad():
        codes = explainer.activations_to_concepts(torch.from_numpy(X - shift))
        X_hat = explainer.concepts_to_activations(codes).float().numpy() + shift
    return relative_reconstruction_error(X, X_hat)


def fit_ours_sae(X, n, epochs):
    return SparseAutoencoder(n, activation="topk", k=max(1, n // 10), max_epochs=epochs, batch_size=1024, lr=1e-3,
                             progress=False).fit(X)


def fit_interpreto_sae(splitter, X, n, epochs):
    from interpreto.concepts import TopKSAEConcepts

    torch.manual_seed(0)
    explainer = TopKSAEConcepts(splitter, nb_concepts=n, top_k=max(1, n // 10))
    explainer.fit(torch.from_numpy(X), nb_epochs=epochs, batch_size=1024, lr=1e-3)
    return explainer


def interpreto_sae_error(explainer, X) -> float:
    with torch.no_grad():
        explainer.concept_model.eval()
        X_hat = explainer.concepts_to_activations(explainer.activations_to_concepts(torch.from_numpy(X)))
    return relative_reconstruction_error(X, X_hat.float().numpy())


def ours_error(model, X) -> float:
    return relative_reconstruction_error(X, model.inverse_transform(model.transform(X)))


def compare_nmf(splitter, X, n: int, args) -> None:
    """Interpreto's NMF for ``--nmf-iter`` iterations; ours up the iteration ladder until its error is no higher
    (time to equal error), then ours for the same ``--nmf-iter`` iterations."""
    theirs, their_seconds = timed(lambda: fit_interpreto_nmf(splitter, X, n, args.nmf_iter))
    their_error = interpreto_nmf_error(theirs, X)
    for iters in [i for i in NMF_LADDER if i < args.nmf_iter] + [args.nmf_iter]:
        ours, seconds = timed(lambda: fit_ours_nmf(X, n, iters))
        error = ours_error(ours, X)
        if error <= their_error:
            break
    info(f"nmf{n}_interpreto", f"{their_seconds:.2f} s for {args.nmf_iter} iterations, relative error {their_error:.4f}")
    info(f"nmf{n}_ours_to_equal_error", f"{seconds:.2f} s for {iters} iterations, relative error {error:.4f}")
    bench(f"concepts_nmf{n}_time_to_interpreto_error_ratio_ours_over_interpreto", seconds / their_seconds, "<=", 1)
    bench(f"concepts_nmf{n}_error_ratio_ours_over_interpreto", error / their_error, "<=", 1)
    if args.skip_equal_iterations:
        return
    ours, same_seconds = timed(lambda: fit_ours_nmf(X, n, args.nmf_iter))
    same_error = ours_error(ours, X)
    info(f"nmf{n}_ours_same_iterations", f"{same_seconds:.2f} s for {args.nmf_iter} iterations, relative error "
         f"{same_error:.4f} (time ratio {same_seconds / their_seconds:.3g}, error ratio {same_error / their_error:.3g})")


def compare_sae(splitter, X, n: int, args) -> None:
    """Both TopK SAEs with the same epoch cap, ``--sae-trials`` back-to-back pairs (medians); then ours up the
    epoch ladder until its error is no higher than Interpreto's median (time to equal error)."""
    times, errors = {"ours": [], "interpreto": []}, {"ours": [], "interpreto": []}
    for _ in range(args.sae_trials):
        ours, seconds = timed(lambda: fit_ours_sae(X, n, args.epochs))
        times["ours"].append(seconds)
        errors["ours"].append(ours_error(ours, X))
        theirs, seconds = timed(lambda: fit_interpreto_sae(splitter, X, n, args.epochs))
        times["interpreto"].append(seconds)
        errors["interpreto"].append(interpreto_sae_error(theirs, X))
    t = {who: statistics.median(v) for who, v in times.items()}
    e = {who: statistics.median(v) for who, v in errors.items()}
    info(f"topk_sae{n}_fit_seconds", f"ours {t['ours']:.2f} ({ours.fit_info_['epochs']} epochs of {args.epochs}), "
         f"interpreto {t['interpreto']:.2f}; all trials ours {[round(v, 2) for v in times['ours']]}, "
         f"interpreto {[round(v, 2) for v in times['interpreto']]}")
    info(f"topk_sae{n}_relative_error", f"ours {e['ours']:.4f}, interpreto {e['interpreto']:.4f}")
    bench(f"concepts_topk_sae{n}_fit_time_ratio_ours_over_interpreto", t["ours"] / t["interpreto"], "<=", 1)
    bench(f"concepts_topk_sae{n}_error_ratio_ours_over_interpreto", e["ours"] / e["interpreto"], "<=", 1)
    for epochs in [i for i in SAE_LADDER if i < args.epochs] + [args.epochs]:
        ours, seconds = timed(lambda: fit_ours_sae(X, n, epochs))
        error = ours_error(ours, X)
        if error <= e["interpreto"]:
            break
    info(f"topk_sae{n}_ours_to_equal_error", f"{seconds:.2f} s with max_epochs={epochs} "
         f"({ours.fit_info_['epochs']} run), relative error {error:.4f}")
    bench(f"concepts_topk_sae{n}_time_to_interpreto_error_ratio_ours_over_interpreto", seconds / t["interpreto"],
          "<=", 1)


def comparison(model, tokenizer, args) -> None:
    """Fit time and reconstruction error, ours against Interpreto, on the same activation rows."""
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # tol=0: our fits run to their iteration cap

    splitter = interpreto_splitter(model, tokenizer)
    check_same_activations(splitter, model, tokenizer, demo.corpus()[:16])
    store = collect_activations(model, tokenizer, corpus_for(args.fit_rows, tokenizer), layer="layer:3",
                                progress=False)
    X = store.sample(args.fit_rows, seed=0).astype(np.float32)
    info("fit_rows", f"{X.shape[0]} x {X.shape[1]} (min {X.min():.2f}, max {X.max():.2f})")
    torch.set_num_threads(args.fit_threads)
    with threadpool_limits(args.fit_threads):
        warm = X[:256]
        fit_ours_nmf(warm, 4, 5), fit_interpreto_nmf(splitter, warm, 4, 5)
        fit_ours_sae(warm, 8, 1), fit_interpreto_sae(splitter, warm, 8, 1)
        for n in args.sizes:
            if "nmf" in args.families:
                compare_nmf(splitter, X, n, args)
            if "sae" in args.families:
                compare_sae(splitter, X, n, args)
    bench("concepts_fit_peak_rss_mb", peak_rss_mb(), "<=", 2000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--budget", default="256MB")
    parser.add_argument("--fit-rows", type=int, default=20_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--nmf-iter", type=int, default=500, help="iteration cap of both NMF solvers")
    parser.add_argument("--epochs", type=int, default=20, help="epoch cap of both TopK SAEs")
    parser.add_argument("--families", nargs="+", choices=("nmf", "sae"), default=["nmf", "sae"])
    parser.add_argument("--skip-equal-iterations", action="store_true",
                        help="skip the info run of our NMF for the full --nmf-iter iterations")
    parser.add_argument("--sae-trials", type=int, default=3, help="back-to-back SAE timings per size (medians reported)")
    parser.add_argument("--skip-collect", action="store_true")
    parser.add_argument("--skip-fit", action="store_true")
    parser.add_argument("--fit-threads", type=int, default=1,
                        help="torch and BLAS threads for the fits (small matrices; extra threads spin on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    model, tokenizer = demo.load_classifier(progress=False)
    if not args.skip_collect:
        collection(model, tokenizer, args)
    if not args.skip_fit:
        comparison(model, tokenizer, args)


if __name__ == "__main__":
    main()
