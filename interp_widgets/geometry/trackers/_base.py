"""The tracker base: what every tracker sends (names, steps, metric selection) and the optional-package check.

Example:
    >>> tracker_key("energy_ratio|layer:2")
    'geometry/energy_ratio/layer:2'
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping

from interp_widgets.geometry.log.geometry_log import LAYER_METRICS, split_series_name
from interp_widgets.validation import check_int

__all__ = ["DEFAULT_METRICS", "Tracker", "require", "tracker_key"]

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
            f'pip install "interp-widgets[{extra}]"',
            name=module,
        ) from error


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
    return {key: value for key, value in (meta or {}).items() if isinstance(value, (str, int, float, bool))}


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
        >>> from interp_widgets.geometry.log.geometry_log import GeometryLog
        >>> class Printer(Tracker):
        ...     def _write(self, step, scalars):
        ...         print(step, scalars)
        >>> log = GeometryLog(["l"]); printer = Printer(metrics=["p_value"]).attach(log)
        >>> log.record(3, {"loss": 1.5, "p_value|l": 0.25, "energy_ratio|l": 2.0, "monitor_ms": 4.0})
        3 {'geometry/loss': 1.5, 'geometry/p_value/l': 0.25}
    """

    #: the name of the pip extra that installs this tracker's package (also its ``report_to`` name)
    extra = ""

    def __init__(
        self, *, prefix: str = "geometry", metrics: Iterable[str] | str | None = None, step_offset: int = 0
    ) -> None:
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
        """Subscribe to ``monitor`` (an :class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor` or any
        :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog`), flush when its ``with`` block ends; returns self.

        Example:
            >>> from interp_widgets.geometry.log.geometry_log import GeometryLog
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
