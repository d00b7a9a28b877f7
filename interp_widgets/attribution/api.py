"""The functional entry point :func:`attribute`."""

from __future__ import annotations

from typing import Any, Sequence

from interp_widgets.attribution.attention import ATTENTION_METHODS
from interp_widgets.attribution.gradient import GRADIENT_METHODS
from interp_widgets.attribution.perturbation import PERTURBATION_METHODS

METHODS: dict[str, Any] = {**GRADIENT_METHODS, **PERTURBATION_METHODS, **ATTENTION_METHODS}


def attribute(
    model,
    tokenizer=None,
    inputs: str | Sequence[str] = "",
    *,
    method: str = "integrated_gradients",
    target=None,
    method_params: dict[str, Any] | None = None,
    **options,
):
    """Explain ``inputs`` with one method, by name; ``method_params`` go to the method's constructor and
    ``options`` (granularity, continuation, max_new_tokens, ...) to :meth:`Attributor.attribute`.

    Example:
        >>> attribute(model, tokenizer, "Not bad at all.", method="saliency", granularity="word")  # doctest: +SKIP
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; available methods: {sorted(METHODS)}")
    attributor = METHODS[method](**(method_params or {}))
    return attributor.attribute(model, tokenizer, inputs, target=target, **options)
