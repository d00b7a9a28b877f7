"""Tests against files that circuit-tracer 0.5.0 itself wrote, in its own venv.

circuit-tracer pins transformers <= 4.57.3 and nnsight 0.6.1, so it never shares a venv with interp_widgets: the
two sides exchange files. ``tests/circuit_tracer/make_files.sh OUT`` builds the circuit-tracer venv and runs
``generate.py`` there, which writes numpy and JSON files to OUT; then, in the project's venv,
``CIRCUIT_TRACER_FILES=OUT python -m pytest tests/circuit_tracer`` reads them. The directory is collected only when
it is named on the command line (the plain ``python -m pytest`` leaves it out), and a run without
``CIRCUIT_TRACER_FILES`` fails with the command that makes the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_ignore_collect(collection_path, config):
    """Collect this directory's tests only when it (or a file in it) is named on the command line."""
    path = os.path.abspath(str(collection_path))
    if not path.startswith(_HERE + os.sep):
        return None
    named = [os.path.abspath(str(arg).split("::")[0]) for arg in config.args]
    wanted = any(arg == _HERE or arg.startswith(_HERE + os.sep) for arg in named)
    return None if wanted else True


@pytest.fixture(scope="session")
def ct_files() -> Path:
    folder = os.environ.get("CIRCUIT_TRACER_FILES")
    if not folder or not Path(folder, "case0.npz").is_file():
        pytest.fail(
            "CIRCUIT_TRACER_FILES must name the folder written by circuit-tracer: run "
            "`bash tests/circuit_tracer/make_files.sh /tmp/ct-files` and then "
            "`CIRCUIT_TRACER_FILES=/tmp/ct-files python -m pytest tests/circuit_tracer`"
        )
    return Path(folder)


def read_case(folder: Path, i: int):
    """circuit-tracer's Graph (as attributes), its results and its graph JSON for case ``i``."""
    import torch

    with np.load(folder / f"case{i}.npz", allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads((folder / f"case{i}.json").read_text())
    graph = SimpleNamespace(
        adjacency_matrix=torch.from_numpy(arrays["adjacency_matrix"]),
        active_features=torch.from_numpy(arrays["active_features"]),
        selected_features=torch.from_numpy(arrays["selected_features"]),
        activation_values=torch.from_numpy(arrays["activation_values"]),
        logit_targets=list(zip(meta["logit_labels"], arrays["logit_ids"].tolist())),
        logit_probabilities=torch.from_numpy(arrays["logit_probabilities"]),
        input_tokens=torch.from_numpy(arrays["input_tokens"]),
        input_string=meta["input_string"],
        cfg=SimpleNamespace(n_layers=meta["n_layers"]),
        scan=meta["scan"],
    )
    graph_json = json.loads((folder / f"case{i}" / f"case{i}.json").read_text())
    return graph, arrays, meta, graph_json


COLLIDING = 10  # a random graph whose circuit-tracer JSON has colliding node ids (its issue #78)
N_CASES = 10  # 0-7: random graphs; 8, 9: circuit-tracer's attribute() on a tiny Llama (9 with a feature cap)
TOPK_CASE = 11  # circuit-tracer's attribute() on the same Llama with TopK skip transcoders built in Python
#: the graphs circuit-tracer computed (not built at random), with the transcoder files and activation of each
ATTRIBUTED = {8: ("transcoder", "jumprelu"), 9: ("transcoder", "jumprelu"), TOPK_CASE: ("topk_transcoder", "topk")}
#: circuit-tracer's attribute() with a cross-layer transcoder loaded from its CLT directory: case -> (folder, input point)
CLT_CASES = {12: ("clt_mlp_in", "mlp_in"), 13: ("clt_resid_mid", "resid_mid")}
