"""Columnar, bounded record of per-step geometry measurements, with live subscriptions and safe persistence.

:class:`GeometryLog` is what the training monitor (:class:`~interp_widgets.geometry.monitor.AnisotropyMonitor`)
and checkpoint replay (:func:`~interp_widgets.geometry.replay.replay`) fill in, and what
:func:`GeometryLog.load` returns. It stores one row per recorded step in numpy column buffers:

* **series names** are flat: global series (``"loss"``, ``"fitting"``, user scalars from :meth:`GeometryLog.log`)
  and per-layer series ``"<metric>|<layer>"``, e.g. ``"energy_ratio|layer:2"`` (see :data:`LAYER_METRICS`);
* missing values are NaN; rows are kept in step order;
* the buffers are **bounded**: when ``max_rows`` rows are held, every second row is dropped and from then on
  only every second new row is kept (the stride doubles each time), so the record stays evenly spaced over the
  whole run and memory stays flat however long training runs; subscribers still see every row;
* raw per-control values (``E_N`` and ``ΔIso*`` of every control) live in side matrices (:meth:`GeometryLog.raw`).

Subscribers (the live widget) get ``callback(step, values)`` with the flat names; persistence is safetensors +
JSON (:meth:`GeometryLog.save`), never pickle.

Example:
    >>> log = GeometryLog(layers=["layer:0"])
    >>> seen = []
    >>> unsubscribe = log.subscribe(lambda step, values: seen.append((step, values["loss"])))
    >>> log.log(0, loss=2.5)
    >>> seen, log.series_names()
    ([(0, 2.5)], ['loss'])
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
import torch

from interp_widgets.series_names import SEPARATOR as _SEPARATOR, series_name, split_series_name

__all__ = ["GeometryLog", "LAYER_METRICS", "GLOBAL_SERIES", "as_scalar", "series_name", "split_series_name"]

#: Per-layer metric names (the live-widget contract), then extras. Each is logged as ``"<metric>|<layer>"``.
LAYER_METRICS: tuple[str, ...] = (
    "proxy_energy",
    "control_energy_mean",
    "control_energy_q05",
    "control_energy_q95",
    "energy_ratio",
    "control_ratio_q05",
    "control_ratio_q95",
    "enrichment",
    "z_score",
    "p_value",
    "isoscore_star_G",
    "delta_isoscore_proxy",
    "delta_isoscore_control_mean",
    "delta_isoscore_control_q05",
    "delta_isoscore_control_q95",
    "anisotropy_share",
    "avg_cosine",
    "isoscore",
    "effective_rank",
    # extras
    "anisotropy_share_control_mean",
    "isoscore_star_G_minus_proxy",
    "energy_mean_direction",
    "avg_cosine_centered",
    "participation_ratio",
    "effective_rank_eigen",
    "stable_rank",
    "top1_explained_variance",
    "drift_share",
    "n_tokens",
    "nonfinite",
)

#: Global series always present: the loss and the fit-window indicator.
GLOBAL_SERIES: tuple[str, ...] = ("loss", "fitting")

_FORMAT = "interp_widgets.GeometryLog"
_VERSION = 1


def _check_scalar_name(name: str) -> None:
    if not isinstance(name, str) or not name or _SEPARATOR in name:
        raise ValueError(f"scalar names must be non-empty strings without {_SEPARATOR!r}, got {name!r}")


def as_scalar(name: str, value) -> float:
    """Validate a user scalar (name without ``|``; a number or a one-element tensor) and return it as a float.

    Example:
        >>> as_scalar("lr", 1e-3)
        0.001
    """
    _check_scalar_name(name)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        value = value.detach().item()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


class GeometryLog:
    """A bounded, columnar record of geometry measurements over steps (or checkpoints).

    Args:
        layers: the layer spec strings measured (e.g. ``["layer:2"]``), in display order.
        x_label: ``"step"`` for live training, ``"checkpoint"`` for replays.
        max_rows: bound on stored rows (≥ 2); reaching it halves the stored density (see the module notes).
        meta: JSON-serialisable settings kept with the record (rank, fit window, seeds, …).

    Example:
        >>> log = GeometryLog(layers=["layer:0"], x_label="checkpoint")
        >>> log.log(3, accuracy=0.5)
        >>> log.to_dataframe().to_dict("records")
        [{'step': 3, 'layer': None, 'metric': 'accuracy', 'value': 0.5}]
    """

    def __init__(self, layers: Iterable[str] = (), *, x_label: str = "step", max_rows: int = 100_000,
                 meta: Mapping | None = None) -> None:
        if x_label not in ("step", "checkpoint"):
            raise ValueError(f"x_label must be 'step' or 'checkpoint', got {x_label!r}")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
            raise ValueError(f"max_rows must be an integer >= 2, got {max_rows!r}")
        self.layers: list[str] = [str(layer) for layer in layers]
        self.x_label = x_label
        self.max_rows = max_rows
        self.meta: dict = dict(meta or {})
        self.proxies: dict[str, torch.Tensor] = {}
        self._size = 0
        self._offered, self._stride, self._thinned_step = 0, 1, None
        self._steps = np.zeros(16, dtype=np.int64)
        self._columns: dict[str, np.ndarray] = {}
        self._raw: dict[str, np.ndarray] = {}
        self._subscribers: list[Callable[[int, dict], None]] = []
        self._flush_callbacks: list[Callable[[], None]] = []
        self._widget = None

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        """Number of stored rows.

        Example:
            >>> log = GeometryLog(); log.log(0, loss=1.0); len(log)
            1
        """
        return self._size

    @property
    def steps(self) -> np.ndarray:
        """Steps (or checkpoint indices) of the stored rows, ascending.

        Example:
            >>> log = GeometryLog(); log.log(0, loss=1.0); log.log(5, loss=0.5); log.steps.tolist()
            [0, 5]
        """
        return self._steps[: self._size].copy()

    def series_names(self) -> list[str]:
        """All series names known so far: global ones first, then per-layer ones.

        Example:
            >>> log = GeometryLog(["layer:0"]); log.log(0, lr=0.1); log.series_names()
            ['lr']
        """
        names = list(self._columns)
        return [n for n in names if split_series_name(n)[1] is None] + [
            n for n in names if split_series_name(n)[1] is not None
        ]

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of one series (NaN where it was not measured).

        Example:
            >>> log = GeometryLog(); log.log(0, lr=0.1); log.log(1, loss=2.0)
            >>> log.series("lr")[1].tolist()
            [0.1, nan]
        """
        if name not in self._columns:
            raise KeyError(f"unknown series {name!r}; known: {self.series_names()}")
        return self.steps, self._columns[name][: self._size].copy()

    def raw(self, name: str) -> np.ndarray:
        """Per-control values of one layer, rows × n_controls: ``"control_energy|<layer>"`` or
        ``"delta_isoscore_control|<layer>"`` (NaN rows where nothing was measured).

        Example:
            >>> log = GeometryLog(["l"])
            >>> log._record(0, {"loss": 1.0}, raw={"control_energy|l": np.array([0.1, 0.2])})
            >>> log.raw("control_energy|l").tolist()
            [[0.1, 0.2]]
        """
        if name not in self._raw:
            raise KeyError(f"unknown raw series {name!r}; known: {sorted(self._raw)}")
        return self._raw[name][: self._size].copy()

    def to_dataframe(self):
        """Long-format ``pandas.DataFrame`` with columns ``step, layer, metric, value`` (NaN values dropped).

        ``layer`` is None for global series. The first column is named ``step`` whatever :attr:`x_label` says.

        Example:
            >>> log = GeometryLog(["layer:0"]); log.log(2, loss=0.5)
            >>> log.to_dataframe().columns.tolist()
            ['step', 'layer', 'metric', 'value']
        """
        import pandas as pd

        frames = []
        steps = self._steps[: self._size]
        for name in self.series_names():
            values = self._columns[name][: self._size]
            keep = ~np.isnan(values)
            if not keep.any():
                continue
            metric, layer = split_series_name(name)
            frames.append(pd.DataFrame({
                "step": steps[keep], "layer": layer, "metric": metric, "value": values[keep],
            }))
        if not frames:
            return pd.DataFrame({"step": pd.Series(dtype="int64"), "layer": pd.Series(dtype="object"),
                                 "metric": pd.Series(dtype="object"), "value": pd.Series(dtype="float64")})
        frame = pd.concat(frames, ignore_index=True)
        frame["layer"] = frame["layer"].astype(object).where(frame["layer"].notna(), None)
        return frame.sort_values(["step", "metric", "layer"], kind="stable", na_position="first").reset_index(
            drop=True
        )

    # ------------------------------------------------------------------ writing
    def log(self, step: int, **scalars) -> None:
        """Record user scalars (``lr=…``, ``accuracy=…``, ``loss=…``) at ``step`` and tell the subscribers.

        Values for a step that already has a row are merged into it; a new step must come after the last row.

        Example:
            >>> log = GeometryLog(); log.log(0, lr=0.1, accuracy=0.5); log.log(0, loss=2.0); len(log)
            1
        """
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        if not scalars:
            raise ValueError("log() needs at least one scalar, e.g. log(step, lr=1e-4)")
        values = {name: as_scalar(name, value) for name, value in scalars.items()}
        self._record(int(step), values)

    def _record(self, step: int, values: Mapping[str, float], raw: Mapping[str, np.ndarray] | None = None) -> None:
        """Store ``values`` (flat names) at ``step`` (merged into the last row if it has the same step), notify."""
        latest = True
        if self._size and step < self._steps[self._size - 1]:
            row = int(np.searchsorted(self._steps[: self._size], step))
            if self._steps[row] != step:
                raise ValueError(
                    f"{self.x_label} {step} comes before the last recorded {self.x_label} "
                    f"{self._steps[self._size - 1]} and has no row to merge into; record in increasing order"
                )
            latest = False  # stored, but not pushed: subscribers see steps in increasing order
        elif self._size and step == self._steps[self._size - 1]:
            row = self._size - 1
        elif step == self._thinned_step or not self._append_row(step):
            self._thinned_step = step  # dropped by thinning: subscribers still see it
            self._notify(step, dict(values))
            return
        else:
            row = self._size - 1
        for name, value in values.items():
            column = self._columns.get(name)
            if column is None:
                column = self._columns[name] = np.full(self._steps.shape[0], np.nan)
            column[row] = value
        for name, vector in (raw or {}).items():
            vector = np.asarray(vector, dtype=np.float64).reshape(-1)
            matrix = self._raw.get(name)
            if matrix is None or matrix.shape[1] != vector.shape[0]:
                if matrix is not None:
                    raise ValueError(f"raw series {name!r} changed length from {matrix.shape[1]} to {vector.shape[0]}")
                matrix = self._raw[name] = np.full((self._steps.shape[0], vector.shape[0]), np.nan)
            matrix[row] = vector
        if latest:
            self._notify(step, dict(values))

    def _append_row(self, step: int) -> bool:
        """Append a row for ``step``; False if thinning drops it (only every ``stride``-th new row is kept)."""
        offered = self._offered
        self._offered += 1
        if offered % self._stride:
            return False
        if self._size == self.max_rows:
            self._stride *= 2
            keep = slice(0, self._size, 2)
            kept = len(range(0, self._size, 2))
            self._steps[:kept] = self._steps[keep].copy()
            for buffers in (self._columns, self._raw):
                for name, buffer in buffers.items():
                    buffer[:kept] = buffer[keep].copy()
                    buffer[kept:] = np.nan
            self._size = kept
        if self._size == self._steps.shape[0]:
            capacity = min(max(16, 2 * self._size), self.max_rows)
            self._steps = np.resize(self._steps, capacity)
            for buffers in (self._columns, self._raw):
                for name, buffer in buffers.items():
                    grown = np.full((capacity,) + buffer.shape[1:], np.nan)
                    grown[: self._size] = buffer[: self._size]
                    buffers[name] = grown
        self._steps[self._size] = step
        for buffers in (self._columns, self._raw):
            for buffer in buffers.values():
                buffer[self._size] = np.nan
        self._size += 1
        return True

    # ------------------------------------------------------------------ subscriptions (live widget contract)
    def subscribe(self, callback: Callable[[int, dict], None]) -> Callable[[], None]:
        """Call ``callback(step, values)`` for every recorded step; returns a function that unsubscribes.

        ``values`` maps flat series names to floats (NaN where missing). Steps arrive in increasing order (a step
        may come again with more values, e.g. scalars logged after its measurement); values merged into an older
        row are stored but not pushed. A callback that raises is reported as a warning and never interrupts
        training.

        Example:
            >>> log = GeometryLog(); seen = []
            >>> stop = log.subscribe(lambda step, values: seen.append(step))
            >>> log.log(0, lr=1.0); stop(); log.log(1, lr=1.0); seen
            [0]
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable(step, values), got {type(callback).__name__}")
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _notify(self, step: int, values: dict) -> None:
        for callback in list(self._subscribers):
            try:
                callback(step, values)
            except Exception as error:  # a display problem must never stop training
                warnings.warn(f"a GeometryLog subscriber raised {type(error).__name__}: {error}", RuntimeWarning,
                              stacklevel=3)

    def on_flush(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Register ``fn()`` to run when the monitor's ``with`` block ends (normally, on error or Ctrl-C).

        Returns a function that removes it. The live widget uses this to push its last buffered points.

        Example:
            >>> log = GeometryLog(); calls = []
            >>> remove = log.on_flush(lambda: calls.append(1)); log._flush_hooks(); calls
            [1]
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable(), got {type(fn).__name__}")
        self._flush_callbacks.append(fn)

        def remove() -> None:
            if fn in self._flush_callbacks:
                self._flush_callbacks.remove(fn)

        return remove

    def _flush_hooks(self) -> None:
        for fn in list(self._flush_callbacks):
            try:
                fn()
            except Exception as error:
                warnings.warn(f"a flush callback raised {type(error).__name__}: {error}", RuntimeWarning,
                              stacklevel=2)

    # ------------------------------------------------------------------ display
    def widget(self):
        """The live :class:`~interp_widgets.widgets.monitor.MonitorWidget` of this record (created once, cached).

        Example:
            >>> GeometryLog(["layer:0"]).widget()  # doctest: +SKIP
        """
        if self._widget is None:
            from interp_widgets.widgets.monitor import MonitorWidget

            self._widget = MonitorWidget(self)
        return self._widget

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)

    def chart(self, metric: str = "energy_ratio", layers: Iterable[str] | None = None):
        """Altair chart of one per-layer metric against the step, one line per layer.

        For ``energy_ratio`` the y axis is logarithmic and the controls' 5–95 % ratio band is drawn around 1; the
        early fit window, if any, is shaded.

        Example:
            >>> log = GeometryLog(["layer:0"])
            >>> log._record(0, {"energy_ratio|layer:0": 3.0}); log._record(1, {"energy_ratio|layer:0": 2.0})
            >>> type(log.chart()).__name__
            'LayerChart'
        """
        import altair as alt
        import pandas as pd

        chosen = list(self.layers if layers is None else layers)
        unknown = [layer for layer in chosen if layer not in self.layers]
        if unknown:
            raise ValueError(f"unknown layers {unknown}; this record has {self.layers}")
        known = {split_series_name(n)[0] for n in self.series_names() if split_series_name(n)[1] is not None}
        if metric not in known:
            raise ValueError(f"no per-layer series {metric!r} recorded; available: {sorted(known)}")
        frame = self.to_dataframe()
        frame = frame[frame["layer"].isin(chosen)]
        lines = frame[frame["metric"] == metric]
        log_scale = metric == "energy_ratio" and bool((lines["value"] > 0).all())
        y = alt.Y("value:Q", title=metric, scale=alt.Scale(type="log") if log_scale else alt.Undefined)
        x = alt.X("step:Q", title=self.x_label)
        layered = [alt.Chart(lines).mark_line(point=True).encode(x=x, y=y, color="layer:N",
                                                                   tooltip=["step", "layer", "value"])]
        if metric == "energy_ratio":
            wide = frame[frame["metric"].isin(["control_ratio_q05", "control_ratio_q95"])].pivot_table(
                index=["step", "layer"], columns="metric", values="value").reset_index()
            if {"control_ratio_q05", "control_ratio_q95"} <= set(wide.columns) and len(wide):
                layered.insert(0, alt.Chart(wide).mark_area(opacity=0.15).encode(
                    x=x, y=alt.Y("control_ratio_q05:Q", title=metric,
                                 scale=alt.Scale(type="log") if log_scale else alt.Undefined),
                    y2="control_ratio_q95:Q", color="layer:N"))
        window = self.meta.get("fit_window")
        if window:
            shade = pd.DataFrame({"start": [window[0]], "stop": [window[1]]})
            layered.insert(0, alt.Chart(shade).mark_rect(opacity=0.08, color="grey").encode(x="start:Q",
                                                                                              x2="stop:Q"))
        return alt.layer(*layered).properties(title=f"{metric} per layer", width=480, height=240)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the record to directory ``path``: ``history.safetensors`` (columns, raw values, proxy bases) and
        ``meta.json`` (names, layers, settings). No pickle.

        Example:
            >>> import tempfile
            >>> log = GeometryLog(["layer:0"]); log.log(0, loss=1.5)
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     GeometryLog.load(log.save(tmp + "/run")).series("loss")[1].tolist()
            [1.5]
        """
        from safetensors.torch import save_file

        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {"steps": torch.from_numpy(self._steps[: self._size].copy())}
        columns, raw, proxies = {}, {}, {}
        for i, (name, values) in enumerate(self._columns.items()):
            columns[name] = f"column.{i}"
            tensors[f"column.{i}"] = torch.from_numpy(values[: self._size].copy())
        for i, (name, values) in enumerate(self._raw.items()):
            raw[name] = f"raw.{i}"
            tensors[f"raw.{i}"] = torch.from_numpy(values[: self._size].copy())
        for i, (layer, basis) in enumerate(self.proxies.items()):
            proxies[layer] = f"proxy.{i}"
            tensors[f"proxy.{i}"] = basis.detach().to("cpu", torch.float64).contiguous()
        save_file(tensors, str(directory / "history.safetensors"))
        meta = {"format": _FORMAT, "version": _VERSION, "layers": self.layers, "x_label": self.x_label,
                "max_rows": self.max_rows, "stride": self._stride, "offered": self._offered, "columns": columns, "raw": raw, "proxies": proxies, "meta": self.meta}
        (directory / "meta.json").write_text(json.dumps(meta, indent=1, allow_nan=True))
        return directory

    @classmethod
    def load(cls, path: str | Path) -> "GeometryLog":
        """Read a record written by :meth:`save` (from a monitor, a replay or another log).

        Example:
            >>> GeometryLog.load("runs/minilm")  # doctest: +SKIP
        """
        from safetensors.torch import load_file

        directory = Path(path)
        meta_path, data_path = directory / "meta.json", directory / "history.safetensors"
        if not meta_path.is_file() or not data_path.is_file():
            raise FileNotFoundError(f"{directory} is not a saved GeometryLog (needs meta.json and history.safetensors)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{meta_path} is not a GeometryLog record (format {meta.get('format')!r})")
        if meta.get("version", 0) > _VERSION:
            raise ValueError(f"{meta_path} has version {meta['version']}; this library reads up to {_VERSION}")
        tensors = load_file(str(data_path))
        log = cls(meta["layers"], x_label=meta["x_label"], max_rows=meta["max_rows"], meta=meta["meta"])
        steps = tensors["steps"].numpy()
        size = steps.shape[0]
        capacity = max(16, size)
        log._steps = np.zeros(capacity, dtype=np.int64)
        log._steps[:size] = steps
        log._size = size
        log._stride, log._offered = meta.get("stride", 1), meta.get("offered", size)
        for target, names in ((log._columns, meta["columns"]), (log._raw, meta["raw"])):
            for name, key in names.items():
                values = tensors[key].numpy()
                buffer = np.full((capacity,) + values.shape[1:], np.nan)
                buffer[:size] = values
                target[name] = buffer
        log.proxies = {layer: tensors[key] for layer, key in meta["proxies"].items()}
        return log

    def snapshot(self) -> "GeometryLog":
        """A plain :class:`GeometryLog` copy of the record (no subscribers, no model references).

        Example:
            >>> log = GeometryLog(["a"]); log.log(0, x=1.0); copy = log.snapshot(); log.log(1, x=2.0); len(copy)
            1
        """
        copy = GeometryLog(self.layers, x_label=self.x_label, max_rows=self.max_rows, meta=json.loads(
            json.dumps(self.meta)))
        copy._size, copy._offered, copy._stride = self._size, self._offered, self._stride
        copy._steps = self._steps.copy()
        copy._columns = {name: buffer.copy() for name, buffer in self._columns.items()}
        copy._raw = {name: buffer.copy() for name, buffer in self._raw.items()}
        copy.proxies = {layer: basis.clone() for layer, basis in self.proxies.items()}
        return copy

    def __repr__(self) -> str:
        last = f", last {self.x_label} {int(self._steps[self._size - 1])}" if self._size else ""
        return f"{type(self).__name__}(layers={self.layers}, rows={self._size}{last})"
