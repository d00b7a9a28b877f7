"""Attribution graphs on SmolLM2 (issue 33): graph time, memory and scores on the committed prompts, ours ÷
circuit-tracer on the same model, transcoders and prompt, and how well a graph predicts interventions.

SmolLM2-135M-Instruct (``demo.load_lm``), 2 threads, the 8 prompts of ``benchmarks/circuits_prompts.json``, and a
transcoder set given by ``--transcoders PATH`` (a ``TranscoderSet.save`` file; the default build's cache when the
build command has made it). Prints ``bench:`` / ``info:`` lines:

Part ``graph`` (every prompt, ``max_feature_nodes=4096``, ``batch_size=64``):
1. graph_seconds: the median and largest time of ``attribution_graph`` per prompt (goal <= 90 s), and the process's
   peak RSS (goal <= 4 GB at this batch size; the model and transcoders included).
2. replacement / completeness: the median scores as computed, and with the skip output folded into the error nodes
   (``skip_in_errors=True``); the goal >= 0.6 applies to the second.

Part ``ct``: ours ÷ circuit-tracer 0.5.0 on the first prompt. The dequantised SmolLM2 is written to a local HF folder
and the transcoders to weight files; circuit-tracer (its venv: ``--ct-venv``, nnsight backend, CPU, float32) loads
both before its timer starts and runs ``attribute`` with the same ``batch_size``, ``max_feature_nodes`` and
``update_interval``; TopK sets are rebuilt there with its ``TopK(k)`` followed by a ReLU, since ours drops the negative
pre-activations among the top k and its ``TopK`` alone keeps them (files would load as ReLU). Goal <= 0.5. The
relative Frobenius difference of the two adjacencies on their common nodes is printed.

Part ``interventions`` (first prompt): zero the most influential features one at a time with
``feature_intervention`` and compare every node's change with the graph: constrained (must equal −A[:, s]),
attention frozen but MLPs live, and the real model (measured change of the top logit against the graph's total
effect, direct + indirect through features; no goal: reported).

``--random-topk N`` uses random TopK transcoders (N latents per layer, k = 32, a skip term; seeded) instead of a
trained set: for the timing parts only (the number of active features, not their quality, sets the cost); its
scores and intervention figures mean nothing.

``--tiny`` runs on the tiny Llama with a quickly fitted set (a check that the script runs; numbers mean nothing).

Example:
    $ python benchmarks/circuits.py --transcoders ~/.cache/interp_widgets/smollm2-transcoders.safetensors
    $ python benchmarks/circuits.py --tiny --parts graph interventions
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

import _repo  # noqa: E402,F401  (the repository root on sys.path)

from interp_widgets.circuits import TranscoderSet, attribution_graph, feature_intervention  # noqa: E402

HERE = Path(__file__).resolve().parent
PARTS = ("graph", "ct", "interventions")
SETTINGS = {"max_feature_nodes": 4096, "batch_size": 64, "update_interval": 4}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def load(args):
    if args.tiny:
        from interp_widgets.concepts import Transcoder
        from interp_widgets.demo import corpus
        from tests import tiny_models

        model, tokenizer = tiny_models.llama_lm()
        tcs = TranscoderSet.fit(model, tokenizer, corpus()[:60], transcoder=Transcoder(48, k=4, skip=True,
                                max_epochs=3, progress=False))  # fmt: skip
        return model, tokenizer, tcs, [{"prompt": "The cat sat on the mat because", "answer": None}]
    from interp_widgets import demo

    model, tokenizer = demo.load_lm(progress=False)
    if args.random_topk:
        tcs = random_topk(model, args.random_topk)
    elif not args.transcoders:
        sys.exit("give --transcoders PATH (a TranscoderSet.save file for SmolLM2) or --random-topk N")
    else:
        tcs = TranscoderSet.load(args.transcoders, model=model)
    prompts = json.loads((HERE / "circuits_prompts.json").read_text())["prompts"]
    return model, tokenizer, tcs, prompts


def random_topk(model, n: int, k: int = 32) -> TranscoderSet:
    from interp_widgets.concepts import Transcoder

    generator = torch.Generator().manual_seed(0)
    width = model.config.hidden_size
    return TranscoderSet({
        layer: Transcoder.from_weights(
            W_enc=torch.randn(n, width, generator=generator) / width**0.5,
            b_enc=torch.full((n,), 0.5),  # every kept pre-activation positive: circuit-tracer's TopK agrees
            W_dec=torch.randn(n, width, generator=generator) / n**0.5,
            b_dec=torch.zeros(width),
            W_skip=torch.randn(width, width, generator=generator) / width,
            activation="topk",
            k=k,
        )
        for layer in range(model.config.num_hidden_layers)
    })  # fmt: skip


def graph_part(model, tokenizer, tcs, prompts, progress) -> None:
    times, scores, folded = [], [], []
    for item in prompts:
        start = time.perf_counter()
        graph = attribution_graph(model, tokenizer, item["prompt"], tcs, progress=progress, **SETTINGS)
        times.append(time.perf_counter() - start)
        scores.append(graph.scores())
        folded.append(
            attribution_graph(
                model, tokenizer, item["prompt"], tcs, skip_in_errors=True, progress=progress, **SETTINGS
            ).scores()  # fmt: skip
        )
        print(
            f"info: {item['prompt'][:40]!r}: {len(graph.token_ids)} tokens, {len(graph.features)} of "
            f"{graph.provenance.settings['n_active_features']} features, {times[-1]:.1f} s, replacement "
            f"{scores[-1].replacement:.3f} (skip folded {folded[-1].replacement:.3f}), completeness "
            f"{scores[-1].completeness:.3f} (skip folded {folded[-1].completeness:.3f})",
            flush=True,
        )
    print(f"bench: graph_seconds median {np.median(times):.1f} max {max(times):.1f} (goal <= 90)")
    print(f"bench: peak_rss_gb {peak_rss_gb():.2f} at batch_size {SETTINGS['batch_size']} (goal <= 4)")
    for name, values in (("as computed", scores), ("skip folded into errors", folded)):
        print(
            f"bench: scores {name}: replacement median {np.median([s.replacement for s in values]):.3f}, "
            f"completeness median {np.median([s.completeness for s in values]):.3f}"
            + (" (goal >= 0.6)" if "folded" in name else "")
        )


def ct_part(model, tokenizer, tcs, prompts, venv: str) -> None:
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        sys.exit(f"circuit-tracer's venv {venv} has no python: build it with tests/circuit_tracer/make_files.sh")
    from interp_widgets.circuits.attribution import graph_prompt

    prompt = graph_prompt(tokenizer, prompts[0]["prompt"])[0][0].tolist()  # the same tokens on both sides
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        # transformers 5 names its tokenizers' class TokenizersBackend, which circuit-tracer's transformers 4.57
        # does not know; the tokenizer.json itself is the same
        config_path = folder / "model" / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_path.write_text(json.dumps(config))
        # and transformers 5 writes rope_parameters where 4.57 reads rope_theta (else it falls back to 10,000)
        config_path = folder / "model" / "config.json"
        config = json.loads(config_path.read_text())
        rope = config.get("rope_parameters") or {}
        config.update({"rope_theta": rope.get("rope_theta", 10_000.0), "torch_dtype": "float32"})
        if rope.get("rope_type", "default") != "default":
            config["rope_scaling"] = rope
        config_path.write_text(json.dumps(config))
        layers = []
        # circuit-tracer's TranscoderSet takes one skip flag for every layer from layer 0's transcoder: a set whose
        # layer 0 has no skip (the default build's) would lose every other layer's skip there, so a skip-less layer
        # of a set with skips goes over with a zero W_skip, which adds nothing
        any_skip = any(tcs[layer].skip for layer in range(tcs.n_layers))
        for layer in range(tcs.n_layers):
            from safetensors.torch import save_file

            weights = {name: t.contiguous() for name, t in tcs[layer].folded().items()}
            if any_skip and "W_skip" not in weights:
                width = weights["W_dec"].shape[1]
                weights["W_skip"] = torch.zeros(width, width, dtype=weights["W_dec"].dtype)
            save_file(weights, str(folder / f"layer_{layer}.safetensors"))
            layers.append({"activation": tcs[layer].activation, "k": tcs[layer].k_ if tcs[layer].activation ==
                           "topk" else None})  # fmt: skip
        (folder / "job.json").write_text(json.dumps({"prompt": prompt, "layers": layers, **SETTINGS}))
        done = subprocess.run(
            [str(python), str(HERE / "_circuit_tracer_graph.py"), str(folder)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        if done.returncode:
            print(f"info: circuit-tracer could not run SmolLM2 here:\n{done.stderr[-3000:]}")
            return
        theirs = json.loads((folder / "result.json").read_text())
        with np.load(folder / "adjacency.npz") as data:
            their_adjacency, their_features = data["adjacency"], data["features"]
    start = time.perf_counter()
    ours = attribution_graph(model, tokenizer, theirs["tokens"], tcs, progress=False, **SETTINGS)
    seconds = time.perf_counter() - start
    mine = {tuple(f): i for i, f in enumerate(ours.features.tolist())}
    common = [(mine[tuple(f)], j) for j, f in enumerate(their_features.tolist()) if tuple(f) in mine]
    n_ours, n_theirs = len(ours.features), len(their_features)
    n_logits = min(len(ours.logits), theirs["n_logits"])  # salient targets near the threshold may differ by one
    shared = ours.n_nodes - n_ours - len(ours.logits)  # errors and tokens
    keep_ours = [i for i, _ in common] + list(range(n_ours, n_ours + shared + n_logits))
    keep_theirs = [j for _, j in common] + list(range(n_theirs, n_theirs + shared + n_logits))
    a = ours.adjacency[np.ix_(keep_ours, keep_ours)]
    b = their_adjacency[np.ix_(keep_theirs, keep_theirs)]
    print(f"info: circuit-tracer {theirs['seconds']:.1f} s, ours {seconds:.1f} s; {len(common)} of {n_ours} features "
          f"in common ({n_theirs} theirs); logit targets {len(ours.logits)} ours, {theirs['n_logits']} theirs; "
          f"relative Frobenius difference {np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")  # fmt: skip
    # where a token has fewer than k positive pre-activations, circuit-tracer's TopK alone would keep negative ones:
    # without the ReLU given to it (_circuit_tracer_graph.py) its errors, and at k = 64 its active features, differ
    n_common, n_pos = len(common), len(ours.token_ids)
    errors = np.arange(n_common, n_common + shared - n_pos)
    others = np.r_[np.arange(n_common), np.arange(n_common + shared - n_pos, n_common + shared)]

    def rel(cols):
        return np.linalg.norm(a[:, cols] - b[:, cols]) / max(np.linalg.norm(b[:, cols]), 1e-30)

    per_error = np.linalg.norm(a[:, errors] - b[:, errors], axis=0) / np.maximum(
        np.linalg.norm(b[:, errors], axis=0), 1e-30
    )
    short = tcs.topk_shortfall(model, tokenizer, [prompts[0]["prompt"]]) if tcs[0].activation == "topk" else {}
    print(f"info: feature and token columns differ by {rel(others):.2e}; error columns by {rel(errors):.2e}, "
          f"{int((per_error > 1e-4).sum())} of {len(errors)} (layer, position) error columns above 1e-4; "
          f"layers whose tokens lack k positive pre-activations (share of tokens): "
          f"{ {layer: round(v, 3) for layer, v in short.items() if v > 0} }")  # fmt: skip
    print(f"bench: ours_over_circuit_tracer {seconds / theirs['seconds']:.3f} (goal <= 0.5)")


def interventions_part(model, tokenizer, tcs, prompts) -> None:
    graph = attribution_graph(model, tokenizer, prompts[0]["prompt"], tcs, progress=False, **SETTINGS)
    n_feat, n = len(graph.features), graph.n_nodes
    rows = np.r_[np.arange(n_feat), np.arange(n - len(graph.logits), n)]
    adjacency = graph.adjacency.astype(np.float64)
    total_logits = graph.total_effects()  # direct + indirect through features
    influence = np.abs(adjacency[rows, :n_feat]).sum(0)
    worst = 0.0
    for s in np.argsort(-influence)[:5]:
        layer, pos, feature = (int(v) for v in graph.features[s])
        change = {}
        for mode, kwargs in (
            ("constrained", {"constrained": True}),
            ("frozen_attention", {"freeze_attention": True}),
            ("real", {"freeze_attention": False}),
        ):
            outcome = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], **kwargs)
            change[mode] = outcome
        direct = adjacency[rows, s]
        measured = change["constrained"].node_change[rows]
        worst = max(worst, float(np.abs(measured + direct).max() / max(np.abs(direct).max(), 1e-12)))
        target = int(graph.logits.ids[0])
        graph_total = -float(total_logits[0, s])
        for mode in ("constrained", "frozen_attention", "real"):
            got = float(change[mode].logits[target] - change[mode].base_logits[target])
            got_demeaned = got - float(np.mean(change[mode].logits - change[mode].base_logits))
            print(f"info: feature {layer}_{feature}_{pos} zeroed, {mode}: demeaned logit of {graph.logits.labels[0]!r} "
                  f"moved {got_demeaned:+.4f}; the graph's total effect {graph_total:+.4f}, direct "
                  f"{-float(adjacency[n - len(graph.logits), s]):+.4f}")  # fmt: skip
    print(f"bench: constrained_intervention_max_relative_error {worst:.2e} (goal <= 1e-4)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--transcoders", default=None)
    parser.add_argument("--ct-venv", default=os.environ.get("CIRCUIT_TRACER_VENV", "/work/venv_ct"))
    parser.add_argument("--random-topk", type=int, default=0, metavar="N")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    model, tokenizer, tcs, prompts = load(args)
    print(f"info: {tcs!r}; peak RSS after loading {peak_rss_gb():.2f} GB")
    if "graph" in args.parts:
        graph_part(model, tokenizer, tcs, prompts, args.progress)
    if "ct" in args.parts:
        ct_part(model, tokenizer, tcs, prompts, args.ct_venv)
    if "interventions" in args.parts:
        interventions_part(model, tokenizer, tcs, prompts)


if __name__ == "__main__":
    main()
