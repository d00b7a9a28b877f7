"""``intervene(..., freeze=, freeze_on=)``: hold norm scales and MLP outputs at their values on one prompt.

With the norms frozen, each normalisation divides by its scale r(x₀) on the ``freeze_on`` prompt instead of r(x),
so it is linear in its input: y = w ⊙ (x − c(x)) / r(x₀) + b, computed as (y(x) − b) · r(x) / r(x₀) + b from the
module's own output (Gemma's (1 + w) gain needs nothing special). With the MLPs frozen, each block's ``mlp_out`` is
its value on the prompt, whatever the input. This is the local replacement model of attribution graphs (the
attention patterns are the part still missing there).
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch import nn

from interp_widgets.layers import blocks, norm_modules, register_edit, resolve_layer
from interp_widgets.validation import check_choice

FREEZABLE = ("norms", "mlp")


def _inputs(freeze_on) -> dict:
    if isinstance(freeze_on, torch.Tensor):
        ids = freeze_on if freeze_on.dim() == 2 else freeze_on.reshape(1, -1)
        return {"input_ids": ids}
    if isinstance(freeze_on, Mapping):
        return dict(freeze_on)
    raise TypeError(
        "freeze_on must be the prompt the frozen values come from: a tensor of token ids (1, tokens) or a dict of "
        f"model inputs such as tokenizer(text, return_tensors='pt'); got {type(freeze_on).__name__}"
    )


def _matched(frozen: torch.Tensor, current: torch.Tensor, what: str) -> torch.Tensor:
    if frozen.shape[1] != current.shape[1] or frozen.shape[0] not in (1, current.shape[0]):
        raise ValueError(
            f"the {what} was frozen on a prompt of {frozen.shape[1]} tokens (batch {frozen.shape[0]}), but this "
            f"forward pass has {current.shape[1]} tokens (batch {current.shape[0]}); freeze on a prompt of the "
            "same length (or run one row, or a batch of the same size)"
        )
    return frozen.to(device=current.device)


def freeze_parts(freeze) -> tuple[str, ...]:
    """The checked tuple of what to freeze (``"norms"``, ``"mlp"``).

    Example:
        >>> freeze_parts("mlp"), freeze_parts(["norms", "mlp"])
        (('mlp',), ('norms', 'mlp'))
    """
    parts = (freeze,) if isinstance(freeze, str) else tuple(freeze)
    for part in parts:
        if part == "attention":
            raise NotImplementedError(
                "freezing attention patterns is not implemented yet; freeze=('norms', 'mlp') holds the other parts"
            )
        check_choice("freeze", part, FREEZABLE)
    return parts


def install_freeze(model: nn.Module, parts: tuple[str, ...], freeze_on, handles: list) -> None:
    """Run ``model`` on ``freeze_on``, record the frozen values, and append the hooks that hold them to ``handles``
    (the caller removes them); :func:`~interp_widgets.interventions.intervene` calls it with ``freeze=``.

    Example:
        >>> handles = []
        >>> install_freeze(lm, ("mlp",), torch.tensor([[5, 6, 7]]), handles)
        >>> with torch.no_grad():
        ...     a, b = lm(input_ids=torch.tensor([[5, 6, 7]])).logits, lm(input_ids=torch.tensor([[9, 6, 7]])).logits
        >>> for handle in handles:
        ...     handle.remove()
        >>> len(handles), bool((a != b).any())  # the MLP outputs are held; attention still reads the new token
        (2, True)
    """
    norms = norm_modules(model) if "norms" in parts else []
    mlps = []
    if "mlp" in parts:
        _, found = blocks(model)
        mlps = [resolve_layer(model, f"layer:{i}.mlp_out") for i in range(len(found))]
    scales: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}
    recorders = []
    try:
        for norm in norms:

            def record_scale(module, args, kwargs, out, norm=norm):
                scales.setdefault(norm.path, norm.scale(_first(args, kwargs)))  # returns None: the output stays

            recorders.append(norm.module.register_forward_hook(record_scale, with_kwargs=True))
        for point in mlps:

            def record_output(hidden, name=point.name):
                outputs.setdefault(name, hidden.detach().clone())
                return hidden

            recorders.append(register_edit(point, record_output))
        with torch.no_grad():
            model(**_inputs(freeze_on))
    finally:
        for handle in recorders:
            handle.remove()
    for norm in norms:
        if norm.path in scales:
            handles.append(norm.module.register_forward_hook(_frozen_norm(norm, scales[norm.path]), with_kwargs=True))
    for point in mlps:
        frozen = outputs[point.name]
        handles.append(
            register_edit(
                point,
                lambda h, frozen=frozen, name=point.name: _matched(frozen, h, name).to(h.dtype).expand_as(h).clone(),
            )
        )


def _first(args, kwargs) -> torch.Tensor:
    return args[0] if args else next(iter(kwargs.values()))


def _frozen_norm(norm, frozen: torch.Tensor) -> Callable:
    def hook(module, args, kwargs, output):
        x = _first(args, kwargs)
        ratio = norm.scale(x) / _matched(frozen, x, f"scale of {norm.path}")
        bias = 0 if norm.bias is None else norm.bias
        return ((output - bias) * ratio + bias).to(output.dtype)

    return hook
