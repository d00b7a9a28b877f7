"""What is being explained: inputs, their targets, and batched scoring of rows built from them.

Every attribution method turns user inputs into :class:`ExplainedInput` objects (an encoding plus the targets to
explain), then evaluates "rows" (modified copies of the input embeddings) through :func:`evaluate_rows`, which packs
rows of equal length into forward passes capped by ``max_batch_tokens``.

Example:
    >>> problems = prepare_inputs(adapter, ["Not bad."], target=None)
    >>> problems[0].target_labels, problems[0].target_probs.round(3), problems[0].length
    (['positive'], array([0.568]), 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from interp_widgets._inputs import input_items, is_conversation
from interp_widgets.adapter import TASK_CAUSAL_LM, TASK_CLASSIFICATION, TASK_MASKED_LM, TASK_SEQ2SEQ_LM, ModelAdapter
from interp_widgets.attribution.contrast import (
    check_contrast_task,
    foils_per_input,
    resolve_lm_foils,
    resolve_masked_foil,
)
from interp_widgets.text_units import Encoding, encode
from interp_widgets.validation import check_choice

SCORE_KINDS = ("logit", "probability", "log_probability")


@dataclass
class ExplainedInput:
    """One input and the targets explained on it.

    ``target_ids`` are class ids (classification) or vocabulary ids (language models); ``target_positions`` the
    sequence position whose logits score each target (``-1`` for classification); ``visible`` how many leading
    source tokens each target can see (later sources get NaN scores). With a contrast, ``foil_ids`` holds the foil
    of each target and every score is ``score(target) − score(foil)`` (see :mod:`interp_widgets.attribution.contrast`).
    """

    encoding: Encoding
    target_ids: np.ndarray
    target_labels: list[str]
    target_positions: np.ndarray
    target_probs: np.ndarray
    visible: np.ndarray
    generated_mask: np.ndarray | None = None
    true_label: str | None = None
    foil_ids: np.ndarray | None = None
    foil_labels: list[str] | None = None
    foil_probs: np.ndarray | None = None
    foil_alignment: np.ndarray | None = None
    contrast: str | None = None
    source_length: int | None = None

    @property
    def source_mask(self) -> np.ndarray | None:
        """Encoder–decoder inputs: True for the source (encoder) tokens at the start of the joined token axis."""
        if self.source_length is None:
            return None
        return np.arange(self.length) < self.source_length

    @property
    def length(self) -> int:
        return len(self.encoding)

    @property
    def n_targets(self) -> int:
        return len(self.target_ids)


def _scores_from_logits(
    logits: torch.Tensor, target_ids: torch.Tensor, kind: str, foil_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Float32 scores ``(rows, K)`` of targets ``target_ids`` ``(rows, K)``: the logit, probability or log-probability.

    ``logits`` are ``(rows, K, vocab)`` (a language model's logits at each target's position, see
    :meth:`~interp_widgets.adapter.ModelAdapter.forward_embeds`) or ``(rows, classes)`` (a classifier's).

    With ``foil_ids`` ``(rows, K)`` the score is the difference ``score(target) − score(foil)`` from the same logits.
    For log probabilities that difference is the logit difference exactly (the log-normaliser cancels), so it is
    computed from the logits, without a softmax over the vocabulary.
    """
    logits = logits.float()
    if logits.dim() == 2:
        logits = logits[:, None, :]
    index = target_ids.to(logits.device).clamp(min=0)
    if foil_ids is not None:
        foil = foil_ids.to(logits.device).clamp(min=0)
        if kind == "probability":
            logits = torch.softmax(logits, dim=-1)
        logits = logits.expand(-1, index.shape[1], -1)
        return logits.gather(-1, index[..., None])[..., 0] - logits.gather(-1, foil[..., None])[..., 0]
    if kind == "probability":
        logits = torch.softmax(logits, dim=-1)
    elif kind == "log_probability":
        logits = torch.log_softmax(logits, dim=-1)
    return logits.expand(-1, index.shape[1], -1).gather(-1, index[..., None])[..., 0]


def check_score_kind(kind: str) -> str:
    check_choice("score", kind, SCORE_KINDS)
    return kind


def prepare_inputs(
    adapter: ModelAdapter,
    inputs: str | Sequence[str],
    *,
    target=None,
    continuation: str | Sequence[int] | None = None,
    max_new_tokens: int = 20,
    do_sample: bool = False,
    seed: int = 0,
    mask_position: int | None = None,
    true_labels: Sequence[str] | None = None,
    contrast=None,
    contrast_alignment: Sequence[tuple[int, int]] | None = None,
) -> list[ExplainedInput]:
    """Tokenize inputs and resolve what to explain on each, according to the model's task.

    - classifier: ``target`` is a class index, a label name, a list of them, or ``None`` (the predicted class);
    - causal LM: the model's own greedy (or sampled, ``do_sample``) continuation of ``max_new_tokens`` tokens, or a
      forced ``continuation`` (text or token ids); every continuation token is a target;
    - masked LM: ``target`` is the token (string or id) scored at ``mask_position`` (default: the first mask token),
      or ``None`` for the predicted token;
    - encoder–decoder (sequence-to-sequence) LM: the input is the source; the target is the model's own greedy (or
      sampled) output of at most ``max_new_tokens`` tokens, or a forced ``continuation``: a text, tokenized as a
      target (``tokenizer(text_target=...)``, so with the end-of-sequence token it appends, as Hugging Face labels),
      or token ids. The explained sequence is the source tokens, then the decoder's start token and the target
      tokens, on one axis (``source_length`` source tokens first).

    An input may be a chat conversation (a list of ``{"role", "content"}`` messages), rendered once by the
    tokenizer's chat template. A causal LM then explains the assistant reply: the last message when it is the
    assistant's (forced), else a ``continuation`` (forced) or the reply it generates after the template's
    generation prompt; ``max_new_tokens=0`` turns generation off, so the conversation must end with the reply.

    ``contrast`` adds a foil to every target (causal and masked LMs; see :mod:`interp_widgets.attribution.contrast`
    for the forms it takes and the alignment of a foil continuation of another length, which
    ``contrast_alignment`` overrides).

    Example:
        >>> [p.target_labels for p in prepare_inputs(adapter, ["Great food.", "Slow service."], target="negative")]
        [['negative'], ['negative']]
        >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
        >>> generated = prepare_inputs(lm_adapter, "The room was", max_new_tokens=3)[0]
        >>> generated.n_targets, generated.target_positions.tolist(), generated.generated_mask.tolist()
        (3, [2, 3, 4], [False, False, False, True, True, True])
        >>> forced = prepare_inputs(lm_adapter, "The room was", continuation=" clean")[0]
        >>> forced.encoding.tokens, forced.target_labels
        (['The', 'room', 'was', ' cle', 'an'], ["' cle'@3", "'an'@4"])
        >>> masked = prepare_inputs(ModelAdapter(masked_lm, tokenizer), "The food was [MASK].", target="good")[0]
        >>> masked.target_labels, masked.target_positions.tolist()
        (['good'], [4])
        >>> chat = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]
        >>> reply = prepare_inputs(ModelAdapter(chat_lm, chat_tokenizer), [chat])[0]  # the last reply is forced
        >>> reply.target_labels, reply.encoding.turn_roles
        (["'H'@39", "'e'@40", "'ll'@41", "'o'@42", "'.'@43"], ['system', 'user', 'assistant'])
        >>> foiled = prepare_inputs(lm_adapter, "The room was", continuation=" clean", contrast=" cold")[0]
        >>> foiled.target_labels, foiled.foil_labels, foiled.foil_alignment.tolist()
        (["' cle'@3", "'an'@4"], [' co', 'ld'], [0, 1])
        >>> longer = prepare_inputs(lm_adapter, "The room was", continuation=" clean", contrast=" dirty")[0]
        >>> longer.foil_labels, longer.foil_alignment.tolist()  # ' d', 'ir', 't', 'y': right-aligned
        (['t', 'y'], [2, 3])
    """
    check_contrast_task(adapter.task, contrast)
    if contrast is None and contrast_alignment is not None:
        raise ValueError("contrast_alignment aligns a foil with the targets; pass the foil too (contrast=' text')")
    items, single = input_items(inputs)
    chat = [is_conversation(item) for item in items]
    if adapter.task == TASK_CAUSAL_LM and any(chat):
        encodings = [
            None if is_chat else _encode_at(adapter, item, i) for i, (item, is_chat) in enumerate(zip(items, chat))
        ]
    else:
        encodings = adapter.encode_many(items)
    foils = foils_per_input(contrast, len(encodings), single=single)
    if true_labels is not None and len(true_labels) != len(encodings):
        raise ValueError(f"{len(true_labels)} true labels for {len(encodings)} inputs")
    if adapter.task == TASK_CLASSIFICATION:
        if continuation is not None:
            raise ValueError("continuation applies to causal language models; this model is a sequence classifier.")
        problems = _classification_inputs(adapter, encodings, target)
    elif adapter.task == TASK_CAUSAL_LM:
        if target is not None:
            raise ValueError(
                "a causal LM explains its continuation; pass continuation='text' (forced) or nothing (generated), "
                "not target."
            )
        problems = [
            _chat_reply_input(adapter, item, i, continuation, max_new_tokens, do_sample, seed)
            if enc is None
            else _generation_input(adapter, enc, continuation, max_new_tokens, do_sample, seed)
            for i, (item, enc) in enumerate(zip(items, encodings))
        ]
    elif adapter.task == TASK_MASKED_LM:
        problems = [_masked_input(adapter, enc, target, mask_position) for enc in encodings]
    elif adapter.task == TASK_SEQ2SEQ_LM:
        if target is not None or mask_position is not None:
            option = "target" if target is not None else "mask_position"
            raise ValueError(
                f"{option}= applies to classifiers and masked LMs; this model is an encoder–decoder (seq2seq-lm), "
                "which explains its target sequence: pass continuation='target text' (forced) or nothing (generated)."
            )
        problems = [_seq2seq_input(adapter, enc, continuation, max_new_tokens, do_sample, seed) for enc in encodings]
    else:  # pragma: no cover - detect_task guards this
        raise ValueError(f"unsupported task {adapter.task}")
    if true_labels is not None:
        for problem, label in zip(problems, true_labels):
            problem.true_label = str(label)
    if contrast is not None:
        _add_foils(adapter, problems, foils, contrast_alignment, single=single)
    return problems


def _add_foils(adapter: ModelAdapter, problems: list[ExplainedInput], foils: list, alignment, *, single: bool) -> None:
    """Resolve the foil of every target (one forward pass per input gives the foils' probabilities)."""
    seq2seq = adapter.task == TASK_SEQ2SEQ_LM
    logits = _forward_ids(
        adapter,
        [p.encoding.input_ids for p in problems],
        [p.target_positions for p in problems] if seq2seq else None,
        splits=[p.source_length for p in problems] if seq2seq else None,
    )
    for item, (problem, foil, lg) in enumerate(zip(problems, foils, logits)):
        try:
            if adapter.task == TASK_MASKED_LM:
                found = resolve_masked_foil(adapter.tokenizer, lg.shape[-1], foil)
            elif seq2seq:
                if isinstance(foil, str):  # tokenized as a target, like the forced continuation
                    foil = _target_ids(adapter, foil, lg.shape[-1], what="contrast")
                start = np.asarray([adapter.decoder_start_token_id], dtype=np.int64)
                found = resolve_lm_foils(adapter.tokenizer, lg.shape[-1], foil, start, problem.n_targets, alignment)
            else:
                prompt = problem.encoding.input_ids[~problem.generated_mask]
                found = resolve_lm_foils(adapter.tokenizer, lg.shape[-1], foil, prompt, problem.n_targets, alignment)
        except (ValueError, TypeError) as err:
            if single:
                raise
            raise type(err)(f"input {item}: {err}") from None
        at = lg if seq2seq else lg[torch.as_tensor(problem.target_positions)] if lg.dim() == 2 else lg[None]
        probs = torch.softmax(at.float(), dim=-1)[torch.arange(problem.n_targets), torch.as_tensor(found.ids)]
        problem.foil_ids = found.ids
        problem.foil_labels = found.labels
        problem.foil_probs = probs.cpu().numpy().astype(np.float64)
        problem.foil_alignment = found.alignment
        problem.contrast = found.text


@torch.inference_mode()
def _forward_ids(
    adapter: ModelAdapter,
    ids: Sequence[np.ndarray],
    positions: Sequence[np.ndarray] | None = None,
    *,
    splits: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """Logits of each id sequence (batched, no gradient): ``(classes,)`` for classifiers; for language models
    ``(len(positions[i]), vocab)`` at the given positions only (every position when ``positions`` is None).
    Encoder–decoder sequences are source + decoder ids split at ``splits[i]``; they need ``positions``."""
    out: list[torch.Tensor | None] = [None] * len(ids)
    if splits is not None:
        groups: dict[tuple[int, int], list[int]] = {}
        for i, x in enumerate(ids):
            groups.setdefault((len(x), int(splits[i])), []).append(i)
        with adapter.evaluation():
            for (length, split), members in groups.items():
                for start in range(0, len(members), adapter.rows_per_batch(length)):
                    group = members[start : start + adapter.rows_per_batch(length)]
                    tensor = torch.as_tensor(np.stack([ids[i] for i in group]), dtype=torch.long)
                    index = torch.as_tensor(np.stack([np.asarray(positions[i], dtype=np.int64) for i in group]))
                    logits = adapter.forward_ids(tensor, positions=index, source_length=split)
                    for row, i in enumerate(group):
                        out[i] = logits[row]
        return out  # type: ignore[return-value]
    if positions is None and adapter.task != TASK_CLASSIFICATION:
        positions = [np.arange(len(x)) for x in ids]
    with adapter.evaluation():
        for batch in adapter.length_buckets([len(x) for x in ids]):
            lengths = {len(ids[i]) for i in batch}
            groups = [batch] if adapter.is_pad_safe() or len(lengths) == 1 else [[i] for i in batch]
            for group in groups:
                width = max(len(ids[i]) for i in group)
                pad = adapter.tokenizer.pad_token_id or 0
                tensor = torch.full((len(group), width), pad, dtype=torch.long)
                mask = torch.zeros((len(group), width), dtype=torch.long)
                for row, i in enumerate(group):
                    tensor[row, : len(ids[i])] = torch.as_tensor(ids[i])
                    mask[row, : len(ids[i])] = 1
                index = None
                if positions is not None:
                    k = max(len(positions[i]) for i in group)
                    index = torch.zeros((len(group), k), dtype=torch.long)
                    for row, i in enumerate(group):
                        index[row, : len(positions[i])] = torch.as_tensor(np.asarray(positions[i], dtype=np.int64))
                logits = adapter.forward_ids(tensor, mask, positions=index)
                for row, i in enumerate(group):
                    out[i] = logits[row, : len(positions[i])] if logits.dim() == 3 else logits[row]
    return out  # type: ignore[return-value]


def _classification_inputs(adapter: ModelAdapter, encodings: list[Encoding], target) -> list[ExplainedInput]:
    logits = _forward_ids(adapter, [e.input_ids for e in encodings])
    labels = adapter.labels
    problems = []
    for enc, lg in zip(encodings, logits):
        probs = torch.softmax(lg.float(), dim=-1).cpu().numpy()
        ids = adapter.resolve_targets(target, lg[None])
        problems.append(
            ExplainedInput(
                encoding=enc,
                target_ids=np.asarray(ids, dtype=np.int64),
                target_labels=[labels[i] for i in ids],
                target_positions=np.full(len(ids), -1, dtype=np.int64),
                target_probs=probs[ids].astype(np.float64),
                visible=np.full(len(ids), len(enc), dtype=np.int64),
            )
        )
    return problems


def _generation_input(adapter, enc: Encoding, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
    prompt_ids = enc.input_ids
    if continuation is None:
        new_ids, probs = adapter.generate(prompt_ids, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
    else:
        if isinstance(continuation, str):
            if not continuation:
                raise ValueError("continuation is empty; pass the text the model should be explained for.")
            new_ids = np.asarray(adapter.tokenizer(continuation, add_special_tokens=False)["input_ids"], dtype=np.int64)
        else:
            new_ids = np.asarray(list(continuation), dtype=np.int64)
        if len(new_ids) == 0:
            raise ValueError("continuation has no tokens")
        adapter.check_length(len(prompt_ids) + len(new_ids), "the prompt plus its continuation")
        full = np.concatenate([prompt_ids, new_ids])
        positions = np.arange(len(prompt_ids) - 1, len(full) - 1)
        logits = _forward_ids(adapter, [full], [positions])[0]  # only the positions that predict the continuation
        probs = torch.softmax(logits.float(), dim=-1)[torch.arange(len(new_ids)), torch.as_tensor(new_ids)]
        probs = probs.cpu().numpy().astype(np.float64)
    return _extend_encoding(adapter, enc, new_ids, probs)


def _encode_at(adapter, text, index: int) -> Encoding:
    try:
        return adapter.encode(text)
    except ValueError as err:
        raise ValueError(f"text {index}: {err}") from None


def _chat_reply_input(adapter, messages, index: int, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
    """The assistant reply of a conversation for a causal LM: its last assistant message or ``continuation`` text
    (forced), or what the model generates after the template's generation prompt."""
    try:
        last = messages[-1].get("role")
        if last == "assistant":
            if continuation is not None:
                raise ValueError(
                    "the conversation already ends with the assistant reply to explain (forced); drop "
                    "continuation=, or drop the last message to explain the continuation instead"
                )
            return _forced_reply(adapter, adapter.encode(messages, continue_final_message=True))
        if isinstance(continuation, str):
            if not continuation.strip():
                raise ValueError("continuation is empty; pass the assistant reply the model should be explained for.")
            reply = [*messages, {"role": "assistant", "content": continuation}]
            return _forced_reply(adapter, adapter.encode(reply, continue_final_message=True))
        if continuation is None and not max_new_tokens:
            raise ValueError(
                f"the conversation ends with a {last!r} message, so there is no assistant reply to explain, and "
                "generation is off (max_new_tokens=0). End the messages with the reply to explain, "
                '{"role": "assistant", "content": "..."}, pass continuation="...", or set max_new_tokens >= 1 to '
                "explain the reply the model generates."
            )
        prompt = adapter.encode(messages, add_generation_prompt=True)
    except (TypeError, ValueError) as err:
        if type(err) not in (TypeError, ValueError):
            raise
        raise type(err)(f"text {index}: {err}") from err
    return _generation_input(adapter, prompt, continuation, max_new_tokens, do_sample, seed)


def _forced_reply(adapter, enc: Encoding) -> ExplainedInput:
    """Targets are the tokens of the last turn (the reply, which ends the text); each is scored from the position
    before it, in one forward pass over the whole conversation."""
    reply = np.flatnonzero(enc.turn_ids == len(enc.turn_roles) - 1)
    start = int(reply[0])
    new_ids = enc.input_ids[start:]
    logits = _forward_ids(adapter, [enc.input_ids])[0]
    positions = np.arange(start, len(enc))
    probs = torch.softmax(logits.float(), dim=-1)[torch.as_tensor(positions - 1), torch.as_tensor(new_ids)]
    return ExplainedInput(
        encoding=enc,
        target_ids=new_ids.astype(np.int64),
        target_labels=[f"{t!r}@{p}" for t, p in zip(enc.tokens[start:], positions)],
        target_positions=positions - 1,
        target_probs=probs.cpu().numpy().astype(np.float64),
        visible=positions,
        generated_mask=np.arange(len(enc)) >= start,
    )


def _extend_encoding(adapter, enc: Encoding, new_ids: np.ndarray, probs: np.ndarray) -> ExplainedInput:
    """Append generated tokens to a prompt encoding, with character offsets into prompt + decoded continuation."""
    tokenizer = adapter.tokenizer
    prompt_len = len(enc.input_ids)
    decoded = [tokenizer.decode(new_ids[: j + 1].tolist()) for j in range(len(new_ids))]
    text = enc.text
    base = len(text)
    tokens, offsets = list(enc.tokens), [tuple(o) for o in enc.offsets]
    previous = ""
    for piece in decoded:
        start, end = base + len(previous), base + len(piece)
        tokens.append(piece[len(previous) :])
        offsets.append((start, max(start, end)))
        previous = piece
    full_text = text + (decoded[-1] if decoded else "")
    n_new = len(new_ids)
    next_word = int(enc.word_ids.max(initial=-1)) + 1
    next_sentence = int(enc.sentence_ids.max(initial=-1)) + 1
    special = np.concatenate([enc.special_mask, np.isin(new_ids, tokenizer.all_special_ids)])
    new_words = np.arange(next_word, next_word + n_new)
    # a conversation's reply is a new assistant turn; a plain text's continuation stays in its one turn
    reply_turn = len(enc.turn_roles) if enc.turn_roles else 0
    encoding = Encoding(
        text=full_text,
        input_ids=np.concatenate([enc.input_ids, new_ids]),
        tokens=tokens,
        offsets=np.asarray(offsets, dtype=np.int64),
        special_mask=special,
        word_ids=np.concatenate([enc.word_ids, np.where(special[prompt_len:], -1, new_words)]),
        sentence_ids=np.concatenate([enc.sentence_ids, np.where(special[prompt_len:], -1, next_sentence)]),
        words=enc.words + tokens[prompt_len:],
        sentences=enc.sentences + [full_text[base:].strip()],
        turn_ids=np.concatenate([enc.turn_ids, np.where(special[prompt_len:], -1, reply_turn)]),
        turn_roles=[*enc.turn_roles, "assistant"] if enc.turn_roles else [],
        messages=enc.messages,
    )
    positions = np.arange(prompt_len, prompt_len + n_new)
    return ExplainedInput(
        encoding=encoding,
        target_ids=new_ids.astype(np.int64),
        target_labels=[f"{t!r}@{p}" for t, p in zip(tokens[prompt_len:], positions)],
        target_positions=positions - 1,
        target_probs=np.asarray(probs, dtype=np.float64),
        visible=positions,
        generated_mask=np.concatenate([np.zeros(prompt_len, bool), np.ones(n_new, bool)]),
    )


def _target_ids(adapter, continuation, vocab: int, *, what: str = "continuation") -> np.ndarray:
    """The token ids of an encoder–decoder target: a text tokenized as a target (with the end-of-sequence token the
    tokenizer appends to labels), or token ids, checked against the vocabulary."""
    tokenizer = adapter.tokenizer
    if isinstance(continuation, str):
        if not continuation.strip():
            raise ValueError(
                f"{what} is empty; pass the target text the model should be explained for (such as "
                "'Das Zimmer war sauber.') or its token ids."
            )
        try:
            ids = tokenizer(text_target=continuation)["input_ids"]
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"the tokenizer cannot build {what} {continuation!r} as a target ({err}); pass the "
                "target's token ids instead."
            ) from None
        if all(i in tokenizer.all_special_ids for i in ids):
            raise ValueError(
                f"{what} {continuation!r} tokenizes as a target to special tokens only ({ids}); pass a "
                "target text with content, or its token ids."
            )
        return np.asarray(ids, dtype=np.int64)
    if isinstance(continuation, (bytes, dict)) or not hasattr(continuation, "__iter__"):
        raise TypeError(f"{what} must be a target text or a sequence of token ids; got {type(continuation).__name__}")
    items = continuation.tolist() if hasattr(continuation, "tolist") else list(continuation)
    if items and isinstance(items[0], list):
        raise ValueError(
            f"{what} is nested ({len(items)} sequences); an encoder–decoder target is one sequence of "
            "token ids (for several sources, call once per target)."
        )
    bad = [v for v in items if not isinstance(v, (int, np.integer)) or isinstance(v, bool)]
    if bad:
        raise TypeError(f"{what} has {bad[0]!r}, not a token id; pass the target as text or a list of ints.")
    if not items:
        raise ValueError(f"{what} has no tokens; pass the target text or its token ids.")
    outside = [int(v) for v in items if not 0 <= int(v) < vocab]
    if outside:
        raise ValueError(f"{what} has token id {outside[0]} outside the vocabulary of {vocab}.")
    return np.asarray(items, dtype=np.int64)


def _seq2seq_input(adapter, enc: Encoding, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
    """Source ``enc`` and its generated or forced target on one axis: source tokens, decoder start, target."""
    tokenizer = adapter.tokenizer
    source_ids = enc.input_ids
    vocab = (
        int(adapter.model.get_output_embeddings().weight.shape[0])
        if adapter.model.get_output_embeddings() is not None
        else int(adapter.embedding.weight.shape[0])
    )
    start = adapter.decoder_start_token_id
    if continuation is None:
        new_ids, probs = adapter.generate(source_ids, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
    else:
        new_ids = _target_ids(adapter, continuation, vocab)
        probs = None
    adapter.check_length(len(new_ids) + 1, "the target plus the decoder's start token")
    n_source, n_new = len(source_ids), len(new_ids)
    ids = np.concatenate([source_ids, [start], new_ids]).astype(np.int64)
    positions = np.arange(n_source, n_source + n_new)  # decoder positions 0..n-1 predict the target tokens
    if probs is None:
        logits = _forward_ids(adapter, [ids], [positions], splits=[n_source])[0]
        probs = torch.softmax(logits.float(), dim=-1)[torch.arange(n_new), torch.as_tensor(new_ids)]
        probs = probs.cpu().numpy().astype(np.float64)
    # the target side as text: its decoded pieces; words as the tokenizer splits the decoded target text
    specials = set(tokenizer.all_special_ids)
    text = enc.text + "\n"
    base = len(text)
    content = [int(i) for i in new_ids if int(i) not in specials]
    target_text = tokenizer.decode(content) if content else ""
    char_word: dict[int, int] = {}
    if target_text.strip():
        words_of = encode(tokenizer, target_text, add_special_tokens=False)
        for (a, b), w in zip(words_of.offsets, words_of.word_ids):
            for c in range(int(a), int(b)):
                char_word.setdefault(c, int(w))
    tokens, offsets, word_ids = list(enc.tokens), [tuple(o) for o in enc.offsets], list(enc.word_ids)
    tokens.append(tokenizer.convert_ids_to_tokens(start))
    offsets.append((base, base))
    word_ids.append(-1)
    next_word = int(enc.word_ids.max(initial=-1)) + 1
    previous, kept, words, new_words, last_word = "", [], list(enc.words), [], None
    for token_id in new_ids:
        token_id = int(token_id)
        if token_id in specials:
            tokens.append(tokenizer.convert_ids_to_tokens(token_id))
            offsets.append((base + len(previous), base + len(previous)))
            word_ids.append(-1)
            continue
        kept.append(token_id)
        piece = tokenizer.decode(kept)
        chunk = piece[len(previous) :]
        tokens.append(chunk)
        offsets.append((base + len(previous), base + max(len(previous), len(piece))))
        first = len(previous) + (len(chunk) - len(chunk.lstrip()))
        word = char_word.get(first, last_word if new_words else None)
        if not new_words or word != last_word:
            new_words.append(chunk)
            next_word += 1
        else:
            new_words[-1] += chunk
        last_word = word
        word_ids.append(next_word - 1)
        previous = piece
    words += [w.strip() for w in new_words]
    special = np.concatenate([enc.special_mask, [True], np.isin(new_ids, list(specials))])
    next_sentence = int(enc.sentence_ids.max(initial=-1)) + 1
    sentence_ids = np.concatenate([enc.sentence_ids, np.where(special[n_source:], -1, next_sentence)])
    encoding = Encoding(
        text=text + target_text,
        input_ids=ids,
        tokens=tokens,
        offsets=np.asarray(offsets, dtype=np.int64),
        special_mask=special,
        word_ids=np.asarray(word_ids, dtype=np.int64),
        sentence_ids=sentence_ids,
        words=words,
        sentences=enc.sentences + [target_text.strip()],
    )
    at = positions + 1  # where each target token sits on the joined axis
    return ExplainedInput(
        encoding=encoding,
        target_ids=new_ids.astype(np.int64),
        target_labels=[f"{tokens[p]!r}@{p}" for p in at],
        target_positions=positions,
        target_probs=np.asarray(probs, dtype=np.float64),
        visible=at,
        generated_mask=np.arange(len(ids)) > n_source,
        source_length=n_source,
    )


def _masked_input(adapter, enc: Encoding, target, mask_position) -> ExplainedInput:
    tokenizer = adapter.tokenizer
    if mask_position is None:
        hits = np.flatnonzero(enc.input_ids == tokenizer.mask_token_id)
        if len(hits) == 0:
            raise ValueError(f"no {tokenizer.mask_token} token in the text; add one or pass mask_position=.")
        mask_position = int(hits[0])
    if not 0 <= mask_position < len(enc):
        raise ValueError(f"mask_position {mask_position} outside the {len(enc)} tokens of the input")
    logits = _forward_ids(adapter, [enc.input_ids], [np.array([mask_position])])[0][0]
    probs = torch.softmax(logits.float(), dim=-1)
    if target is None:
        token_id = int(logits.argmax())
    elif isinstance(target, str):
        ids = tokenizer(target, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"target {target!r} is {len(ids)} tokens; a masked-LM target must be a single token.")
        token_id = ids[0]
    else:
        token_id = int(target)
        if not 0 <= token_id < logits.shape[-1]:
            raise ValueError(f"token id {token_id} outside the vocabulary of {logits.shape[-1]}")
    return ExplainedInput(
        encoding=enc,
        target_ids=np.asarray([token_id]),
        target_labels=[tokenizer.convert_ids_to_tokens(token_id)],
        target_positions=np.asarray([mask_position]),
        target_probs=np.asarray([float(probs[token_id])]),
        visible=np.asarray([len(enc)]),
    )


# ---------------------------------------------------------------------------------------------- batched evaluation
@dataclass
class RowChunk:
    """Rows ``start:stop`` of input ``item`` evaluated in one forward pass."""

    item: int
    start: int
    stop: int


def plan_chunks(
    adapter: ModelAdapter, lengths: Sequence[int], n_rows: Sequence[int], splits: Sequence[int | None] | None = None
) -> Iterator[list[RowChunk]]:
    """Pack the rows of every input into forward passes that hold one sequence length each.

    Rows of inputs with equal length (and, for encoder–decoder inputs, equal source length ``splits``) share passes
    of at most ``max_batch_tokens`` tokens; rows of different lengths never do, so no compute is spent on padding and no attention mask is needed. The rows of one length are spread
    evenly over the fewest passes that fit (``34`` rows with room for ``32`` run as ``17 + 17``, not ``32 + 2``).

    Example:
        >>> [[(c.item, c.start, c.stop) for c in b] for b in plan_chunks(adapter, [5, 6, 5], [3, 3, 3])]
        [[(0, 0, 3), (2, 0, 3)], [(1, 0, 3)]]
        >>> small = ModelAdapter(model, tokenizer, max_batch_tokens=32 * 5)  # 32 rows of 5 tokens per pass
        >>> [[(c.item, c.start, c.stop) for c in b] for b in plan_chunks(small, [5], [34])]
        [[(0, 0, 17)], [(0, 17, 34)]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: dict[tuple[int, int], list[int]] = {}
    for i in order:
        if n_rows[i] > 0:  # encoder–decoder rows share a pass only with rows split at the same source length
            split = -1 if splits is None or splits[i] is None else int(splits[i])
            groups.setdefault((int(lengths[i]), split), []).append(i)
    for (length, _), items in groups.items():
        total = sum(n_rows[i] for i in items)
        n_passes = -(-total // adapter.rows_per_batch(length))
        per_pass = -(-total // n_passes)
        batch: list[RowChunk] = []
        used = 0
        for i in items:
            start = 0
            while start < n_rows[i]:
                take = min(per_pass - used, n_rows[i] - start)
                batch.append(RowChunk(i, start, start + take))
                used += take
                start += take
                if used == per_pass:
                    yield batch
                    batch, used = [], 0
        if batch:
            yield batch


def _row_foils(problems, items: np.ndarray, chosen: np.ndarray) -> torch.Tensor | None:
    """The foil id of every row and target slot of a pass ``(rows, K)``, or None when no input of the pass has a
    contrast."""
    has = [problems[i].foil_ids is not None for i in np.unique(items)]
    if not any(has):
        return None
    if not all(has):
        raise ValueError("a pass mixes inputs with and without a contrast; give every input a foil or none")
    return torch.as_tensor(np.stack([problems[i].foil_ids[row] for i, row in zip(items, chosen)]))


def evaluate_rows(
    adapter: ModelAdapter,
    problems: Sequence[ExplainedInput],
    n_rows: Sequence[int],
    build_rows: Callable[[int, int, int], tuple[torch.Tensor, np.ndarray]],
    consume: Callable[[RowChunk, torch.Tensor, torch.Tensor | None], None],
    *,
    score: str,
    with_grad: bool,
    progress=None,
) -> None:
    """Evaluate rows of modified embeddings for many inputs in few large batches.

    ``build_rows(item, start, stop)`` returns embeddings ``(rows, T, D)`` and the targets (indices into
    ``problems[item].target_ids``) of each row: either one target per row, shape ``(rows,)``, or several,
    shape ``(rows, K)`` with ``-1`` for an unused slot. ``consume(chunk, scores, grads)`` receives the float32 row
    scores ``(rows,)`` or ``(rows, K)`` (NaN in unused slots) and, with ``with_grad``, the gradient of each score with
    respect to its row's embeddings, ``(rows, T, D)`` or ``(rows, K, T, D)`` (zero in unused slots); both stay on
    the model's device. Passes hold rows of one length (see :func:`plan_chunks`). A row's score is
    ``score(target) − score(foil)`` when its input has a contrast (``foil_ids``).

    Only the logits that are scored are computed (each row's target positions, see
    :meth:`~interp_widgets.adapter.ModelAdapter.forward_embeds`). A row with ``K`` targets runs forward once and
    its ``K`` gradients come from one backward pass batched over the targets (``torch.autograd.grad`` with
    ``is_grads_batched``), so the targets of one text (the tokens of a generation, several classes) share every
    forward pass. The passes are counted in the adapter's :meth:`~interp_widgets.adapter.ModelAdapter.counting`.

    Example:
        >>> problems = prepare_inputs(adapter, ["Not bad."], target="positive")
        >>> x = adapter.embed(torch.as_tensor(problems[0].encoding.input_ids)[None])[0].detach()
        >>> alphas = torch.linspace(0, 1, 5)  # five rows: the input embeddings scaled from 0 to 1
        >>> def build(item, start, stop):
        ...     return alphas[start:stop, None, None] * x, np.zeros(stop - start, dtype=np.int64)
        >>> seen = []
        >>> def consume(chunk, scores, grads):
        ...     seen.append((chunk.item, np.round(scores.double().numpy(), 3).tolist(), tuple(grads.shape)))
        >>> evaluate_rows(adapter, problems, [5], build, consume, score="probability", with_grad=True)
        >>> seen
        [(0, [0.628, 0.626, 0.608, 0.585, 0.568], (5, 5, 32))]

        Several targets per row: one forward pass, one batched backward pass, a gradient per target.

        >>> two = prepare_inputs(adapter, ["Not bad."], target=["negative", "positive"])
        >>> def build_both(item, start, stop):
        ...     return x.expand(stop - start, -1, -1), np.array([[0, 1]] * (stop - start))
        >>> with adapter.counting() as count:
        ...     evaluate_rows(adapter, two, [1], build_both, consume, score="probability", with_grad=True)
        >>> seen[-1], count
        ((0, [[0.149, 0.568]], (1, 2, 5, 32)), PassCount(forward=1, forward_rows=1, backward=1, backward_rows=2))
    """
    splits = [p.source_length for p in problems]
    for batch in plan_chunks(adapter, [p.length for p in problems], n_rows, splits):
        split = {"source_length": splits[batch[0].item]} if splits[batch[0].item] is not None else {}
        pieces = [build_rows(chunk.item, chunk.start, chunk.stop) for chunk in batch]
        x = (pieces[0][0] if len(pieces) == 1 else torch.cat([rows for rows, _ in pieces])).detach()
        single = np.ndim(pieces[0][1]) == 1
        width = max(1 if single else np.shape(t)[1] for _, t in pieces)
        slots = np.full((len(x), width), -1, dtype=np.int64)
        offset = 0
        for _, targets in pieces:
            targets = np.asarray(targets, dtype=np.int64).reshape(len(targets), -1)
            slots[offset : offset + len(targets), : targets.shape[1]] = targets
            offset += len(targets)
        items = np.concatenate([np.full(c.stop - c.start, c.item) for c in batch])
        valid = slots >= 0
        first = np.where(valid.any(1), slots[np.arange(len(slots)), valid.argmax(1)], 0)
        chosen = np.where(valid, slots, first[:, None])  # unused slots score a real target, then are dropped
        target_ids = np.stack([problems[i].target_ids[row] for i, row in zip(items, chosen)])
        positions = np.stack([problems[i].target_positions[row] for i, row in zip(items, chosen)])
        target_ids = torch.as_tensor(target_ids)
        positions = torch.as_tensor(positions).clamp(min=0)
        foil_ids = _row_foils(problems, items, chosen)
        valid_t = torch.as_tensor(valid)
        if with_grad:
            x.requires_grad_(True)
            with torch.enable_grad():
                logits = adapter.forward_embeds(x, positions=positions, **split)
                row_scores = _scores_from_logits(logits, target_ids, score, foil_ids)
                grads = _gradients(adapter, row_scores, x, valid_t.to(row_scores.device))
            row_scores = row_scores.detach()
        else:
            with torch.inference_mode():
                logits = adapter.forward_embeds(x, positions=positions, **split)
                row_scores = _scores_from_logits(logits, target_ids, score, foil_ids)
            grads = None
        row_scores = row_scores.masked_fill(~valid_t.to(row_scores.device), float("nan"))
        if single:
            row_scores = row_scores[:, 0]
            grads = None if grads is None else grads[:, 0]
        offset = 0
        for chunk in batch:
            n = chunk.stop - chunk.start
            consume(chunk, row_scores[offset : offset + n], None if grads is None else grads[offset : offset + n])
            offset += n
        if progress is not None:
            progress.update(offset)


def _gradients(adapter: ModelAdapter, scores: torch.Tensor, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Gradients ``(rows, K, T, D)`` of every valid score ``(rows, K)`` with respect to its row of ``x``.

    One backward pass for one target per row; for several, one backward pass batched over the targets
    (``is_grads_batched``, a vmap over the backward graph), falling back to one pass per target for models whose
    operations vmap cannot batch."""
    rows, width = scores.shape
    if width == 1:
        (grads,) = torch.autograd.grad(scores[valid].sum(), x)
        adapter.count_backward(1, int(valid.sum()))
        return grads[:, None]
    columns = torch.nonzero(valid.any(0)).reshape(-1).tolist()
    eye = torch.eye(width, dtype=scores.dtype, device=scores.device)[columns]  # (used columns, K)
    grad_outputs = eye[:, None, :] * valid[None].to(scores.dtype)  # (used columns, rows, K)
    try:
        (batched,) = torch.autograd.grad(scores, x, grad_outputs=grad_outputs, is_grads_batched=True, retain_graph=True)
        passes = 1
    except RuntimeError:  # an operation without a vmap rule: one backward pass per target column
        batched = torch.stack(
            [torch.autograd.grad(scores, x, grad_outputs=g, retain_graph=True)[0] for g in grad_outputs]
        )
        passes = len(columns)
    adapter.count_backward(passes, int(valid.sum()))
    if len(columns) == width:
        return batched.transpose(0, 1)
    grads = torch.zeros((rows, width, *x.shape[1:]), dtype=batched.dtype, device=batched.device)
    grads[:, columns] = batched.transpose(0, 1)
    return grads
