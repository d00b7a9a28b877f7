"""The monitor offers its :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog` (``monitor.history``) as its own
attributes, and buffers user scalars until their step is recorded.

Example:
    >>> pending = PendingScalars(); pending.add(3, {"lr": 0.1}); pending.pop(3)
    {'lr': 0.1}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from interp_widgets.geometry.log.geometry_log import GeometryLog, as_scalar

__all__ = ["HISTORY_API", "PendingScalars", "offer_history_api"]

#: What a monitor offers of its :class:`GeometryLog` (``monitor.history``) as its own attributes.
HISTORY_API = (
    "__len__",
    "steps",
    "series_names",
    "series",
    "raw",
    "to_dataframe",
    "chart",
    "widget",
    "_repr_mimebundle_",
    "_display_",
    "save",
    "snapshot",
    "subscribe",
    "on_flush",
    "layers",
    "x_label",
    "max_rows",
    "meta",
    "proxies",
)


class _FromHistory:
    """A monitor attribute that is its history's: ``monitor.series`` is ``monitor.history.series`` (reading and
    assignment); on the class it is the :class:`GeometryLog` attribute, so ``help()`` shows the log's documentation.

    Example:
        >>> from interp_widgets.geometry import AnisotropyMonitor
        >>> AnisotropyMonitor.chart is GeometryLog.chart
        True
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"``history.{name}`` of the monitor's :class:`GeometryLog` (see ``GeometryLog.{name}``)."

    def __get__(self, monitor, owner=None):
        return getattr(GeometryLog, self.name) if monitor is None else getattr(monitor.history, self.name)

    def __set__(self, monitor, value) -> None:
        setattr(monitor.history, self.name, value)


def offer_history_api(cls: type) -> type:
    """Give ``cls`` (whose instances hold a ``history`` log) every attribute of :data:`HISTORY_API`.

    Example:
        >>> class Holder:
        ...     def __init__(self): self.history = GeometryLog(["layer:0"])
        >>> offer_history_api(Holder)().layers
        ['layer:0']
    """
    for name in HISTORY_API:
        setattr(cls, name, _FromHistory(name))
    return cls


class PendingScalars:
    """User scalars per step, waiting for that step's measurement row (or sent alone when no measurement comes).

    Example:
        >>> rows = []
        >>> pending = PendingScalars(); pending.add(0, {"lr": 1e-4}); pending.add(2, {"lr": 5e-5})
        >>> pending.flush(lambda step, values: rows.append((step, values)), current_step=1, measured=lambda s: True)
        >>> rows
        [(0, {'lr': 0.0001})]
    """

    def __init__(self) -> None:
        self._by_step: dict[int, dict] = {}

    def add(self, step: int, scalars: Mapping) -> None:
        """Queue ``scalars`` (checked to be numbers) for ``step``."""
        values = {name: as_scalar(name, value) for name, value in scalars.items()}
        self._by_step.setdefault(step, {}).update(values)

    def pop(self, step: int) -> dict:
        """The scalars queued for ``step`` (removed), or an empty dict."""
        return self._by_step.pop(step, {})

    def flush(
        self,
        record: Callable[[int, dict], None],
        *,
        current_step: int,
        measured: Callable[[int], bool],
        final: bool = False,
    ) -> None:
        """Send, through ``record``, the scalars of steps that no measurement row will carry any more: earlier
        steps, the current one if it is not measured, and everything when ``final``."""
        for step in sorted(self._by_step):
            if final or step < current_step or (step == current_step and not measured(step)):
                record(step, self._by_step.pop(step))
