"""Where the demo models are cached."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where the fine-tuned demo weights live: ``$INTERP_WIDGETS_CACHE`` or ``~/.cache/interp_widgets``.

    Example:
        >>> env = getfixture("monkeypatch")
        >>> env.delenv("INTERP_WIDGETS_CACHE", raising=False)
        >>> env.setenv("XDG_CACHE_HOME", "/srv/cache")
        >>> cache_dir()
        PosixPath('/srv/cache/interp_widgets')
        >>> env.setenv("INTERP_WIDGETS_CACHE", "/data/iw")
        >>> cache_dir()
        PosixPath('/data/iw')
    """
    root = os.environ.get("INTERP_WIDGETS_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "interp_widgets"
