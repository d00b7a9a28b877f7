"""Run inside the circuit-tracer venv (``tests/circuit_tracer/make_files.sh``), never in the project's own venv.

Makes attribution graphs two ways: random acyclic graphs built directly as circuit-tracer ``Graph`` objects (cases
0-7, with feature caps, custom targets and several thresholds), and real ones that circuit-tracer's ``attribute``
computes (nnsight backend, CPU, float32) for a tiny random Llama saved to a local folder, with a local tokenizer
and a random JumpReLU transcoder per layer loaded from safetensors files (case 8: all features; case 9: a
``max_feature_nodes`` cap; case 11: TopK transcoders with skip terms, built in Python with circuit-tracer's own
``TopK(k)``, their weights also written as ``topk_transcoder_{layer}.safetensors``; cases 12 and 13: a random JumpReLU
cross-layer transcoder written in circuit-tracer's CLT directory format, ``clt_mlp_in/`` and ``clt_resid_mid/``, and
loaded from its ``config.yaml`` by circuit-tracer's own ``load_transcoders_from_cache``). Each is pruned and scored with circuit-tracer's own ``prune_graph`` and
``compute_graph_scores`` and written with ``create_graph_files``. Everything goes to OUT (the first argument) as
plain files that interp_widgets reads without circuit-tracer:

- ``case{i}.npz``: the Graph's tensors (adjacency_matrix, active_features, selected_features, activation_values,
  logit_probabilities, logit_ids, input_tokens) and circuit-tracer's results (node_mask, edge_mask,
  cumulative_scores, scores = [replacement, completeness]); numpy arrays only (loaded with allow_pickle=False);
- ``case{i}.json``: the rest (n_layers, input_string, prompt_tokens, logit_labels, scan, thresholds, versions);
- ``case{i}/{slug}.json`` and ``case{i}/graph-metadata.json``: circuit-tracer's graph files.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from circuit_tracer import ReplacementModel, attribute
from circuit_tracer.attribution.targets import LogitTarget
from circuit_tracer.graph import Graph, compute_graph_scores, prune_graph
from circuit_tracer.transcoder.activation_functions import TopK
from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet, load_transcoder_set
from circuit_tracer.utils.caching import load_transcoders_from_cache
from circuit_tracer.utils.create_graph_files import create_graph_files
from circuit_tracer.utils.tl_nnsight_mapping import UnifiedConfig
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 60
TOPK = 6  # k of case 11's TopK transcoders
D_TRANSCODER = 96


def tokenizer_folder(out: Path) -> Path:
    """A local word-level tokenizer (``<s>`` = 0, ``<unk>`` = 1, ``w0`` = 2, ...): create_graph_files and the
    replacement model load their tokenizer by name, and nothing may download."""
    vocab = {"<s>": 0, "<unk>": 1} | {f"w{i}": i + 2 for i in range(VOCAB - 2)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = out / "tiny-llama"
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>").save_pretrained(folder)
    return folder


def attributed_graphs(folder: Path, out: Path) -> list:
    """circuit-tracer's own attribution of a prompt through a tiny random Llama and random JumpReLU transcoders."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    paths = {}
    for layer in range(config.num_hidden_layers):
        threshold = torch.rand(48) * 0.3
        threshold[: config.num_hidden_layers] = 1e9  # never active: 0.5.0's error ids would collide with them
        paths[layer] = str(out / f"transcoder_{layer}.safetensors")
        save_file(
            {
                "W_enc": torch.randn(48, 32) / 4,
                "W_dec": torch.randn(48, 32) / 6,
                "b_enc": torch.randn(48) * 0.1,
                "b_dec": torch.randn(32) * 0.05,
                "activation_function.threshold": threshold,
            },
            paths[layer],
        )
    transcoders = load_transcoder_set(
        paths,
        scan="tiny-jumprelu",
        feature_input_hook="mlp.hook_in",
        feature_output_hook="mlp.hook_out",
        device=torch.device("cpu"),
        lazy_encoder=False,
        lazy_decoder=False,
    )
    model = ReplacementModel.from_pretrained_and_transcoders(
        str(folder), transcoders, backend="nnsight", device=torch.device("cpu")
    )
    prompt = "w3 w7 w12 w5 w9 w7"
    graphs = [
        attribute(prompt, model, max_n_logits=4, desired_logit_prob=0.9, batch_size=16),
        attribute(prompt, model, max_n_logits=4, desired_logit_prob=0.9, batch_size=16, max_feature_nodes=40),
    ]
    # case 11: a TopK set with skip terms, built in Python with circuit-tracer's own TopK(k) (its files never load as
    # TopK); b_enc is large enough that every kept pre-activation is positive, where our TopK (then ReLU) agrees
    topk = {}
    for layer in range(config.num_hidden_layers):
        weights = {
            "W_enc": torch.randn(48, 32) / 4,
            "W_dec": torch.randn(48, 32) / 6,
            "b_enc": torch.rand(48) * 0.2 + 2.0,
            "b_dec": torch.randn(32) * 0.05,
            "W_skip": torch.randn(32, 32) / 10,
        }
        weights["b_enc"][: config.num_hidden_layers] = -1e9  # never active: 0.5.0's error ids would collide with them
        save_file(weights, str(out / f"topk_transcoder_{layer}.safetensors"))
        tc = SingleLayerTranscoder(32, 48, TopK(TOPK), layer, skip_connection=True, device=torch.device("cpu"),
                                   dtype=torch.float32)  # fmt: skip
        tc.load_state_dict({name: torch.nn.Parameter(value) for name, value in weights.items()})
        topk[layer] = tc
    topk_set = TranscoderSet(topk, feature_input_hook="mlp.hook_in", feature_output_hook="mlp.hook_out",
                             scan="tiny-topk")  # fmt: skip
    topk_model = ReplacementModel.from_pretrained_and_transcoders(
        str(folder), topk_set, backend="nnsight", device=torch.device("cpu")
    )
    graphs.append(attribute(prompt, topk_model, max_n_logits=4, desired_logit_prob=0.9, batch_size=16))
    # cases 12, 13: cross-layer transcoders from files (W_enc_{i} / W_dec_{i} safetensors and config.yaml), read at
    # the MLP's input and at resid_mid
    for seed, (name, hook) in enumerate(CLT_FOLDERS.values()):
        folder_clt = write_clt(out / name, hook, config.num_hidden_layers, seed=10 + seed)
        clt, _ = load_transcoders_from_cache(str(folder_clt.resolve()), device=torch.device("cpu"))
        assert type(clt).__name__ == "CrossLayerTranscoder", type(clt)
        clt_model = ReplacementModel.from_pretrained_and_transcoders(
            str(folder), clt, backend="nnsight", device=torch.device("cpu")
        )
        graphs.append(attribute(prompt, clt_model, max_n_logits=4, desired_logit_prob=0.9, batch_size=16))
    return graphs


def write_clt(folder: Path, input_hook: str, n_layers: int, *, seed: int, n: int = 40, d: int = 32) -> Path:
    """A random JumpReLU CLT in circuit-tracer's directory format: ``W_enc_{i}.safetensors`` (``W_enc_{i}`` (n, d),
    ``b_enc_{i}``, ``b_dec_{i}``, ``threshold_{i}``), ``W_dec_{i}.safetensors`` (``W_dec_{i}`` (n, L - i, d)) and
    ``config.yaml``."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_layers):
        threshold = torch.rand(n, generator=g) * 0.3
        threshold[:n_layers] = 1e9  # never active: 0.5.0's error ids would collide with them
        save_file(
            {
                f"W_enc_{i}": torch.randn(n, d, generator=g) / 4,
                f"b_enc_{i}": torch.randn(n, generator=g) * 0.1,
                f"b_dec_{i}": torch.randn(d, generator=g) * 0.05,
                f"threshold_{i}": threshold,
            },
            str(folder / f"W_enc_{i}.safetensors"),
        )
        save_file(
            {f"W_dec_{i}": torch.randn(n, n_layers - i, d, generator=g) / 6}, str(folder / f"W_dec_{i}.safetensors")
        )
    (folder / "config.yaml").write_text(
        "model_kind: cross_layer_transcoder\n"
        f"feature_input_hook: {input_hook}\n"
        "feature_output_hook: hook_mlp_out\n"
        f"scan: tiny-{folder.name}\n"
    )
    return folder


def random_graph(
    rng: torch.Generator, tokenizer_name: str, *, n_layers: int, n_pos: int, cap: float, custom: bool, collide=False
):
    """A random acyclic direct-effect graph in circuit-tracer's layout: features only read earlier layers at the
    same or earlier positions, errors and tokens have no inputs, logits read everything. ``collide`` adds feature 1
    of layer 0 at every position, whose 0.5.0 id 0_1_{pos} is also error (1, pos)'s (circuit-tracer issue #78)."""
    active = []
    for layer in range(n_layers):
        for pos in range(n_pos):
            count = int(torch.randint(0, 5, (1,), generator=rng))
            # feature indices >= n_layers: circuit-tracer 0.5.0's error ids would collide with layer-0 features below
            picks = torch.randperm(D_TRANSCODER - n_layers, generator=rng)[:count] + n_layers
            active += [(layer, pos, int(f)) for f in sorted(picks.tolist())]
            if collide and layer == 0:
                active.insert(len(active) - count, (0, pos, 1))
    active_features = torch.tensor(active, dtype=torch.long)
    activation_values = torch.rand(len(active), generator=rng) * 3 + 0.1
    n_active = len(active)
    keep = torch.rand(n_active, generator=rng) < cap if cap < 1 else torch.ones(n_active, dtype=torch.bool)
    selected = torch.where(keep)[0]
    feats = active_features[selected]
    n_f = len(selected)
    n_logits = 3 if not custom else 2
    n = n_f + n_layers * n_pos + n_pos + n_logits
    A = torch.zeros(n, n)
    err0, tok0, logit0 = n_f, n_f + n_layers * n_pos, n_f + n_layers * n_pos + n_pos
    for t, (layer, pos, _) in enumerate(feats.tolist()):
        for s, (sl, sp, _) in enumerate(feats.tolist()):
            if sl < layer and sp <= pos and torch.rand(1, generator=rng) < 0.5:
                A[t, s] = torch.randn(1, generator=rng)
        for el in range(layer):
            for ep in range(pos + 1):
                if torch.rand(1, generator=rng) < 0.4:
                    A[t, err0 + el * n_pos + ep] = torch.randn(1, generator=rng) * 0.7
        for tp in range(pos + 1):
            if torch.rand(1, generator=rng) < 0.5:
                A[t, tok0 + tp] = torch.randn(1, generator=rng) * 2
    for t in range(logit0, n):
        for s in range(logit0):
            if torch.rand(1, generator=rng) < 0.6:
                A[t, s] = torch.randn(1, generator=rng)
    probs = torch.sort(torch.rand(n_logits, generator=rng), descending=True).values
    probs = probs / probs.sum() * 0.9
    ids = (torch.randperm(VOCAB - 2, generator=rng)[:n_logits] + 2).tolist()
    targets = [LogitTarget(f"w{i - 2}", i) for i in ids]
    if custom:  # a CustomTarget-style virtual id >= the vocabulary size
        targets[-1] = LogitTarget("w3 - w4", VOCAB + 1)
    input_tokens = torch.randint(2, VOCAB, (n_pos,), generator=rng)
    cfg = UnifiedConfig(
        n_layers=n_layers,
        d_model=8,
        d_head=4,
        n_heads=2,
        d_mlp=16,
        d_vocab=VOCAB,
        tokenizer_name=tokenizer_name,
        model_name="random",
        original_architecture="LlamaForCausalLM",
    )
    return Graph(
        input_string=" ".join(f"w{i - 2}" for i in input_tokens.tolist()),
        input_tokens=input_tokens,
        active_features=active_features,
        adjacency_matrix=A,
        cfg=cfg,
        selected_features=selected,
        activation_values=activation_values,
        logit_targets=targets,
        logit_probabilities=probs,
        scan="random-transcoders",
        vocab_size=VOCAB,
    )


CASES = [  # (n_layers, n_pos, cap, custom target, node_threshold, edge_threshold)
    (2, 3, 1.0, False, 0.8, 0.98),
    (3, 5, 1.0, False, 0.8, 0.98),
    (4, 6, 1.0, True, 0.8, 0.98),
    (3, 4, 0.6, False, 0.8, 0.98),
    (4, 5, 1.0, False, 0.5, 0.9),
    (3, 6, 1.0, False, 0.95, 0.995),
    (2, 4, 0.7, True, 0.3, 0.6),
    (5, 6, 1.0, False, 1.0, 0.98),
]
ATTRIBUTED = [(0.8, 0.98)] * 5  # cases 8, 9, 11, 12 and 13: thresholds
COLLIDING = 10  # case 10: a random graph whose circuit-tracer JSON has colliding node ids
TOPK_CASE = 11  # case 11: circuit-tracer's graph with TopK skip transcoders
#: cases 12, 13: circuit-tracer's graphs with a cross-layer transcoder loaded from files: (folder, input hook)
CLT_FOLDERS = {12: ("clt_mlp_in", "mlp.hook_in"), 13: ("clt_resid_mid", "hook_resid_mid")}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    folder = tokenizer_folder(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    graphs = []
    for i, (n_layers, n_pos, cap, custom, node_t, edge_t) in enumerate(CASES):
        rng = torch.Generator().manual_seed(1000 + i)
        graph = random_graph(rng, str(folder), n_layers=n_layers, n_pos=n_pos, cap=cap, custom=custom)
        graphs.append((graph, node_t, edge_t))
    attributed = [(graph, *thresholds) for graph, thresholds in zip(attributed_graphs(folder, out), ATTRIBUTED)]
    graphs += attributed[:2]
    rng = torch.Generator().manual_seed(2000)
    graphs.append(
        (random_graph(rng, str(folder), n_layers=3, n_pos=4, cap=1.0, custom=False, collide=True), 0.99, 0.999)
    )
    graphs += attributed[2:]
    for i, (graph, node_t, edge_t) in enumerate(graphs):
        node_mask, edge_mask, cumulative = prune_graph(graph, node_t, edge_t)
        replacement, completeness = compute_graph_scores(graph)
        np.savez(
            out / f"case{i}.npz",
            adjacency_matrix=graph.adjacency_matrix.numpy(),
            active_features=graph.active_features.numpy(),
            selected_features=graph.selected_features.numpy(),
            activation_values=graph.activation_values.numpy(),
            logit_probabilities=graph.logit_probabilities.numpy(),
            logit_ids=np.array([t.vocab_idx for t in graph.logit_targets], dtype=np.int64),
            input_tokens=graph.input_tokens.numpy(),
            node_mask=node_mask.numpy(),
            edge_mask=edge_mask.numpy(),
            cumulative_scores=cumulative.numpy(),
            scores=np.array([replacement, completeness], dtype=np.float64),
        )
        meta = {
            "n_layers": graph.cfg.n_layers,
            "input_string": graph.input_string,
            "prompt_tokens": [tokenizer.decode(t) for t in graph.input_tokens],
            "logit_labels": [t.token_str for t in graph.logit_targets],
            "scan": graph.scan,
            "node_threshold": node_t,
            "edge_threshold": edge_t,
            "slug": f"case{i}",
            "versions": {name: version(name) for name in ("circuit-tracer", "torch", "transformers")},
        }
        (out / f"case{i}.json").write_text(json.dumps(meta, indent=1))
        create_graph_files(graph, f"case{i}", str(out / f"case{i}"), node_threshold=node_t, edge_threshold=edge_t)
    written = json.loads((out / f"case{COLLIDING}" / f"case{COLLIDING}.json").read_text())
    ids = [node["node_id"] for node in written["nodes"]]
    assert len(set(ids)) < len(ids), "case 10 should have colliding node ids"
    print(f"wrote {len(graphs)} circuit-tracer graphs to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
