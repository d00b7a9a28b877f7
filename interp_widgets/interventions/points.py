"""The points :func:`~interp_widgets.interventions.intervene` edits: residual-stream points and attention heads.

A point is any spelling :func:`interp_widgets.layers.resolve_layer` accepts (``3``, ``"layer:3"``,
``"layer:3.resid_pre"``, ``"layer:3.attn_out"``, ``"layer:3.resid_mid"``, ``"layer:3.mlp_out"``, a module path, a
TransformerLens hook name) or a head, ``"layer:3.head:5"`` (:func:`interp_widgets.layers.resolve_head`). The
activation an edit sees is (batch, tokens, width): the hidden state there, or the head's own (batch, tokens,
head_dim) slice of the attention output projection's input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from interp_widgets.layers import HeadPoint, LayerPoint, hidden_of, is_head_name, resolve_head, resolve_layer


@dataclass(frozen=True)
class EditPoint:
    """A resolved point: its canonical ``name``, the hooked :class:`~interp_widgets.layers.LayerPoint` and, for a
    head, the :class:`~interp_widgets.layers.HeadPoint`.

    Example:
        >>> resolve_point(model, "blocks.1.hook_attn_out").name, resolve_point(model, "layer:1.head:0").head.head
        ('layer:1.attn_out', 0)
    """

    name: str
    point: LayerPoint
    head: HeadPoint | None = None

    def activation(self, hidden: torch.Tensor) -> torch.Tensor:
        """The activation edits see in ``hidden`` (a view): the hidden state, or the head's slice of it.

        Example:
            >>> resolve_point(model, "layer:0.head:1").activation(torch.zeros(1, 3, 32)).shape
            torch.Size([1, 3, 16])
        """
        if hidden.dim() < 3:
            raise ValueError(
                f"the hidden state at {self.name} has shape {tuple(hidden.shape)}, not (batch, tokens, width); "
                "edit a point of the residual stream or a head instead"
            )
        return hidden if self.head is None else self.head.heads_of(hidden)[..., self.head.head, :]

    def select(self, value) -> torch.Tensor:
        """The activation in a hook's ``value`` (a module output, possibly a tuple, or a hidden-state input).

        Example:
            >>> resolve_point(model, "layer:0").select((torch.zeros(1, 3, 32), None)).shape
            torch.Size([1, 3, 32])
        """
        return self.activation(hidden_of(value))


def resolve_point(model: nn.Module, spec) -> EditPoint:
    """Resolve any point :func:`~interp_widgets.interventions.intervene` takes (see the module docstring).

    Example:
        >>> resolve_point(model, "layer:1.heads:0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown layer 'layer:1.heads:0'; ... An attention head is 'layer:<block>.head:<head>', e.g. 'layer:3.head:5'.
    """
    if is_head_name(spec):
        head = resolve_head(model, spec)
        return EditPoint(head.name, head.point, head)
    try:
        point = resolve_layer(model, spec)
    except ValueError as err:
        if not str(err).startswith("unknown layer"):
            raise
        raise ValueError(f"{err} An attention head is 'layer:<block>.head:<head>', e.g. 'layer:3.head:5'.") from err
    return EditPoint(point.name, point)
