"""The base class every attribution method derives from.

A method holds its parameters (set in ``__init__``) and explains inputs with :meth:`Attributor.attribute`, which
wraps the model in a :class:`~interp_widgets.adapter.ModelAdapter`, resolves the targets, runs the method in batches
and returns one :class:`AttributionResult` per input (a single result for a single string).

Every concrete subclass registers itself in :data:`METHODS` under its ``name`` (see
:mod:`interp_widgets.registry`), which is how :func:`~interp_widgets.attribution.attribute` and
:func:`~interp_widgets.attribution.list_methods` find it. This module is also the public home of what a new method
works with: :class:`ExplainedInput` (an input and its targets), :func:`evaluate_rows` and :class:`RowChunk` (batched
scoring of modified embeddings), :func:`reduce_embedding_dim` and :func:`progress_bar`. The engines that most new
methods extend are :class:`~interp_widgets.attribution.GradientMethod`,
:class:`~interp_widgets.attribution.PerturbationMethod` and :class:`~interp_widgets.attribution.AttentionMethod`.

Example:
    >>> from interp_widgets.attribution import IntegratedGradients
    >>> IntegratedGradients(n_steps=32, progress=False).attribute(model, tokenizer, "Not bad at all.")
    AttributionResult(method='integrated_gradients', 7 tokens, targets=[positive (p=0.421)])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from interp_widgets._inputs import check_texts, input_items
from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution.result import AttributionCollection, AttributionResult, Generation, MethodRun
from interp_widgets.attribution.rows import RowChunk, check_score_kind, evaluate_rows
from interp_widgets.layers import evaluation
from interp_widgets.registry import Registry
from interp_widgets.tasks import Explain, ExplainedInput, task_for
from interp_widgets.text_units import GRANULARITIES
from interp_widgets.validation import check_choice

__all__ = [
    "METHODS",
    "REDUCTIONS",
    "Attributor",
    "ExplainedInput",
    "RowChunk",
    "evaluate_rows",
    "progress_bar",
    "reduce_embedding_dim",
]

#: Every attribution method by name, filled by the methods themselves (a read-only, live mapping).
METHODS = Registry("method")

REDUCTIONS = {
    "sum": "sum over embedding dimension (signed)",
    "norm": "L2 norm over embedding dimension (unsigned)",
    "abs": "absolute value of the sum over embedding dimension (unsigned)",
}


def reduce_embedding_dim(values: torch.Tensor, reduce: str) -> torch.Tensor:
    """Collapse per-dimension attributions ``(..., T, D)`` into one score per token.

    Example:
        >>> reduce_embedding_dim(torch.ones(3, 4), "norm")
        tensor([2., 2., 2.])
    """
    if reduce == "sum":
        return values.sum(-1)
    if reduce == "norm":
        return values.norm(dim=-1)
    if reduce == "abs":
        return values.sum(-1).abs()
    raise ValueError(f"unknown reduce {reduce!r}; use one of {list(REDUCTIONS)}")


def as_adapter(model, tokenizer, max_batch_tokens: int | None) -> ModelAdapter:
    """Reuse a given adapter or wrap ``model`` and ``tokenizer`` in one."""
    if isinstance(model, ModelAdapter):
        if max_batch_tokens is not None and max_batch_tokens != model.max_batch_tokens:
            return ModelAdapter(model.model, model.tokenizer, max_batch_tokens=max_batch_tokens)
        return model
    if tokenizer is None:
        raise TypeError("pass the model's tokenizer: attribute(model, tokenizer, inputs)")
    return ModelAdapter(
        model, tokenizer, **({} if max_batch_tokens is None else {"max_batch_tokens": max_batch_tokens})
    )


class Attributor:
    """Base class of attribution methods.

    A subclass that sets ``name`` registers itself in :data:`METHODS` (classes without their own ``name``, such as
    the engine bases, are abstract and do not). Most methods extend an engine:
    :class:`~interp_widgets.attribution.GradientMethod`, :class:`~interp_widgets.attribution.PerturbationMethod` or
    :class:`~interp_widgets.attribution.AttentionMethod`. A method that needs its own engine subclasses
    ``Attributor`` directly.

    Subclass API:
        ``__init__``: take the method's parameters as keyword arguments, call ``super().__init__(score=score,
        progress=progress)`` and store them as attributes; :meth:`params` records them in every result.

        ``_attribute_inputs(adapter, problems, *, score, granularity) -> list[AttributionResult]``: explain every
        :class:`ExplainedInput` of ``problems`` (one result per input, one score row per target). Score rows of
        modified embeddings with :func:`evaluate_rows`, and build each token-level result with :meth:`_result`.
        Token-level methods (``unit_level = False``) return token scores and :meth:`attribute` aggregates them to
        ``granularity``; unit-level methods return results at ``granularity`` themselves.

    Attributes:
        name: method name, the key in :data:`METHODS`, recorded in results.
        family: ``"gradient"``, ``"perturbation"``, ``"attention"`` or ``"other"`` (shown by ``list_methods``).
        signed: whether scores carry a sign (positive = supports the target).
        needs_gradients: whether the method runs backward passes.
        unit_level: True for methods that act on words/sentences directly (the perturbation methods).
        uses_score: whether the scores depend on the explained score (False for plain attention weights); only
            such methods accept ``contrast=``.

    Example:
        >>> from interp_widgets.attribution import attribute
        >>> class Constant(Attributor):
        ...     name = "constant"
        ...     def _attribute_inputs(self, adapter, problems, *, score, granularity):
        ...         return [self._result(p, np.ones((p.n_targets, p.length)), score_meaning="1", score=score)
        ...                 for p in problems]
        >>> r = attribute(model, tokenizer, "Good.", method="constant")
        >>> r.tokens, r.scores
        (['[CLS]', 'Good', '.', '[SEP]'], array([[1., 1., 1., 1.]]))
        >>> attribute(model, tokenizer, "Good.", method="constant", granularity="sentence").scores  # summed
        array([[2.]])
        >>> METHODS.remove("constant") is Constant
        True
    """

    name = "attribution"
    family = "other"
    signed = True
    needs_gradients = False
    unit_level = False
    uses_score = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        METHODS.add_subclass(cls)

    def __init__(self, *, score: str | None = None, progress: bool = True):
        self.score = None if score is None else check_score_kind(score)
        self.progress = progress

    # ---------------------------------------------------------------------------------------------- public API
    def attribute(
        self,
        model,
        tokenizer=None,
        inputs: str | Sequence[str] = "",
        *,
        messages=None,
        target=None,
        continuation=None,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        seed: int = 0,
        mask_position: int | None = None,
        granularity: str = "token",
        aggregation: str = "sum",
        true_labels: Sequence[str] | None = None,
        max_batch_tokens: int | None = None,
        contrast=None,
        contrast_alignment: Sequence[tuple[int, int]] | None = None,
    ) -> AttributionResult | AttributionCollection:
        """Explain one text (returns a result) or a list of texts (returns a collection).

        Args:
            model: a Hugging Face classifier, causal LM or masked LM, or a ModelAdapter.
            tokenizer: its fast tokenizer (omit when ``model`` is an adapter).
            inputs: a text or a list of texts; a chat conversation (a list of ``{"role", "content"}`` messages)
                or a list of conversations, rendered once by the tokenizer's chat template.
            messages: the same as ``inputs`` for chat conversations (``attribute(model, tokenizer, messages=[...])``).
            target: classifier class (index, label name, list, or None = predicted); masked-LM token.
            continuation: causal and encoder–decoder LMs: forced continuation (target) text or ids; None =
                generate. A conversation that ends with an assistant message explains that reply (forced);
                ``max_new_tokens=0`` turns generation off. An encoder–decoder explains every target token over the
                source tokens and the earlier target tokens (``result.source_scores``, ``result.target_scores``).
            granularity: ``token``, ``word``, ``sentence`` or ``turn`` (one unit per chat message); ``aggregation``
                sum, mean or maxabs.
            contrast: a foil, to explain "why the target rather than the foil" (causal and masked LMs): every
                score becomes ``score(target) − score(foil)`` (by default ``log p(target) − log p(foil)``). A foil
                continuation as text or ids, one one-token foil per target, or one foil per input; a foil of another
                length is right-aligned with the targets as inseq does (see
                :mod:`interp_widgets.tasks.foils`). The result records it (``foil_labels``, ``foil_probs``).
            contrast_alignment: ``[(target step, foil index), ...]`` pairs overriding that alignment.

        Every result records the model passes of the whole call in ``params["passes"]``: ``forward`` (model
        calls) and ``forward_rows`` (sequences they ran), ``backward`` (backward passes, each possibly batched over
        several targets) and ``backward_rows`` (gradients: one per row and target), ``targets`` (targets explained
        by the call) and ``preparation_forward`` (passes spent generating or scoring the targets beforehand).
        Divide by ``targets`` for the passes per explained token.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great!", "Awful."], target="positive")
            >>> results
            AttributionCollection(2 results, method='saliency')
            >>> [(r.target_labels, round(float(r.target_probs[0]), 3)) for r in results]
            [(['positive'], 0.508), (['positive'], 0.494)]
            >>> results[1].tokens, results[1].scores.round(3)
            (['[CLS]', 'Awful', '.', '[SEP]'], array([[2.73 , 1.114, 1.794, 1.837]]))
            >>> results[0].params["passes"]  # both texts in one forward and one backward pass
            {'forward': 1, 'forward_rows': 2, 'backward': 1, 'backward_rows': 2, 'targets': 2, 'preparation_forward': 1}
            >>> chat = [{"role": "user", "content": "Is it good?"}, {"role": "assistant", "content": "Yes."}]
            >>> reply = Saliency(progress=False).attribute(chat_lm, chat_tokenizer, messages=chat, granularity="turn")
            >>> reply.tokens, reply.turn_roles  # the template's default system prompt is a turn of its own
            (['You are a tiny helpful assistant.', 'Is it good?', 'Yes.'], ['system', 'user', 'assistant'])

            Why " clean" rather than " cold"? The score of each step is log p(target) − log p(foil):

            >>> from interp_widgets.attribution import InputXGradient
            >>> why = InputXGradient(progress=False).attribute(lm, lm_tokenizer, "The room was", continuation=" clean",
            ...                                                 contrast=" cold")
            >>> why.target_labels, why.foil_labels, why.params["score"]
            (["' cle'@3", "'an'@4"], [' co', 'ld'], 'log_probability')
        """
        check_choice("granularity", granularity, GRANULARITIES)
        if contrast is not None and not self.uses_score:
            raise ValueError(
                f"{self.name} does not depend on the explained score, so a foil cannot change it; use a "
                "gradient or perturbation method (or gradient_weighted_attention) with contrast="
            )
        if messages is not None:
            if not (isinstance(inputs, str) and inputs == ""):
                raise TypeError("pass the conversation once: as inputs or as messages=, not both")
            inputs = messages
        check_texts(inputs, name="inputs", call='attribute(model, tokenizer, "a text")')
        adapter = as_adapter(model, tokenizer, max_batch_tokens)
        single = input_items(inputs)[1]
        task = task_for(adapter)
        options = Explain(
            target=target,
            continuation=continuation,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            seed=seed,
            mask_position=mask_position,
            true_labels=true_labels,
            contrast=contrast,
            contrast_alignment=contrast_alignment,
        )
        with evaluation(adapter.model):
            with adapter.counting() as preparation:
                problems = task.explain(inputs, options)
            score = self.score or task.default_score
            with adapter.counting() as count:
                results = self._attribute_inputs(adapter, problems, score=score, granularity=granularity)
        passes = {
            **count.as_dict(),
            "targets": sum(p.n_targets for p in problems),
            "preparation_forward": preparation.forward,
        }
        for result in results:
            result.params["passes"] = dict(passes)
        if not self.unit_level and granularity != "token":
            results = [r.aggregate(granularity, aggregation) for r in results]
        return results[0] if single else AttributionCollection(results)

    @property
    def scores_signed(self) -> bool:
        """Whether this instance's scores carry a sign (the class's ``signed``, unless a parameter removes it).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> Saliency().scores_signed, Saliency(reduce="sum").scores_signed
            (False, True)
        """
        return self.signed

    # ---------------------------------------------------------------------------------------------- subclass API
    def params(self) -> dict[str, Any]:
        """The method's parameters, recorded in every result (subclasses add derived entries).

        Example:
            >>> from interp_widgets.attribution import Occlusion
            >>> Occlusion(window=2).params()
            {'score': None, 'baseline': 'pad', 'window': 2}
        """
        return {k: v for k, v in vars(self).items() if k != "progress" and not k.startswith("_")}

    def _attribute_inputs(
        self, adapter: ModelAdapter, problems: list[ExplainedInput], *, score: str, granularity: str
    ) -> list[AttributionResult]:
        """Explain every input of ``problems``; see "Subclass API" in the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} must implement _attribute_inputs or extend an engine base")

    def _result(
        self, problem: ExplainedInput, scores: np.ndarray, *, score_meaning: str, score: str, **extra
    ) -> AttributionResult:
        """Build a token-level result from ``scores`` ``(targets, tokens)``, setting NaN for sources a target cannot
        see; ``score_meaning`` says what the scores mean, ``extra`` adds values by their flat name (such as
        ``completeness_error``)."""
        scores = np.asarray(scores, dtype=np.float64).copy()
        for row, visible in enumerate(problem.visible):
            scores[row, int(visible) :] = np.nan
        result = AttributionResult(
            layout=problem.encoding.layout,
            scores=scores,
            targets=problem.targets,
            run=MethodRun(self.name, {**self.params(), "score": score}, score_meaning, self.scores_signed),
            contrast_info=problem.contrast_info,
            generation=None
            if problem.generated_mask is None and problem.source_mask is None
            else Generation(
                generated_mask=problem.generated_mask,
                positions=problem.target_positions if problem.generated_mask is not None else None,
                source_mask=problem.source_mask,
            ),
            true_label=problem.true_label,
        )
        return result.replace(**extra) if extra else result


def progress_bar(enabled: bool, total: int, desc: str):
    """A tqdm.auto bar, or ``None`` when disabled or when the work is tiny.

    Example:
        >>> progress_bar(True, 10, "saliency") is None
        True
    """
    if not enabled or total < 64:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="eval", leave=False)
