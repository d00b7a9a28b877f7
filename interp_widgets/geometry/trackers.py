"""Send the monitor's scalars to the experiment trackers people already watch: TensorBoard, Weights & Biases, MLflow.

A tracker is a subscriber of a :class:`~interp_widgets.geometry.history.GeometryLog` (the monitor is one): attach it
with :meth:`Tracker.attach` (or ``monitor.subscribe(tracker)``) and every row the monitor records is written to the
tracker as it is recorded, from a plain loop, from :class:`~interp_widgets.geometry.trainer.MonitorCallback` (HF
``Trainer``) or from :class:`~interp_widgets.geometry.lightning.LightningMonitorCallback`. None of the packages is a
dependency: each lives in an extra (``pip install "interp-widgets[tensorboard]"``, ``[wandb]``, ``[mlflow]``) and
is imported only when a tracker is built; a missing one raises a ``ModuleNotFoundError`` that names the extra.

What is sent: per layer the metrics of :data:`DEFAULT_METRICS` (energy ratio with the controls' band, p-value and
z-score, the IsoScore* removal shares, the representation metrics; ``metrics="all"`` sends every metric of
:data:`~interp_widgets.geometry.history.LAYER_METRICS`), and every global series (``loss``, ``fitting``, scalars
given to ``monitor.log``/``monitor.step``) except the monitor's own timing ``monitor_ms`` and names in
:attr:`Tracker.exclude`. NaN means "not measured at this step" (the fit window, the spectrum cadence) and is never
written, so the trackers' charts have no holes or spikes.

Names follow the trackers' shared convention that the part of a key before the first ``/`` is its section:
``geometry/<metric>/<layer>`` for per-layer series (``geometry/energy_ratio/layer:2``, next to
``geometry/energy_ratio/layer:4``) and ``geometry/<name>`` for global ones (``geometry/loss``), so the geometry forms
one section beside the ``train/…`` and ``eval/…`` ones of the HF Trainer (``prefix=`` changes it). Each tracker then
follows its own conventions for steps and grouping; see its class.

Example:
    >>> import tempfile
    >>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    >>> from interp_widgets.geometry.history import GeometryLog
    >>> log = GeometryLog(["layer:0"])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     tracker = TensorBoardTracker(log_dir=tmp).attach(log)
    ...     log.record(0, {"loss": 2.5, "energy_ratio|layer:0": 3.0, "p_value|layer:0": float("nan")})
    ...     tracker.close()
    ...     events = EventAccumulator(tmp); _ = events.Reload()
    ...     sorted(events.Tags()["scalars"])
    ['geometry/energy_ratio/layer:0', 'geometry/loss']
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping

from interp_widgets.geometry.history import LAYER_METRICS, split_series_name
from interp_widgets.validation import check_int

__all__ = [
    "DEFAULT_METRICS",
    "MLflowTracker",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "mlflow_key",
    "check_report_to",
    "require",
    "trainer_trackers",
    "tracker_key",
]

#: Per-layer metrics sent by default: the energy ratio and its control band, the evidence (p-value, z-score), the
#: IsoScore* removal (ΔIsoScore* of proxy and controls, the anisotropy shares) and the representation metrics.
DEFAULT_METRICS: tuple[str, ...] = (
    "energy_ratio",
    "control_ratio_q05",
    "control_ratio_q95",
    "p_value",
    "z_score",
    "isoscore_star_G",
    "delta_isoscore_proxy",
    "delta_isoscore_control_mean",
    "anisotropy_share",
    "anisotropy_share_control_mean",
    "avg_cosine",
    "isoscore",
    "effective_rank",
)

#: Global series never sent: the monitor's own cost per step.
_SKIPPED_GLOBALS = frozenset({"monitor_ms"})


def require(module: str, extra: str, feature: str):
    """Import an optional package, or raise a ``ModuleNotFoundError`` that says which extra installs it.

    Example:
        >>> require("json", "tensorboard", "TensorBoardTracker").__name__
        'json'
        >>> require("no_such_tracker_package", "wandb", "WandbTracker")
        Traceback (most recent call last):
        ...
        ModuleNotFoundError: WandbTracker needs the optional package 'no_such_tracker_package', which is not installed; install it with: pip install "interp-widgets[wandb]"
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ModuleNotFoundError(
            f"{feature} needs the optional package {module!r}, which is not installed; install it with: "
            f'pip install "interp-widgets[{extra}]"', name=module) from error


def tracker_key(name: str, prefix: str = "geometry") -> str:
    """The tracker key of a flat series name: ``<prefix>/<metric>/<layer>`` or ``<prefix>/<name>``.

    Example:
        >>> tracker_key("energy_ratio|layer:2"), tracker_key("loss"), tracker_key("loss", prefix="")
        ('geometry/energy_ratio/layer:2', 'geometry/loss', 'loss')
    """
    metric, layer = split_series_name(name)
    parts = [part for part in (prefix, metric, layer) if part]
    return "/".join(parts)


def _check_prefix(prefix) -> str:
    if not isinstance(prefix, str) or prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"prefix must be a string without leading or trailing '/', e.g. 'geometry', got {prefix!r}")
    return prefix


def _check_metrics(metrics) -> frozenset[str]:
    if metrics is None:
        return frozenset(DEFAULT_METRICS)
    if metrics == "all":
        return frozenset(LAYER_METRICS)
    if isinstance(metrics, str) or not isinstance(metrics, Iterable):
        raise TypeError(f"metrics must be None (the defaults), 'all' or a list of metric names, got {metrics!r}")
    chosen = list(metrics)
    unknown = [m for m in chosen if m not in LAYER_METRICS]
    if unknown:
        raise ValueError(f"unknown per-layer metrics {unknown}; use names of LAYER_METRICS, e.g. 'energy_ratio'")
    return frozenset(chosen)


def _settings(meta: Mapping | None) -> dict[str, object]:
    """The monitor's scalar settings (rank, fit mode, controls, …), None values dropped."""
    return {key: value for key, value in (meta or {}).items()
            if isinstance(value, (str, int, float, bool))}


class Tracker:
    """Base class: a ``(step, values)`` subscriber that selects, names and forwards scalars to one tracker.

    Subclasses implement ``_write(step, scalars)`` (``scalars`` maps tracker keys to finite floats). A tracker is
    called with every row of the monitor; it drops NaN, series not selected (see the module notes) and the names in
    :attr:`exclude`, adds ``step_offset`` to the step and writes the rest.

    Args:
        prefix: the section of every key (``"geometry"``; ``""`` for none).
        metrics: per-layer metrics to send: None for :data:`DEFAULT_METRICS`, ``"all"``, or a list of names.
        step_offset: added to the monitor's step (the HF Trainer logs step ``s`` as ``global_step = s + 1``).

    Example:
        >>> from interp_widgets.geometry.history import GeometryLog
        >>> class Printer(Tracker):
        ...     def _write(self, step, scalars):
        ...         print(step, scalars)
        >>> log = GeometryLog(["l"]); printer = Printer(metrics=["p_value"]).attach(log)
        >>> log.record(3, {"loss": 1.5, "p_value|l": 0.25, "energy_ratio|l": 2.0, "monitor_ms": 4.0})
        3 {'geometry/loss': 1.5, 'geometry/p_value/l': 0.25}
    """

    #: the name of the pip extra that installs this tracker's package (also its ``report_to`` name)
    extra = ""

    def __init__(self, *, prefix: str = "geometry", metrics: Iterable[str] | str | None = None,
                 step_offset: int = 0) -> None:
        self.prefix = _check_prefix(prefix)
        self.metrics = _check_metrics(metrics)
        self.step_offset = check_int("step_offset", step_offset, minimum=0)
        #: global series names (as recorded by the monitor) never sent, e.g. Trainer logs the Trainer reports itself
        self.exclude: set[str] = set()
        self._detach: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ selection
    def key(self, name: str) -> str:
        """The tracker key of a flat series name (see :func:`tracker_key`).

        Example:
            >>> Tracker().key("p_value|layer:1")
            'geometry/p_value/layer:1'
        """
        return self._clean(tracker_key(name, self.prefix))

    @staticmethod
    def _clean(key: str) -> str:
        """The key as the tracker stores it (MLflow replaces characters it refuses)."""
        return key

    def select(self, values: Mapping[str, float]) -> dict[str, float]:
        """The ``{key: value}`` this tracker sends for one row of flat series values.

        Example:
            >>> Tracker().select({"loss": 0.5, "fitting": 1.0, "energy_ratio|l": float("nan"), "monitor_ms": 3.0})
            {'geometry/loss': 0.5, 'geometry/fitting': 1.0}
        """
        chosen = {}
        for name, value in values.items():
            metric, layer = split_series_name(name)
            if layer is None:
                if metric in _SKIPPED_GLOBALS or metric in self.exclude:
                    continue
            elif metric not in self.metrics:
                continue
            value = float(value)
            if math.isfinite(value):
                chosen[self.key(name)] = value
        return chosen

    def __call__(self, step: int, values: Mapping[str, float]) -> None:
        scalars = self.select(values)
        if scalars:
            self._write(int(step) + self.step_offset, scalars)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle
    def attach(self, monitor) -> "Tracker":
        """Subscribe to ``monitor`` (an :class:`~interp_widgets.geometry.monitor.AnisotropyMonitor` or any
        :class:`~interp_widgets.geometry.history.GeometryLog`), flush when its ``with`` block ends; returns self.

        Example:
            >>> from interp_widgets.geometry.history import GeometryLog
            >>> log = GeometryLog(); tracker = Tracker().attach(log); tracker.detach()
        """
        if not callable(getattr(monitor, "subscribe", None)):
            raise TypeError(f"attach() needs an AnisotropyMonitor or a GeometryLog, got {type(monitor).__name__}")
        self._settings(_settings(getattr(monitor, "meta", None)))
        self._detach.append(monitor.subscribe(self))
        if callable(getattr(monitor, "on_flush", None)):
            self._detach.append(monitor.on_flush(self.flush))
        return self

    def detach(self) -> None:
        """Stop receiving rows (the tracker's own writer or run stays open).

        Example:
            >>> Tracker().detach()
        """
        while self._detach:
            self._detach.pop()()

    def _settings(self, settings: dict[str, object]) -> None:
        """Record the monitor's settings where the tracker keeps configuration (default: nowhere)."""

    def flush(self) -> None:
        """Push buffered values to disk (or the tracking store).

        Example:
            >>> Tracker().flush()
        """

    def close(self) -> None:
        """Detach, flush, and close what this tracker opened itself (never a writer or run it was given).

        Example:
            >>> Tracker().close()
        """
        self.detach()
        self.flush()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prefix={self.prefix!r}, metrics={len(self.metrics)}, step_offset={self.step_offset})"


# ---------------------------------------------------------------------------------------------------------- TensorBoard
def _summary_writer_class():
    require("tensorboard", "tensorboard", "TensorBoardTracker")
    return require("torch.utils.tensorboard", "tensorboard", "TensorBoardTracker").SummaryWriter


def _writer_closed(writer) -> bool:
    # torch's (and tensorboardX's) SummaryWriter.close() sets all_writers to None; writing afterwards would silently
    # open a new event file, so a closed writer is refused instead
    return hasattr(writer, "all_writers") and writer.all_writers is None


class TensorBoardTracker(Tracker):
    """Write the monitor's scalars to TensorBoard through ``torch.utils.tensorboard.SummaryWriter``.

    TensorBoard conventions: one ``add_scalar(tag, value, global_step)`` per series with the training step as
    ``global_step``; tags ``geometry/<metric>/<layer>`` put the geometry in one dashboard section whose charts sort
    metric by metric, layers side by side (TensorBoard groups tags by the text before the first ``/``). The writer
    is flushed when the monitor's ``with`` block ends.

    Args:
        writer: a ``SummaryWriter`` to write to (not closed; the tracker never closes it), or None with ``log_dir``.
        log_dir: directory of a new writer that the tracker owns (closed by :meth:`close`).
        prefix, metrics, step_offset: see :class:`Tracker`.

    Example:
        >>> import tempfile
        >>> from torch.utils.tensorboard import SummaryWriter
        >>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        >>> from interp_widgets.geometry.history import GeometryLog
        >>> log = GeometryLog(["layer:0"])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     writer = SummaryWriter(tmp)
        ...     _ = TensorBoardTracker(writer).attach(log)
        ...     log.record(4, {"energy_ratio|layer:0": 2.5})
        ...     writer.close()
        ...     events = EventAccumulator(tmp); _ = events.Reload()
        ...     [(e.step, e.value) for e in events.Scalars("geometry/energy_ratio/layer:0")]
        [(4, 2.5)]
    """

    extra = "tensorboard"

    def __init__(self, writer=None, *, log_dir: str | None = None, prefix: str = "geometry",
                 metrics: Iterable[str] | str | None = None, step_offset: int = 0) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        if (writer is None) == (log_dir is None):
            raise ValueError("pass either a SummaryWriter (writer=) or a directory for a new one (log_dir=)")
        if writer is None:
            writer = _summary_writer_class()(log_dir=str(log_dir))
            self._owns_writer = True
        else:
            if not callable(getattr(writer, "add_scalar", None)):
                raise TypeError(f"writer must be a torch.utils.tensorboard.SummaryWriter, got {type(writer).__name__}")
            self._check_open(writer)
            self._owns_writer = False
        self.writer = writer

    @staticmethod
    def _check_open(writer) -> None:
        if _writer_closed(writer):
            raise ValueError(f"the SummaryWriter of {writer.log_dir!r} is already closed; give the tracker an open "
                             f"writer (a new SummaryWriter(log_dir)) or pass log_dir= and let the tracker open one")

    def _settings(self, settings: dict[str, object]) -> None:
        if settings:
            self._check_open(self.writer)
            table = "\n".join(f"| {key} | {value} |" for key, value in settings.items())
            self.writer.add_text(tracker_key("settings", self.prefix), "| setting | value |\n|---|---|\n" + table)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        self._check_open(self.writer)
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, global_step=step)

    def flush(self) -> None:
        """Flush the writer's event file (a closed writer is left alone).

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     tracker = TensorBoardTracker(log_dir=tmp); tracker.flush(); tracker.close()
        """
        if not _writer_closed(self.writer):
            self.writer.flush()

    def close(self) -> None:
        """Detach, flush, and close the writer if the tracker opened it (``log_dir=``).

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     tracker = TensorBoardTracker(log_dir=tmp); tracker.close(); tracker.writer.all_writers is None
            True
        """
        super().close()
        if self._owns_writer:
            self.writer.close()


# ---------------------------------------------------------------------------------------------------- Weights & Biases
class WandbTracker(Tracker):
    """Write the monitor's scalars to a Weights & Biases run.

    W&B conventions: ``run.log(dict)`` without ``step=`` (the run's own ``_step`` stays monotonic however the
    user's code logs) and a custom x-axis, declared with ``run.define_metric(key, step_metric=...)``: every row
    carries the training step as ``step_metric`` (default ``geometry/step``; the HF Trainer's is
    ``train/global_step``, Lightning's ``trainer/global_step``), so the geometry charts share the x axis of the
    training charts. Keys ``geometry/<metric>/<layer>`` form one panel section. The monitor's settings go into
    ``run.config["geometry"]``. Use ``mode="offline"`` in ``wandb.init`` to keep everything local.

    Args:
        run: the ``wandb`` run (default: the active ``wandb.run``). A finished run is refused.
        step_metric: the x-axis key written with every row.
        prefix, metrics, step_offset: see :class:`Tracker`.

    Example:
        >>> import wandb
        >>> wandb.run is None
        True
        >>> WandbTracker()  # after run = wandb.init(mode="offline"): WandbTracker(run).attach(monitor)
        Traceback (most recent call last):
        ...
        ValueError: no active W&B run: call wandb.init(...) first (mode='offline' keeps it local) or pass run=
    """

    extra = "wandb"

    def __init__(self, run=None, *, step_metric: str = "geometry/step", prefix: str = "geometry",
                 metrics: Iterable[str] | str | None = None, step_offset: int = 0) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        wandb = require("wandb", "wandb", "WandbTracker")
        if run is None:
            run = wandb.run
            if run is None:
                raise ValueError("no active W&B run: call wandb.init(...) first (mode='offline' keeps it local) "
                                 "or pass run=")
        if not callable(getattr(run, "log", None)) or not callable(getattr(run, "define_metric", None)):
            raise TypeError(f"run must be a wandb run (from wandb.init), got {type(run).__name__}")
        if not isinstance(step_metric, str) or not step_metric:
            raise ValueError(f"step_metric must be a non-empty key such as 'geometry/step', got {step_metric!r}")
        self.run, self.step_metric = run, step_metric
        self._check_open()
        self._defined: set[str] = set()
        if step_metric not in ("train/global_step", "trainer/global_step"):  # already defined by those integrations
            run.define_metric(step_metric)

    def _check_open(self) -> None:
        if getattr(self.run, "_is_finished", False):
            raise ValueError(f"the W&B run {self.run.id!r} is already finished; start a new one with wandb.init()")

    def _settings(self, settings: dict[str, object]) -> None:
        if settings:
            self._check_open()
            self.run.config.update({self.prefix or "geometry": settings}, allow_val_change=True)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        self._check_open()
        for key in scalars.keys() - self._defined:
            self.run.define_metric(key, step_metric=self.step_metric)
            self._defined.add(key)
        self.run.log({**scalars, self.step_metric: step})


# --------------------------------------------------------------------------------------------------------------- MLflow
_MLFLOW_BAD_CHARACTERS = re.compile(r"[^\w/.\- ]")
_MLFLOW_BATCH = 1000  # MLflow's log_batch limit on metrics per call


def mlflow_key(key: str) -> str:
    """An MLflow-safe metric key: characters MLflow refuses on some platform (``:`` on Windows) become ``_``.

    Example:
        >>> mlflow_key("geometry/energy_ratio/layer:2")
        'geometry/energy_ratio/layer_2'
    """
    return _MLFLOW_BAD_CHARACTERS.sub("_", key)


class MLflowTracker(Tracker):
    """Write the monitor's scalars to an MLflow run.

    MLflow conventions: metrics through ``MlflowClient.log_batch`` with the training step as the metric ``step``
    (so the UI's "Step" x axis lines them up with the run's other metrics) and the wall-clock timestamp; keys
    ``geometry/<metric>/<layer>`` (MLflow groups charts by the text before the first ``/``), with ``:`` written
    as ``_`` (``layer_2``) because MLflow refuses colons on Windows; the monitor's settings as run parameters
    ``geometry/<setting>``. The tracker holds the run id, so it keeps writing to the run after an integration (the
    HF ``MLflowCallback``) ended it.

    Args:
        run: an MLflow run (``mlflow.start_run()``), a run id, or None for the active run.
        tracking_uri: where the run lives (default: ``mlflow.get_tracking_uri()``), e.g. ``"sqlite:///mlflow.db"``.
        prefix, metrics, step_offset: see :class:`Tracker`.

    Example:
        >>> import mlflow
        >>> mlflow.active_run() is None
        True
        >>> MLflowTracker()  # inside `with mlflow.start_run():` this is MLflowTracker().attach(monitor)
        Traceback (most recent call last):
        ...
        ValueError: no active MLflow run: train inside `with mlflow.start_run():` or pass run= (a run or a run id)
    """

    extra = "mlflow"

    def __init__(self, run=None, *, tracking_uri: str | None = None, prefix: str = "geometry",
                 metrics: Iterable[str] | str | None = None, step_offset: int = 0) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        mlflow = require("mlflow", "mlflow", "MLflowTracker")
        if run is None:
            run = mlflow.active_run()
            if run is None:
                raise ValueError("no active MLflow run: train inside `with mlflow.start_run():` or pass run= "
                                 "(a run or a run id)")
        run_id = run if isinstance(run, str) else getattr(getattr(run, "info", None), "run_id", None)
        if not isinstance(run_id, str):
            raise TypeError(f"run must be an MLflow run, a run id or None, got {type(run).__name__}")
        self.client = mlflow.MlflowClient(tracking_uri or mlflow.get_tracking_uri())
        found = self.client.get_run(run_id)  # raises MlflowException for an unknown run id
        if found.info.lifecycle_stage == "deleted":
            raise ValueError(f"the MLflow run {run_id!r} is deleted; log to an active run")
        self.run_id = run_id
        self._entities = importlib.import_module("mlflow.entities")

    @staticmethod
    def _clean(key: str) -> str:
        return mlflow_key(key)

    def _settings(self, settings: dict[str, object]) -> None:
        if not settings:
            return
        logged = self.client.get_run(self.run_id).data.params
        params = [self._entities.Param(mlflow_key(tracker_key(name, self.prefix or "geometry")), str(value))
                  for name, value in settings.items()]
        params = [p for p in params if p.key not in logged]  # MLflow parameters are write-once
        if params:
            self.client.log_batch(self.run_id, params=params)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        timestamp = int(time.time() * 1000)
        metrics = [self._entities.Metric(key, value, timestamp, step) for key, value in scalars.items()]
        for start in range(0, len(metrics), _MLFLOW_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + _MLFLOW_BATCH])


# --------------------------------------------------------------------------------------------------- HF Trainer wiring
#: ``TrainingArguments.report_to`` names that have a tracker here; other integrations are left to the Trainer.
TRAINER_INTEGRATIONS = ("tensorboard", "wandb", "mlflow")


def _trainer_tensorboard_dir(output_dir: str) -> str:
    """A TensorBoard run of its own next to the Trainer's (two writers appending to one run directory confuse
    TensorBoard's live reloading): ``$TENSORBOARD_LOGGING_DIR/geometry`` when that is set (the Trainer writes into it),
    else ``<output_dir>/runs/<date>_<host>-geometry`` beside the Trainer's ``<output_dir>/runs/<date>_<host>``."""
    import os
    import socket
    from datetime import datetime

    base = os.getenv("TENSORBOARD_LOGGING_DIR")
    if base is not None:
        return os.path.join(os.path.expanduser(base), "geometry")
    name = datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname() + "-geometry"
    return os.path.join(output_dir, "runs", name)


def trainer_trackers(report_to, trainer_report_to, output_dir: str) -> list[Tracker]:
    """The trackers the HF ``MonitorCallback`` builds (and closes at the end of training).

    ``report_to="trainer"`` follows ``TrainingArguments.report_to`` (its TensorBoard, W&B and MLflow entries; others
    are left to the Trainer); a list names integrations among ``"tensorboard"``, ``"wandb"``, ``"mlflow"``; ``[]``
    sends nothing (attach a :class:`Tracker` yourself for anything else). Geometry step ``s`` is written at the
    Trainer's ``global_step = s + 1``, the step its own loggers give the loss of that update: TensorBoard into a run
    beside the Trainer's (``<output_dir>/runs/<date>_<host>-geometry``, or ``$TENSORBOARD_LOGGING_DIR/geometry``),
    W&B on the ``train/global_step`` axis of ``wandb.run``, MLflow into the active run the Trainer started.

    Example:
        >>> trainer_trackers("trainer", ["codecarbon"], "out")
        []
        >>> trainer_trackers(["comet_ml"], [], "out")
        Traceback (most recent call last):
        ...
        ValueError: unknown report_to entry 'comet_ml'; use 'trainer' (follow TrainingArguments.report_to) or a list of ('tensorboard', 'wandb', 'mlflow')
    """
    if check_report_to(report_to) == "trainer":
        report_to = [name for name in (trainer_report_to or []) if name in TRAINER_INTEGRATIONS]
    trackers = []
    for name in report_to:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(log_dir=_trainer_tensorboard_dir(output_dir), step_offset=1))
        elif name == "wandb":
            trackers.append(WandbTracker(step_metric="train/global_step", step_offset=1))
        elif name == "mlflow":
            trackers.append(MLflowTracker(step_offset=1))
    return trackers


def check_report_to(report_to):
    """``"trainer"``, or ``report_to`` as a list of tracker names (a single name becomes a list); else a ValueError.

    Example:
        >>> check_report_to("wandb"), check_report_to("trainer"), check_report_to(())
        (['wandb'], 'trainer', [])
    """
    if report_to == "trainer":
        return report_to
    names = [report_to] if isinstance(report_to, str) else report_to
    try:
        names = list(names)
    except TypeError:
        names = [report_to]
    for name in names:
        if name not in TRAINER_INTEGRATIONS:
            raise ValueError(f"unknown report_to entry {name!r}; use 'trainer' (follow TrainingArguments.report_to) "
                             f"or a list of {TRAINER_INTEGRATIONS}")
    return names
