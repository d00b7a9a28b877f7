"""Live training monitor widget: loss, subspace-alignment and anisotropy curves that update while a cell runs.

:class:`MonitorWidget` keeps every logged row in numpy columns and streams only new rows to the browser, where a
bundled canvas plotter (``js/src/monitor.js``) redraws at most once per animation frame. Everything interactive
(hover readouts, layer and panel toggles, smoothing, zoom and pan, linear/log scales) runs in the browser, so it
keeps working while the kernel is busy training; nothing needs to travel back to Python.

Streaming protocol (see ``js/src/lib/plot_store.js``):

* ``log()`` only queues the row (a few µs). A flush happens when at least ``flush_interval`` seconds (default
  0.1 s, i.e. ≤ 10 flushes/s) have passed since the previous one, on :meth:`MonitorWidget.flush`, and is forced on
  exit, exception and ``KeyboardInterrupt``: when the :class:`~interp_widgets.geometry.AnisotropyMonitor` flushes, when a
  ``with widget:`` block ends, and after every notebook cell (an IPython ``post_execute`` hook).
* One flush = one custom message ``{"type": "iw-monitor-append", "series", "start", "rows"}`` with two
  little-endian buffers: the steps as float64 and the values of the series present in the block as float32,
  series-major.
* Every ``checkpoint_interval`` seconds, and at every forced flush, the whole history goes into the ``checkpoint``
  ``Bytes`` trait (steps float64, then every column float32) with its ``checkpoint_schema``, so new views, page
  reloads, saved widget state and :meth:`~InterpWidget.export_html` pages show the whole curve.
* A closed widget or a failing front-end connection never stops the training loop: sending is skipped (closed) or
  switched off with one warning (failure), and logging keeps recording.

Static output: :meth:`MonitorWidget.chart` is an altair chart of the same data; the widget's ``image/svg+xml``
fallback is that chart rendered offline with vl-convert. The fallback is computed when the widget is displayed; to
put the final curves into the saved notebook, display the widget with :meth:`MonitorWidget.show` (the final flush
then refreshes that output), or use ``handle = display(widget, display_id=True)`` and ``handle.update(widget)``
after training.

Example:
    >>> widget = MonitorWidget(layers=["layer.0", "layer.1"])
    >>> for step in range(3):
    ...     widget.log(step, {"loss": 1.0 / (step + 1), "energy_ratio|layer.0": 2.0}, lr=1e-3)
    >>> widget.flush()
    >>> widget.rows
    3
"""

from __future__ import annotations

import math
import time
import uuid
import warnings
import weakref
from typing import Any, Callable, ClassVar, Iterable, Mapping

import numpy as np
import traitlets

from interp_widgets.columns import ColumnStore
from interp_widgets.series_names import split_series_name
from interp_widgets.widgets.view_data import MonitorData
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._svg import SVG_NS, SvgFigure

APPEND_MESSAGE = "iw-monitor-append"
PANEL_KINDS = ("lines", "heatmap")
SCALES = ("linear", "log")

#: The default panels: loss, the proxy/control energy ratio with the controls' 5–95% band (log scale), ΔIsoScore*
#: of the proxy against the controls, three anisotropy measures per layer and a layer × step heatmap of the ratio.
DEFAULT_PANELS: tuple[dict[str, Any], ...] = (
    {"id": "loss", "title": "Loss", "kind": "lines", "series": ["loss"], "scale": "linear"},
    {"id": "energy_ratio", "title": "Energy ratio: tangent proxy / controls (band: controls 5–95%)", "kind": "lines",
     "metric": "energy_ratio", "band": ["control_ratio_q05", "control_ratio_q95"], "scale": "log", "reference": 1.0},
    {"id": "delta_isoscore", "title": "ΔIsoScore*: proxy (solid), controls mean (dashed), 5–95% band",
     "kind": "lines", "metric": "delta_isoscore_proxy", "dashed": ["delta_isoscore_control_mean"],
     "band": ["delta_isoscore_control_q05", "delta_isoscore_control_q95"], "scale": "linear"},
    {"id": "avg_cosine", "title": "Average cosine similarity", "kind": "lines", "metric": "avg_cosine"},
    {"id": "isoscore", "title": "IsoScore", "kind": "lines", "metric": "isoscore"},
    {"id": "effective_rank", "title": "Effective rank", "kind": "lines", "metric": "effective_rank"},
    {"id": "ratio_heatmap", "title": "Energy ratio by layer (log10; red = proxy above controls)", "kind": "heatmap",
     "metric": "energy_ratio", "scale": "log"},
)  # fmt: skip


def _check_panel(panel: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(panel, Mapping):
        raise TypeError(
            f"a panel must be a dict like {{'id': 'lr', 'title': 'Learning rate', 'series': ['lr']}}, got {panel!r}"
        )
    config = dict(panel)
    if not isinstance(config.get("id"), str) or not config["id"]:
        raise ValueError(f"panel {panel!r} needs a non-empty string 'id'")
    config.setdefault("title", config["id"])
    config.setdefault("kind", "lines")
    config.setdefault("scale", "linear")
    config.setdefault("series", [])
    if config["kind"] not in PANEL_KINDS:
        raise ValueError(f"panel {config['id']!r} has kind {config['kind']!r}; use one of {PANEL_KINDS}")
    if config["scale"] not in SCALES:
        raise ValueError(f"panel {config['id']!r} has scale {config['scale']!r}; use 'linear' or 'log'")
    if config["kind"] == "heatmap" and not config.get("metric"):
        raise ValueError(f"heatmap panel {config['id']!r} needs a per-layer 'metric' such as 'energy_ratio'")
    if isinstance(config["series"], str) or not all(isinstance(s, str) for s in config["series"]):
        raise TypeError(f"panel {config['id']!r}: 'series' must be a list of series names")
    config["series"] = list(config["series"])
    band = config.get("band")
    if band is not None and (len(band) != 2 or not all(isinstance(b, str) for b in band)):
        raise ValueError(f"panel {config['id']!r}: 'band' must be two per-layer metric names [low, high]")
    return config


def _m4_indices(x: np.ndarray, y: np.ndarray, buckets: int) -> np.ndarray:
    """Indices of the finite points of y kept by M4 decimation into ``buckets`` equal-width x buckets."""
    finite = np.flatnonzero(np.isfinite(y))
    if finite.size <= 4 * buckets:
        return finite
    xs = x[finite]
    span = xs[-1] - xs[0] or 1.0
    bucket = np.minimum(((xs - xs[0]) / span * buckets).astype(np.int64), buckets - 1)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], bucket.size] - 1
    values = y[finite]
    low = np.minimum.reduceat(values, starts)
    high = np.maximum.reduceat(values, starts)
    keep = np.zeros(finite.size, dtype=bool)
    keep[starts] = keep[ends] = True
    for start, end, lo, hi in zip(starts, ends, low, high):  # ≤ buckets iterations
        segment = values[start : end + 1]
        keep[start + int(np.argmax(segment == lo))] = True
        keep[start + int(np.argmax(segment == hi))] = True
    return finite[keep]


class MonitorWidget(InterpWidget, data=MonitorData):
    """Live curves of a training run: give it an ``AnisotropyMonitor``, or use it standalone with :meth:`log`.

    Series are flat names: global scalars (``"loss"``, ``"lr"``, ``"fitting"`` = 1.0 while the tangent proxy is
    being fitted, shaded in every panel) and per-layer metrics ``"<metric>|<layer>"`` (``energy_ratio``,
    ``control_ratio_q05`` …, see :data:`DEFAULT_PANELS`). NaN means "not logged at this step". Steps must not
    decrease. Any series can be added to a panel with :meth:`add_series`, or panels given as ``panels=[...]``.

    Args:
        monitor: a ``AnisotropyMonitor`` / ``GeometryLog`` (anything with ``subscribe``, ``on_flush``, ``layers`` and
            ``x_label``); the widget starts from the rows it already holds (``steps``, ``series_names()``,
            ``series(name)``, e.g. a finished replay), subscribes to new ones and flushes whenever the monitor does
            (exit, exception, Ctrl-C).
        layers: layer names in display order (standalone use; new layers seen in series names are added).
        x_label: ``"step"``, or ``"checkpoint"`` for replays.
        panels: panel configs (dicts with ``id``, ``title``, ``kind`` "lines"/"heatmap", ``series`` (global
            names), ``metric`` (per-layer), ``band`` ([low, high] per-layer metrics), ``dashed``, ``scale``
            "linear"/"log", ``reference``); default :data:`DEFAULT_PANELS`.
        flush_interval: minimum seconds between streamed flushes (0.1 = at most 10 per second).
        checkpoint_interval: minimum seconds between full-history checkpoints while streaming.
        clock: monotonic time source in seconds (tests pass a fake clock).

    Example:
        >>> widget = MonitorWidget(layers=["encoder.0"], title="fine-tuning")
        >>> with widget:                       # flushes and checkpoints on exit, also on exceptions
        ...     for step in range(100):
        ...         widget.log(step, {"energy_ratio|encoder.0": 1.5}, loss=0.1, lr=1e-4)
        >>> widget.add_series("loss", "lr")
        >>> widget.rows
        100
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "panels": {
            "list": {
                "object": {
                    "id": "str",
                    "title": "str",
                    "kind": {"enum": list(PANEL_KINDS)},
                    "series": {"list": "str"},
                    "scale": {"enum": list(SCALES)},
                    "metric": "str",
                    "band": {"list": "str"},
                    "dashed": {"list": "str"},
                    "reference": "num",
                },
                "required": ["id", "kind", "series", "scale"],
                "open": True,
            }
        },  # other keys dropped
        "checkpoint_schema": {"object": {"series": {"list": "str"}, "rows": "int"}, "required": []},  # {}: no history
    }

    stream_id = traitlets.Unicode(help="Identifies the browser-side store shared by this widget's views.").tag(
        sync=True
    )
    title = traitlets.Unicode("Training monitor").tag(sync=True)
    x_label = traitlets.Unicode("step", help="Name of the x axis: 'step', or 'checkpoint' for replays.").tag(sync=True)
    layers = traitlets.List(traitlets.Unicode(), help="Layer names in display order.").tag(sync=True)
    panels = traitlets.List(traitlets.Dict(), help="Panel configurations, see DEFAULT_PANELS.").tag(sync=True)

    def __init__(
        self,
        monitor: Any = None,
        *,
        layers: Iterable[str] | None = None,
        x_label: str | None = None,
        title: str = "Training monitor",
        panels: Iterable[Mapping[str, Any]] | None = None,
        flush_interval: float = 0.1,
        checkpoint_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        if not flush_interval >= 0 or not checkpoint_interval >= 0:
            raise ValueError("flush_interval and checkpoint_interval must be non-negative numbers of seconds")
        layer_names = list(layers if layers is not None else getattr(monitor, "layers", []) or [])
        if not all(isinstance(layer, str) for layer in layer_names):
            raise TypeError(f"layer names must be strings, got {layer_names!r}")
        label = x_label if x_label is not None else getattr(monitor, "x_label", "step")
        configs = [_check_panel(p) for p in (panels if panels is not None else DEFAULT_PANELS)]
        self._flush_interval = float(flush_interval)
        self._checkpoint_interval = float(checkpoint_interval)
        self._clock = clock
        # every row, growing (steps float64, series float32: what the front end receives)
        self._store = ColumnStore(step_dtype=np.float64, dtype=np.float32)
        self._pending: list[tuple[float, Mapping[str, Any]]] = []
        self._last_step = -math.inf
        self._last_flush = -math.inf
        self._next_checkpoint = -math.inf
        self._checkpointed: tuple[int, int] = (0, 0)  # (rows, columns) in the checkpoint trait
        self._stream_failed = False
        self._handle = None
        self._shown_rows = -1
        self._unsubscribe: Callable[[], None] | None = None
        super().__init__(
            stream_id=uuid.uuid4().hex, title=title, x_label=label, layers=layer_names, panels=configs, **kwargs
        )
        if monitor is not None:
            self._backfill(monitor)
            self._unsubscribe = monitor.subscribe(self._record)
            monitor.on_flush(self._forced_flush)
        self._hook = _register_post_execute(self)

    # ------------------------------------------------------------------ logging
    def log(self, step: int | float, values: Mapping[str, Any] | None = None, **scalars: Any) -> None:
        """Record one row: ``values`` maps series names (``"loss"``, ``"energy_ratio|layer.0"``) to numbers and
        keyword arguments add global scalars. Cheap (queues the row); streams at most every ``flush_interval``.

        Example:
            >>> widget = MonitorWidget(layers=["encoder.0"])
            >>> widget.log(10, {"energy_ratio|encoder.0": 2.5}, loss=0.3, accuracy=0.9)
            >>> widget.series_names(), widget.rows
            (['energy_ratio|encoder.0', 'loss', 'accuracy'], 1)
        """
        if scalars:
            values = {**values, **scalars} if values else scalars
        self._record(step, values or {})

    def _record(self, step: Any, values: Mapping[str, Any]) -> None:
        try:
            x = float(step)
        except (TypeError, ValueError):
            raise TypeError(f"step must be a number, got {step!r}") from None
        if not x >= self._last_step:  # also rejects NaN
            raise ValueError(f"steps must not decrease: got {step!r} after {self._last_step:g}")
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a dict of series name -> number, got {type(values).__name__}")
        self._last_step = x
        self._pending.append((x, values))
        now = self._clock()
        if now - self._last_flush >= self._flush_interval:
            self._flush(now, final=False)

    def flush(self) -> None:
        """Send every queued row now and checkpoint the whole history (also done on exit/exception/Ctrl-C).

        Example:
            >>> widget = MonitorWidget(flush_interval=60.0)
            >>> for step in range(3):  # the first row is sent at once, the next two wait for flush_interval
            ...     widget.log(step, loss=1.0 / (step + 1))
            >>> widget.checkpoint_schema["rows"]
            1
            >>> widget.flush()
            >>> widget.checkpoint_schema
            {'series': ['loss'], 'rows': 3}
        """
        self._flush(self._clock(), final=True)

    def _forced_flush(self, *args: Any, **kwargs: Any) -> None:
        self.flush()

    def __enter__(self) -> "MonitorWidget":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.flush()

    @property
    def rows(self) -> int:
        """Number of logged rows (queued ones included).

        Example:
            >>> MonitorWidget().rows
            0
        """
        return len(self._store) + len(self._pending)

    def series_names(self) -> list[str]:
        """Names of every series logged so far, in order of first appearance.

        Example:
            >>> widget = MonitorWidget(layers=["layer.0"])
            >>> widget.log(0, {"loss": 1.0}); widget.log(1, {"loss": 0.5, "energy_ratio|layer.0": 2.0})
            >>> widget.series_names()
            ['loss', 'energy_ratio|layer.0']
        """
        self._commit()
        return self._store.names()

    def history(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """All rows: ``(steps float64, {series: float32 values, NaN = not logged})`` (copies).

        Example:
            >>> widget = MonitorWidget()
            >>> widget.log(10, loss=0.3, accuracy=0.9); widget.log(11, loss=0.2)
            >>> steps, columns = widget.history()
            >>> steps, columns["accuracy"]
            (array([10., 11.]), array([0.9, nan], dtype=float32))
        """
        self._commit()
        return self._store.steps, {name: self._store.column(name) for name in self._store.names()}

    def _backfill(self, monitor: Any) -> None:
        """Start from the rows a monitor already holds (a finished replay, or a widget made mid-run)."""
        steps = np.asarray(getattr(monitor, "steps", ()), dtype=np.float64)
        if not steps.size or not hasattr(monitor, "series"):
            return
        names = monitor.series_names()
        for name in names:
            self._check_series(name)
        self._store.extend(steps, {name: monitor.series(name)[1] for name in names})
        self._last_step = float(steps[-1])

    # ------------------------------------------------------------------ storage and streaming
    def _check_series(self, name: str) -> None:
        """Check a new series name and add its layer to :attr:`layers`."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"series names must be non-empty strings, got {name!r}")
        _, layer = split_series_name(name)
        if layer is not None and layer not in self.layers:
            self.layers = [*self.layers, layer]

    def _commit(self) -> tuple[int, int]:
        """Move queued rows into the store; returns the new rows' range."""
        start = len(self._store)
        pending, self._pending = self._pending, []
        known = self._store.columns
        for x, values in pending:
            for name in values:
                if name not in known:
                    self._check_series(name)
            self._store.append(x, values)  # a bad value raises; the rows before it stay
        return start, len(self._store)

    def _flush(self, now: float, *, final: bool) -> None:
        self._last_flush = now
        start, end = self._commit()
        if self.comm is None or self._stream_failed:  # closed widget: keep recording, send nothing
            return
        try:
            if end > start:
                self._send_rows(start, end)
            if final or now >= self._next_checkpoint:
                began = time.perf_counter()
                self._write_checkpoint()
                # never spend more than ~5% of the time on checkpoints, however long the history grows
                self._next_checkpoint = now + max(self._checkpoint_interval, 20 * (time.perf_counter() - began))
            if final:
                self._refresh_display()
        except Exception as exc:  # a broken front-end connection must not stop the training loop
            self._stream_failed = True
            warnings.warn(f"MonitorWidget stopped streaming ({type(exc).__name__}: {exc}); logging continues, "
                          "call widget.flush() to retry", RuntimeWarning, stacklevel=3)  # fmt: skip

    def _send_rows(self, start: int, end: int) -> None:
        store = self._store
        columns = {name: store.column(name, start, end) for name in store.names()}
        names = [name for name, column in columns.items() if not np.isnan(column).all()]
        values = np.empty((len(names), end - start), dtype="<f4")
        for s, name in enumerate(names):
            values[s] = columns[name]
        content = {"type": APPEND_MESSAGE, "series": names, "start": start, "rows": end - start}
        self.send(content, buffers=[store.step_range(start, end).astype("<f8").tobytes(), values.tobytes()])

    def checkpoint_bytes(self) -> tuple[bytes, dict[str, Any]]:
        """The whole history in the checkpoint layout: (steps float64 LE, then each column float32 LE), schema.

        Example:
            >>> data, schema = MonitorWidget().checkpoint_bytes()
            >>> data, schema
            (b'', {'series': [], 'rows': 0})
        """
        self._commit()
        store = self._store
        parts = [store.steps.astype("<f8").tobytes()]
        parts += [store.column(name).astype("<f4").tobytes() for name in store.names()]
        return b"".join(parts), {"series": store.names(), "rows": len(store)}

    def _write_checkpoint(self) -> None:
        self._commit()
        shape = self._stored_shape()
        if shape == self._checkpointed:
            return
        data = MonitorData(*self.checkpoint_bytes())
        self._checkpointed = shape  # first: setting the traits calls get_state, which checks it
        with self.hold_sync():
            self.checkpoint_schema = data.checkpoint_schema  # the schema first: the browser reads it with the bytes
            self.checkpoint = data.checkpoint

    def _stored_shape(self) -> tuple[int, int]:
        return len(self._store), len(self._store.columns)

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        # Saved state, export pages and new front ends always get the whole history.
        if self._pending or self._stored_shape() != self._checkpointed:
            self._write_checkpoint()
        return super().get_state(key=key, drop_defaults=drop_defaults)

    def close(self) -> None:
        """Stop listening to the monitor and close the widget (logging into a closed widget still records).

        Example:
            >>> MonitorWidget().close()
        """
        if getattr(self, "_unsubscribe", None) is not None:  # also called by __del__ of a half-built widget
            self._unsubscribe()
            self._unsubscribe = None
        super().close()

    # ------------------------------------------------------------------ panels
    def _panel_index(self, panel: str) -> int:
        for index, config in enumerate(self.panels):
            if panel in (config["id"], config.get("title")):
                return index
        ids = [config["id"] for config in self.panels]
        raise ValueError(f"no panel {panel!r}; panels are {ids} (add one with add_panel)")

    def add_series(self, panel: str, name: str) -> None:
        """Also draw series ``name`` (e.g. a logged ``"lr"`` or ``"accuracy"``) in ``panel`` (id or title).

        Example:
            >>> widget = MonitorWidget()
            >>> widget.add_series("loss", "accuracy")
            >>> [panel["series"] for panel in widget.panels if panel["id"] == "loss"]
            [['loss', 'accuracy']]
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"series name must be a non-empty string, got {name!r}")
        index = self._panel_index(panel)
        panels = [dict(config) for config in self.panels]
        if name not in panels[index]["series"]:
            panels[index]["series"] = [*panels[index]["series"], name]
        self.panels = panels

    def add_panel(self, id: str, title: str | None = None, series: Iterable[str] = (), *, scale: str = "linear",
                  **options: Any) -> None:  # fmt: skip
        """Add a line panel showing global ``series`` (and ``metric=`` per layer, ``band=[lo, hi]`` if given).

        Example:
            >>> widget = MonitorWidget()
            >>> widget.add_panel("lr", "Learning rate", ["lr"], scale="log")
            >>> widget.panels[-1]
            {'id': 'lr', 'title': 'Learning rate', 'series': ['lr'], 'scale': 'log', 'kind': 'lines'}
        """
        if any(config["id"] == id for config in self.panels):
            raise ValueError(f"a panel with id {id!r} already exists; use add_series({id!r}, name) to extend it")
        config = _check_panel({"id": id, "title": title or id, "series": list(series), "scale": scale, **options})
        self.panels = [*self.panels, config]

    # ------------------------------------------------------------------ static output
    def _static_data(self, max_points: int):
        """Long-form rows of the series the panels show, each M4-decimated to about ``max_points`` points."""
        import pandas as pd

        steps, columns = self.history()
        metrics = {m for c in self.panels for m in [c.get("metric"), *(c.get("band") or []), *c.get("dashed", [])] if m}
        shown = {name for c in self.panels for name in c["series"]}
        frames = []
        for name, values in columns.items():
            if name not in shown and split_series_name(name)[0] not in metrics:
                continue
            keep = _m4_indices(steps, values.astype(np.float64), max(1, max_points // 4))
            metric, layer = split_series_name(name)
            short = np.array([float(f"{v:.5g}") for v in values[keep]])  # shorter inline JSON, same picture
            frames.append(pd.DataFrame({"step": steps[keep], "value": short,
                                        "series": name, "metric": metric, "layer": layer or name}))  # fmt: skip
        if not frames:
            return pd.DataFrame({"step": [], "value": [], "series": [], "metric": [], "layer": []})
        return pd.concat(frames, ignore_index=True)

    def _fit_windows(self):
        import pandas as pd

        steps, columns = self.history()
        fitting = columns.get("fitting")
        if fitting is None or not steps.size:
            return pd.DataFrame({"start": [], "end": []})
        on = np.r_[False, fitting >= 0.5, False]
        edges = np.flatnonzero(on[1:] != on[:-1])
        starts, ends = edges[0::2], np.minimum(edges[1::2], steps.size - 1)
        return pd.DataFrame({"start": steps[starts], "end": steps[ends]})

    def chart(self, max_points: int = 100, width: int = 300, height: int = 140):
        """An altair chart of the same panels (static: layers coloured, bands shaded, fit window shaded).

        Each series is decimated to about ``max_points`` points (first/min/max/last per x bucket).

        Example:
            >>> widget = MonitorWidget(layers=["encoder.0"])
            >>> for step in range(3):
            ...     widget.log(step, {"energy_ratio|encoder.0": 2.5 - step / 2}, loss=1.0 / (step + 1))
            >>> chart = widget.chart()
            >>> type(chart).__name__
            'VConcatChart'
            >>> chart.save(getfixture("tmp_path") / "training.json")  # the Vega-Lite spec

        Not run here (vl-convert's first render takes seconds): a picture is saved the same way,

            widget.chart().save("training.svg")
        """
        import altair as alt

        data = self._static_data(max_points)
        windows = self._fit_windows()
        x_title = self.x_label or "step"
        layer_order = list(self.layers)
        charts = []
        for config in self.panels:
            panel = self._panel_chart(alt, config, data, windows, layer_order, x_title, width, height)
            if panel is not None:
                charts.append(panel.properties(title=config["title"]))
        if not charts:
            return alt.Chart(data).mark_text().properties(title=self.title)
        rows = [alt.hconcat(*charts[i : i + 2]) for i in range(0, len(charts), 2)]
        return alt.vconcat(*rows).properties(title=self.title).resolve_scale(color="independent")

    def _panel_chart(self, alt, config, data, windows, layer_order, x_title, width, height):
        import pandas as pd

        metric = config.get("metric")
        log = config.get("scale") == "log"
        x = alt.X("step:Q", title=x_title)
        if config["kind"] == "heatmap":
            rows = data[(data["metric"] == metric) & (data["value"] > 0)].sort_values(["layer", "step"]).copy()
            if rows.empty:
                return None
            rows["log10"] = np.log10(rows["value"])
            rows["next"] = rows.groupby("layer")["step"].shift(-1).fillna(rows["step"].max())
            bound = float(np.abs(rows["log10"]).max()) or 1.0
            colour = alt.Color("log10:Q", scale=alt.Scale(scheme="redblue", reverse=True, domain=[-bound, bound]),
                               title="log10 ratio")  # fmt: skip
            return alt.Chart(rows).mark_rect().encode(
                x=x, x2="next:Q", y=alt.Y("layer:N", sort=layer_order, title=None), color=colour
            ).properties(width=2 * width + 40, height=max(40, 18 * len(layer_order)))  # fmt: skip
        y_scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
        wanted = data["series"].isin(config["series"])
        line_rows = (
            data[wanted | ((data["metric"] == metric) & data["layer"].isin(layer_order))] if metric else data[wanted]
        )
        if log:
            line_rows = line_rows[line_rows["value"] > 0]
        layers = []
        if not windows.empty:
            layers.append(alt.Chart(windows).mark_rect(color="#ffaa00", opacity=0.15).encode(x="start:Q", x2="end:Q"))
        band = config.get("band")
        if metric and band:
            lo = data[data["metric"] == band[0]][["step", "layer", "value"]].rename(columns={"value": "lo"})
            hi = data[data["metric"] == band[1]][["step", "layer", "value"]].rename(columns={"value": "hi"})
            bands = lo.merge(hi, on=["step", "layer"])
            if log:
                bands = bands[(bands["lo"] > 0) & (bands["hi"] > 0)]
            if not bands.empty:
                layers.append(alt.Chart(bands).mark_area(opacity=0.15).encode(
                    x=x, y=alt.Y("lo:Q", scale=y_scale, title=None), y2="hi:Q",
                    color=alt.Color("layer:N", sort=layer_order, title="layer / series")))  # fmt: skip
        for companion in config.get("dashed", []):
            dashed = data[(data["metric"] == companion) & data["layer"].isin(layer_order)]
            if not dashed.empty:
                layers.append(alt.Chart(dashed).mark_line(strokeDash=[3, 3], strokeWidth=1).encode(
                    x=x, y=alt.Y("value:Q", scale=y_scale, title=None),
                    color=alt.Color("layer:N", sort=layer_order, title="layer / series"), detail="series:N"))  # fmt: skip
        if line_rows.empty and len(layers) <= 1:
            return None
        if not line_rows.empty:
            layers.append(alt.Chart(line_rows).mark_line().encode(
                x=x, y=alt.Y("value:Q", scale=y_scale, title=None),
                color=alt.Color("layer:N", sort=layer_order, title="layer / series"), detail="series:N"))  # fmt: skip
        reference = config.get("reference")
        if reference is not None:
            rule = alt.Chart(pd.DataFrame({"reference": [float(reference)]})).mark_rule(strokeDash=[4, 4], color="#888")
            layers.append(rule.encode(y=alt.Y("reference:Q", scale=y_scale, title=None)))
        return alt.layer(*layers).properties(width=width, height=height)

    def static_svg(self) -> str:
        """The fallback picture: :meth:`chart` rendered offline by vl-convert (a note while nothing is logged).

        Example:
            >>> MonitorWidget().static_svg().startswith("<svg")
            True
        """
        if self.rows == 0:
            figure = SvgFigure(label=f"{self.title}: no {self.x_label}s logged yet")
            figure.text(self.title, bold=True)
            figure.text(f"No {self.x_label}s logged yet.")
            return figure.render()
        import vl_convert

        return vl_convert.vegalite_to_svg(self.chart().to_dict())

    def static_html(self) -> str:
        """The fallback SVG inline in HTML, with XML namespace attributes (URLs) removed.

        Example:
            >>> "http" in MonitorWidget().static_html()
            False
        """
        svg = self._fallback_svg()
        for attribute in (f' xmlns="{SVG_NS}"', ' xmlns:xlink="http://www.w3.org/1999/xlink"'):
            svg = svg.replace(attribute, "")
        return f'<div class="iw-static" style="max-width:100%;overflow-x:auto">{svg}</div>'

    # ------------------------------------------------------------------ display
    def show(self):
        """Display the widget and remember the output, so every forced flush refreshes its static fallback and the
        saved notebook keeps the final curves. Returns the IPython display handle.

        Example:
            >>> from interp_widgets.geometry import GeometryLog
            >>> log = GeometryLog(["layer:0"]); log.log(0, loss=1.0)
            >>> import contextlib, io
            >>> shown = io.StringIO()
            >>> with contextlib.redirect_stdout(shown):  # outside a notebook, display() prints the text form (or,
            ...     handle = log.widget().show()         # under an IPython shell, publishes the bundle)
            >>> handle is None or hasattr(handle, "update")
            True
        """
        from IPython.display import display

        self._handle = display(self, display_id=True)
        self._shown_rows = self.rows
        return self._handle

    def _refresh_display(self) -> None:
        if self._handle is not None and self._shown_rows != len(self._store):
            self._shown_rows = len(self._store)
            self._handle.update(self)

    def __repr__(self) -> str:
        last = f", last {self.x_label} {self._last_step:g}" if self.rows else ""
        return f"MonitorWidget({self.title!r}, {len(self.layers)} layers, {self.rows} rows{last})"


def _register_post_execute(widget: MonitorWidget):
    """Flush ``widget`` after every notebook cell (also when the cell raised or was interrupted).

    The hook holds only a weak reference and removes itself once the widget is gone.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    shell = get_ipython()
    if shell is None:
        return None
    ref = weakref.ref(widget)

    def flush_after_cell(*_: Any) -> None:
        target = ref()
        if target is None:
            shell.events.unregister("post_execute", flush_after_cell)
            return
        if target._pending or target._checkpointed != target._stored_shape():
            target.flush()

    shell.events.register("post_execute", flush_after_cell)
    return flush_after_cell
