"""Gradient attribution methods on the input embeddings.

All methods share one engine: for each input they build rows (the embeddings at path points, noisy copies or random
baselines), evaluate the target scores and their gradients for many rows per forward/backward pass (length-bucketed,
capped by ``max_batch_tokens``; every row serves all the targets of its input, with one backward pass batched over
them), and combine the gradients into per-dimension attributions that ``reduce`` turns into one score per token.

Example:
    >>> ig = IntegratedGradients(n_steps=32, method="gausslegendre", baseline="pad", progress=False)
    >>> result = ig.attribute(model, tokenizer, "Not bad at all.")
    >>> result.tokens
    ['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]']
    >>> result.scores.round(3)
    array([[ 0.   ,  0.027, -0.139,  0.129,  0.072, -0.029,  0.   ]])
    >>> float(result.relative_completeness_error[0]) < 0.01
    True
"""

from __future__ import annotations

import numpy as np
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.text_units import Encoding
from interp_widgets.attribution.base import REDUCTIONS, Attributor, progress_bar, reduce_embedding_dim
from interp_widgets.attribution.rows import RowChunk, evaluate_rows
from interp_widgets.tasks import task_for
from interp_widgets.attribution.result import AttributionResult
from interp_widgets.validation import check_choice, check_int, check_number

BASELINES = ("pad", "mask", "unk", "zero")
QUADRATURES = ("riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid", "simpson", "gausslegendre")


def quadrature(method: str, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``alphas`` in [0, 1] and weights summing to 1 for the IG path integral.

    ``riemann_trapezoid`` uses the true trapezoid weights (1/(n−1), halved at both ends), which sum to 1.
    (Captum's trapezoid weights are 1/n with halved ends and sum to 1 − 1/n.) ``simpson`` is the composite Simpson
    rule on ``n_steps`` equally spaced nodes (odd, at least 3): the rule the adaptive default starts from.

    Example:
        >>> quadrature("riemann_middle", 4)[0]
        array([0.125, 0.375, 0.625, 0.875])
        >>> alphas, weights = quadrature("simpson", 5)
        >>> alphas, weights * 12
        (array([0.  , 0.25, 0.5 , 0.75, 1.  ]), array([1., 4., 2., 4., 1.]))
    """
    n = check_int("n_steps", n_steps, minimum=1)
    if method == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n)
        return 0.5 * (nodes + 1.0), 0.5 * weights
    if method == "riemann_trapezoid":
        if n < 2:
            raise ValueError("riemann_trapezoid needs n_steps >= 2")
        weights = np.full(n, 1.0 / (n - 1))
        weights[[0, -1]] /= 2
        return np.linspace(0.0, 1.0, n), weights
    if method == "simpson":
        if n < 3 or n % 2 == 0:
            raise ValueError(
                f"simpson needs an odd n_steps >= 3 (got {n}); for example n_steps={max(3, n + 1 - n % 2)}"
            )
        weights = np.where(np.arange(n) % 2 == 1, 4.0, 2.0)
        weights[[0, -1]] = 1.0
        return np.linspace(0.0, 1.0, n), weights / (3.0 * (n - 1))
    weights = np.full(n, 1.0 / n)
    if method == "riemann_left":
        return np.arange(n) / n, weights
    if method == "riemann_right":
        return np.arange(1, n + 1) / n, weights
    if method == "riemann_middle":
        return (np.arange(n) + 0.5) / n, weights
    raise ValueError(f"unknown quadrature {method!r}; use one of {QUADRATURES}")


def path_points(x: torch.Tensor, base: torch.Tensor, alphas) -> torch.Tensor:
    """Rows ``base + α (x − base)`` for every α, computed in float32 and returned in the model's dtype.

    In bfloat16, α itself and ``α (x − base)`` would be rounded to 8 significant bits; building the points in
    float32 keeps the path straight up to one final rounding of each point.

    Example:
        >>> x, base = torch.ones(2, 3, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.bfloat16)
        >>> rows = path_points(x, base, [0.0, 0.5, 1.0])
        >>> rows.shape, rows.dtype, rows[:, 0, 0].tolist()
        (torch.Size([3, 2, 3]), torch.bfloat16, [0.0, 0.5, 1.0])
    """
    alphas = torch.as_tensor(np.asarray(alphas, dtype=np.float32), device=x.device)[:, None, None]
    x32, b32 = x.float(), base.float()
    return torch.addcmul(b32, alphas, x32 - b32).to(x.dtype)


def baseline_embeddings(
    adapter: ModelAdapter, encoding: Encoding, baseline, *, keep_first: bool = False
) -> torch.Tensor:
    """Reference embeddings ``(T, D)``: special tokens keep their embedding, every other token is replaced.

    ``baseline`` is ``"pad"``, ``"mask"``, ``"unk"`` (that token's embedding), ``"zero"``, a ``(D,)`` vector, a
    ``(T, D)`` tensor, or a callable ``encoding -> (T, D)``. With ``keep_first``, the first token also keeps its
    embedding (for a token or vector baseline; a ``(T, D)`` tensor or a callable is used as given): in a causal
    decoder the first position is the attention sink (see :class:`IntegratedGradients`).

    Example:
        >>> encoding = adapter.encode("Hi there")
        >>> encoding.tokens
        ['[CLS]', 'Hi', 'there', '[SEP]']
        >>> base = baseline_embeddings(adapter, encoding, "mask")
        >>> base.shape
        torch.Size([4, 32])
        >>> mask = adapter.embed(torch.tensor([[tokenizer.mask_token_id]]))[0, 0]
        >>> [bool(torch.allclose(row, mask)) for row in base]  # [CLS] and [SEP] keep their own embedding
        [False, True, True, False]
        >>> float(baseline_embeddings(adapter, encoding, "zero")[1:3].abs().max())
        0.0
        >>> lm_encoding = ModelAdapter(lm, lm_tokenizer).encode("The room was")
        >>> kept = baseline_embeddings(ModelAdapter(lm, lm_tokenizer), lm_encoding, "zero", keep_first=True)
        >>> (kept.abs().sum(-1) > 0).tolist()  # the first token keeps its embedding, the others are zero
        [True, False, False]
    """
    ids = torch.as_tensor(encoding.input_ids, device=adapter.device)
    with torch.no_grad():
        x = adapter.embed(ids[None])[0].detach()
    if callable(baseline) and not isinstance(baseline, torch.Tensor):
        out = torch.as_tensor(baseline(encoding), dtype=x.dtype, device=x.device)
        if out.shape != x.shape:
            raise ValueError(f"baseline callable returned shape {tuple(out.shape)}, expected {tuple(x.shape)}")
        return out
    if isinstance(baseline, str):
        if baseline == "zero":
            vector = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
        elif baseline in ("pad", "mask", "unk"):
            token_id = getattr(adapter.tokenizer, f"{baseline}_token_id")
            if token_id is None:
                raise ValueError(
                    f"the tokenizer has no {baseline} token, so baseline={baseline!r} is undefined; "
                    "use baseline='zero' or pass an embedding vector."
                )
            with torch.no_grad():
                vector = adapter.embed(torch.tensor([[token_id]]))[0, 0].detach()
        else:
            raise ValueError(f"unknown baseline {baseline!r}; use one of {BASELINES}, a tensor or a callable")
    else:
        vector = torch.as_tensor(baseline, dtype=x.dtype, device=x.device)
        if vector.shape == x.shape:
            return vector.clone()
        if vector.shape != x.shape[-1:]:
            raise ValueError(
                f"baseline tensor has shape {tuple(vector.shape)}; expected ({x.shape[-1]},) or {tuple(x.shape)}"
            )
    special = torch.as_tensor(encoding.special_mask, device=x.device).clone()
    if keep_first and len(special):
        special[0] = True
    return torch.where(special[:, None], x, vector.expand_as(x))


#: The most targets one row is differentiated for in one (batched) backward pass.
MAX_TARGETS_PER_ROW = 8


def targets_per_row(adapter: ModelAdapter, problem) -> int:
    """How many targets of ``problem`` share each gradient row: all of them, or, beyond
    :data:`MAX_TARGETS_PER_ROW`, the fewest equal groups (9 targets share rows 5 + 4).

    Each shares the row's forward pass; their gradients come from one backward pass batched over them.

    Example:
        >>> from interp_widgets.tasks import prepare_inputs
        >>> problem = prepare_inputs(adapter, "Not bad.", target=["negative", "neutral", "positive"])[0]
        >>> targets_per_row(adapter, problem)
        3
    """
    n = max(1, problem.n_targets)
    return -(-n // -(-n // MAX_TARGETS_PER_ROW))


class GradientMethod(Attributor):
    """Engine of the gradient methods: rows of embeddings per target, batched gradients, reduction to token scores.

    For every input and target the engine builds ``_rows_per_target()`` rows (modified copies of the input
    embeddings ``x``, shape ``(T, D)``), evaluates the target score and its gradient for all rows in few batched
    forward/backward passes, accumulates the ``_row_weights()``-weighted mean gradient (and mean squared gradient
    when ``needs_squares``), turns it into per-dimension attributions with ``_per_dimension`` and reduces those to
    one score per token with ``reduce`` (``sum``, ``norm`` or ``abs``; results are signed only for ``sum``).

    Subclass API (set ``name`` to register the method; override what differs from plain gradients):
        ``multiplies_inputs`` (class attribute): the default ``_per_dimension`` returns ``mean_grad * x``
        instead of ``mean_grad``.

        ``needs_squares`` (class attribute): also accumulate the mean squared gradient (``mean_sq``).

        ``_rows_per_target() -> int``: rows evaluated per target (default 1: the input itself).

        ``_row_weights() -> ndarray``: weight of each row in the mean gradient (default uniform).

        ``_make_rows(x, base, item, steps) -> Tensor``: the rows ``(len(steps), T, D)`` for row indices ``steps``
        of input number ``item`` (``base`` is the baseline when ``_needs_baseline()``, else None). Must depend
        only on these arguments, so results do not depend on batching. Rows never depend on the target, so the
        engine evaluates each row once for a group of up to :data:`MAX_TARGETS_PER_ROW` targets (the tokens of a
        generation, several classes): one forward pass, and one backward pass batched over the group.

        ``_needs_baseline() -> bool``: build the baseline embeddings from ``self.baseline`` (see
        :func:`baseline_embeddings`).

        ``_per_dimension(x, base, mean_grad, mean_sq) -> Tensor``: per-dimension attributions ``(targets, T, D)``.

        ``_endpoints(row_scores)`` and ``_extra_outputs(problems, per_dim, endpoints)``: extra per-result
        fields, such as the completeness error of integrated gradients.

    Example:
        >>> from interp_widgets.attribution import METHODS
        >>> class DoubledInputXGradient(GradientMethod):
        ...     "Twice input × gradient (signed)."
        ...     name = "doubled_input_x_gradient"
        ...     def _per_dimension(self, x, base, mean_grad, mean_sq):
        ...         return 2 * mean_grad * x
        >>> METHODS["doubled_input_x_gradient"] is DoubledInputXGradient
        True
        >>> from interp_widgets.attribution import attribute
        >>> doubled = attribute(model, tokenizer, "Good.", method="doubled_input_x_gradient",
        ...                     method_params={"progress": False})
        >>> plain = InputXGradient(progress=False).attribute(model, tokenizer, "Good.")
        >>> doubled.method, bool(np.allclose(doubled.scores, 2 * plain.scores))
        ('doubled_input_x_gradient', True)
        >>> METHODS.remove("doubled_input_x_gradient") is DoubledInputXGradient
        True
    """

    family = "gradient"
    needs_gradients = True
    multiplies_inputs = False
    needs_squares = False  # only the variance-type methods use the mean squared gradient

    def __init__(self, *, reduce: str = "sum", score: str | None = None, progress: bool = True):
        super().__init__(score=score, progress=progress)
        check_choice("reduce", reduce, REDUCTIONS)
        self.reduce = reduce

    @property
    def scores_signed(self) -> bool:
        """Signed only for ``reduce="sum"`` (norms and absolute values are not).

        Example:
            >>> InputXGradient().scores_signed, InputXGradient(reduce="norm").scores_signed
            (True, False)
        """
        return self.signed and self.reduce == "sum"

    def _reduce_description(self) -> str:
        """The result's ``reduce``: what the token scores are (a sum of non-negative terms is unsigned)."""
        if self.reduce == "sum" and not self.scores_signed:
            return "sum over embedding dimension (unsigned)"
        return REDUCTIONS[self.reduce]

    # ---- hooks for subclasses
    def _rows_per_target(self) -> int:
        return 1

    def _row_weights(self) -> np.ndarray:
        n = self._rows_per_target()
        return np.full(n, 1.0 / n)

    def _make_rows(self, x: torch.Tensor, base: torch.Tensor, item: int, steps: np.ndarray) -> torch.Tensor:
        return x.expand(len(steps), -1, -1)

    def _per_dimension(self, x, base, mean_grad, mean_sq) -> torch.Tensor:
        return mean_grad * x if self.multiplies_inputs else mean_grad

    def _needs_baseline(self) -> bool:
        return False

    def _endpoints(self, row_scores: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """``(f(x), f(baseline))`` per input from the scores of every row ``(targets, rows per target)``, if used."""
        return None

    def _extra_outputs(self, problems, per_dim, endpoints) -> list[dict]:
        return [{} for _ in problems]

    # ---- engine
    def _attribute_inputs(self, adapter, problems, *, score, granularity) -> list[AttributionResult]:
        per_target = self._rows_per_target()
        device = adapter.device
        weights = torch.as_tensor(self._row_weights(), dtype=torch.float32, device=device)
        with torch.no_grad():
            inputs = [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0].detach() for p in problems]
        bases = [self._baseline(adapter, p) if self._needs_baseline() else None for p in problems]
        # weighted gradient sums (and squared-gradient sums) per input and target, accumulated on the device
        sums = [
            torch.zeros((p.n_targets, *x.shape), dtype=torch.float32, device=device) for p, x in zip(problems, inputs)
        ]
        squares = [torch.zeros_like(s) if self.needs_squares else None for s in sums]
        row_scores = [np.zeros((p.n_targets, per_target)) for p in problems]
        # Rows do not depend on the target (_make_rows sees no target), so each row serves a group of targets:
        # one forward pass, and one backward pass batched over the group (see evaluate_rows).
        group = [targets_per_row(adapter, p) for p in problems]
        n_groups = [-(-p.n_targets // k) for p, k in zip(problems, group)]
        n_rows = [per_target * g for g in n_groups]

        def build(item, start, stop):
            rows = np.arange(start, stop)
            k, n = group[item], problems[item].n_targets
            targets = (rows // per_target)[:, None] * k + np.arange(k)
            return self._make_rows(inputs[item], bases[item], item, rows % per_target), np.where(
                targets < n, targets, -1
            )

        def consume(chunk: RowChunk, scores, grads):
            k, n_targets = group[chunk.item], problems[chunk.item].n_targets
            rows = np.arange(chunk.start, chunk.stop)
            targets = ((rows // per_target)[:, None] * k + np.arange(k)).reshape(-1)
            steps = np.repeat(rows % per_target, k)
            used = targets < n_targets
            flat_scores = scores.double().cpu().numpy().reshape(-1)
            row_scores[chunk.item][targets[used], steps[used]] = flat_scores[used]
            # one matrix product sums the weighted gradients of each target: (targets, pairs) @ (pairs, T * D)
            first, last = int(targets[used].min()), int(targets[used].max())
            pairs = np.flatnonzero(used)
            spread = torch.zeros((last + 1 - first, len(targets)), device=device)
            spread[torch.as_tensor(targets[pairs] - first, device=device), torch.as_tensor(pairs, device=device)] = (
                weights[torch.as_tensor(steps[pairs], device=device)]
            )
            flat = grads.float().reshape(len(targets), -1)
            sums[chunk.item].view(n_targets, -1)[first : last + 1].addmm_(spread, flat)
            if self.needs_squares:
                squares[chunk.item].view(n_targets, -1)[first : last + 1].addmm_(spread, flat * flat)

        bar = progress_bar(self.progress, sum(n_rows), self.name)
        try:
            evaluate_rows(adapter, problems, n_rows, build, consume, score=score, with_grad=True, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        return self._finish(problems, inputs, bases, sums, squares, score, self._endpoints(row_scores))

    def _finish(self, problems, inputs, bases, sums, squares, score, endpoints=None) -> list[AttributionResult]:
        """Per-dimension attributions from accumulated gradients, checked for NaN/inf, reduced to token scores."""
        per_dim = [
            self._per_dimension(
                x.float().cpu(), None if b is None else b.float().cpu(), s.cpu(), None if q is None else q.cpu()
            )
            for x, b, s, q in zip(inputs, bases, sums, squares)
        ]
        for item, values in enumerate(per_dim):
            if not torch.isfinite(values).all():
                raise FloatingPointError(
                    f"input {item}: the gradients contain NaN or inf (the model overflowed or the score is "
                    "log(0)); try score='logit', a float32 model, or a different baseline."
                )
        extras = self._extra_outputs(problems, per_dim, endpoints)
        return [
            self._result(
                p,
                reduce_embedding_dim(v, self.reduce).numpy(),
                score_meaning=self._reduce_description(),
                score=score,
                **e,
            )
            for p, v, e in zip(problems, per_dim, extras)
        ]

    def _baseline(self, adapter, problem):
        return baseline_embeddings(adapter, problem.encoding, self.baseline)


class Saliency(GradientMethod):
    """Gradient of the target score with respect to each input embedding.

    The gradient has a direction, not a sign per token, so the default ``reduce="norm"`` reports its L2 norm
    (unsigned); ``reduce="sum"`` gives the signed sum over dimensions.

    Example:
        >>> r = Saliency(progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.tokens
        ['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]']
        >>> r.scores.round(3), r.signed
        (array([[2.487, 0.895, 1.034, 0.565, 0.633, 0.675, 2.097]]), False)
    """

    name = "saliency"

    def __init__(self, *, reduce: str = "norm", score: str | None = None, progress: bool = True):
        super().__init__(reduce=reduce, score=score, progress=progress)


class InputXGradient(GradientMethod):
    """Embedding times gradient, summed over the embedding dimension (signed).

    Example:
        >>> r = InputXGradient(progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r
        AttributionResult(method='input_x_gradient', 7 tokens, targets=[positive (p=0.421)])
        >>> r.scores.round(3)
        array([[-0.51 , -0.025, -0.065,  0.044,  0.025,  0.095,  0.413]])
    """

    name = "input_x_gradient"
    multiplies_inputs = True


class IntegratedGradients(GradientMethod):
    """Integrated gradients along the straight path from a baseline to the input embeddings (signed).

    Every result carries ``completeness_error = Σattr − (f(x) − f(baseline))`` per target (and ``score_delta``),
    which is exact up to quadrature error when ``reduce="sum"``. ``f(x)`` and ``f(baseline)`` come from forward
    passes only: no gradient is taken at a point whose weight is zero (at exactly zero embeddings an RMSNorm
    model's gradient overflows).

    Args:
        n_steps: quadrature nodes per target, or ``"auto"`` (default): adaptive Simpson on a dyadic path mesh. The
            local error of every panel ``[a, b]`` is known exactly, because the integral of the scalar integrand
            ``φ'(α) = ∇f(γ(α))·(x − b)`` over it is ``f(γ(b)) − f(γ(a))``, given by the forward scores, and the
            panels' errors sum to the completeness error exactly. Rounds halve the (at most four) panels with the
            largest errors (every new node of every input and target in one batched pass) until the measured
            completeness error is within ``tolerance``, or the mesh has ``max_steps`` intervals. Panel errors of
            opposite signs may cancel in that sum: ``result.params["mesh_panel_error"]`` reports, per target, the
            sum of the panels' *absolute* errors relative to ``max(|Δf|, 1e-3)`` (the completeness error before
            cancellation). Nodes are never re-evaluated; nodes used per target are in
            ``result.params["mesh_nodes"]``.
        method: quadrature for a fixed ``n_steps``: ``gausslegendre`` (default), ``simpson`` or
            ``riemann_left|right|middle|trapezoid``.
        baseline: ``pad``, ``mask``, ``unk``, ``zero``, a vector, a ``(T, D)`` tensor or a callable.
        keep_first: keep the first token's embedding in the baseline (like a special token). ``"auto"`` (default):
            for causal decoders (causal LMs and decoder classifiers), whose first position is the attention sink, not
            for encoder–decoders.
            Measured on SmolLM2-135M: with every position at the pad token, the model puts massive activations
            (hidden-state norm about 25,000 at layer 16) on every position; along the path they collapse one
            position at a time, so ``f(α)`` is a staircase whose steps the gradient never sees (64-node
            Gauss–Legendre sums to about 0, a relative completeness error of 1.0). With the first token kept, as a
            BOS token is, the integrand is smooth. The first token then gets no attribution; pass
            ``keep_first=False`` to replace it too.
        tolerance: relative completeness error that ``"auto"`` aims for (``|err| <= tolerance · max(|Δf|, 1e-3)``).
        max_steps: the most intervals of the adaptive mesh (nodes per target ``<= max_steps + 1``).

    Half-precision models (bfloat16, float16) run in their own dtype; path points are built in float32, and scores
    and gradient sums accumulate in float32.

    Example:
        >>> r = IntegratedGradients(n_steps=16, progress=False).attribute(model, tokenizer, "Good.")
        >>> r.tokens, r.scores.round(3)
        (['[CLS]', 'Good', '.', '[SEP]'], array([[0.   , 0.228, 0.081, 0.   ]]))
        >>> r.score_delta.round(3), bool(abs(r.completeness_error[0]) < 1e-5)  # Σattr = f(x) − f(baseline)
        (array([0.309]), True)

        The adaptive default refines the path mesh per target until the measured completeness error is within
        ``tolerance``; ``mesh_panel_error`` is the same error before the panels' errors cancel:

        >>> ig = IntegratedGradients(tolerance=1e-4, progress=False)
        >>> r = ig.attribute(model, tokenizer, "Not bad at all, honestly.", target=["negative", "positive"])
        >>> r.params["method"], len(r.params["mesh_nodes"]), bool((r.relative_completeness_error < 1e-4).all())
        ('adaptive_simpson', 2, True)
        >>> all(p >= e for p, e in zip(r.params["mesh_panel_error"], r.relative_completeness_error))
        True
    """

    name = "integrated_gradients"

    def __init__(
        self,
        n_steps: int | str = "auto",
        method: str = "gausslegendre",
        baseline="pad",
        *,
        keep_first: bool | str = "auto",
        tolerance: float = 0.01,
        max_steps: int = 256,
        reduce: str = "sum",
        score: str | None = None,
        progress: bool = True,
    ):
        super().__init__(reduce=reduce, score=score, progress=progress)
        if n_steps != "auto":
            n_steps = check_int("n_steps", n_steps, minimum=1, hint="or pass 'auto' for the adaptive path mesh")
        check_number("tolerance", tolerance, minimum=0, maximum=1, low_open=True, high_open=True)
        if keep_first != "auto" and not isinstance(keep_first, bool):
            raise ValueError(f"keep_first must be True, False or 'auto', got {keep_first!r}")
        self.n_steps = n_steps
        self.method = method
        self.baseline = baseline
        self.keep_first = keep_first
        self.tolerance = float(tolerance)
        self.max_steps = check_int("max_steps", max_steps, minimum=8, hint="the adaptive mesh starts with 8 intervals")
        if n_steps != "auto":
            self._alphas, self._weights = quadrature(method, int(n_steps))
        self._known_endpoints = None

    def _keeps_first(self, adapter: ModelAdapter) -> bool:
        if self.keep_first == "auto":
            # causal attention: the first position is the attention sink. An encoder–decoder's first position is a
            # source token read by a bidirectional encoder (the decoder's start token is special anyway).
            return task_for(adapter).causal
        return bool(self.keep_first)

    def _baseline(self, adapter, problem):
        return baseline_embeddings(adapter, problem.encoding, self.baseline, keep_first=self._keeps_first(adapter))

    def _attribute_inputs(self, adapter, problems, *, score, granularity):
        if self.n_steps == "auto":
            return self._adaptive(adapter, problems, score)
        self._known_endpoints = self._path_endpoints(adapter, problems, score)
        try:
            return super()._attribute_inputs(adapter, problems, score=score, granularity=granularity)
        finally:
            self._known_endpoints = None

    def _path_endpoints(self, adapter, problems, score) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(f(x), f(baseline))`` per input and target, from forward passes only (two rows per target)."""
        with torch.no_grad():
            ends = [
                torch.stack(
                    [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0].detach(), self._baseline(adapter, p)]
                )
                for p in problems
            ]
        values = [np.zeros((p.n_targets, 2)) for p in problems]

        def build(item, start, stop):
            rows = np.arange(start, stop)
            return ends[item][torch.as_tensor(rows % 2)], rows // 2

        def consume(chunk, scores, grads):
            rows = np.arange(chunk.start, chunk.stop)
            values[chunk.item][rows // 2, rows % 2] = scores.double().cpu().numpy()

        evaluate_rows(
            adapter, problems, [2 * p.n_targets for p in problems], build, consume, score=score, with_grad=False
        )
        return [(v[:, 0], v[:, 1]) for v in values]

    def _adaptive(self, adapter, problems, score) -> list[AttributionResult]:
        """Adaptive Simpson on a dyadic path mesh per target (see ``n_steps`` in the class docstring)."""
        with torch.no_grad():
            inputs = [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0].detach() for p in problems]
        bases = [self._baseline(adapter, p) for p in problems]
        deltas = [(x.float() - b.float()).double() for x, b in zip(inputs, bases)]
        meshes = [[_SimpsonMesh(self.tolerance, self.max_steps) for _ in range(p.n_targets)] for p in problems]
        pending = [[(t, a) for t, mesh in enumerate(targets) for a in mesh.wanted()] for targets in meshes]
        bar = progress_bar(self.progress, sum(len(q) for q in pending), self.name)

        def build(item, start, stop):
            chosen = pending[item][start:stop]
            rows = path_points(inputs[item], bases[item], [a for _, a in chosen])
            return rows, np.array([t for t, _ in chosen], dtype=np.int64)

        def consume(chunk, scores, grads):
            g = grads.float()
            slopes = (g.double() * deltas[chunk.item]).sum(dim=(1, 2)).tolist()
            finite = torch.isfinite(g).flatten(1).all(1).tolist()
            g = g.cpu()
            chosen = pending[chunk.item][chunk.start : chunk.stop]
            for row, ((t, a), value, slope, ok) in enumerate(zip(chosen, scores.tolist(), slopes, finite)):
                meshes[chunk.item][t].add(a, value, slope if ok else None, g[row] if ok else None)

        try:
            while any(pending):
                evaluate_rows(
                    adapter,
                    problems,
                    [len(q) for q in pending],
                    build,
                    consume,
                    score=score,
                    with_grad=True,
                    progress=bar,
                )
                for mesh in (m for targets in meshes for m in targets):
                    mesh.refine()
                pending = [[(t, a) for t, mesh in enumerate(targets) for a in mesh.wanted()] for targets in meshes]
                if bar is not None:
                    bar.total += sum(len(q) for q in pending)
        finally:
            if bar is not None:
                bar.close()
        sums, endpoints = [], []
        for x, targets in zip(inputs, meshes):
            sums.append(torch.stack([mesh.weighted_gradient(x.shape) for mesh in targets]))
            endpoints.append((np.array([m.score(1.0) for m in targets]), np.array([m.score(0.0) for m in targets])))
        results = self._finish(problems, inputs, bases, sums, [None] * len(sums), score, endpoints)
        for result, targets in zip(results, meshes):
            counts = [len(m.nodes) for m in targets]
            result.params.update(
                method="adaptive_simpson",
                n_steps=max(counts),
                mesh_nodes=counts,
                mesh_panel_error=[m.panel_error() for m in targets],
            )
        return results

    def params(self):
        params = super().params()
        if not isinstance(self.baseline, str):
            params["baseline"] = "custom"
        return params

    # Fixed rules: one row per quadrature node; f(x) and f(baseline) come from forward passes (_path_endpoints).
    def _rows_per_target(self):
        return self.n_steps

    def _row_weights(self):
        return self._weights

    def _needs_baseline(self):
        return True

    def _make_rows(self, x, base, item, steps):
        return path_points(x, base, self._alphas[steps])

    def _endpoints(self, row_scores):
        return self._known_endpoints

    def _per_dimension(self, x, base, mean_grad, mean_sq):
        return (x - base) * mean_grad

    def _extra_outputs(self, problems, per_dim, endpoints):
        out = []
        for (f_x, f_b), values in zip(endpoints, per_dim):
            delta = f_x - f_b
            total = values.sum(dim=(-1, -2)).double().numpy()
            out.append({"completeness_error": total - delta, "score_delta": delta})
        return out


class _SimpsonMesh:
    """One target's adaptive Simpson mesh: dyadic panels ``[a, b]`` with nodes ``a``, ``(a + b) / 2``, ``b``.

    ``nodes`` maps α to ``(score, slope, gradient)``, where ``slope = φ'(α)`` is the gradient's inner product with
    ``x − baseline``. A node whose gradient is not finite can only be the baseline itself (α = 0; a zero baseline
    in an RMSNorm model): its gradient is never used, and the first panel takes the midpoint rule instead.
    """

    SPLITS_PER_ROUND = 4

    def __init__(self, tolerance: float, max_steps: int):
        self.tolerance = tolerance
        self.max_nodes = max_steps + 1
        self.panels = [(i / 4, (i + 1) / 4) for i in range(4)]
        self.nodes: dict[float, tuple[float, float | None, torch.Tensor | None]] = {}

    def wanted(self) -> list[float]:
        """Nodes of the current panels not evaluated yet."""
        needed = (a for lo, hi in self.panels for a in (lo, (lo + hi) / 2, hi))
        return [a for a in dict.fromkeys(needed) if a not in self.nodes]

    def add(self, alpha: float, score: float, slope: float | None, gradient: torch.Tensor | None) -> None:
        if slope is None and alpha != 0.0:
            raise FloatingPointError(
                f"the gradient at path point α = {alpha:g} contains NaN or inf (the model overflowed or the score "
                "is log(0)); try score='logit', a float32 model, or a different baseline."
            )
        self.nodes[alpha] = (score, slope, gradient)

    def score(self, alpha: float) -> float:
        return self.nodes[alpha][0]

    def _rule(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """(node, weight) of one panel: Simpson, or the midpoint rule when the baseline's gradient is not finite."""
        mid, h = (lo + hi) / 2, hi - lo
        if self.nodes[lo][1] is None:
            return [(mid, h)]
        return [(lo, h / 6), (mid, 4 * h / 6), (hi, h / 6)]

    def errors(self) -> np.ndarray:
        """Exact error of every panel on the scalar integrand: rule estimate − (f(b) − f(a))."""
        return np.array(
            [
                sum(w * self.nodes[a][1] for a, w in self._rule(lo, hi)) - (self.score(hi) - self.score(lo))
                for lo, hi in self.panels
            ]
        )

    def _scale(self) -> float:
        return max(abs(self.score(1.0) - self.score(0.0)), 1e-3)

    def panel_error(self) -> float:
        """Σ |panel error| / max(|Δf|, 1e-3): the relative completeness error before errors of opposite signs cancel."""
        return float(np.abs(self.errors()).sum() / self._scale())

    def refine(self) -> None:
        """Halve the panels with the largest errors (worst first) while the measured completeness error, the sum of
        the panel errors, is above the budget."""
        signed = self.errors()
        errors = np.abs(signed)
        budget = self.tolerance * self._scale()
        room = (self.max_nodes - len(self.nodes)) // 2
        if abs(float(signed.sum())) <= budget or room <= 0:
            return
        order = np.argsort(-errors)
        chosen = [i for i in order[: min(self.SPLITS_PER_ROUND, room)] if errors[i] > budget / 8] or [int(order[0])]
        chosen = set(chosen)
        panels = []
        for i, (lo, hi) in enumerate(self.panels):
            panels += [(lo, (lo + hi) / 2), ((lo + hi) / 2, hi)] if i in chosen else [(lo, hi)]
        self.panels = panels

    def weighted_gradient(self, shape) -> torch.Tensor:
        """Σ weight · gradient over the nodes of every panel (float32)."""
        total = torch.zeros(shape, dtype=torch.float32)
        for lo, hi in self.panels:
            for a, w in self._rule(lo, hi):
                total += w * self.nodes[a][2]
        return total


class _NoisyGradients(GradientMethod):
    """Gradients at noisy copies of the input: ``x + ε``, ε ~ N(0, (noise_level · std(x))²), seeded per row."""

    def __init__(
        self,
        n_samples: int = 32,
        noise_level: float = 0.1,
        *,
        seed: int = 0,
        reduce: str = "sum",
        multiply_by_inputs: bool = True,
        score: str | None = None,
        progress: bool = True,
    ):
        super().__init__(reduce=reduce, score=score, progress=progress)
        self.n_samples = check_int("n_samples", n_samples, minimum=1)
        self.noise_level = check_number("noise_level", noise_level, minimum=0)
        self.seed = int(seed)
        self.multiply_by_inputs = bool(multiply_by_inputs)

    def _rows_per_target(self):
        return self.n_samples

    def _noise(self, x: torch.Tensor, item: int, steps: np.ndarray) -> torch.Tensor:
        scale = self.noise_level * float(x.float().std())
        noise = torch.empty((len(steps), *x.shape), dtype=x.dtype)
        for row, step in enumerate(steps):
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + item * 10_007 + int(step))
            noise[row] = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        return noise.to(x.device) * scale

    def _make_rows(self, x, base, item, steps):
        return x + self._noise(x, item, steps)

    def _factor(self, x):
        return x if self.multiply_by_inputs else torch.ones_like(x)


class SmoothGrad(_NoisyGradients):
    """SmoothGrad: the mean gradient over noisy inputs, times the input by default (signed).

    Example:
        >>> r = SmoothGrad(n_samples=32, noise_level=0.1, progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.scores.round(3)
        array([[-0.505, -0.034, -0.052,  0.04 ,  0.021,  0.095,  0.414]])
    """

    name = "smoothgrad"

    def _per_dimension(self, x, base, mean_grad, mean_sq):
        return self._factor(x) * mean_grad


class VarGrad(_NoisyGradients):
    """VarGrad: the variance of the (input-scaled) gradient over noisy inputs (unsigned).

    Example:
        >>> r = VarGrad(progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.scores.round(4), r.signed
        (array([[0.0035, 0.0006, 0.0007, 0.0004, 0.0006, 0.0005, 0.0029]]), False)
        >>> r.score_meaning
        'sum over embedding dimension (unsigned)'
    """

    name = "vargrad"
    signed = False
    needs_squares = True

    def _per_dimension(self, x, base, mean_grad, mean_sq):
        return self._factor(x) ** 2 * (mean_sq - mean_grad**2).clamp(min=0)


class SquareGrad(_NoisyGradients):
    """SquareGrad: the mean squared (input-scaled) gradient over noisy inputs (unsigned).

    Example:
        >>> r = SquareGrad(progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.scores.round(3), r.signed
        (array([[0.173, 0.021, 0.035, 0.013, 0.027, 0.019, 0.215]]), False)
    """

    name = "squaregrad"
    signed = False
    needs_squares = True

    def _per_dimension(self, x, base, mean_grad, mean_sq):
        return self._factor(x) ** 2 * mean_sq


class GradientShap(GradientMethod):
    """GradientSHAP: expected gradients between noisy baselines and the input at random path points (signed).

    Each sample draws ``α ~ U(0, 1)`` and a baseline ``b + ε`` (ε Gaussian, ``noise_level`` × std of the input),
    and averages ``(x − b) ⊙ ∇f(b + α (x − b))``. Seeded per row, so results do not depend on batching.

    Example:
        >>> r = GradientShap(n_samples=64, progress=False).attribute(model, tokenizer, "Not bad at all.")
        >>> r.scores.round(3)
        array([[ 0.   ,  0.03 , -0.135,  0.123,  0.07 , -0.024,  0.   ]])
    """

    name = "gradient_shap"

    def __init__(
        self,
        n_samples: int = 64,
        noise_level: float = 0.1,
        baseline="pad",
        *,
        seed: int = 0,
        reduce: str = "sum",
        score: str | None = None,
        progress: bool = True,
    ):
        super().__init__(reduce=reduce, score=score, progress=progress)
        self.n_samples = check_int("n_samples", n_samples, minimum=1)
        self.noise_level = check_number("noise_level", noise_level, minimum=0)
        self.baseline = baseline
        self.seed = int(seed)

    def _rows_per_target(self):
        return self.n_samples

    def _needs_baseline(self):
        return True

    def _make_rows(self, x, base, item, steps):
        scale = self.noise_level * float(x.float().std())
        rows = []
        for step in steps:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + item * 10_007 + int(step))
            alpha = torch.rand((), generator=generator, dtype=x.dtype)
            noisy_base = base + scale * torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
            rows.append(noisy_base + alpha * (x - noisy_base))
        return torch.stack(rows)

    def _per_dimension(self, x, base, mean_grad, mean_sq):
        return (x - base) * mean_grad
