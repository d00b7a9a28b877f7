"""``feature_intervention``: set transcoder features of a prompt to new values in the real model and see what
follows, as circuit-tracer's ``feature_intervention`` does.

Setting feature ``f`` of layer ``l`` at position ``p`` to ``v`` adds ``(v − a) · W_dec[f]`` to that block's MLP output
at ``p`` (for a :class:`~interp_widgets.circuits.CrossLayerTranscoderSet`, ``(v − a) · W_dec[l][f, l' − l]`` to the
MLP output of every layer ``l' ≥ l`` it writes to), where ``a`` is the feature's activation in this run (computed by the transcoder from the MLP's live input,
so an upstream intervention changes it). The MLPs themselves still run: effects propagate through the real model.

- ``freeze_attention=True`` (the default, as in circuit-tracer) holds every attention pattern at its value on the
  prompt, so the graph's frozen attention is what the intervention meets;
- ``constrained=True`` holds every MLP output and norm scale at its value on the prompt too, uses the prompt's
  activations as ``a``, and keeps each transcoder's skip term live (the output moves by the change of
  ``W_skip x``): the measured change of every graph node is then the graph's direct effect (circuit-tracer's
  ``constrained_layers`` over every layer).

Example:
    >>> from interp_widgets.circuits import TranscoderSet, attribution_graph
    >>> from interp_widgets.concepts import Transcoder
    >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
    >>> graph = attribution_graph(lm, lm_tokenizer, "The cat sat on the", tcs, progress=False)
    >>> layer, pos, feature = graph.features[0]
    >>> outcome = feature_intervention(lm, lm_tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], max_new_tokens=3)
    >>> list(outcome.top(3).columns), len(outcome.continuation) == len(outcome.base_continuation) == 3
    (['token', 'id', 'p_before', 'p_after', 'logit_change'], True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from interp_widgets.circuits._runner import register_intervention_runner
from interp_widgets.circuits.attribution import (
    _activation,
    _check_inputs,
    _decoder,
    _skip,
    _unembedding,
    graph_prompt,
    replacement_state,
)
from interp_widgets.circuits.cross_layer import CrossLayerTranscoderSet
from interp_widgets.circuits.graph import AttributionGraph
from interp_widgets.circuits.transcoders import TranscoderSet, transcoder_points
from interp_widgets.interventions.freeze import freezing
from interp_widgets.layers import evaluation, register, register_edit
from interp_widgets.validation import check_int, check_number

__all__ = ["FeatureInterventionResult", "feature_intervention"]


@dataclass(frozen=True, eq=False)
class FeatureInterventionResult:
    """What a :func:`feature_intervention` changed: the next-token ``logits`` after it and ``base_logits`` before
    (the last prompt position, float32 numpy), the ``interventions`` ``(layer, pos, feature, value)``, the
    ``token_text`` of the tokens it shows (``{id: text}``: the 100 most probable before and after, and the
    continuations), the greedy ``continuation`` token ids after it and ``base_continuation`` before, and, when a graph was
    given, ``node_change``: the change of every graph node's value (feature pre-activations, demeaned logits; NaN
    for error and token nodes, which have no value to read), in the graph's node order.

    Example:
        >>> r = FeatureInterventionResult(np.array([0.0, 1.0]), np.array([1.0, 0.0]), [(0, 1, 3, 0.0)], {0: "a", 1: "b"})
        >>> r.top(1)[["token", "p_before", "p_after"]].values.tolist()
        [['b', 0.2689414322376251, 0.7310585975646973]]
    """

    logits: np.ndarray
    base_logits: np.ndarray
    interventions: list
    token_text: dict
    continuation: list[int] = field(default_factory=list)
    base_continuation: list[int] = field(default_factory=list)
    node_change: np.ndarray | None = None
    settings: dict = field(default_factory=dict)

    def top(self, k: int = 10):
        """The ``k`` (at most 100) tokens most probable after the intervention, with their probability before and
        after and the change of their logit (a pandas DataFrame).

        Example:
            >>> r = FeatureInterventionResult(np.array([0.0, 2.0]), np.array([0.0, 0.0]), [], {0: "a", 1: "b"})
            >>> r.top(2)["token"].tolist()
            ['b', 'a']
        """
        import pandas as pd

        after = torch.softmax(torch.as_tensor(self.logits, dtype=torch.float32), -1).numpy()
        before = torch.softmax(torch.as_tensor(self.base_logits, dtype=torch.float32), -1).numpy()
        order = np.argsort(-after, kind="stable")[: min(k, 100)]
        return pd.DataFrame({
            "token": [self.token_text.get(int(i), "") for i in order],
            "id": order,
            "p_before": before[order].astype(float),
            "p_after": after[order].astype(float),
            "logit_change": (self.logits[order] - self.base_logits[order]).astype(float),
        })  # fmt: skip

    def __repr__(self) -> str:
        top = self.top(1).iloc[0]
        return (
            f"FeatureInterventionResult({len(self.interventions)} interventions; top token {top['token']!r} "
            f"p {top['p_before']:.3f} -> {top['p_after']:.3f})"
        )


def _checked(interventions, transcoders, n_pos: int) -> list[tuple[int, int, int, float]]:
    out = []
    for item in interventions:
        if not (isinstance(item, (tuple, list)) and len(item) == 4):
            raise TypeError(
                f"each intervention is (layer, position, feature, value), got {item!r}; for a graph node use "
                "graph.features[i] (layer, position, feature) and a value (0.0 ablates it)"
            )
        layer, pos, feature, value = int(item[0]), int(item[1]), int(item[2]), float(item[3])
        if layer not in transcoders.layers:
            raise ValueError(f"layer {layer} has no transcoder; this set has layers {transcoders.layers}")
        if not 1 <= pos < n_pos:
            raise ValueError(
                f"position {pos} is not a feature position of this prompt (1..{n_pos - 1}; position 0 carries no "
                "features): only feature nodes can be intervened on, not error or token nodes"
            )
        if not 0 <= feature < transcoders[layer].n_concepts:
            raise ValueError(
                f"feature {feature} is outside layer {layer}'s transcoder (0..{transcoders[layer].n_concepts - 1})"
            )
        out.append((layer, pos, feature, value))
    if not out:
        raise ValueError("interventions is empty; give at least one (layer, position, feature, value)")
    return out


def feature_intervention(
    model,
    tokenizer,
    prompt,
    transcoders: TranscoderSet | CrossLayerTranscoderSet,
    interventions: Sequence,
    *,
    freeze_attention: bool = True,
    constrained: bool = False,
    max_new_tokens: int = 0,
    generated_scale: float | None = None,
) -> FeatureInterventionResult:
    """Set transcoder features of ``prompt`` (a text, token ids, or an :class:`AttributionGraph`, whose prompt and
    nodes are used) to values and run the real model (module docstring).

    Args:
        interventions: ``(layer, position, feature, value)`` tuples; value 0 ablates, ``k × activation`` scales.
        freeze_attention: hold the attention patterns at their values on the prompt.
        constrained: also hold every MLP output and norm scale (the graph's direct effects).
        max_new_tokens: greedy continuation length, with and without the interventions. The first new token comes
            from the (frozen) prompt pass; later ones from plain passes with the interventions at the prompt's
            positions (a longer sequence has no frozen pattern).
        generated_scale: also scale each intervened (layer, feature) by this factor at every generated token (0
            ablates it there; its activation at a generated token is computed from that pass). None (the default)
            leaves the generated tokens alone: only the prompt's positions are intervened on.

    Never changes the model; hooks are removed on exit, errors and Ctrl-C.

    Example:
        >>> from interp_widgets.circuits import TranscoderSet, attribution_graph
        >>> from interp_widgets.concepts import Transcoder
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
        >>> graph = attribution_graph(lm, lm_tokenizer, "The cat sat", tcs, progress=False)
        >>> (layer, pos, feature), value = graph.features[0], graph.activations[0]
        >>> same = feature_intervention(lm, lm_tokenizer, graph, tcs, [(layer, pos, feature, value)])
        >>> float(np.abs(same.logits - same.base_logits).max()) < 1e-4  # set to its own value: nothing changes
        True
    """
    graph = prompt if isinstance(prompt, AttributionGraph) else None
    _check_inputs(model, transcoders)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if generated_scale is not None:
        check_number("generated_scale", generated_scale)
    ids, _ = graph_prompt(tokenizer, graph.token_ids if graph is not None else prompt)
    n_pos = ids.shape[1]
    plan = _checked(interventions, transcoders, n_pos)
    state = replacement_state(model, ids, transcoders)
    device = state.final.device
    points = [transcoder_points(model, layer, transcoders.input_point) for layer in range(transcoders.n_layers)]
    head, unembed, _ = _unembedding(model)
    live: dict = {}

    def mlp_edit(layer: int, frozen: bool):
        w = state.weights[layer]
        # the planned features that write to this layer: its own, and earlier layers' for a cross-layer set
        sources = {}
        for source in range(layer + 1):
            decoder = _decoder(state.weights, source, layer)
            mine = [(pos, feature, value) for lay, pos, feature, value in plan if lay == source]
            if decoder is not None and mine:
                sources[source] = (decoder, mine)

        def edit(hidden):
            x = live[layer]
            out = hidden.clone()
            if frozen:  # the MLP output is its prompt value: keep the skip path live
                out = out + (_skip(w, x) - _skip(w, state.inputs[layer]))
            for source, (decoder, mine) in sources.items():
                ws = state.weights[source]
                acts = (
                    None if frozen else _activation(transcoders[source], ws, live[source] @ ws["W_enc"].T + ws["b_enc"])
                )
                for pos, feature, value in mine:
                    current = state.acts[source][pos, feature] if frozen else acts[:, pos, feature, None]
                    out[:, pos] = out[:, pos] + (value - current) * decoder[feature]
                if not frozen and hidden.shape[1] > n_pos and generated_scale is not None:
                    for feature in sorted({feature for _, feature, _ in mine}):  # each scaled where it fires
                        change = (generated_scale - 1.0) * acts[:, n_pos:, feature, None] * decoder[feature]
                        out[:, n_pos:] = out[:, n_pos:] + change
            return out

        return edit

    def run(input_ids, edited: bool, frozen_parts: tuple) -> torch.Tensor:
        handles = []
        with contextlib.ExitStack() as stack:
            stack.callback(lambda: [handle.remove() for handle in handles])
            stack.enter_context(evaluation(model))
            if frozen_parts:
                stack.enter_context(freezing(model, frozen_parts, {"input_ids": ids.to(device)}))
            for layer, (x_point, y_point) in enumerate(points):
                handles.append(register(x_point, lambda m, i, h, layer=layer: live.__setitem__(layer, h)))
                if edited:
                    handles.append(register_edit(y_point, mlp_edit(layer, "mlp" in frozen_parts)))
            handles.append(head.register_forward_pre_hook(lambda m, args: live.__setitem__("final", args[0])))
            with torch.no_grad():
                return model(input_ids=input_ids.to(device)).logits[0, -1].float()

    parts = ("attention", "norms", "mlp") if constrained else (("attention",) if freeze_attention else ())
    base = run(ids, False, parts)
    logits = run(ids, True, parts)
    node_change = None
    if graph is not None:
        node_change = _node_values(graph, state, live, unembed.detach()) - _node_values(
            graph, state, {**{i: x[None] for i, x in enumerate(state.inputs)}, "final": state.final[None]},
            unembed.detach(),
        )  # fmt: skip
    continuations = []
    for edited, first in ((False, base), (True, logits)):
        tokens = []
        sequence = ids
        next_logits = first
        for step in range(max_new_tokens):
            token = int(torch.argmax(next_logits))
            tokens.append(token)
            sequence = torch.cat([sequence, torch.tensor([[token]])], 1)
            if step + 1 < max_new_tokens:
                next_logits = run(sequence, edited, ())
        continuations.append(tokens)
    shown = {int(i) for values in (logits, base) for i in torch.argsort(values, descending=True)[:100].tolist()}
    shown |= {*continuations[0], *continuations[1]}
    token_text = {i: tokenizer.decode([i]) for i in sorted(shown)}
    return FeatureInterventionResult(
        logits=logits.cpu().numpy(),
        base_logits=base.cpu().numpy(),
        interventions=plan,
        token_text=token_text,
        continuation=continuations[1],
        base_continuation=continuations[0],
        node_change=node_change,
        settings={
            "freeze_attention": bool(freeze_attention or constrained),
            "constrained": bool(constrained),
            "generated_scale": None if generated_scale is None else float(generated_scale),
        },  # fmt: skip
    )


def _node_values(graph: AttributionGraph, state, live: dict, unembed: torch.Tensor) -> np.ndarray:
    values = np.full(graph.n_nodes, np.nan)
    for i, (layer, pos, feature) in enumerate(graph.features):
        w = state.weights[layer]
        values[i] = float(live[layer][0, pos] @ w["W_enc"][feature] + w["b_enc"][feature])
    final = live["final"][0, -1]
    start = graph.n_nodes - len(graph.logits)
    mean = unembed.mean(0)
    vocab = unembed.shape[0]
    for j, token in enumerate(graph.logits.ids):
        if 0 <= token < vocab:
            values[start + j] = float(final @ (unembed[token] - mean))
    return values


register_intervention_runner(feature_intervention)  # the circuit view's interventions run it (circuits/_runner.py)
