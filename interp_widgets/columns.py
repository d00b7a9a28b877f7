"""The growing column store: one row per step in numpy buffers, used by the geometry log and the monitor widget.

A :class:`ColumnStore` holds a step vector, one float column per series and one ``rows × n`` matrix per raw series;
missing values are NaN and rows are kept in step order. Rows come in two ways: :meth:`ColumnStore.put` merges values
into the row of their step (the :class:`~interp_widgets.geometry.GeometryLog`: late scalars join their step's row),
:meth:`ColumnStore.append` always adds a row (the :class:`~interp_widgets.widgets.MonitorWidget`: one row per
``log`` call). With ``max_rows`` the buffers are **bounded**: when ``max_rows`` rows are held, every second row is
dropped and from then on only every second new row is kept (the stride doubles each time), so the record stays
evenly spaced over the whole run and memory stays flat; without it they grow. The store knows nothing of series
names, subscribers or files, and needs no torch: it hands its buffers to ``save`` as arrays
(:meth:`ColumnStore.arrays`) and takes them back (:meth:`ColumnStore.from_arrays`). The browser keeps its own copy
of the rows (``js/src/lib/plot_store.js``).

Example:
    >>> store = ColumnStore(max_rows=4)
    >>> for step in range(10):
    ...     _ = store.put(step, {"loss": float(step)})
    >>> store.steps.tolist(), store.column("loss").tolist()
    ([0, 4, 8], [0.0, 4.0, 8.0])
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["ColumnStore"]


class ColumnStore:
    """Step-ordered numpy columns, bounded or growing (see the module notes for the thinning rule).

    Args:
        max_rows: bound on stored rows (≥ 2), or None to keep every row.
        label: what a step is called in error messages (``"step"`` or ``"checkpoint"``).
        step_dtype: dtype of the steps (integers for the log; float64 for the widget, whose steps may be floats).
        dtype: dtype of the columns and raw matrices (float32 halves the widget's memory and is what it sends).

    Example:
        >>> store = ColumnStore(max_rows=8, label="checkpoint")
        >>> store.put(0, {"x": 1.0}), store.put(0, {"y": 2.0}), len(store), store.names()
        (True, True, 1, ['x', 'y'])
    """

    def __init__(
        self, max_rows: int | None = None, label: str = "step", *, step_dtype=np.int64, dtype=np.float64
    ) -> None:
        self.max_rows, self.label = max_rows, label
        self.step_dtype, self.dtype = np.dtype(step_dtype), np.dtype(dtype)
        self.size, self.offered, self.stride, self.thinned_step = 0, 0, 1, None
        self.step_buffer = np.zeros(16, dtype=self.step_dtype)
        self.columns: dict[str, np.ndarray] = {}
        self.raw: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        """Number of stored rows.

        Example:
            >>> len(ColumnStore(4))
            0
        """
        return self.size

    @property
    def steps(self) -> np.ndarray:
        """Steps of the stored rows, ascending (a copy).

        Example:
            >>> store = ColumnStore(4); _ = store.put(3, {"x": 1.0}); store.steps.tolist()
            [3]
        """
        return self.step_buffer[: self.size].copy()

    @property
    def last_step(self) -> int | None:
        """The step of the newest stored row, None while empty.

        Example:
            >>> store = ColumnStore(4); _ = store.put(3, {"x": 1.0}); store.last_step
            3
        """
        return int(self.step_buffer[self.size - 1]) if self.size else None

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (steps, columns, raw matrices); bounded by ``max_rows``.

        Example:
            >>> ColumnStore(4).nbytes  # the empty step buffer has room for 16 steps
            128
        """
        return self.step_buffer.nbytes + sum(
            buffer.nbytes for buffers in (self.columns, self.raw) for buffer in buffers.values()
        )

    def names(self) -> list[str]:
        """Column names in the order they first appeared.

        Example:
            >>> store = ColumnStore(4); _ = store.put(0, {"b": 1.0, "a": 2.0}); store.names()
            ['b', 'a']
        """
        return list(self.columns)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The stored values of one column, rows ``start:stop`` (a copy; KeyError if unknown).

        Example:
            >>> store = ColumnStore(4); _ = store.put(0, {"x": 1.0}); _ = store.put(1, {"y": 2.0})
            >>> store.column("x").tolist(), store.column("y", 1).tolist()
            ([1.0, nan], [2.0])
        """
        return self.columns[name][start : self.size if stop is None else min(stop, self.size)].copy()

    def step_range(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The steps of rows ``start:stop`` (a copy).

        Example:
            >>> store = ColumnStore(step_dtype=np.float64); store.append(0.5, {"x": 1.0}); store.append(0.75, {"x": 2.0})
            >>> store.step_range(1)
            array([0.75])
        """
        return self.step_buffer[start : self.size if stop is None else min(stop, self.size)].copy()

    def raw_matrix(self, name: str) -> np.ndarray:
        """The stored ``rows × n`` matrix of one raw series (a copy; KeyError if unknown).

        Example:
            >>> store = ColumnStore(4); _ = store.put(0, {}, raw={"r": np.array([1.0, 2.0])})
            >>> store.raw_matrix("r").tolist()
            [[1.0, 2.0]]
        """
        return self.raw[name][: self.size].copy()

    def put(self, step: int, values: Mapping[str, float], raw: Mapping[str, np.ndarray] | None = None) -> bool:
        """Store ``values`` (and raw vectors) at ``step``, merged into the row of that step if it has one.

        Returns whether ``step`` is the newest step (stored, or dropped by thinning), i.e. whether subscribers
        should be told; False for values merged into an older row. A step before the last row that has no row
        raises a ValueError.

        Example:
            >>> store = ColumnStore(4); store.put(0, {"x": 1.0}), store.put(2, {"x": 2.0}), store.put(0, {"y": 3.0})
            (True, True, False)
        """
        latest = True
        last = self.last_step
        if last is not None and step < last:
            row = int(np.searchsorted(self.step_buffer[: self.size], step))
            if self.step_buffer[row] != step:
                raise ValueError(
                    f"{self.label} {step} comes before the last recorded {self.label} {last} and has "
                    f"no row to merge into; record in increasing order"
                )
            latest = False  # stored, but not pushed: subscribers see steps in increasing order
        elif last is not None and step == last:
            row = self.size - 1
        elif step == self.thinned_step or not self._append_row(step):
            self.thinned_step = step  # dropped by thinning: subscribers still see it
            return True
        else:
            row = self.size - 1
        self._write(row, step, values)
        for name, vector in (raw or {}).items():
            vector = np.asarray(vector, dtype=np.float64).reshape(-1)
            matrix = self.raw.get(name)
            if matrix is None:
                matrix = self.raw[name] = np.full((self.step_buffer.shape[0], vector.shape[0]), np.nan, self.dtype)
            elif matrix.shape[1] != vector.shape[0]:
                raise ValueError(f"raw series {name!r} changed length from {matrix.shape[1]} to {vector.shape[0]}")
            matrix[row] = vector
        return latest

    def append(self, step: float, values: Mapping[str, float]) -> None:
        """Add a row at ``step`` after the last one, even for the same step (never merged); with ``max_rows``,
        thinning may drop it. A value that is not a number raises a TypeError naming its series, and its row is
        dropped (the rows before it stay).

        Example:
            >>> store = ColumnStore(step_dtype=np.float64, dtype=np.float32)
            >>> store.append(1, {"loss": 0.5}); store.append(1, {"loss": 0.25}); store.column("loss").tolist()
            [0.5, 0.25]
        """
        last = self.last_step
        if last is not None and step < last:
            raise ValueError(f"{self.label}s must not decrease: got {step!r} after {last!r}")
        if not self._append_row(step):
            return
        row = self.size - 1
        try:
            self._write(row, step, values)
        except TypeError:
            self.size = row
            for buffers in (self.columns, self.raw):
                for buffer in buffers.values():
                    buffer[row] = np.nan  # rows past the last one stay empty (see _append_row)
            raise

    def extend(self, steps: np.ndarray, columns: Mapping[str, np.ndarray]) -> None:
        """Append many rows at once: ``steps`` and, per series, one value per step (an unbounded store only).

        Example:
            >>> store = ColumnStore(); store.extend(np.array([0, 1]), {"x": np.array([1.0, 2.0])}); store.column("x")
            array([1., 2.])
        """
        if self.max_rows is not None:
            raise ValueError("extend() needs an unbounded store (max_rows=None)")
        steps = np.asarray(steps)
        n = steps.shape[0]
        if not n:
            return
        start = self.size
        self._grow(start + n)
        self.step_buffer[start : start + n] = steps
        for buffers in (self.columns, self.raw):
            for buffer in buffers.values():
                buffer[start : start + n] = np.nan
        for name, values in columns.items():
            self._buffer(name)[start : start + n] = values
        self.size += n
        self.offered += n

    def _buffer(self, name: str) -> np.ndarray:
        column = self.columns.get(name)
        if column is None:
            column = self.columns[name] = np.full(self.step_buffer.shape[0], np.nan, self.dtype)
        return column

    def _write(self, row: int, step: float, values: Mapping[str, float]) -> None:
        """Write ``values`` into ``row``; a value that is not a number raises a TypeError naming its series."""
        columns = self.columns
        for name, value in values.items():
            column = columns.get(name)
            if column is None:
                column = self._buffer(name)
            try:
                column[row] = value
            except (TypeError, ValueError):
                raise TypeError(f"series {name!r} at {self.label} {step:g}: expected a number, got {value!r}") from None

    def _grow(self, rows: int) -> None:
        """Make room for ``rows`` rows (doubling, capped at ``max_rows``)."""
        if rows <= self.step_buffer.shape[0]:
            return
        capacity = max(16, 2 * self.step_buffer.shape[0], rows)
        if self.max_rows is not None:
            capacity = min(capacity, self.max_rows)
        steps = np.zeros(capacity, dtype=self.step_dtype)
        steps[: self.size] = self.step_buffer[: self.size]
        self.step_buffer = steps
        for buffers in (self.columns, self.raw):
            for name, buffer in buffers.items():
                grown = np.full((capacity,) + buffer.shape[1:], np.nan, self.dtype)
                grown[: self.size] = buffer[: self.size]
                buffers[name] = grown

    def _append_row(self, step: int) -> bool:
        """Append a row for ``step``; False if thinning drops it (only every ``stride``-th new row is kept)."""
        offered = self.offered
        self.offered += 1
        if offered % self.stride:
            return False
        if self.max_rows is not None and self.size == self.max_rows:
            self.stride *= 2
            keep = slice(0, self.size, 2)
            kept = len(range(0, self.size, 2))
            self.step_buffer[:kept] = self.step_buffer[keep].copy()
            for buffers in (self.columns, self.raw):
                for buffer in buffers.values():
                    buffer[:kept] = buffer[keep].copy()
                    buffer[kept:] = np.nan
            self.size = kept
        # Every buffer is NaN past its last row (new and grown buffers start NaN, thinning and a failed append
        # clear what they leave), so a new row starts empty without touching the other columns.
        self._grow(self.size + 1)
        self.step_buffer[self.size] = step
        self.size += 1
        return True

    def copy(self) -> "ColumnStore":
        """An independent copy of the buffers and the thinning state.

        Example:
            >>> store = ColumnStore(4); _ = store.put(0, {"x": 1.0}); copy = store.copy(); _ = store.put(1, {"x": 2.0})
            >>> len(copy), len(store)
            (1, 2)
        """
        copy = ColumnStore(self.max_rows, self.label, step_dtype=self.step_dtype, dtype=self.dtype)
        copy.size, copy.offered, copy.stride, copy.thinned_step = (
            self.size,
            self.offered,
            self.stride,
            self.thinned_step,
        )
        copy.step_buffer = self.step_buffer.copy()
        copy.columns = {name: buffer.copy() for name, buffer in self.columns.items()}
        copy.raw = {name: buffer.copy() for name, buffer in self.raw.items()}
        return copy

    def arrays(self) -> tuple[dict[str, np.ndarray], dict]:
        """The stored rows as arrays (``steps``, ``column.i``, ``raw.i``) and the JSON-able layout: ``stride``,
        ``offered`` and the ``columns`` / ``raw`` name → array key maps (what :meth:`from_arrays` reads back).

        Example:
            >>> store = ColumnStore(4); _ = store.put(0, {"x": 1.0})
            >>> arrays, layout = store.arrays(); sorted(arrays), layout
            (['column.0', 'steps'], {'stride': 1, 'offered': 1, 'columns': {'x': 'column.0'}, 'raw': {}})
        """
        arrays = {"steps": self.steps}
        layout: dict = {"stride": self.stride, "offered": self.offered, "columns": {}, "raw": {}}
        for kind, buffers, prefix in (("columns", self.columns, "column"), ("raw", self.raw, "raw")):
            for i, (name, buffer) in enumerate(buffers.items()):
                layout[kind][name] = f"{prefix}.{i}"
                arrays[f"{prefix}.{i}"] = buffer[: self.size].copy()
        return arrays, layout

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], layout: Mapping, max_rows: int | None, label: str = "step"
    ) -> "ColumnStore":
        """The store that :meth:`arrays` described (``stride`` and ``offered`` default to an unthinned record).

        Example:
            >>> store = ColumnStore(4); _ = store.put(5, {"x": 1.0})
            >>> ColumnStore.from_arrays(*store.arrays(), max_rows=4).column("x").tolist()
            [1.0]
        """
        store = cls(max_rows, label)
        steps = np.asarray(arrays["steps"])
        size = steps.shape[0]
        capacity = max(16, size)
        store.step_buffer = np.zeros(capacity, dtype=store.step_dtype)
        store.step_buffer[:size] = steps
        store.size = size
        store.stride, store.offered = layout.get("stride", 1), layout.get("offered", size)
        for target, names in ((store.columns, layout["columns"]), (store.raw, layout["raw"])):
            for name, key in names.items():
                values = np.asarray(arrays[key])
                buffer = np.full((capacity,) + values.shape[1:], np.nan, store.dtype)
                buffer[:size] = values
                target[name] = buffer
        return store
