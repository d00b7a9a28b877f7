"""Attribution patching (AtP): the first-order estimate of activation patching, from one backward pass.

For a point ``a`` (a residual-stream point, a sublayer output, a head, ...) at one layer and position, patching
moves the metric by ``M(a_patched) - M(a_run)``; attribution patching estimates it with the gradient of the metric
on the run being patched:

- denoising (the corrupt run, patched with clean values): ``(a_clean - a_corr) . dM/da`` on the corrupt run;
- noising (the clean run, patched with corrupt values): ``(a_corr - a_clean) . dM/da`` on the clean run.

The dot product runs over the point's own dimensions (a head's ``head_dim``, the stream's width), so one clean
pass, one corrupt pass and ONE backward pass score every layer, position, head and point type at once (Nanda 2023;
Kramar et al. 2024, "AtP*"). The gradients are taken with ``torch.autograd.grad`` with respect to zero tensors added
to the hooked activations (``a + 0``, bit-identical), so the model's parameters, their ``requires_grad`` flags and
their ``.grad`` are never touched.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets._model_names import display_name, model_name_of
from interp_widgets.adapter import ModelAdapter
from interp_widgets.interventions.patching import (
    _KV_POINTS,
    _PATTERN_EDITS,
    _check_points,
    _head_counts,
    _pattern_attention_on,
    _pattern_units,
    _qkv_units,
    _recording,
    _Removal,
    _run_chunk,
)
from interp_widgets.interventions.patching import _sites as _exact_sites
from interp_widgets.interventions.patching_inputs import (
    DIRECTIONS,
    Answers,
    Scorer,
    check_separates,
    metric_name,
    normalise,
    prepare_pairs,
    resolve_answers,
    scored_logits,
)
from interp_widgets.interventions.patching_result import (
    POSITIONS,
    PatchingBaseline,
    PatchingPair,
    PatchingPanel,
    PatchingResult,
    PatchingSetting,
)
from interp_widgets.interventions.points import resolve_point
from interp_widgets.layers import (
    LayerPoint,
    blocks,
    evaluation,
    no_new_hooks,
    register_edit,
    resolve_head,
)
from interp_widgets.validation import check_choice

#: The point types whose activation is one hooked hidden state per layer (the stream, or the heads side by side).
STREAM_POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid")


@dataclass(frozen=True)
class _Site:
    """One hooked activation of one layer holding ``units`` side by side: the hidden state at ``point`` (its
    ``cols`` for the query / key / value heads of a fused projection), or, with ``point`` None, the attention
    pattern (batch, heads, query, key) of the block's attention ``modules``."""

    kind: str
    layer: int
    point: LayerPoint | None
    units: int
    cols: slice | None = None
    modules: tuple = ()

    @property
    def name(self) -> str:
        return f"layer:{self.layer}.{self.kind}"

    def split(self, hidden: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, width) -> (batch, tokens, units, width // units); a pattern (batch, heads, query, key)
        -> (batch, query, heads, key)."""
        if self.point is None:
            return hidden.transpose(1, 2)
        hidden = hidden if self.cols is None else hidden[..., self.cols]
        return hidden.unflatten(-1, (self.units, hidden.shape[-1] // self.units))


def _sites(model: nn.Module, kinds: Sequence[str]) -> dict[str, list[_Site]]:
    _, found = blocks(model)
    layers = range(len(found))
    sites: dict[str, list[_Site]] = {}
    for kind in kinds:
        if kind in STREAM_POINTS:
            sites[kind] = [_Site(kind, i, resolve_point(model, f"layer:{i}.{kind}").point, 1) for i in layers]
        elif kind == "head":
            heads = [resolve_head(model, f"layer:{i}.head:0") for i in layers]
            sites[kind] = [_Site(kind, i, head.point, head.n_heads) for i, head in zip(layers, heads)]
        elif kind in ("q", "k", "v"):
            n_units = _head_counts(model)[0 if kind == "q" else 1]
            sites[kind] = []
            for i in layers:
                units = _qkv_units(model, kind, i, list(range(n_units)))
                cols = slice(units[0].cols.start, units[-1].cols.stop)
                sites[kind].append(_Site(kind, i, units[0].capture.point, n_units, cols))
        else:  # pattern
            n_heads = _head_counts(model)[0]
            sites[kind] = [
                _Site(kind, i, None, n_heads, modules=_pattern_units(model, i, [0])[0].modules) for i in layers
            ]
    return sites


def _unit_labels(site: _Site) -> list[str]:
    if site.kind in STREAM_POINTS:
        return ["stream"]
    return [f"KV{j}" if site.kind in _KV_POINTS else f"H{j}" for j in range(site.units)]


@contextlib.contextmanager
def _hooked(model: nn.Module, sites: Sequence[_Site], acts: list, deltas: list | None) -> Iterator[None]:
    """Record each site's activation into ``acts`` (detached copies); with ``deltas``, also add a zero tensor that
    requires grad to it (``a + 0``: the values are unchanged, and the gradient with respect to the zero is dM/da).
    Patterns are edited through exact patching's eager attention function (:func:`_pattern_attention_on`)."""
    handles: list = []

    def hook_for(j: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def hook(hidden: torch.Tensor) -> torch.Tensor:
            acts[j] = hidden.detach().clone()
            if deltas is None:
                return hidden
            zero = torch.zeros_like(hidden, requires_grad=True)
            deltas[j] = zero
            return hidden + zero

        return hook

    with no_new_hooks(model), contextlib.ExitStack() as stack:
        stack.callback(lambda: [handle.remove() for handle in handles])
        if any(site.point is None for site in sites):
            stack.enter_context(_pattern_attention_on(model))
        for j, site in enumerate(sites):
            if site.point is None:
                for module in site.modules:
                    _PATTERN_EDITS[module] = hook_for(j)
                    handles.append(_Removal(module))
            else:
                handles.append(register_edit(site.point, hook_for(j)))
        yield


def _forward(adapter: ModelAdapter, ids: torch.Tensor, position: int) -> torch.Tensor:
    """A language model's logits at ``position`` only, (rows, 1, vocab); a classifier's (rows, classes)."""
    return adapter.forward_ids(ids, positions=torch.full((ids.shape[0], 1), position, dtype=torch.long))


def _activations(adapter: ModelAdapter, ids: torch.Tensor, sites: Sequence[_Site], position: int):
    """The activations at every site (detached) and the scored logits of a plain run without gradients."""
    acts: list = [None] * len(sites)
    with _hooked(adapter.model, sites, acts, None), torch.no_grad():
        logits = _forward(adapter, ids, position)
    return acts, logits


def _gradients(
    adapter: ModelAdapter,
    ids: torch.Tensor,
    sites: Sequence[_Site],
    position: int,
    score: Callable[[torch.Tensor], torch.Tensor],
):
    """One forward and one backward pass on ``ids``: the activations at every site, the per-row metric
    ``score(logits)`` and d metric_b / d a_b at every site (rows are independent, so the gradient of the sum gives
    each row its own)."""
    acts: list = [None] * len(sites)
    deltas: list = [None] * len(sites)
    with _hooked(adapter.model, sites, acts, deltas), torch.enable_grad():
        scores = score(_forward(adapter, ids, position))
        missing = [site.name for site, zero in zip(sites, deltas) if zero is None]
        if missing:
            raise RuntimeError(f"the forward pass never reached {missing[0]}; this model skips it")
        grads = torch.autograd.grad(scores.sum(), deltas, allow_unused=True)
    adapter.count_backward(1, int(ids.shape[0]))
    grads = [torch.zeros_like(zero) if g is None else g for g, zero in zip(grads, deltas)]
    return acts, scores.detach(), grads


def _model_name(model: nn.Module) -> str:
    return display_name(model_name_of(model)) or type(model).__name__


def attribution_patching(
    model: nn.Module,
    tokenizer,
    clean,
    corrupt,
    *,
    answer=None,
    foil=None,
    points=("resid_pre",),
    positions: str = "each",
    metric="logit_diff",
    direction: str = "denoise",
) -> PatchingResult:
    """Attribution patching: the first-order estimate of :func:`activation_patching`, from one backward pass.

    Denoising estimates the patch of each clean activation into the corrupt run as ``(a_clean - a_corr) . dM/da``,
    the gradient taken on the corrupt run; noising estimates the patch of each corrupt activation into the clean run
    as ``(a_corr - a_clean) . dM/da`` on the clean run. One clean pass, one corrupt pass and one backward pass give
    every point type, layer, unit and position at once. The estimated metric of a patched run is the run's metric
    plus the estimate, normalised as exact patching normalises it (0 = corrupt run, 1 = clean run, per pair, then
    averaged; noising keeps the formula, so a low value means important). It is an estimate: attention saturation
    and cancelling paths make it miss effects (false negatives, AtP*), so confirm what matters with exact patching.

    Args:
        model, tokenizer: a Hugging Face model and its tokenizer. The model is never changed: no parameter's
            ``requires_grad`` or ``.grad`` is touched (gradients are taken with ``torch.autograd.grad`` with respect
            to the hooked activations only), hooks are removed and the train/eval mode restored, also on errors.
        clean, corrupt: a prompt each, or two lists of prompts (pairs), all of the same token count.
        answer, foil: the scored tokens (a single-token string or an id, or a list with one per pair); by default
            the clean run's top token and the corrupt run's top other token.
        points: point types among ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"``, ``"resid_mid"``, ``"head"`` (each
            head's output before the output projection), ``"q"``, ``"k"``, ``"v"`` (per query head, and per key /
            value head, the projections' outputs before rotary embeddings) and ``"pattern"`` (per query head, its
            row of attention weights at each query position; the call then runs on eager attention, as exact
            patching does): the points of :func:`activation_patching`, all from the one backward pass.
        positions: ``"each"`` (one estimate per position) or ``"all"`` (every position patched at once: the sum of
            the per-position estimates).
        metric: ``"logit_diff"`` (answer - foil), ``"answer_prob"``, ``"kl"`` (KL(clean || run); denoising only) or
            a callable ``metric(logits, pair) -> (rows,)`` of the scored logits; it must be differentiable.
        direction: ``"denoise"`` (corrupt run, clean values patched in) or ``"noise"`` (the reverse).

    Returns a :class:`PatchingResult` with ``setting.method == "attribution"`` and no top tokens (no patched run).
    ``result.agreement(exact)`` compares it with :func:`activation_patching`; ``result.verify(top_k=20)`` re-runs its
    top cells exactly, with the model, tokenizer and prompts the result keeps a reference to, in memory only (not
    saved: a loaded result cannot be verified).

    Example:
        >>> from interp_widgets.interventions import attribution_patching
        >>> result = attribution_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the",
        ...                               points=("resid_pre", "head"))
        >>> result.setting.method, result.panel("head").values.shape
        ('attribution', (2, 2, 6))
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a Hugging Face model), got {type(model).__name__}")
    check_choice("direction", direction, DIRECTIONS)
    check_choice("positions", positions, POSITIONS)
    name = metric_name(metric)
    if direction == "noise" and name == "kl":
        raise ValueError(
            "metric='kl' cannot be estimated by attribution patching in the noising direction: the gradient is "
            "taken on the clean run, where KL(clean || run) is at its minimum (0), so its gradient is exactly zero "
            "and every estimate would be 0. Use direction='denoise' with metric='kl', another metric "
            "('logit_diff' or 'answer_prob') for noising, or activation_patching for exact noising KL."
        )
    kinds = list(_check_points(points))
    pairs = prepare_pairs(tokenizer, clean, corrupt)
    adapter = ModelAdapter(model, tokenizer)
    adapter.check_length(pairs.n_tokens, "the prompt")
    sites = _sites(model, kinds)
    flat = [site for kind in kinds for site in sites[kind]]
    denoise = direction == "denoise"
    run_ids, source_ids = (pairs.corrupt_ids, pairs.clean_ids) if denoise else (pairs.clean_ids, pairs.corrupt_ids)
    index = torch.arange(pairs.n_pairs)
    found: dict = {}

    def score(output: torch.Tensor) -> torch.Tensor:
        logits, source = scored_logits(output, 0), scored_logits(source_output, 0)
        clean_logits, corrupt_logits = (source, logits.detach()) if denoise else (logits.detach(), source)
        found["answers"] = resolve_answers(
            tokenizer,
            answer,
            foil,
            pairs.n_pairs,
            clean_logits=clean_logits,
            corrupt_logits=corrupt_logits,
            labels=getattr(model.config, "id2label", None) if output.dim() == 2 else None,
            needs_foil=name == "logit_diff",
        )
        found["scorer"] = Scorer(metric, found["answers"], clean_logits)
        return found["scorer"](logits, index)

    with evaluation(model):
        source_acts, source_output = _activations(adapter, source_ids, flat, pairs.position)
        run_acts, run_metrics, grads = _gradients(adapter, run_ids, flat, pairs.position, score)
    source_metrics = found["scorer"](scored_logits(source_output, 0), index).detach()
    run_metrics, source_metrics = run_metrics.double().cpu().numpy(), source_metrics.double().cpu().numpy()
    clean_metrics, corrupt_metrics = (source_metrics, run_metrics) if denoise else (run_metrics, source_metrics)
    check_separates(clean_metrics, corrupt_metrics, name)

    changes: dict[str, list[np.ndarray]] = {kind: [] for kind in kinds}
    for site, source, run, grad in zip(flat, source_acts, run_acts, grads):
        change = (site.split((source - run).double()) * site.split(grad.double())).sum(-1)  # (pairs, tokens, units)
        if positions == "all":
            change = change.sum(1, keepdim=True)
        changes[site.kind].append(change.permute(2, 1, 0).cpu().numpy())  # (units, positions, pairs)
    panels = []
    for kind in kinds:
        raw = run_metrics + np.stack(changes[kind])  # (layers, units, positions, pairs)
        normalised = normalise(raw, clean_metrics, corrupt_metrics)
        panels.append(
            PatchingPanel(
                kind,
                [site.layer for site in sites[kind]],
                _unit_labels(sites[kind][0]),
                ["all"] if positions == "all" else pairs.layout.tokens,
                values=normalised.mean(-1),
                raw=raw.mean(-1),
                spread=normalised.std(-1),
            )
        )
    answers = found["answers"]
    pair = PatchingPair(
        pairs.layout,
        pairs.corrupt_tokens,
        answers.answers,
        answers.answer_ids,
        answers.foils,
        answers.foil_ids,
        pairs.n_pairs,
        -1 if source_output.dim() == 2 else pairs.position,
    )
    setting = PatchingSetting(name, direction, "attribution", positions, _model_name(model))
    result = PatchingResult(pair, setting, PatchingBaseline(clean_metrics, corrupt_metrics), tuple(panels))
    # verify() re-runs cells exactly: it keeps the model, the tokenizer and the call in memory (never saved)
    result._rerun = functools.partial(
        _exact_cells, model, tokenizer, clean, corrupt, answers, metric, direction, positions, result
    )
    return result


def _exact_cells(
    model: nn.Module,
    tokenizer,
    clean,
    corrupt,
    answers: Answers,
    metric,
    direction: str,
    positions: str,
    result: PatchingResult,
    cells: Sequence[tuple],
) -> np.ndarray:
    """The metric of the exactly patched run of each cell ``(point, layer index, unit index, position index, ...)``
    of ``result``, per pair: (cells, pairs). One patched forward pass per cell (all pairs in it), with the edits of
    exact patching (:func:`~interp_widgets.interventions.activation_patching`'s, through ``intervene``)."""
    pairs = prepare_pairs(tokenizer, clean, corrupt)
    adapter = ModelAdapter(model, tokenizer)
    denoise = direction == "denoise"
    run_ids, source_ids = (pairs.corrupt_ids, pairs.clean_ids) if denoise else (pairs.clean_ids, pairs.corrupt_ids)
    wanted = list(dict.fromkeys((cell[0], result.panel(cell[0]).layers[cell[1]]) for cell in cells))
    sites = {key: _exact_sites(model, [key[0]], [key[1]], None)[0] for key in wanted}
    index = torch.arange(pairs.n_pairs)
    source: dict = {}
    raw = []
    patterns = "pattern" in result.points  # the estimate then ran on eager attention: so do its re-runs
    with contextlib.ExitStack() as stack:
        stack.enter_context(evaluation(model))
        stack.enter_context(no_new_hooks(model))
        stack.enter_context(torch.no_grad())
        if patterns:
            stack.enter_context(_pattern_attention_on(model))
        with _recording(model, list(sites.values()), source):
            source_output = _forward(adapter, source_ids, pairs.position)
        # only KL needs the clean logits, and attribution patching takes KL for denoising only (clean = source)
        scorer = Scorer(metric, answers, scored_logits(source_output, 0) if denoise else None)
        for cell in cells:
            key = (cell[0], result.panel(cell[0]).layers[cell[1]])
            scored = _run_chunk(adapter, None, sites[key], [(cell[2], cell[3])], source[key], run_ids, pairs, positions)
            raw.append(scorer(scored, index).double().cpu().numpy())
    return np.stack(raw) if raw else np.zeros((0, pairs.n_pairs))
