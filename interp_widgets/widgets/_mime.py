"""The ``application/vnd.interp-widgets.v1+json`` output every view adds to its MIME bundle, and the per-output cap.

The payload is what the view draws, saved with the output, so that a notebook reopened without a kernel (or without
saved widget state, JupyterLab's and Notebook 7's default, or untrusted) shows the same interactive view: the
``interp-widgets`` JupyterLab / Notebook 7 extension renders it with the widgets' own ES modules, and
``interp-widgets export`` renders it with a small loader instead of the whole widget manager.

Layout (JSON; arrays and bytes base64-packed as in :meth:`~interp_widgets.widgets.view_data.ViewData.to_json`)::

    {"format": 1,                     # the envelope, "v1" of the MIME type
     "view": "token_highlight",       # the view (bundle) name
     "version": 1,                    # the view's data format: ViewData.VERSION
     "widget": "TokenHighlightWidget",
     "data": {...},                   # the versioned view data (interp_widgets.widgets.view_data), one entry per field
     "state": {...}}                  # the other synced traits: selection, granularity, sort, page, ...

A payload larger than :func:`output_cap` (1 MiB by default; ``INTERP_WIDGETS_OUTPUT_CAP`` or
:func:`set_output_cap` change it) is replaced by ``{"format", "view", "version", "widget", "omitted": {"bytes",
"cap"}}``: the renderer then shows the static picture and says how to export the view instead.

:func:`interp_widgets.widgets._payload_schema.payload_schema` describes every view's payload in a small type language
that ``js/src/lib/payload.js`` checks untrusted payloads against (the committed copy is
``js/src/lib/view_schema.json``; regenerate it with ``python scripts/view_schema.py``).

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> widget = TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])
    >>> payload = mime_payload(widget)
    >>> payload["view"], payload["version"], payload["data"]["tokens"], payload["state"]["granularity"]
    ('token_highlight', 2, ['Hi', '!'], 'token')
    >>> payload["data"]["scores"]["dtype"], payload["data"]["scores"]["shape"]
    ('float32', [1, 2])
"""

from __future__ import annotations

import base64
import json
import math
import os
from typing import Any

import anywidget
import numpy as np

from interp_widgets.widgets.view_data import VIEW_DATA

__all__ = ["MIME_TYPE", "FORMAT", "DEFAULT_OUTPUT_CAP", "mime_payload", "output_cap", "set_output_cap"]

MIME_TYPE = "application/vnd.interp-widgets.v1+json"
#: Version of the payload envelope (the "v1" of :data:`MIME_TYPE`); each view's data has its own ``version``.
FORMAT = 1
#: Default cap on one output's payload: UTF-8 bytes of its compact JSON.
DEFAULT_OUTPUT_CAP = 1024 * 1024
_CAP_ENV = "INTERP_WIDGETS_OUTPUT_CAP"

#: numpy wire dtypes (view_data.array_to_buffer) that each BinaryArray dtype may travel as
WIRE_DTYPES = {"float32": ["float32"], "int32": ["int32"], "bool": ["bool"], "int": ["int8", "int16", "int32"]}
_ANY_WIRE = ["float32", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool"]
#: The schema of one array inside a JSON-typed trait (e.g. the concept browser's histogram).
ANY_ARRAY_1D = {"array": _ANY_WIRE, "ndim": 1}


def _cap_from_env() -> int:
    raw = os.environ.get(_CAP_ENV, "")
    if not raw.strip():
        return DEFAULT_OUTPUT_CAP
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{_CAP_ENV}={raw!r} is not a number of bytes; use e.g. {_CAP_ENV}=2000000") from None
    if value < 0:
        raise ValueError(f"{_CAP_ENV} must be a number of bytes >= 0, got {value}")
    return value


_cap: int | None = None


def output_cap() -> int:
    """The largest payload (bytes of compact JSON) one output carries: :func:`set_output_cap`'s value, else the
    ``INTERP_WIDGETS_OUTPUT_CAP`` environment variable, else 1 MiB (1,048,576 bytes).

    Example:
        >>> output_cap() == DEFAULT_OUTPUT_CAP
        True
    """
    return _cap if _cap is not None else _cap_from_env()


def set_output_cap(nbytes: int | None) -> int:
    """Set the per-output payload cap to ``nbytes`` (``0`` saves no payload at all; ``None`` restores the default)
    and return the previous cap. Views displayed afterwards use it.

    Example:
        >>> previous = set_output_cap(4096)
        >>> output_cap()
        4096
        >>> set_output_cap(None) == 4096, output_cap() == previous
        (True, True)
    """
    global _cap
    from interp_widgets.validation import check_int

    previous = output_cap()
    _cap = None if nbytes is None else check_int("nbytes", nbytes, minimum=0, hint="it is a number of bytes")
    return previous


# ------------------------------------------------------------------------------------------------------ encoding
def json_value(value: Any) -> Any:
    """``value`` as plain JSON: buffers base64-packed, numpy scalars as Python numbers, NaN/inf as null.

    Example:
        >>> json_value({"x": memoryview(b"ab"), "n": np.float32("nan"), "a": {"dtype": "int8", "shape": [2], "data": b"ab"}})
        {'x': {'base64': 'YWI='}, 'n': None, 'a': {'dtype': 'int8', 'shape': [2], 'data': 'YWI='}}
    """
    if isinstance(value, dict):
        if set(value) == {"dtype", "shape", "data"} and isinstance(value["data"], (bytes, bytearray, memoryview)):
            return {"dtype": value["dtype"], "shape": [int(n) for n in value["shape"]],
                    "data": base64.b64encode(bytes(value["data"])).decode("ascii")}  # fmt: skip
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.ndarray):
        from interp_widgets.widgets.view_data import array_to_buffer

        return json_value(array_to_buffer(value))
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _base_traits() -> set[str]:
    return set(anywidget.AnyWidget.class_trait_names())


def state_trait_names(cls: type) -> list[str]:
    """The synced traits of view class ``cls`` that are not view data: the view state the payload's ``state``
    holds (selection, granularity, sort, page, ``error`` ...).

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> state_trait_names(TokenHighlightWidget)[:4]
        ['encoding', 'error', 'granularity', 'high_contrast']
    """
    data = set(VIEW_DATA[cls._bundle].field_names())
    return sorted(name for name in cls.class_trait_names(sync=True)
                  if not name.startswith("_") and name not in _base_traits() and name not in data)  # fmt: skip


def payload_body(widget: Any) -> dict[str, Any]:
    """The full payload of ``widget`` (no cap applied)."""
    state = widget._payload_state(state_trait_names(type(widget)))  # first: the monitor checkpoints in get_state
    data = widget.view_data()
    return {"format": FORMAT, "view": data.VIEW, "version": data.VERSION, "widget": type(widget).__name__,
            "data": json_value(data.to_json()["data"]), "state": json_value(state)}  # fmt: skip


def compact_json(value: Any) -> str:
    """Compact JSON text (no NaN), the form whose UTF-8 size the cap counts.

    Example:
        >>> compact_json({"a": [1, 2]})
        '{"a":[1,2]}'
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def mime_payload(widget: Any, cap: int | None = None) -> dict[str, Any]:
    """The ``application/vnd.interp-widgets.v1+json`` payload of ``widget``: its view data and view state, or, over
    ``cap`` bytes (default :func:`output_cap`), a small record of what was left out.

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> widget = TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])
        >>> small = mime_payload(widget, cap=100)
        >>> small["omitted"]["cap"], small["omitted"]["bytes"] > 100, "data" in small
        (100, True, False)
    """
    cap = output_cap() if cap is None else cap
    body = payload_body(widget)
    size = len(compact_json(body).encode("utf-8"))
    if size <= cap:
        return body
    return {key: body[key] for key in ("format", "view", "version", "widget")} | {
        "omitted": {"bytes": size, "cap": cap}
    }
