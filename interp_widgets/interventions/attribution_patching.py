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
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter
from interp_widgets.interventions.points import resolve_point
from interp_widgets.layers import LayerPoint, blocks, evaluation, no_new_hooks, register_edit, resolve_head

#: The point types whose activation is one hooked hidden state per layer (the stream, or the heads side by side).
STREAM_POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid")


@dataclass(frozen=True)
class _Site:
    """One hooked activation of one layer: ``units`` slices of the last axis side by side (1 for the stream)."""

    kind: str
    layer: int
    point: LayerPoint
    units: int

    def split(self, hidden: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, width) -> (batch, tokens, units, width // units)."""
        return hidden.unflatten(-1, (self.units, hidden.shape[-1] // self.units))


def _sites(model: nn.Module, kinds: Sequence[str]) -> dict[str, list[_Site]]:
    _, found = blocks(model)
    sites: dict[str, list[_Site]] = {}
    for kind in kinds:
        if kind in STREAM_POINTS:
            sites[kind] = [
                _Site(kind, i, resolve_point(model, f"layer:{i}.{kind}").point, 1) for i in range(len(found))
            ]
        elif kind == "head":
            heads = [resolve_head(model, f"layer:{i}.head:0") for i in range(len(found))]
            sites[kind] = [_Site(kind, i, head.point, head.n_heads) for i, head in enumerate(heads)]
        else:
            raise ValueError(f"unknown point type {kind!r}")
    return sites


@contextlib.contextmanager
def _hooked(model: nn.Module, sites: Sequence[_Site], acts: list, deltas: list | None) -> Iterator[None]:
    """Record each site's activation into ``acts`` (detached copies); with ``deltas``, also add a zero tensor that
    requires grad to it (``a + 0``: the values are unchanged, and the gradient with respect to the zero is dM/da)."""
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
        for j, site in enumerate(sites):
            handles.append(register_edit(site.point, hook_for(j)))
        yield


def _forward(adapter: ModelAdapter, ids: torch.Tensor) -> torch.Tensor:
    """The logits at the last position, (rows, vocab)."""
    last = torch.full((ids.shape[0], 1), ids.shape[1] - 1, dtype=torch.long)
    return adapter.forward_ids(ids, positions=last)[:, -1]


def _activations(adapter: ModelAdapter, ids: torch.Tensor, sites: Sequence[_Site]):
    """The activations at every site (detached) and the last-position logits of a plain run without gradients."""
    acts: list = [None] * len(sites)
    with _hooked(adapter.model, sites, acts, None), torch.no_grad():
        logits = _forward(adapter, ids)
    return acts, logits


def _gradients(
    adapter: ModelAdapter, ids: torch.Tensor, sites: Sequence[_Site], score: Callable[[torch.Tensor], torch.Tensor]
):
    """One forward and one backward pass on ``ids``: the activations at every site, the per-row scores ``score(logits)``
    and dscore_b/da_b at every site (rows are independent, so the gradient of the sum gives each row's own)."""
    acts: list = [None] * len(sites)
    deltas: list = [None] * len(sites)
    with _hooked(adapter.model, sites, acts, deltas), torch.enable_grad():
        logits = _forward(adapter, ids)
        scores = score(logits)
        missing = [site for site, zero in zip(sites, deltas) if zero is None]
        if missing:
            raise RuntimeError(f"the forward pass never reached {missing[0].point.name}")
        grads = torch.autograd.grad(scores.sum(), deltas, allow_unused=True)
    adapter.count_backward(1, int(ids.shape[0]))
    grads = [torch.zeros_like(zero) if g is None else g for g, zero in zip(grads, deltas)]
    return acts, scores.detach(), grads


def first_order(
    model: nn.Module,
    tokenizer,
    run_ids: torch.Tensor,
    source_ids: torch.Tensor,
    kinds: Sequence[str],
    score: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The first-order estimate of patching each site of ``kinds`` from ``source_ids`` into the run on ``run_ids``.

    Returns ``({kind: (rows, layers, units, tokens) estimated change of the score}, the run's scores (rows,),
    the source run's logits at the last position (rows, vocab))``. Two forward passes and one backward pass.
    """
    adapter = ModelAdapter(model, tokenizer)
    sites = _sites(model, kinds)
    flat = [site for kind in kinds for site in sites[kind]]
    with evaluation(model):
        source_acts, source_logits = _activations(adapter, source_ids, flat)
        run_acts, scores, grads = _gradients(adapter, run_ids, flat, score)
    estimates: dict[str, list[torch.Tensor]] = {kind: [] for kind in kinds}
    for site, source, run, grad in zip(flat, source_acts, run_acts, grads):
        change = site.split((source - run).float()) * site.split(grad.float())
        estimates[site.kind].append(change.sum(-1).permute(0, 2, 1))  # (rows, units, tokens)
    return {kind: torch.stack(parts, 1) for kind, parts in estimates.items()}, scores, source_logits
