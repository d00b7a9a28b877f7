"""The logit lens (and the tuned lens when a :class:`~interp_widgets.lens.TunedLens` is given) over a text or a
generation.

The residual stream is hooked at each block's output (``layer:i``, :mod:`interp_widgets.layers`), and optionally
after attention and before the MLP (``layer:i.resid_mid``), then decoded by the model's own final norm and head
(:class:`~interp_widgets.lens.LensHead`). For every layer and position the result keeps the top-k tokens with their
probabilities, the probability and rank of each target (the actual next token, or the token itself for a masked LM,
plus any tokens given in ``targets=``), and KL(final ‖ lens), where "final" is the model's own output distribution.

Memory stays bounded for long inputs: positions are decoded in chunks of at most ``chunk_tokens`` (by default as many
as fit 2**24 logits), so layers × positions × vocabulary is never held at once.

Example:
    >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", top_k=3, progress=False)
    >>> result.layers, result.top_ids.shape
    (['layer:0', 'layer:1'], (1, 2, 6, 3))
    >>> float(abs(result.kl[0, -1]).max()) < 1e-5  # the last block's lens is the model's own output
    True
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets import layers as _layers
from interp_widgets.adapter import ModelAdapter
from interp_widgets.tasks import task_for
from interp_widgets.lens.head import LensHead, model_name
from interp_widgets.lens.result import LensPositions, LensReadout, LensResult, LensRun, Vocabulary
from interp_widgets.targets import Targets
from interp_widgets.text_units import extend_encoding
from interp_widgets.validation import check_int

__all__ = ["logit_lens", "residual_points", "decode_stats"]

_RESIDUAL_POINTS = (None, "resid_mid", "resid_pre", "resid_post")


def residual_points(model: nn.Module, layers=None, *, mid: bool = False) -> list[str]:
    """The canonical names of the residual-stream points a lens reads: every block output by default, with each
    block's ``resid_mid`` before it when ``mid=True``; or the given ``layers`` (any spelling
    :func:`~interp_widgets.layers.resolve_layer` accepts), which must be residual-stream points.

    Example:
        >>> residual_points(lm, mid=True)
        ['layer:0.resid_mid', 'layer:0', 'layer:1.resid_mid', 'layer:1']
        >>> residual_points(lm, [-1, "layer:0.attn_out"])
        Traceback (most recent call last):
        ...
        ValueError: the lens reads the residual stream; 'layer:0.attn_out' is a sublayer's output, not a residual-stream state. Use 'layer:i' (a block's output), 'layer:i.resid_mid' (after attention, before the MLP) or 'layer:i.resid_pre' (a block's input).
    """
    if layers is None:
        _, found = _layers.blocks(model)
        names = []
        for i in range(len(found)):
            names += ([f"layer:{i}.resid_mid"] if mid else []) + [f"layer:{i}"]
        return names
    if isinstance(layers, (str, int, np.integer)):
        layers = [layers]
    names = []
    for spec in layers:
        point = _layers.resolve_layer(model, spec)
        match = _layers._BLOCK_NAME.fullmatch(point.name)
        if match is None or match.group(1) or match.group(3) not in _RESIDUAL_POINTS:
            raise ValueError(
                f"the lens reads the residual stream; {point.name!r} is "
                + ("a sublayer's output" if match is not None else "not a block point")
                + ", not a residual-stream "
                "state. Use 'layer:i' (a block's output), 'layer:i.resid_mid' (after attention, before the MLP) or "
                "'layer:i.resid_pre' (a block's input)."
            )
        if point.name not in names:
            names.append(point.name)
    return names


def _target_id(tokenizer, target) -> tuple[int, str]:
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        if not 0 <= int(target) < len(tokenizer):
            raise ValueError(
                f"target token id {int(target)} is out of range; the vocabulary has {len(tokenizer)} tokens"
            )
        return int(target), tokenizer.decode([int(target)])
    if not isinstance(target, str) or not target:
        raise TypeError(f"a target is a token string (such as ' Paris') or a token id; got {target!r}")
    ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise ValueError(
            f"target {target!r} is {len(ids)} tokens ({pieces}); a lens target is one token. Pass one "
            f"of them (for example {pieces[0]!r} if it starts the word), or its token id."
        )
    return int(ids[0]), target


def decode_stats(logits: torch.Tensor, final_logp: torch.Tensor, targets: torch.Tensor, top_k: int):
    """Top-k, target probabilities and ranks, and KL(final ‖ lens) of lens ``logits`` ``(P, V)``.

    ``targets`` is ``(P, M)`` token ids (``-1`` for none). Ranks count from 1 (the top token); a target's rank is 1 +
    the number of tokens with a strictly larger logit. Returns numpy arrays ``(top_ids, top_probs, kl, probs, ranks)``.

    Example:
        >>> logits = torch.tensor([[2.0, 1.0, 0.0]])
        >>> top_ids, top_probs, kl, probs, ranks = decode_stats(logits, logits.log_softmax(-1), torch.tensor([[1, -1]]), 2)
        >>> top_ids.tolist(), ranks.tolist(), float(kl[0])
        ([[0, 1]], [[2, 0]], 0.0)
    """
    logits = logits.float()
    logp = logits.log_softmax(-1)
    top_logp, top_ids = logp.topk(top_k, dim=-1)
    kl = (final_logp.exp() * (final_logp - logp)).sum(-1).clamp_min(0.0)
    safe = targets.clamp_min(0)
    t_logits = logits.gather(1, safe)
    probs = logp.gather(1, safe).exp()
    ranks = 1 + (logits[:, None, :] > t_logits[:, :, None]).sum(-1)
    none = targets < 0
    probs = probs.masked_fill(none, float("nan"))
    ranks = ranks.masked_fill(none, 0)
    return (
        top_ids.cpu().numpy().astype(np.int32),
        top_logp.exp().cpu().numpy().astype(np.float32),
        kl.cpu().numpy().astype(np.float32),
        probs.cpu().numpy().astype(np.float32),
        ranks.cpu().numpy().astype(np.int32),
    )


def logit_lens(
    model: nn.Module,
    tokenizer,
    text: str,
    *,
    layers=None,
    mid: bool = False,
    targets: Sequence | str | int | None = None,
    continuation: str | None = None,
    max_new_tokens: int = 0,
    top_k: int = 5,
    tuned=None,
    chunk_tokens: int | None = None,
    progress: bool = True,
) -> LensResult:
    """Decode the residual stream of ``model`` on ``text`` at every layer with the model's own final norm and head.

    Args:
        model: a causal LM or a masked LM (a classifier has no unembedding and is refused).
        tokenizer: its fast tokenizer.
        text: the prompt (for a masked LM, the text, with mask tokens if you like).
        layers: residual-stream points to read (default: every block's output, ``layer:0`` … ``layer:L-1``).
        mid: also read each block's ``resid_mid`` (after attention, before the MLP).
        targets: tokens (strings of one token, or ids) whose probability and rank are tracked at every cell, beside
            the actual next token (for a masked LM: the token at the position).
        continuation: text appended after the prompt and lensed with it (its tokens are the next-token targets).
        max_new_tokens: greedily generate this many tokens after the prompt (and continuation) and lens them too.
        top_k: how many top tokens each cell keeps.
        tuned: a :class:`~interp_widgets.lens.TunedLens` for this model; the result then holds both lenses.
        chunk_tokens: positions decoded at once (default: as many as fit 2**24 logits).
        progress: show a tqdm bar.

    Example:
        >>> result = logit_lens(lm, lm_tokenizer, "The room was", targets=[" the"], max_new_tokens=2,
        ...                     progress=False)
        >>> result.tokens[-2:] == [lm_tokenizer.decode([i]) for i in result.token_ids[-2:]], result.target_labels
        (True, ['next token', ' the'])
        >>> logit_lens(lm, lm_tokenizer, "The room", layers=[5])
        Traceback (most recent call last):
        ...
        ValueError: layer index 5 is out of range; this model has 2 blocks (layer:0..layer:1).
    """
    head = LensHead(model)
    adapter = ModelAdapter(model, tokenizer)
    task = task_for(adapter)
    top_k = check_int("top_k", top_k, minimum=1, maximum=head.vocab_size)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    names = residual_points(model, layers, mid=mid)
    n_blocks = len(_layers.blocks(model)[1])
    last = f"layer:{n_blocks - 1}"
    if tuned is not None:
        tuned.check_model(model)
        missing = [n for n in names if n != last and n not in tuned.layers]
        if missing:
            raise ValueError(
                f"the tuned lens has no translator for {missing}; it was fitted for {tuned.layers}. "
                "Fit one with TunedLens.for_model(model, layers=...).fit(...) or leave those layers out."
            )
    encoding = adapter.encode(text)
    ids = list(encoding.input_ids)
    prompt_length = len(ids)
    if continuation:
        if not task.causal:
            raise ValueError("continuation= needs a causal LM; a masked LM predicts the tokens in place")
        ids += list(tokenizer(continuation, add_special_tokens=False)["input_ids"])
    n_given = len(ids)
    if max_new_tokens:
        new_ids, _ = task.generate(ids, max_new_tokens=max_new_tokens)
        ids += [int(i) for i in new_ids]
    adapter.check_length(len(ids), "the text with its continuation and generated tokens")
    T = len(ids)
    fixed = [
        _target_id(tokenizer, t)
        for t in ([] if targets is None else [targets] if isinstance(targets, (str, int, np.integer)) else targets)
    ]
    id_array = np.asarray(ids, dtype=np.int64)
    first, first_label = task.lens_targets(id_array)
    target_ids = np.column_stack([first] + [np.full(T, i, dtype=np.int64) for i, _ in fixed]).astype(np.int64)
    lenses = ["logit"] + (["tuned"] if tuned is not None else [])

    capture_names = list(dict.fromkeys(names + [last]))
    device = adapter.device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    with _layers.evaluation(model), torch.no_grad():
        with _layers.capture(model, capture_names) as acts:
            model.base_model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        hidden = {name: acts[name][0][0] for name in capture_names}
        chunk = chunk_tokens or max(1, 2**24 // head.vocab_size)
        chunk = check_int("chunk_tokens", chunk, minimum=1)
        N, L, M = len(lenses), len(names), target_ids.shape[1]
        top_ids = np.zeros((N, L, T, top_k), np.int32)
        top_probs = np.zeros((N, L, T, top_k), np.float32)
        kl = np.zeros((N, L, T), np.float32)
        t_probs = np.zeros((N, L, T, M), np.float32)
        t_ranks = np.zeros((N, L, T, M), np.int32)
        from tqdm.auto import tqdm

        starts = range(0, T, chunk)
        bar = tqdm(total=len(starts) * N * L, desc="lens", disable=not progress, leave=False)
        try:
            for start in starts:
                sl = slice(start, min(T, start + chunk))
                final_logp = head(hidden[last][sl]).float().log_softmax(-1)
                tgt = torch.as_tensor(target_ids[sl], device=final_logp.device)
                for n, lens in enumerate(lenses):
                    for l, name in enumerate(names):
                        h = hidden[name][sl]
                        if lens == "tuned":
                            h = tuned.translate(name, h)
                        out = decode_stats(head(h), final_logp, tgt, top_k)
                        (top_ids[n, l, sl], top_probs[n, l, sl], kl[n, l, sl], t_probs[n, l, sl], t_ranks[n, l, sl]) = (
                            out
                        )
                        bar.update(1)
        finally:
            bar.close()
    vocab_ids = np.unique(np.concatenate([top_ids.ravel(), id_array, target_ids[target_ids >= 0].ravel()]))
    generated = np.zeros(T, dtype=bool)
    generated[n_given:] = True
    if T > prompt_length:  # the continuation's and generated tokens' text is their decoding
        encoding = extend_encoding(tokenizer, encoding, ids[prompt_length:])
    # each position is named by its decoded token, the text its top-k tokens are written in
    layout = replace(encoding.layout, tokens=[tokenizer.decode([i]) for i in ids])
    return LensResult(
        layout=layout,
        positions=LensPositions(id_array, target_ids, generated_mask=generated, prompt_length=prompt_length),
        targets=Targets([first_label] + [label for _, label in fixed], ids=[-1] + [i for i, _ in fixed]),
        readout=LensReadout(top_ids, top_probs, kl, t_probs, t_ranks),
        vocab=Vocabulary(vocab_ids, [tokenizer.decode([int(i)]) for i in vocab_ids]),
        run=LensRun(
            lenses,
            names,
            model_name=model_name(model),
            task=task.name,
            params={
                "top_k": top_k,
                "head": head.describe(),
                "vocab_size": head.vocab_size,
                "chunk_tokens": chunk,
                "max_new_tokens": max_new_tokens,
                "continuation": continuation or "",
                "tuned_lens": None if tuned is None else tuned.describe(),
            },
        ),
    )
