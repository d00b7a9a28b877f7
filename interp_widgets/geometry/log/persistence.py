"""The on-disk format of a :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog`: a directory with
``history.safetensors`` (steps, columns, raw values, proxy bases) and ``meta.json`` (format, version, layers,
``x_label``, ``max_rows``, the thinning state, the name → tensor key maps and the settings). No pickle.

Example:
    >>> import tempfile
    >>> from interp_widgets.columns import ColumnStore
    >>> store = ColumnStore(8); _ = store.put(0, {"loss": 1.5})
    >>> header = {"layers": ["layer:0"], "x_label": "step", "max_rows": 8, "meta": {"rank": 4}}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     header_read, store_read, proxies = read_record(write_record(tmp, header, store, {}))
    >>> header_read == header, store_read.column("loss").tolist(), proxies
    (True, [1.5], {})
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from interp_widgets._files import read_safetensors
from interp_widgets.columns import ColumnStore

__all__ = ["FORMAT", "VERSION", "write_record", "read_record"]

FORMAT = "interp_widgets.GeometryLog"
VERSION = 1
_HEADER = ("layers", "x_label", "max_rows", "meta")


def write_record(path: str | Path, header: Mapping, store: ColumnStore, proxies: Mapping[str, torch.Tensor]) -> Path:
    """Write ``store``, the proxy bases and ``header`` (``layers``, ``x_label``, ``max_rows``, ``meta``) to the
    directory ``path`` (created if needed); returns it.

    Example:
        >>> import tempfile
        >>> header = {"layers": [], "x_label": "step", "max_rows": 8, "meta": {}}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     sorted(p.name for p in write_record(tmp + "/run", header, ColumnStore(8), {}).iterdir())
        ['history.safetensors', 'meta.json']
    """
    from safetensors.torch import save_file

    directory = Path(path)
    if directory.is_file():
        raise FileExistsError(
            f"{directory} is a file; GeometryLog.save writes a directory, so pass a new or empty "
            "directory path such as runs/minilm"
        )
    directory.mkdir(parents=True, exist_ok=True)
    arrays, layout = store.arrays()
    tensors = {key: torch.from_numpy(array) for key, array in arrays.items()}
    keys = {}
    for i, (layer, basis) in enumerate(proxies.items()):
        keys[layer] = f"proxy.{i}"
        tensors[f"proxy.{i}"] = basis.detach().to("cpu", torch.float64).contiguous()
    save_file(tensors, str(directory / "history.safetensors"))
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "layers": header["layers"],
        "x_label": header["x_label"],
        "max_rows": header["max_rows"],
        **layout,
        "proxies": keys,
        "meta": header["meta"],
    }
    (directory / "meta.json").write_text(json.dumps(meta, indent=1, allow_nan=True))
    return directory


def read_record(path: str | Path) -> tuple[dict, ColumnStore, dict[str, torch.Tensor]]:
    """``(header, store, proxies)`` of a directory written by :func:`write_record`; clear errors for a directory
    that is not a record or comes from a newer version.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     read_record(tmp)
        Traceback (most recent call last):
        ...
        FileNotFoundError: ... is not a saved GeometryLog (needs meta.json and history.safetensors)
    """
    directory = Path(path)
    meta_path, data_path = directory / "meta.json", directory / "history.safetensors"
    if not meta_path.is_file() or not data_path.is_file():
        raise FileNotFoundError(f"{directory} is not a saved GeometryLog (needs meta.json and history.safetensors)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{meta_path} is damaged ({err}); save the log again with GeometryLog.save") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path} is not a GeometryLog record (format {meta.get('format')!r})")
    if meta.get("version", 0) > VERSION:
        raise ValueError(f"{meta_path} has version {meta['version']}; this library reads up to {VERSION}")
    tensors = read_safetensors(
        data_path, what="a GeometryLog's history", framework="pt", fix="save the log again with GeometryLog.save"
    )[1]
    arrays = {key: tensor.numpy() for key, tensor in tensors.items() if not key.startswith("proxy.")}
    store = ColumnStore.from_arrays(arrays, meta, meta["max_rows"], meta["x_label"])
    return {key: meta[key] for key in _HEADER}, store, {layer: tensors[key] for layer, key in meta["proxies"].items()}
