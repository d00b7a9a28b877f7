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

from typing import Any

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import (
    ARRAY_DTYPES,
    array_to_buffer,
    buffer_to_array,
    coerce_array,
    narrowest_ints,
)

__all__ = ["ArrayTraitError", "BinaryArray", "array_to_buffer", "buffer_to_array", "narrowest_ints"]


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
