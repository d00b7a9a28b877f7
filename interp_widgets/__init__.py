"""interp_widgets: Jupyter widgets for understanding transformer language models.

Example:
    >>> import interp_widgets as iw
    >>> model, tokenizer = iw.demo.load_classifier()                     # doctest: +SKIP
    >>> iw.attribute(model, tokenizer, "Not bad at all.", granularity="word")  # doctest: +SKIP
"""

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import attribute

__version__ = "0.1.0"
__all__ = ["ModelAdapter", "attribute", "__version__"]
