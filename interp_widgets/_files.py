"""Writing and reading the package's safetensors files, with errors that name the problem and the fix.

Every ``save`` in the package writes through :func:`output_path`, which **creates missing parent directories** (so
``result.save("runs/today/r.safetensors")`` works in a fresh directory) and refuses a path that is a directory.
Every load reads through :func:`read_safetensors`, which turns a missing file, a directory, and a file that is not a
(complete) safetensors file into one clear error each, instead of safetensors' "header too large".

This module imports nothing else from the package.

Example:
    >>> import tempfile, numpy as np
    >>> from safetensors.numpy import save_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = output_path(tmp + "/new/dir/x.safetensors")
    ...     save_file({"a": np.zeros(2)}, str(path), metadata={"k": "v"})
    ...     read_safetensors(path, what="an example")[0]
    {'k': 'v'}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def output_path(path: str | Path, *, suffix_hint: str = ".safetensors") -> Path:
    """The file path to write to, with its missing parent directories created.

    Raises ``IsADirectoryError`` if ``path`` is an existing directory (name a file inside it instead).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     output_path(tmp)
        Traceback (most recent call last):
        ...
        IsADirectoryError: /tmp/... is a directory; save to a file inside it, such as /tmp/.../result.safetensors
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a directory; save to a file inside it, such as {path / ('result' + suffix_hint)}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def read_safetensors(
    path: str | Path, *, what: str, fix: str = "", framework: str = "numpy"
) -> tuple[dict[str, str], dict[str, Any]]:
    """The header metadata and the tensors of a safetensors file, as ``(metadata, {name: array})``.

    Args:
        path: the file.
        what: what the file should hold (``"a saved AttributionResult"``), for the messages.
        fix: how to get a good file, appended to the messages (default: save one with the object's ``save``).
        framework: ``"numpy"`` or ``"pt"`` (torch tensors).

    Raises ``FileNotFoundError`` (no such file), ``IsADirectoryError`` (a directory) or ``ValueError`` (not a
    safetensors file, or a truncated or damaged one).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile(suffix=".safetensors") as handle:
        ...     _ = handle.write(b"not a safetensors file" * 4); handle.flush()
        ...     read_safetensors(handle.name, what="a saved AttributionResult")
        Traceback (most recent call last):
        ...
        ValueError: /tmp/....safetensors is not a saved AttributionResult: it is not a safetensors file, or it is truncated or damaged (header too large); pass the path of a file written by its save() method
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    fix = fix or "pass the path of a file written by its save() method"
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not {what}; {fix}")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}; {fix}")
    try:
        with safe_open(str(path), framework=framework) as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except SafetensorError as err:
        reason = str(err).removeprefix("Error while deserializing header: ")
        raise ValueError(
            f"{path} is not {what}: it is not a safetensors file, or it is truncated or damaged ({reason}); {fix}"
        ) from None
    return metadata, tensors
