"""Argument checks with one message style: what the argument must be, then what was given.

Every public entry point of the package checks its integer, number and choice arguments here, so a bad value gives
the same kind of message everywhere: ``n_steps must be an integer >= 1, got 0`` or
``unknown granularity 'words'; use one of ('token', 'word', 'sentence')``. An optional ``hint`` says how to fix it.
bool is never accepted as an integer; numpy integers and floats are.

Example:
    >>> check_int("n_steps", 32, minimum=1)
    32
    >>> check_int("n_steps", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: n_steps must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

__all__ = ["check_choice", "check_fraction", "check_int", "check_number", "check_step"]


def _range_text(minimum, maximum, low_open: bool = False, high_open: bool = False) -> str:
    if minimum is not None and maximum is not None:
        return f" in {'(' if low_open else '['}{minimum}, {maximum}{')' if high_open else ']'}"
    if minimum is not None:
        return f" {'>' if low_open else '>='} {minimum}"
    if maximum is not None:
        return f" {'<' if high_open else '<='} {maximum}"
    return ""


def _fail(message: str, hint: str) -> ValueError:
    return ValueError(message + (f"; {hint}" if hint else ""))


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None, hint: str = "") -> int:
    """``value`` as an int, if it is an integer (not a bool) within ``[minimum, maximum]``; else a ValueError.

    Example:
        >>> check_int("k", np.int64(3), minimum=1, maximum=5)
        3
        >>> check_int("k", 2.5, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: k must be an integer >= 1, got 2.5
        >>> check_int("rank", 9, minimum=1, maximum=8, hint="choose a lower rank")
        Traceback (most recent call last):
        ...
        ValueError: rank must be an integer in [1, 8], got 9; choose a lower rank
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        value = int(value)
        ok = (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        raise _fail(f"{name} must be an integer{_range_text(minimum, maximum)}, got {value!r}", hint)
    return value


def check_number(
    name: str,
    value,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
) -> float:
    """``value`` as a float, if it is a finite real number in the range (``low_open``/``high_open`` exclude ends).

    Example:
        >>> check_number("noise_level", 0.1, minimum=0)
        0.1
        >>> check_number("tolerance", 1.0, minimum=0, maximum=1, low_open=True, high_open=True)
        Traceback (most recent call last):
        ...
        ValueError: tolerance must be a number in (0, 1), got 1.0
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        value = float(value)
        ok = (minimum is None or (value > minimum if low_open else value >= minimum)) and (
            maximum is None or (value < maximum if high_open else value <= maximum)
        )
    if not ok:
        raise _fail(f"{name} must be a number{_range_text(minimum, maximum, low_open, high_open)}, got {value!r}", hint)
    return value


def check_fraction(name: str, value, *, hint: str = "") -> float:
    """``value`` as a float in (0, 1].

    Example:
        >>> check_fraction("fit_fraction", 0.25)
        0.25
        >>> check_fraction("fit_fraction", 1.5)
        Traceback (most recent call last):
        ...
        ValueError: fit_fraction must be a number in (0, 1], got 1.5
    """
    return check_number(name, value, minimum=0, maximum=1, low_open=True, hint=hint)


def check_step(value, name: str = "step") -> int:
    """A training step number: a non-negative integer.

    Example:
        >>> check_step(0)
        0
        >>> check_step(-1)
        Traceback (most recent call last):
        ...
        ValueError: step must be an integer >= 0, got -1
    """
    return check_int(name, value, minimum=0)


def check_choice(name: str, value, choices: Sequence, *, hint: str = ""):
    """``value`` if it is one of ``choices``; else a ValueError listing them.

    Example:
        >>> check_choice("granularity", "word", ("token", "word", "sentence"))
        'word'
        >>> check_choice("granularity", "words", ("token", "word", "sentence"))
        Traceback (most recent call last):
        ...
        ValueError: unknown granularity 'words'; use one of ('token', 'word', 'sentence')
    """
    try:
        found = value in choices
    except TypeError:  # an unhashable value looked up in a set or dict
        found = False
    if not found:
        raise _fail(f"unknown {name} {value!r}; use one of {tuple(choices)}", hint)
    return value
