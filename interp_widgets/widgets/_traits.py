"""Binary numpy arrays in synced traits: the :class:`BinaryArray` trait type and its wire format.

A ``BinaryArray`` trait holds a numpy array (``widget.scores`` *is* an array, read-only) and serialises itself as
``{"dtype", "shape", "data": <binary buffer>}`` (:func:`array_to_buffer`), which ``js/src/lib/codec.js`` decodes
(``decodeArray``). Validation coerces the dtype, checks the number of dimensions and, where a view needs finite
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

__all__ = ["ArrayTraitError", "BinaryArray", "array_to_buffer", "buffer_to_array", "narrowest_ints"]

# dtype sent to JS for each numpy dtype kind we accept; anything wider is narrowed (float64 -> float32 etc.).
_WIRE_DTYPES = {
    "float16": "float32",
    "float32": "float32",
    "float64": "float32",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int32",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint32",
    "bool": "bool",
}


def _to_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach") and hasattr(array, "cpu"):  # a torch.Tensor, without importing torch
        tensor = array.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.float()  # also covers bfloat16, which numpy cannot hold
        return tensor.numpy()
    return np.asarray(array)


def array_to_buffer(array: Any) -> dict[str, Any]:
    """Serialise a numpy array or torch tensor for a synced trait: ``{"dtype", "shape", "data": memoryview}``.

    Floats become little-endian float32, 64-bit integers int32 (values must fit), bools one byte each, all
    C-contiguous. The bytes are a copy, so later changes to ``array`` do not leak into the widget.

    Example:
        >>> array_to_buffer(np.array([True, False]))["dtype"]
        'bool'
    """
    arr = _to_numpy(array)
    wire = _WIRE_DTYPES.get(arr.dtype.name)
    if wire is None:
        raise TypeError(f"cannot send an array of dtype {arr.dtype} to the browser; convert it to a float, int or bool array")
    if wire == "int32" and arr.dtype.itemsize == 8 and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < np.iinfo(np.int32).min or high > np.iinfo(np.int32).max:
            raise ValueError(f"integer values {low}..{high} do not fit in int32, the widgets' integer format")
    if wire == "uint32" and arr.size and int(arr.max()) > np.iinfo(np.uint32).max:
        raise ValueError(f"integer values up to {int(arr.max())} do not fit in uint32")
    numpy_wire = np.dtype("uint8" if wire == "bool" else wire).newbyteorder("<")
    out = np.ascontiguousarray(arr, dtype=numpy_wire)
    return {"dtype": wire, "shape": list(out.shape), "data": memoryview(out.tobytes())}


def buffer_to_array(payload: dict[str, Any] | np.ndarray) -> np.ndarray:
    """Inverse of :func:`array_to_buffer` (a read-only numpy view of the payload's bytes).

    An array is returned as it is: the value of a :class:`BinaryArray` trait (``widget.scores``) already is one.

    Example:
        >>> buffer_to_array(array_to_buffer(np.eye(2))).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    if isinstance(payload, np.ndarray):
        return payload
    dtype = np.dtype("uint8" if payload["dtype"] == "bool" else payload["dtype"]).newbyteorder("<")
    values = np.frombuffer(payload["data"], dtype=dtype).reshape(payload["shape"])
    return values.astype(bool) if payload["dtype"] == "bool" else values


def narrowest_ints(values: Any) -> np.ndarray:
    """``values`` as the narrowest of int8, int16 and int32 that holds them (ids travel in fewer bytes).

    Example:
        >>> narrowest_ints(np.array([-1, 0, 300])).dtype
        dtype('int16')
    """
    values = np.asarray(values, dtype=np.int64)
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
            return values.astype(dtype)
    raise ValueError(f"integer values {values.min()}..{values.max()} do not fit in int32, the widgets' integer format")


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
    _DTYPES = ("float32", "int32", "bool", "int")

    def __init__(self, dtype: str = "float32", ndim: int = 1, *, finite: bool = False, allow_none: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        if dtype not in self._DTYPES:
            raise ValueError(f"dtype must be one of {self._DTYPES}, got {dtype!r}")
        self.dtype, self.ndim, self.finite = dtype, int(ndim), bool(finite)
        empty = np.zeros((0,) * self.ndim, dtype=np.int8 if dtype == "int" else dtype)
        empty.setflags(write=False)
        super().__init__(default_value=None if allow_none else empty, allow_none=allow_none, **kwargs)
        self.metadata.update(to_json=_array_to_json, from_json=_array_from_json)

    def validate(self, obj: Any, value: Any) -> np.ndarray:
        name = self.name or "array"
        try:
            array = _to_numpy(value)
        except Exception as exc:
            raise ArrayTraitError(f"{name} must be array-like, got {type(value).__name__} ({exc})") from None
        if array.dtype == object:
            raise ArrayTraitError(f"{name} must hold numbers, got {type(value).__name__} of objects")
        if array.ndim != self.ndim:
            raise ArrayTraitError(f"{name} must be a {self.ndim}-D array, got shape {array.shape}")
        try:
            if self.dtype == "int":
                array = narrowest_ints(array)
            elif self.dtype == "int32":
                array = narrowest_ints(array).astype(np.int32)
            else:
                array = array.astype(self.dtype)
        except (TypeError, ValueError) as exc:
            raise ArrayTraitError(f"{name}: {exc}") from None
        if self.finite and np.isinf(array).any():
            raise ArrayTraitError(f"{name} contain infinity; check the attribution (NaN is allowed and means 'not seen')")
        array = np.ascontiguousarray(array)  # astype above copied, so the caller's array is never shared
        array.setflags(write=False)
        return array
