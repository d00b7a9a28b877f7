"""Run in circuit-tracer 0.5.0's venv: load the transcoder files that interp_widgets exported to FOLDER with
circuit-tracer's own loader (``utils.hf_utils.load_transcoders`` of the ``config.yaml``) and write, for the inputs in
FOLDER/inputs.npz, each layer's features and reconstruction to FOLDER/circuit_tracer.npz.

Usage: VENV/bin/python tests/circuit_tracer/read_transcoders.py FOLDER
"""

import sys
from pathlib import Path

import numpy as np
import torch
import yaml
from circuit_tracer.utils.hf_utils import load_transcoders

folder = Path(sys.argv[1])
config = yaml.safe_load((folder / "config.yaml").read_text())
transcoders = load_transcoders(config, device=torch.device("cpu"), lazy_encoder=False, lazy_decoder=False)
out = {"activation": np.array([type(tc.activation_function).__name__ for tc in transcoders.transcoders])}
with np.load(folder / "inputs.npz") as inputs:
    for name in inputs.files:
        layer = int(name.split("_")[1])
        tc = transcoders.transcoders[layer]
        x = torch.from_numpy(inputs[name])
        with torch.no_grad():
            acts = tc.encode(x)
            out[f"acts_{layer}"] = acts.numpy()
            out[f"out_{layer}"] = tc.decode(acts, x).numpy()
out["hooks"] = np.array([transcoders.feature_input_hook, transcoders.feature_output_hook])
np.savez(folder / "circuit_tracer.npz", **out)
print("read", len(transcoders.transcoders), "transcoders:", list(out["activation"]))
