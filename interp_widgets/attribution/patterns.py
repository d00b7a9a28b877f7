"""Attention patterns: every layer's and head's attention probabilities for a text or a generation, in float16.

SDPA and flash attention never materialise the probabilities, so :func:`attention_patterns` runs the model under
:func:`~interp_widgets.attribution.attention.eager_attention` (switched in place and restored exactly afterwards,
also on errors; the model is never copied) and hooks the attention modules that transformers itself records for
``output_attentions`` (the model's ``_can_record_outputs`` table). Each layer's ``(heads, queries, keys)`` map is
reduced on the device it was produced on as soon as its module returns: cut to the query rows asked for
(``queries=``), cast to float16 there, and only then moved to the CPU, so the float32 maps of all layers never
coexist and what crosses to the CPU is the float16 slice. ``layers=`` hooks only the layers asked for. An 8B model's
32 × 32 heads at 2,048 tokens are 8.6 GB in float16; ``layers=[16], queries=slice(-1, None)`` moves 128 KiB.

Query heads are grouped by the key/value head they share (grouped-query attention: SmolLM2-135M has 9 query heads
over 3 KV heads, so heads 0–2 read KV head 0). Head aggregations: ``mean`` and ``max`` over a layer's heads, and
``rollout`` (attention rollout up to that layer, :func:`~interp_widgets.attribution.attention.attention_rollout`).

``kind`` names which attention is recorded: ``"self"`` for decoder-only and encoder-only models, and, for
encoder-decoder models (through :func:`record_attention`, which runs any forward call), ``"encoder"``,
``"decoder"`` (self-attention of each stack) or ``"cross"`` (decoder queries over encoder keys, so queries and keys
are different token lists).

Example:
    >>> patterns = attention_patterns(lm, lm_tokenizer, "The room was clean.", progress=False)
    >>> patterns.n_layers, patterns.n_heads, patterns.n_kv_heads, patterns.kv_head_of(1)  # GPT-2: one KV head each
    (2, 2, 2, 1)
    >>> patterns.head(0, 1).dtype, patterns.head(0, 1).shape == (len(patterns.tokens),) * 2
    (dtype('float16'), True)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter, UnsupportedModelError
from interp_widgets.tasks import task_class, task_for
from interp_widgets.attribution.attention import eager_attention, rollout_step
from interp_widgets.attribution.base import progress_bar
from interp_widgets.layers import evaluation
from interp_widgets.validation import check_choice, check_int

KINDS = ("self", "encoder", "decoder", "cross")
AGGREGATIONS = ("mean", "max", "rollout")
_RECORD_KEYS = {"self": "attentions", "encoder": "attentions", "decoder": "attentions", "cross": "cross_attentions"}


def _recorder_specs(model: nn.Module, key: str) -> list[tuple[type | None, str | None, str | None, int]]:
    """``(class, class-name suffix, layer name, index)`` of every module transformers records as ``key``."""
    specs = []
    for module in model.modules():
        table = getattr(type(module), "_can_record_outputs", None) or {}
        entries = table.get(key)
        for entry in entries if isinstance(entries, list) else [entries] if entries is not None else []:
            if hasattr(entry, "target_class"):  # an OutputRecorder
                specs.append((entry.target_class, entry.class_name, entry.layer_name, entry.index))
            elif isinstance(entry, str):
                specs.append((None, entry, None, 1))
            else:
                specs.append((entry, None, None, 1))
    return specs


def attention_modules(model: nn.Module, kind: str = "self") -> list[tuple[str, nn.Module, int]]:
    """The attention modules whose outputs hold the probabilities of ``kind``, in layer order: ``(path, module,
    index of the probabilities in the module's output tuple)``. These are the modules transformers hooks for
    ``output_attentions`` (``output_cross_attentions`` for ``"cross"``).

    Example:
        >>> [(path, index) for path, _, index in attention_modules(lm)]
        [('transformer.h.0.attn', 1), ('transformer.h.1.attn', 1)]
        >>> attention_modules(lm, "cross")
        Traceback (most recent call last):
          ...
        ValueError: GPT2LMHeadModel has no 'cross' attention: kind='cross' needs an encoder-decoder model; use kind='self'.
    """
    kind = check_choice("kind", kind, KINDS)
    seq2seq = task_class(model).joined_axes  # an encoder–decoder: encoder, decoder and cross attention
    name = type(model).__name__
    if seq2seq and kind == "self":
        raise ValueError(
            f"{name} is an encoder-decoder model, so kind='self' is ambiguous; use kind='encoder', "
            "'decoder' or 'cross'."
        )
    if not seq2seq and kind != "self":
        raise ValueError(
            f"{name} has no {kind!r} attention: kind={kind!r} needs an encoder-decoder model; use kind='self'."
        )
    specs = _recorder_specs(model, _RECORD_KEYS[kind])
    if not specs:
        raise UnsupportedModelError(
            f"{name} does not declare which modules return attention weights (no '{_RECORD_KEYS[kind]}' entry in "
            "_can_record_outputs), so its attention patterns cannot be recorded; use a Hugging Face transformers "
            "model that supports output_attentions=True."
        )
    # a decoder layer's cross-attention module can be of the self-attention class: never count it as self-attention
    cross = {id(m) for _, m, _ in attention_modules(model, "cross")} if kind in ("encoder", "decoder") else set()
    found = []
    for path, module in model.named_modules():
        if id(module) in cross:
            continue
        for target, class_name, layer_name, index in specs:
            if not (
                (target is not None and isinstance(module, target))
                or (class_name is not None and path.endswith(class_name))
            ):
                continue
            if layer_name is not None and f".{layer_name.strip('.')}." not in f".{path}.":
                continue
            if kind in ("encoder", "decoder") and f".{kind}." not in f".{path}.":
                continue
            found.append((path, module, index))
            break
    if not found:
        raise UnsupportedModelError(
            f"{name}: no module of the '{_RECORD_KEYS[kind]}' recorder matched; its "
            f"{kind!r} attention patterns cannot be recorded."
        )
    return found


def _check_layers(layers, n_layers: int) -> list[int]:
    """Layer indices (negative from the end) as sorted distinct indices in ``0..n_layers-1``."""
    if layers is None:
        return list(range(n_layers))
    chosen = [check_int("layer", layer, hint="pass attention layer indices such as [0, -1]")
              for layer in ([layers] if isinstance(layers, (int, np.integer)) else layers)]  # fmt: skip
    bad = [layer for layer in chosen if not -n_layers <= layer < n_layers]
    if bad or not chosen:
        raise IndexError(
            f"layers={list(layers) if not isinstance(layers, (int, np.integer)) else layers} must name attention layers "
            f"of 0..{n_layers - 1} (or negative indices from the end); the model has {n_layers}."
        )
    return sorted({layer % n_layers for layer in chosen})


@contextlib.contextmanager
def record_attention(model: nn.Module, kind: str = "self", *, layers=None, queries=None) -> Iterator[list]:
    """Record the attention probabilities of every forward call in the block: yields a list that gets, per call,
    one float16 CPU tensor ``(batch, heads, queries, keys)`` per layer (the list of one call, then the next…).

    ``layers`` (indices into :func:`attention_modules`, default all) hooks only those layers; ``queries`` (a slice
    or index array of query positions, default all) keeps only those rows. Both reductions and the cast to float16
    happen on the device the layer ran on, before the tensor moves to the CPU.

    The model runs eager attention inside the block (:func:`eager_attention`); on exit, also on errors, its
    attention implementation is restored and every hook removed. Pass any inputs to the model inside the block
    (an encoder-decoder model needs ``decoder_input_ids``), which is how ``"cross"`` patterns are recorded.

    Example:
        >>> ids = lm_tokenizer("The room was", return_tensors="pt").input_ids
        >>> with record_attention(lm) as calls:
        ...     _ = lm(ids)
        >>> len(calls), len(calls[0]), calls[0][0].dtype, tuple(calls[0][0].shape)
        (1, 2, torch.float16, (1, 2, 3, 3))
        >>> lm.config._attn_implementation
        'sdpa'
        >>> with record_attention(lm, layers=[-1], queries=slice(-1, None)) as calls:
        ...     _ = lm(ids)
        >>> len(calls[0]), tuple(calls[0][0].shape)  # the last layer's last query row only
        (1, (1, 2, 1, 3))
    """
    modules = attention_modules(model, kind)
    chosen = _check_layers(layers, len(modules))
    rows = _query_index(queries)
    calls: list[list[torch.Tensor]] = []
    handles = []

    def hook_for(layer: int, index: int):
        def hook(module, args, output):
            weights = output[index] if isinstance(output, (tuple, list)) else None
            if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
                raise UnsupportedModelError(
                    f"{type(module).__name__} returned no attention weights under eager attention; reload the model "
                    "with attn_implementation='eager'."
                )
            if layer == 0 or not calls or len(calls[-1]) != layer:
                calls.append([])
            weights = weights.detach()
            if rows is not None:
                weights = weights[:, :, rows.to(weights.device) if isinstance(rows, torch.Tensor) else rows]
            # reduced and cast on the layer's own device; only the float16 slice crosses to the CPU
            calls[-1].append(weights.to(torch.float16).cpu())

        return hook

    try:
        with eager_attention(model):
            for position, layer in enumerate(chosen):
                _, module, index = modules[layer]
                handles.append(module.register_forward_hook(hook_for(position, index)))
            yield calls
    finally:
        for handle in handles:
            handle.remove()


def _query_index(queries):
    """``queries`` as a slice or a long tensor of positions (None: every query)."""
    if queries is None or isinstance(queries, slice):
        return queries
    index = torch.as_tensor(np.asarray(queries, dtype=np.int64).reshape(-1))
    if not len(index):
        raise ValueError("queries= is empty; pass a slice or the query positions to keep (or None for all).")
    return index


@dataclass
class AttentionPatterns:
    """Attention probabilities of one input, per layer and head, in float16.

    Attributes:
        tokens: query tokens (for self-attention also the keys).
        key_tokens: key tokens (the same list for self-attention; the encoder's tokens for cross-attention).
        weights: one float16 array ``(heads, queries, keys)`` per layer.
        n_kv_heads: key/value heads (grouped-query attention); query head ``h`` reads KV head ``h // (heads / kv)``.
        kind: ``"self"``, ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer_names: one name per layer (the attention module's path).
        generated_mask: True for generated tokens (a generation), else all False.
        model_name: the model's name or class.
        layer_indices: the model's attention layer of each entry of ``weights`` (None: every layer, in order).
        query_positions: the position of each query row among the recorded queries (None: every query), when
            ``queries=`` kept only some; ``tokens`` and ``generated_mask`` then describe those rows only.

    Example:
        >>> p = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False)
        >>> p.aggregate(0, "mean").shape == p.head(0, 0).shape, float(p.head(1, 1).sum(-1).max()) < 1.01
        (True, True)
    """

    tokens: list[str]
    weights: list[np.ndarray]
    n_kv_heads: int
    kind: str = "self"
    key_tokens: list[str] | None = None
    layer_names: list[str] = field(default_factory=list)
    generated_mask: np.ndarray | None = None
    model_name: str = ""
    layer_indices: list[int] | None = None
    query_positions: np.ndarray | None = None
    _rollout: dict = field(default_factory=dict, repr=False)  # layer -> float16 rollout through that layer
    _rollout_at: tuple = field(
        default=(), repr=False
    )  # (layer, float32 rollout through it): where the next step starts

    def __post_init__(self):
        if self.key_tokens is None:
            self.key_tokens = list(self.tokens)
        if self.generated_mask is None:
            self.generated_mask = np.zeros(len(self.tokens), dtype=bool)
        if not self.layer_names:
            self.layer_names = [f"layer:{i}" for i in range(len(self.weights))]

    @property
    def n_layers(self) -> int:
        """Number of attention layers."""
        return len(self.weights)

    @property
    def n_heads(self) -> int:
        """Query heads per layer."""
        return int(self.weights[0].shape[0])

    def kv_head_of(self, head: int) -> int:
        """The key/value head a query head reads (grouped-query attention).

        Example:
            >>> p = attention_patterns(lm, lm_tokenizer, "Hi", progress=False)
            >>> [p.kv_head_of(h) for h in range(p.n_heads)]
            [0, 1]
        """
        head = self._check_head(head)
        return head // (self.n_heads // self.n_kv_heads)

    @property
    def head_groups(self) -> list[list[int]]:
        """The query heads of each KV head.

        Example:
            >>> attention_patterns(lm, lm_tokenizer, "Hi", progress=False).head_groups
            [[0], [1]]
        """
        per = self.n_heads // self.n_kv_heads
        return [list(range(g * per, (g + 1) * per)) for g in range(self.n_kv_heads)]

    def _check_layer(self, layer: int) -> int:
        layer = check_int("layer", layer, hint="pass a layer index such as 0 or -1 (the last layer)")
        if not -self.n_layers <= layer < self.n_layers:
            raise IndexError(
                f"layer {layer} does not exist: the model has {self.n_layers} attention layers (use "
                f"0..{self.n_layers - 1}, or negative indices from the end)."
            )
        return layer % self.n_layers

    def _check_head(self, head: int) -> int:
        head = check_int("head", head, hint="pass a head index such as 0")
        if not 0 <= head < self.n_heads:
            raise IndexError(
                f"head {head} does not exist: each layer has {self.n_heads} query heads (use 0..{self.n_heads - 1})."
            )
        return head

    def head(self, layer: int, head: int) -> np.ndarray:
        """One head's probabilities ``(queries, keys)`` (float16; row ``q`` sums to 1 over the keys).

        Example:
            >>> p = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False)
            >>> p.head(0, 9)
            Traceback (most recent call last):
              ...
            IndexError: head 9 does not exist: each layer has 2 query heads (use 0..1).
        """
        return self.weights[self._check_layer(layer)][self._check_head(head)]

    def aggregate(self, layer: int, how: str = "mean") -> np.ndarray:
        """The heads of a layer combined ``(queries, keys)``, float16: ``"mean"``, ``"max"``, or ``"rollout"``
        (attention rollout through layers 0..layer, ``0.5·A + 0.5·I`` per layer with heads averaged; self-attention
        only).

        Example:
            >>> p = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False)
            >>> bool((p.aggregate(0, "max") >= p.aggregate(0, "mean")).all())
            True
            >>> p.aggregate(-1, "rollout").sum(-1).round(2).tolist() == [1.0] * len(p.tokens)
            True
        """
        how = check_choice("how", how, AGGREGATIONS)
        layer = self._check_layer(layer)
        if how == "mean":
            return self.weights[layer].astype(np.float32).mean(axis=0).astype(np.float16)
        if how == "max":
            return self.weights[layer].max(axis=0)
        if self.kind == "cross":
            raise ValueError(
                "attention rollout composes self-attention through the layers; cross-attention has no "
                "rollout. Use how='mean' or 'max'."
            )
        if self.layer_indices is not None or self.query_positions is not None:
            raise ValueError(
                "attention rollout composes every layer's full attention; these patterns were recorded with "
                "layers= or queries=. Record them without those to use how='rollout', or use how='mean' or 'max'."
            )
        if layer not in self._rollout:
            # Incremental: the float32 product through the deepest layer reached so far is kept, so asking layer L
            # after L-1 costs one step (one T × T matmul), and every layer passed on the way is kept in float16.
            # Heads are averaged first (what attention_rollout does anyway); the steps are attention_rollout's own.
            start, product = self._rollout_at or (-1, None)
            if product is None:
                product = torch.eye(len(self.key_tokens), dtype=torch.float32)
            eye = torch.eye(product.shape[-1], dtype=torch.float32)
            for step in range(start + 1, layer + 1):
                product = rollout_step(
                    product, torch.from_numpy(self.weights[step].astype(np.float32).mean(axis=0)), eye
                )
                self._rollout[step] = product.numpy().astype(np.float16)
            self._rollout_at = (layer, product)
        return self._rollout[layer]

    def to_dataframe(self, layer: int, head: int | str = "mean", *, min_weight: float = 0.0):
        """One layer's head (or aggregation) as long-form rows: ``query, query_token, key, key_token, weight``.

        Example:
            >>> p = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False)
            >>> list(p.to_dataframe(0, 1).columns)
            ['query', 'query_token', 'key', 'key_token', 'weight']
        """
        import pandas as pd

        matrix = self.aggregate(layer, head) if isinstance(head, str) else self.head(layer, head)
        q, k = (
            np.nonzero(matrix.astype(np.float32) > min_weight)
            if min_weight > 0
            else np.indices(matrix.shape).reshape(2, -1)
        )
        return pd.DataFrame(
            {
                "query": q,
                "query_token": [self.tokens[i] for i in q],
                "key": k,
                "key_token": [self.key_tokens[j] for j in k],
                "weight": matrix[q, k].astype(np.float32),
            }
        )

    def widget(self, **options):
        """The interactive head and model views (:class:`~interp_widgets.widgets.AttentionWidget`).

        Example:
            >>> attention_patterns(lm, lm_tokenizer, "Hi there", progress=False).widget()  # doctest: +ELLIPSIS
            AttentionWidget(...)
        """
        from interp_widgets.widgets.attention import AttentionWidget

        return AttentionWidget(self, **options)

    def __repr__(self) -> str:
        return (
            f"AttentionPatterns({self.kind} attention of {self.model_name or 'a model'}: {self.n_layers} layers × "
            f"{self.n_heads} heads ({self.n_kv_heads} KV heads), {len(self.tokens)} × {len(self.key_tokens)} "
            "tokens, float16)"
        )


def attention_patterns(model: nn.Module, tokenizer, text: str, *, max_new_tokens: int = 0, continuation=None,
                       kind: str | None = None, do_sample: bool = False, seed: int = 0, layers=None, queries=None,
                       progress: bool = True) -> AttentionPatterns:  # fmt: skip
    """Every layer's and head's attention probabilities over ``text`` (and, with ``max_new_tokens``, over the text
    plus its greedy or sampled continuation), as :class:`AttentionPatterns` in float16.

    One forward pass over all tokens under eager attention (for a generation, after generating): a causal model's
    attention at a position is the same as when that position was generated. The model is left untouched: its
    attention implementation is restored and every hook removed, also on errors.

    An encoder–decoder model (T5, BART, Marian…) reads ``text`` as the source and needs a target: ``continuation``
    (text, tokenized as Hugging Face labels, or token ids) or ``max_new_tokens`` to generate one. ``kind`` picks
    the attention: ``"cross"`` (the default; rows are the target tokens, each as the decoder step that produced
    it, keys the source tokens), ``"decoder"`` (target rows over the decoder's inputs: its start token and the
    earlier targets) or ``"encoder"`` (source over source). Other models have ``"self"`` only.

    ``layers`` (attention layer indices, negative from the end) and ``queries`` (a slice or the query positions)
    keep only part of the patterns, reduced on the device each layer runs on before anything reaches the CPU: for a
    long text on a large model, ask for the layers and rows you will look at (rollout then needs a full recording).

    Example:
        >>> p = attention_patterns(lm, lm_tokenizer, "The room was", max_new_tokens=2, progress=False)
        >>> p.generated_mask.tolist()
        [False, False, False, True, True]
        >>> attention_patterns(lm, lm_tokenizer, "word " * 200, progress=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
          ...
        ValueError: the text is 402 tokens, longer than the model's context of 128 tokens (...). Shorten it or split it ...
        >>> cross = attention_patterns(seq2seq, seq2seq_tokenizer, "the cat sat", continuation="a dog", progress=False)
        >>> cross.kind, cross.tokens == [seq2seq_tokenizer.decode([t]) for t in seq2seq_tokenizer(text_target="a dog").input_ids]
        ('cross', True)
        >>> cross.head(0, 0).shape == (len(cross.tokens), len(seq2seq_tokenizer("the cat sat").input_ids))
        True
        >>> last = attention_patterns(lm, lm_tokenizer, "The room was", layers=[-1], queries=[2], progress=False)
        >>> last.n_layers, last.layer_indices, last.tokens, last.head(0, 0).shape
        (1, [1], [' was'], (1, 3))
    """
    adapter = ModelAdapter(model, tokenizer)
    task = task_for(adapter)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
    if task.joined_axes:
        kind = check_choice("kind", "cross" if kind is None else kind, KINDS[1:])
        return _seq2seq_patterns(adapter, text, kind=kind, continuation=continuation, max_new_tokens=max_new_tokens,
                                 do_sample=do_sample, seed=seed, progress=progress, layers=layers,
                                 queries=queries)  # fmt: skip
    if kind not in (None, "self"):
        raise ValueError(
            f"kind={kind!r} needs an encoder–decoder model; this model is a {task.name}, whose "
            "attention is kind='self'."
        )
    if continuation is not None:
        raise ValueError(
            "continuation= is for encoder–decoder models (the target side); for this model append the "
            "text to the input, or pass max_new_tokens to generate it."
        )
    encoding = adapter.encode(text)
    ids = list(encoding.input_ids)
    adapter.check_length(len(ids), "the text")
    n_prompt = len(ids)
    bar = progress_bar(progress, 1 + (max_new_tokens > 0), "attention patterns")
    try:
        if max_new_tokens:
            if not task.causal:
                raise ValueError(
                    f"max_new_tokens needs a causal LM; this model is a {task.name}. Pass "
                    "max_new_tokens=0 to read the attention over the text."
                )
            new_ids, _ = task.generate(ids, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
            ids += [int(t) for t in new_ids]
            if bar is not None:
                bar.update(1)
        device = adapter.device
        with (
            evaluation(model),
            torch.inference_mode(),
            record_attention(model, "self", layers=layers, queries=queries) as calls,
        ):
            input_ids = torch.tensor([ids], device=device)
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        if bar is not None:
            bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    tokens = [tokenizer.decode([t]) for t in ids]
    return _patterns(model, calls, "self", tokens, None, np.arange(len(ids)) >= n_prompt, layers, queries)


def _patterns(
    model, calls, kind: str, tokens, key_tokens, generated_mask, layers=None, queries=None
) -> AttentionPatterns:
    weights = [w[0].numpy() for w in calls[0]]
    paths = [path for path, _, _ in attention_modules(model, kind)]
    chosen = None if layers is None else _check_layers(layers, len(paths))
    positions = None
    if queries is not None:
        positions = np.arange(len(tokens))[queries if isinstance(queries, slice) else _query_index(queries).numpy()]
        if key_tokens is None:
            key_tokens = list(tokens)
        tokens = [tokens[i] for i in positions]
        generated_mask = np.asarray(generated_mask)[positions]
    config = model.config
    n_heads = weights[0].shape[0]
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    if n_heads % n_kv:
        n_kv = n_heads
    return AttentionPatterns(
        tokens=tokens,
        weights=weights,
        n_kv_heads=n_kv,
        kind=kind,
        key_tokens=key_tokens,
        layer_names=paths if chosen is None else [paths[i] for i in chosen],
        generated_mask=generated_mask,
        model_name=getattr(config, "name_or_path", "") or type(model).__name__,
        layer_indices=chosen,
        query_positions=positions,
    )


def _seq2seq_patterns(adapter, text, *, kind, continuation, max_new_tokens, do_sample, seed, progress, layers=None,
                      queries=None):  # fmt: skip
    """Attention of an encoder–decoder over source ``text`` and a forced or generated target."""
    model, tokenizer = adapter.model, adapter.tokenizer
    task = task_for(adapter)
    source = [int(t) for t in adapter.encode(text).input_ids]
    if continuation is not None and max_new_tokens:
        raise ValueError("pass either continuation= (a forced target) or max_new_tokens= (a generated one), not both")
    if continuation is None and not max_new_tokens:
        raise ValueError(
            "an encoder–decoder model needs a target: pass continuation='target text' (or its token "
            "ids), or max_new_tokens=N to generate one."
        )
    bar = progress_bar(progress, 1 + (max_new_tokens > 0), "attention patterns")
    try:
        if continuation is not None:
            if isinstance(continuation, str):
                if not continuation.strip():
                    raise ValueError("continuation is empty; pass the target text to read the attention for.")
                targets = [int(t) for t in tokenizer(text_target=continuation)["input_ids"]]
            else:
                targets = [check_int("continuation id", t, minimum=0) for t in continuation]
                vocab = model.get_input_embeddings().num_embeddings
                if not targets or max(targets) >= vocab:
                    raise ValueError(
                        f"continuation ids must be a non-empty list of ids below the vocabulary size {vocab}"
                    )
            generated = False
        else:
            new_ids, _ = task.generate(source, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
            targets, generated = [int(t) for t in new_ids], True
            if bar is not None:
                bar.update(1)
        decoder = [task.decoder_start_token_id, *targets[:-1]]  # row j is the step that produced targets[j]
        device = adapter.device
        with evaluation(model), torch.inference_mode(), record_attention(model, kind, layers=layers,
                                                                         queries=queries) as calls:  # fmt: skip
            src = torch.tensor([source], device=device)
            model(
                input_ids=src,
                attention_mask=torch.ones_like(src),
                decoder_input_ids=torch.tensor([decoder], device=device),
            )
        if bar is not None:
            bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    decode = lambda ids: [tokenizer.decode([t]) for t in ids]  # noqa: E731
    if kind == "encoder":
        return _patterns(model, calls, kind, decode(source), None, np.zeros(len(source), dtype=bool), layers, queries)
    keys = decode(source) if kind == "cross" else decode(decoder)
    return _patterns(model, calls, kind, decode(targets), keys, np.full(len(targets), generated), layers, queries)


__all__ = ["AGGREGATIONS", "KINDS", "AttentionPatterns", "attention_modules", "attention_patterns", "record_attention"]
