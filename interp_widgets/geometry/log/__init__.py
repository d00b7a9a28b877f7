"""The record of a monitored run: :class:`GeometryLog` (``geometry_log``) on the core's column store
(:mod:`interp_widgets.columns`), with its subscriber and flush callbacks (``callbacks``), its saved directory
format (``persistence``) and its tables and charts (``views``).

Example:
    >>> from interp_widgets.geometry.log import GeometryLog
    >>> GeometryLog(["layer:0"])
    GeometryLog(layers=['layer:0'], rows=0)
"""

from interp_widgets.geometry.log.geometry_log import LAYER_METRICS, GeometryLog

__all__ = ["GeometryLog", "LAYER_METRICS"]
