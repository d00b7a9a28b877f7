"""js/tests/fixtures/circuit_math.json, the fixtures of the circuit view's in-browser maths (js/tests/circuit_math.test.js),
is what scripts/circuit_fixtures.py builds from the current AttributionGraph: a stale fixture fails here. Kept nodes and
edges must be equal; floats equal to BLAS rounding."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "circuit_fixtures.py"


@pytest.fixture(scope="module")
def fixtures():
    spec = importlib.util.spec_from_file_location("circuit_fixtures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same(built, committed, where="fixture"):
    if isinstance(committed, dict):
        assert isinstance(built, dict) and sorted(built) == sorted(committed), where
        for key in committed:
            _same(built[key], committed[key], f"{where}.{key}")
    elif isinstance(committed, list):
        assert isinstance(built, list) and len(built) == len(committed), f"{where}: length"
        for k, (b, c) in enumerate(zip(built, committed)):
            _same(b, c, f"{where}[{k}]")
    elif isinstance(committed, float) and not where.endswith("margin"):
        assert math.isclose(built, committed, rel_tol=1e-6, abs_tol=1e-12), where
    elif isinstance(committed, float):
        assert math.isclose(built, committed, rel_tol=0.05), where
    else:
        assert built == committed, where


def test_the_committed_fixtures_are_what_the_script_builds_now(fixtures):
    committed = json.loads(fixtures.TARGET.read_text(encoding="utf-8"))
    _same(fixtures.build(), committed)


def test_the_fixtures_hold_python_prune_and_scores_of_the_float16_weights(fixtures):
    committed = json.loads(fixtures.TARGET.read_text(encoding="utf-8"))
    small = committed["graphs"][0]
    graph = fixtures.seeded_graph(*next(spec for spec in fixtures.GRAPHS if spec[0] == "small")[1:7])
    weights = np.array(small["edges"]["weight_f16"], dtype=np.uint16).view(np.float16).astype(np.float32)
    assert np.array_equal(graph.adjacency[small["edges"]["dst"], small["edges"]["src"]], weights)
    assert np.count_nonzero(graph.adjacency) == len(weights)
    first = small["prune"][0]
    pruned = graph.prune(first["node_threshold"], first["edge_threshold"])
    assert pruned.node_ids == [small["node_ids"][i] for i in first["nodes"]]
    assert np.count_nonzero(pruned.adjacency) == len(first["edges"])
    pins = small["scores"][2]["pinned"]
    scores = graph.scores(pinned=[small["node_ids"][i] for i in pins])
    assert scores.replacement == pytest.approx(small["scores"][2]["replacement"], rel=1e-9)
    assert all(p["margin"] >= fixtures.MIN_MARGIN for g in committed["graphs"] for p in g["prune"])


def test_a_threshold_within_float32_rounding_of_a_tie_is_refused(fixtures):
    # this graph's 0.8 / 0.98 edge threshold lies 3e-6 (relative) from another score: a browser computing in float64
    # may fairly keep one edge more or less than Python's float32, so no fixture may use it
    graph = fixtures.seeded_graph(11, 6, 8, 6, 3, 14).prune(0.9, 0.99).replace(pruning=None)
    with pytest.raises(ValueError, match="margin"):
        fixtures.graph_fixture("tied", graph, [(0.8, 0.98)], 0)
