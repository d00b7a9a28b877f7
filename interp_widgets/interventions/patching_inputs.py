"""What activation patching and attribution patching share: the prompt pairs, the answer and foil, the metric.

- :func:`prepare_pairs` tokenises clean and corrupt prompts (one pair, or lists of equal-length pairs, IOI-style)
  with the model's tokenizer and refuses a pair whose prompts have different token counts, naming the fix.
- :func:`resolve_answers` turns the answer and foil into one token id per pair (a single-token string, an id, or by
  default the clean run's top token and the corrupt run's top other token); a multi-token string is refused: only
  the first token of a multi-token answer would be scored, so the error asks for that token explicitly.
- :class:`Scorer` computes the metric of a run from its logits at the scored position: ``"logit_diff"`` (answer
  logit − foil logit), ``"answer_prob"`` (the answer's probability), ``"kl"`` (KL(clean ‖ run) of the next-token
  distributions, 0 on the clean run) or a callable ``metric(logits, pair) -> (rows,)``. It is differentiable.
- :func:`normalise` maps a metric to 0 = corrupt run, 1 = clean run (for every metric, also KL, whose raw values
  fall from KL(clean ‖ corrupt) to 0); :func:`check_separates` refuses a pair whose clean and corrupt metrics are
  closer than 1e-3 · max(|M_clean|, 1): it does not separate the behaviour, and the normalisation would divide by
  nearly zero.

The scored position is the last token for a causal LM, the one ``[MASK]`` of a masked LM's clean prompt, and a
classifier scores its class logits (the answer and foil are then labels or class indices).

Example:
    >>> pairs = prepare_pairs(lm_tokenizer, "the cat sat on the", "the dog sat on the")
    >>> pairs.n_pairs, pairs.n_tokens, pairs.position
    (1, 8, 7)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from interp_widgets.text_units import TokenLayout, encode
from interp_widgets.validation import check_choice

METRICS = ("logit_diff", "answer_prob", "kl")
DIRECTIONS = ("denoise", "noise")
#: |M_clean - M_corrupt| below this share of max(|M_clean|, 1) means the pair does not separate the behaviour
SEPARATION = 1e-3


@dataclass
class PatchingPairs:
    """Tokenised prompt pairs: ``clean_ids`` and ``corrupt_ids`` (pairs, tokens), the first clean prompt's
    ``layout`` (the position labels), the first corrupt prompt's ``corrupt_tokens``, the texts, and the scored
    ``position`` (the last token, or a masked LM's ``[MASK]``; a classifier ignores it).

    Example:
        >>> pairs = prepare_pairs(lm_tokenizer, ["the cat sat", "the dog sat"], ["the dog sat", "the cat sat"])
        >>> pairs.clean_ids.shape, pairs.layout.tokens
        (torch.Size([2, 6]), ['t', 'he', 'c', 'at', 's', 'at'])
    """

    clean_ids: torch.Tensor
    corrupt_ids: torch.Tensor
    layout: TokenLayout
    corrupt_tokens: list[str]
    clean_texts: list[str]
    corrupt_texts: list[str]
    position: int

    @property
    def n_pairs(self) -> int:
        """How many pairs."""
        return int(self.clean_ids.shape[0])

    @property
    def n_tokens(self) -> int:
        """The token count every prompt shares."""
        return int(self.clean_ids.shape[1])


def _texts(value, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{name} must be a prompt (str) or a non-empty list of prompts, got {value!r:.80}")


def prepare_pairs(tokenizer, clean, corrupt) -> PatchingPairs:
    """Tokenise clean and corrupt prompts (a str each, or two lists of the same length) into equal-length pairs.

    Activation patching compares the two runs position by position, so every prompt must have the same token
    count: a pair of different lengths is refused with both tokenisations shown, and so are pairs of a list whose
    lengths differ from the first pair's (all pairs share each forward pass).

    Example:
        >>> prepare_pairs(lm_tokenizer, "the cat sat", "the elephant sat")
        Traceback (most recent call last):
        ...
        ValueError: the clean prompt has 6 tokens ['t', 'he', 'c', 'at', 's', 'at'] but the corrupt prompt has 9 ['t', 'he', 'e', 'le', 'p', 'h', 'ant', 's', 'at']: patching compares the two runs position by position, so they need the same token count. Change the corrupt prompt (e.g. swap a word for one of the same token count as the clean word) until both tokenise to the same length.
    """
    cleans, corrupts = _texts(clean, "clean"), _texts(corrupt, "corrupt")
    if len(cleans) != len(corrupts):
        raise ValueError(
            f"{len(cleans)} clean prompts but {len(corrupts)} corrupt prompts; pass one corrupt prompt per clean one"
        )
    clean_enc = [encode(tokenizer, text) for text in cleans]
    corrupt_enc = [encode(tokenizer, text) for text in corrupts]
    for i, (a, b) in enumerate(zip(clean_enc, corrupt_enc)):
        where = f"pair {i}: " if len(cleans) > 1 else ""
        if len(a) != len(b):
            raise ValueError(
                f"{where}the clean prompt has {len(a)} tokens {a.tokens} but the corrupt prompt has {len(b)} "
                f"{b.tokens}: patching compares the two runs position by position, so they need the same token "
                "count. Change the corrupt prompt (e.g. swap a word for one of the same token count as the clean "
                "word) until both tokenise to the same length."
            )
        if len(a) != len(clean_enc[0]):
            raise ValueError(
                f"pair {i} has {len(a)} tokens but pair 0 has {len(clean_enc[0])}: the pairs of a list share every "
                "forward pass, so all prompts need the same token count. Build the pairs from one template whose "
                "slots take words of the same token count, or patch pairs of different lengths in separate calls."
            )
    clean_ids = torch.tensor(np.stack([e.input_ids for e in clean_enc]), dtype=torch.long)
    corrupt_ids = torch.tensor(np.stack([e.input_ids for e in corrupt_enc]), dtype=torch.long)
    position = clean_ids.shape[1] - 1
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is not None:
        masks = (clean_ids[0] == mask_id).nonzero().flatten().tolist()
        if len(masks) == 1:
            position = masks[0]
    return PatchingPairs(
        clean_ids, corrupt_ids, clean_enc[0].layout, list(corrupt_enc[0].tokens), cleans, corrupts, position
    )


def scored_logits(logits: torch.Tensor, position: int) -> torch.Tensor:
    """The logits a metric scores: a language model's at ``position`` (rows, vocab); a classifier's as they are.

    Example:
        >>> scored_logits(torch.zeros(2, 5, 7), 4).shape, scored_logits(torch.zeros(2, 3), 4).shape
        (torch.Size([2, 7]), torch.Size([2, 3]))
    """
    return logits[:, position] if logits.dim() == 3 else logits


def _per_pair(value, n_pairs: int, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n_pairs:
            raise ValueError(f"{name} has {len(value)} entries for {n_pairs} pairs; pass one per pair, or one for all")
        return list(value)
    return [value] * n_pairs


def _token_id(tokenizer, value, name: str, labels: dict | None) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a token string or a token id (int), got {type(value).__name__}")
    if labels is not None:
        by_name = {str(label): int(i) for i, label in labels.items()}
        if value not in by_name:
            raise ValueError(f"{name} {value!r} is not a label of this classifier; use one of {sorted(by_name)}")
        return by_name[value]
    ids = tokenizer(value, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        first = f"; its first token is {pieces[0]!r} (id {ids[0]})" if ids else ""
        raise ValueError(
            f"{name} {value!r} is {len(ids)} tokens {pieces}, but patching scores one next token: pass a single "
            f"token (a string that tokenises to one token, mind the leading space, or its id){first}. Multi-token "
            "answers are not scored."
        )
    return int(ids[0])


@dataclass
class Answers:
    """The answer and foil of every pair: ``answer_ids`` / ``foil_ids`` (pairs,) and their strings (``foils`` and
    ``foil_ids`` are None when the metric needs no foil).

    Example:
        >>> answers = resolve_answers(lm_tokenizer, " the", [" on", " of"], 2)
        >>> answers.answers, answers.foils, answers.answer_ids.tolist()
        ([' the', ' the'], [' on', ' of'], [261, 261])
    """

    answers: list[str]
    answer_ids: np.ndarray
    foils: list[str] | None
    foil_ids: np.ndarray | None


def _label_of(tokenizer, token_id: int, labels: dict | None) -> str:
    return str(labels.get(token_id, token_id)) if labels is not None else tokenizer.decode([token_id])


def resolve_answers(
    tokenizer,
    answer,
    foil,
    n_pairs: int,
    *,
    clean_logits: torch.Tensor | None = None,
    corrupt_logits: torch.Tensor | None = None,
    labels: dict | None = None,
    needs_foil: bool = True,
) -> Answers:
    """One answer and one foil token id per pair.

    ``answer`` / ``foil``: a token string (it must tokenise to one token), a token id, or a list of those (one per
    pair). None: the answer is the clean run's top token and the foil the corrupt run's top token other than the
    answer (``clean_logits`` / ``corrupt_logits``: the scored logits, (pairs, vocab)). A classifier (``labels``:
    its ``config.id2label``) takes labels or class indices.

    Example:
        >>> resolve_answers(lm_tokenizer, " the cat", None, 1)
        Traceback (most recent call last):
        ...
        ValueError: answer ' the cat' is 3 tokens [' the', ' c', 'at'], but patching scores one next token: pass a single token (a string that tokenises to one token, mind the leading space, or its id); its first token is ' the' (id 261). Multi-token answers are not scored.
    """
    answer_ids = []
    for i, value in enumerate(_per_pair(answer, n_pairs, "answer")):
        if value is None:
            if clean_logits is None:
                raise ValueError("no answer given; pass answer= the token the clean prompt should be followed by")
            answer_ids.append(int(clean_logits[i].argmax()))
        else:
            answer_ids.append(_token_id(tokenizer, value, "answer", labels))
    foil_ids = None
    if needs_foil or foil is not None:
        foil_ids = []
        for i, value in enumerate(_per_pair(foil, n_pairs, "foil")):
            if value is None:
                if corrupt_logits is None:
                    raise ValueError("no foil given; pass foil= the token the corrupt prompt should be followed by")
                ranked = corrupt_logits[i].argsort(descending=True)[:2].tolist()
                foil_ids.append(ranked[0] if ranked[0] != answer_ids[i] else ranked[1])
            else:
                foil_ids.append(_token_id(tokenizer, value, "foil", labels))
        for i, (a, f) in enumerate(zip(answer_ids, foil_ids)):
            if a == f:
                raise ValueError(
                    f"pair {i}: the answer and the foil are the same token {_label_of(tokenizer, a, labels)!r}; "
                    "pass a foil= that differs from the answer (the token the corrupt prompt should predict)"
                )
    return Answers(
        [_label_of(tokenizer, i, labels) for i in answer_ids],
        np.asarray(answer_ids, dtype=np.int64),
        None if foil_ids is None else [_label_of(tokenizer, i, labels) for i in foil_ids],
        None if foil_ids is None else np.asarray(foil_ids, dtype=np.int64),
    )


def metric_name(metric) -> str:
    """The name a result records: one of :data:`METRICS`, or ``"custom"`` for a callable.

    Example:
        >>> metric_name("kl"), metric_name(lambda logits, pair: logits[:, 0])
        ('kl', 'custom')
    """
    if callable(metric):
        return "custom"
    check_choice("metric", metric, METRICS)
    return metric


class Scorer:
    """The metric of runs from their scored logits (rows, vocab) and each row's ``pair`` index (rows,).

    ``metric``: ``"logit_diff"``, ``"answer_prob"``, ``"kl"`` (KL(clean ‖ run) from ``clean_logits``, the clean
    runs' scored logits, (pairs, vocab)) or a callable ``metric(logits, pair) -> (rows,)``. Computed in float32 at
    least; differentiable.

    Example:
        >>> answers = Answers([" a"], np.array([1]), [" b"], np.array([2]))
        >>> scorer = Scorer("logit_diff", answers)
        >>> scorer(torch.tensor([[0.0, 3.0, 1.0]]), torch.tensor([0])).tolist()
        [2.0]
    """

    def __init__(self, metric, answers: Answers, clean_logits: torch.Tensor | None = None):
        self.name = metric_name(metric)
        self.metric = metric
        self.answers = answers
        if self.name == "logit_diff" and answers.foil_ids is None:
            raise ValueError("metric='logit_diff' needs a foil; pass foil= or use metric='answer_prob'")
        self.clean_logprobs = None
        if self.name == "kl":
            if clean_logits is None:
                raise ValueError("metric='kl' needs the clean runs' logits")
            self.clean_logprobs = torch.log_softmax(_wide(clean_logits.detach()), dim=-1)

    def __call__(self, logits: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        if self.name == "custom":
            values = self.metric(logits, pair)
            if not isinstance(values, torch.Tensor) or values.shape != (logits.shape[0],):
                got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
                raise ValueError(
                    f"the metric returned {got}; a metric callable takes (logits (rows, vocab), pair (rows,)) and "
                    f"returns one value per row, a tensor of shape ({logits.shape[0]},)"
                )
            return values
        logits = _wide(logits)
        pair = pair.to(logits.device)
        answer = torch.as_tensor(self.answers.answer_ids, device=logits.device)[pair]
        if self.name == "logit_diff":
            foil = torch.as_tensor(self.answers.foil_ids, device=logits.device)[pair]
            return logits.gather(1, answer[:, None])[:, 0] - logits.gather(1, foil[:, None])[:, 0]
        if self.name == "answer_prob":
            return torch.softmax(logits, dim=-1).gather(1, answer[:, None])[:, 0]
        clean = self.clean_logprobs.to(logits.device)[pair]
        return (clean.exp() * (clean - torch.log_softmax(logits, dim=-1))).sum(-1)


def _wide(logits: torch.Tensor) -> torch.Tensor:
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def check_separates(clean: np.ndarray, corrupt: np.ndarray, metric: str) -> None:
    """Refuse pairs whose clean and corrupt metrics differ by less than 1e-3 · max(|M_clean|, 1).

    Example:
        >>> check_separates(np.array([2.0]), np.array([2.0005]), "logit_diff")
        Traceback (most recent call last):
        ...
        ValueError: the pair does not separate the behaviour: its logit_diff is 2 on the clean prompt and 2.0005 on the corrupt prompt (a difference below 1e-3 · max(|clean|, 1)), so 0 = corrupt and 1 = clean cannot be told apart. Choose a corrupt prompt that changes the answer (check the model's predictions on both), or another answer / foil / metric.
    """
    clean, corrupt = np.asarray(clean, dtype=np.float64), np.asarray(corrupt, dtype=np.float64)
    for i, (c, r) in enumerate(zip(clean, corrupt)):
        if not abs(c - r) >= SEPARATION * max(abs(c), 1.0):
            which = f"pair {i} " if len(clean) > 1 else "the pair "
            raise ValueError(
                f"{which}does not separate the behaviour: its {metric} is {c:.6g} on the clean prompt and {r:.6g} on "
                "the corrupt prompt (a difference below 1e-3 · max(|clean|, 1)), so 0 = corrupt and 1 = clean cannot "
                "be told apart. Choose a corrupt prompt that changes the answer (check the model's predictions on "
                "both), or another answer / foil / metric."
            )


def normalise(raw, clean, corrupt):
    """(raw − M_corrupt) / (M_clean − M_corrupt): 0 = the corrupt run, 1 = the clean run, per pair (the last axis
    of ``raw`` is the pair, or ``clean`` / ``corrupt`` broadcast against it). Noising keeps this formula, so there a
    low value means important.

    Example:
        >>> normalise(np.array([1.0, 3.0]), np.array([3.0]), np.array([1.0])).tolist()
        [0.0, 1.0]
    """
    return (raw - corrupt) / (clean - corrupt)
