"""Run in circuit-tracer 0.5.0's venv: load the cross-layer transcoder directory that interp_widgets exported to FOLDER
with circuit-tracer's own loader (``utils.caching.load_transcoders_from_cache`` of the absolute directory, which reads
its ``config.yaml``) and write, for the inputs in FOLDER/inputs.npz (``x`` of shape (layers, tokens, d)), the features
and every layer's reconstruction to FOLDER/circuit_tracer.npz.

Usage: VENV/bin/python tests/circuit_tracer/read_clt.py FOLDER
"""

import sys
from pathlib import Path

import numpy as np
import torch
from circuit_tracer.utils.caching import load_transcoders_from_cache

folder = Path(sys.argv[1]).resolve()
clt, _ = load_transcoders_from_cache(str(folder), device=torch.device("cpu"))
with np.load(folder / "inputs.npz") as inputs:
    x = torch.from_numpy(inputs["x"])
with torch.no_grad():
    acts = clt.encode(x)
    out = clt.decode(acts.to_sparse())
np.savez(
    folder / "circuit_tracer.npz",
    kind=np.array(type(clt).__name__),
    activation=np.array(type(clt.activation_function).__name__),
    hooks=np.array([clt.feature_input_hook, clt.feature_output_hook]),
    acts=acts.numpy(),
    out=out.numpy(),
)
print("read a", type(clt).__name__, "of", clt.n_layers, "layers")
