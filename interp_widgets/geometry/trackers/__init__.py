"""Send the monitor's scalars to the experiment trackers people already watch: TensorBoard, Weights & Biases, MLflow.

A tracker is a subscriber of a :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog` (the monitor is one): attach it
with :meth:`Tracker.attach` (or ``monitor.subscribe(tracker)``) and every row the monitor records is written to the
tracker as it is recorded, from a plain loop, from :class:`~interp_widgets.geometry.monitor.trainer.MonitorCallback` (HF
``Trainer``) or from :class:`~interp_widgets.geometry.monitor.lightning.LightningMonitorCallback`. None of the packages is a
dependency: each lives in an extra (``pip install "interp-widgets[tensorboard]"``, ``[wandb]``, ``[mlflow]``) and
is imported only when a tracker is built; a missing one raises a ``ModuleNotFoundError`` that names the extra.

What is sent: per layer the metrics of :data:`DEFAULT_METRICS` (energy ratio with the controls' band, p-value and
z-score, the IsoScore* removal shares, the representation metrics; ``metrics="all"`` sends every metric of
:data:`~interp_widgets.geometry.log.geometry_log.LAYER_METRICS`), and every global series (``loss``, ``fitting``, scalars
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
    >>> from interp_widgets.geometry.log.geometry_log import GeometryLog
    >>> log = GeometryLog(["layer:0"])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     tracker = TensorBoardTracker(log_dir=tmp).attach(log)
    ...     log.record(0, {"loss": 2.5, "energy_ratio|layer:0": 3.0, "p_value|layer:0": float("nan")})
    ...     tracker.close()
    ...     events = EventAccumulator(tmp); _ = events.Reload()
    ...     sorted(events.Tags()["scalars"])
    ['geometry/energy_ratio/layer:0', 'geometry/loss']
"""

from interp_widgets.geometry.trackers._backends import MLflowTracker, TensorBoardTracker, WandbTracker, mlflow_key
from interp_widgets.geometry.trackers._base import DEFAULT_METRICS, Tracker, require, tracker_key
from interp_widgets.geometry.trackers._trainer import TRAINER_INTEGRATIONS, check_report_to, trainer_trackers

__all__ = [
    "DEFAULT_METRICS",
    "TRAINER_INTEGRATIONS",
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
