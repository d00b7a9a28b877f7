"""Checks of user inputs shared by the attribution and concept entry points (imports nothing from the package).

An input is a text or a chat conversation: a list of ``{"role": ..., "content": ...}`` messages, which the
tokenizer's own chat template turns into the text the model reads (:func:`interp_widgets.text_units.encode_chat`).
"""

from __future__ import annotations

from collections.abc import Mapping

_ONE, _MANY = '"a text"', '["a text", "another"]'


def is_conversation(value) -> bool:
    """Whether ``value`` is one chat conversation: a non-empty list or tuple of messages (mappings with a ``role``).

    Example:
        >>> is_conversation([{"role": "user", "content": "Hi!"}]), is_conversation("Hi!"), is_conversation([])
        (True, False, False)
    """
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(m, Mapping) and "role" in m for m in value))  # fmt: skip


def input_items(inputs) -> tuple[list, bool]:
    """The inputs as a list of texts and conversations, and whether one input was given (a text or one
    conversation) rather than a list of them.

    Example:
        >>> input_items("Hi!")
        (['Hi!'], True)
        >>> chat = [{"role": "user", "content": "Hi!"}]
        >>> input_items(chat) == ([chat], True), input_items([chat, "Hello."]) == ([chat, "Hello."], False)
        (True, True)
    """
    if isinstance(inputs, str) or is_conversation(inputs):
        return [inputs], True
    return list(inputs), False


def check_texts(texts, *, name: str, call: str) -> None:
    """Raise a ``TypeError`` naming the fix unless ``texts`` is a text, a conversation (a list of ``{"role",
    "content"}`` messages) or a sized collection of them (a list, a tuple, an array or a dataset column).

    ``name`` is the argument's name and ``call`` the right call with one text, written with ``"a text"``; the
    message shows it with one text and with a list of two.

    Example:
        >>> check_texts(["Good.", "Bad."], name="inputs", call='f(model, "a text")')
        >>> check_texts([{"role": "user", "content": "Good?"}], name="inputs", call='f(model, "a text")')
        >>> check_texts(None, name="inputs", call='f(model, "a text")')
        Traceback (most recent call last):
        ...
        TypeError: inputs must be a text or a list of texts, got None; pass f(model, "a text") or f(model, ["a text", "another"]) (a chat conversation is a list of {"role": ..., "content": ...} messages)
    """
    if isinstance(texts, str) or is_conversation(texts):
        return
    fix = (
        f'pass {call} or {call.replace(_ONE, _MANY)} (a chat conversation is a list of {{"role": ..., '
        '"content": ...}} messages)'
    )
    if isinstance(texts, (bytes, dict)) or not (hasattr(texts, "__len__") and hasattr(texts, "__iter__")):
        got = "None" if texts is None else f"a {type(texts).__name__}"
        raise TypeError(f"{name} must be a text or a list of texts, got {got}; {fix}")
    for i, text in enumerate(texts):
        if isinstance(text, Mapping):
            raise TypeError(
                f'{name}[{i}] is a {type(text).__name__} without a "role": a chat message is '
                '{"role": ..., "content": ...}, and a conversation a list of them'
            )
        if isinstance(text, (list, tuple)) and text and not is_conversation(text):
            bad = next(m for m in text if not (isinstance(m, Mapping) and "role" in m))
            raise TypeError(
                f"{name}[{i}] is a list holding a {type(bad).__name__}, not a conversation; a chat "
                'message is a dict {"role": ..., "content": ...}'
            )
        if not (isinstance(text, str) or is_conversation(text)):
            raise TypeError(f"{name}[{i}] is a {type(text).__name__}, not a text; {fix}")
