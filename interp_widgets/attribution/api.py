"""The functional entry point :func:`attribute` and the method catalogue :func:`list_methods`."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

# Importing the method modules registers their methods in METHODS, in this order (gradient, perturbation, attention;
# within a module, in the order the classes are defined), which is the order of METHODS.
import interp_widgets.attribution.gradient  # noqa: F401  # isort: skip
import interp_widgets.attribution.perturbation  # noqa: F401  # isort: skip
import interp_widgets.attribution.attention  # noqa: F401  # isort: skip
from interp_widgets.attribution.base import METHODS, Attributor


@dataclass(frozen=True)
class MethodInfo:
    """What :func:`list_methods` says about one registered attribution method.

    Attributes:
        name: the name to pass as ``attribute(..., method=name)``.
        cls: the method's class.
        family: ``"gradient"``, ``"perturbation"``, ``"attention"`` or ``"other"``.
        signed: whether the scores carry a sign, with the method's default parameters.
        needs_gradients: whether the method runs backward passes.
        unit_level: True if the method perturbs words or sentences natively (``granularity`` changes what is
            computed); False if it scores tokens and the scores are summed into words or sentences afterwards.
        summary: the first paragraph of the class docstring.

    Example:
        >>> info = next(m for m in list_methods() if m.name == "kernel_shap")
        >>> info.family, info.signed, info.needs_gradients, info.unit_level
        ('perturbation', True, False, True)
    """

    name: str
    cls: type
    family: str
    signed: bool
    needs_gradients: bool
    unit_level: bool
    summary: str


def _method_info(name: str, cls: type[Attributor]) -> MethodInfo:
    try:
        signed = cls().scores_signed
    except TypeError:  # a method whose constructor needs arguments: fall back to the class attribute
        signed = cls.signed
    first_paragraph = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
    return MethodInfo(
        name=name,
        cls=cls,
        family=cls.family,
        signed=bool(signed),
        needs_gradients=bool(cls.needs_gradients),
        unit_level=bool(cls.unit_level),
        summary=first_paragraph,
    )


def list_methods(*, as_frame: bool = False):
    """Every registered attribution method with its properties, sorted by family and name.

    Returns a list of :class:`MethodInfo` records, or with ``as_frame=True`` a pandas DataFrame indexed by name
    (columns ``class``, ``family``, ``signed``, ``needs_gradients``, ``unit_level``, ``summary``), which reads well
    in a notebook. Methods defined outside the package (any :class:`Attributor` subclass that sets ``name``) are
    listed too.

    Example:
        >>> [m.name for m in list_methods() if m.family == "attention"]
        ['attention_rollout', 'gradient_weighted_attention', 'raw_attention']
        >>> bool(list_methods(as_frame=True).loc["saliency", "signed"])
        False
    """
    infos = sorted((_method_info(name, cls) for name, cls in METHODS.items()), key=lambda m: (m.family, m.name))
    if not as_frame:
        return infos
    import pandas as pd

    rows = [
        {
            "name": m.name,
            "class": m.cls.__name__,
            "family": m.family,
            "signed": m.signed,
            "needs_gradients": m.needs_gradients,
            "unit_level": m.unit_level,
            "summary": m.summary,
        }
        for m in infos
    ]
    return pd.DataFrame(rows).set_index("name")


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

    The names are the keys of :data:`METHODS` (see :func:`list_methods`); an unknown name raises an error that lists
    them.

    Example:
        >>> r = attribute(model, tokenizer, "Not bad at all.", method="saliency", granularity="word",
        ...               method_params={"progress": False})
        >>> r
        AttributionResult(method='saliency', 5 words, targets=[positive (p=0.421)])
        >>> r.tokens, r.scores.round(3)
        (['Not', 'bad', 'at', 'all', '.'], array([[0.895, 1.034, 0.565, 0.633, 0.675]]))
        >>> attribute(model, tokenizer, "Not bad.", method="shapley")
        Traceback (most recent call last):
        ...
        interp_widgets.registry.UnknownNameError: unknown method 'shapley'; available: attention_rollout, ...
    """
    attributor = METHODS[method](**(method_params or {}))
    return attributor.attribute(model, tokenizer, inputs, target=target, **options)
