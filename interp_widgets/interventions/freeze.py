"""``intervene(..., freeze=, freeze_on=)``: hold attention patterns, norm scales and MLP outputs at their values on
one prompt.

- ``"attention"``: each attention module computes ``pattern @ V(x)`` with its pattern on the ``freeze_on`` prompt (per
  query head; grouped-query value heads are repeated as the model does). It runs through a private attention function
  registered in transformers' ``AttentionInterface`` (with eager attention's masks) for the block, with the model's attention implementation switched
  to it and restored on exit (:func:`interp_widgets.layers.attention_function`); the recording pass uses the
  model's own eager attention. Models whose attention does not dispatch through that interface are refused.
- ``"norms"``: each normalisation divides by its scale r(x₀) on the prompt instead of r(x), so it is linear in its
  input: y = w ⊙ (x − c(x)) / r(x₀) + b, computed as (y(x) − b) · r(x) / r(x₀) + b from the module's own output
  (Gemma's (1 + w) gain needs nothing special).
- ``"mlp"``: each block's ``mlp_out`` is its value on the prompt, whatever the input.

With all three the model is linear in the residual stream on that prompt: the local replacement model of
attribution graphs (whose transcoders then stand in for the frozen MLPs).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Mapping

import torch
from torch import nn

from interp_widgets.layers import (
    UnsupportedModelError,
    attend,
    attention_function,
    blocks,
    eager_attention_forward,
    norm_modules,
    register_edit,
    resolve_layer,
)
from interp_widgets.validation import check_choice

FREEZABLE = ("attention", "norms", "mlp")


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
    """``frozen`` (batch 1 or the current batch; the same positions, the middle axes) on ``current``'s device."""
    if frozen.shape[1:-1] != current.shape[1:-1] or frozen.shape[0] not in (1, current.shape[0]):
        tokens = frozen.shape[1] if frozen.dim() > 2 else 1
        now = current.shape[1] if current.dim() > 2 else 1
        raise ValueError(
            f"the {what} was frozen on a prompt of {tokens} tokens (batch {frozen.shape[0]}), but this forward pass "
            f"has {now} tokens (batch {current.shape[0]}); freeze on a prompt of the same length (or run one row, "
            "or a batch of the same size)"
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
        check_choice("freeze", part, FREEZABLE)
    return parts


@contextlib.contextmanager
def freezing(model: nn.Module, parts: tuple[str, ...], freeze_on) -> Iterator[None]:
    """Run ``model`` on ``freeze_on``, record the values ``parts`` names, and hold them during the block (hooks and
    the attention implementation are restored on exit, on errors and on Ctrl-C);
    :func:`~interp_widgets.interventions.intervene` uses it for ``freeze=``.

    Example:
        >>> with freezing(lm, ("attention", "mlp"), torch.tensor([[5, 6, 7]])), torch.no_grad():
        ...     a, b = lm(input_ids=torch.tensor([[5, 6, 7]])).logits, lm(input_ids=torch.tensor([[9, 6, 7]])).logits
        >>> bool((a != b).any())  # patterns and MLP outputs are held, but the values and the stream read the new token
        True
    """
    norms = norm_modules(model) if "norms" in parts else []
    mlps = []
    if "mlp" in parts:
        _, found = blocks(model)
        mlps = [resolve_layer(model, f"layer:{i}.mlp_out") for i in range(len(found))]
    scales: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}
    handles: list = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [handle.remove() for handle in handles])
        try:
            patterns = stack.enter_context(_frozen_attention(model)) if "attention" in parts else None
        except UnsupportedModelError as err:
            raise UnsupportedModelError(
                f"cannot freeze the attention of {type(model).__name__}: its attention does not run through "
                "transformers' AttentionInterface, which freezing replaces; leave 'attention' out of freeze="
            ) from err
        for norm in norms:

            def record_scale(module, args, kwargs, out, norm=norm):
                scales.setdefault(norm.path, norm.scale(_first(args, kwargs)))  # returns None: the output stays

            handles.append(norm.module.register_forward_hook(record_scale, with_kwargs=True))
        for point in mlps:

            def record_output(hidden, name=point.name):
                outputs.setdefault(name, hidden.detach().clone())
                return hidden

            handles.append(register_edit(point, record_output))
        with torch.no_grad():
            model(**_inputs(freeze_on))
        for handle in handles:
            handle.remove()
        handles.clear()
        if patterns is not None:
            _, found = blocks(model)
            if len(patterns.patterns) < len(found):
                raise UnsupportedModelError(
                    f"cannot freeze the attention of {type(model).__name__}: {len(patterns.patterns)} of its "
                    f"{len(found)} blocks compute attention through transformers' AttentionInterface, which freezing "
                    "replaces; leave 'attention' out of freeze="
                )
            patterns.frozen = True
        for norm in norms:
            if norm.path in scales:
                handles.append(
                    norm.module.register_forward_hook(_frozen_norm(norm, scales[norm.path]), with_kwargs=True)
                )
        for point in mlps:
            frozen = outputs[point.name]
            handles.append(
                register_edit(
                    point,
                    lambda h, frozen=frozen, name=point.name: (
                        _matched(frozen, h, name).to(h.dtype).expand_as(h).clone()
                    ),
                )
            )
        yield


class _Patterns:
    """The attention patterns of one model's attention modules: recorded on the first pass, then held."""

    def __init__(self):
        self.frozen = False
        self.patterns: dict[nn.Module, torch.Tensor] = {}


_ATTENTION = "interp_widgets_frozen_attention"
_ACTIVE: dict[nn.Module, _Patterns] = {}  # attention module -> the patterns of the intervention that owns it


@contextlib.contextmanager
def _frozen_attention(model: nn.Module) -> Iterator[_Patterns]:
    state = _Patterns()
    owned = list(model.modules())
    if any(module in _ACTIVE for module in owned):
        raise ValueError(
            "the attention of this model is already frozen by an enclosing intervene(freeze=...); freeze it once, "
            "in the outer block"
        )
    try:
        for module in owned:
            _ACTIVE[module] = state
        with attention_function(
            model,
            _ATTENTION,
            _attention,
            why="freezing attention patterns replaces the attention function of transformers models",
        ):
            yield state
    finally:
        for module in owned:
            _ACTIVE.pop(module, None)


def _attention(module, query, key, value, attention_mask, **kwargs):
    """The attention function while patterns are frozen: the model's own eager attention on the recording pass,
    then ``pattern @ value`` with the recorded pattern (value heads repeated for grouped-query attention)."""
    eager = eager_attention_forward(module, action="freeze the attention", hint="leave 'attention' out of freeze=")
    state = _ACTIVE.get(module)
    if state is None:
        raise UnsupportedModelError(
            f"cannot freeze the attention of {type(module).__name__}: it is not a module of the frozen model; "
            "leave 'attention' out of freeze="
        )
    if not state.frozen:
        output, weights = eager(module, query, key, value, attention_mask, **kwargs)
        state.patterns.setdefault(module, weights.detach())
        return output, weights
    pattern = state.patterns[module]
    if pattern.shape[-2:] != (query.shape[-2], key.shape[-2]) or pattern.shape[0] not in (1, query.shape[0]):
        raise ValueError(
            f"the attention pattern of {type(module).__name__} was frozen on a prompt of {pattern.shape[-1]} tokens "
            f"(batch {pattern.shape[0]}), but this forward pass attends from {query.shape[-2]} to {key.shape[-2]} "
            f"tokens (batch {query.shape[0]}); freeze on a prompt of the same length, and run without a cache"
        )
    return attend(pattern, query, value), pattern


def _first(args, kwargs) -> torch.Tensor:
    return args[0] if args else next(iter(kwargs.values()))


def _frozen_norm(norm, frozen: torch.Tensor) -> Callable:
    def hook(module, args, kwargs, output):
        x = _first(args, kwargs)
        ratio = norm.scale(x) / _matched(frozen, x, f"scale of {norm.path}")
        bias = 0 if norm.bias is None else norm.bias
        return ((output - bias) * ratio + bias).to(output.dtype)

    return hook
