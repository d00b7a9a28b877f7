"""The trackers of TensorBoard, Weights & Biases and MLflow, each following its tool's conventions.

Example:
    >>> mlflow_key("geometry/energy_ratio/layer:2")
    'geometry/energy_ratio/layer_2'
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Iterable

from interp_widgets.geometry.trackers._base import Tracker, require, tracker_key

__all__ = ["MLflowTracker", "TensorBoardTracker", "WandbTracker", "mlflow_key"]


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
        >>> from interp_widgets.geometry.log.geometry_log import GeometryLog
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

    def __init__(
        self,
        writer=None,
        *,
        log_dir: str | None = None,
        prefix: str = "geometry",
        metrics: Iterable[str] | str | None = None,
        step_offset: int = 0,
    ) -> None:
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
            raise ValueError(
                f"the SummaryWriter of {writer.log_dir!r} is already closed; give the tracker an open "
                f"writer (a new SummaryWriter(log_dir)) or pass log_dir= and let the tracker open one"
            )

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

    def __init__(
        self,
        run=None,
        *,
        step_metric: str = "geometry/step",
        prefix: str = "geometry",
        metrics: Iterable[str] | str | None = None,
        step_offset: int = 0,
    ) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        wandb = require("wandb", "wandb", "WandbTracker")
        if run is None:
            run = wandb.run
            if run is None:
                raise ValueError(
                    "no active W&B run: call wandb.init(...) first (mode='offline' keeps it local) or pass run="
                )
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

    def __init__(
        self,
        run=None,
        *,
        tracking_uri: str | None = None,
        prefix: str = "geometry",
        metrics: Iterable[str] | str | None = None,
        step_offset: int = 0,
    ) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        mlflow = require("mlflow", "mlflow", "MLflowTracker")
        if run is None:
            run = mlflow.active_run()
            if run is None:
                raise ValueError(
                    "no active MLflow run: train inside `with mlflow.start_run():` or pass run= (a run or a run id)"
                )
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
        params = [
            self._entities.Param(mlflow_key(tracker_key(name, self.prefix or "geometry")), str(value))
            for name, value in settings.items()
        ]
        params = [p for p in params if p.key not in logged]  # MLflow parameters are write-once
        if params:
            self.client.log_batch(self.run_id, params=params)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        timestamp = int(time.time() * 1000)
        metrics = [self._entities.Metric(key, value, timestamp, step) for key, value in scalars.items()]
        for start in range(0, len(metrics), _MLFLOW_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + _MLFLOW_BATCH])
