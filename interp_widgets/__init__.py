"""interp_widgets: Jupyter widgets for understanding transformer language models.

Example:
    >>> import interp_widgets as iw
    >>> result = iw.attribute(model, tokenizer, "Not bad at all.", granularity="word",
    ...                       method_params={"progress": False})
    >>> result
    AttributionResult(method='integrated_gradients', 5 words, targets=[positive (p=0.421)])
    >>> result.tokens, result.scores.round(3)
    (['Not', 'bad', 'at', 'all', '.'], array([[ 0.027, -0.139,  0.129,  0.072, -0.029]]))
    >>> iw.concepts.collect_activations.__module__  # subpackages import on first use
    'interp_widgets.concepts.activations'

With the demo classifier instead of a tiny test model (not run here: a fresh machine fine-tunes it for minutes)::

    model, tokenizer = iw.demo.load_classifier()
"""

import importlib

__version__ = "0.1.0"
_SUBPACKAGES = ("attribution", "concepts", "demo", "geometry", "widgets")
#: Top-level shortcuts, imported on first use like the subpackages.
_SHORTCUTS = {"ModelAdapter": "interp_widgets.adapter", "attribute": "interp_widgets.attribution"}
__all__ = ["ModelAdapter", "attribute", "__version__", *_SUBPACKAGES]


def load_ipython_extension(shell) -> None:
    """``%load_ext interp_widgets``: register the ``%%monitor`` and ``%explain`` magics (:mod:`interp_widgets.magics`).

    Example:
        >>> from IPython import get_ipython
        >>> from IPython.testing.globalipapp import start_ipython
        >>> _ = start_ipython()  # a test shell (None if one is already running)
        >>> load_ipython_extension(get_ipython())
        >>> "explain" in get_ipython().magics_manager.magics["line"]
        True
    """
    importlib.import_module("interp_widgets.magics").load_ipython_extension(shell)


def __getattr__(name: str):
    """Import the compute families (``iw.concepts``, ``iw.geometry`` …) and the shortcuts (``iw.attribute``,
    ``iw.ModelAdapter``) on first use, so ``import interp_widgets`` loads neither torch nor transformers."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"interp_widgets.{name}")
    if name in _SHORTCUTS:
        return getattr(importlib.import_module(_SHORTCUTS[name]), name)
    raise AttributeError(f"module 'interp_widgets' has no attribute {name!r}")
