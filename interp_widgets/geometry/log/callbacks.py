"""Callback lists for :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog`: its subscribers and its flush callbacks.

A callback that raises is reported as a ``RuntimeWarning`` and never reaches the caller: a display problem must never
stop training.

Example:
    >>> seen = []
    >>> callbacks = Callbacks("subscriber")
    >>> remove = callbacks.add(seen.append)
    >>> callbacks.call(1); remove(); callbacks.call(2); seen
    [1]
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

__all__ = ["Callbacks"]


class Callbacks:
    """An ordered list of callbacks, each removable by the function :meth:`add` returns.

    Args:
        kind: what a callback is called in warnings (``"GeometryLog subscriber"``, ``"flush callback"``).
        signature: how a callback is called, for the TypeError on a non-callable (``"callable(step, values)"``).

    Example:
        >>> callbacks = Callbacks("flush callback"); _ = callbacks.add(lambda: print("hi")); callbacks.call()
        hi
    """

    def __init__(self, kind: str, signature: str = "callable()") -> None:
        self.kind, self.signature = kind, signature
        self.functions: list[Callable] = []

    def add(self, fn: Callable) -> Callable[[], None]:
        """Append ``fn``; returns a function that removes it again (safe to call twice).

        Example:
            >>> callbacks = Callbacks("subscriber"); remove = callbacks.add(print); remove(); remove()
            >>> callbacks.functions
            []
        """
        if not callable(fn):
            raise TypeError(f"a {self.kind} must be {self.signature}, got {type(fn).__name__}")
        self.functions.append(fn)

        def remove() -> None:
            if fn in self.functions:
                self.functions.remove(fn)

        return remove

    def call(self, *args) -> None:
        """Call every callback with ``args``; one that raises is reported as a ``RuntimeWarning``.

        Example:
            >>> import warnings
            >>> callbacks = Callbacks("subscriber"); _ = callbacks.add(lambda: 1 / 0)
            >>> with warnings.catch_warnings(record=True) as caught:
            ...     warnings.simplefilter("always"); callbacks.call()
            >>> str(caught[0].message)
            'a subscriber raised ZeroDivisionError: division by zero'
        """
        for fn in list(self.functions):
            try:
                fn(*args)
            except Exception as error:
                warnings.warn(f"a {self.kind} raised {type(error).__name__}: {error}", RuntimeWarning, stacklevel=4)
