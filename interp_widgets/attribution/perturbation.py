"""Perturbation attribution methods on units (tokens, words or sentences): occlusion, LIME, KernelSHAP and Sobol.

All methods share one engine. For each input and target, a method designs binary masks over the units the target
can see (``True`` keeps a unit, ``False`` replaces all its tokens' embeddings by the baseline embedding; special
tokens are never perturbed). Every distinct mask is evaluated once, through the same batched, length-bucketed,
``inference_mode`` evaluation as the gradient methods (capped by ``max_batch_tokens``), and the method turns the
mask scores into one score per unit. Masks depend only on ``seed`` and the number of units, so results do not depend
on batching, on the other inputs of the call, or on the other targets.

In generation, a unit whose tokens all come after the position predicting target ``t`` is NaN for that target and
is never perturbed for it; perturbations also never touch tokens the target cannot see.

Example:
    >>> result = KernelShap(progress=False).attribute(model, tokenizer, "Not bad at all.", granularity="word")
    >>> result.tokens, result.scores.round(3)
    (['Not', 'bad', 'at', 'all', '.'], array([[ 0.02 , -0.098,  0.118,  0.054, -0.034]]))
    >>> result.score_delta.round(3), bool(abs(result.completeness_error[0]) < 1e-9)
    (array([0.06]), True)
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.text_units import Encoding
from interp_widgets.attribution.base import Attributor, progress_bar
from interp_widgets.attribution.gradient import BASELINES, baseline_embeddings
from interp_widgets.attribution.rows import RowChunk, evaluate_rows
from interp_widgets.tasks import ExplainedInput
from interp_widgets.attribution.result import AttributionResult
from interp_widgets.text_units import unit_members
from interp_widgets.validation import check_int


def unit_tokens(encoding: Encoding, granularity: str) -> list[np.ndarray]:
    """Token indices of every unit of an encoding, in the column order of ``AttributionResult.aggregate``.

    Example:
        >>> encoding = adapter.encode("Unforgettable film")
        >>> encoding.tokens
        ['[CLS]', 'Un', 'for', 'get', 'table', 'film', '[SEP]']
        >>> unit_tokens(encoding, "word")
        [array([1, 2, 3, 4]), array([5])]
        >>> unit_tokens(encoding, "sentence")
        [array([1, 2, 3, 4, 5])]
    """
    return unit_members(encoding.special_mask, encoding.word_ids, encoding.sentence_ids, granularity, encoding.turn_ids)


def _check_baseline(baseline):
    if isinstance(baseline, str) and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; use one of {BASELINES}, an embedding tensor or a callable")
    return baseline


class PerturbationMethod(Attributor):
    """Engine of the perturbation methods: per-target mask designs over the visible units, batched evaluation of
    every distinct mask, per-unit estimates.

    Units are tokens, words or sentences (the call's ``granularity``; these methods are unit-level). A mask row
    keeps a unit (``True``) or replaces all its tokens' embeddings by the baseline (``False``); special tokens are
    never perturbed, and neither are tokens a target cannot see.

    Subclass API (set ``name`` to register the method):
        ``masks(n_units) -> ndarray``: the boolean design ``(rows, n_units)`` for a target that sees ``n_units``
        units. Must be deterministic given the parameters (use ``self._rng(n_units)``, seeded by ``self.seed``).

        ``_estimate(masks, values) -> (unit_scores, extra)``: turn the target score of every mask row
        (``values``, shape ``(rows,)``) into ``n_units`` scores, plus a dict of per-target numbers named in
        ``extra_fields`` (recorded on the result).

        ``_input_params(n_units) -> dict``: result parameters that depend on the inputs (optional).

        ``description`` (class attribute): what the scores mean, recorded as the result's ``reduce``.

        ``extra_fields`` (class attribute): names of the per-target numbers ``_estimate`` returns.

    Example:
        >>> from interp_widgets.attribution import METHODS
        >>> class KeepOnly(PerturbationMethod):
        ...     "The score with only that unit kept, minus the score with none kept (signed)."
        ...     name = "keep_only"
        ...     description = "f(only the unit) − f(baseline) (signed)"
        ...     def masks(self, n_units):
        ...         return np.vstack([np.zeros((1, n_units), bool), np.eye(n_units, dtype=bool)])
        ...     def _estimate(self, masks, values):
        ...         return values[1:] - values[0], {}
        >>> KeepOnly().masks(2).astype(int)
        array([[0, 0],
               [1, 0],
               [0, 1]])
        >>> METHODS.remove("keep_only") is KeepOnly
        True
    """

    family = "perturbation"
    unit_level = True
    description = ""
    extra_fields: tuple[str, ...] = ()

    def __init__(self, baseline="pad", *, score: str | None = None, progress: bool = True):
        super().__init__(score=score, progress=progress)
        self.baseline = _check_baseline(baseline)

    def params(self) -> dict[str, Any]:
        params = super().params()
        if not isinstance(self.baseline, str):
            params["baseline"] = "custom"
        return params

    def _rng(self, n_units: int) -> np.random.Generator:
        """A generator seeded by ``seed`` and the number of units (random methods set ``self.seed``)."""
        return np.random.default_rng([self.seed, n_units])

    def masks(self, n_units: int) -> np.ndarray:
        """The boolean masks ``(rows, n_units)`` this method evaluates for a target that sees ``n_units`` units.

        ``True`` keeps a unit, ``False`` replaces it by the baseline. Deterministic given ``seed``.

        Example:
            >>> Occlusion(window=2).masks(3).astype(int)
            array([[1, 1, 1],
                   [0, 0, 1],
                   [1, 0, 0]])
        """
        raise NotImplementedError

    def _estimate(self, masks: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        raise NotImplementedError

    def _input_params(self, n_units: list[int]) -> dict[str, Any]:
        """Parameters of one result that depend on its inputs (``n_units`` visible units per target)."""
        return {}

    # ---------------------------------------------------------------------------------------------- engine
    def _attribute_inputs(
        self, adapter: ModelAdapter, problems: list[ExplainedInput], *, score: str, granularity: str
    ) -> list[AttributionResult]:
        with torch.no_grad():
            inputs = [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0].detach() for p in problems]
            bases = [baseline_embeddings(adapter, p.encoding, self.baseline).detach() for p in problems]
        units = [unit_tokens(p.encoding, granularity) for p in problems]
        plans = [
            [self._plan(problem, item_units, t) for t in range(problem.n_targets)]
            for problem, item_units in zip(problems, units)
        ]
        starts = [np.cumsum([0] + [len(plan["distinct"]) for plan in item_plans]) for item_plans in plans]
        values = [[np.empty(len(plan["distinct"])) for plan in item_plans] for item_plans in plans]

        def build(item, start, stop):
            rows = np.arange(start, stop)
            target_rows = np.searchsorted(starts[item], rows, side="right") - 1
            x, base = inputs[item], bases[item]
            keep = np.ones((len(rows), len(x)), dtype=bool)
            for t in np.unique(target_rows):
                plan = plans[item][t]
                sel = target_rows == t
                distinct = plan["distinct"][rows[sel] - starts[item][t]]
                keep[np.ix_(sel, plan["tokens"])] = distinct[:, plan["token_unit"]]
            keep_t = torch.as_tensor(keep, device=x.device)[:, :, None]
            return torch.where(keep_t, x, base), target_rows

        def consume(chunk: RowChunk, scores, grads):
            rows = np.arange(chunk.start, chunk.stop)
            target_rows = np.searchsorted(starts[chunk.item], rows, side="right") - 1
            for row, t, value in zip(rows, target_rows, scores.double().cpu().numpy()):
                values[chunk.item][t][row - starts[chunk.item][t]] = value

        n_rows = [int(s[-1]) for s in starts]
        bar = progress_bar(self.progress, sum(n_rows), self.name)
        try:
            evaluate_rows(adapter, problems, n_rows, build, consume, score=score, with_grad=False, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        return [
            self._unit_result(problem, item_units, item_plans, item_values, score, granularity)
            for problem, item_units, item_plans, item_values in zip(problems, units, plans, values)
        ]

    def _plan(self, problem: ExplainedInput, units: list[np.ndarray], target: int) -> dict[str, np.ndarray]:
        """The visible units of one target, its masks, the distinct masks to evaluate and the token mapping."""
        visible_tokens = int(problem.visible[target])
        visible = np.array([k for k, tokens in enumerate(units) if tokens.min() < visible_tokens], dtype=np.int64)
        masks = self.masks(len(visible)) if len(visible) else np.ones((0, 0), bool)
        distinct, inverse = np.unique(masks, axis=0, return_inverse=True)
        tokens, token_unit = [], []
        for column, unit in enumerate(visible):
            members = units[unit][units[unit] < visible_tokens]
            tokens.extend(members.tolist())
            token_unit.extend([column] * len(members))
        return {
            "visible": visible,
            "masks": masks,
            "distinct": distinct.reshape(-1, len(visible)),
            "inverse": inverse.reshape(-1),
            "tokens": np.asarray(tokens, dtype=np.int64),
            "token_unit": np.asarray(token_unit, dtype=np.int64),
        }

    def _unit_result(self, problem, units, plans, values, score, granularity) -> AttributionResult:
        n_targets = problem.n_targets
        scores = np.full((n_targets, len(units)), np.nan)
        extras = {name: np.zeros(n_targets) for name in self.extra_fields}
        for t, (plan, distinct_values) in enumerate(zip(plans, values)):
            if len(plan["visible"]) == 0:
                continue
            unit_scores, extra = self._estimate(plan["masks"], distinct_values[plan["inverse"]])
            scores[t, plan["visible"]] = unit_scores
            for name, value in extra.items():
                extras[name][t] = value
        token_level = self._result(
            problem, np.zeros((n_targets, problem.length)), score_meaning=self.description, score=score, **extras
        )
        structure = token_level.aggregate(granularity)
        if structure.scores.shape != scores.shape:  # pragma: no cover - unit_tokens mirrors aggregate
            raise RuntimeError(f"unit mismatch: {structure.scores.shape[1]} aggregated units, {len(units)} perturbed")
        params = {**self.params(), "score": score, **self._input_params([len(plan["visible"]) for plan in plans])}
        return structure.replace(scores=scores, params=params)


class Occlusion(PerturbationMethod):
    """Occlusion: replace a sliding window of units by the baseline and record the drop in the target score (signed).

    The score of a unit is ``f(x) − f(x with the window occluded)``, averaged over the windows that cover the unit
    (as Captum does). Windows slide with stride 1 over the units in text order; when there are fewer units than
    ``window``, one window covers them all.

    Args:
        window: units per window.
        baseline: ``pad``, ``mask``, ``unk``, ``zero``, an embedding ``(D,)`` or ``(T, D)``, or a callable.

    Example:
        >>> occlusion = Occlusion(window=1, baseline="mask", progress=False)
        >>> r = occlusion.attribute(model, tokenizer, "Not bad.", granularity="word")
        >>> r
        AttributionResult(method='occlusion', 3 words, targets=[positive (p=0.568)])
        >>> r.tokens, r.scores.round(3)
        (['Not', 'bad', '.'], array([[-0.008, -0.715, -0.039]]))
    """

    name = "occlusion"
    description = "f(x) − f(x with a window of units occluded), mean over covering windows (signed)"

    def __init__(self, window: int = 1, baseline="pad", *, score: str | None = None, progress: bool = True):
        super().__init__(baseline, score=score, progress=progress)
        self.window = check_int("window", window, minimum=1)

    def masks(self, n_units: int) -> np.ndarray:
        """The unperturbed input, then one mask per window position.

        Example:
            >>> Occlusion(window=1).masks(2).astype(int)
            array([[1, 1],
                   [0, 1],
                   [1, 0]])
        """
        width = min(self.window, n_units)
        starts = np.arange(n_units - width + 1)
        masks = np.ones((1 + len(starts), n_units), dtype=bool)
        for row, start in enumerate(starts, start=1):
            masks[row, start : start + width] = False
        return masks

    def _estimate(self, masks, values):
        drops = values[0] - values[1:]
        occluded = ~masks[1:]
        return (occluded * drops[:, None]).sum(0) / occluded.sum(0), {}


class Lime(PerturbationMethod):
    """LIME: a weighted linear surrogate of the target score on binary unit masks (signed).

    The first sample is the input itself; each other sample removes ``k`` units (``k`` uniform in ``1..M``, then a
    uniform subset of that size), as LIME's text explainer does. A sample ``z`` (1 = unit kept) is weighted by
    ``exp(−d² / (2 · kernel_width²))`` where ``d = 1 − cos(z, 1)`` is its cosine distance to the input (1 for the empty
    mask); LIME's text default, ``kernel_width=0.25``. The scores are the coefficients of ``model`` (any scikit-learn
    linear regressor accepting ``sample_weight``; default ``Ridge(alpha=1.0)``) fitted on ``z``, so a positive score
    means keeping the unit raises the target score.

    Example:
        >>> from sklearn.linear_model import Lasso
        >>> r = Lime(n_samples=300, model=Lasso(alpha=0.01), progress=False).attribute(model, tokenizer, "Not bad.")
        >>> r.tokens, r.scores.round(3) + 0.0  # the Lasso surrogate keeps one unit (+ 0.0 turns -0.0 into 0.0)
        (['Not', 'bad', '.'], array([[ 0.   , -0.067,  0.   ]]))
        >>> r.params["model"]
        'Lasso(alpha=0.01)'
    """

    name = "lime"
    description = "coefficient of the unit in a weighted linear surrogate of the score (signed)"

    def __init__(
        self,
        n_samples: int = 256,
        kernel_width: float = 0.25,
        model=None,
        baseline="pad",
        *,
        seed: int = 0,
        score: str | None = None,
        progress: bool = True,
    ):
        super().__init__(baseline, score=score, progress=progress)
        self.seed = check_int("seed", seed, minimum=0)
        self.n_samples = check_int("n_samples", n_samples, minimum=1)
        if not isinstance(kernel_width, (int, float)) or isinstance(kernel_width, bool) or not kernel_width > 0:
            raise ValueError(f"kernel_width must be a number > 0, got {kernel_width!r}")
        self.kernel_width = float(kernel_width)
        self.model = self._check_model(model)

    @staticmethod
    def _check_model(model):
        from sklearn.base import is_regressor
        from sklearn.linear_model import Ridge
        from sklearn.utils.validation import has_fit_parameter

        if model is None:
            return Ridge(alpha=1.0)
        if not (is_regressor(model) and hasattr(model, "get_params")):
            raise TypeError(f"model must be a scikit-learn linear regressor such as Ridge() or Lasso(), got {model!r}")
        if not has_fit_parameter(model, "sample_weight"):
            raise TypeError(
                f"{type(model).__name__}.fit does not accept sample_weight; LIME needs a weighted fit "
                "(use Ridge, Lasso, ElasticNet or LinearRegression)."
            )
        return model

    def params(self):
        return {**super().params(), "model": repr(self.model)}

    def masks(self, n_units: int) -> np.ndarray:
        """The input itself, then ``n_samples − 1`` masks each removing a uniform number of uniform units.

        Example:
            >>> Lime(n_samples=3, seed=0).masks(4).shape
            (3, 4)
        """
        rng = self._rng(n_units)
        n_random = self.n_samples - 1
        removed = rng.integers(1, n_units + 1, size=n_random) if n_units else np.zeros(n_random, int)
        ranks = rng.random((n_random, n_units)).argsort(axis=1).argsort(axis=1)
        return np.concatenate([np.ones((1, n_units), bool), ranks >= removed[:, None]])

    def kernel(self, masks: np.ndarray) -> np.ndarray:
        """Sample weights ``exp(−d² / (2 · kernel_width²))``, ``d`` the cosine distance of each mask to all-ones.

        Example:
            >>> Lime(kernel_width=0.25).kernel(np.array([[True, True], [False, False]])).round(6).tolist()
            [1.0, 0.000335]
        """
        kept = masks.sum(1)
        distance = 1.0 - np.sqrt(kept / masks.shape[1])
        return np.exp(-(distance**2) / (2 * self.kernel_width**2))

    def _estimate(self, masks, values):
        from sklearn.base import clone

        surrogate = clone(self.model).fit(masks.astype(np.float64), values, sample_weight=self.kernel(masks))
        return np.asarray(surrogate.coef_, dtype=np.float64).reshape(-1), {}


def shapley_kernel_weight(n_units: int, size: np.ndarray) -> np.ndarray:
    """The Shapley kernel ``(M − 1) / (C(M, k) · k · (M − k))`` for coalitions of ``size`` k out of ``M`` units.

    Infinite for the empty and the full coalition (which KernelShap enforces as exact constraints instead).

    Example:
        >>> shapley_kernel_weight(4, np.array([1, 2, 3])).tolist()
        [0.25, 0.125, 0.25]
    """
    size = np.asarray(size)
    with np.errstate(divide="ignore"):
        return (n_units - 1) / (np.vectorize(math.comb)(n_units, size) * size * (n_units - size)).astype(np.float64)


def constrained_least_squares(z: np.ndarray, y: np.ndarray, weights: np.ndarray, total: float) -> np.ndarray:
    """Minimise ``Σ w (z·φ − y)²`` subject to ``Σφ = total`` (the KKT system, solved by least squares).

    Example:
        >>> z = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> constrained_least_squares(z, np.array([1.0, 2.0]), np.ones(2), 3.0).round(9).tolist()
        [1.0, 2.0]
    """
    m = z.shape[1]
    zw = z * weights[:, None]
    kkt = np.zeros((m + 1, m + 1))
    kkt[:m, :m] = zw.T @ z
    kkt[:m, m] = kkt[m, :m] = 1.0
    rhs = np.append(zw.T @ y, total)
    return np.linalg.lstsq(kkt, rhs, rcond=None)[0][:m]


class KernelShap(PerturbationMethod):
    """KernelSHAP: Shapley values of the units by weighted least squares on coalitions (signed).

    The full and the empty coalition are always evaluated and the efficiency constraint
    ``Σφ = f(x) − f(baseline)`` is enforced exactly (constrained least squares); every result records
    ``completeness_error = Σφ − (f(x) − f(baseline))`` (≈ 0) and ``score_delta = f(x) − f(baseline)``, and
    ``params["exact"]`` says whether every target was explained by exact enumeration.

    - With at most ``exact_max_units`` units (or when ``n_samples`` covers every coalition), all ``2^M``
      coalitions are enumerated with the exact Shapley kernel weights: the results are the exact Shapley values.
    - Otherwise the budget of ``n_samples`` coalitions first enumerates whole coalition sizes, from the outside in
      (sizes 1 and M − 1, then 2 and M − 2, …), while the share of the budget that the Shapley kernel gives a size
      pair covers all its coalitions (as the ``shap`` library does); those get their exact kernel weights. The rest
      of the budget samples the remaining sizes from the Shapley kernel distribution (size ``k`` with probability
      ∝ ``1 / (k (M − k))``, then a uniform subset) in antithetic pairs (each coalition with its complement), each
      sample weighted by the remaining kernel mass over the number of samples.

    Example:
        >>> kernel_shap = KernelShap(n_samples=512, progress=False)
        >>> r = kernel_shap.attribute(model, tokenizer, "Not bad at all.", granularity="word")
        >>> r.params["exact"], bool(abs(r.completeness_error).max() < 1e-6)  # 5 words: all 32 coalitions
        (True, True)
    """

    name = "kernel_shap"
    description = "Shapley value of the unit (signed; sums to f(x) − f(baseline))"
    extra_fields = ("completeness_error", "score_delta")

    def __init__(
        self,
        n_samples: int = 512,
        baseline="pad",
        *,
        exact_max_units: int = 12,
        seed: int = 0,
        score: str | None = None,
        progress: bool = True,
    ):
        super().__init__(baseline, score=score, progress=progress)
        self.seed = check_int("seed", seed, minimum=0)
        self.n_samples = check_int("n_samples", n_samples, minimum=1)
        self.exact_max_units = check_int("exact_max_units", exact_max_units, minimum=0)
        if self.exact_max_units > 20:
            raise ValueError(
                f"exact_max_units={exact_max_units} would enumerate over 2 million coalitions per target; "
                "use at most 20 (the default 12 costs 4096 evaluations)."
            )

    def is_exact(self, n_units: int) -> bool:
        """Whether ``n_units`` units are explained by exact enumeration of all coalitions.

        Example:
            >>> KernelShap(n_samples=100).is_exact(12), KernelShap(n_samples=100).is_exact(13)
            (True, False)
        """
        return n_units <= self.exact_max_units or 2**n_units - 2 <= self.n_samples

    def _input_params(self, n_units):
        return {"exact": all(self.is_exact(n) for n in n_units)}

    def complete_sizes(self, n_units: int) -> list[int]:
        """The coalition sizes whose coalitions are all enumerated for ``n_units`` units (all sizes when exact).

        Example:
            >>> KernelShap(n_samples=64, exact_max_units=0).complete_sizes(10)
            [1, 9]
        """
        if self.is_exact(n_units):
            return list(range(1, n_units))
        mass = {k: 1.0 / (k * (n_units - k)) for k in range(1, n_units)}
        budget, complete = self.n_samples, []
        for k in range(1, n_units // 2 + 1):
            group = sorted({k, n_units - k})
            remaining = sum(m for size, m in mass.items() if size not in complete)
            count = sum(math.comb(n_units, size) for size in group)
            if budget * sum(mass[size] for size in group) / remaining < count:
                break
            complete += group
            budget -= count
        return sorted(complete)

    def masks(self, n_units: int) -> np.ndarray:
        """The full and the empty coalition, every coalition of the complete sizes, then sampled antithetic pairs.

        Example:
            >>> KernelShap(exact_max_units=2).masks(2).astype(int)
            array([[1, 1],
                   [0, 0],
                   [1, 0],
                   [0, 1]])
        """
        ends = np.array([np.ones(n_units, bool), np.zeros(n_units, bool)])
        complete = self.complete_sizes(n_units)
        enumerated = np.zeros((sum(math.comb(n_units, k) for k in complete), n_units), dtype=bool)
        row = 0
        for k in complete:
            for members in itertools.combinations(range(n_units), k):
                enumerated[row, list(members)] = True
                row += 1
        sizes = np.array([k for k in range(1, n_units) if k not in complete])
        n_sampled = 0 if self.is_exact(n_units) or len(sizes) == 0 else max(self.n_samples - len(enumerated), 0)
        if n_sampled == 0:
            return np.concatenate([ends, enumerated])
        rng = self._rng(n_units)
        size_probs = 1.0 / (sizes * (n_units - sizes))
        n_pairs = (n_sampled + 1) // 2
        k = rng.choice(sizes, size=n_pairs, p=size_probs / size_probs.sum())
        ranks = rng.random((n_pairs, n_units)).argsort(axis=1).argsort(axis=1)
        coalitions = ranks < k[:, None]
        paired = np.stack([coalitions, ~coalitions], axis=1).reshape(-1, n_units)[:n_sampled]
        return np.concatenate([ends, enumerated, paired])

    def _estimate(self, masks, values):
        n_units = masks.shape[1]
        f_full, f_empty = values[0], values[1]
        delta = f_full - f_empty
        z, y = masks[2:].astype(np.float64), values[2:] - f_empty
        sizes = masks[2:].sum(1)
        complete = np.isin(sizes, self.complete_sizes(n_units))
        weights = np.where(complete, shapley_kernel_weight(n_units, np.where(complete, sizes, 1)), 0.0)
        if not complete.all():
            remaining = [k for k in range(1, n_units) if k not in self.complete_sizes(n_units)]
            remaining_mass = sum((n_units - 1) / (k * (n_units - k)) for k in remaining)
            weights[~complete] = remaining_mass / (~complete).sum()
        phi = constrained_least_squares(z, y, weights, delta)
        return phi, {"completeness_error": float(phi.sum() - delta), "score_delta": float(delta)}


class Sobol(PerturbationMethod):
    """Sobol total-order indices of the units, estimated by quasi-Monte Carlo (unsigned).

    Each unit is kept or replaced by the baseline independently with probability 1/2: **binary masks**, obtained by
    thresholding a scrambled Sobol sequence (``scipy.stats.qmc.Sobol``) at 0.5. With two matrices ``A`` and ``B``
    of ``N`` masks and ``A_B^i`` (``A`` with column ``i`` from ``B``), the Jansen estimator gives
    ``S_T,i = mean((f(A) − f(A_B^i))²) / (2 · Var f)``: the share of the score's variance that involves unit ``i``.
    ``N`` is ``n_samples`` rounded up to a power of two (the balance property of Sobol points); the cost is
    ``N · (M + 2)`` evaluations per target, fewer after merging repeated masks.

    Example:
        >>> r = Sobol(n_samples=64, progress=False).attribute(model, tokenizer, "Not bad at all.", granularity="word")
        >>> r.tokens, r.scores.round(3), r.signed
        (['Not', 'bad', 'at', 'all', '.'], array([[0.021, 0.422, 0.459, 0.094, 0.075]]), False)
    """

    name = "sobol"
    signed = False
    description = "Sobol total-order index of the unit (unsigned share of the score variance)"

    def __init__(
        self, n_samples: int = 64, baseline="pad", *, seed: int = 0, score: str | None = None, progress: bool = True
    ):
        super().__init__(baseline, score=score, progress=progress)
        self.seed = check_int("seed", seed, minimum=0)
        self.n_samples = 2 ** math.ceil(math.log2(check_int("n_samples", n_samples, minimum=1)))

    def masks(self, n_units: int) -> np.ndarray:
        """``A``, ``B`` and ``A_B^1 … A_B^M`` stacked: ``N · (M + 2)`` binary masks.

        Example:
            >>> Sobol(n_samples=4).masks(2).shape
            (16, 2)
        """
        return sobol_design(n_units, self.n_samples, rng=self._rng(n_units), binary=True)

    def _estimate(self, masks, values):
        return np.nan_to_num(jansen_total_indices(values, masks.shape[1], self.n_samples)), {}


def sobol_design(n_factors: int, n_samples: int, *, rng: np.random.Generator, binary: bool) -> np.ndarray:
    """The quasi-Monte Carlo design of the Jansen estimator: ``A``, ``B`` and ``A_B^1 … A_B^M`` stacked, ``N · (M + 2)``
    rows of ``M = n_factors`` columns.

    ``A`` and ``B`` are the two halves of ``N = n_samples`` points of a scrambled Sobol sequence in ``2M`` dimensions
    (``scipy.stats.qmc.Sobol``, scrambled by ``rng``), and ``A_B^i`` is ``A`` with column ``i`` taken from ``B``.
    ``binary=True`` thresholds the points at 0.5 (keep or drop a unit, as :class:`Sobol` does); ``binary=False``
    keeps them in ``[0, 1)``: continuous masks, as CRAFT and COCKATIEL multiply concept coefficients by.

    Example:
        >>> design = sobol_design(3, 4, rng=np.random.default_rng(0), binary=False)
        >>> design.shape, bool(((design >= 0) & (design < 1)).all())
        ((20, 3), True)
        >>> a, b, mixed = design[:4], design[4:8], design[8:].reshape(3, 4, 3)
        >>> bool((mixed[1][:, [0, 2]] == a[:, [0, 2]]).all() and (mixed[1][:, 1] == b[:, 1]).all())
        True
    """
    from scipy.stats import qmc

    points = qmc.Sobol(d=2 * n_factors, scramble=True, rng=rng).random(n_samples)
    if binary:
        points = points < 0.5
    a, b = points[:, :n_factors], points[:, n_factors:]
    mixed = np.repeat(a[None], n_factors, axis=0)
    mixed[np.arange(n_factors), :, np.arange(n_factors)] = b.T
    return np.concatenate([a, b, mixed.reshape(-1, n_factors)])


def jansen_total_indices(values: np.ndarray, n_factors: int, n_samples: int) -> np.ndarray:
    """Total Sobol indices from the scores of a :func:`sobol_design` (Jansen, 1999):
    ``S_T,i = mean((f(A) − f(A_B^i))²) / (2 · Var f)``, ``Var f`` taken over ``f(A)`` and ``f(B)``.

    ``values`` is ``(..., N · (M + 2))``, the design's rows in order (leading axes are independent problems); the
    result is ``(..., M)``, NaN where the score does not vary (nothing to share out).

    Example:
        >>> design = sobol_design(2, 1024, rng=np.random.default_rng(0), binary=False)
        >>> jansen_total_indices(design @ np.array([1.0, 2.0]), 2, 1024).round(2)  # linear: shares 1 : 4
        array([0.2, 0.8])
    """
    values = np.asarray(values, dtype=np.float64)
    n = int(n_samples)
    f_a, f_b = values[..., :n], values[..., n : 2 * n]
    f_mixed = values[..., 2 * n :].reshape(*values.shape[:-1], int(n_factors), n)
    variance = np.var(np.concatenate([f_a, f_b], axis=-1), axis=-1)
    scale = np.maximum(1.0, np.abs(f_a).max(axis=-1)) ** 2
    flat = variance <= 1e-12 * scale
    with np.errstate(invalid="ignore", divide="ignore"):
        total = ((f_a[..., None, :] - f_mixed) ** 2).mean(axis=-1) / (2 * np.where(flat, 1.0, variance)[..., None])
    return np.where(flat[..., None], np.nan, total)
