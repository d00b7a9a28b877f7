"""Safetensors + JSON persistence shared by every concept object (never pickle).

Arrays go into one ``.safetensors`` file; everything else (class name, parameters, labels) is JSON stored in the
file's header metadata under the key ``interp_widgets``. Saving creates missing parent directories; loading a file
that is missing, a directory, or not a safetensors file raises an error that says so (see :mod:`interp_widgets._files`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from interp_widgets._files import output_path, read_safetensors

FORMAT_VERSION = 1


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a config such as TrainingConfig: its fields
        return dataclasses.asdict(value)
    raise TypeError(f"cannot store a {type(value).__name__} as JSON")


def save_bundle(path: str | Path, kind: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write ``arrays`` and the JSON ``meta`` of an object of type ``kind`` to one safetensors file.

    Example:
        >>> arrays = {"components_": np.eye(2, 3, dtype=np.float32), "mask": np.array([True, False])}
        >>> path = save_bundle(getfixture("tmp_path") / "sub" / "bundle.safetensors", "interp_widgets.Example",
        ...                    arrays, {"labels": ["a", "b"]})
        >>> path.name, path.parent.name  # missing parent directories are created
        ('bundle.safetensors', 'sub')
    """
    from safetensors.numpy import save_file

    path = output_path(path)
    clean = {}
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        clean[name] = value.astype(np.uint8) if value.dtype == bool else value
    header = json.dumps({"format": kind, "version": FORMAT_VERSION, **meta}, default=_json_default)
    save_file(clean, str(path), metadata={"interp_widgets": header})
    return path


def load_bundle(path: str | Path, kind: str | tuple[str, ...]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`save_bundle`, checking that it holds an object of type ``kind``.

    Example:
        >>> path = getfixture("tmp_path") / "bundle.safetensors"
        >>> _ = save_bundle(path, "interp_widgets.Example", {"components_": np.eye(2, dtype=np.float32)}, {"n": 2})
        >>> arrays, meta = load_bundle(path, "interp_widgets.Example")
        >>> arrays["components_"], meta
        (array([[1., 0.],
               [0., 1.]], dtype=float32), {'n': 2})
        >>> load_bundle(path, "interp_widgets.ConceptModel")
        Traceback (most recent call last):
            ...
        ValueError: ... holds a interp_widgets.Example, not a interp_widgets.ConceptModel; load it with its own class's load()
    """
    kinds = (kind,) if isinstance(kind, str) else kind
    names = " or ".join(k.removeprefix("interp_widgets.") for k in kinds)
    fix = f"pass the path of a file written by {names}.save(path)"
    metadata, arrays = read_safetensors(path, what=f"a saved {names}", fix=fix)
    header = metadata.get("interp_widgets")
    if header is None:
        raise ValueError(f"{path} is not an interp_widgets file (no interp_widgets metadata in its header); {fix}")
    meta = json.loads(header)
    found = meta.pop("format", None)
    if found not in kinds:
        raise ValueError(f"{path} holds a {found}, not a {' or '.join(kinds)}; load it with its own class's load()")
    meta.pop("version", None)
    return arrays, meta
