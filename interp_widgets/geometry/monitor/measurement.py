"""Proxy fitting and measurement for the monitor, one layer at a time: each layer's fit schedule
(:class:`~interp_widgets.geometry.alignment.schedule.ProxySchedule`), custom dictionary methods with their reservoir of rows,
the current proxy and its matched-rank controls, and the series recorded per measured step.

Example:
    >>> Reservoir(3, torch.Generator()).seen
    0
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from interp_widgets.geometry._kernels.bundles import linear_time_bundle, linear_time_bundle32, representation_bundle
from interp_widgets.geometry._kernels.inputs import as_float64, as_points, checked_points
from interp_widgets.geometry.alignment.measure import (
    AlignmentResult,
    SubspaceBatch,
    alignment_from_moments,
    alignments_from_moments,
    stacked_bases,
)
from interp_widgets.geometry.alignment.controls import normal_controls
from interp_widgets.geometry.log.geometry_log import LAYER_METRICS, series_name
from interp_widgets.geometry.moments import Moments, moments_of_float32_rows, moments_of_points
from interp_widgets.geometry.alignment.proxy import TangentProxy, dictionary_function
from interp_widgets.geometry.alignment.schedule import ProxySchedule
from interp_widgets.geometry.monitor.binding import BoundLayers
from interp_widgets.geometry.monitor.config import MonitorConfig

__all__ = ["Measurement", "Reservoir", "measurement_threads"]


@contextlib.contextmanager
def measurement_threads(threads: int | None):
    """Run a measured step with ``threads`` torch intra-op threads (``MonitorConfig.measurement_threads``), restoring
    the caller's count afterwards, also when the step raises; None leaves the caller's setting untouched.
    ``torch.set_num_threads`` is process-wide: while the step runs, the whole process uses ``threads``.

    Example:
        >>> before = torch.get_num_threads()
        >>> with measurement_threads(1):
        ...     inside = torch.get_num_threads()
        >>> inside, torch.get_num_threads() == before
        (1, True)
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Reservoir:
    """Uniform reservoir sample of at most ``capacity`` rows (custom proxy methods need raw rows, not moments).

    Example:
        >>> reservoir = Reservoir(3, torch.Generator().manual_seed(0))
        >>> reservoir.add(torch.randn(10, 2)); reservoir.rows.shape, reservoir.seen
        (torch.Size([3, 2]), 10)
    """

    def __init__(self, capacity: int, generator: torch.Generator) -> None:
        self.capacity, self.generator = capacity, generator
        self.rows: torch.Tensor | None = None
        self.seen = 0

    def add(self, rows: torch.Tensor) -> None:
        rows = rows.detach().to("cpu", torch.float32)
        if self.rows is None:
            self.rows = rows[: self.capacity].clone()
            self.seen, rows = self.rows.shape[0], rows[self.capacity :]
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


def gradient_moments(G: torch.Tensor) -> Moments:
    """The moments of one step's finite gradient rows, with ``M2`` from the float32 blocked Gram (error bound in
    :func:`~interp_widgets.geometry.moments.moments_of_float32_rows`): float32 rows are never copied to float64;
    other dtypes go through float64 first.

    Example:
        >>> gradient_moments(torch.ones(3, 2)).m2.tolist()
        [[0.0, 0.0], [0.0, 0.0]]
    """
    if G.ndim == 2 and G.dtype == torch.float32 and G.shape[0] >= 1 and G.shape[1] >= 1:
        return moments_of_float32_rows(G.detach())
    return moments_of_points(as_points(G, "G", min_rows=1, finite=True), fast=True)


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every entry is finite, from sums: a NaN or ±inf entry makes any sum NaN or ±inf, so a finite sum in
    the tensor's own dtype proves every entry finite (a quarter of the float64 sum's cost, a fortieth of
    ``isfinite(tensor).all()``); a non-finite one may also be an overflow of finite entries, so it is decided by
    the float64 sum, which cannot overflow.

    Example:
        >>> big = torch.full((4,), 3e38)  # finite, but its float32 sum overflows
        >>> all_finite(big), all_finite(torch.tensor([1.0, float("nan")]))
        (True, False)
    """
    if bool(torch.isfinite(tensor.sum())):
        return True
    return bool(torch.isfinite(tensor.sum(dtype=torch.float64)))


def all_finite_each(tensors: Sequence[torch.Tensor]) -> list[bool]:
    """:func:`all_finite` of each tensor, deciding the finite ones with one device synchronisation for all of them
    (on a GPU each ``bool()`` waits for every kernel queued before it).

    Example:
        >>> all_finite_each([torch.ones(3), torch.tensor([float("inf")]), torch.full((4,), 3e38)])
        [True, False, True]
    """
    if not tensors:
        return []
    device = tensors[0].device
    sums = torch.stack([t.sum().float().to(device) for t in tensors])
    return [flag or all_finite(t) for flag, t in zip(torch.isfinite(sums).tolist(), tensors)]


def quantiles(values: np.ndarray) -> tuple[float, float]:
    """The 5 % and 95 % quantiles of a 1-D array, as ``np.quantile``'s default (linear) method gives them, NaN when
    any value is NaN, in a third of its time on the monitor's 20 controls (it runs twice per layer and step).

    Example:
        >>> values = np.array([3.0, 1.0, 4.0, 1.5, 9.0, 2.6])
        >>> quantiles(values) == tuple(np.quantile(values, [0.05, 0.95])), quantiles(np.array([1.0, np.nan]))
        (True, (nan, nan))
    """
    ordered = np.sort(values)
    if ordered.size == 0 or np.isnan(ordered[-1]):  # sort puts NaN last
        return math.nan, math.nan
    last = ordered.size - 1
    result = []
    for q in (0.05, 0.95):  # numpy's virtual index and interpolation, term for term, so the values are identical
        position = last * q
        low = math.floor(position)
        high = min(low + 1, last)
        fraction = position - low
        below, above = float(ordered[low]), float(ordered[high])
        step = above - below
        result.append(above - step * (1 - fraction) if fraction >= 0.5 else below + step * fraction)
    return result[0], result[1]


#: The representation metrics the monitor records per layer (``effective_rank`` is the singular-value convention).
REPRESENTATION_SERIES = (
    "avg_cosine",
    "isoscore",
    "effective_rank",
    "avg_cosine_centered",
    "participation_ratio",
    "effective_rank_eigen",
    "stable_rank",
    "top1_explained_variance",
    "drift_share",
)


def nan_values(layer: str) -> dict[str, float]:
    return {series_name(metric, layer): math.nan for metric in LAYER_METRICS}


def degenerate(step: int, spec: str, error: ValueError) -> None:
    """Warn that a layer's data was degenerate at this step (recorded as NaN; training goes on)."""
    warnings.warn(f"step {step}, layer {spec!r}: {error}; recorded NaN", RuntimeWarning, stacklevel=5)


@dataclass(eq=False)
class LayerStep:
    """One layer's measurement of one step while :meth:`Measurement.measure_step` builds it."""

    spec: str
    values: dict
    raw: dict = field(default_factory=dict)
    rows: torch.Tensor | None = None  # H, validated
    points: torch.Tensor | None = None  # H as float64 points, when the fit window or a spectrum needs them
    pooled: Moments | None = None  # H's moments, in the fit window
    moments: Moments | None = None  # G's moments, once the layer has a proxy
    done: bool = False  # nothing more to measure (non-finite or degenerate data)
    fitting: bool = False

    def name(self, metric: str) -> str:
        return series_name(metric, self.spec)


class Measurement:
    """Each layer's proxy (schedule, custom-method reservoir, current fit, controls) and its per-step measurement.

    It reads its settings from ``config`` (the monitor hands it a new one when the Trainer callback fills in
    ``total_steps``) and the layers from ``layers``; it writes the fit window to ``log.meta`` and the fitted bases to
    ``log.proxies``.

    Args:
        config: the monitor's :class:`~interp_widgets.geometry.monitor.config.MonitorConfig`.
        layers: the monitor's :class:`~interp_widgets.geometry.monitor.binding.BoundLayers` (their dimensions).
        log: the :class:`~interp_widgets.geometry.GeometryLog` recorded into.
        generator: the monitor's generator (reservoir sampling).

    Example:
        >>> from interp_widgets.geometry import GeometryLog
        >>> from interp_widgets.geometry.monitor.binding import bind_layers
        >>> layers = bind_layers(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], "hidden", rank=2)
        >>> log = GeometryLog(layers.names)
        >>> measurement = Measurement(MonitorConfig(rank=2, total_steps=4), layers, log, torch.Generator())
        >>> measurement.schedule("0").fit_window, log.meta["fit_window"], measurement.fitted
        ((0, 2), [0, 2], {})
    """

    def __init__(self, config: MonitorConfig, layers: BoundLayers, log, generator: torch.Generator) -> None:
        self.config, self.layers, self.log, self.generator = config, layers, log, generator
        self.dictionary = dictionary_function(config.proxy_method)
        self.schedules: dict[str, ProxySchedule] = {}
        self.fitted: dict[str, TangentProxy] = {}
        self.stacked: dict[str, torch.Tensor] = {}  # [proxy, controls] as one d × (1 + R)k matrix per layer
        self.reservoirs: dict[str, Reservoir] = {}
        self.measurements: dict[str, int] = {spec: 0 for spec in layers.names}
        self._batched: dict[tuple, tuple] = {}  # layers -> (their stacked bases, them as one SubspaceBatch)

    def schedule(self, spec: str) -> ProxySchedule:
        schedule = self.schedules.get(spec)
        if schedule is None:
            config = self.config
            if config.fit == "early":
                if config.total_steps is None:
                    raise ValueError(
                        "fit='early' needs total_steps= (the run length in steps) to place the fit "
                        "window; or use fit='refit' with refit_every="
                    )
                schedule = config.schedule()
                self.log.meta["fit_window"] = list(schedule.fit_window)
                self.log.meta["total_steps"] = config.total_steps
            elif config.fit == "refit":
                schedule = config.schedule()
            else:
                basis = config.basis[spec] if isinstance(config.basis, Mapping) else config.basis
                if basis is None:
                    raise ValueError(
                        f"fit='fixed' has no basis for layer {spec!r}; basis dict keys: {list(config.basis)}"
                    )
                schedule = ProxySchedule(
                    "fixed", basis=basis if isinstance(basis, TangentProxy) else TangentProxy.from_basis(basis)
                )
                if schedule.proxy.dim != self.layers.dims[spec]:
                    raise ValueError(
                        f"the fixed basis for layer {spec!r} has d = {schedule.proxy.dim} but the "
                        f"layer has d = {self.layers.dims[spec]}"
                    )
            self.schedules[spec] = schedule
            if self.dictionary is not None:
                self.reservoirs[spec] = Reservoir(config.fit_tokens, self.generator)
        return schedule

    def update_proxy(self, step: int, spec: str, H: torch.Tensor, moments: Moments | None) -> None:
        schedule = self.schedule(spec)
        changed = schedule.observe(step, H if moments is None else moments)
        if changed or (schedule.mode == "fixed" and spec not in self.fitted):
            self.adopt_proxy(spec)
        reservoir = self.reservoirs.get(spec)
        if reservoir is not None and schedule.needs_activations(step):
            reservoir.add(H)

    def adopt_proxy(self, spec: str) -> None:
        """Take the schedule's new fit (or, for a custom method, fit the reservoir) and redraw the controls."""
        schedule, reservoir = self.schedules[spec], self.reservoirs.get(spec)
        if reservoir is not None and schedule.mode != "fixed":
            proxy = TangentProxy.fit(reservoir.rows, self.config.rank, method=self.dictionary)
            reservoir.clear()
        else:
            proxy = schedule.proxy
        self.fitted[spec] = proxy
        self.stacked[spec] = stacked_bases(
            proxy.basis, normal_controls(proxy, self.config.n_controls, seed=self.config.seed)
        )
        self.log.proxies[spec] = proxy.basis.detach().cpu()

    def fit_now(self) -> None:
        """Fit every layer's proxy on the activations pooled so far (see ``AnisotropyMonitor.fit_now``)."""
        for spec in self.layers.names:
            schedule = self.schedules.get(spec)
            if schedule is None:
                raise ValueError(f"no step was recorded for layer {spec!r} yet; nothing to fit")
            if schedule.fit_now():
                self.adopt_proxy(spec)

    def measure_step(self, step: int, data: Mapping[str, tuple[torch.Tensor, torch.Tensor]]):
        """``(values, raw)`` of one measured step: every layer's series and ``fitting`` (1.0 while any layer's proxy
        is being fitted). Each layer is prepared (checks, proxy schedule, gradient moments), then the alignments of
        all layers of one width are computed as one batch (:func:`alignments_from_moments`: the small terms cost one
        set of kernel launches, not one per layer), then each layer's representation metrics."""
        values: dict[str, float] = {}
        raw: dict[str, np.ndarray] = {}
        on_cpu = all(H.device.type == "cpu" for H, _ in data.values())
        with measurement_threads(self.config.measurement_threads) if on_cpu else contextlib.nullcontext():
            names = self.layers.names
            finite = all_finite_each([t for spec in names for t in data[spec]])  # H, G of each layer
            layers = [
                self.prepare_layer(step, spec, *data[spec], finite=finite[2 * i] and finite[2 * i + 1])
                for i, spec in enumerate(names)
            ]
            self.align(step, [layer for layer in layers if layer.moments is not None])
            for layer in layers:
                self.finish_layer(step, layer)
                values.update(layer.values)
                raw.update(layer.raw)
        values["fitting"] = 1.0 if any(layer.fitting for layer in layers) else 0.0
        return values, raw

    def prepare_layer(self, step: int, spec: str, H: torch.Tensor, G: torch.Tensor, finite: bool) -> "LayerStep":
        """A layer's step up to its gradient moments: finiteness (``finite``: whether ``H`` and ``G`` are, decided
        for every layer at once by :meth:`measure_step`), the proxy schedule (fit window, fit), and, once the layer
        has a proxy, the moments of ``G`` for :meth:`align`."""
        layer = LayerStep(spec, nan_values(spec))
        layer.values[layer.name("n_tokens")] = float(G.shape[0])
        layer.values[layer.name("nonfinite")] = 0.0
        if not finite:
            layer.values[layer.name("nonfinite")] = 1.0
            warnings.warn(
                f"step {step}, layer {spec!r}: non-finite gradients or activations; recorded as a flagged "
                f"row (nonfinite|{spec} = 1) and kept away from the proxy fit",
                RuntimeWarning,
                stacklevel=4,
            )
            layer.done = True
            return layer
        schedule = self.schedule(spec)
        try:
            layer.rows = checked_points(H, min_rows=1, finite=True)
            # the fit window pools the moments of H (float64 points); the spectrum reuses their Gram when n ≥ d
            if schedule.needs_activations(step):
                layer.points = as_float64(layer.rows)
                layer.pooled = moments_of_points(layer.points)
            self.update_proxy(step, spec, H, layer.pooled)
            if spec in self.fitted:
                moments = gradient_moments(G)
                if moments.count < 2:
                    raise ValueError(f"G has {moments.count} row(s); IsoScore* needs at least 2 gradient rows")
                layer.moments = moments
        except ValueError as error:  # degenerate data (e.g. an all-zero gradient): record, never crash training
            degenerate(step, spec, error)
            layer.done = True
        return layer

    def align(self, step: int, layers: list["LayerStep"]) -> None:
        """The proxy-vs-controls alignment of every prepared layer (without re-validating the controls this
        monitor drew itself), batched over layers of the same width, rank and number of controls; a layer whose
        data is degenerate is recorded as NaN on its own."""
        groups: dict[tuple, list[LayerStep]] = {}
        for layer in layers:
            stacked = self.stacked[layer.spec]
            key = (tuple(stacked.shape), self.fitted[layer.spec].rank, layer.moments.m2.device)
            groups.setdefault(key, []).append(layer)
        settings = dict(
            center=self.config.center,
            zeta=float(self.config.zeta),
            target="scaled_identity",
            coordinates=self.config.coordinates,
            fast=True,
        )
        for (_, rank, device), group in groups.items():
            specs = [layer.spec for layer in group]
            try:
                results = alignments_from_moments(
                    [layer.moments for layer in group],
                    self.batched_bases(specs, rank, device),
                    rank,
                    [self.fitted[spec].mean for spec in specs],
                    **settings,
                )
            except ValueError:  # some layer is degenerate: each on its own, so the warning names it
                results = []
                for layer in group:
                    try:
                        results.append(
                            alignment_from_moments(
                                layer.moments,
                                self.stacked[layer.spec].to(device),
                                rank,
                                self.fitted[layer.spec].mean,
                                **settings,
                            )
                        )
                    except ValueError as error:
                        degenerate(step, layer.spec, error)
                        layer.done = True
                        results.append(None)
            for layer, result in zip(group, results):
                if result is not None:
                    alignment_values(layer.values, layer.name, result)
                    layer.raw[layer.name("control_energy")] = result.energy_controls.numpy()
                    layer.raw[layer.name("delta_isoscore_control")] = result.delta_iso_controls.numpy()

    def batched_bases(self, specs: list[str], rank: int, device: torch.device) -> SubspaceBatch:
        """The layers' stacked bases as one :class:`SubspaceBatch`, rebuilt only when a proxy changes."""
        current = tuple(self.stacked[spec] for spec in specs)
        cached = self._batched.get(tuple(specs))
        if cached is None or any(a is not b for a, b in zip(cached[0], current)) or cached[1].rows.device != device:
            cached = (current, SubspaceBatch.from_stacked(torch.stack(current).to(device), rank))
            self._batched[tuple(specs)] = cached
        return cached[1]

    def finish_layer(self, step: int, layer: "LayerStep") -> None:
        """The layer's representation metrics (a full spectrum every ``spectrum_every`` measurements) and whether
        its proxy is being fitted."""
        spec = layer.spec
        if not layer.done and self.config.representation:
            try:
                spectrum_due = self.measurements[spec] % self.config.spectrum_every == 0
                self.measurements[spec] += 1
                rows, pooled = layer.rows, layer.pooled
                if spectrum_due:
                    x = layer.points if layer.points is not None else as_float64(rows)
                    shared = pooled is not None and x.shape[0] >= x.shape[1]
                    metrics = representation_bundle(x, gram=pooled.m2 if shared else None, fast=True)
                    metrics["effective_rank"] = metrics["effective_rank_singular"]
                elif rows.dtype == torch.float32:  # float32 passes with a proven bound (else float64)
                    metrics = linear_time_bundle32(rows)
                else:
                    metrics = linear_time_bundle(as_float64(rows))
                for metric in REPRESENTATION_SERIES:
                    if metric in metrics:
                        layer.values[layer.name(metric)] = float(metrics[metric])
            except ValueError as error:
                degenerate(step, spec, error)
        layer.fitting = self.fitting(step, spec)

    def fitting(self, step: int, spec: str) -> bool:
        """True inside the early fit window, or (refit) before the first proxy exists."""
        schedule = self.schedule(spec)
        if schedule.mode == "early":
            return schedule.phase(step) == "early"
        return schedule.mode == "refit" and spec not in self.fitted


def alignment_values(values: dict, name: Callable[[str], str], result: AlignmentResult) -> None:
    """Write the per-layer alignment series of one :class:`~interp_widgets.geometry.alignment.measure.AlignmentResult`
    into ``values`` (``name(metric)`` gives the flat series name), with the controls' mean and 5–95 % quantiles.

    Example:
        >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
        >>> proxy = TangentProxy.from_basis(torch.eye(16)[:, :2])
        >>> G = torch.randn(2000, 16); G[:, :2] *= 10  # gradients concentrated in the proxy
        >>> result = gradient_alignment(G, proxy, normal_controls(proxy, 20, seed=0))
        >>> values = {}; alignment_values(values, lambda metric: metric + "|0", result)
        >>> values["energy_ratio|0"] == result.ratio, values["control_ratio_q05|0"] < 1 < values["control_ratio_q95|0"]
        (True, True)
    """
    controls = result.energy_controls.numpy()
    deltas = result.delta_iso_controls.numpy()
    mean_controls = float(controls.mean())
    q05, q95 = quantiles(controls)
    d05, d95 = quantiles(deltas)
    values.update(
        {
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
            name("energy_mean_direction"): math.nan
            if result.energy_mean_direction is None
            else result.energy_mean_direction,
        }
    )
