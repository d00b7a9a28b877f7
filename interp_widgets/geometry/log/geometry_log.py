"""Columnar, bounded record of per-step geometry measurements, with live subscriptions and safe persistence.

:class:`GeometryLog` is what the training monitor (:class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor`)
and checkpoint replay (:func:`~interp_widgets.geometry.monitor.replay.replay`) fill in, and what
:func:`GeometryLog.load` returns. It stores one row per recorded step in numpy column buffers:

* **series names** are flat: global series (``"loss"``, ``"fitting"``, user scalars from :meth:`GeometryLog.log`)
  and per-layer series ``"<metric>|<layer>"``, e.g. ``"energy_ratio|layer:2"`` (see :data:`LAYER_METRICS`);
* missing values are NaN; rows are kept in step order;
* the buffers are **bounded** (:class:`~interp_widgets.columns.ColumnStore`): when ``max_rows`` rows
  are held, every second row is dropped and from then on only every second new row is kept (the stride doubles
  each time), so the record stays evenly spaced over the whole run and memory stays flat however long training
  runs; subscribers still see every row;
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
from pathlib import Path
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import torch

from interp_widgets.geometry.log.callbacks import Callbacks
from interp_widgets.columns import ColumnStore
from interp_widgets.geometry.log.persistence import read_record, write_record
from interp_widgets.geometry.log.views import layer_chart, long_frame

from interp_widgets.series_names import SEPARATOR as _SEPARATOR, series_name, split_series_name
from interp_widgets.validation import check_int, check_step as validated_step

__all__ = [
    "GeometryLog",
    "LAYER_METRICS",
    "GLOBAL_SERIES",
    "as_scalar",
    "check_step",
    "series_name",
    "split_series_name",
]

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


def _check_scalar_name(name: str) -> None:
    if not isinstance(name, str) or not name or _SEPARATOR in name:
        raise ValueError(f"scalar names must be non-empty strings without {_SEPARATOR!r}, got {name!r}")


def check_step(step) -> int:
    """Validate a step (a non-negative integer, not a bool) and return it as an ``int``.

    Example:
        >>> check_step(np.int64(3)), type(check_step(np.int64(3))).__name__
        (3, 'int')
    """
    return validated_step(step)


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

    def __init__(
        self, layers: Iterable[str] = (), *, x_label: str = "step", max_rows: int = 100_000, meta: Mapping | None = None
    ) -> None:
        if x_label not in ("step", "checkpoint"):
            raise ValueError(f"x_label must be 'step' or 'checkpoint', got {x_label!r}")
        check_int("max_rows", max_rows, minimum=2)
        self.layers: list[str] = [str(layer) for layer in layers]
        self.x_label = x_label
        self.max_rows = max_rows
        self.meta: dict = dict(meta or {})
        self.proxies: dict[str, torch.Tensor] = {}
        self._store = ColumnStore(max_rows, x_label)
        self._subscribers = Callbacks("GeometryLog subscriber", "callable(step, values)")
        self._flush_callbacks = Callbacks("flush callback")
        self._widget = None

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        """Number of stored rows.

        Example:
            >>> log = GeometryLog(); log.log(0, loss=1.0); len(log)
            1
        """
        return len(self._store)

    @property
    def steps(self) -> np.ndarray:
        """Steps (or checkpoint indices) of the stored rows, ascending.

        Example:
            >>> log = GeometryLog(); log.log(0, loss=1.0); log.log(5, loss=0.5); log.steps.tolist()
            [0, 5]
        """
        return self._store.steps

    @property
    def nbytes(self) -> int:
        """Bytes held by the column buffers: bounded by ``max_rows``, however long the run.

        Example:
            >>> log = GeometryLog(max_rows=32); sizes = []
            >>> for step in range(1000):
            ...     log.log(step, loss=1.0); sizes.append(log.nbytes) if step in (99, 999) else None
            >>> len(log), sizes  # 32 int64 steps + 32 float64 values, at step 99 as at step 999
            (32, [512, 512])
        """
        return self._store.nbytes

    def series_names(self) -> list[str]:
        """All series names known so far: global ones first, then per-layer ones.

        Example:
            >>> log = GeometryLog(["layer:0"]); log.log(0, lr=0.1); log.series_names()
            ['lr']
        """
        names = self._store.names()
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
        if name not in self._store.columns:
            raise KeyError(f"unknown series {name!r}; known: {self.series_names()}")
        return self.steps, self._store.column(name)

    def raw(self, name: str) -> np.ndarray:
        """Per-control values of one layer, rows × n_controls: ``"control_energy|<layer>"`` or
        ``"delta_isoscore_control|<layer>"`` (NaN rows where nothing was measured).

        Example:
            >>> log = GeometryLog(["l"])
            >>> log.record(0, {"loss": 1.0}, raw={"control_energy|l": np.array([0.1, 0.2])})
            >>> log.raw("control_energy|l").tolist()
            [[0.1, 0.2]]
        """
        if name not in self._store.raw:
            raise KeyError(f"unknown raw series {name!r}; known: {sorted(self._store.raw)}")
        return self._store.raw_matrix(name)

    def to_dataframe(self):
        """Long-format ``pandas.DataFrame`` with columns ``step, layer, metric, value`` (NaN values dropped).

        ``layer`` is None for global series. The first column is named ``step`` whatever :attr:`x_label` says.

        Example:
            >>> log = GeometryLog(["layer:0"]); log.log(2, loss=0.5)
            >>> log.to_dataframe().columns.tolist()
            ['step', 'layer', 'metric', 'value']
        """
        return long_frame(self, split_series_name)

    # ------------------------------------------------------------------ writing
    def log(self, step: int, **scalars) -> None:
        """Record user scalars (``lr=…``, ``accuracy=…``, ``loss=…``) at ``step`` and tell the subscribers.

        Values for a step that already has a row are merged into it; a new step must come after the last row.

        Example:
            >>> log = GeometryLog(); log.log(0, lr=0.1, accuracy=0.5); log.log(0, loss=2.0); len(log)
            1
        """
        step = check_step(step)
        if not scalars:
            raise ValueError("log() needs at least one scalar, e.g. log(step, lr=1e-4)")
        self.record(step, {name: as_scalar(name, value) for name, value in scalars.items()})

    def record(self, step: int, values: Mapping[str, float], raw: Mapping[str, np.ndarray] | None = None) -> None:
        """Store already-validated ``values`` (flat series names → floats) and ``raw`` per-control vectors at
        ``step``, merged into the row of that step if it has one, and tell the subscribers about the newest step.

        This is how the monitor and replay write measurement rows; user code logs with :meth:`log`.

        Example:
            >>> log = GeometryLog(["layer:0"]); log.record(4, {"energy_ratio|layer:0": 2.0})
            >>> log.series("energy_ratio|layer:0")[1].tolist()
            [2.0]
        """
        if self._store.put(step, values, raw):
            self._subscribers.call(step, dict(values))

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
        return self._subscribers.add(callback)

    def on_flush(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Register ``fn()`` to run at every :meth:`flush` (the monitor flushes when its ``with`` block ends:
        normally, on error or on Ctrl-C). Returns a function that removes it. The live widget uses this to push its
        last buffered points.

        Example:
            >>> log = GeometryLog(); calls = []
            >>> remove = log.on_flush(lambda: calls.append(1)); log.flush(); calls
            [1]
        """
        return self._flush_callbacks.add(fn)

    def flush(self) -> None:
        """Run the :meth:`on_flush` callbacks now; one that raises is reported as a warning.

        Example:
            >>> log = GeometryLog(); _ = log.on_flush(lambda: print("flushed")); log.flush()
            flushed
        """
        self._flush_callbacks.call()

    # ------------------------------------------------------------------ display
    def widget(self):
        """The live :class:`~interp_widgets.widgets.monitor.MonitorWidget` of this record (created once, cached).

        Example:
            >>> log = GeometryLog(["layer:0"]); log.log(0, loss=1.0)
            >>> log.widget(), log.widget() is log.widget()
            (MonitorWidget('Training monitor', 1 layers, 1 rows, last step 0), True)
        """
        if self._widget is None:
            from interp_widgets.widgets.monitor import MonitorWidget

            self._widget = MonitorWidget(self)
        return self._widget

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)

    def _display_(self):  # marimo's display protocol: shown as the view, through marimo's anywidget support
        return self.widget()

    def chart(self, metric: str = "energy_ratio", layers: Iterable[str] | None = None):
        """Altair chart of one per-layer metric against the step, one line per layer.

        For ``energy_ratio`` the y axis is logarithmic and the controls' 5–95 % ratio band is drawn around 1; the
        early fit window, if any, is shaded.

        Example:
            >>> log = GeometryLog(["layer:0"])
            >>> log.record(0, {"energy_ratio|layer:0": 3.0}); log.record(1, {"energy_ratio|layer:0": 2.0})
            >>> type(log.chart()).__name__
            'LayerChart'
        """
        return layer_chart(self, split_series_name, metric, layers)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the record to directory ``path``: ``history.safetensors`` (columns, raw values, proxy bases) and
        ``meta.json`` (names, layers, settings). No pickle.

        Example:
            >>> import tempfile
            >>> log = GeometryLog(["layer:0"]); log.log(0, loss=1.5)
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     sorted(path.name for path in log.save(tmp + "/run").iterdir())
            ['history.safetensors', 'meta.json']
        """
        header = {"layers": self.layers, "x_label": self.x_label, "max_rows": self.max_rows, "meta": self.meta}
        return write_record(path, header, self._store, self.proxies)

    @classmethod
    def load(cls, path: str | Path) -> "GeometryLog":
        """Read a record written by :meth:`save` (from a monitor, a replay or another log).

        Example:
            >>> import tempfile
            >>> log = GeometryLog(["layer:0"], x_label="checkpoint"); log.log(2, loss=1.5)
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     GeometryLog.load(log.save(tmp + "/run"))
            GeometryLog(layers=['layer:0'], rows=1, last checkpoint 2)
        """
        header, store, proxies = read_record(path)
        log = cls(header["layers"], x_label=header["x_label"], max_rows=header["max_rows"], meta=header["meta"])
        log._store, log.proxies = store, proxies
        return log

    def snapshot(self) -> "GeometryLog":
        """A plain :class:`GeometryLog` copy of the record (no subscribers, no model references).

        Example:
            >>> log = GeometryLog(["a"]); log.log(0, x=1.0); copy = log.snapshot(); log.log(1, x=2.0); len(copy)
            1
        """
        copy = GeometryLog(
            self.layers, x_label=self.x_label, max_rows=self.max_rows, meta=json.loads(json.dumps(self.meta))
        )
        copy._store = self._store.copy()
        copy.proxies = {layer: basis.clone() for layer, basis in self.proxies.items()}
        return copy

    def __repr__(self) -> str:
        last = self._store.last_step
        last = "" if last is None else f", last {self.x_label} {last}"
        return f"{type(self).__name__}(layers={self.layers}, rows={len(self)}{last})"
