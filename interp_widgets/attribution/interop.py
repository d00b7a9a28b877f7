"""Show other libraries' explanations in our widgets: Captum tensors and LLM results, Interpreto outputs.

Example:
    >>> from captum.attr import LayerIntegratedGradients
    >>> text = "Not bad at all."
    >>> ids = tokenizer(text, return_tensors="pt").input_ids
    >>> lig = LayerIntegratedGradients(lambda ids: model(input_ids=ids).logits, model.bert.embeddings)
    >>> attributions = lig.attribute(ids, baselines=torch.full_like(ids, tokenizer.pad_token_id), target=2)
    >>> result = from_captum(attributions, tokenizer, text, target_label="positive")
    >>> result  # in a notebook, the token widget
    AttributionResult(method='captum', 7 tokens, targets=[positive])
    >>> result.tokens, result.scores.round(3)
    (['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]'], array([[-0.32 ,  0.07 , -0.087,  0.088,  0.033, -0.008,  0.201]]))
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from interp_widgets.attribution.result import AttributionResult, Generation, MethodRun
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout, encode


def _to_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def _plain_result(
    tokens: Sequence[str],
    scores: np.ndarray,
    *,
    method: str,
    labels: list[str],
    ids: np.ndarray,
    probs: np.ndarray,
    score_meaning: str,
    signed: bool,
    generated: np.ndarray | None = None,
    positions: np.ndarray | None = None,
    granularity: str = "token",
    source_text: str | None = None,
) -> AttributionResult:
    """A result over units given only as strings: found in ``source_text`` when given, else rebuilt into a text.

    Byte-level (``Ġ``) and SentencePiece (``▁``) markers become spaces, WordPiece ``##`` pieces join the previous
    unit, and units without any marker are separated by single spaces (Interpreto words).
    """
    if source_text is None:
        text, pieces, offsets = _rebuild_text(tokens)
    else:
        text, offsets = source_text, _locate(tokens, source_text)
        pieces = [text[a:b] for a, b in offsets]
    n = len(tokens)
    return AttributionResult(
        layout=TokenLayout(
            text=text,
            tokens=pieces,
            offsets=np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
            special_mask=np.zeros(n, bool),
            word_ids=np.arange(n),
            sentence_ids=np.zeros(n, dtype=np.int64),
        ),  # fmt: skip
        scores=scores,
        targets=Targets(labels, ids=ids, probs=probs),
        run=MethodRun(method, {"source": method.split(":")[0]}, score_meaning, signed),
        granularity=granularity,
        generation=None if generated is None else Generation(generated_mask=generated, positions=positions),
    )


def _rebuild_text(tokens: Sequence[str]) -> tuple[str, list[str], list[tuple[int, int]]]:
    spaced = not any(t[:1] in ("Ġ", "▁", " ") or t.startswith("##") for t in tokens)
    offsets, pieces, text = [], [], ""
    for i, token in enumerate(tokens):
        if token.startswith("##"):
            piece, gap = token[2:], ""
        elif token[:1] in ("Ġ", "▁"):
            piece, gap = token[1:], " " if i else ""
        else:
            piece, gap = token, " " if spaced and i else ""
        text += gap
        offsets.append((len(text), len(text) + len(piece)))
        text += piece
        pieces.append(piece)
    return text, pieces, offsets


def _locate(units: Sequence[str], text: str) -> list[tuple[int, int]]:
    """Character spans of ``units`` found in order in ``text`` (case-insensitive; uncased tokenizers lower-case)."""
    lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)  # same length as text
    position, spans = 0, []
    for unit in units:
        needle = unit.strip().lower()
        found = lowered.find(needle, position) if needle else -1
        if found < 0 or lowered[position:found].strip():
            raise ValueError(
                f"unit {unit!r} is not the next part of text after position {position}; pass the exact "
                "text that was explained (or no text to show the units as they are)"
            )
        spans.append((found, found + len(needle)))
        position = found + len(needle)
    return spans


def from_captum(
    attributions,
    tokenizer=None,
    text: str | None = None,
    *,
    target_label: str = "target",
    target_prob: float = float("nan"),
    target_id: int = -1,
    method: str = "captum",
    reduce: str = "sum",
) -> AttributionResult:
    """Build a result from a Captum attribution tensor for one text, or from a Captum ``LLMAttributionResult``.

    A tensor of shape ``(1, T, D)``, ``(T, D)`` or ``(T,)`` must align with ``tokenizer(text)`` (special tokens
    included, as Captum's text tutorials build inputs); ``reduce`` (``sum`` signed, ``norm``) collapses ``D``.
    An ``LLMAttributionResult`` becomes a generation result (targets × prompt-and-generated sources, NaN where a
    generated token cannot see a source). Captum strips the spaces of generated tokens; pass the continuation as
    ``text`` to restore them exactly (otherwise a space is guessed before every word-like token).

    Example:
        >>> scores = torch.tensor([0.0, 0.5, -1.0, 0.1, 0.2, 0.0, 0.0])  # one score per token of tokenizer(text)
        >>> result = from_captum(scores, tokenizer, "Not bad at all.", target_label="positive", method="my_method")
        >>> result.tokens, result.special_mask.tolist()
        (['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]'], [True, False, False, False, False, False, True])
        >>> result.aggregate("word").scores.round(3)
        array([[ 0.5, -1. ,  0.1,  0.2,  0. ]])
        >>> normed = from_captum(torch.ones(1, 7, 32), tokenizer, "Not bad at all.", reduce="norm")
        >>> normed.score_meaning, normed.signed, normed.scores.round(3)
        ('L2 norm (unsigned)', False, array([[5.657, 5.657, 5.657, 5.657, 5.657, 5.657, 5.657]]))
    """
    if hasattr(attributions, "seq_attr") and hasattr(attributions, "input_tokens"):
        return _from_captum_llm(attributions, method=method, continuation=text)
    if tokenizer is None or text is None:
        raise TypeError("from_captum(tensor, tokenizer, text): pass the tokenizer and the text the tensor explains")
    values = _to_numpy(attributions)
    normed = values.ndim >= 2 and reduce == "norm"  # 1-D scores are already reduced: kept as given (signed)
    if values.ndim == 3:
        if values.shape[0] != 1:
            raise ValueError(f"attributions have batch size {values.shape[0]}; pass one input at a time")
        values = values[0]
    if values.ndim == 2:
        if reduce == "sum":
            values = values.sum(-1)
        elif reduce == "norm":
            values = np.linalg.norm(values, axis=-1)
        else:
            raise ValueError(f"unknown reduce {reduce!r}; use 'sum' or 'norm'")
    enc = encode(tokenizer, text)
    if len(enc) != values.shape[-1]:
        raise ValueError(
            f"attributions cover {values.shape[-1]} tokens but tokenizer(text) gives {len(enc)}; "
            "pass the same text (and special tokens) that Captum explained"
        )
    return AttributionResult(
        layout=enc.layout,
        scores=values[None, :],
        targets=Targets([target_label], ids=[target_id], probs=[target_prob]),
        run=MethodRun(
            method,
            {"source": "captum"},
            "L2 norm (unsigned)" if normed else "sum over embedding dimension (signed)",
            signed=not normed,
        ),
    )


def _respace(tokens: list[str], continuation: str | None) -> list[str]:
    """Restore the spaces Captum strips from generated tokens, from the continuation text when given."""
    if any(t[:1] in ("Ġ", "▁", " ") for t in tokens):
        return tokens
    if continuation is None:
        return [("Ġ" + t if t[:1].isalnum() else t) for t in tokens]
    out, position = [], 0
    for token in tokens:
        found = continuation.find(token, position) if token else -1
        if found < 0:
            out.append(token)
            continue
        out.append(("Ġ" if continuation[position:found].strip() == "" and found > position else "") + token)
        position = found + len(token)
    return out


def _from_captum_llm(llm_result, *, method: str, continuation: str | None) -> AttributionResult:
    inputs = list(llm_result.input_tokens)
    outputs = _respace(list(llm_result.output_tokens), continuation)
    n_in, n_out = len(inputs), len(outputs)
    if getattr(llm_result, "token_attr", None) is not None:
        token_attr = _to_numpy(llm_result.token_attr)  # (n_out, n_in)
        scores = np.full((n_out, n_in + n_out), np.nan)
        scores[:, :n_in] = token_attr
        labels = [f"{t!r}@{n_in + j}" for j, t in enumerate(outputs)]
        positions = np.arange(n_in - 1, n_in + n_out - 1)
        ids = np.full(n_out, -1)
        probs = np.full(n_out, np.nan)
    else:
        scores = np.full((1, n_in + n_out), np.nan)
        scores[0, :n_in] = _to_numpy(llm_result.seq_attr)
        labels, positions, ids, probs = ["whole continuation"], np.array([n_in - 1]), np.array([-1]), np.array([np.nan])
    generated = np.concatenate([np.zeros(n_in, bool), np.ones(n_out, bool)])
    return _plain_result(
        inputs + outputs,
        scores,
        method=f"{method}:llm",
        labels=labels,
        ids=ids,
        probs=probs,
        score_meaning="Captum LLM attribution (signed)",
        signed=True,
        generated=generated,
        positions=positions,
    )


def from_interpreto(
    output, *, labels: Sequence[str] | None = None, text: str | None = None, method: str | None = None
) -> AttributionResult:
    """Build a result from an Interpreto ``AttributionOutput`` (classification or generation).

    Interpreto gradient scores are unsigned magnitudes (``abs`` then mean over the hidden dimension), so results from
    its gradient methods are flagged unsigned; its generation matrices keep their NaN upper triangle. Target ids are
    kept when there is one per row (else -1: Interpreto gives token ids but word rows at word granularity). ``labels``
    names the classes (Interpreto leaves ``classes`` empty). Interpreto's ``elements`` are decoded from token ids
    (lower-cased by uncased tokenizers); pass the explained ``text`` to show its original spelling and spacing (each
    element is found in it, in order, ignoring case). ``method`` names the Interpreto method (the output does not).

    Example:
        >>> import copy, interpreto
        >>> explainer = interpreto.Occlusion(copy.deepcopy(model), tokenizer)  # Interpreto may edit the model's config
        >>> outputs = explainer("Great film")
        >>> outputs[0].elements
        ['great', 'film']
        >>> result = from_interpreto(outputs[0], labels=model.config.id2label, text="Great film", method="Occlusion")
        >>> result
        AttributionResult(method='interpreto:Occlusion', 2 words, targets=[positive])
        >>> result.tokens, result.scores.round(3), result.signed
        (['Great', 'film'], array([[-0.333, -0.7  ]]), True)
    """
    for name in ("attributions", "elements"):
        if not hasattr(output, name):
            raise TypeError(f"expected an Interpreto AttributionOutput (with .{name}), got {type(output).__name__}")
    scores = np.atleast_2d(_to_numpy(output.attributions))
    elements = [str(e) for e in output.elements]
    if scores.shape[1] != len(elements):
        raise ValueError(f"attributions have {scores.shape[1]} columns for {len(elements)} elements")
    task = str(getattr(getattr(output, "model_task", None), "name", getattr(output, "model_task", "")) or "").upper()
    targets = np.asarray(
        _to_numpy(output.targets) if getattr(output, "targets", None) is not None else np.arange(len(scores)),
        dtype=np.int64,
    ).reshape(-1)
    if len(targets) != len(scores):  # e.g. generation at word granularity: target token ids, one row per word
        targets = np.full(len(scores), -1, dtype=np.int64)
    method = f"interpreto:{method or 'attribution'}"
    finite = scores[np.isfinite(scores)]
    signed = bool((finite < 0).any())
    meaning = "Interpreto score" + (" (signed)" if signed else " (unsigned magnitude)")
    granularity = str(getattr(getattr(output, "granularity", None), "name", "token")).lower()
    granularity = {"all_tokens": "token", "token": "token", "word": "word"}.get(granularity, "sentence")
    if "GENERATION" in task:
        n_out = len(scores)
        n_in = len(elements) - n_out
        generated = np.concatenate([np.zeros(n_in, bool), np.ones(n_out, bool)])
        names = [f"{elements[n_in + j]!r}@{n_in + j}" for j in range(n_out)]
        return _plain_result(
            elements,
            scores,
            method=method,
            labels=names,
            ids=targets,
            probs=np.full(n_out, np.nan),
            score_meaning=meaning,
            signed=signed,
            generated=generated,
            positions=np.arange(n_in - 1, n_in + n_out - 1),
            granularity=granularity,
            source_text=text,
        )
    names = [
        f"target {i}" if t < 0 else labels[int(t)] if labels is not None else f"class {int(t)}"
        for i, t in enumerate(targets)
    ]
    return _plain_result(
        elements,
        scores,
        method=method,
        labels=names,
        ids=targets,
        probs=np.full(len(scores), np.nan),
        score_meaning=meaning,
        signed=signed,
        granularity=granularity,
        source_text=text,
    )
