"""The live monitor and what drives it: :class:`AnisotropyMonitor` (``anisotropy_monitor``), its settings (``config``, :class:`MonitorConfig`), the layers it binds
(``binding``), the rows it captures during the user's passes (``capture``), its per-step measurement
(``measurement``), distributed gathering (``distributed``), the log API it offers as its own (``delegation``), and
its drivers: :func:`~interp_widgets.geometry.monitor.replay.replay` over saved checkpoints (``replay``), the Hugging
Face Trainer callback (``trainer``) and the PyTorch Lightning callback (``lightning``; both imported on use).

Example:
    >>> from interp_widgets.geometry.monitor import AnisotropyMonitor
    >>> AnisotropyMonitor.__name__
    'AnisotropyMonitor'
"""

from interp_widgets.geometry.monitor.anisotropy_monitor import AnisotropyMonitor
from interp_widgets.geometry.monitor.config import MonitorConfig

__all__ = ["AnisotropyMonitor", "MonitorConfig"]
