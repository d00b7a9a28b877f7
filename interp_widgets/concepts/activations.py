"""Collect hidden-state activations of a layer into a store that stays bounded in memory.

:func:`collect_activations` runs a model over texts in length-bucketed batches, records one layer's output per token
(or one pooled vector per text) and keeps every row's metadata: text id, token position, token string and character
offsets. Rows are kept in memory up to a budget; past it, chunks stream to ``.npy`` files that are read back lazily,
one chunk at a time, through short-lived numpy memory maps. :class:`ActivationStore` behaves like one ``(rows, dim)`` matrix either way. With a
``torch.distributed`` process group, each rank collects its shards of the texts and every rank gets back a store
that reads all shards as one. Collected to a ``path``, the collection is a resumable job of fixed shards (a killed run
resumes with the same call), as :func:`~interp_widgets.attribution.attribute_corpus` is.

Example:
    >>> store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
    >>> len(store), store.dim
    (775, 32)
    >>> store.metadata().head(3)
       row  text_id  position       token  start  end  token_id
    0    0        0         1         The      0    3      1996
    1    1        0         2       third      4    9      2353
    2    2        0         3  generation     10   20      4245
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from interp_widgets._inputs import check_texts, input_items
from interp_widgets._shards import (
    Group,
    JobKind,
    commit,
    planned_manifest,
    read_manifest,
    shard_range,
    shard_size_for,
    start_job,
    temporary_path,
)
from interp_widgets.adapter import ModelAdapter
from interp_widgets.layers import evaluation, hooks, resolve_layer
from interp_widgets.tasks import task_for
from interp_widgets.validation import check_choice, check_int

UNITS = ("token", "sentence")
POOLINGS = ("cls", "mean", "last")
META_FIELDS = ("text_id", "position", "start", "end", "token_id")
_STORE_FORMAT = "interp_widgets.ActivationStore"
_WINDOW_TEXTS = 4096  # texts encoded and length-sorted together (fewer when their rows would exceed a chunk)
_MAX_PADDING = 0.05  # on the CPU, a forward pass pads at most this share of its tokens (ModelAdapter.length_buckets)
# on a GPU a short pass costs its kernel launches, not its tokens: on an H200, 58 ms per pass of about 560 tokens
# through 16 layers of an 8B model, about 7 ms of it arithmetic by FLOP count. Wider buckets there mean far fewer passes.
_MAX_PADDING_ACCELERATOR = 0.35
# a collection to a path is a sharded job (interp_widgets._shards, shared with attribute_corpus): a manifest and one
# store directory per shard of fixed texts
_JOB = JobKind(call="collect_activations", format="interp_widgets.ActivationCollection",
               settings="the collection settings", opener="ActivationStore.open", suffix="")  # fmt: skip


class _StopForward(Exception):
    """Raised inside the capture hook: the layers after the captured one are never run."""


def _padded_batches(
    adapter: ModelAdapter, encodings: Sequence
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """The encoded texts batched by length (a pass pads at most ``_MAX_PADDING`` of its tokens on the CPU,
    ``_MAX_PADDING_ACCELERATOR`` elsewhere, and holds at most the adapter's ``max_batch_tokens``): each batch's indices
    into ``encodings``, its right-padded ``input_ids`` (the tokenizer's pad id, else 0) and its ``attention_mask``, on
    the CPU."""
    pad_id = adapter.tokenizer.pad_token_id if adapter.tokenizer.pad_token_id is not None else 0
    max_padding = _MAX_PADDING if torch.device(adapter.device).type == "cpu" else _MAX_PADDING_ACCELERATOR
    for batch in adapter.length_buckets([len(e) for e in encodings], max_padding=max_padding):
        longest = max(len(encodings[i]) for i in batch)
        ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, i in enumerate(batch):
            ids[row, : len(encodings[i])] = torch.from_numpy(encodings[i].input_ids)
            mask[row, : len(encodings[i])] = 1
        yield batch, ids, mask


def _capture_pass(run, ids: torch.Tensor, mask: torch.Tensor, device, captured: dict) -> dict:
    """One pass ``run(ids, mask)`` on ``device`` whose hooks fill ``captured`` (cleared first); a hook that raises
    :class:`_StopForward` ends the pass there, so the layers after the captured ones never run."""
    captured.clear()
    try:
        run(ids.to(device), mask.to(device))
    except _StopForward:
        pass
    return captured


def _kept_tokens(enc, include_special: bool) -> np.ndarray:
    """Which tokens of an encoded text give rows: all of them with ``include_special``, else the non-special ones."""
    return np.ones(len(enc), bool) if include_special else ~enc.special_mask


def parse_bytes(size: int | str) -> int:
    """Turn ``"512MB"``, ``"2 GiB"``, ``"1e9"`` or an int into a number of bytes.

    Example:
        >>> parse_bytes("1.5GB")
        1500000000
    """
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        value = int(size)
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]i?)?[bB]?\s*", size)
        if not match:
            raise ValueError(f"cannot read memory size {size!r}; write it like 512MB, 2GB or a number of bytes")
        unit = (match[2] or "").lower()
        base = 1024 if unit.endswith("i") else 1000
        power = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[unit[:1]]
        value = int(float(match[1]) * base**power)
    else:
        raise TypeError(f"memory size must be an int or a string like '512MB', got {type(size).__name__}")
    if value <= 0:
        raise ValueError(f"memory size must be positive, got {size!r}")
    return value


class _DiskChunk:
    """One ``.npy`` chunk on disk, memory-mapped only while it is read.

    Mapping a file only for the duration of a read keeps its pages out of the process's resident set afterwards;
    a memory map kept open would count every page ever touched.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        header = np.load(self.path, mmap_mode="r")
        self.shape, self.ndim = header.shape, header.ndim
        del header

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        mapped = np.load(self.path, mmap_mode="r")
        try:
            return np.array(mapped[key], dtype=np.float32)
        finally:
            del mapped

    def __array__(self, dtype=None, copy=None):
        return self[:] if dtype is None else self[:].astype(dtype)


class ActivationStore:
    """Activation rows with their metadata, in memory or memory-mapped from disk, read like one matrix.

    Rows are ordered by text id, then position. ``store[i]`` is one row, ``store[a:b]`` or ``store[indices]`` a
    ``(n, dim)`` float32 array; :meth:`iter_chunks` streams it and :meth:`minibatches` draws shuffled batches. A
    store on disk holds at most one chunk in RAM at a time during streaming.

    Example:
        >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
        >>> store.shape, store.in_memory
        ((6, 32), True)
        >>> store
        ActivationStore(6 token rows × 32, layer='layer:1', 2 texts, in memory)
        >>> store[0].shape, store[1:4].shape, store[[0, 5]].shape
        ((32,), (3, 32), (2, 32))
    """

    def __init__(
        self,
        chunks: Sequence[np.ndarray],
        meta: dict[str, np.ndarray],
        texts: Sequence[str],
        info: dict,
        directory: Path | None = None,
    ):
        self._chunks = list(chunks)
        dims = {c.shape[1] for c in self._chunks if c.ndim == 2}
        if len(dims) > 1:
            raise ValueError(f"chunks have different widths {sorted(dims)}")
        self.dim = int(info.get("dim", dims.pop() if dims else 0))
        self._bounds = np.cumsum([0] + [len(c) for c in self._chunks]).astype(np.int64)
        self._meta = {name: np.asarray(meta[name], dtype=np.int64) for name in META_FIELDS}
        for name, values in self._meta.items():
            if len(values) != self._bounds[-1]:
                raise ValueError(f"metadata {name} has {len(values)} rows for {self._bounds[-1]} activation rows")
        self.texts = list(texts)
        self.info = dict(info)
        self.directory = directory

    # ------------------------------------------------------------------ matrix behaviour
    def __len__(self) -> int:
        return int(self._bounds[-1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, dim)``."""
        return len(self), self.dim

    @property
    def in_memory(self) -> bool:
        """Whether the rows live in RAM (``False`` when they are memory-mapped from disk)."""
        return not any(isinstance(c, _DiskChunk) for c in self._chunks)

    @property
    def layer(self) -> str:
        """Module path of the layer the rows were read from."""
        return str(self.info.get("layer", ""))

    @property
    def unit(self) -> str:
        """``"token"`` (one row per token) or ``"sentence"`` (one pooled row per text)."""
        return str(self.info.get("unit", "token"))

    @property
    def nbytes(self) -> int:
        """Size of the activation matrix in bytes."""
        return len(self) * self.dim * 4

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            index = int(key)
            if not -len(self) <= index < len(self):
                raise IndexError(f"row {index} out of range for a store of {len(self)} rows")
            return self._rows(np.array([index % len(self)]))[0]
        if isinstance(key, slice):
            return self._rows(np.arange(len(self))[key])
        indices = np.asarray(key)
        if indices.dtype == bool:
            indices = np.flatnonzero(indices)
        if indices.size and (indices.min() < -len(self) or indices.max() >= len(self)):
            raise IndexError(f"row indices out of range for a store of {len(self)} rows")
        return self._rows(indices.astype(np.int64) % max(len(self), 1))

    def _rows(self, indices: np.ndarray) -> np.ndarray:
        out = np.empty((len(indices), self.dim), dtype=np.float32)
        if not len(indices):
            return out
        chunk_of = np.searchsorted(self._bounds, indices, side="right") - 1
        for chunk in np.unique(chunk_of):
            where = np.flatnonzero(chunk_of == chunk)
            local = indices[where] - self._bounds[chunk]
            order = np.argsort(local, kind="stable")  # sorted reads are sequential on a memory map
            out[where[order]] = self._chunks[chunk][local[order]]
        return out

    def iter_chunks(self, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_row, block)`` over the whole store in order; ``rows`` re-blocks to that many rows.

        Example:
            >>> store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
            >>> [(start, block.shape) for start, block in store.iter_chunks(200)]
            [(0, (200, 32)), (200, (200, 32)), (400, (200, 32)), (600, (175, 32))]
            >>> total = sum(block.sum(0) for _, block in store.iter_chunks(200))
            >>> np.allclose(total, store.to_numpy().sum(0), atol=1e-3)
            True
        """
        if rows is None:
            for start, chunk in zip(self._bounds[:-1], self._chunks):
                yield int(start), chunk[:] if isinstance(chunk, _DiskChunk) else np.asarray(chunk, dtype=np.float32)
            return
        rows = check_int("rows", rows, minimum=1)
        for start in range(0, len(self), rows):
            yield start, self._rows(np.arange(start, min(start + rows, len(self))))

    def minibatches(self, batch_size: int, *, seed: int | None = 0, shuffle: bool = True) -> Iterator[np.ndarray]:
        """One epoch of ``(batch_size, dim)`` batches (the last may be smaller).

        In memory, rows are shuffled globally. On disk, chunks are visited in random order and rows in random order
        within each chunk, so only one chunk is read into RAM at a time.

        Example:
            >>> store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
            >>> [batch.shape for batch in store.minibatches(200, seed=1)]
            [(200, 32), (200, 32), (200, 32), (175, 32)]
        """
        for rows in self.minibatch_rows(batch_size, seed=seed, shuffle=shuffle):
            yield self._rows(rows)

    def minibatch_rows(self, batch_size: int, *, seed: int | None = 0, shuffle: bool = True) -> Iterator[np.ndarray]:
        """The row indices of :meth:`minibatches`' batches, in the same order (``minibatches`` reads them).

        A rank of a data-parallel training run reads only its part of each batch's rows
        (:func:`~interp_widgets.concepts.training.train_dictionary`).

        Example:
            >>> store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
            >>> rows = next(store.minibatch_rows(200, seed=1))
            >>> bool(np.array_equal(store[rows], next(store.minibatches(200, seed=1))))
            True
        """
        batch_size = check_int("batch_size", batch_size, minimum=1)
        rng = np.random.default_rng(seed)
        if self.in_memory:
            order = rng.permutation(len(self)) if shuffle else np.arange(len(self))
            for start in range(0, len(self), batch_size):
                yield order[start : start + batch_size]
            return
        # on disk: chunks in random order, rows in random order within each chunk, so that a batch spans one or two
        # chunks (one chunk read into RAM at a time)
        chunk_order = rng.permutation(len(self._chunks)) if shuffle else np.arange(len(self._chunks))
        pending = np.empty(0, dtype=np.int64)
        for index in chunk_order:
            first, n_rows = int(self._bounds[index]), int(self._bounds[index + 1] - self._bounds[index])
            local = rng.permutation(n_rows) if shuffle else np.arange(n_rows)
            pending = np.concatenate([pending, first + local])
            while len(pending) >= batch_size:
                yield pending[:batch_size]
                pending = pending[batch_size:]
        if len(pending):
            yield pending

    def sample(self, n: int, *, seed: int | None = 0) -> np.ndarray:
        """``n`` distinct random rows (all rows, in order, if the store has at most ``n``).

        Example:
            >>> store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
            >>> store.sample(100).shape
            (100, 32)
        """
        if len(self) <= int(n):
            return self[:]
        rng = np.random.default_rng(seed)
        return self._rows(np.sort(rng.choice(len(self), size=int(n), replace=False)))

    def to_numpy(self) -> np.ndarray:
        """The whole matrix in RAM (beware: a store on disk can be larger than memory).

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food."], layer=1, progress=False)
            >>> store.to_numpy().shape
            (3, 32)
        """
        return self[:]

    def row_norms(self, rows_per_chunk: int = 65536) -> np.ndarray:
        """The L2 norm of every row, streamed chunk by chunk (float64).

        Language models write a few rows of enormous norm, the *massive activations* of attention-sink tokens (Sun
        et al., 2024): in SmolLM2 at layer 15 the first token of every text is over 100 times the median norm, and
        those 2 % of the rows carry 97 % of the variance, so a decomposition fitted on them spends itself on those
        rows. :meth:`select` drops them (see its example).

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
            >>> np.allclose(store.row_norms(), np.linalg.norm(store.to_numpy(), axis=1))
            True
        """
        out = np.empty(len(self), dtype=np.float64)
        for start, block in self.iter_chunks(check_int("rows_per_chunk", rows_per_chunk, minimum=1)):
            out[start : start + len(block)] = np.linalg.norm(block.astype(np.float64), axis=1)
        return out

    def select(self, rows, *, path: str | Path | None = None, memory_budget: int | str = "1GB") -> "ActivationStore":
        """A new store of the selected rows (a boolean mask over the rows, or row indices), with their metadata.

        The texts and text ids stay as they are (a text may keep no rows). Rows are copied chunk by chunk: in memory
        up to ``memory_budget``, then to ``path`` (or a temporary directory removed with the store), as
        :func:`collect_activations` does, so a store larger than memory can be filtered. ``info["selected"]`` says
        how many rows were kept.

        Example:
            >>> store = collect_activations(model, tokenizer, texts[:5], layer=1, progress=False)
            >>> norms = store.row_norms()
            >>> kept = store.select(norms < 10 * np.median(norms))  # drop massive activations (attention sinks)
            >>> later = store.select(store.positions > 1)  # or: drop each text's first token ([CLS] is 0)
            >>> len(later), later.info["selected"], later.tokens()[:3]
            (88, '88 of 93 rows', ['third', 'generation', 'is'])
            >>> later.text_rows(0).tolist()[:2], later.texts == store.texts
            ([0, 1], True)
        """
        rows = np.asarray(rows)
        if rows.dtype == bool:
            if rows.shape != (len(self),):
                raise ValueError(f"a boolean row mask needs {len(self)} values (one per row), got shape {rows.shape}")
            keep = rows
        else:
            if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
                raise TypeError("rows must be a boolean mask over the rows or a 1-D array of row indices")
            if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
                raise IndexError(f"row indices out of range for a store of {len(self)} rows")
            keep = np.zeros(len(self), dtype=bool)
            keep[rows] = True
        if path is not None and Path(path).exists() and any(Path(path).iterdir()):
            raise FileExistsError(f"{path} is not empty; choose a new directory for the selected store")
        collector = _Collector(parse_bytes(memory_budget), None if path is None else Path(path))
        collector.dim = self.dim
        for start, block in self.iter_chunks():
            local = np.flatnonzero(keep[start : start + len(block)])
            if len(local):
                collector.add(block[local], {name: values[start + local] for name, values in self._meta.items()})
        info = {**self.info, "selected": f"{int(keep.sum())} of {len(self)} rows"}
        return collector.finish(self.texts, info)

    # ------------------------------------------------------------------ metadata
    @property
    def text_ids(self) -> np.ndarray:
        """Text id of every row (the index of its text in :attr:`texts`)."""
        return self._meta["text_id"]

    @property
    def positions(self) -> np.ndarray:
        """Token position of every row in its text's encoding (-1 for mean-pooled sentence rows)."""
        return self._meta["position"]

    @property
    def offsets(self) -> np.ndarray:
        """``(rows, 2)`` character span of every row's token in its text."""
        return np.stack([self._meta["start"], self._meta["end"]], axis=1)

    @property
    def token_ids(self) -> np.ndarray:
        """Vocabulary id of every row's token (-1 for pooled sentence rows)."""
        return self._meta["token_id"]

    def tokens(self, rows: Sequence[int] | np.ndarray | None = None) -> list[str]:
        """Token strings of the given rows (all rows if ``None``): the text slice, or the token's own string when it
        has no text span (special tokens).

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
            >>> store.tokens([0, 1, 2])
            ['Great', 'food', '.']
            >>> with_special = collect_activations(model, tokenizer, "Great food.", layer=1, include_special=True,
            ...                                    progress=False)
            >>> with_special.tokens()
            ['[CLS]', 'Great', 'food', '.', '[SEP]']
        """
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        spanless = self.info.get("spanless_tokens", {})
        out = []
        for r in rows:
            text = self.texts[self._meta["text_id"][r]]
            a, b = int(self._meta["start"][r]), int(self._meta["end"][r])
            out.append(text[a:b] if b > a else spanless.get(str(int(self._meta["token_id"][r])), ""))
        return out

    def text_rows(self, text_id: int) -> np.ndarray:
        """Row indices of one text, in position order.

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
            >>> store.text_rows(1).tolist(), store.tokens(store.text_rows(1))
            ([3, 4, 5], ['Slow', 'service', '.'])
        """
        if not 0 <= int(text_id) < len(self.texts):
            raise ValueError(f"text id {text_id} out of range; this store holds {len(self.texts)} texts")
        ids = self._meta["text_id"]
        return np.arange(np.searchsorted(ids, text_id, "left"), np.searchsorted(ids, text_id, "right"))

    def metadata(self, rows: Sequence[int] | np.ndarray | None = None):
        """Row metadata as a DataFrame: ``row, text_id, position, token, start, end, token_id``.

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
            >>> store.metadata([0, 1, 3])
               row  text_id  position  token  start  end  token_id
            0    0        0         1  Great      0    5      2307
            1    1        0         2   food      6   10      2833
            2    3        1         1   Slow      0    4      4030
        """
        import pandas as pd

        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        return pd.DataFrame(
            {
                "row": rows,
                "text_id": self._meta["text_id"][rows],
                "position": self._meta["position"][rows],
                "token": self.tokens(rows),
                "start": self._meta["start"][rows],
                "end": self._meta["end"][rows],
                "token_id": self._meta["token_id"][rows],
            }
        )

    # ------------------------------------------------------------------ persistence and combination
    def save(self, path: str | Path) -> Path:
        """Write the store to a directory (``manifest.json``, ``.npy`` chunks and metadata); reopen with :meth:`open`.

        Example:
            >>> store = collect_activations(model, tokenizer, ["Great food.", "Slow service."], layer=1, progress=False)
            >>> tmp = getfixture("tmp_path")
            >>> store.save(tmp / "layer1").name
            'layer1'
            >>> reopened = ActivationStore.open(tmp / "layer1")
            >>> reopened.shape, reopened.in_memory, np.array_equal(reopened[:], store[:])
            ((6, 32), False, True)
        """
        path = Path(path)
        if path.is_file():
            raise FileExistsError(
                f"{path} is a file; ActivationStore.save writes a directory, so choose a new "
                "directory path for the store"
            )
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(f"{path} is not empty; choose a new directory for the store")
        writer = _ChunkWriter(path, self.dim)
        for _, block in self.iter_chunks():
            writer.write(block)
        writer.finish(self._meta, self.texts, self.info)
        return path

    @classmethod
    def open(cls, path: str | Path) -> "ActivationStore":
        """Open a store saved with :meth:`save`, or collected to ``path`` by :func:`collect_activations` (its shards,
        read as one; an unfinished collection raises ``FileNotFoundError`` naming the missing shards, which the same
        ``collect_activations`` call collects). A directory of per-rank stores, as collections across ranks wrote
        them before they were resumable, opens too.

        Example:
            >>> tmp = getfixture("tmp_path")
            >>> _ = collect_activations(model, tokenizer, texts[:5], layer=1, path=tmp / "acts", progress=False)
            >>> store = ActivationStore.open(tmp / "acts")
            >>> store  # doctest: +ELLIPSIS
            ActivationStore(93 token rows × 32, layer='layer:1', 5 texts, on disk at .../acts)
        """
        path = Path(path)
        if (path / "manifest.json").is_file():
            try:
                kind = json.loads((path / "manifest.json").read_text()).get("format")
            except (ValueError, AttributeError):
                kind = None  # _open_one says what is wrong
            return cls._open_job(path) if kind == _JOB.format else cls._open_one(path)
        # a directory of rank shards written before collections were resumable (one store per rank)
        shards = sorted(p for p in path.glob("shard-*") if p.is_dir()) if path.is_dir() else []
        if not shards:
            raise FileNotFoundError(f"{path} holds no activation store (no manifest.json and no shard-* directories)")
        stores = [cls._open_one(p) for p in shards]
        world = {s.info.get("world_size") for s in stores}
        if len(world) != 1 or len(stores) != next(iter(world)):
            raise ValueError(
                f"{path} holds {len(stores)} shards but they were written by world sizes {sorted(world)}; "
                "a rank did not finish collecting"
            )
        return cls.concat(stores)

    @classmethod
    def _open_job(cls, path: Path) -> "ActivationStore":
        """The store of a finished :func:`collect_activations` job at ``path``: its shards, read as one."""
        manifest = read_manifest(path, _JOB)
        n_shards = int(manifest["n_shards"])
        missing = [s for s in range(n_shards) if not (path / _JOB.shard_name(s)).is_dir()]
        if missing:
            listed = ", ".join(map(str, missing[:10])) + (", …" if len(missing) > 10 else "")
            raise FileNotFoundError(
                f"{path} is not finished: {len(missing)} of its {n_shards} shards are missing ({listed}); re-run the "
                "same collect_activations call to collect them"
            )
        store = cls.concat([cls._open_one(path / _JOB.shard_name(s)) for s in range(n_shards)])
        store.info["world_size"] = manifest["world_size"]
        store.directory = path
        return store

    @classmethod
    def _open_one(cls, path: Path) -> "ActivationStore":
        try:
            manifest = json.loads((path / "manifest.json").read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path / 'manifest.json'} is damaged ({err}); collect or save the store again") from None
        if manifest.get("format") != _STORE_FORMAT:
            raise ValueError(f"{path / 'manifest.json'} is not an interp_widgets activation store")
        chunks = [_DiskChunk(path / name) for name in manifest["chunks"]]
        meta = {name: np.load(path / f"meta-{name}.npy") for name in META_FIELDS}
        texts = json.loads((path / "texts.json").read_text())
        return cls(chunks, meta, texts, manifest["info"], directory=path)

    @classmethod
    def concat(cls, stores: Sequence["ActivationStore"]) -> "ActivationStore":
        """Read several stores (for example rank shards) as one; text ids are renumbered to stay unique.

        Example:
            >>> store_a = collect_activations(model, tokenizer, "Great food.", layer=1, progress=False)
            >>> store_b = collect_activations(model, tokenizer, "Slow service.", layer=1, progress=False)
            >>> both = ActivationStore.concat([store_a, store_b])
            >>> both.shape, both.text_ids.tolist(), both.texts
            ((6, 32), [0, 0, 0, 1, 1, 1], ['Great food.', 'Slow service.'])
        """
        stores = list(stores)
        if not stores:
            raise ValueError("no stores to concatenate")
        dims = {s.dim for s in stores if len(s)}
        layers = {s.layer for s in stores}
        if len(dims) > 1 or len(layers) > 1:
            raise ValueError(
                f"stores differ in width {sorted(dims)} or layer {sorted(layers)}; concatenate like with like"
            )
        chunks, meta, texts = [], {name: [] for name in META_FIELDS}, []
        for store in stores:
            chunks.extend(store._chunks)
            for name in META_FIELDS:
                values = np.asarray(store._meta[name])
                meta[name].append(values + len(texts) if name == "text_id" else values)
            texts.extend(store.texts)
        info = {k: v for k, v in stores[0].info.items() if k not in ("rank", "text_offset", "shard")}
        info["dim"] = dims.pop() if dims else stores[0].dim
        if any("spanless_tokens" in s.info for s in stores):  # every part's, not only the first's
            info["spanless_tokens"] = {k: v for s in stores for k, v in s.info.get("spanless_tokens", {}).items()}
        merged = cls(chunks, {k: np.concatenate(v) for k, v in meta.items()}, texts, info)
        merged._keep = stores  # keeps temporary directories of the parts alive
        return merged

    def __repr__(self) -> str:
        if self.in_memory:
            where = "in memory"
        elif self.directory is not None:
            where = f"on disk at {self.directory}"
        else:  # concatenated stores (rank shards, collected parts): several directories
            n_dirs = len({c.path.parent for c in self._chunks if isinstance(c, _DiskChunk)})
            where = f"on disk in {n_dirs} director{'y' if n_dirs == 1 else 'ies'}"
        return (
            f"ActivationStore({len(self)} {self.unit} rows × {self.dim}, layer={self.layer!r}, "
            f"{len(self.texts)} texts, {where})"
        )


class _ChunkWriter:
    """Write activation chunks as ``.npy`` files, then the metadata and manifest."""

    def __init__(self, directory: Path, dim: int):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.names: list[str] = []

    def write(self, block: np.ndarray) -> None:
        name = f"chunk-{len(self.names):05d}.npy"
        np.save(self.directory / name, np.ascontiguousarray(block, dtype=np.float32))
        self.names.append(name)

    def finish(self, meta: dict[str, np.ndarray], texts: Sequence[str], info: dict) -> None:
        for name in META_FIELDS:
            np.save(self.directory / f"meta-{name}.npy", np.asarray(meta[name], dtype=np.int64))
        (self.directory / "texts.json").write_text(json.dumps(list(texts)))
        manifest = {"format": _STORE_FORMAT, "version": 1, "chunks": self.names, "info": {**info, "dim": self.dim}}
        (self.directory / "manifest.json").write_text(json.dumps(manifest, indent=1))


class _Collector:
    """Buffers rows in memory and spills them to disk chunk by chunk once the budget is exceeded."""

    def __init__(self, budget: int, path: Path | None):
        self.budget = budget
        self.chunk_bytes = max(4096, min(budget // 4, 256 << 20))
        self.path = path
        self.buffer: list[np.ndarray] = []
        self.blocks: list[np.ndarray] = []
        self.buffered = 0
        self.total = 0
        self.meta: dict[str, list[np.ndarray]] = {name: [] for name in META_FIELDS}
        self.writer: _ChunkWriter | None = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.dim: int | None = None

    def add(self, rows: np.ndarray, meta: dict[str, np.ndarray]) -> None:
        if self.dim is None:
            self.dim = rows.shape[1]
        self.buffer.append(rows)
        self.buffered += rows.nbytes
        self.total += rows.nbytes
        for name in META_FIELDS:
            self.meta[name].append(np.asarray(meta[name], dtype=np.int64))
        if self.writer is None and (self.path is not None or self.total > self.budget):
            directory = self.path
            if directory is None:
                self.tmp = tempfile.TemporaryDirectory(prefix="interp_widgets_acts_")
                directory = Path(self.tmp.name)
            self.writer = _ChunkWriter(directory, self.dim)
        if self.buffered >= self.chunk_bytes:
            self.flush()

    def _merged_meta(self) -> dict[str, np.ndarray]:
        return {name: (np.concatenate(v) if v else np.zeros(0, np.int64)) for name, v in self.meta.items()}

    def write(self, texts: Sequence[str], info: dict) -> Path:
        """Write every row to disk (to ``path``), then the metadata and the manifest; returns the directory."""
        dim = self.dim if self.dim is not None else int(info.get("dim", 0))
        self.flush()
        if self.writer is None:
            self.writer = _ChunkWriter(self.path, dim)
            for kept in self.blocks:
                self.writer.write(kept)
            self.blocks = []
        self.writer.finish(self._merged_meta(), texts, {**info, "dim": dim})
        return self.writer.directory

    def flush(self) -> None:
        """Merge the buffered per-text blocks into one chunk: written to disk, or kept in RAM under the budget."""
        if self.buffer:
            block = np.concatenate(self.buffer)
            if self.writer is not None:
                for kept in self.blocks:  # blocks merged before the budget was exceeded go to disk first
                    self.writer.write(kept)
                self.blocks = []
                self.writer.write(block)
            else:
                self.blocks.append(block)
            self.buffer, self.buffered = [], 0

    def finish(self, texts: Sequence[str], info: dict) -> ActivationStore:
        self.flush()
        if self.writer is None:
            dim = self.dim if self.dim is not None else int(info.get("dim", 0))
            blocks = self.blocks or [np.zeros((0, dim), np.float32)]
            return ActivationStore(blocks, self._merged_meta(), texts, {**info, "dim": dim})
        store = ActivationStore._open_one(self.write(texts, info))
        if self.tmp is not None:
            store._tmp = self.tmp  # the directory is deleted when the store is garbage-collected
            weakref.finalize(store, shutil.rmtree, self.tmp.name, True)
        return store


def _config_width(model) -> int:
    """The hidden size in the model's config (1024 when it has none): the row width assumed before a row is seen."""
    config = getattr(model, "config", None)
    for key in ("hidden_size", "n_embd", "d_model"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1024


def collect_activations(
    model,
    tokenizer,
    texts: str | Sequence[str],
    *,
    layer: str | int,
    unit: str = "token",
    pooling: str | None = None,
    include_special: bool = False,
    memory_budget: int | str = "1GB",
    path: str | Path | None = None,
    process_group=None,
    shard_size: int | None = None,
    recompute: bool = False,
    reassign: bool = False,
    max_batch_tokens: int = 8192,
    progress: bool = True,
) -> ActivationStore:
    """Run ``model`` over ``texts`` and store the output of ``layer`` per token or per text.

    Args:
        model, tokenizer: a Hugging Face classifier, causal LM or masked LM and its fast tokenizer.
        texts: one text or a list of texts; a chat conversation (a list of ``{"role", "content"}`` messages) or a
            list of them is rendered once by the tokenizer's chat template (the store keeps the rendered text,
            and the template's own tokens count as special tokens).
        layer: ``"layer:i"``, an int block index, or a module path (``interp_widgets.layers.layer_names(model)`` lists them). An
            encoder–decoder names the stack: ``"encoder.layer:i"`` runs the encoder alone on each text;
            ``"decoder.layer:i"`` reads each text as a target (after the decoder's start token) with the same text
            as the source, one row per text token.
        unit: ``"token"`` (one row per token) or ``"sentence"`` (one pooled row per text).
        pooling: for ``unit="sentence"``: ``"cls"`` (first token), ``"mean"`` (over kept tokens) or ``"last"``
            (last kept token). Default ``"last"`` for causal LMs and tokenizers without a CLS token, else ``"cls"``.
        include_special: keep special tokens ([CLS], [SEP], BOS…) as rows; padding is always dropped.
        memory_budget: bytes of activations kept in RAM; beyond that, chunks of a quarter of the budget (at most
            256 MB) stream to disk (a temporary directory removed with the store, or ``path``). Activation memory
            peaks at the budget plus two chunks (the chunk being filled, and the rows of the texts batched
            together); row metadata adds 40 bytes per row.
        path: a directory to collect to (the store is then on disk) as a resumable job, below: new, empty, or an
            earlier run of the same call, which is resumed. Required with ``process_group``.
        process_group: a ``torch.distributed`` group; rank ``r`` collects the shards ``s`` with
            ``s % world == r`` and, after a barrier, every rank returns the store of all shards. ``path`` must be
            shared by the ranks.
        shard_size: with ``path``, texts per shard, ``S``: shard ``s`` is ``texts[s*S:(s+1)*S]`` whatever the world
            size, and its texts are batched among themselves only. Default ``len(texts) // 50`` (at least 1), so a
            kill loses at most 2 % of the job; larger shards batch more texts together (fewer forward passes).
        recompute: collect the job at ``path`` again from the start (its shards are deleted), even a finished one or
            another job.
        reassign: resume with another world size than the run's (refused otherwise). Shard boundaries do not depend
            on the world size, so neither does the store; the missing shards are split among this run's ranks.
        max_batch_tokens: padded tokens per forward pass at most. Texts are sorted by length within runs of
            consecutive texts (as many as one chunk of rows holds, at most 4,096, within one shard with ``path``) and
            a pass pads at most 5 % of its tokens; the store keeps text order whatever the batching, and each row
            equals a forward pass of its text alone up to float rounding (about 1e-6 relative in float32).
        progress: show a tqdm progress bar (a resumed run's starts at the texts already collected).

    The layers after ``layer`` are not run. The model is left untouched (modes restored, hooks removed).

    With ``path``, the collection resumes, as :func:`~interp_widgets.attribution.attribute_corpus` does (the two share
    :mod:`interp_widgets._shards`). Each shard is written whole, as a store directory ``path/shard-000000`` renamed
    into place once complete, and ``path/manifest.json`` records sha256 fingerprints of the weights, the tokenizer and
    the texts, the settings that change what is computed (``layer``, ``unit``, ``pooling``, ``include_special``,
    ``max_batch_tokens`` and ``memory_budget``, which bounds how many texts are sorted by length together), the shard
    size and the world size. A killed run resumes with the same call: only the missing shards are collected (a
    partly written one is redone), each in the same batches, so the store is bitwise equal to an uninterrupted run's
    (on the same hardware, library versions and thread count). Re-running a finished job raises ``FileExistsError``
    (open it with :meth:`ActivationStore.open`, or pass ``recompute=True``); resuming with another model, tokenizer,
    settings, texts or shard size raises ``ValueError`` naming what differs, and with another number of ranks
    ``ValueError`` saying how to resume (the same ``--nproc-per-node``, or ``reassign=True``).

    Example:
        >>> store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
        >>> store
        ActivationStore(775 token rows × 32, layer='layer:1', 40 texts, in memory)
        >>> pooled = collect_activations(model, tokenizer, texts, layer=-1, unit="sentence", progress=False)
        >>> pooled.shape, pooled.positions[:3].tolist()  # one [CLS] row per text
        ((40, 32), [0, 0, 0])
        >>> small = collect_activations(model, tokenizer, texts, layer=0, memory_budget="10kB", progress=False)
        >>> small.in_memory, small.shape == store.shape
        (False, True)
        >>> last = collect_activations(lm, lm_tokenizer, "The room was", layer=1, unit="sentence", progress=False)
        >>> last.info["pooling"], last.tokens()  # a causal LM pools its last token; a sentence row shows its text
        ('last', ['The room was'])
        >>> chat = collect_activations(chat_lm, chat_tokenizer, [{"role": "user", "content": "Hi!"}], layer=1,
        ...                            progress=False)
        >>> chat.tokens()[-3:], chat.texts[0].startswith("<|im_start|>system")  # the default system prompt, then Hi!
        (['H', 'i', '!'], True)
        >>> run = getfixture("tmp_path") / "acts"
        >>> collect_activations(model, tokenizer, texts[:6], layer=1, path=run, shard_size=4, progress=False)
        ActivationStore(128 token rows × 32, layer='layer:1', 6 texts, on disk at .../acts)
        >>> sorted(p.name for p in run.iterdir())  # a killed run resumes with the same call, collecting what is missing
        ['manifest.json', 'shard-000000', 'shard-000001']
        >>> collect_activations(model, tokenizer, texts[:6], layer=1, path=run, shard_size=4, progress=False)
        Traceback (most recent call last):
        ...
        FileExistsError: ... is finished: load it with ActivationStore.open('...'), or pass recompute=True to ...
    """
    from tqdm.auto import tqdm

    if not isinstance(texts, str) and hasattr(texts, "__iter__") and not isinstance(texts, (bytes, dict)):
        texts = list(texts)  # any iterable of texts, generators included
    check_texts(texts, name="texts", call='collect_activations(model, tokenizer, "a text", layer=...)')
    texts = input_items(texts)[0]
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=max_batch_tokens)
    task = task_for(adapter)
    point = resolve_layer(model, layer)
    layer_name = point.name
    run, skip_rows = task.activation_pass(point.module)
    if not texts:
        raise ValueError("no texts given; pass a string or a non-empty list of strings.")
    check_choice("unit", unit, UNITS)
    if pooling is not None and unit != "sentence":
        raise ValueError("pooling applies to unit='sentence' only; drop it or set unit='sentence'")
    if unit == "sentence":
        pooling = pooling or task.default_pooling()
        check_choice("pooling", pooling, POOLINGS)
        if pooling == "cls" and tokenizer.cls_token_id is None:
            raise ValueError("pooling='cls' needs a tokenizer that adds a CLS token; use pooling='last' or 'mean'")
    budget = parse_bytes(memory_budget)
    if process_group is not None and path is None:
        raise ValueError("distributed collection writes each rank's shards to disk; pass path= (a shared directory)")

    captured: dict[str, torch.Tensor] = {}

    def hook(module, inputs, output):
        captured["hidden"] = (output[0] if isinstance(output, (tuple, list)) else output).detach()
        raise _StopForward

    width = _config_width(model)

    def collect(part: Sequence, offset: int, collector: _Collector, bar) -> tuple[list[str], dict[str, str]]:
        """Add the rows of the texts ``part`` (texts ``offset`` onwards) to ``collector``, in text order (the hook
        installed): returns the text each row points into (a conversation's rendered template) and the strings of
        the tokens without a text span (special tokens, trimmed spaces)."""
        read: list[str] = []
        spanless: dict[str, str] = {}

        def windows() -> Iterator[list]:
            """Consecutive runs of encoded texts whose rows fit in one chunk (at most ``_WINDOW_TEXTS`` texts): texts
            are batched by length within a run, and the run's rows are added to the store in text order."""
            encodings, tokens = [], 0
            for j, text in enumerate(part):
                try:
                    encodings.append(adapter.encode(text))
                except (TypeError, ValueError) as err:
                    raise type(err)(f"text {offset + j}: {err}") from None
                tokens += len(encodings[-1])
                limit = collector.chunk_bytes // (4 * (collector.dim or width))
                if len(encodings) >= _WINDOW_TEXTS or (unit == "token" and tokens >= limit):
                    yield encodings
                    encodings, tokens = [], 0
            if encodings:
                yield encodings

        window = 0
        for encodings in windows():
            read.extend(e.text for e in encodings)
            per_text: dict[int, tuple[np.ndarray, dict]] = {}
            for batch, ids, mask in _padded_batches(adapter, encodings):
                _capture_pass(run, ids, mask, adapter.device, captured)
                if "hidden" not in captured:
                    raise RuntimeError(f"layer {layer_name} did not run during the forward pass")
                hidden = captured["hidden"].float().cpu().numpy()
                hidden = hidden[:, skip_rows:]  # e.g. a decoder's position j + 1 has read token j
                for row, i in enumerate(batch):
                    per_text[i] = _rows_of(
                        encodings[i],
                        hidden[row, : len(encodings[i])],
                        unit,
                        pooling,
                        include_special,
                        window + i,
                        spanless,
                    )
                bar.update(len(batch))
            for i in range(len(encodings)):
                rows, meta = per_text.pop(i)
                collector.add(rows, meta)
            window += len(encodings)
        return read, spanless

    info = {
        "layer": layer_name,
        "unit": unit,
        "pooling": pooling,
        "include_special": include_special,
        "model": type(model).__name__,
        "name_or_path": str(getattr(model.config, "_name_or_path", "")),
    }
    # a part without rows still records the width, read from the layer's config
    config_dim = int(getattr(model.config, "hidden_size", 0) or getattr(model.config, "n_embd", 0) or 0)

    if path is None:  # in memory up to the budget, then a temporary directory
        collector = _Collector(budget, None)
        bar = tqdm(total=len(texts), desc=f"activations {layer_name}", unit="text", disable=not progress)
        try:
            with evaluation(model), torch.inference_mode(), hooks(model, {layer_name: hook}):
                read, spanless = collect(texts, 0, collector, bar)
        finally:
            bar.close()
        info.update(spanless_tokens=spanless, rank=0, world_size=1, text_offset=0)
        if collector.dim is None:
            info["dim"] = config_dim
        return collector.finish(read, info)

    # to a path: a resumable job of fixed shards (interp_widgets._shards), each written whole as a store directory
    path, n = Path(path), len(texts)
    group = Group(process_group)
    shard_size = shard_size_for(n, shard_size)
    settings = {"layer": layer_name, "unit": unit, "pooling": pooling, "include_special": include_special,
                "max_batch_tokens": max_batch_tokens, "memory_budget": budget}  # fmt: skip
    planned = planned_manifest(_JOB, model, tokenizer, texts, shard_size=shard_size, world_size=group.world,
                               settings=settings)  # fmt: skip
    done, todo = start_job(path, planned, _JOB, group, recompute=recompute, reassign=reassign)
    mine = [len(shard_range(s, shard_size, n)) for s in range(planned["n_shards"]) if s % group.world == group.rank]
    mine_done = [len(shard_range(s, shard_size, n)) for s in done if s % group.world == group.rank]
    bar = tqdm(total=sum(mine), initial=sum(mine_done), unit="text",  # a resumed run starts at what was done
               desc=f"activations {layer_name}" + (f" (rank {group.rank})" if group.world > 1 else ""),
               disable=not progress, position=group.rank)  # fmt: skip
    try:
        with evaluation(model), torch.inference_mode(), hooks(model, {layer_name: hook}):
            for shard in todo:
                part = shard_range(shard, shard_size, n)
                name = _JOB.shard_name(shard)
                collector = _Collector(budget, temporary_path(path, name))  # one per shard: its own batches
                read, spanless = collect([texts[i] for i in part], part.start, collector, bar)
                extra = {"dim": config_dim} if collector.dim is None else {}
                commit(collector.write(read, {**info, "spanless_tokens": spanless, "shard": shard,
                                              "text_offset": part.start, **extra}), path / name)  # fmt: skip
    finally:
        bar.close()
    group.barrier()
    return ActivationStore.open(path)


def _rows_of(
    enc,
    hidden: np.ndarray,
    unit: str,
    pooling: str | None,
    include_special: bool,
    text_id: int,
    spanless: dict[str, str],
) -> tuple[np.ndarray, dict]:
    keep = _kept_tokens(enc, include_special)
    for i in np.flatnonzero((enc.offsets[:, 1] <= enc.offsets[:, 0]) & keep):
        spanless.setdefault(str(int(enc.input_ids[i])), enc.tokens[i])
    if unit == "token":
        index = np.flatnonzero(keep)
        meta = {
            "text_id": np.full(len(index), text_id),
            "position": index,
            "start": enc.offsets[index, 0],
            "end": enc.offsets[index, 1],
            "token_id": enc.input_ids[index],
        }
        return np.ascontiguousarray(hidden[index], dtype=np.float32), meta
    kept = np.flatnonzero(keep)
    if not len(kept):
        raise ValueError(f"text {text_id} has no tokens left after dropping special tokens")
    if pooling == "mean":
        row, position, token_id = hidden[kept].mean(axis=0), -1, -1
    else:
        position = 0 if pooling == "cls" else int(kept[-1])
        row, token_id = hidden[position], int(enc.input_ids[position])
    meta = {"text_id": [text_id], "position": [position], "start": [0], "end": [len(enc.text)], "token_id": [token_id]}
    return np.asarray(row, dtype=np.float32)[None], meta
