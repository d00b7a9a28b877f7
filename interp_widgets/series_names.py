"""Flat series names of training curves: global scalars (``"loss"``) and per-layer metrics (``"metric|layer"``).

One definition shared by the geometry log that writes the series and the monitor widget that draws them. Layer
names may contain ``|`` (metric names never do), so only the first bar splits.

Example:
    >>> series_name("energy_ratio", "layer:2")
    'energy_ratio|layer:2'
    >>> split_series_name("energy_ratio|blocks|3"), split_series_name("loss")
    (('energy_ratio', 'blocks|3'), ('loss', None))
"""

from __future__ import annotations

__all__ = ["SEPARATOR", "series_name", "split_series_name"]

SEPARATOR = "|"


def series_name(metric: str, layer: str) -> str:
    """The flat series name of a per-layer metric.

    Example:
        >>> series_name("energy_ratio", "layer:2")
        'energy_ratio|layer:2'
    """
    return f"{metric}{SEPARATOR}{layer}"


def split_series_name(name: str) -> tuple[str, str | None]:
    """``(metric, layer)`` of a flat series name; ``layer`` is None for global series. Only the first bar splits.

    Example:
        >>> split_series_name("p_value|layer:0"), split_series_name("loss")
        (('p_value', 'layer:0'), ('loss', None))
    """
    metric, sep, layer = name.partition(SEPARATOR)
    return (metric, layer) if sep else (name, None)
