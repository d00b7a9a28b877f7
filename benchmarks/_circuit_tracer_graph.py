"""Run inside circuit-tracer 0.5.0's venv (``benchmarks/circuits.py`` part ``ct`` calls it): time circuit-tracer's
``attribute`` on the model folder and transcoder weights in FOLDER, after loading both.

FOLDER holds ``model/`` (a Hugging Face folder with its tokenizer), ``layer_{i}.safetensors`` (our transcoders'
raw weights: W_enc, b_enc, W_dec, b_dec, optional W_skip and threshold) and ``job.json`` (prompt, per-layer
activation and k, batch_size, max_feature_nodes, update_interval). Writes ``result.json`` (seconds, tokens) and
``adjacency.npz`` (the adjacency and the selected features as (layer, pos, feature), sorted).

Usage: VENV/bin/python benchmarks/_circuit_tracer_graph.py FOLDER
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from circuit_tracer import ReplacementModel, attribute
from circuit_tracer.transcoder.activation_functions import JumpReLU, TopK
from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
from safetensors.torch import load_file

torch.set_num_threads(2)
folder = Path(sys.argv[1])
job = json.loads((folder / "job.json").read_text())
transcoders = {}
for layer, spec in enumerate(job["layers"]):
    weights = load_file(folder / f"layer_{layer}.safetensors")
    threshold = weights.pop("threshold", None)
    d_tr, d_model = weights["W_enc"].shape
    if spec["activation"] == "topk":
        # ours keeps the k largest pre-activations and then drops the negative ones among them (sparsify's order: a
        # token with fewer than k positive pre-activations has fewer than k active features); circuit-tracer's TopK
        # alone keeps negative ones, so the activation given to it is its TopK followed by a ReLU
        activation = torch.nn.Sequential(TopK(spec["k"]), torch.nn.ReLU())
    elif spec["activation"] == "jumprelu":
        activation = JumpReLU(threshold, 0.1)
    else:
        activation = torch.nn.ReLU()
    tc = SingleLayerTranscoder(d_model, d_tr, activation, layer, skip_connection="W_skip" in weights,
                               device=torch.device("cpu"), dtype=torch.float32)  # fmt: skip
    tc.load_state_dict(weights, strict=False)
    transcoders[layer] = tc
model = ReplacementModel.from_pretrained_and_transcoders(
    str(folder / "model"),
    TranscoderSet(transcoders, feature_input_hook="mlp.hook_in", feature_output_hook="mlp.hook_out", scan="ours"),
    backend="nnsight",
    device=torch.device("cpu"),
    dtype=torch.float32,
)
start = time.perf_counter()
graph = attribute(job["prompt"], model, batch_size=job["batch_size"], max_feature_nodes=job["max_feature_nodes"],
                  update_interval=job["update_interval"])  # fmt: skip
seconds = time.perf_counter() - start
selected = graph.active_features[graph.selected_features]
order = np.lexsort(selected.numpy().T[::-1])
n = len(order)
adjacency = graph.adjacency_matrix.numpy()
index = np.r_[order, np.arange(n, len(adjacency))]
np.savez(folder / "adjacency.npz", adjacency=adjacency[np.ix_(index, index)], features=selected.numpy()[order])
(folder / "result.json").write_text(
    json.dumps({"seconds": seconds, "tokens": graph.input_tokens.tolist(), "n_logits": len(graph.logit_targets)})
)
print(f"circuit-tracer: {seconds:.1f} s, {n} features")
