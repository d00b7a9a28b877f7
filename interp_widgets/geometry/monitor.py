"""Live gradient–subspace and anisotropy monitor for training (arXiv 2604.08764 as a tool).

:class:`AnisotropyMonitor` hooks chosen layers of the user's model and, during the user's *own* forward and backward
passes, keeps

* ``H``: detached, subsampled, non-padding rows of each layer's output (forward hook), and
* ``G``: the **true** gradients ``dL/dh`` of the same rows (a tensor hook registered on the layer output inside the
  forward hook — it fires during the user's ``loss.backward()``; no extra forward or backward pass, no
  ``retain_graph``), or, with ``gradient="weight"``, the weight gradient of a chosen ``nn.Linear`` read on the
  input side (its rows live in the space of the layer's inputs, which then play the role of ``H``).

After the backward pass — from an optimizer step pre-hook (``optimizer=``), an explicit :meth:`AnisotropyMonitor.step`,
or automatically when :meth:`AnisotropyMonitor.track` moves to the next step — it fits/refreshes the tangent proxy on
its schedule (:class:`~interp_widgets.geometry.alignment.ProxySchedule`), draws the matched-rank normal controls
(:func:`~interp_widgets.geometry.alignment.normal_controls`) and records, per layer, everything of
:func:`~interp_widgets.geometry.alignment.gradient_alignment` and
:func:`~interp_widgets.geometry.metrics.representation_metrics` into the :class:`~interp_widgets.geometry.history.
GeometryLog` it extends (series ``"<metric>|<layer>"``, see :data:`~interp_widgets.geometry.history.LAYER_METRICS`).

Guarantees (each tested):

* **Training is unchanged**: hooks only read (detached copies; gradients returned untouched); subsampling uses the
  monitor's own ``torch.Generator``, never the global RNG; the model's modes, parameters and config are never
  touched. Losses with and without the monitor are bit-identical.
* **No hooks are left** after the ``with`` block ends normally, by an exception or by ``KeyboardInterrupt``.
* **Non-finite gradients** (NaN/inf, e.g. an fp16 overflow step) never crash training: the step is recorded as a
  flagged row (``nonfinite|<layer>`` = 1, metrics NaN) and a ``RuntimeWarning`` is issued. The proxy never sees
  such a step.
* **Misuse raises a clear error** at record time: a step with activations but no gradient (``backward()``
  forgotten), a layer that receives no gradient because the model is frozen there, unknown layer names, ``rank``
  too large, ``n_controls < 1``.

Distributed (``torch.distributed`` initialised, world size > 1): every rank captures its local rows; at each
measured step the rows of ``H`` and ``G`` are all-gathered (padded to the largest rank) and rank 0 measures the
union, so its numbers equal a single-process run on the concatenated batch (exactly when no subsampling happens;
``max_tokens`` applies per rank). The recorded loss is the mean of the ranks' losses. Ranks other than 0 keep no
measurement rows. In weight mode ``G`` is the (already all-reduced) weight gradient of rank 0.

Example:
    >>> monitor = AnisotropyMonitor(model, ["layer:1"], rank=8, total_steps=100, optimizer=opt)  # doctest: +SKIP
    >>> with monitor:                                                                           # doctest: +SKIP
    ...     for step, batch in enumerate(loader):
    ...         monitor.track(step, attention_mask=batch["attention_mask"])
    ...         model(**batch).loss.backward()
    ...         opt.step(); opt.zero_grad()
    >>> monitor.to_dataframe().query("metric == 'energy_ratio'")                                # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Callable, Iterable, Mapping, Sequence, Union

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter

from .alignment import Moments, ProxySchedule, TangentProxy, _alignment, _stacked_bases, normal_controls
from .history import GeometryLog, LAYER_METRICS, as_scalar, series_name
from .metrics import _as_points, _check_shrinkage, _linear_time_metrics, _representation_metrics

__all__ = ["AnisotropyMonitor", "GeometryMonitor", "resolve_module"]

ProxyMethod = Union[str, Callable[[torch.Tensor, int], object], object]


# ----------------------------------------------------------------------------------------------------------
# layer resolution
# ----------------------------------------------------------------------------------------------------------


class _LayerResolver:
    """``ModelAdapter``'s layer naming (``layer:i`` shortcuts and module paths) without needing a tokenizer."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    blocks = ModelAdapter.blocks
    get_layer = ModelAdapter.get_layer
    resolve_layer = ModelAdapter.resolve_layer


def resolve_module(model: nn.Module, layer: Union[str, int]) -> nn.Module:
    """The module named by ``"layer:i"``, an index or a module path (``"bert.encoder.layer.1"``).

    Hugging Face models accept the ``layer:i`` shortcuts of :class:`~interp_widgets.adapter.ModelAdapter`; any
    ``nn.Module`` accepts module paths. Unknown names raise a ValueError listing valid ones.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        >>> type(resolve_module(net, "0")).__name__
        'Linear'
    """
    if hasattr(model, "config"):
        return _LayerResolver(model).resolve_layer(layer).module
    modules = dict(model.named_modules())
    if isinstance(layer, str) and layer in modules and layer:
        return modules[layer]
    names = [name for name in modules if name]
    raise ValueError(f"unknown layer {layer!r}; this model's module paths are {names[:30]}"
                     + (" …" if len(names) > 30 else ""))


def _is_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _weight_rows(module: nn.Module, grad: torch.Tensor) -> torch.Tensor:
    """Rows of a weight gradient in the space of the module's inputs (transformers' Conv1D stores (in, out))."""
    return grad if isinstance(module, nn.Linear) else grad.T


def _known_dim(model: nn.Module, module: nn.Module, gradient: str) -> int | None:
    if gradient == "weight":
        return module.in_features if isinstance(module, nn.Linear) else module.weight.shape[0]
    if isinstance(module, nn.Linear):
        return module.out_features
    config = getattr(model, "config", None)
    if config is not None:
        try:
            _, blocks = _LayerResolver(model).blocks()
        except Exception:
            return None
        if any(module is block for block in blocks):
            return getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    return None


def _check_rank_dim(rank: int, d: int, layer: str) -> None:
    if rank >= d:
        raise ValueError(f"rank={rank} must be < d = {d} at layer {layer!r}; choose a lower rank")
    if 2 * rank > d:
        raise ValueError(f"rank={rank} leaves no room for matched-rank controls orthogonal to the proxy at layer "
                         f"{layer!r} (needs 2·rank <= d = {d}); choose rank <= {d // 2}")


# ----------------------------------------------------------------------------------------------------------
# proxy fitting with custom (concept) methods
# ----------------------------------------------------------------------------------------------------------


def _dictionary_function(method: ProxyMethod) -> Callable[[torch.Tensor, int], object] | None:
    """None for PCA; else a ``(H, rank) -> d × k`` function (sklearn-style estimators give ``components_.T``)."""
    if isinstance(method, str):
        if method != "pca":
            raise ValueError(f"proxy_method must be 'pca', a function (H, rank) -> d × k dictionary or an estimator "
                             f"with fit() and components_, got {method!r}")
        return None
    if hasattr(method, "fit") and not isinstance(method, type):
        estimator = method

        def from_estimator(H: torch.Tensor, rank: int):
            fitted = copy.deepcopy(estimator).fit(H.cpu().numpy())
            components = np.asarray(fitted.components_)
            if components.shape[0] != rank:
                raise ValueError(f"the estimator produced {components.shape[0]} components but rank={rank}; "
                                 f"configure it with {rank} components")
            return torch.as_tensor(components.T)

        from_estimator.__name__ = type(estimator).__name__
        return from_estimator
    if callable(method):
        return method
    raise TypeError(f"proxy_method must be 'pca', a function or an estimator, got {type(method).__name__}")


class _Reservoir:
    """Uniform reservoir sample of at most ``capacity`` rows (custom proxy methods need raw rows, not moments)."""

    def __init__(self, capacity: int, generator: torch.Generator) -> None:
        self.capacity, self.generator = capacity, generator
        self.rows: torch.Tensor | None = None
        self.seen = 0

    def add(self, rows: torch.Tensor) -> None:
        rows = rows.detach().to("cpu", torch.float32)
        if self.rows is None:
            self.rows = rows[: self.capacity].clone()
            self.seen, rows = self.rows.shape[0], rows[self.capacity:]
        free = self.capacity - self.rows.shape[0]
        if free > 0 and rows.shape[0]:
            self.rows = torch.cat([self.rows, rows[:free]])
            self.seen, rows = self.seen + min(free, rows.shape[0]), rows[free:]
        for row in rows:  # classic reservoir step for the overflow
            self.seen += 1
            slot = int(torch.randint(self.seen, (1,), generator=self.generator))
            if slot < self.capacity:
                self.rows[slot] = row

    def clear(self) -> None:
        self.rows, self.seen = None, 0


# ----------------------------------------------------------------------------------------------------------
# the monitor
# ----------------------------------------------------------------------------------------------------------


def _concat(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Rows of all blocks (the block itself when there is one: the monitor's copies are never modified)."""
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks)


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether every entry is finite: a sum is finite exactly when no entry is NaN or ±inf (in float64 it cannot
    overflow), and costs a tenth of ``isfinite(tensor).all()``."""
    return bool(torch.isfinite(tensor.sum(dtype=torch.float64)))


def _quantiles(values: np.ndarray) -> tuple[float, float]:
    q05, q95 = np.quantile(values, [0.05, 0.95])
    return float(q05), float(q95)


#: The representation metrics the monitor records per layer (``effective_rank`` is the singular-value convention).
_REPRESENTATION_SERIES = ("avg_cosine", "isoscore", "effective_rank", "avg_cosine_centered", "participation_ratio",
                          "effective_rank_eigen", "stable_rank", "top1_explained_variance", "drift_share")


def _nan_values(layer: str) -> dict[str, float]:
    return {series_name(metric, layer): math.nan for metric in LAYER_METRICS}


class AnisotropyMonitor(GeometryLog):
    """Measure tangent-proxy gradient alignment and anisotropy at chosen layers while the user's loop trains.

    Use as a context manager around the training loop (hooks exist only inside it). It is also a
    :class:`~interp_widgets.geometry.history.GeometryLog`: ``to_dataframe()``, ``chart()``, ``save()``,
    ``subscribe()``, ``widget()``.

    Args:
        model: the model being trained (a Hugging Face model, any ``nn.Module``, or a DDP wrapper).
        layers: layer specs: ``"layer:i"`` (HF blocks), module paths, or ints (recorded as ``"layer:i"``). With
            ``gradient="weight"`` each must be an ``nn.Linear`` (or transformers ``Conv1D``).
        rank: proxy rank k (``2k <= d``, so matched-rank controls fit in the complement).
        every: measure every ``every``-th step (other steps cost nothing: no rows are kept).
        fit: ``"early"`` (fit once on the first ``fit_fraction`` of ``total_steps``, then freeze), ``"refit"``
            (refit every ``refit_every`` steps on the previous window) or ``"fixed"`` (``basis=``).
        total_steps: run length in steps (``fit="early"``; the Trainer callback fills it in).
        fit_fraction: share of ``total_steps`` in the early window (default 0.3).
        refit_every: window length for ``fit="refit"``.
        basis: for ``fit="fixed"``: one ``d × k`` basis / :class:`TangentProxy` for every layer, or a dict
            ``{layer: basis}``. Any dictionary is QR-orthonormalised.
        proxy_method: ``"pca"`` (default, from streamed moments), a function ``(H, rank) -> d × k`` dictionary, or
            a scikit-learn-style estimator with ``fit`` and ``components_`` (k × d; e.g. the concept models of
            :mod:`interp_widgets.concepts`) configured with ``rank`` components; custom methods see a uniform
            reservoir of at most ``fit_tokens`` rows of the window. Dictionaries are QR-orthonormalised.
        n_controls: number of normal controls R (p-value floor ``1/(R + 1)``).
        max_tokens: at most this many token rows per layer per step (uniformly subsampled, seeded).
        gradient: ``"hidden"`` (``dL/dh`` of the layer output, default) or ``"weight"`` (weight gradient of a
            linear layer, input side).
        special_token_ids: token ids whose rows are dropped (e.g. ``tokenizer.all_special_ids``); needs
            ``input_ids`` (seen automatically when the model is called with them, or passed to :meth:`track`).
        optimizer: record automatically right before each ``optimizer.step()`` (when gradients are complete).
        seed: seed of the subsampling generator and of the controls.
        center, zeta, coordinates: passed to :func:`~interp_widgets.geometry.alignment.gradient_alignment`.
        representation: also record :func:`~interp_widgets.geometry.metrics.representation_metrics` of ``H``
            (``effective_rank`` is the singular-value convention; ``effective_rank_eigen`` the eigenvalue one).
        spectrum_every: cadence of the representation metrics that need ``H``'s d × d Gram and eigenvalues
            (``isoscore``, ``participation_ratio``, the effective ranks, ``stable_rank``,
            ``top1_explained_variance``): the first measurement of each layer and every ``spectrum_every``-th
            after it; the rows between hold NaN for them (tables and plots skip NaN). The O(nd) metrics
            (``avg_cosine``, ``avg_cosine_centered``, ``drift_share``) and the whole gradient alignment are
            recorded at every measurement. The Gram and the eigensolve are most of a measurement's cost, and
            these metrics drift slowly (``geometry-metrics.md`` §11.1 suggests every 10–1000 steps); pass 1 to
            get them at every measurement.
        fit_tokens: reservoir size for custom ``proxy_method``.
        max_rows: bound on stored history rows (see :class:`GeometryLog`).

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> monitor = AnisotropyMonitor(net, ["0"], rank=2, n_controls=5, total_steps=4, optimizer=opt)
        >>> with monitor:
        ...     for step in range(4):
        ...         net(torch.randn(64, 16)).pow(2).mean().backward()
        ...         opt.step(); opt.zero_grad()
        >>> monitor.series("fitting")[1].tolist(), len(monitor.series("energy_ratio|0")[1])
        ([1.0, 1.0, 0.0, 0.0], 4)
    """

    def __init__(
        self,
        model: nn.Module,
        layers: Sequence[Union[str, int]],
        *,
        rank: int = 16,
        every: int = 1,
        fit: str = "early",
        total_steps: int | None = None,
        fit_fraction: float | None = None,
        refit_every: int | None = None,
        basis=None,
        proxy_method: ProxyMethod = "pca",
        n_controls: int = 20,
        max_tokens: int = 4096,
        gradient: str = "hidden",
        special_token_ids: Iterable[int] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        seed: int = 0,
        center: bool = False,
        zeta: float = 0.0,
        coordinates: str = "full",
        representation: bool = True,
        spectrum_every: int = 10,
        fit_tokens: int = 20_000,
        max_rows: int = 100_000,
        _x_label: str = "step",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        if isinstance(layers, (str, int)) or not layers:
            raise ValueError("layers must be a non-empty list, e.g. ['layer:2'] or ['bert.encoder.layer.2']")
        for name, value, low in (("rank", rank, 1), ("every", every, 1), ("n_controls", n_controls, 1),
                                 ("max_tokens", max_tokens, 2), ("fit_tokens", fit_tokens, 2),
                                 ("spectrum_every", spectrum_every, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if gradient not in ("hidden", "weight"):
            raise ValueError(f"gradient must be 'hidden' (dL/dh) or 'weight' (linear weight gradient), got {gradient!r}")
        if fit not in ("early", "refit", "fixed"):
            raise ValueError(f"fit must be 'early', 'refit' or 'fixed', got {fit!r}")
        if fit == "fixed" and basis is None:
            raise ValueError("fit='fixed' needs basis= (a d × k matrix, a TangentProxy, or {layer: basis})")
        if coordinates not in ("full", "complement"):
            raise ValueError(f"coordinates must be 'full' or 'complement', got {coordinates!r}")
        _check_shrinkage(zeta, "scaled_identity", 1, torch.device("cpu"))
        specs = [f"layer:{layer}" if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool)
                 else str(layer) for layer in layers]
        if len(set(specs)) != len(specs):
            raise ValueError(f"layers contains duplicates: {specs}")
        super().__init__(specs, x_label=_x_label, max_rows=max_rows)
        self.model = inner
        self.modules = {spec: resolve_module(inner, spec) for spec in specs}
        if gradient == "weight":
            bad = [spec for spec, module in self.modules.items() if not _is_linear(module)]
            if bad:
                raise ValueError(f"gradient='weight' needs nn.Linear layers; {bad} are "
                                 f"{[type(self.modules[b]).__name__ for b in bad]} — pass their linear sub-modules, "
                                 f"e.g. 'bert.encoder.layer.1.attention.self.query'")
        self.dims: dict[str, int | None] = {spec: _known_dim(inner, module, gradient)
                                            for spec, module in self.modules.items()}
        for spec, d in self.dims.items():
            if d is not None:
                _check_rank_dim(rank, d, spec)
        self.rank, self.every, self.fit, self.n_controls = rank, every, fit, n_controls
        self.total_steps, self.fit_fraction, self.refit_every = total_steps, fit_fraction, refit_every
        self.max_tokens, self.gradient, self.seed = max_tokens, gradient, seed
        self.center, self.zeta, self.coordinates, self.representation = center, zeta, coordinates, representation
        self.spectrum_every = spectrum_every
        self._measurements: dict[str, int] = {spec: 0 for spec in specs}
        self.optimizer = optimizer
        self.special_token_ids = None if special_token_ids is None else torch.as_tensor(sorted(set(special_token_ids)))
        misplaced = [name for name, value, owner in (
            ("total_steps", total_steps, "early"), ("fit_fraction", fit_fraction, "early"),
            ("refit_every", refit_every, "refit"), ("basis", basis, "fixed")) if value is not None and owner != fit]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} do(es) not apply to fit={fit!r}")
        if fit == "refit" or (fit == "early" and total_steps is not None):
            self._learned_schedule()  # validates total_steps / fit_fraction / refit_every now, not at step 0
        self._basis = basis
        self._dictionary = _dictionary_function(proxy_method)
        self._fit_tokens = fit_tokens
        self._generator = torch.Generator().manual_seed(seed)
        self._schedules: dict[str, ProxySchedule] = {}
        self._proxies: dict[str, TangentProxy] = {}
        self._stacked: dict[str, torch.Tensor] = {}  # [proxy, controls] as one d × (1 + R)k matrix per layer
        self._reservoirs: dict[str, _Reservoir] = {}
        self._step = 0
        self._last_recorded = -1
        self._handles: list = []
        self._tensor_handles: list = []
        self._active = False
        self._explicit: dict = {}
        self._auto: dict = {}
        self._forward_id = 0
        self._selection: dict = {}
        self._used: dict = {}
        self._reset_capture()
        self._pending_scalars: dict[int, dict] = {}
        self.meta.update(rank=rank, every=every, fit=fit, n_controls=n_controls, max_tokens=max_tokens,
                         spectrum_every=spectrum_every, gradient=gradient, seed=seed, center=center, zeta=float(zeta),
                         coordinates=coordinates,
                         proxy_method="pca" if self._dictionary is None else self._dictionary.__name__,
                         fit_fraction=fit_fraction, refit_every=refit_every, total_steps=total_steps)

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> "AnisotropyMonitor":
        if self._active:
            raise RuntimeError("this monitor is already active; do not nest `with monitor:` blocks")
        self._reset_capture()
        try:
            root = self.model
            self._handles.append(root.register_forward_pre_hook(self._root_pre_hook, with_kwargs=True))
            self._handles.append(root.register_forward_hook(self._root_hook))
            for spec, module in self.modules.items():
                self._handles.append(module.register_forward_hook(self._layer_hook(spec)))
            if self.optimizer is not None:
                self._handles.append(self.optimizer.register_step_pre_hook(lambda *args: self.step()))
        except BaseException:
            self._remove_hooks()
            raise
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None and self._has_pending_gradients():
                self.step()
            elif exc_type is not None:
                self._reset_capture()
        finally:
            try:
                self._remove_hooks()
                self._active = False
                self._flush_scalars(final=True)
            finally:
                self._flush_hooks()
        return False

    def close(self) -> None:
        """End monitoring now, as leaving the ``with`` block would (for use without ``with``, e.g. by the Trainer
        callback): records a step whose gradients are complete, removes every hook, runs the flush callbacks.
        Safe to call twice.

        Example:
            >>> import torch
            >>> monitor = AnisotropyMonitor(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], rank=2, total_steps=3)
            >>> _ = monitor.__enter__(); monitor.close(); monitor.close()
        """
        if self._active:
            self.__exit__(None, None, None)

    def _remove_hooks(self) -> None:
        for handle in self._handles + self._tensor_handles:
            handle.remove()
        self._handles.clear()
        self._tensor_handles.clear()

    # ------------------------------------------------------------------ step control
    @property
    def current_step(self) -> int:
        """The step the next captured passes belong to.

        Example:
            >>> import torch
            >>> AnisotropyMonitor(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], rank=2, total_steps=5).current_step
            0
        """
        return self._step

    def track(self, step: int | None = None, *, attention_mask=None, input_ids=None, token_mask=None) -> None:
        """Announce the step (and optionally the row masks) of the next forward/backward passes.

        ``attention_mask`` (``B × T``, non-zero = real token) drops padding rows; ``input_ids`` is needed for
        ``special_token_ids``; ``token_mask`` (``B × T`` bool) keeps only chosen positions (e.g. the masked
        positions of an MLM batch). Without them, the ``attention_mask``/``input_ids`` the model is called with
        are used. Moving to a later step records the previous one if its gradients are complete.

        Example:
            >>> monitor.track(step, attention_mask=batch["attention_mask"])  # doctest: +SKIP
        """
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
                raise ValueError(f"step must be a non-negative integer, got {step!r}")
            step = int(step)
            if step < self._step:
                raise ValueError(f"step {step} comes before the current step {self._step}; steps must not decrease")
            if step > self._step:
                if self._has_pending_gradients():
                    self.step()
                self._reset_capture()
                self._step = step
        self._explicit = {"attention_mask": attention_mask, "input_ids": input_ids, "token_mask": token_mask}

    def step(self, loss=None, **scalars) -> None:
        """Record the current step now (after ``backward()``), then move to the next one.

        Args:
            loss: the step's loss (default: the mean ``.loss`` of the model outputs seen during the step).
            **scalars: extra global series, like :meth:`log`.

        Example:
            >>> loss.backward(); monitor.step(lr=scheduler.get_last_lr()[0])  # doctest: +SKIP
        """
        step = self._step
        if scalars or loss is not None:
            extra = dict(scalars)
            if loss is not None:
                extra["loss"] = loss
            self._buffer_scalars(step, extra)
        try:
            if self._measured(step):
                self._measure_step(step)
        finally:  # a failed step (e.g. backward forgotten) leaves no stale rows behind
            self._reset_capture()
            self._explicit = {}
        self._step = step + 1
        self._flush_scalars()

    def log(self, step: int, **scalars) -> None:
        """Record user scalars at ``step``; values for a step not yet recorded are sent with its measurements.

        Example:
            >>> monitor.log(step, lr=1e-4, accuracy=0.71)  # doctest: +SKIP
        """
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        if not scalars:
            raise ValueError("log() needs at least one scalar, e.g. log(step, lr=1e-4)")
        self._buffer_scalars(int(step), scalars)
        self._flush_scalars()

    def _buffer_scalars(self, step: int, scalars: Mapping) -> None:
        values = {name: as_scalar(name, value) for name, value in scalars.items()}
        self._pending_scalars.setdefault(step, {}).update(values)

    def _flush_scalars(self, final: bool = False) -> None:
        for step in sorted(self._pending_scalars):
            if final or step < self._step or (step == self._step and not self._measured(step)):
                self._record(step, self._pending_scalars.pop(step))

    def _measured(self, step: int) -> bool:
        return step % self.every == 0

    # ------------------------------------------------------------------ capture
    def _reset_capture(self) -> None:
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles = []
        self._H: dict[str, dict[int, torch.Tensor]] = {spec: {} for spec in self.layers}
        self._G: dict[str, dict[int, torch.Tensor]] = {spec: {} for spec in self.layers}
        self._frozen: set[str] = set()
        self._losses: list[torch.Tensor] = []
        self._selection, self._used = {}, {}

    def _has_pending_gradients(self) -> bool:
        if self.gradient == "weight":
            return any(self._H[spec] for spec in self.layers) and all(
                self.modules[spec].weight.grad is not None for spec in self.layers)
        return any(self._G[spec] for spec in self.layers)

    def _capturing(self) -> bool:
        if not (self._active and torch.is_grad_enabled() and self._measured(self._step)):
            return False
        # gradient checkpointing re-runs forwards during backward: those are not new rows
        task = getattr(torch._C, "_current_graph_task_id", None)
        return task is None or task() == -1

    def _root_pre_hook(self, module, args, kwargs):
        self._forward_id += 1
        if not self._capturing():
            return None
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        input_ids = kwargs.get("input_ids", first if first is not None and not first.is_floating_point() else None)
        self._auto = {"attention_mask": kwargs.get("attention_mask"), "input_ids": input_ids}
        return None

    def _root_hook(self, module, args, output):
        if not self._capturing():
            return None
        loss = getattr(output, "loss", None) if not isinstance(output, torch.Tensor) else None
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._losses.append(loss.detach())
        return None

    def _row_mask(self, shape: torch.Size) -> torch.Tensor | None:
        """Boolean (B, T) mask of rows to keep, or None to keep all rows."""
        if len(shape) != 3:
            return None
        mask = None

        def pick(name):
            value = self._explicit.get(name)
            return self._auto.get(name) if value is None else value

        for name in ("attention_mask", "token_mask", "input_ids"):
            value = pick(name)
            if value is None or (name == "input_ids" and self.special_token_ids is None):
                continue
            value = torch.as_tensor(value).detach()
            if tuple(value.shape) != tuple(shape[:2]):
                raise ValueError(f"{name} has shape {tuple(value.shape)} but the layer output is "
                                 f"{tuple(shape)}; pass the (batch, sequence) {name} of this forward pass")
            value = value.to("cpu")
            keep = ~torch.isin(value, self.special_token_ids) if name == "input_ids" else value != 0
            mask = keep if mask is None else mask & keep
        if self.special_token_ids is not None and pick("input_ids") is None:
            raise ValueError("special_token_ids needs input_ids: call the model with input_ids= or pass "
                             "monitor.track(step, input_ids=batch['input_ids'])")
        return mask

    def _rows(self, spec: str, shape: torch.Size, device: torch.device) -> torch.Tensor:
        """Indices of the kept rows (flattened batch × sequence) of this forward pass for one layer.

        Valid rows (mask) and one seeded random order are shared by all layers of a forward pass; a layer takes
        the first rows of that order that fit its remaining ``max_tokens`` budget for the step, so layers with
        equal budgets keep the same tokens.
        """
        key = (self._forward_id, tuple(shape[:-1]))
        cached = self._selection.get(key)
        if cached is None:
            mask = self._row_mask(shape)
            n = math.prod(shape[:-1])
            valid = torch.arange(n) if mask is None else mask.reshape(-1).nonzero().squeeze(1)
            cached = self._selection[key] = {"valid": valid, "order": None}
        valid = cached["valid"]
        remaining = max(0, self.max_tokens - self._used.get(spec, 0))
        if valid.shape[0] > remaining:
            if cached["order"] is None:
                cached["order"] = torch.randperm(valid.shape[0], generator=self._generator)
            valid = valid[cached["order"][:remaining].sort().values]
        self._used[spec] = self._used.get(spec, 0) + valid.shape[0]
        return valid.to(device)

    def _layer_hook(self, spec: str):
        def hook(module, args, output):
            if not self._capturing():
                return None
            if self.gradient == "weight":
                tensor = args[0] if args else None
            else:
                tensor = output[0] if isinstance(output, (tuple, list)) else output
                tensor = getattr(tensor, "last_hidden_state", tensor)
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                raise TypeError(f"layer {spec!r} produced {type(tensor).__name__}, not a float tensor of hidden "
                                f"states; choose a module whose output (or first output) is (batch, seq, d)")
            if self.gradient == "hidden" and not tensor.requires_grad:
                self._frozen.add(spec)
                return None
            d = tensor.shape[-1]
            if self.dims[spec] is None:
                _check_rank_dim(self.rank, d, spec)
                self.dims[spec] = d
            rows = self._rows(spec, tensor.shape, tensor.device)
            if rows.numel() == 0:
                return None
            forward = self._forward_id
            flat = tensor.detach().reshape(-1, d)
            self._H[spec][forward] = flat.index_select(0, rows).float()
            if self.gradient == "hidden":
                step = self._step

                def grad_hook(grad):
                    if self._step == step and self._active:
                        self._G[spec][forward] = grad.detach().reshape(-1, d).index_select(0, rows).float()
                    return None

                self._tensor_handles.append(tensor.register_hook(grad_hook))
            return None

        return hook

    # ------------------------------------------------------------------ measurement
    def _take(self, step: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(H, G)`` of the step, validated (clear errors for a missing backward or a frozen layer)."""
        if not any(self._H[spec] for spec in self.layers) and not self._frozen:
            raise RuntimeError(
                f"no forward pass was captured for step {step}: run the model (with gradients enabled) inside "
                f"`with monitor:` before recording, and call monitor.track(step) for explicit step numbers"
            )
        data = {}
        for spec in self.layers:
            module = self.modules[spec]
            if self.gradient == "weight":
                grad = module.weight.grad
                if grad is None:
                    if not module.weight.requires_grad:
                        raise ValueError(f"layer {spec!r} is frozen (weight.requires_grad is False): it has no weight "
                                         f"gradient; monitor a trainable layer")
                    raise RuntimeError(f"no weight gradient at layer {spec!r} for step {step}: call loss.backward() "
                                       f"before monitor.step() (and record before optimizer.zero_grad())")
                if not self._H[spec]:
                    raise RuntimeError(f"no activations reached layer {spec!r} at step {step}")
                G = _weight_rows(module, grad.detach()).float()
                H = _concat(list(self._H[spec].values()))
            else:
                forwards = [f for f in self._H[spec] if f in self._G[spec]]
                if not forwards:
                    if spec in self._frozen and not self._H[spec]:
                        raise ValueError(
                            f"layer {spec!r} receives no gradient: the model is frozen at that layer (its output does "
                            f"not require grad); unfreeze it or monitor a later, trainable layer"
                        )
                    raise RuntimeError(
                        f"no gradient was captured at layer {spec!r} for step {step}: call loss.backward() before "
                        f"monitor.step() / optimizer.step() (the monitor reads dL/dh during your backward pass)"
                    )
                H = _concat([self._H[spec][f] for f in forwards])
                G = _concat([self._G[spec][f] for f in forwards])
            data[spec] = (H, G)
        return data

    def _measure_step(self, step: int) -> None:
        start = time.perf_counter()
        data = self._take(step)
        loss = torch.stack([l.float() for l in self._losses]).mean() if self._losses else None
        distributed = _world_size() > 1
        if distributed:
            data, loss = _gather(data, loss, self.gradient)
            if data is None:
                return
        values: dict[str, float] = {}
        raw: dict[str, np.ndarray] = {}
        fitting = False
        for spec in self.layers:
            H, G = data[spec]
            layer_values, layer_raw, layer_fitting = self._measure_layer(step, spec, H, G)
            values.update(layer_values)
            raw.update(layer_raw)
            fitting |= layer_fitting
        values["fitting"] = 1.0 if fitting else 0.0
        values["loss"] = math.nan if loss is None else float(loss)
        values.update(self._pending_scalars.pop(step, {}))
        values["monitor_ms"] = (time.perf_counter() - start) * 1e3
        self._record(step, values, raw)
        self._last_recorded = step

    def _schedule(self, spec: str) -> ProxySchedule:
        schedule = self._schedules.get(spec)
        if schedule is None:
            if self.fit == "early":
                if self.total_steps is None:
                    raise ValueError("fit='early' needs total_steps= (the run length in steps) to place the fit "
                                     "window; or use fit='refit' with refit_every=")
                schedule = self._learned_schedule()
                self.meta["fit_window"] = list(schedule.fit_window)
                self.meta["total_steps"] = self.total_steps
            elif self.fit == "refit":
                schedule = self._learned_schedule()
            else:
                basis = self._basis[spec] if isinstance(self._basis, Mapping) else self._basis
                if basis is None:
                    raise ValueError(f"fit='fixed' has no basis for layer {spec!r}; basis dict keys: "
                                     f"{list(self._basis)}")
                schedule = ProxySchedule("fixed", basis=basis if isinstance(basis, TangentProxy) else
                                         TangentProxy.from_basis(basis))
                if schedule.proxy.dim != self.dims[spec]:
                    raise ValueError(f"the fixed basis for layer {spec!r} has d = {schedule.proxy.dim} but the "
                                     f"layer has d = {self.dims[spec]}")
            self._schedules[spec] = schedule
            if self._dictionary is not None:
                self._reservoirs[spec] = _Reservoir(self._fit_tokens, self._generator)
        return schedule

    def _learned_schedule(self) -> ProxySchedule:
        """A fresh ``early`` or ``refit`` schedule from the monitor's settings (validates them)."""
        if self.fit == "early":
            return ProxySchedule("early", self.rank, total_steps=self.total_steps, fit_fraction=self.fit_fraction)
        return ProxySchedule("refit", self.rank, refit_every=self.refit_every)

    def _update_proxy(self, step: int, spec: str, H: torch.Tensor, moments: Moments | None) -> None:
        schedule = self._schedule(spec)
        changed = schedule.observe(step, H if moments is None else moments)
        if changed or (schedule.mode == "fixed" and spec not in self._proxies):
            self._adopt_proxy(spec)
        reservoir = self._reservoirs.get(spec)
        if reservoir is not None and schedule.needs_activations(step):
            reservoir.add(H)

    def _adopt_proxy(self, spec: str) -> None:
        """Take the schedule's new fit (or, for a custom method, fit the reservoir) and redraw the controls."""
        schedule, reservoir = self._schedules[spec], self._reservoirs.get(spec)
        if reservoir is not None and schedule.mode != "fixed":
            proxy = TangentProxy.fit(reservoir.rows, self.rank, method=self._dictionary)
            reservoir.clear()
        else:
            proxy = schedule.proxy
        self._proxies[spec] = proxy
        self._stacked[spec] = _stacked_bases(proxy.basis, normal_controls(proxy, self.n_controls, seed=self.seed))
        self.proxies[spec] = proxy.basis.detach().cpu()

    def fit_now(self) -> None:
        """Fit the proxies now on the activations pooled so far, when no step past the window will come
        (``fit_fraction=1``, or training stopped early). In ``early`` mode this closes the window.

        Example:
            >>> import torch
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> monitor = AnisotropyMonitor(net, ["0"], rank=2, total_steps=2, fit_fraction=1.0, n_controls=3)
            >>> with monitor:
            ...     for _ in range(2):
            ...         net(torch.randn(32, 8)).pow(2).sum().backward(); monitor.step()
            >>> monitor.fit_now(); monitor.proxies["0"].shape
            torch.Size([8, 2])
        """
        for spec in self.layers:
            schedule = self._schedules.get(spec)
            if schedule is None:
                raise ValueError(f"no step was recorded for layer {spec!r} yet; nothing to fit")
            if schedule.fit_now():
                self._adopt_proxy(spec)

    def tangent_proxies(self) -> dict[str, TangentProxy]:
        """The current :class:`~interp_widgets.geometry.alignment.TangentProxy` of every fitted layer.

        Example:
            >>> import torch
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=3).tangent_proxies()
            {}
        """
        return dict(self._proxies)

    def _attach(self, model: nn.Module) -> None:
        """Point the (inactive) monitor at another model of the same architecture (replay of checkpoints)."""
        if self._active:
            raise RuntimeError("cannot switch models while the monitor is active")
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        modules = {spec: resolve_module(inner, spec) for spec in self.layers}
        for spec, module in modules.items():
            d = _known_dim(inner, module, self.gradient)
            if d is not None and self.dims[spec] is not None and d != self.dims[spec]:
                raise ValueError(f"layer {spec!r} has d = {d} in this model but d = {self.dims[spec]} before; "
                                 f"replay checkpoints of one architecture")
        self.model, self.modules = inner, modules

    def _measure_layer(self, step: int, spec: str, H: torch.Tensor, G: torch.Tensor):
        values = _nan_values(spec)
        name = lambda metric: series_name(metric, spec)  # noqa: E731
        values[name("n_tokens")] = float(G.shape[0])
        values[name("nonfinite")] = 0.0
        raw: dict[str, np.ndarray] = {}
        if not (_all_finite(G) and _all_finite(H)):
            values[name("nonfinite")] = 1.0
            warnings.warn(f"step {step}, layer {spec!r}: non-finite gradients or activations; recorded as a flagged "
                          f"row (nonfinite|{spec} = 1) and kept away from the proxy fit", RuntimeWarning,
                          stacklevel=4)
            return values, raw, self._fitting(step, spec)
        schedule = self._schedule(spec)
        try:
            x = _as_points(H, min_rows=1, finite=True)
            # the fit window pools the moments of H; the spectrum below reuses their Gram when n ≥ d
            pooled = Moments._of(x) if schedule.needs_activations(step) else None
            self._update_proxy(step, spec, H, pooled)
            if spec in self._proxies:
                # gradient_alignment without re-validating the controls this monitor drew itself
                moments = Moments._of(_as_points(G, "G", min_rows=1, finite=True))
                if moments.count < 2:
                    raise ValueError(f"G has {moments.count} row(s); IsoScore* needs at least 2 gradient rows")
                proxy = self._proxies[spec]
                result = _alignment(moments, self._stacked[spec].to(moments.m2.device), proxy.rank, proxy.mean,
                                    center=self.center, zeta=float(self.zeta), target="scaled_identity",
                                    coordinates=self.coordinates)
                self._fill_alignment(values, name, result)
                raw[name("control_energy")] = result.energy_controls.numpy()
                raw[name("delta_isoscore_control")] = result.delta_iso_controls.numpy()
            if self.representation:
                spectrum_due = self._measurements[spec] % self.spectrum_every == 0
                self._measurements[spec] += 1
                if spectrum_due:
                    shared = pooled is not None and x.shape[0] >= x.shape[1]
                    metrics = _representation_metrics(x, gram=pooled.m2 if shared else None)
                    metrics["effective_rank"] = metrics["effective_rank_singular"]
                else:
                    metrics = _linear_time_metrics(x)
                for metric in _REPRESENTATION_SERIES:
                    if metric in metrics:
                        values[name(metric)] = float(metrics[metric])
        except ValueError as error:  # degenerate data (e.g. an all-zero gradient): record, never crash training
            warnings.warn(f"step {step}, layer {spec!r}: {error}; recorded NaN", RuntimeWarning, stacklevel=4)
        return values, raw, self._fitting(step, spec)

    def _fitting(self, step: int, spec: str) -> bool:
        """True inside the early fit window, or (refit) before the first proxy exists."""
        schedule = self._schedule(spec)
        if schedule.mode == "early":
            return schedule.phase(step) == "early"
        return schedule.mode == "refit" and spec not in self._proxies

    @staticmethod
    def _fill_alignment(values: dict, name: Callable[[str], str], result) -> None:
        controls = result.energy_controls.numpy()
        deltas = result.delta_iso_controls.numpy()
        mean_controls = float(controls.mean())
        q05, q95 = _quantiles(controls)
        d05, d95 = _quantiles(deltas)
        values.update({
            name("proxy_energy"): result.energy_proxy,
            name("control_energy_mean"): mean_controls,
            name("control_energy_q05"): q05,
            name("control_energy_q95"): q95,
            name("energy_ratio"): result.ratio,
            name("control_ratio_q05"): q05 / mean_controls if mean_controls > 0 else math.nan,
            name("control_ratio_q95"): q95 / mean_controls if mean_controls > 0 else math.nan,
            name("enrichment"): result.enrichment,
            name("z_score"): result.z_analytic,
            name("p_value"): result.p_value,
            name("isoscore_star_G"): result.iso_G,
            name("delta_isoscore_proxy"): result.delta_iso_proxy,
            name("delta_isoscore_control_mean"): float(np.mean(deltas)),
            name("delta_isoscore_control_q05"): d05,
            name("delta_isoscore_control_q95"): d95,
            name("anisotropy_share"): result.share_proxy,
            name("anisotropy_share_control_mean"): float(result.share_controls.mean()),
            name("isoscore_star_G_minus_proxy"): result.iso_minus_proxy,
            name("energy_mean_direction"): math.nan if result.energy_mean_direction is None
            else result.energy_mean_direction,
        })

    def __repr__(self) -> str:
        state = "active" if self._active else "idle"
        return f"AnisotropyMonitor(layers={self.layers}, rank={self.rank}, fit={self.fit!r}, {state}, rows={len(self)})"


#: Alias: the same class under the name used in the project brief.
GeometryMonitor = AnisotropyMonitor


# ----------------------------------------------------------------------------------------------------------
# distributed reduction
# ----------------------------------------------------------------------------------------------------------


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """All-gather ``n_r × d`` row blocks of different lengths; returns their concatenation in rank order."""
    dist = torch.distributed
    world = dist.get_world_size()
    count = torch.tensor([rows.shape[0]], device=rows.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    longest = int(max(int(c) for c in counts))
    padded = rows.new_zeros((longest, rows.shape[1]))
    padded[: rows.shape[0]] = rows
    blocks = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(blocks, padded)
    return torch.cat([block[: int(c)] for block, c in zip(blocks, counts)])


def _gather(data: dict, loss: torch.Tensor | None, gradient: str):
    """Rank 0 gets the union of every rank's rows and the mean loss; other ranks get ``(None, None)``."""
    dist = torch.distributed
    gathered = {}
    for spec, (H, G) in data.items():
        H_all = _gather_rows(H.contiguous())
        G_all = G if gradient == "weight" else _gather_rows(G.contiguous())
        gathered[spec] = (H_all, G_all)
    device = next(iter(data.values()))[0].device
    local = torch.tensor([math.nan if loss is None else float(loss)], dtype=torch.float64, device=device)
    losses = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(losses, local)
    if dist.get_rank() != 0:
        return None, None
    stacked = torch.cat(losses)
    mean_loss = None if bool(torch.isnan(stacked).all()) else stacked[~torch.isnan(stacked)].mean()
    return gathered, mean_loss
