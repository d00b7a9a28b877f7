"""interp_widgets: Jupyter widgets for understanding transformer language models.

Example:
    >>> import interp_widgets as iw
    >>> model, tokenizer = iw.demo.load_classifier()                     # doctest: +SKIP
    >>> iw.attribute(model, tokenizer, "Not bad at all.", granularity="word")  # doctest: +SKIP
"""

import importlib

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import attribute

__version__ = "0.1.0"
_SUBPACKAGES = ("attribution", "concepts", "demo", "geometry", "widgets")
__all__ = ["ModelAdapter", "attribute", "__version__", *_SUBPACKAGES]


def __getattr__(name: str):
    """Import the compute families lazily (``iw.concepts``, ``iw.geometry`` …) so ``import interp_widgets`` stays light."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"interp_widgets.{name}")
    raise AttributeError(f"module 'interp_widgets' has no attribute {name!r}")
