"""The :class:`BinaryArray` trait type: a synced numpy array that serialises itself as one binary buffer.

A ``BinaryArray`` trait holds a numpy array (``widget.scores`` *is* an array, read-only) and travels as
``{"dtype", "shape", "data": <binary buffer>}`` (:func:`~interp_widgets.widgets.view_data.array_to_buffer`), which
``js/src/lib/codec.js`` decodes (``decodeArray``). Validation (:func:`~interp_widgets.widgets.view_data.coerce_array`, the
same as the view-data schema's) coerces the dtype, checks the number of dimensions and, where a view needs finite
values, rejects infinity; NaN stays allowed (it means "not seen"). Modelled on jupyter-scatter's
``Array(...).tag(sync=True, **ndarray_serialization)``.

Example:
    >>> payload = array_to_buffer(np.arange(6, dtype=np.float64).reshape(2, 3))
    >>> payload["dtype"], payload["shape"], payload["data"].nbytes
    ('float32', [2, 3], 24)
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING
from typing import Any

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import (
    ARRAY_DTYPES,
    DataField,
    array_to_buffer,
    buffer_to_array,
    coerce_array,
    data_fields,
    narrowest_ints,
)

__all__ = ["ArrayTraitError", "BinaryArray", "array_to_buffer", "buffer_to_array", "data_traits", "narrowest_ints"]


class ArrayTraitError(traitlets.TraitError, ValueError):
    """A value that a :class:`BinaryArray` trait cannot hold (wrong dimensions, dtype, or infinity where the view
    needs finite numbers). Also a ``ValueError``, so callers can catch either.

    Example:
        >>> issubclass(ArrayTraitError, ValueError)
        True
    """


def _array_to_json(value: np.ndarray | None, widget: Any) -> dict[str, Any]:
    return {} if value is None else array_to_buffer(value)


def _array_from_json(payload: dict[str, Any] | None, widget: Any) -> np.ndarray | None:
    return buffer_to_array(payload) if payload else None


class BinaryArray(traitlets.TraitType):
    """A synced numpy array trait that travels as one binary buffer.

    Args:
        dtype: ``"float32"``, ``"int32"`` or ``"bool"`` (values are converted), or ``"int"``: integers stored in the
            narrowest of int8/int16/int32 that holds them.
        ndim: the number of dimensions the view reads.
        finite: reject infinity (NaN stays allowed: "not seen").
        allow_none: ``None`` means "absent" and travels as ``{}``.

    The value is a read-only C-contiguous copy. Give ``help=`` as for any trait; tag it ``sync=True``.

    Example:
        >>> class Scores(traitlets.HasTraits):
        ...     scores = BinaryArray("float32", ndim=2, finite=True)
        >>> Scores(scores=[[1, 2]]).scores
        array([[1., 2.]], dtype=float32)
        >>> Scores(scores=[1.0, 2.0])
        Traceback (most recent call last):
        ...
        interp_widgets.widgets._traits.ArrayTraitError: scores must be a 2-D array, got shape (2,)
    """

    info_text = "a numpy array"

    def __init__(self, dtype: str = "float32", ndim: int = 1, *, finite: bool = False, allow_none: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        if dtype not in ARRAY_DTYPES:
            raise ValueError(f"dtype must be one of {ARRAY_DTYPES}, got {dtype!r}")
        self.dtype, self.ndim, self.finite = dtype, int(ndim), bool(finite)
        empty = np.zeros((0,) * self.ndim, dtype=np.int8 if dtype == "int" else dtype)
        empty.setflags(write=False)
        super().__init__(default_value=None if allow_none else empty, allow_none=allow_none, **kwargs)
        self.metadata.update(to_json=_array_to_json, from_json=_array_from_json)

    def validate(self, obj: Any, value: Any) -> np.ndarray:
        try:
            return coerce_array(value, self.dtype, self.ndim, finite=self.finite, name=self.name or "array")
        except ValueError as exc:
            raise ArrayTraitError(str(exc)) from None

    @property
    def spec(self) -> tuple[str, int, bool]:
        """``(dtype, ndim, finite)``, as in the view-data schema's ``ARRAYS``.

        Example:
            >>> BinaryArray("bool").spec
            ('bool', 1, False)
        """
        return self.dtype, self.ndim, self.finite


#: The trait type of each scalar annotation of a view-data field.
_SCALAR_TRAITS: dict[Any, type[traitlets.TraitType]] = {
    str: traitlets.Unicode,
    int: traitlets.Int,
    float: traitlets.Float,
    bool: traitlets.Bool,
    bytes: traitlets.Bytes,
}


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(annotation, False)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _trait_of(annotation: Any, where: str, **kwargs: Any) -> traitlets.TraitType:
    """The trait that holds values of a (resolved) annotation: scalars, ``X | None``, ``list[X]`` and ``dict``."""
    annotation, optional = _optional(annotation)
    if optional:
        kwargs["allow_none"] = True
    origin = typing.get_origin(annotation)
    if annotation in _SCALAR_TRAITS:
        return _SCALAR_TRAITS[annotation](**kwargs)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return traitlets.List(_trait_of(item, where), **kwargs)
    if annotation is dict or origin is dict:
        return traitlets.Dict(**kwargs)
    raise TypeError(f"{where}: no trait type for the annotation {annotation!r}; use str, int, float, bool, bytes, "
                    "list[...], dict[...], np.ndarray with an ARRAYS spec, or a dataclass of those")  # fmt: skip


def _data_trait(f: DataField, where: str) -> traitlets.TraitType:
    meta = f.field.metadata
    kwargs: dict[str, Any] = {"help": meta["help"]} if meta.get("help") else {}
    if f.array is not None:
        dtype, ndim, finite = f.array
        allow_none = meta.get("trait_allow_none", _optional(f.annotation)[1])
        return BinaryArray(dtype, ndim=ndim, finite=finite, allow_none=allow_none, **kwargs)
    if f.annotation is np.ndarray or _optional(f.annotation)[0] is np.ndarray:
        raise TypeError(f"{where} is an array without a spec; add it to the view-data class's ARRAYS")
    default = meta.get("trait_default", MISSING)
    if f.field.default is not MISSING:
        default = f.field.default
    scalar = _optional(f.annotation)[0] in _SCALAR_TRAITS
    if default is not MISSING and (scalar or "trait_default" in meta):
        kwargs["default_value"] = default
    if "trait_allow_none" in meta:
        kwargs["allow_none"] = meta["trait_allow_none"]
    return _trait_of(f.annotation, where, **kwargs)


def data_traits(view_data: type) -> dict[str, traitlets.TraitType]:
    """The synced data traits (``sync=True, data=True``) of a view, one per field of its view-data class: the one
    declaration of a view's data (``InterpWidget`` subclasses get them with ``class MyWidget(InterpWidget,
    data=MyData)``).

    A field's annotation gives the trait type (``str`` -> ``Unicode``, ``int`` -> ``Int``, ``float`` -> ``Float``,
    ``bool`` -> ``Bool``, ``bytes`` -> ``Bytes``, ``list[X]`` -> ``List(X)``, ``dict`` -> ``Dict``, ``X | None``
    allows None); an array field (in ``ARRAYS``) becomes a :class:`BinaryArray` of its spec. A scalar's default is
    the field's default, else its ``data_field(trait_default=...)``; containers and arrays start empty. The help
    text comes from ``data_field(help)``. A field whose annotation is a dataclass is flattened into its fields.

    Example:
        >>> from interp_widgets.widgets.view_data import LensData
        >>> traits = data_traits(LensData)
        >>> type(traits["tokens"]).__name__, traits["kl"].spec, traits["vocab_size"].default_value
        ('List', ('float32', 3, True), 0)
        >>> traits["kl"].metadata["sync"], traits["kl"].metadata["data"]
        (True, True)
    """
    return {f.name: _data_trait(f, f"{view_data.__name__}.{f.name}").tag(sync=True, data=True)
            for f in data_fields(view_data)}  # fmt: skip
