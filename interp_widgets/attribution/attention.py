"""Attention-based attributions: raw attention, attention rollout and gradient-weighted attention.

Every score is read from the row of the position whose output is explained: position 0 (``[CLS]``) for encoder
classifiers, the last position for decoder classifiers, the mask position for masked LMs, and the position that
predicts each generated token in generation (later sources are NaN). All scores are unsigned: attention weights and
relevances are non-negative and do not say whether a token pushes the target up or down.

Attention weights need the eager attention implementation (SDPA and flash kernels never materialise them).
:func:`eager_attention` switches the model to eager for the duration of the call and restores the exact previous
implementation afterwards, also on errors. Inputs run through the same batched, length-bucketed evaluation as the
other methods, capped by ``max_batch_tokens``; a batch holds the attention maps of every layer
(``layers × heads × rows × length²`` numbers), so lower ``max_batch_tokens`` for long inputs. What comes back to
the CPU is reduced first, layer by layer, on the device each layer ran on (:meth:`AttentionMethod._reduce_layer`):
the built-in methods move one head-averaged ``(rows, T, T)`` map per layer they read (raw attention: one layer),
never the ``(rows, heads, T, T)`` maps themselves, and cast to float32 only on that device.

Example:
    >>> result = AttentionRollout(progress=False).attribute(model, tokenizer, "Not bad at all.")
    >>> result.score_meaning
    'attention rollout over all layers (0.5·A + 0.5·I, heads averaged; unsigned)'
    >>> result.scores.round(3)  # the [CLS] row of the rollout: it sums to 1 over all tokens
    array([[0.361, 0.09 , 0.148, 0.05 , 0.069, 0.088, 0.194]])
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter, UnsupportedModelError
from interp_widgets.attribution.base import Attributor, progress_bar
from interp_widgets.attribution.rows import RowChunk, evaluate_rows
from interp_widgets.tasks import ExplainedInput, task_for
from interp_widgets.attribution.result import AttributionResult
from interp_widgets.layers import attention_implementation
from interp_widgets.validation import check_int


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Run a Hugging Face model with eager attention (which returns attention weights) inside the block.

    A model that cannot switch at run time (transformers only warns) raises an ``UnsupportedModelError`` that says to
    reload it with ``attn_implementation="eager"``. On exit, also on errors, the attention implementation of the
    model and of every sub-configuration is restored exactly, and the output-capturing hooks that transformers
    installs on first use of ``output_attentions`` are removed again (:func:`interp_widgets.layers.no_new_hooks`),
    so the model is left as it was.

    Example:
        >>> input_ids = tokenizer("Not bad.", return_tensors="pt").input_ids
        >>> model.config._attn_implementation
        'sdpa'
        >>> with eager_attention(model):
        ...     print(model.config._attn_implementation)
        ...     attentions = model(input_ids, output_attentions=True).attentions
        eager
        >>> model.config._attn_implementation  # restored on exit
        'sdpa'
        >>> len(attentions), attentions[0].shape  # layers; (batch, heads, T, T)
        (2, torch.Size([1, 2, 5, 5]))
    """
    with attention_implementation(
        model,
        "eager",
        why="attention methods read attention weights, which only eager attention returns",
        hint=", or use a gradient or perturbation method",
    ):
        yield


class _AttentionRecorder:
    """Keeps, for every forward pass of an adapter inside :meth:`recording`, each layer's attention probabilities
    ``(rows, heads, T, T)`` and, when gradients flow, the gradient of the summed row scores with respect to them."""

    def __init__(self, adapter: ModelAdapter):
        self.adapter = adapter
        self.task = task_for(adapter)
        self.cross: list[torch.Tensor] | None = None
        self.attentions: list[torch.Tensor] = []
        self.gradients: list[torch.Tensor | None] = []
        self._cursor = 0

    def recording(self):
        """A context manager in which the adapter's forward passes return attention weights to this recorder."""
        return self.adapter.observing(self._observe, output_attentions=True)

    def _observe(self, out) -> None:
        attentions, cross = self.task.attention_maps(out)
        self.cross = None if cross is None else [c.detach() for c in cross]
        self.attentions, self.gradients, self._cursor = attentions, [None] * len(attentions), 0
        for layer, attention in enumerate(attentions):
            if attention.requires_grad:
                attention.register_hook(self._gradient_store(layer))

    def take_cross(self, n_rows: int, n_targets: int) -> np.ndarray:
        """Cross-attention of the rows just taken, ``(rows, layers, heads, targets, source)`` float16: decoder
        position ``t`` (which predicts target ``t``) over the source tokens."""
        start = self._cursor - n_rows
        # float16 on the device each layer ran on (the same rounding as float32 then float16), then to the CPU
        layers = [c[start : self._cursor, :, :n_targets].to(torch.float16).cpu() for c in self.cross]
        return torch.stack(layers, dim=1).numpy()

    def _gradient_store(self, layer: int) -> Callable[[torch.Tensor], None]:
        def store(gradient: torch.Tensor) -> None:
            self.gradients[layer] = gradient.detach()

        return store

    def take(self, n_rows: int, length: int, reduce=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The next ``n_rows`` rows of the last batch, cropped to ``length``: ``(layers, rows, heads, T, T)``.

        ``reduce(layer, n_layers, attention, gradient)`` (:meth:`AttentionMethod._reduce_layer`) runs on each layer's
        own device before anything moves to the CPU; it returns the reduced ``(attention, gradient)`` (float32, any
        head count) or None to leave the layer out."""
        rows = slice(self._cursor, self._cursor + n_rows)
        self._cursor += n_rows
        have_gradients = not any(g is None for g in self.gradients)
        reduce = reduce or _keep_layer
        kept_attentions, kept_gradients = [], []
        for layer, attention in enumerate(self.attentions):
            gradient = self.gradients[layer][rows, :, :length, :length] if have_gradients else None
            reduced = reduce(layer, len(self.attentions), attention[rows, :, :length, :length].detach(), gradient)
            if reduced is None:
                continue
            kept_attentions.append(reduced[0].cpu())
            kept_gradients.append(None if reduced[1] is None else reduced[1].cpu())
        attentions = torch.stack(kept_attentions)
        if not have_gradients or any(g is None for g in kept_gradients):
            return attentions, None
        return attentions, torch.stack(kept_gradients)


def _keep_layer(layer: int, n_layers: int, attention: torch.Tensor, gradient: torch.Tensor | None):
    """The default per-layer reduction: every head, in float32 (cast on the layer's device)."""
    return attention.float(), None if gradient is None else gradient.float()


def query_position(adapter: ModelAdapter, problem: ExplainedInput, target: int) -> int:
    """The position whose attention row explains a target: 0 for encoder classifiers, the last position for decoder
    classifiers, the scored position otherwise (mask position, or the position predicting a generated token).

    Example:
        >>> from interp_widgets.tasks import prepare_inputs
        >>> problem = prepare_inputs(adapter, ["Not bad."], target=None)[0]
        >>> query_position(adapter, problem, 0)  # the encoder classifier reads [CLS]
        0
        >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
        >>> generated = prepare_inputs(lm_adapter, "The room was", max_new_tokens=3)[0]
        >>> [query_position(lm_adapter, generated, t) for t in range(generated.n_targets)]
        [2, 3, 4]
    """
    return task_for(adapter).query_position(problem, target)


def attention_rollout(attentions: torch.Tensor) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020) from attentions ``(layers, rows, heads, T, T)``.

    Each layer's head-averaged attention becomes ``0.5·A + 0.5·I`` (the residual stream), rows renormalised to sum
    to 1, and the layers are multiplied from the first to the last: ``R = Â_L ⋯ Â_1``. Returns ``(rows, T, T)``.

    Example:
        >>> attention_rollout(torch.full((2, 1, 1, 2, 2), 0.5))[0]
        tensor([[0.6250, 0.3750],
                [0.3750, 0.6250]])
    """
    mixed = attentions.mean(dim=2)
    eye = torch.eye(mixed.shape[-1], dtype=mixed.dtype)
    rollout = eye.expand_as(mixed[0]).clone()
    for layer in mixed:
        rollout = rollout_step(rollout, layer, eye)
    return rollout


def rollout_step(rollout: torch.Tensor, attention: torch.Tensor, eye: torch.Tensor | None = None) -> torch.Tensor:
    """One layer of :func:`attention_rollout`: ``norm(0.5·A + 0.5·I) @ rollout`` for a head-averaged attention ``A``
    ``(..., T, T)``; composing the layers one by one gives :func:`attention_rollout` exactly.

    Example:
        >>> a = torch.full((2, 2), 0.5)
        >>> rollout_step(rollout_step(torch.eye(2), a), a)
        tensor([[0.6250, 0.3750],
                [0.3750, 0.6250]])
    """
    if eye is None:
        eye = torch.eye(attention.shape[-1], dtype=attention.dtype)
    step = 0.5 * attention + 0.5 * eye
    return (step / step.sum(-1, keepdim=True)) @ rollout


def gradient_weighted_rollout(attentions: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf, 2021) from ``(layers, rows, heads, T, T)`` inputs.

    Per layer ``Ā = mean over heads of (A ⊙ ∂score/∂A)⁺`` (positive part); relevance starts at the identity and
    accumulates ``R ← R + Ā · R`` from the first to the last layer. Returns ``(rows, T, T)``.

    Example:
        >>> a = torch.full((1, 1, 1, 2, 2), 0.5)
        >>> gradient_weighted_rollout(a, torch.ones_like(a))[0]
        tensor([[1.5000, 0.5000],
                [0.5000, 1.5000]])
    """
    return _accumulate_relevance((attentions * gradients).clamp(min=0).mean(dim=2))


def _accumulate_relevance(weighted: torch.Tensor) -> torch.Tensor:
    """``R ← R + Ā · R`` from the identity over the layers of ``weighted`` ``(layers, rows, T, T)``."""
    relevance = torch.eye(weighted.shape[-1], dtype=weighted.dtype).expand_as(weighted[0]).clone()
    for layer in weighted:
        relevance = relevance + layer @ relevance
    return relevance


class AttentionMethod(Attributor):
    """Engine of the attention methods: evaluate the inputs with attention recording (eager attention), turn the
    maps into a ``(T, T)`` relevance per row, and read each target's query row (see :func:`query_position`).

    Subclass API (set ``name`` to register the method):
        ``_relevance(attentions, gradients) -> Tensor``: from every layer's attention probabilities
        ``(layers, rows, heads, T, T)`` (and, when ``needs_gradients``, the gradients of the target scores with
        respect to them, same shape; else None) compute the relevance ``(rows, T, T)``; row ``q`` of a map scores
        the sources of query position ``q``.

        ``_reduce_layer(layer, n_layers, attention, gradient) -> (attention, gradient) | None``: optional; reduces
        one layer's maps ``(rows, heads, T, T)`` on the device it ran on, before they move to the CPU (the default
        keeps every head, in float32). Return None to leave the layer out of what ``_relevance`` gets, and reduce
        heads with ``keepdim=True`` so ``_relevance`` still gets ``(layers, rows, heads', T, T)``.

        ``per_target`` (class attribute): one row per target (needed for target-specific gradients) instead of
        one row per input.

        ``needs_gradients`` (class attribute): run backward passes and pass the attention gradients.

        ``description`` (class attribute or property): what the scores mean, recorded as the result's ``reduce``.

    Scores are unsigned (``signed = False``).

    Example:
        >>> from interp_widgets.attribution import METHODS
        >>> class FirstLayerAttention(AttentionMethod):
        ...     "Attention weights of the first layer, averaged over heads (unsigned)."
        ...     name = "first_layer_attention"
        ...     description = "attention weight in layer 0, mean over heads (unsigned)"
        ...     def _relevance(self, attentions, gradients):
        ...         return attentions[0].mean(dim=1)
        >>> METHODS.remove("first_layer_attention") is FirstLayerAttention
        True
    """

    family = "attention"
    signed = False
    per_target = False
    description = ""
    supports_seq2seq = False

    def _relevance(self, attentions: torch.Tensor, gradients: torch.Tensor | None) -> torch.Tensor:
        """The relevance ``(rows, T, T)``; see "Subclass API" in the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} must implement _relevance")

    def _reduce_layer(
        self, layer: int, n_layers: int, attention: torch.Tensor, gradient: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """One layer's maps reduced on the device it ran on; see "Subclass API" in the class docstring.

        Example:
            >>> a = torch.rand(1, 4, 3, 3)
            >>> AttentionRollout()._reduce_layer(0, 2, a, None)[0].shape  # heads averaged where the layer ran
            torch.Size([1, 1, 3, 3])
        """
        return _keep_layer(layer, n_layers, attention, gradient)

    def _attribute_inputs(self, adapter, problems, *, score, granularity) -> list[AttributionResult]:
        if task_for(adapter).joined_axes and not self.supports_seq2seq:
            raise UnsupportedModelError(
                f"{self.name} composes attention through one stack of layers, which an encoder–decoder does not have "
                "(its decoder reads the encoder through cross-attention); use raw_attention (cross-attention over the "
                "source and decoder self-attention over the target) or a gradient or perturbation method."
            )
        recorder = _AttentionRecorder(adapter)
        cross = [None] * len(problems)
        with torch.no_grad():
            inputs = [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0].detach() for p in problems]
        scores = [np.zeros((p.n_targets, p.length)) for p in problems]
        n_rows = [p.n_targets if self.per_target else 1 for p in problems]

        def build(item, start, stop):
            rows = np.arange(start, stop)
            return inputs[item].expand(len(rows), -1, -1), rows if self.per_target else np.zeros_like(rows)

        def consume(chunk: RowChunk, row_scores, grads):
            problem = problems[chunk.item]
            relevance = self._relevance(*recorder.take(chunk.stop - chunk.start, problem.length, self._reduce_layer))
            if recorder.cross is not None and chunk.start == 0:
                cross[chunk.item] = recorder.take_cross(chunk.stop - chunk.start, problem.n_targets)[0]
            for offset, row in enumerate(range(chunk.start, chunk.stop)):
                for t in [row] if self.per_target else range(problem.n_targets):
                    scores[chunk.item][t] = relevance[offset, query_position(adapter, problem, t)].double().numpy()

        bar = progress_bar(self.progress, sum(n_rows), self.name)
        try:
            with eager_attention(adapter.model), recorder.recording():
                evaluate_rows(
                    adapter, problems, n_rows, build, consume, score=score, with_grad=self.needs_gradients, progress=bar
                )
        finally:
            if bar is not None:
                bar.close()
        return [
            self._result(
                p, s, score_meaning=self.description, score=score, **({} if c is None else {"cross_attentions": c})
            )
            for p, s, c in zip(problems, scores, cross)
        ]


class RawAttention(AttentionMethod):
    """Attention weights of one layer (the last by default), averaged over heads (unsigned).

    Each target's scores are the attention row of its query position (see :func:`query_position`); at token
    granularity, special tokens included, a row sums to 1.

    Example:
        >>> r = RawAttention(layer=-1, progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.tokens
        ['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]']
        >>> r.scores.round(3), round(float(r.scores.sum()), 6)
        (array([[0.029, 0.017, 0.365, 0.028, 0.02 , 0.118, 0.423]]), 1.0)

        An encoder–decoder's target token gets the cross-attention of the decoder layer over the source and its
        self-attention over the earlier target tokens, each summing to 1; ``cross_attentions`` keeps every layer
        and head, ``(layers, heads, targets, source)`` in float16, for a head view:

        >>> r = RawAttention(progress=False).attribute(seq2seq, seq2seq_tokenizer, "The room was clean.",
        ...                                            continuation=" room.")
        >>> r.source_scores.sum(1).round(3), np.nansum(r.target_scores, 1).round(3)
        (array([1., 1., 1.]), array([1., 1., 1.]))
        >>> r.cross_attentions.shape, r.cross_attentions.dtype
        ((2, 4, 3, 7), dtype('float16'))
    """

    name = "raw_attention"
    uses_score = False
    supports_seq2seq = True

    def __init__(self, layer: int = -1, *, score: str | None = None, progress: bool = True):
        super().__init__(score=score, progress=progress)
        self.layer = check_int("layer", layer, hint="pass a layer index such as -1 (the last layer)")

    @property
    def description(self) -> str:
        """What the scores mean, recorded as the result's ``reduce``.

        Example:
            >>> RawAttention(layer=0).description
            'attention weight in layer 0, mean over heads (unsigned)'
        """
        return f"attention weight in layer {self.layer}, mean over heads (unsigned)"

    def _reduce_layer(self, layer, n_layers, attention, gradient):
        if not -n_layers <= self.layer < n_layers:
            raise ValueError(
                f"layer {self.layer} is out of range; the model has {n_layers} attention layers "
                f"(use 0..{n_layers - 1} or negative indices)."
            )
        if layer != self.layer % n_layers:
            return None  # only the chosen layer leaves its device
        return attention.float().mean(dim=1, keepdim=True), None

    def _relevance(self, attentions, gradients):
        return attentions[0, :, 0]  # the chosen layer, averaged over heads on its device


class AttentionRollout(AttentionMethod):
    """Attention rollout (Abnar & Zuidema, 2020): attention flow through all layers with the residual stream,
    ``0.5·A + 0.5·I`` per layer, heads averaged (unsigned). See :func:`attention_rollout`.

    Example:
        >>> r = AttentionRollout(progress=False).attribute(model, tokenizer, "Not bad at all.", granularity="word")
        >>> r.tokens, r.scores.round(3)  # special tokens dropped, so words sum to less than 1
        (['Not', 'bad', 'at', 'all', '.'], array([[0.09 , 0.148, 0.05 , 0.069, 0.088]]))
    """

    name = "attention_rollout"
    uses_score = False
    description = "attention rollout over all layers (0.5·A + 0.5·I, heads averaged; unsigned)"

    def _reduce_layer(self, layer, n_layers, attention, gradient):
        return attention.float().mean(dim=1, keepdim=True), None  # attention_rollout's head mean, on the device

    def _relevance(self, attentions, gradients):
        return attention_rollout(attentions)  # its mean over the one head left is exact


class GradientWeightedAttention(AttentionMethod):
    """Gradient-weighted attention rollout (Chefer, Gur & Wolf, 2021): attention times the gradient of the target
    score with respect to it, positive part, heads averaged, accumulated over layers rollout-style (``R ← R + Ā·R``,
    from the identity). Unsigned. See :func:`gradient_weighted_rollout`.

    One forward and backward pass per (input, target) row, batched under ``max_batch_tokens``.

    Example:
        >>> method = GradientWeightedAttention(progress=False)
        >>> r = method.attribute(model, tokenizer, "Not bad.", target=["negative", "positive"])
        >>> r.tokens
        ['[CLS]', 'Not', 'bad', '.', '[SEP]']
        >>> r.scores.round(3)  # one row per target: the gradients make the relevance target-specific
        array([[1.029, 0.046, 0.   , 0.016, 0.063],
               [1.189, 0.081, 0.009, 0.013, 0.12 ]])
    """

    name = "gradient_weighted_attention"
    per_target = True
    needs_gradients = True
    description = "gradient-weighted attention relevance: rollout of mean over heads of (A ⊙ ∂score/∂A)⁺ (unsigned)"

    def _reduce_layer(self, layer, n_layers, attention, gradient):
        # gradient_weighted_rollout's per-layer term, Ā = mean over heads of (A ⊙ ∂score/∂A)⁺, on the device
        return (attention.float() * gradient.float()).clamp(min=0).mean(dim=1, keepdim=True), None

    def _relevance(self, attentions, gradients):
        return _accumulate_relevance(attentions[:, :, 0])
