"""Checks of user inputs shared by the attribution and concept entry points (imports nothing from the package)."""

from __future__ import annotations

_ONE, _MANY = '"a text"', '["a text", "another"]'


def check_texts(texts, *, name: str, call: str) -> None:
    """Raise a ``TypeError`` naming the fix unless ``texts`` is a text or a sized collection of texts (a list, a
    tuple, an array or a dataset column of strings).

    ``name`` is the argument's name and ``call`` the right call with one text, written with ``"a text"``; the
    message shows it with one text and with a list of two.

    Example:
        >>> check_texts(["Good.", "Bad."], name="inputs", call='f(model, "a text")')
        >>> check_texts(None, name="inputs", call='f(model, "a text")')
        Traceback (most recent call last):
        ...
        TypeError: inputs must be a text or a list of texts, got None; pass f(model, "a text") or f(model, ["a text", "another"])
    """
    if isinstance(texts, str):
        return
    fix = f"pass {call} or {call.replace(_ONE, _MANY)}"
    if isinstance(texts, (bytes, dict)) or not (hasattr(texts, "__len__") and hasattr(texts, "__iter__")):
        got = "None" if texts is None else f"a {type(texts).__name__}"
        raise TypeError(f"{name} must be a text or a list of texts, got {got}; {fix}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] is a {type(text).__name__}, not a text; {fix}")
