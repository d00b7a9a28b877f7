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

import json
from pathlib import Path
from typing import Any, Sequence


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


def read_saved(
    path: str | Path, *, name: str, format: str, versions: Sequence | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata and arrays of a file that ``name``'s ``save`` wrote, as ``(meta, {name: array})``.

    ``meta`` is the ``interp_widgets`` JSON of the file's header, without its ``format``, which must be ``format``
    (else a ``ValueError`` naming what the file holds). With ``versions``, its ``version`` must be one of them (else
    a ``ValueError``: a newer format) and is removed too; without, the caller checks ``meta["version"]``.
    :func:`read_safetensors` reads the file (its errors for a missing, a directory or a damaged file).

    Example:
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> path = getfixture("tmp_path") / "x.safetensors"
        >>> meta = {"format": "interp_widgets.Example", "version": 2, "n": 3}
        >>> save_file({"a": np.zeros(2)}, str(path), metadata={"interp_widgets": json.dumps(meta)})
        >>> read_saved(path, name="Example", format="interp_widgets.Example", versions=(2,))
        ({'n': 3}, {'a': array([0., 0.])})
        >>> read_saved(path, name="Other", format="interp_widgets.Other")
        Traceback (most recent call last):
        ...
        ValueError: /.../x.safetensors holds interp_widgets.Example, not an Other; pass the path of a file written by Other.save(path)
    """
    fix = f"pass the path of a file written by {name}.save(path)"
    metadata, arrays = read_safetensors(path, what=f"a saved {name}", fix=fix)
    header = metadata.get("interp_widgets")
    meta = json.loads(header) if header else {}
    found = meta.pop("format", None)
    if found != format:
        article = "an" if name[:1] in "AEIOU" else "a"
        raise ValueError(f"{path} holds {found or 'no interp_widgets object'}, not {article} {name}; {fix}")
    if versions is not None and meta.pop("version", None) not in versions:
        raise ValueError(f"{path} has a newer format than this interp_widgets reads; upgrade interp_widgets")
    return meta, arrays
