"""The repository root on ``sys.path``, so every benchmark imports ``interp_widgets`` and ``tests`` from this checkout.

Each script in ``benchmarks/`` runs as ``python benchmarks/<name>.py`` (directly or through ``run.py``), which puts
``benchmarks/`` first on ``sys.path``; ``import _repo`` then adds the root. It is the one place that does.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# first, even when an editable install already put it last: site-packages may hold another top-level ``tests``
# (tuned-lens 0.2.0 installs one), which would shadow this checkout's
if str(ROOT) in sys.path:
    sys.path.remove(str(ROOT))
sys.path.insert(0, str(ROOT))
