"""Concepts at scale: bounded-memory collection, fits against Interpreto, a 16,384-concept SAE of SmolLM2 on the real
corpus, planted-dictionary recovery, LM labels against token labels, and the 16k-concept browser in chromium.

Run: ``python -u benchmarks/concepts.py [--parts collect fit scale recovery matryoshka labels browser]`` from the repository
root (default: every part; ``--skip-collect`` / ``--skip-fit`` drop the first two). Prints ``bench:`` lines (with
goals) and ``info:`` lines (measurements without a goal). The parts ``scale`` and ``labels`` take hours on a
shared 2-core machine; their intermediate results (the activation store, the SAE, the interpretation) are kept in
``--work-dir`` and reused by later runs (``--refit`` fits again), and the store is collected in parts of 2,000
texts, named by their text range, so an interrupted collection resumes where it stopped and a larger
``--store-texts`` reuses the parts of a smaller run.

Part ``scale``: SmolLM2-135M-Instruct (``demo.load_lm``), layer ``layer:15`` (the middle of its 30 blocks), over
the train split of the real corpus (``demo.load_text_corpus("train")``: 29,390 distinct paragraphs of the Python
documentation, 1.24M tokens), streamed to disk by ``collect_activations``'s memory budget. A 16,384-concept TopK
SAE (``SparseAutoencoder``, ``k = --sae-k``) is fitted with streaming minibatches from the first ``--sae-rows``
rows of the store (``info: scale_sae_step_seconds`` extrapolates to an epoch over the whole store) and evaluated on
held-out rows (parts not used for fitting; when the fit needs every part, as with ``--store-texts 2000``, the last
``--held-out-fraction`` of the texts of the last part, and at most ``--eval-rows`` rows): fraction of variance
unexplained and dead fraction (concepts that never fire on those rows, and on every row the interpreter scanned). ``interpret_concepts`` (bounded blocks, top-k
by partition) then summarises every concept over ``--interpret-rows`` rows (default all). Peak RSS is the process
high-water mark after each stage (goal <= 3 GB); it includes Python, torch and SmolLM2 when the store is collected
in the same process.

Part ``recovery``: a synthetic store on disk (``--rec-rows`` rows of ``--rec-dim`` features, each a positive
combination of ``--rec-active`` of ``--rec-atoms`` random unit atoms, plus noise) and a TopK SAE of as many concepts
fitted from it by streaming minibatches: the mean over planted atoms of the largest cosine with a learned direction
(goal >= 0.9), and the one-to-one matched cosine as information.

Part ``matryoshka``: a ``MatryoshkaSAE`` of ``--n-concepts`` (BatchTopK, ``k = --sae-k``, prefixes
``--matryoshka-prefixes``, default n/16, n/8, n/4 and n/2) on the scale part's store (its first ``--sae-rows`` rows),
reported as information: each prefix's FVU and L0 on the next ``--eval-rows`` rows against a plain ``BatchTopKSAE`` of
the prefix's size at the prefix's measured L0 fitted from the same rows, the dead fraction, the decoder cosines of
the links P(parent | child) >= 0.8 allows, and the hierarchy between prefix groups (``sae.hierarchy``: parents,
children, median absorption rate, a proxy for Chanin et al.'s measure) at ``min_cosine`` 0.3 and -0.1.

Part ``labels``: ``--label-concepts`` live concepts of the scale run's SAE, drawn at random (seeded) among those that
fire in at least 5 held-out contexts, each labelled by ``TokenLabeler`` and by ``LMLabeler`` (SmolLM2, greedy) from
its top examples, both scored by ``label_auroc`` on held-out contexts (windows of 24 tokens of the test split, never
seen by the SAE or the interpreter) embedded with the shipped MiniLM encoder (``demo.sentence_embedder``), reported
as they come: mean and median AUROC of each labeller, the paired difference with a bootstrap interval, and how often
the LM label scores higher. Then (``--no-label-scores`` skips it) delphi's detection and fuzzing scores of both
labellers' labels (``score_labels``, SmolLM2 as the scorer: it also wrote the LM labels), the swapped-label control
(the true label must outscore another concept's on >= 70 % of concepts), and the mean balanced accuracy and AUC of
each with bootstrap 95 % intervals over concepts; the scores are saved in ``--work-dir`` after each concept.

Part ``browser``: a 16,384-concept ``ConceptBrowser`` (the scale run's interpretation when it exists, else a
synthetic one of the same size) in headless Debian chromium (Playwright, the flags of ``tests/browser``): first
paint (the view's ``render()`` on the exported state to the end of the next frame, goal < 200 ms), search (a
keystroke in the search box to the end of the next frame, the filtered list drawn, goal < 50 ms), and the exported
HTML page's load to its first listed concept; medians over fresh pages.

Part ``collect`` (MiniLM classifier):

the demo classifier (all-MiniLM-L6-v2 fine-tuned, width 384; set ``INTERP_WIDGETS_CACHE`` to reuse a
cached copy), layer 3, on the demo corpus repeated until ``--tokens`` tokens (special tokens excluded). Rows above
the memory budget stream to a temporary directory as ``.npy`` chunks. Peak RSS is the process high-water mark
(``ru_maxrss``) and includes Python, torch and the model. After collection the whole store is streamed once more
(per-feature mean) to show that reading back is bounded too.

Part ``fit``: comparison with Interpreto (``interpreto`` package, its ``NMFConcepts`` and ``TopKSAEConcepts`` around a
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
- Sparse PCA, convex NMF and the matching-pursuit SAE (``--families sparse_pca convex_nmf mp_sae``), against
  Interpreto's ``SparsePCAConcepts``, ``ConvexNMFConcepts`` and ``MpSAEConcepts``, each for ``--seeds`` seeds (the
  time and error ratios are medians over them): same rows, threads and dictionary size; the same sparsity (sparse
  PCA's ``alpha`` = Interpreto's ``sparsity``, ``--spca-alpha``, its default 1; ``k = n // 10`` matching-pursuit
  steps). Interpreto runs its defaults (sparse PCA: scikit-learn's coordinate descent, tol 1e-3, 1000 iterations;
  convex NMF: its multiplicative updates for ``--nmf-iter`` iterations; MP SAE: ``--epochs`` epochs, batch 1024,
  Adam at 1e-3); ours climbs a ladder (sparse PCA iterations, convex NMF iterations, SAE epochs) until its error
  is no higher, and that fit's time is compared. Interpreto's convex NMF multiplies ``rows × rows`` matrices
  (``rows³`` per iteration, and 1.6 GB of them at 20k rows), so convex NMF runs on the first
  ``--convex-nmf-rows`` rows (default 2,000; at most 10,000, our row cap). ``NeuronsAsConcepts`` learns nothing
  and is left out.
- Error: relative reconstruction error ``‖X − decode(encode(X))‖ / ‖X‖`` on all fit rows with each library's own
  encoder and decoder (Interpreto's NMF encoder runs its HALS solver for 300 iterations; encoding time is not part
  of the fit time).
- Warm-up: one tiny untimed fit of each of the four models first, so that one-off imports (the first Adam step
  imports ``torch._dynamo``, about 3 s) are not billed to whichever library happens to run first.
- The goals: time ratio ours / Interpreto <= 1 at an error ratio ours / Interpreto <= 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import _repo  # noqa: F401, E402  (the repository root on sys.path)

from interp_widgets import demo  # noqa: E402
from interp_widgets.concepts import (  # noqa: E402
    ConvexNMFConcepts,
    MatchingPursuitSAE,
    NMFConcepts,
    SparseAutoencoder,
    SparsePCAConcepts,
    collect_activations,
    relative_reconstruction_error,
)

SPLIT_POINT = "bert.encoder.layer.3"
NMF_LADDER = (10, 20, 40, 80, 160, 320)  # iteration caps tried for ours, in order, to reach Interpreto's error
SAE_LADDER = (2, 4, 6, 10, 15)  # epoch caps tried likewise for our SAE
SPARSE_PCA_LADDER = (2, 5, 10, 20, 50, 100, 200)  # iteration caps of our sparse PCA
CONVEX_NMF_LADDER = (10, 20, 40, 80, 160, 320)  # iteration caps of our convex NMF
INTERPRETO_METHODS = ("sparse_pca", "convex_nmf", "mp_sae")  # compared over seeds by compare_seeded


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
    store = collect_activations(
        model, tokenizer, texts, layer="layer:3", memory_budget=args.budget, max_batch_tokens=8192, progress=False
    )
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

    return ModelWithSplitPoints(
        model, split_point=SPLIT_POINT, automodel=AutoModelForSequenceClassification, tokenizer=tokenizer, batch_size=16
    )


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
    model = NMFConcepts(
        n, nonnegative="shift", estimator_params={"init": "nndsvda", "max_iter": iters, "tol": 0.0, "random_state": 0}
    )
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
    return SparseAutoencoder(
        n, activation="topk", k=max(1, n // 10), max_epochs=epochs, batch_size=1024, lr=1e-3, progress=False
    ).fit(X)


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
    info(
        f"nmf{n}_interpreto", f"{their_seconds:.2f} s for {args.nmf_iter} iterations, relative error {their_error:.4f}"
    )
    info(f"nmf{n}_ours_to_equal_error", f"{seconds:.2f} s for {iters} iterations, relative error {error:.4f}")
    bench(f"concepts_nmf{n}_time_to_interpreto_error_ratio_ours_over_interpreto", seconds / their_seconds, "<=", 1)
    bench(f"concepts_nmf{n}_error_ratio_ours_over_interpreto", error / their_error, "<=", 1)
    if args.skip_equal_iterations:
        return
    ours, same_seconds = timed(lambda: fit_ours_nmf(X, n, args.nmf_iter))
    same_error = ours_error(ours, X)
    info(
        f"nmf{n}_ours_same_iterations",
        f"{same_seconds:.2f} s for {args.nmf_iter} iterations, relative error "
        f"{same_error:.4f} (time ratio {same_seconds / their_seconds:.3g}, error ratio {same_error / their_error:.3g})",
    )


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
    info(
        f"topk_sae{n}_fit_seconds",
        f"ours {t['ours']:.2f} ({ours.fit_info_['epochs']} epochs of {args.epochs}), "
        f"interpreto {t['interpreto']:.2f}; all trials ours {[round(v, 2) for v in times['ours']]}, "
        f"interpreto {[round(v, 2) for v in times['interpreto']]}",
    )
    info(f"topk_sae{n}_relative_error", f"ours {e['ours']:.4f}, interpreto {e['interpreto']:.4f}")
    bench(f"concepts_topk_sae{n}_fit_time_ratio_ours_over_interpreto", t["ours"] / t["interpreto"], "<=", 1)
    bench(f"concepts_topk_sae{n}_error_ratio_ours_over_interpreto", e["ours"] / e["interpreto"], "<=", 1)
    for epochs in [i for i in SAE_LADDER if i < args.epochs] + [args.epochs]:
        ours, seconds = timed(lambda: fit_ours_sae(X, n, epochs))
        error = ours_error(ours, X)
        if error <= e["interpreto"]:
            break
    info(
        f"topk_sae{n}_ours_to_equal_error",
        f"{seconds:.2f} s with max_epochs={epochs} ({ours.fit_info_['epochs']} run), relative error {error:.4f}",
    )
    bench(
        f"concepts_topk_sae{n}_time_to_interpreto_error_ratio_ours_over_interpreto", seconds / t["interpreto"], "<=", 1
    )


def interpreto_error(explainer, X) -> float:
    """Relative reconstruction error of an Interpreto explainer with its own encoder and decoder."""
    with torch.no_grad():
        if hasattr(explainer.concept_model, "eval"):
            explainer.concept_model.eval()
        X_hat = explainer.concepts_to_activations(explainer.activations_to_concepts(torch.from_numpy(X)))
    return relative_reconstruction_error(X, X_hat.float().numpy())


def seeded_pair(method: str, splitter, X, n: int, seed: int, args):
    """``(fit Interpreto, fit ours at a ladder setting, the ladder)`` for one of ``INTERPRETO_METHODS``: the same
    rows, dictionary size and sparsity (``--spca-alpha``; ``k = n // 10`` matching-pursuit steps), seed ``seed``."""
    import interpreto.concepts as ic

    k = max(1, n // 10)
    if method == "sparse_pca":
        params = {"alpha": args.spca_alpha, "method": "cd", "tol": 1e-3, "random_state": seed}

        def theirs():
            explainer = ic.SparsePCAConcepts(splitter, nb_concepts=n, sparsity=args.spca_alpha, random_state=seed)
            explainer.fit(torch.from_numpy(X))
            return explainer

        def ours(iters):
            return SparsePCAConcepts(n, estimator_params={**params, "max_iter": iters}).fit(X)

        return theirs, ours, [i for i in SPARSE_PCA_LADDER if i < 1000] + [1000]
    if method == "convex_nmf":

        def theirs():
            torch.manual_seed(seed)
            explainer = ic.ConvexNMFConcepts(splitter, nb_concepts=n)
            explainer.fit(torch.from_numpy(X), max_iter=args.nmf_iter)
            return explainer

        def ours(iters):
            return ConvexNMFConcepts(n, max_iter=iters, random_state=seed, max_rows=max(len(X), 1)).fit(X)

        return theirs, ours, [i for i in CONVEX_NMF_LADDER if i < args.nmf_iter] + [args.nmf_iter]

    def theirs():
        torch.manual_seed(seed)
        explainer = ic.MpSAEConcepts(splitter, nb_concepts=n, k=k)
        explainer.fit(torch.from_numpy(X), nb_epochs=args.epochs, batch_size=1024, lr=1e-3)
        return explainer

    def ours(epochs):
        return MatchingPursuitSAE(n, k=k, max_epochs=epochs, batch_size=1024, lr=1e-3, seed=seed, progress=False).fit(X)

    return theirs, ours, [i for i in SAE_LADDER if i < args.epochs] + [args.epochs]


def compare_seeded(method: str, splitter, X, n: int, args) -> None:
    """Interpreto's ``method`` at its settings, then ours up its ladder until its error is no higher (time to equal
    error), for each of ``--seeds`` seeds; the time and error ratios are medians over the seeds."""
    time_ratios, error_ratios = [], []
    for seed in range(args.seeds):
        fit_theirs, fit_ours, ladder = seeded_pair(method, splitter, X, n, seed, args)
        theirs, their_seconds = timed(fit_theirs)
        their_error = interpreto_error(theirs, X)
        for setting in ladder:
            ours, seconds = timed(lambda fit=fit_ours, setting=setting: fit(setting))
            error = ours_error(ours, X)
            if error <= their_error:
                break
        info(
            f"{method}{n}_seed{seed}",
            f"interpreto {their_seconds:.2f} s, relative error {their_error:.4f}; ours {seconds:.2f} s at ladder "
            f"setting {setting}, relative error {error:.4f}",
        )
        time_ratios.append(seconds / their_seconds)
        error_ratios.append(error / their_error if their_error > 0 else math.inf)
    name = f"concepts_{method}{n}"
    bench(f"{name}_time_to_interpreto_error_ratio_ours_over_interpreto", statistics.median(time_ratios), "<=", 1)
    bench(f"{name}_error_ratio_ours_over_interpreto", statistics.median(error_ratios), "<=", 1)


def comparison(model, tokenizer, args) -> None:
    """Fit time and reconstruction error, ours against Interpreto, on the same activation rows."""
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # tol=0: our fits run to their iteration cap

    splitter = interpreto_splitter(model, tokenizer)
    check_same_activations(splitter, model, tokenizer, demo.corpus()[:16])
    store = collect_activations(model, tokenizer, corpus_for(args.fit_rows, tokenizer), layer="layer:3", progress=False)
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
            for method in INTERPRETO_METHODS:
                if method in args.families:
                    # Interpreto's convex NMF multiplies rows × rows matrices (rows³ per iteration): fewer rows
                    rows = X[: args.convex_nmf_rows] if method == "convex_nmf" else X
                    compare_seeded(method, splitter, rows, n, args)
    bench("concepts_fit_peak_rss_mb", peak_rss_mb(), "<=", 2000)


# ---------------------------------------------------------------------------------------------------------- scale


def real_store_parts(args):
    """The train split's activations at ``--layer`` as a list of part stores on disk (collected if missing)."""
    from interp_widgets.concepts import ActivationStore

    texts = demo.load_text_corpus("train")
    texts = texts[: args.store_texts] if args.store_texts else texts
    # parts are named by their text range, so a larger --store-texts reuses the parts a smaller run collected
    root = args.work_dir / f"smollm2_{args.layer.replace(':', '')}_train_by{args.part_texts}"
    root.mkdir(parents=True, exist_ok=True)
    starts = list(range(0, len(texts), args.part_texts))
    names = [f"texts-{a:05d}-{min(a + args.part_texts, len(texts)):05d}" for a in starts]
    missing = [i for i in range(len(starts)) if not (root / names[i] / "manifest.json").is_file()]
    if missing:
        model, tokenizer = demo.load_lm(progress=False)
        seconds, rows = 0.0, 0
        for i in missing:
            path = root / names[i]
            if path.exists():  # an interrupted part: collect it again
                import shutil

                shutil.rmtree(path)
            start = time.perf_counter()
            part = collect_activations(
                model,
                tokenizer,
                texts[starts[i] : starts[i] + args.part_texts],
                layer=args.layer,
                memory_budget="256MB",
                path=path,
                progress=False,
            )
            seconds += time.perf_counter() - start
            rows += len(part)
            print(f"  collected part {i + 1}/{len(starts)}: {len(part)} rows, {seconds:.0f} s so far", flush=True)
        info(
            "scale_collect_seconds",
            f"{seconds:.0f} for {rows} rows ({rows / max(seconds, 1e-9):.0f} tokens/s, "
            f"{len(missing)} of {len(starts)} parts collected in this run)",
        )
        del model
    else:
        info("scale_collect_seconds", f"store reused from {root}")
    parts = [ActivationStore.open(root / name) for name in names]
    bench("concepts_scale_store_rows", sum(len(p) for p in parts), ">=", 1_000_000)
    if not args.massive_factor:
        return parts, texts
    # massive activations (attention sinks: the first token of each text) dominate any decomposition; drop them
    selected, dropped, at_first, rows = [], 0, 0, 0
    for i, part in enumerate(parts):
        path = root / f"{names[i]}-below{args.massive_factor:g}xmedian"
        norms = part.row_norms()
        keep = norms < args.massive_factor * np.median(norms)
        first = np.r_[True, part.text_ids[1:] != part.text_ids[:-1]]  # each text's first stored token
        if not (path / "manifest.json").is_file():
            if path.exists():
                import shutil

                shutil.rmtree(path)
            part.select(keep, path=path, memory_budget="256MB")
        selected.append(ActivationStore.open(path))
        dropped, at_first, rows = dropped + int((~keep).sum()), at_first + int((~keep & first).sum()), rows + len(part)
    info(
        "scale_massive_rows_dropped",
        f"{dropped} of {rows} rows ({dropped / rows:.2%}) have a norm over "
        f"{args.massive_factor:g}x the median (attention sinks), {at_first} of them the first token of a text "
        f"({sum(len(p.texts) for p in parts)} texts); they are dropped: the SAE, FVU and interpretation use the rest",
    )
    return selected, texts


def leading(parts, rows: int):
    """The fewest leading parts holding at least ``rows`` rows, as one store, and how many parts that is."""
    from interp_widgets.concepts import ActivationStore

    total, used = 0, 0
    while used < len(parts) and total < rows:
        total += len(parts[used])
        used += 1
    return ActivationStore.concat(parts[:used]), used


def scale(args) -> None:
    """A ≥1M-token SmolLM2 store, a 16k-concept SAE fitted by streaming, evaluation and bounded interpretation."""
    from interp_widgets.concepts import (
        ActivationStore,
        ConceptModel,
        ConceptInterpretation,
        evaluate,
        interpret_concepts,
    )

    parts, texts = real_store_parts(args)
    store = ActivationStore.concat(parts)
    info(
        "scale_store",
        f"{store!r}; {len(set(texts))} distinct texts of {len(texts)}; "
        f"{store.nbytes / 1e9:.2f} GB of float32 on disk, never all in RAM",
    )
    bench("concepts_scale_after_store_peak_rss_mb", peak_rss_mb(), "<=", 3000)

    sae_path = args.work_dir / f"sae{args.n_concepts}_k{args.sae_k}_{args.sae_rows}rows_{args.sae_epochs}ep.safetensors"
    fit_store, fit_parts = leading(parts, args.sae_rows)
    held_parts = parts[fit_parts:]
    if not held_parts and args.held_out_fraction:
        # no whole part is left for evaluation: hold out the last texts of the last fitted part (split by text)
        last, root = (
            parts[fit_parts - 1],
            args.work_dir / (f"split{args.held_out_fraction:g}_train_{len(texts)}_by{args.part_texts}"),
        )
        cutoff = int(np.ceil(len(last.texts) * (1 - args.held_out_fraction)))
        halves = []
        for name, mask in (("fit", last.text_ids < cutoff), ("held_out", last.text_ids >= cutoff)):
            path = root / f"part-{fit_parts - 1:03d}-{name}"
            if not (path / "manifest.json").is_file():
                if path.exists():
                    import shutil

                    shutil.rmtree(path)
                last.select(mask, path=path, memory_budget="256MB")
            halves.append(ActivationStore.open(path))
        fit_store, held_parts = ActivationStore.concat(parts[: fit_parts - 1] + [halves[0]]), [halves[1]]
        fit_rows = len(fit_store)
        if fit_rows > args.sae_rows:  # the first --sae-rows rows of the fitted texts
            fit_store = fit_store.select(np.arange(args.sae_rows), memory_budget="256MB")
        sae_path = sae_path.with_name(sae_path.stem + f"_heldout{args.held_out_fraction:g}.safetensors")
        info(
            "scale_split",
            f"fitted on the first {len(fit_store)} of the {fit_rows} rows of the first {cutoff} of "
            f"{len(last.texts)} texts of part {fit_parts - 1}, evaluated on rows of the other "
            f"{len(last.texts) - cutoff} texts ({len(halves[1])} rows)",
        )
    held_out = ActivationStore.concat(held_parts) if held_parts else None
    if sae_path.is_file() and not args.refit:
        sae = ConceptModel.load(sae_path)
        info(
            "scale_sae",
            f"reused {sae_path.name}: {sae.fit_info_.get('rows')} rows, {sae.fit_info_.get('epochs')} "
            f"epochs, fit {sae.fit_info_.get('bench_seconds', '?')} s",
        )
    else:
        sae = SparseAutoencoder(
            args.n_concepts,
            activation="topk",
            k=args.sae_k,
            batch_size=1024,
            lr=args.sae_lr,
            max_epochs=args.sae_epochs,
            monitor_rows=4096,
            progress=True,
        )
        start = time.perf_counter()
        sae.fit(fit_store)
        seconds = time.perf_counter() - start
        sae.fit_info_["bench_seconds"] = round(seconds, 1)
        sae.save(sae_path)
        steps = sae.fit_info_["epochs"] * math.ceil(len(fit_store) / 1024)
        info(
            "scale_sae_fit",
            f"{seconds:.0f} s: {sae.fit_info_['epochs']} epoch(s) over {len(fit_store)} streamed rows "
            f"({steps} steps of 1024 rows), history {[round(h['monitor_fvu'], 4) for h in sae.fit_info_['history']]}",
        )
        info(
            "scale_sae_step_seconds",
            f"{seconds / steps:.2f} (one epoch over all {len(store)} rows would take "
            f"{seconds / steps * math.ceil(len(store) / 1024) / 3600:.1f} h at this rate)",
        )
        bench("concepts_scale_sae_fit_peak_rss_mb", peak_rss_mb(), "<=", 3000)
    if held_out is not None:
        eval_store, _ = leading(held_parts, args.eval_rows)
        if len(eval_store) > args.eval_rows:
            eval_store = eval_store.select(np.arange(args.eval_rows), memory_budget="256MB")
        start = time.perf_counter()
        report = evaluate(sae, eval_store)
        info("scale_eval_seconds", f"{time.perf_counter() - start:.0f} for {report['rows']} held-out rows")
        bench("concepts_scale_sae_fvu_held_out", 1 - report["explained_variance"], "<=", 0.3)
        bench("concepts_scale_sae_dead_fraction_held_out", report["n_dead"] / sae.n_concepts, "<=", 0.1)
        info("scale_sae_l0_held_out", f"{report['l0']:.2f} (k = {sae.k_})")
    interp_path = args.work_dir / f"{sae_path.stem}_interp{args.interpret_rows or 'all'}.safetensors"
    if interp_path.is_file() and not args.refit:
        interp = ConceptInterpretation.load(interp_path)
        info("scale_interpret", f"reused {interp_path.name}")
    else:
        scanned = store if not args.interpret_rows else leading(parts, args.interpret_rows)[0]
        if args.interpret_rows and len(scanned) > args.interpret_rows:
            scanned = scanned.select(np.arange(args.interpret_rows), memory_budget="256MB")
        start = time.perf_counter()
        interp = interpret_concepts(sae, scanned, k=10, window=8, progress=True)
        seconds = time.perf_counter() - start
        interp.save(interp_path)
        info(
            "scale_interpret_seconds",
            f"{seconds:.0f} for {len(scanned)} rows x {sae.n_concepts} concepts "
            f"({len(scanned) / seconds:.0f} rows/s; all {len(store)} rows: about "
            f"{seconds * len(store) / len(scanned) / 60:.0f} min)",
        )
        bench("concepts_scale_interpret_peak_rss_mb", peak_rss_mb(), "<=", 3000)
    info("scale_interpret_rows", interp.params["rows"])
    bench("concepts_scale_dead_fraction_interpreted_rows", float(interp.dead.mean()), "<=", 0.1)
    bench("concepts_scale_peak_rss_mb", peak_rss_mb(), "<=", 3000)


# ------------------------------------------------------------------------------------------------------- recovery
def recovery(args) -> None:
    """A planted dictionary in a synthetic store on disk, recovered by a streamed TopK SAE."""
    from interp_widgets.concepts import ActivationStore, matched_cosine

    rng = np.random.default_rng(0)
    atoms = rng.normal(size=(args.rec_atoms, args.rec_dim))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    rows, per_text = args.rec_rows, 50
    chunks = []
    for start in range(0, rows, 50_000):
        n = min(50_000, rows - start)
        chosen = np.stack([rng.choice(args.rec_atoms, args.rec_active, replace=False) for _ in range(n)])
        weights = rng.uniform(0.5, 1.5, size=chosen.shape)
        X = np.einsum("nk,nkd->nd", weights, atoms[chosen]) + 0.01 * rng.normal(size=(n, args.rec_dim))
        chunks.append(X.astype(np.float32))
    meta = {
        "text_id": np.arange(rows) // per_text,
        "position": np.arange(rows) % per_text,
        "start": np.zeros(rows, np.int64),
        "end": np.zeros(rows, np.int64),
        "token_id": np.full(rows, -1),
    }
    texts = [f"synthetic text {i}" for i in range((rows + per_text - 1) // per_text)]
    directory = Path(tempfile.mkdtemp(prefix="planted_", dir=args.work_dir if args.work_dir.is_dir() else None))
    ActivationStore(chunks, meta, texts, {"layer": "planted", "unit": "token", "dim": args.rec_dim}).save(
        directory / "store"
    )
    del chunks
    store = ActivationStore.open(directory / "store")
    info("recovery_store", repr(store))
    sae = SparseAutoencoder(
        args.rec_atoms,
        activation="topk",
        k=args.rec_active,
        batch_size=1024,
        lr=2e-3,
        max_epochs=args.rec_epochs,
        monitor_rows=8192,
        progress=False,
    )
    start = time.perf_counter()
    sae.fit(store)
    seconds = time.perf_counter() - start
    learned = sae.components_ / np.linalg.norm(sae.components_, axis=1, keepdims=True).clip(1e-12)
    mean_max = float((atoms @ learned.T).max(axis=1).mean())
    matched, _, _ = matched_cosine(atoms, sae.components_)
    info(
        "recovery_fit",
        f"{seconds:.0f} s, {sae.fit_info_['epochs']} epochs, monitor FVU "
        f"{sae.fit_info_['history'][-1]['monitor_fvu']:.4f}",
    )
    bench("concepts_recovery_mean_max_cosine", mean_max, ">=", 0.9)
    info("recovery_matched_cosine_one_to_one", f"{matched:.4f}")
    info("recovery_atoms_found_at_0.9", f"{float(((atoms @ learned.T).max(axis=1) >= 0.9).mean()):.3f}")
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------- matryoshka
def matryoshka_part(args) -> None:
    """A Matryoshka SAE (BatchTopK, ``k = --sae-k``) of ``--n-concepts`` on the scale run's store, fitted from its first
    ``--sae-rows`` rows, against a plain BatchTopK SAE per prefix: each prefix's FVU and L0 on the next ``--eval-rows``
    rows (the fit rows when the store has no more) beside those of a ``BatchTopKSAE`` of the prefix's size whose ``k``
    is the prefix's measured L0 (a prefix uses only those of the global top k that fall inside it, so a peer given the
    full k would not be a fair one), fitted from the same rows with the same settings. Then the hierarchy between its
    prefix groups (P(parent | child) >= 0.8; the decoder cosine of every link that passes it, to choose
    ``min_cosine``) with the parents' absorption rates (a proxy for Chanin et al.'s probe-based measure)."""
    from interp_widgets.concepts import ActivationStore, BatchTopKSAE, MatryoshkaSAE

    parts, _ = real_store_parts(args)
    store = ActivationStore.concat(parts)
    fit_rows = min(args.sae_rows, len(store))
    X = store[:fit_rows]
    held = store[fit_rows : fit_rows + args.eval_rows] if len(store) > fit_rows else X[: args.eval_rows]
    where = "held-out rows" if len(store) > fit_rows else "fit rows (the store has no more)"
    info("matryoshka_rows", f"fit {len(X)}, evaluated on {len(held)} {where}")
    n = args.n_concepts
    prefixes = tuple(args.matryoshka_prefixes or sorted({max(1, n >> s) for s in (4, 3, 2, 1)}))
    settings = {
        "lr": args.sae_lr,
        "max_epochs": args.sae_epochs,
        "batch_size": 1024,
        "progress": False,
    }  # as the scale part
    sae = MatryoshkaSAE(n, k=args.sae_k, prefixes=prefixes, **settings)
    start = time.perf_counter()
    sae.fit(X)
    info("matryoshka_fit", f"{time.perf_counter() - start:.0f} s on {fit_rows} rows, prefixes {sae.prefixes_}")
    codes = sae.transform(held)
    fvu = sae.prefix_fvu(held)
    info("matryoshka_dead_fraction", f"{float(((codes > 0).sum(0) == 0).mean()):.3f} on {where}")
    total = float(((held - held.mean(0)) ** 2).sum()) or 1e-12
    print("  prefix | its L0 | Matryoshka FVU | plain BatchTopK FVU (its L0, fit s) | ratio", flush=True)
    ratios = []
    for m, prefix_fvu in zip(sae.prefixes_, fvu):
        l0 = float((codes[:, :m] > 0).sum(1).mean())
        peer = BatchTopKSAE(m, k=max(l0, 1e-3), **settings)
        start = time.perf_counter()
        peer.fit(X)
        seconds = time.perf_counter() - start
        peer_codes = peer.transform(held)
        peer_fvu = float(((held - peer.inverse_transform(peer_codes, X=held)) ** 2).sum()) / total
        peer_l0 = float((peer_codes > 0).sum(1).mean())
        ratios.append(prefix_fvu / peer_fvu)
        print(
            f"  {m} | {l0:.2f} | {prefix_fvu:.3f} | {peer_fvu:.3f} ({peer_l0:.2f}, {seconds:.0f} s) | {ratios[-1]:.3f}",
            flush=True,
        )
    info("matryoshka_prefix_fvu_over_plain", ", ".join(f"{m}: {r:.3f}" for m, r in zip(sae.prefixes_, ratios)))
    start = time.perf_counter()
    links = sae.hierarchy(held, min_cosine=-1.0)  # every link the conditional allows, to see their cosines
    cosines = np.array(list(links.cosine.values()))
    if len(cosines):
        q = np.quantile(cosines, [0.1, 0.25, 0.5, 0.75, 0.9])
        info(
            "matryoshka_link_cosines",
            f"{len(cosines)} links at P(parent | child) >= 0.8 with any cosine; cosine quantiles 10/25/50/75/90 % "
            f"{', '.join(f'{v:.3f}' for v in q)}; {int((cosines >= 0.3).sum())} at >= 0.3, "
            f"{int((cosines >= -0.1).sum())} at >= -0.1, {int((cosines >= 0).sum())} at >= 0",
        )
    for min_cosine in (0.3, -0.1):
        tree = sae.hierarchy(held, min_cosine=min_cosine)
        absorption = list(tree.absorption.values())
        info(
            f"matryoshka_hierarchy_min_cosine_{min_cosine:g}",
            f"{len(tree.parents)} parents, {len(tree.parent_of)} children, {len(tree.roots)} roots; median absorption "
            f"{statistics.median(absorption) if absorption else float('nan'):.3f}",
        )
    info("matryoshka_hierarchy_seconds", f"{(time.perf_counter() - start) / 3:.1f} per tree")
    print(f"peak RSS {peak_rss_mb():.0f} MB", flush=True)


# --------------------------------------------------------------------------------------------------------- labels
def held_out_store(args, model, tokenizer):
    """The layer activations of the first ``--label-texts`` paragraphs of the test split (collected once, cached)."""
    from interp_widgets.concepts import ActivationStore

    texts = demo.load_text_corpus("test")[: args.label_texts]
    path = args.work_dir / f"smollm2_{args.layer.replace(':', '')}_test_{len(texts)}"
    if (path / "manifest.json").is_file():
        try:
            return ActivationStore.open(path)
        except FileNotFoundError:  # a killed collection: the call below collects its missing shards
            return collect_activations(model, tokenizer, texts, layer=args.layer, path=path, progress=False)
    if path.exists():
        import shutil

        shutil.rmtree(path)
    return collect_activations(model, tokenizer, texts, layer=args.layer, path=path, progress=False)


def labels_part(args) -> None:
    """LMLabeler (SmolLM2) against TokenLabeler labels, scored by label_auroc on held-out contexts (MiniLM)."""
    from interp_widgets.concepts import ConceptInterpretation, ConceptModel, LMLabeler, TokenLabeler, compare_labelers

    candidates = sorted(args.work_dir.glob(f"sae{args.n_concepts}_k{args.sae_k}_*_interp*.safetensors"))
    if not candidates:
        raise SystemExit("the labels part needs the scale part's SAE and interpretation; run --parts scale first")
    interp = ConceptInterpretation.load(candidates[-1])
    sae = ConceptModel.load(args.work_dir / (candidates[-1].name.split("_interp")[0] + ".safetensors"))
    info("labels_concepts_of", f"{candidates[-1].name}")
    model, tokenizer = demo.load_lm(progress=False)
    store = held_out_store(args, model, tokenizer)
    token, lm = TokenLabeler(), LMLabeler(model, tokenizer)
    result = compare_labelers(
        [token, lm],
        sae,
        interp,
        store,
        demo.sentence_embedder(),
        n_concepts=args.label_concepts,
        window=24,
        min_contexts=5,
        max_fraction=0.5,
        massive_factor=args.massive_factor or None,
    )
    info(
        "labels_held_out",
        f"{result['contexts']} contexts of 24 tokens from {len(store.texts)} test paragraphs ({len(store)} tokens)",
    )
    info(
        "labels_chosen",
        f"{len(result['concepts'])} of {result['eligible']} eligible concepts (live, firing in 5 to "
        f"{result['contexts'] // 2} held-out contexts)",
    )
    info("labels_lm_seconds_per_concept", f"{result[lm.name]['seconds']:.2f}")
    bench("concepts_labels_token_auroc_mean", result[token.name]["mean"], ">", 0.5)
    bench("concepts_labels_lm_auroc_mean", result[lm.name]["mean"], ">", 0.5)
    bench("concepts_labels_lm_minus_token_auroc_mean", result["difference_mean"], ">", 0)
    low, high = result["difference_ci"]
    info("labels_auroc_median", f"token {result[token.name]['median']:.3f}, LM {result[lm.name]['median']:.3f}")
    info(
        "labels_lm_minus_token_95ci",
        f"[{low:+.3f}, {high:+.3f}] over {len(result['difference'])} concepts; LM "
        f"higher on {result['higher'][lm.name]}, token higher on {result['higher'][token.name]}",
    )
    rows = zip(
        result["concepts"],
        result[token.name]["labels"],
        result[lm.name]["labels"],
        result[token.name]["auroc"],
        result[lm.name]["auroc"],
    )
    for c, t, l, a, b in list(rows)[:12]:
        print(f"  concept {c}: token {t!r} ({a:.2f}) | LM {l!r} ({b:.2f})", flush=True)
    if args.label_scores:
        label_scores_report(args, interp, result, [token, lm], model, tokenizer, candidates[-1].stem)


def label_scores_report(args, interp, compared, labellers, model, tokenizer, stem: str) -> None:
    """Detection and fuzzing scores (delphi's, ``score_labels``) of each labeller's labels of the compared concepts,
    SmolLM2 as the scorer, with the swapped-label control and bootstrap 95 % intervals over concepts. The scored
    interpretations are saved in ``--work-dir`` after each concept, so an interrupted run resumes."""
    from interp_widgets.concepts import ConceptInterpretation, LMScorer, score_labels

    scorer = LMScorer(model, tokenizer)
    chosen = compared["concepts"]
    rng = np.random.default_rng(0)
    per = {}
    for labeller in labellers:
        name = labeller.name
        path = args.work_dir / f"{stem}_scored_{name.replace(' ', '_')}.safetensors"
        labels = list(interp.labels)
        for c, label in zip(chosen, compared[name]["labels"]):
            labels[c] = label
        scored = interp.replace(labels=labels, label_source=name)
        if path.is_file():
            saved = ConceptInterpretation.load(path)
            if saved.labels == labels:
                scored = saved
        concepts = [c for c in chosen if labels[c]]
        start, asked = time.perf_counter(), 0
        for i, c in enumerate(concepts):
            if c not in scored.label_scores:
                score_labels(scored, scorer, concepts=[c], control=False)
                scored.save(path)
                asked += 1
                print(f"  {name}: scored {i + 1}/{len(concepts)} ({time.perf_counter() - start:.0f} s)", flush=True)
        if asked:
            info(
                f"labels_scores_{name.replace(' ', '_')}_seconds_per_label",
                f"{(time.perf_counter() - start) / asked:.1f}",
            )
        start = time.perf_counter()
        score_labels(scored, scorer, concepts=concepts, control=True)  # the scores are cached: this runs the control
        scored.save(path)
        control = scored.label_control
        info(
            f"labels_control_{name.replace(' ', '_')}",
            f"the true label outscores another concept's on {control['wins']} of {control['n']} concepts "
            f"({control['fraction']:.2f}; {control['ties']} ties; goal >= {control['threshold']}): the scorer "
            f"{'discriminates' if control['discriminates'] else 'cannot discriminate'} "
            f"({time.perf_counter() - start:.0f} s)",
        )
        per[name] = {c: scored.label_scores[c] for c in concepts}
    for kind in ("detection", "fuzzing"):
        for measure in ("balanced_accuracy", "auc"):
            parts = []
            for name, scores in per.items():
                values = np.array([s[kind][measure] for s in scores.values() if s[kind][measure] is not None], float)
                if not len(values):
                    parts.append(f"{name}: none")
                    continue
                low, high = _mean_ci(values, rng)
                above = sum(s[kind]["above_chance"] for s in scores.values())
                parts.append(
                    f"{name}: {values.mean():.3f} [{low:.3f}, {high:.3f}] over {len(values)}"
                    + (f", {above} above chance (p < 0.05)" if measure == "balanced_accuracy" else "")
                )
            info(f"labels_{kind}_{measure}_mean_95ci", "; ".join(parts))
    if len(per) == 2:
        (a, first), (b, second) = per.items()
        both = [c for c in first if c in second]
        diff = np.array([(_mean_score(second[c]) - _mean_score(first[c])) for c in both])
        low, high = _mean_ci(diff, rng)
        info(
            "labels_scores_lm_minus_token",
            f"mean of detection and fuzzing balanced accuracy, {b} minus {a}: {diff.mean():+.3f} "
            f"[{low:+.3f}, {high:+.3f}] over {len(both)} concepts ({b} higher on {int((diff > 0).sum())}, "
            f"{a} higher on {int((diff < 0).sum())}); SmolLM2 wrote the LM labels and scores them: it judges its own",
        )


def _mean_ci(values: np.ndarray, rng, resamples: int = 2000) -> tuple[float, float]:
    """The bootstrap 95 % interval of the mean of ``values`` (``resamples`` resamples with replacement)."""
    boot = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(1)
    return tuple(np.quantile(boot, [0.025, 0.975]))


def _mean_score(entry: dict) -> float:
    return (entry["detection"]["balanced_accuracy"] + entry["fuzzing"]["balanced_accuracy"]) / 2


# -------------------------------------------------------------------------------------------------------- browser
PAINT = """async ({esm, payload}) => {
  const state = payload.state;
  for (const {path, data} of payload.buffers) {
    const bin = atob(data); const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let node = state; for (const k of path.slice(0, -1)) node = node[k];
    node[path[path.length - 1]] = new DataView(bytes.buffer);
  }
  const handlers = new Map();
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; for (const h of handlers.get(`change:${k}`) ?? []) h(); },
    on: (e, h) => { if (!handlers.has(e)) handlers.set(e, new Set()); handlers.get(e).add(h); }, off() {}, save_changes() {}, send() {}};
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const t0 = performance.now();
  mod.default.render({model, el});
  await frame();
  const paint = performance.now() - t0;
  if (el.querySelectorAll(".iw-concept").length === 0) throw new Error("no concept listed");
  const box = el.querySelector(".iw-concept-search");
  const times = [], listed = [];
  for (const query of QUERIES) {
    const t1 = performance.now();
    box.value = query;
    box.dispatchEvent(new Event("input"));
    await frame();
    times.push(performance.now() - t1);
    listed.push(`${JSON.stringify(query)}: ${el.querySelector(".iw-pager")?.textContent ?? "?"}`);
  }
  return {paint, search: times, listed};
}"""

LOAD = """() => new Promise((resolve) => {
  const seen = () => document.querySelector(".iw-concept");
  if (seen()) return resolve(performance.now());
  new MutationObserver((_, observer) => { if (seen()) { observer.disconnect(); resolve(performance.now()); } })
    .observe(document, {childList: true, subtree: true});
})"""

SEARCHES = ["d", "de", "def", "defa", "default", "", "the", "class", "x"]


def synthetic_interpretation(n: int):
    """A ConceptInterpretation of ``n`` concepts with corpus words as tokens (for the browser alone)."""
    from interp_widgets.concepts import ConceptInterpretation

    rng = np.random.default_rng(0)
    words = sorted({w.strip(".,()") for t in demo.load_text_corpus("test")[:400] for w in t.split() if w.strip(".,()")})
    examples = []
    for c in range(n):
        picked = rng.choice(words, 10)
        examples.append(
            [
                {
                    "row": c * 10 + r,
                    "activation": float(10 - r),
                    "text_id": 0,
                    "position": r,
                    "token": str(w),
                    "context": ["the ", str(w), " is"],
                    "context_activations": [0.0, float(10 - r), 0.1],
                    "center": 1,
                }
                for r, w in enumerate(picked)
            ]
        )
    from interp_widgets.concepts.interpret import label_from_tokens

    labels = [label_from_tokens([e["token"] for e in ex]) for ex in examples]
    density = rng.uniform(1e-4, 0.05, n)
    density[rng.random(n) < 0.03] = 0.0
    return ConceptInterpretation.from_flat(
        method="SparseAutoencoder",
        layer="layer:15",
        labels=[lab if d else "" for lab, d in zip(labels, density)],
        density=density,
        mean=density,
        maximum=rng.uniform(1, 10, n),
        minimum=np.zeros(n),
        top_rows=np.zeros((n, 10), int),
        top_values=np.ones((n, 10)),
        examples=[ex if d else [] for ex, d in zip(examples, density)],
        top_texts=np.full((n, 10), -1),
        top_text_values=np.full((n, 10), np.nan),
        texts={},
        hist_counts=rng.integers(0, 50, (n, 30)),
        hist_edges=np.tile(np.linspace(0, 10, 31), (n, 1)),
        params={"rows": 1_000_000},
    )


def browser_part(args) -> None:
    """Export a 16k-concept browser and time it in headless chromium."""
    from _browser import chromium, open_page

    from interp_widgets.concepts import ConceptInterpretation
    from interp_widgets.widgets import ConceptBrowser
    from interp_widgets.widgets.export import export_state

    candidates = sorted(args.work_dir.glob(f"sae{args.n_concepts}_*_interp*.safetensors"))
    if candidates:
        interp = ConceptInterpretation.load(candidates[-1])
        info("browser_concepts", f"the scale run's interpretation {candidates[-1].name}")
    else:
        interp = synthetic_interpretation(args.n_concepts)
        info("browser_concepts", "synthetic (no scale run in --work-dir yet)")
    browser = ConceptBrowser(interp, page_size=20)
    page_path = args.work_dir / f"concept_browser_{interp.n_concepts}.html"
    page_path.parent.mkdir(parents=True, exist_ok=True)
    page_path.write_text(browser.to_html(title=f"{interp.n_concepts} concepts"), encoding="utf-8")
    info("browser_export_page_mb", f"{page_path.stat().st_size / 1e6:.2f}")
    payload = json.loads(json.dumps(export_state(browser)))
    paints, loads, searches, listed = [], [], [], ""
    with chromium() as headless:
        for _ in range(args.browser_trials):
            page = open_page(headless, browser._css, viewport={"width": 1200, "height": 900})
            result = page.evaluate(
                PAINT.replace("QUERIES", json.dumps(SEARCHES)), {"esm": browser._esm, "payload": payload}
            )
            paints.append(result["paint"])
            searches.extend(result["search"])
            listed = result["listed"]
            page.close()
            page = headless.new_page(viewport={"width": 1200, "height": 900})
            page.goto(page_path.as_uri(), wait_until="commit")
            loads.append(page.evaluate(LOAD))
            page.close()
    searches.sort()
    bench(f"concepts_browser_{interp.n_concepts // 1000}k_first_paint_ms", statistics.median(paints), "<", 200)
    bench(f"concepts_browser_{interp.n_concepts // 1000}k_search_ms", statistics.median(searches), "<", 50)
    info(
        "browser_trials",
        f"first paint {[round(p) for p in paints]} ms; search median "
        f"{statistics.median(searches):.1f}, worst {searches[-1]:.1f} ms over {len(searches)} keystrokes; "
        f"page load to the first listed concept {[round(v) for v in loads]} ms; last list: {listed!r}",
    )


PARTS = ("collect", "fit", "scale", "recovery", "matryoshka", "labels", "browser")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "interp_widgets_concepts_bench",
        help="where the scale store, SAE and interpretation are kept between runs",
    )
    parser.add_argument("--layer", default="layer:15")
    parser.add_argument("--store-texts", type=int, default=None, help="train paragraphs to collect (default all)")
    parser.add_argument(
        "--part-texts",
        type=int,
        default=2000,
        help="texts per collected part (an interrupted collection resumes at the last finished part)",
    )
    parser.add_argument(
        "--massive-factor",
        type=float,
        default=10.0,
        help="drop rows whose norm exceeds this multiple of the median (attention sinks); 0 keeps all",
    )
    parser.add_argument("--n-concepts", type=int, default=16384)
    parser.add_argument("--sae-k", type=int, default=32)
    parser.add_argument("--sae-rows", type=int, default=200_000, help="store rows the SAE is fitted from")
    parser.add_argument("--sae-epochs", type=int, default=1)
    parser.add_argument("--sae-lr", type=float, default=1e-3)
    parser.add_argument("--eval-rows", type=int, default=20_000, help="held-out rows for FVU and dead fraction")
    parser.add_argument(
        "--held-out-fraction",
        type=float,
        default=0.2,
        help="when the fit uses every part, the last texts of the last part held out for evaluation",
    )
    parser.add_argument("--interpret-rows", type=int, default=None, help="rows the interpreter scans (default all)")
    parser.add_argument("--refit", action="store_true", help="fit and interpret again even if saved results exist")
    parser.add_argument("--rec-rows", type=int, default=200_000)
    parser.add_argument("--rec-dim", type=int, default=128)
    parser.add_argument("--rec-atoms", type=int, default=1024)
    parser.add_argument("--rec-active", type=int, default=4)
    parser.add_argument("--rec-epochs", type=int, default=10)
    parser.add_argument(
        "--matryoshka-prefixes",
        type=int,
        nargs="+",
        default=None,
        help="prefix sizes of the Matryoshka SAE (default n/16, n/8, n/4 and n/2 of --n-concepts)",
    )
    parser.add_argument("--label-concepts", type=int, default=36)
    parser.add_argument("--label-texts", type=int, default=600, help="held-out test paragraphs for the contexts")
    parser.add_argument(
        "--label-scores",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score the labels by detection and fuzzing (SmolLM2 as the scorer, with the swapped-label control)",
    )
    parser.add_argument("--browser-trials", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--budget", default="256MB")
    parser.add_argument("--fit-rows", type=int, default=20_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--nmf-iter", type=int, default=500, help="iteration cap of both NMF solvers")
    parser.add_argument("--epochs", type=int, default=20, help="epoch cap of both TopK SAEs")
    parser.add_argument(
        "--families",
        nargs="+",
        choices=("nmf", "sae", *INTERPRETO_METHODS),
        default=["nmf", "sae", *INTERPRETO_METHODS],
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the sparse PCA, convex NMF and MP SAE ratios")
    parser.add_argument("--spca-alpha", type=float, default=1.0, help="sparse PCA's L1 weight (Interpreto's default)")
    parser.add_argument(
        "--convex-nmf-rows",
        type=int,
        default=2000,
        help="the first rows of the fit rows used for convex NMF (at most 10,000, our row cap)",
    )
    parser.add_argument(
        "--skip-equal-iterations",
        action="store_true",
        help="skip the info run of our NMF for the full --nmf-iter iterations",
    )
    parser.add_argument(
        "--sae-trials", type=int, default=3, help="back-to-back SAE timings per size (medians reported)"
    )
    parser.add_argument("--skip-collect", action="store_true")
    parser.add_argument("--skip-fit", action="store_true")
    parser.add_argument(
        "--fit-threads",
        type=int,
        default=1,
        help="torch and BLAS threads for the fits (small matrices; extra threads spin on a busy machine)",
    )
    args = parser.parse_args()
    if not 1 <= args.convex_nmf_rows <= 10_000:
        parser.error("--convex-nmf-rows must be between 1 and 10,000 (ConvexNMFConcepts' row cap)")
    torch.set_num_threads(os.cpu_count() or 1)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    parts = [
        p
        for p in PARTS
        if p in args.parts and not (p == "collect" and args.skip_collect) and not (p == "fit" and args.skip_fit)
    ]
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if "collect" in parts or "fit" in parts:
        model, tokenizer = demo.load_classifier(progress=False)
        if "collect" in parts:
            collection(model, tokenizer, args)
        if "fit" in parts:
            comparison(model, tokenizer, args)
    runs = (("scale", scale), ("recovery", recovery), ("matryoshka", matryoshka_part), ("labels", labels_part))
    for part, run in (*runs, ("browser", browser_part)):
        if part in parts:
            start = time.perf_counter()
            run(args)
            info(f"{part}_part_wall_seconds", f"{time.perf_counter() - start:.0f}")
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
