"""Deprecated names of the geometry package, kept working with a ``DeprecationWarning``.

Example:
    >>> issubclass(GeometryMonitor, AnisotropyMonitor)
    True
"""

from __future__ import annotations

import warnings

from interp_widgets.geometry.monitor import AnisotropyMonitor

__all__ = ["GEOMETRY_MONITOR_DEPRECATION", "GeometryMonitor"]

#: The warning given when the deprecated ``GeometryMonitor`` name is imported or used.
GEOMETRY_MONITOR_DEPRECATION = (
    "GeometryMonitor is deprecated and will be removed; use AnisotropyMonitor (the same class)"
)


class GeometryMonitor(AnisotropyMonitor):
    """Deprecated name of :class:`AnisotropyMonitor`: it works the same, and warns (``DeprecationWarning``) when
    imported from :mod:`interp_widgets.geometry` and when constructed.

    Example:
        >>> import torch, warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     monitor = GeometryMonitor(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], rank=2, total_steps=3)
        >>> caught[0].category.__name__, isinstance(monitor, AnisotropyMonitor)
        ('DeprecationWarning', True)
    """

    def __init__(self, *args, **kwargs) -> None:
        warnings.warn(GEOMETRY_MONITOR_DEPRECATION, DeprecationWarning, stacklevel=2)
        super().__init__(*args, **kwargs)
