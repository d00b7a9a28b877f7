"""AttributionGraph is made of a few parts (issue 30): the prompt's input with its one TokenLayout, the nodes, the
logits' Targets, the adjacency and the provenance; every old flat name reads through FLAT_ATTRIBUTES."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from interp_widgets.circuits import (
    FLAT_ATTRIBUTES,
    AttributionGraph,
    FeatureCap,
    GraphInput,
    GraphNodes,
    GraphProvenance,
    example_graph,
)
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout, joined_layout

from .test_graph import random_graph

OLD_FIELDS = ("adjacency", "features", "activations", "logits", "prompt", "prompt_tokens", "token_ids", "n_layers",
              "errors", "scan", "pruning", "cap", "view")  # fmt: skip


def test_few_parts_and_every_old_name():
    assert len(dataclasses.fields(AttributionGraph)) <= 12
    assert len(inspect.signature(AttributionGraph).parameters) <= 12
    for part in (GraphInput, GraphNodes, GraphProvenance):
        assert len(inspect.signature(part).parameters) <= 12
    assert set(OLD_FIELDS) == {*FLAT_ATTRIBUTES, "adjacency", "logits"}
    graph = random_graph(2).prune()
    assert isinstance(graph.input.layout, TokenLayout) and isinstance(graph.logits, Targets)
    assert graph.prompt_tokens == graph.input.layout.tokens and graph.prompt == graph.input.text == "p"
    assert graph.token_ids is graph.input.token_ids and graph.features is graph.nodes.features
    assert graph.errors is graph.nodes.errors and graph.pruning is graph.provenance.pruning
    with pytest.raises(AttributeError):
        graph.features = np.zeros((0, 3))  # read-only


def test_from_flat_round_trip_and_bad_names():
    graph = random_graph(3).prune().replace(cap=FeatureCap(50), view={"pinnedIds": ["E_20_0"]})
    flat = {name: getattr(graph, name) for name in OLD_FIELDS}
    again = AttributionGraph.from_flat(**flat)
    assert again.node_ids == graph.node_ids and again.cap == graph.cap and again.view == graph.view
    assert np.array_equal(again.adjacency, graph.adjacency) and again.scores() == graph.scores()
    with pytest.raises(TypeError, match=r"unknown attribution graph values \['prompt_text'\]"):
        AttributionGraph.from_flat(**flat, prompt_text="p")
    del flat["n_layers"]
    with pytest.raises(TypeError, match=r"from_flat needs \['n_layers'\]"):
        AttributionGraph.from_flat(**flat)


def test_parts_are_checked():
    graph = example_graph()
    with pytest.raises(TypeError, match="nodes must be a GraphNodes, got dict.*from_flat"):
        AttributionGraph(input=graph.input, nodes={}, logits=graph.logits, adjacency=graph.adjacency)
    with pytest.raises(TypeError, match="layout must be a TokenLayout"):
        GraphInput("ab", ["a", "b"], [1, 2])
    with pytest.raises(ValueError, match="prompt_tokens has 2 entries for 3 token ids"):
        GraphInput.of("ab", ["a", "b"], [1, 2, 3])
    with pytest.raises(ValueError, match="features has a position outside 0..1"):
        graph.replace(nodes=GraphNodes(features=[[0, 2, 7]], activations=[1.0], n_layers=1))


def test_replace_by_part_or_flat_name():
    graph = example_graph()
    renamed = graph.replace(prompt_tokens=["<s>", "b"], prompt="b")
    assert renamed.input.layout.text == "<s>b" and renamed.input.layout.offsets.tolist() == [[0, 3], [3, 4]]
    assert renamed.prompt == "b" and renamed.token_ids.tolist() == [10, 11] and renamed.nodes is graph.nodes
    assert graph.prompt_tokens == ["a", "b"]  # the original is unchanged
    with pytest.raises(TypeError, match="pass input= or its values by name"):
        graph.replace(input=graph.input, prompt_tokens=["x", "y"])
    with pytest.raises(TypeError, match="pass nodes= or its values by name"):
        graph.replace(nodes=graph.nodes, scan="x")
    layout = joined_layout(["a", "b"], special_mask=[True, False])
    special = graph.replace(input=GraphInput("ab", layout, [10, 11]))
    assert special.input.layout.special_mask.tolist() == [True, False] and special.node_ids == graph.node_ids
