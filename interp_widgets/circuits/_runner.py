"""Where the circuit view finds the function that runs its interventions.

``feature_intervention`` registers itself here on import. The view (``_view``) reads it from here: the view cannot
import ``feature_intervention`` (which imports the graph module, which builds the view), and ``feature_intervention``
must not import the view (which needs the widget packages, absent from a bare GPU image).

Example:
    >>> import interp_widgets.circuits as circuits
    >>> from interp_widgets.circuits import _runner
    >>> _runner.intervention_runner() is circuits.feature_intervention
    True
"""

from __future__ import annotations

from collections.abc import Callable

_RUNNER: Callable | None = None


def register_intervention_runner(run: Callable) -> None:
    """Set the function that runs the view's interventions (``feature_intervention`` registers itself on import).

    Example:
        >>> import interp_widgets.circuits as circuits
        >>> register_intervention_runner(circuits.feature_intervention)
    """
    global _RUNNER
    _RUNNER = run


def intervention_runner() -> Callable:
    """The registered runner; importing :mod:`interp_widgets.circuits` registers ``feature_intervention``.

    Example:
        >>> import interp_widgets.circuits as circuits
        >>> intervention_runner().__name__
        'feature_intervention'
    """
    if _RUNNER is None:
        raise RuntimeError("feature_intervention is not loaded: import interp_widgets.circuits")
    return _RUNNER
