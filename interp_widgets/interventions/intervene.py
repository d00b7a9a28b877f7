"""``intervene(model, {point: edit})``: edit activations inside a ``with`` block, with hooks that always go away."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets.interventions.edits import Ablate, Add, Clamp
from interp_widgets.interventions.freeze import freeze_parts, freezing
from interp_widgets.interventions.points import EditPoint, resolve_point
from interp_widgets.layers import register_edit

EDIT_TYPES = (Ablate, Clamp, Add)


def _positions(positions) -> slice | list[int]:
    if positions is None:
        return slice(None)
    if isinstance(positions, slice):
        return positions
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        return [int(positions)]
    if isinstance(positions, torch.Tensor):
        positions = positions.tolist()
    if isinstance(positions, (Sequence, np.ndarray)) and not isinstance(positions, str):
        values = list(np.asarray(positions).reshape(-1).tolist()) if len(positions) else []
        if values and all(isinstance(p, int) and not isinstance(p, bool) for p in values):
            return values
    raise TypeError(
        f"positions must be None (every token), a token index, a list of token indices or a slice; got {positions!r}"
    )


def _checked_positions(selection, n_tokens: int, name: str):
    if isinstance(selection, slice):
        return selection
    for p in selection:
        if not -n_tokens <= p < n_tokens:
            raise ValueError(
                f"position {p} is out of range at {name}: this forward pass has {n_tokens} tokens "
                f"(positions 0..{n_tokens - 1}, or negative from the end); pass positions= that exist in every run"
            )
    return selection


def _as_function(edit, name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if isinstance(edit, EDIT_TYPES):
        return edit.edit(name)
    if isinstance(edit, (torch.Tensor, np.ndarray)):
        value = torch.as_tensor(edit)  # not detached: a value that requires grad gets its gradient

        def set_to(x: torch.Tensor) -> torch.Tensor:
            try:
                return value.to(device=x.device, dtype=x.dtype).expand_as(x)
            except RuntimeError:
                raise ValueError(
                    f"the tensor set at {name} has shape {tuple(value.shape)}, which does not broadcast to the edited "
                    f"activation of shape {tuple(x.shape)} (batch, positions, width); pass a tensor of that shape, "
                    f"or (positions, width), or (width,)"
                ) from None

        return set_to
    if callable(edit):
        return edit
    raise TypeError(
        f"the edit at {name} is a {type(edit).__name__}; use a tensor to set, a function (activation) -> activation, "
        "Ablate(...), Clamp(direction, value) or Add(direction, scale)"
    )


def _edit_hook(point: EditPoint, fn: Callable, selection) -> Callable[[torch.Tensor], torch.Tensor]:
    def hook(hidden: torch.Tensor) -> torch.Tensor:
        activation = point.activation(hidden)
        index = _checked_positions(selection, activation.shape[1], point.name)
        selected = activation[:, index]
        new = fn(selected)
        if not isinstance(new, torch.Tensor) or new.shape != selected.shape:
            got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
            raise ValueError(
                f"the edit at {point.name} returned {got}, but it must return a tensor of the shape it was given, "
                f"{tuple(selected.shape)} (batch, positions, width)"
            )
        edited = hidden.clone()
        point.activation(edited)[:, index] = new.to(edited.dtype)
        return edited

    return hook


@contextlib.contextmanager
def intervene(
    model: nn.Module, edits: Mapping, *, positions=None, freeze=None, freeze_on=None
) -> Iterator[dict[str, EditPoint]]:
    """Edit activations of ``model`` during the ``with`` block: ``{point: edit}``.

    Args:
        model: a PyTorch / Hugging Face model; it is never changed (no config edit, no mode, device or dtype change),
            and the hooks are removed on exit, on errors and on Ctrl-C.
        edits: ``{point: edit}``. A point is any spelling :func:`interp_widgets.layers.resolve_layer` accepts for
            the residual stream or a sublayer (``3`` or ``"layer:3"``: block 3's output; ``"layer:3.resid_pre"``:
            its input; ``"layer:3.attn_out"``, ``"layer:3.mlp_out"``: what its sublayers add; ``"layer:3.resid_mid"``:
            the stream between them; a module path; a TransformerLens hook name) or an attention head,
            ``"layer:3.head:5"`` (the head's output before the output projection, so grouped-query models work).
            An edit is a tensor to set, a function ``(activation) -> activation``, :class:`Ablate`, :class:`Clamp`
            or :class:`Add`. Edits see the selected activation, (batch, positions, width); width is the head's size
            at a head. Several points apply in order along the forward pass.
        positions: the token positions edited in every forward pass: None (all), an index, a list of indices
            (negative from the end) or a slice. They index each pass's own tokens: in generation with a cache,
            later passes hold only the new token (so None edits every generated token, and an index past it fails).
        freeze: what to hold at its value on ``freeze_on`` (see :mod:`interp_widgets.interventions.freeze`):
            ``"attention"`` (every attention pattern), ``"norms"`` (every LayerNorm / RMSNorm divides by its scale on
            that prompt, so it is linear) and ``"mlp"`` (every block's MLP output). Edits apply on top of them.
        freeze_on: the prompt of the frozen values: a tensor of token ids (1, tokens) or a dict of model inputs;
            runs must have its length.

    Yields the resolved points by canonical name.

    Example:
        >>> ids = torch.tensor([[5, 6, 7, 8]])
        >>> with intervene(lm, {"layer:0.head:1": Ablate(), 1: lambda x: 2 * x}, positions=[-1]) as points:
        ...     with torch.no_grad():
        ...         edited = lm(input_ids=ids).logits
        >>> list(points), torch.equal(edited[0, :3], lm(input_ids=ids).logits[0, :3].detach())
        (['layer:0.head:1', 'layer:1'], True)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(edits, Mapping):
        raise TypeError(
            f"edits must be a dict {{point: edit}}, e.g. {{'layer:3': Add(direction, 4.0)}}; got {type(edits).__name__}"
        )
    selection = _positions(positions)
    if (freeze is None) != (freeze_on is None):
        raise ValueError(
            "freeze= and freeze_on= go together: name what to freeze, e.g. freeze=('norms', 'mlp'), and the prompt "
            "whose values are held, freeze_on=tokenizer(text, return_tensors='pt')"
        )
    parts = () if freeze is None else freeze_parts(freeze)
    plan = []
    for spec, edit in edits.items():
        point = resolve_point(model, spec)
        if isinstance(edit, Ablate):
            edit = edit.prepared(model, point)
        plan.append((point, _as_function(edit, point.name)))
    handles: list = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [handle.remove() for handle in handles])
        if parts:
            stack.enter_context(freezing(model, parts, freeze_on))
        for point, fn in plan:
            handles.append(register_edit(point.point, _edit_hook(point, fn, selection)))
        yield {point.name: point for point, _ in plan}
