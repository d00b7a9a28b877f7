"""Contrastive targets: explain "why this token rather than that one" (``contrast=``).

With a foil, the score of every target becomes a difference, ``score(target) − score(foil)``, read from the same
logits at the same position (the target's own context). For a causal LM the default score is
``log p(target) − log p(foil)``, which equals the logit difference ``logit(target) − logit(foil)`` exactly (the
log-normaliser cancels), so it is computed from the two logits; ``score="probability"`` gives ``p(target) − p(foil)``
(inseq's ``contrast_prob_diff``) and ``score="logit"`` the logit difference (inseq's ``contrast_logits_diff``). A
positive attribution pushes the model towards the target rather than the foil, a negative one towards the foil.

**Foils.** ``contrast=`` takes

- a foil continuation as text (tokenized like ``continuation=``, without special tokens) or as token ids;
- one foil token per target, as a list of strings that are one token each (its length must equal the number of
  targets);
- for a list of inputs, either one foil shared by every input or a list with one foil per input.

A masked LM takes one foil token (text of one token, or its id). A sequence classifier takes none: its scores are
already per class (:meth:`interp_widgets.tasks.Task.explain` refuses one).

**Alignment of a foil of another length** (the rule of inseq 0.7, whose ``contrast_targets`` are the prompt plus
the foil and whose missing ``contrast_targets_alignments`` are filled by right-aligned 1:1 positions). The target
sequence (prompt + the ``n`` target tokens) and the foil sequence (the same prompt + the ``m`` foil tokens) are
aligned from the right: the last target is contrasted with the last foil token, the one before with the one
before, and so on. Target step ``t`` gets foil index ``t + m − n``:

- equal lengths (``m = n``): step ``t`` is contrasted with foil token ``t``;
- a longer foil: the first ``m − n`` foil tokens are never used;
- a shorter foil: the first ``n − m`` steps are contrasted with the prompt's last tokens (negative foil indices
  count back from the end of the prompt), as inseq does; if even the prompt is too short (index ≤ 0 in the foil
  sequence), inseq's fallback, the last foil token, is used.

``contrast_alignment=[(step, foil_index), ...]`` overrides the rule for the steps it names (indices into the
target continuation and the foil continuation, both from 0); the other steps keep the default.

The foil is scored in the target's context: the foil's own earlier tokens are never fed to the model (inseq does
the same for an attributed contrastive function unless ``contrast_force_inputs=True``). Steps whose foil token is
the target itself have a score of exactly 0 and zero attributions.

**Completeness with a foil.** Integrated gradients of a difference is still complete: ``Σattr = Δf`` with ``f`` the
score difference, and ``result.completeness_error`` (absolute, in units of the score) is reported beside
``result.relative_completeness_error``. Read the absolute one when ``|Δf|`` is small: the relative error divides
by ``|Δf|``, so it means little for a foil that is almost as likely as the target at both ends of the path (a step
whose foil is the target itself has ``Δf = 0``, attributions 0 and a completeness error of exactly 0). Measured on
SmolLM2-135M (the dequantised Q4_1 copy of ``demo.load_lm``), "The capital of France is" → " Paris" against
" Lyon": ``Δf = 7.35``; the default adaptive IG reaches a relative error of 0.001 (absolute 0.008) with 43 nodes.
Large errors seen there before (relative 2.1 and 3.6, absolute 13 and −22, at 32 and 64 Gauss–Legendre nodes)
came from ``keep_first=False``, not from a small ``Δf`` (6.1): with every position replaced the integrand is a
staircase (see ``keep_first`` in :class:`~interp_widgets.attribution.IntegratedGradients`).

Example:
    >>> foil_alignment(n_targets=2, n_foil=2)  # equal lengths: 1:1
    [0, 1]
    >>> foil_alignment(n_targets=2, n_foil=4)  # a longer foil: right-aligned, its first two tokens unused
    [2, 3]
    >>> foil_alignment(n_targets=3, n_foil=1, n_prompt=5)  # a shorter foil: steps 0 and 1 meet prompt tokens
    [-2, -1, 0]
    >>> foil_alignment(n_targets=3, n_foil=4, alignment=[(0, 0)])  # step 0 pinned to foil token 0
    [0, 2, 3]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from interp_widgets.targets import Contrast, Targets

__all__ = [
    "foil_alignment",
    "foils_per_input",
    "resolve_lm_foils",
    "resolve_masked_foil",
]


def _is_ids(value) -> bool:
    """A sequence of integers (a list, tuple, numpy array or torch tensor of token ids)."""
    if isinstance(value, (str, bytes)):
        return False
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()
        if isinstance(value, int):
            return False
    try:
        items = list(value)
    except TypeError:
        return False
    return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items)


def _as_list(value) -> list:
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (list, tuple)) else list(value)


def foils_per_input(contrast, n_inputs: int, single: bool) -> list:
    """The foil of each input: one shared foil, or (for a list of inputs) a list with one foil per input.

    Example:
        >>> foils_per_input(" Lyon", 2, single=False)
        [' Lyon', ' Lyon']
        >>> foils_per_input([" Lyon", [5, 6]], 2, single=False)
        [' Lyon', [5, 6]]
        >>> foils_per_input([" Lyon"], 2, single=False)
        Traceback (most recent call last):
        ...
        ValueError: contrast has 1 foils for 2 inputs; pass one foil per input, or one foil (text or token ids) for all
    """
    if contrast is None:
        return [None] * n_inputs
    if single or isinstance(contrast, str) or _is_ids(contrast) or isinstance(contrast, (int, np.integer)):
        return [contrast] * n_inputs
    items = _as_list(contrast)
    if len(items) != n_inputs:
        raise ValueError(
            f"contrast has {len(items)} foils for {n_inputs} inputs; pass one foil per input, or one "
            "foil (text or token ids) for all"
        )
    return items


def foil_alignment(
    n_targets: int, n_foil: int, *, n_prompt: int | None = None, alignment: Sequence[tuple[int, int]] | None = None
) -> list[int]:
    """Foil index of each target step: inseq's right-aligned rule, with ``alignment`` pairs overriding it.

    Indices count into the foil continuation; a negative index ``j`` is prompt token ``n_prompt + j``. See the module
    docstring for the rule.

    Example:
        >>> foil_alignment(n_targets=1, n_foil=3)
        [2]
        >>> foil_alignment(n_targets=2, n_foil=1, alignment=[(1, 5)])
        Traceback (most recent call last):
        ...
        ValueError: contrast_alignment pair (1, 5): foil index 5 is outside the foil's 1 tokens (0..0)
    """
    prompt = 10**9 if n_prompt is None else int(n_prompt)
    out = []
    for t in range(n_targets):
        index = t + n_foil - n_targets
        if prompt + index <= 0:  # inseq: len(contrast) - step <= 0 falls back to the last contrast token
            index = n_foil - 1
        out.append(index)
    if alignment is None:
        return out
    if isinstance(alignment, (str, bytes)):
        raise TypeError(
            "contrast_alignment must be a list of (target step, foil index) pairs, such as [(0, 0), (1, 2)]"
        )
    seen = set()
    for pair in alignment:
        try:
            step, index = (int(v) for v in pair)
        except (TypeError, ValueError):
            raise TypeError(
                f"contrast_alignment entry {pair!r} is not a (target step, foil index) pair of ints"
            ) from None
        if not 0 <= step < n_targets:
            raise ValueError(
                f"contrast_alignment pair {(step, index)}: target step {step} is outside the "
                f"{n_targets} targets (0..{n_targets - 1})"
            )
        if not 0 <= index < n_foil:
            raise ValueError(
                f"contrast_alignment pair {(step, index)}: foil index {index} is outside the foil's "
                f"{n_foil} tokens (0..{n_foil - 1})"
            )
        if step in seen:
            raise ValueError(f"contrast_alignment names target step {step} twice; give one foil index per step")
        seen.add(step)
        out[step] = index
    return out


def _check_ids(ids: list[int], vocab: int, what: str) -> np.ndarray:
    if not ids:
        raise ValueError(f"{what} is empty; pass the foil as text (a continuation, or a token) or as token ids")
    bad = [i for i in ids if not 0 <= int(i) < vocab]
    if bad:
        raise ValueError(f"{what} has token id {bad[0]} outside the vocabulary of {vocab}")
    return np.asarray(ids, dtype=np.int64)


def _tokenize(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([int(token_id)])


def resolve_lm_foils(
    tokenizer,
    vocab: int,
    foil,
    prompt_ids: np.ndarray,
    n_targets: int,
    alignment: Sequence[tuple[int, int]] | None = None,
) -> Contrast:
    """The foil of every target of one causal-LM input (see the module docstring).

    Example:
        >>> contrast = resolve_lm_foils(lm_tokenizer, 600, " clean", np.array([1, 2, 3]), n_targets=2)
        >>> contrast.foils.labels, contrast.alignment.tolist(), contrast.text
        ([' cle', 'an'], [0, 1], ' clean')
        >>> resolve_lm_foils(lm_tokenizer, 600, "", np.array([1]), n_targets=2)
        Traceback (most recent call last):
        ...
        ValueError: contrast is an empty string; pass the foil continuation (such as ' Lyon') or token ids
    """
    if isinstance(foil, str):
        if foil == "":
            raise ValueError("contrast is an empty string; pass the foil continuation (such as ' Lyon') or token ids")
        ids = _check_ids(_tokenize(tokenizer, foil), vocab, f"contrast {foil!r}")
        per_target = False
    elif _is_ids(foil):
        ids = _check_ids([int(v) for v in _as_list(foil)], vocab, "contrast")
        per_target = False
    elif isinstance(foil, (list, tuple)) and foil and all(isinstance(v, str) for v in foil):
        if len(foil) != n_targets:
            raise ValueError(
                f"contrast lists {len(foil)} foil tokens for {n_targets} targets; pass one foil token per "
                "target, or the foil as one continuation text (aligned to the targets)"
            )
        pieces = []
        for k, text in enumerate(foil):
            found = _tokenize(tokenizer, text) if text else []
            if len(found) != 1:
                raise ValueError(
                    f"foil {k} ({text!r}) is {len(found)} tokens; a per-target foil must be exactly one "
                    "token (pass token ids, or the foil as one continuation text)"
                )
            pieces.append(found[0])
        ids = _check_ids(pieces, vocab, "contrast")
        per_target = True
    elif isinstance(foil, (list, tuple)) and not foil:
        raise ValueError("contrast is an empty list; pass the foil continuation as text or token ids")
    else:
        raise TypeError(
            "contrast must be a foil continuation (text or token ids) or a list of one-token foil texts "
            f"(one per target); got {type(foil).__name__}"
        )
    if per_target:
        if alignment is not None:
            raise ValueError(
                "contrast_alignment applies to a foil continuation; a list of one foil per target is already aligned"
            )
        index = list(range(n_targets))
    else:
        index = foil_alignment(n_targets, len(ids), n_prompt=len(prompt_ids), alignment=alignment)
    sequence = np.concatenate([np.asarray(prompt_ids, dtype=np.int64), ids])
    chosen = sequence[np.asarray(index, dtype=np.int64) + len(prompt_ids)]
    return Contrast(
        Targets([_token_text(tokenizer, i) for i in chosen], ids=chosen),
        alignment=np.asarray(index, dtype=np.int64),
        text=tokenizer.decode(ids.tolist()),
    )


def resolve_masked_foil(tokenizer, vocab: int, foil) -> Contrast:
    """The foil of a masked-LM target: one token, as its text or its id.

    Example:
        >>> resolve_masked_foil(tokenizer, 30522, "bad").foils.labels
        ['bad']
        >>> resolve_masked_foil(tokenizer, 30522, "awfulness")
        Traceback (most recent call last):
        ...
        ValueError: contrast 'awfulness' is 2 tokens; a masked-LM foil must be a single token (or its id)
    """
    if isinstance(foil, (list, tuple)) and len(foil) == 1 and isinstance(foil[0], str):
        foil = foil[0]  # one foil per target: a masked LM has one target
    elif isinstance(foil, (list, tuple)) and all(isinstance(v, str) for v in foil):
        raise ValueError(
            f"contrast lists {len(foil)} foil tokens for 1 target; a masked LM explains one token, so pass "
            "one foil token (its text or id)"
        )
    if isinstance(foil, str):
        if foil == "":
            raise ValueError("contrast is an empty string; pass the foil token (such as 'bad') or its id")
        ids = _tokenize(tokenizer, foil)
        if len(ids) != 1:
            raise ValueError(
                f"contrast {foil!r} is {len(ids)} tokens; a masked-LM foil must be a single token (or its id)"
            )
    elif isinstance(foil, (int, np.integer)) and not isinstance(foil, bool):
        ids = [int(foil)]
    elif _is_ids(foil) and len(_as_list(foil)) == 1:
        ids = [int(_as_list(foil)[0])]
    else:
        raise TypeError(f"a masked-LM contrast is one foil token (its text or id); got {foil!r}")
    chosen = _check_ids(ids, vocab, "contrast")
    return Contrast(
        Targets([tokenizer.convert_ids_to_tokens(int(chosen[0]))], ids=chosen),
        alignment=np.zeros(1, dtype=np.int64),
        text=tokenizer.decode(chosen.tolist()),
    )
