"""Steering: contrastive steering vectors (CAA) and a dose-response of adding a direction to the residual stream.

- :func:`steering_vector`: the difference of the mean activations of two contrastive prompt sets at a layer, at
  each prompt's last token (CAA) or averaged over its tokens. A :class:`SteeringVector` works wherever a direction
  does (:class:`~interp_widgets.interventions.Add`, :class:`~interp_widgets.interventions.Clamp`, :func:`steer`).
- :func:`steer`: for each scale, the greedy generation with the direction added, a behaviour metric on held-out
  prompts (mean and spread over the prompts) and the damage (KL of the next-token distribution on a fixed slice of
  held-out text), as a :class:`~interp_widgets.interventions.steering_result.SteeringResult`.

Every run goes through :func:`~interp_widgets.interventions.intervene`; the model is never changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter
from interp_widgets.interventions.edits import SAEFeature, as_direction, reference_activations
from interp_widgets.interventions.intervene import intervene
from interp_widgets.interventions.points import EditPoint, resolve_point
from interp_widgets.interventions.steering_result import (
    SteeringGenerations,
    SteeringMetric,
    SteeringResult,
    SteeringRun,
)
from interp_widgets.layers import evaluation, register
from interp_widgets.tasks import task_for
from interp_widgets.validation import check_choice, check_int, check_number

POSITIONS = ("last", "mean")
STEER_POSITIONS = ("generated", "all")
UNITS = ("residual_norm", "direction")
#: tokens of held-out text over which the damage (KL unsteered ‖ steered) is averaged by default
DAMAGE_TOKENS = 4096
_DAMAGE_BATCH_TOKENS = 1024  # bounds the (tokens × vocabulary) log-probabilities held at once


@dataclass(frozen=True, eq=False)
class SteeringVector:
    """A steering vector and where it came from: ``vector`` (the layer's width, float32), the canonical ``layer``,
    the ``position`` rule (``"last"`` or ``"mean"``) and the sizes of the two prompt sets.

    It converts to an array, so it is a direction wherever one is taken (``Add(vector, 4.0)``).

    Example:
        >>> from interp_widgets.interventions import Add
        >>> sv = steering_vector(lm, lm_tokenizer, ["I love it", "Great"], ["I hate it", "Awful"], "layer:0")
        >>> sv.layer, tuple(sv.vector.shape), Add(sv, 2.0).direction.shape
        ('layer:0', (32,), torch.Size([32]))
    """

    vector: torch.Tensor
    layer: str
    position: str
    n_positive: int
    n_negative: int

    def __array__(self, dtype=None, copy=None):
        array = self.vector.detach().cpu().numpy()
        return array if dtype is None else array.astype(dtype)

    @property
    def norm(self) -> float:
        """The vector's Euclidean norm.

        Example:
            >>> sv = steering_vector(lm, lm_tokenizer, ["Yes"], ["No"], "layer:1")
            >>> sv.norm > 0
            True
        """
        return float(torch.linalg.vector_norm(self.vector))

    def __repr__(self) -> str:
        return (
            f"SteeringVector({self.layer}, width {self.vector.shape[0]}, norm {self.norm:.4g}, position="
            f"{self.position!r}, {self.n_positive} positive / {self.n_negative} negative prompts)"
        )


def _prompt_list(name: str, prompts) -> list[str]:
    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, Sequence) or not all(isinstance(p, str) for p in prompts):
        raise TypeError(f"{name} must be a list of prompt strings, got {type(prompts).__name__}")
    if not prompts or not all(p.strip() for p in prompts):
        raise ValueError(f"{name} is empty or holds an empty prompt; pass at least one non-empty prompt")
    return list(prompts)


def steering_vector(model: nn.Module, tokenizer, positive, negative, layer, position: str = "last") -> SteeringVector:
    """The contrastive steering vector (CAA): mean activation over ``positive`` minus mean over ``negative``.

    Args:
        model, tokenizer: the model (never changed) and its tokenizer.
        positive, negative: two lists of prompts, paired (the i-th positive prompt contrasts with the i-th
            negative one), so both must have the same length.
        layer: any point :func:`~interp_widgets.interventions.intervene` takes (``"layer:3"``: block 3's output).
        position: ``"last"`` (each prompt's last token that is not a special token, as in CAA) or ``"mean"`` (the
            mean over its non-special tokens).

    Example:
        >>> sv = steering_vector(lm, lm_tokenizer, ["I love it"], ["I hate it"], "layer:1", position="mean")
        >>> sv.position, sv.n_positive
        ('mean', 1)
        >>> steering_vector(lm, lm_tokenizer, ["a", "b"], ["c"], "layer:1")
        Traceback (most recent call last):
        ...
        ValueError: positive has 2 prompts but negative has 1; CAA pairs each positive prompt with a negative one: pass as many of each
    """
    positive, negative = _prompt_list("positive", positive), _prompt_list("negative", negative)
    if len(positive) != len(negative):
        raise ValueError(
            f"positive has {len(positive)} prompts but negative has {len(negative)}; CAA pairs each positive prompt "
            "with a negative one: pass as many of each"
        )
    check_choice("position", position, POSITIONS)
    point = resolve_point(model, layer)
    means = []
    for texts in (positive, negative):
        encodings = ModelAdapter(model, tokenizer).encode_many(texts)
        rows = reference_activations(model, tokenizer, texts, point.name).float()
        per_prompt, start = [], 0
        for enc in encodings:
            acts, keep = rows[start : start + len(enc)], ~torch.as_tensor(np.asarray(enc.special_mask, bool))
            start += len(enc)
            if not bool(keep.any()):
                raise ValueError(f"the prompt {enc.text!r} has only special tokens; pass prompts with text")
            acts = acts[keep]
            per_prompt.append(acts[-1] if position == "last" else acts.mean(0))
        means.append(torch.stack(per_prompt).mean(0))
    return SteeringVector(means[0] - means[1], point.name, position, len(positive), len(negative))


def _resolve_direction(model: nn.Module, direction, point: EditPoint) -> tuple[torch.Tensor, str]:
    """The direction as a float tensor and a label of where it came from."""

    def same_layer(made_at, what: str) -> None:
        if made_at is None:
            return
        name = resolve_point(model, made_at).name
        if name != point.name:
            raise ValueError(
                f"the {what} was made at {name} but you steer at {point.name}; steer at {name}, or pass the vector "
                "itself as a tensor to use it at another layer"
            )

    if isinstance(direction, SteeringVector):
        same_layer(direction.layer, "steering vector")
        return direction.vector.detach().float(), f"steering vector ({direction.position} token)"
    if isinstance(direction, SAEFeature):
        direction = (direction.sae, direction.index)
    if isinstance(direction, tuple) and len(direction) == 2 and hasattr(direction[0], "components_"):
        concepts, index = direction
        components = np.asarray(concepts.components_)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(components):
            raise ValueError(
                f"component {index!r} does not exist: {type(concepts).__name__} has {len(components)} components "
                f"(0..{len(components) - 1}); pass (concepts, index) with an index in range"
            )
        same_layer(getattr(concepts, "layer_", None), f"{type(concepts).__name__}")
        return as_direction(components[int(index)]).float(), f"{type(concepts).__name__} component {int(index)}"
    if hasattr(direction, "components_") and not isinstance(direction, (torch.Tensor, np.ndarray)):
        components = np.asarray(direction.components_)
        if len(components) != 1:
            raise ValueError(
                f"{type(direction).__name__} has {len(components)} components; pass (concepts, index) to steer along "
                "one of them"
            )
        same_layer(getattr(direction, "layer_", None), f"{type(direction).__name__}")
        return as_direction(components[0]).float(), f"{type(direction).__name__} direction"
    return as_direction(direction).float(), "direction"


def _scales(scales) -> np.ndarray:
    if isinstance(scales, (int, float, np.number)) and not isinstance(scales, bool):
        scales = [scales]
    try:
        values = [check_number("scale", s) for s in scales]
    except TypeError as err:
        raise TypeError(f"scales must be a list of numbers, e.g. [-4, -2, 0, 2, 4]; got {scales!r}") from err
    if not values:
        raise ValueError("scales is empty; pass at least one scale, e.g. scales=[-4, -2, 0, 2, 4]")
    return np.asarray(values, dtype=np.float64)


def _completions(name: str, value, n: int) -> list[str]:
    values = [value] * n if isinstance(value, str) else list(value)
    if len(values) != n or not all(isinstance(v, str) and v for v in values):
        raise ValueError(
            f"{name} must be one completion string for every eval prompt, or a list of {n} non-empty strings (one "
            f"per eval prompt); got {value!r}"
        )
    return values


def _logprob(model: nn.Module, adapter: ModelAdapter, prompt_ids: list[int], completion_ids: list[int]) -> float:
    ids = torch.tensor([prompt_ids + completion_ids], device=adapter.device)
    logits = adapter.forward_ids(ids)[0].float()
    logp = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
    return float(logp[torch.arange(len(completion_ids)), torch.tensor(completion_ids, device=logp.device)].sum())


def _logit_difference_metric(adapter, tokenizer, eval_prompts, behaviour, anti_behaviour) -> Callable:
    prompts = [adapter.encode(p).input_ids.tolist() for p in eval_prompts]
    pairs = []
    for good, bad in zip(behaviour, anti_behaviour):
        pairs.append(tuple(tokenizer(c, add_special_tokens=False)["input_ids"] for c in (good, bad)))
    if any(not ids for pair in pairs for ids in pair):
        raise ValueError("a behaviour or anti-behaviour completion has no tokens; pass non-empty completions")

    def metric(model, _tokenizer) -> np.ndarray:
        return np.array(
            [
                _logprob(model, adapter, p, good) - _logprob(model, adapter, p, bad)
                for p, (good, bad) in zip(prompts, pairs)
            ]
        )

    return metric


def _run_metric(metric: Callable, model, tokenizer) -> np.ndarray:
    value = metric(model, tokenizer)
    values = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value, dtype=np.float64)
    values = values.reshape(-1)
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError(
            f"the metric returned {value!r}; it must return a finite number or one finite number per eval prompt"
        )
    return values


def _damage_slice(adapter: ModelAdapter, texts, n_tokens: int) -> list[np.ndarray]:
    """Token ids of the texts in order, cut after ``n_tokens`` tokens in all (a piece has at least 2 tokens and at
    most the model's context)."""
    if texts is None:
        from interp_widgets.demo.text_corpus import load_text_corpus  # the declared exception to the layers

        texts = load_text_corpus("test")
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("damage_texts must be a list of strings (held-out text), or None for the test corpus")
    limit = adapter.context_limit[0]
    pieces, total = [], 0
    for text in texts:
        ids = adapter.tokenizer(text)["input_ids"]  # a text longer than the context keeps its first tokens
        take = min(len(ids), n_tokens - total, limit)
        if take >= 2:
            pieces.append(np.asarray(ids[:take]))
            total += take
        if total >= n_tokens:
            break
    if total < n_tokens:
        raise ValueError(
            f"damage_texts hold only {total} tokens but damage_tokens={n_tokens}; pass more text or a smaller "
            "damage_tokens"
        )
    return pieces


def _batches(adapter: ModelAdapter, pieces: list[np.ndarray]):
    for batch in adapter.length_buckets([len(p) for p in pieces], max_padding=0.0):
        yield torch.as_tensor(np.stack([pieces[i] for i in batch])).to(adapter.device)


def _mean_norm(model, adapter, point: EditPoint, pieces) -> float:
    """Mean norm of the activation at ``point`` over the slice, the first token of each text left out (first tokens
    are attention sinks in many models, with norms far from the rest)."""
    norms: list[torch.Tensor] = []
    handle = register(point.point, lambda m, i, value: norms.append(point.select(value)[:, 1:].float().norm(dim=-1)))
    try:
        for ids in _batches(adapter, pieces):
            adapter.forward_ids(ids)
    finally:
        handle.remove()
    return float(torch.cat([n.reshape(-1) for n in norms]).mean())


def _damage(model, adapter, point: EditPoint, pieces, vectors: list[torch.Tensor], bar) -> np.ndarray:
    """Mean KL(unsteered ‖ steered) of the next-token distribution over every token of the slice, one per vector
    (added at every position)."""
    totals, count = np.zeros(len(vectors)), 0
    for ids in _batches(adapter, pieces):
        clean = torch.log_softmax(adapter.forward_ids(ids).float(), dim=-1)
        count += ids.numel()
        for k, vector in enumerate(vectors):
            with intervene(model, {point.name: lambda x, v=vector: x + v.to(x.dtype)}):
                steered = torch.log_softmax(adapter.forward_ids(ids).float(), dim=-1)
            totals[k] += float((clean.exp() * (clean - steered)).sum())
            bar.update(1)
    return totals / count


def _generate(model, adapter, task, prompt_ids, point: EditPoint, vector, positions: str, max_new_tokens: int):
    if vector is None:
        return task.generate(prompt_ids, max_new_tokens=max_new_tokens)[0]
    passes = [0]

    def add(x: torch.Tensor) -> torch.Tensor:
        passes[0] += 1
        if positions == "generated" and passes[0] == 1:  # the prompt's pass: left alone
            return x
        return x + vector.to(x.dtype)

    with intervene(model, {point.name: add}):
        return task.generate(prompt_ids, max_new_tokens=max_new_tokens)[0]


def steer(
    model: nn.Module,
    tokenizer,
    prompt: str,
    direction,
    layer,
    scales=(-8.0, -4.0, -2.0, 0.0, 2.0, 4.0, 8.0),
    *,
    positions: str = "generated",
    metric: Callable | None = None,
    behaviour=None,
    anti_behaviour=None,
    eval_prompts=None,
    max_new_tokens: int = 20,
    unit: str = "residual_norm",
    damage_tokens: int = DAMAGE_TOKENS,
    damage_texts=None,
    progress: bool = True,
) -> SteeringResult:
    """Add ``scale`` × ``direction`` at ``layer`` for each scale: the generation, a behaviour metric and the damage.

    Args:
        model, tokenizer: a causal language model (never changed) and its tokenizer.
        prompt: the prompt of the greedy generations.
        direction: a tensor / array of the layer's width, a :class:`SteeringVector`, ``(concepts, index)`` (a
            :class:`~interp_widgets.concepts.ConceptModel` or SAE component: its ``components_[index]``), an
            :class:`~interp_widgets.interventions.SAEFeature` (its decoder row), or a one-direction concept model
            such as ``probe.as_concepts()``. A concept model or steering vector made at another layer is refused.
        layer: the point steered, any spelling :func:`~interp_widgets.interventions.intervene` takes.
        scales: the doses. With ``unit="residual_norm"`` (the default) a scale is in units of the mean norm of
            the activation at ``layer`` (over the damage slice, first tokens left out) and the direction is
            normalised: the vector added is scale × norm × d̂. With ``unit="direction"`` it is scale × direction
            as given (a steering vector keeps its own norm).
        positions: ``"generated"`` (the default) adds the vector to the generated tokens only (the prompt's pass is
            left alone, so the first new token, predicted from the prompt, does not change); ``"all"`` also to the
            prompt's tokens.
        metric: None (the default) for the mean logit difference of ``behaviour`` over ``anti_behaviour`` on
            ``eval_prompts``, or a callable ``metric(model, tokenizer) -> float or array`` (one value per prompt of
            its own) run once unsteered and once per scale with the vector at every position. Without a metric nor
            completions, the result has no metric (NaN). The metric is never the projection on the direction,
            which grows with the scale by construction.
        behaviour, anti_behaviour: the completions of the default metric: one string for every eval prompt or a
            list of one per prompt, appended to the prompt's tokens (tokenised on their own: start with a space
            where a word starts). A prompt scores log p(behaviour) − log p(anti_behaviour) (summed over the
            completion's tokens; for one-token completions that is exactly the logit difference), with the vector
            at every position.
        eval_prompts: the held-out prompts of the default metric.
        max_new_tokens: the length of each greedy generation.
        unit: ``"residual_norm"`` or ``"direction"`` (see ``scales``).
        damage_tokens: how many tokens of held-out text the damage is averaged over (default 4,096).
        damage_texts: the held-out text, a list of strings taken in order until ``damage_tokens`` tokens; None
            (the default) for the first 4,096 tokens of ``demo.load_text_corpus("test")`` (its paragraphs in stored
            order, each tokenised on its own, with the tokenizer's special tokens, and cut at the model's context).
        progress: show a tqdm bar.

    The damage at a scale is KL(unsteered ‖ steered) of the next-token distribution, averaged over every token of
    the slice, with the vector at every position: 0 at scale 0, exactly.

    Example:
        >>> sv = steering_vector(lm, lm_tokenizer, ["I love it"], ["I hate it"], "layer:1")
        >>> result = steer(lm, lm_tokenizer, "The room was", sv, "layer:1", scales=[0, 4], behaviour=" good",
        ...                anti_behaviour=" bad", eval_prompts=["It was", "The food was"], max_new_tokens=4,
        ...                damage_texts=texts, damage_tokens=16, progress=False)
        >>> float(result.damage[0]), bool(result.damage[1] > 0), len(result.generations.steered)
        (0.0, True, 2)
        >>> steer(lm, lm_tokenizer, "Hi", sv, "layer:1", scales=[])
        Traceback (most recent call last):
        ...
        ValueError: scales is empty; pass at least one scale, e.g. scales=[-4, -2, 0, 2, 4]
    """
    from tqdm.auto import tqdm

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    values = _scales(scales)
    check_choice("positions", positions, STEER_POSITIONS)
    check_choice("unit", unit, UNITS)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    damage_tokens = check_int("damage_tokens", damage_tokens, minimum=2)
    point = resolve_point(model, layer)
    d, label = _resolve_direction(model, direction, point)
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=_DAMAGE_BATCH_TOKENS)
    task = task_for(adapter)
    if not (task.causal and task.scores_next_token):
        raise ValueError(
            f"steer generates text and scores next tokens, but this model is a {task.name}; pass a causal language "
            "model (an AutoModelForCausalLM)"
        )
    if metric is None and (behaviour is not None or anti_behaviour is not None or eval_prompts is not None):
        if behaviour is None or anti_behaviour is None or eval_prompts is None:
            raise ValueError(
                "the default metric needs behaviour=, anti_behaviour= and eval_prompts= together (completions "
                "and held-out prompts); pass all three, or metric= a callable"
            )
        eval_prompts = _prompt_list("eval_prompts", eval_prompts)
        behaviour = _completions("behaviour", behaviour, len(eval_prompts))
        anti_behaviour = _completions("anti_behaviour", anti_behaviour, len(eval_prompts))
        metric_fn, metric_name = (
            _logit_difference_metric(adapter, tokenizer, eval_prompts, behaviour, anti_behaviour),
            "logit difference (behaviour − anti-behaviour)",
        )
    elif metric is not None:
        if not callable(metric):
            raise TypeError(f"metric must be None or a callable metric(model, tokenizer), got {type(metric).__name__}")
        metric_fn, metric_name = metric, getattr(metric, "__name__", "metric")
    else:
        metric_fn, metric_name = None, None

    prompt_ids = adapter.encode(prompt).input_ids.tolist()
    with evaluation(model), torch.no_grad():
        width = _width(model, adapter, point, prompt_ids)
        if d.shape[0] != width:
            raise ValueError(
                f"the direction has width {d.shape[0]} but {point.name} has width {width}; pass a direction of the "
                f"layer's width (one computed or fitted at {point.name}), or steer the layer it was made for"
            )
        pieces = _damage_slice(adapter, damage_texts, damage_tokens)
        n_batches = len(adapter.length_buckets([len(p) for p in pieces], max_padding=0.0))
        steps = 1 + len(values) * (1 + n_batches) + (len(values) + 1 if metric_fn else 0)
        with tqdm(total=steps, desc="steering", disable=not progress, leave=False) as bar:
            norm = _mean_norm(model, adapter, point, pieces)
            bar.update(1)
            run = SteeringRun(
                prompt=prompt,
                layer=point.name,
                direction=d.cpu().numpy().astype(np.float32),
                direction_label=label,
                unit=unit,
                residual_norm=norm,
                positions=positions,
                max_new_tokens=max_new_tokens,
                damage_tokens=damage_tokens,
            )
            # the vectors added are the run's own (SteeringRun.vector), so the result records exactly what was done
            vectors = [torch.as_tensor(run.vector(float(s))).to(adapter.device) for s in values]
            damage = _damage(model, adapter, point, pieces, vectors, bar)
            metric_values, unsteered_metric = None, None
            if metric_fn is not None:
                unsteered_metric = _run_metric(metric_fn, model, tokenizer)
                bar.update(1)
                rows = []
                for vector in vectors:
                    with intervene(model, {point.name: lambda x, v=vector: x + v.to(x.dtype)}):
                        rows.append(_run_metric(metric_fn, model, tokenizer))
                    bar.update(1)
                if len({len(r) for r in rows + [unsteered_metric]}) != 1:
                    raise ValueError("the metric returned a different number of values at different scales")
                metric_values = np.stack(rows)
            unsteered = _generate(model, adapter, task, prompt_ids, point, None, positions, max_new_tokens)
            steered = []
            for vector in vectors:
                steered.append(_generate(model, adapter, task, prompt_ids, point, vector, positions, max_new_tokens))
                bar.update(1)

    def texts_of(ids) -> list[str]:
        return [tokenizer.decode([int(i)]) for i in ids]

    generations = SteeringGenerations(
        prompt_tokens=texts_of(prompt_ids),
        unsteered=texts_of(unsteered),
        steered=[texts_of(ids) for ids in steered],
        unsteered_ids=[int(i) for i in unsteered],
        steered_ids=[[int(i) for i in ids] for ids in steered],
    )
    result_metric = None
    if metric_values is not None:
        result_metric = SteeringMetric(name=metric_name, unsteered=unsteered_metric, values=metric_values)
    return SteeringResult(run=run, scales=values, generations=generations, metric=result_metric, damage=damage)


def _width(model, adapter: ModelAdapter, point: EditPoint, prompt_ids: list[int]) -> int:
    seen: list[int] = []
    handle = register(point.point, lambda m, i, value: seen.append(point.select(value).shape[-1]))
    try:
        adapter.forward_ids(torch.tensor([prompt_ids], device=adapter.device))
    finally:
        handle.remove()
    return seen[0]
