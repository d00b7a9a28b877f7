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
its schedule (:class:`~interp_widgets.geometry.alignment.schedule.ProxySchedule`), draws the matched-rank normal controls
(:func:`~interp_widgets.geometry.alignment.controls.normal_controls`) and records, per layer, everything of
:func:`~interp_widgets.geometry.alignment.measure.gradient_alignment` and
:func:`~interp_widgets.geometry.metrics.representation_metrics` into the :class:`~interp_widgets.geometry.log.geometry_log.
GeometryLog` it holds as ``monitor.history`` (series ``"<metric>|<layer>"``, see
:data:`~interp_widgets.geometry.log.geometry_log.LAYER_METRICS`); the log's reading, display and saving API is available on
the monitor itself (``monitor.series(…)``, ``monitor.widget()``, ``monitor.save(…)`` …).

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
  too large (checked against each layer's width), and, when the :class:`~interp_widgets.geometry.monitor.config.
  MonitorConfig` is built, every setting (``n_controls < 1``, an unknown setting name …).

Under ``torch.distributed`` rank 0 measures the rows of all ranks (:mod:`interp_widgets.geometry.monitor.distributed`).

Example (fine-tuning a copy of the tiny BERT classifier for 4 steps; the first 2 fit the proxy):
    >>> import copy
    >>> net = copy.deepcopy(model); opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> batch = tokenizer(texts[:8], padding=True, return_tensors="pt"); labels = torch.arange(8) % 3
    >>> monitor = AnisotropyMonitor(net, ["layer:1"], rank=4, n_controls=5, total_steps=4, optimizer=opt)
    >>> with monitor:
    ...     for step in range(4):
    ...         monitor.track(step, attention_mask=batch["attention_mask"])
    ...         net(**batch, labels=labels).loss.backward()
    ...         opt.step(); opt.zero_grad()
    >>> monitor.to_dataframe().query("metric == 'energy_ratio'")[["step", "layer"]].values.tolist()
    [[2, 'layer:1'], [3, 'layer:1']]
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from torch import nn

from interp_widgets.geometry.monitor.binding import bind_layers, resolve_module
from interp_widgets.geometry.monitor.config import SETTINGS, MonitorConfig
from interp_widgets.geometry.monitor.capture import Capture
from interp_widgets.geometry.monitor.delegation import HISTORY_API, PendingScalars, offer_history_api
from interp_widgets.geometry.monitor.distributed import gather, world_size
from interp_widgets.geometry.monitor.measurement import Measurement
from interp_widgets.geometry.log.geometry_log import GeometryLog, check_step
from interp_widgets.geometry.alignment.proxy import TangentProxy

__all__ = ["AnisotropyMonitor", "HISTORY_API", "MonitorConfig", "resolve_module"]


@offer_history_api
class AnisotropyMonitor:
    """Measure tangent-proxy gradient alignment and anisotropy at chosen layers while the user's loop trains.

    Use as a context manager around the training loop (hooks exist only inside it). It records into a
    :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog`, :attr:`history`, whose API it also offers directly:
    ``len()``, ``steps``, ``series_names()``, ``series()``, ``raw()``, ``to_dataframe()``, ``chart()``, ``widget()``,
    ``save()``, ``snapshot()``, ``subscribe()``, ``on_flush()``, ``layers``, ``x_label``, ``max_rows``, ``meta`` and
    ``proxies`` (so the live widget takes a monitor or its history alike).

    Args:
        model: the model being trained (a Hugging Face model, any ``nn.Module``, or a DDP wrapper).
        layers: layer specs: ``"layer:i"`` and its output sub-points (``"layer:i.attn_out"``…) of HF models, ints,
            module paths, or TransformerLens hook names; each is recorded by its canonical name
            (:mod:`interp_widgets.layers`). With ``gradient="weight"`` each must be an ``nn.Linear`` (or
            transformers ``Conv1D``).
        config: the settings, a :class:`~interp_widgets.geometry.monitor.config.MonitorConfig` (its docstring lists
            them all: ``rank``, ``fit``, ``total_steps``, ``n_controls``, ``max_tokens``, ``gradient``,
            ``measurement_threads`` …); None for the defaults.
        optimizer: record automatically right before each ``optimizer.step()`` (when gradients are complete).
        **overrides: settings of :class:`~interp_widgets.geometry.monitor.config.MonitorConfig` by name, applied
            over ``config`` (``AnisotropyMonitor(model, layers, rank=8)``); an unknown name raises a TypeError
            naming the closest setting.

    The settings stay readable on the monitor (``monitor.rank``, ``monitor.fit`` …), from :attr:`config`.

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
        layers: Sequence[str | int],
        config: MonitorConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        **overrides,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(layers, (str, int)) or not layers:
            raise ValueError("layers must be a non-empty list, e.g. ['layer:2'] or ['bert.encoder.layer.2']")
        config = MonitorConfig.resolve(config, overrides)
        #: The settings (a frozen :class:`~interp_widgets.geometry.monitor.config.MonitorConfig`).
        self.config = config
        #: The monitored layers bound to the model, shared with the capture and the measurement.
        self.bound = bind_layers(model, layers, config.gradient, config.rank)
        #: The record of every measured step (what ``series()``, ``widget()``, ``save()`` … of the monitor read).
        self.history = GeometryLog(self.bound.names, x_label=config.x_label, max_rows=config.max_rows)
        self.optimizer = optimizer
        self._generator = torch.Generator().manual_seed(config.seed)
        self._measurement = Measurement(config, self.bound, self.history, self._generator)
        self._step = 0
        self._active = False
        self._capture = Capture(
            config,
            self.bound,
            self._generator,
            live=lambda: self._active and self._measured(self._step),
            current_step=lambda: self._step,
        )
        self._pending_scalars = PendingScalars()
        dictionary = self._measurement.dictionary
        self.meta.update(
            rank=config.rank,
            every=config.every,
            fit=config.fit,
            n_controls=config.n_controls,
            max_tokens=config.max_tokens,
            spectrum_every=config.spectrum_every,
            gradient=config.gradient,
            seed=config.seed,
            center=config.center,
            zeta=float(config.zeta),
            coordinates=config.coordinates,
            proxy_method="pca" if dictionary is None else dictionary.__name__,
            fit_fraction=config.fit_fraction,
            refit_every=config.refit_every,
            total_steps=config.total_steps,
        )
        if config.measurement_threads is not None:
            self.meta["measurement_threads"] = config.measurement_threads

    def __getattr__(self, name: str):
        # the settings read as attributes (monitor.rank …); only called for names not found the usual way
        if name in SETTINGS and "config" in self.__dict__:
            return getattr(self.__dict__["config"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name in SETTINGS and name not in HISTORY_API:  # x_label, max_rows: the history's own
            raise AttributeError(
                f"{name} is a MonitorConfig setting, fixed when the monitor is built; pass it to AnisotropyMonitor "
                f"(or use set_total_steps for the run length)"
            )
        super().__setattr__(name, value)

    @property
    def model(self) -> nn.Module:
        """The monitored model (a DDP wrapper's inner module).

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> AnisotropyMonitor(net, ["0"], rank=2, total_steps=3).model is net
            True
        """
        return self.bound.model

    @property
    def modules(self) -> dict[str, nn.Module]:
        """``{canonical layer name: module}`` of the monitored layers.

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> AnisotropyMonitor(net, ["0"], rank=2, total_steps=3).modules["0"] is net[0]
            True
        """
        return self.bound.modules

    @property
    def dims(self) -> dict[str, int | None]:
        """``{canonical layer name: width d}`` (None until the first forward pass where it is not known up front).

        Example:
            >>> AnisotropyMonitor(torch.nn.Sequential(torch.nn.Linear(8, 6)), ["0"], rank=2, total_steps=3).dims
            {'0': 6}
        """
        return self.bound.dims

    def set_total_steps(self, total_steps: int) -> None:
        """Set the run length of ``fit="early"`` once it is known (the Trainer and Lightning callbacks do, from
        their trainer), before the first step is recorded.

        Example:
            >>> monitor = AnisotropyMonitor(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], rank=2)
            >>> monitor.set_total_steps(10); monitor.total_steps, monitor.meta["total_steps"]
            (10, 10)
        """
        if self._measurement.schedules:
            raise RuntimeError("total_steps cannot change after the first recorded step; set it before training")
        self.config = self.config.with_overrides(total_steps=total_steps)
        self._measurement.config = self._capture.config = self.config
        self.meta["total_steps"] = total_steps

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> "AnisotropyMonitor":
        if self._active:
            raise RuntimeError("this monitor is already active; do not nest `with monitor:` blocks")
        self._capture.reset()
        self._capture.install(self.optimizer, self.step)
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None and self._capture.has_pending_gradients():
                self.step()
            elif exc_type is not None:
                self._capture.reset()
        finally:
            try:
                self._capture.remove_hooks()
                self._active = False
                self._flush_scalars(final=True)
            finally:
                self.history.flush()
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

        Example (the rows kept are the 5 + 3 real tokens of the padded batch):
            >>> import copy
            >>> net = copy.deepcopy(model); batch = tokenizer(["a good film", "bad"], padding=True, return_tensors="pt")
            >>> monitor = AnisotropyMonitor(net, ["layer:0"], rank=4, fit="refit", refit_every=2, n_controls=3)
            >>> with monitor:
            ...     monitor.track(0, attention_mask=batch["attention_mask"])
            ...     net(**batch, labels=torch.tensor([2, 0])).loss.backward()
            ...     monitor.track(1)  # moving on records step 0
            >>> monitor.steps.tolist(), monitor.series("n_tokens|layer:0")[1].tolist()
            ([0], [8.0])
        """
        if step is not None:
            step = check_step(step)
            if step < self._step:
                raise ValueError(f"step {step} comes before the current step {self._step}; steps must not decrease")
            if step > self._step:
                if self._capture.has_pending_gradients():
                    self.step()
                self._capture.reset()
                self._step = step
        self._capture.explicit = {"attention_mask": attention_mask, "input_ids": input_ids, "token_mask": token_mask}

    def step(self, loss=None, **scalars) -> None:
        """Record the current step now (after ``backward()``), then move to the next one.

        Args:
            loss: the step's loss (default: the mean ``.loss`` of the model outputs seen during the step).
            **scalars: extra global series, like :meth:`log`.

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> monitor = AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=2, n_controls=3)
            >>> with monitor:
            ...     loss = net(torch.randn(16, 8)).pow(2).mean(); loss.backward(); monitor.step(loss, lr=0.01)
            >>> monitor.current_step, monitor.series("lr")[1].tolist(), monitor.series("loss")[1].tolist() == [loss.item()]
            (1, [0.01], True)
        """
        step = self._step
        if scalars or loss is not None:
            extra = dict(scalars)
            if loss is not None:
                extra["loss"] = loss
            self._pending_scalars.add(step, extra)
        try:
            if self._measured(step):
                self._measure_step(step)
        finally:  # a failed step (e.g. backward forgotten) leaves no stale rows behind
            self._capture.reset()
            self._capture.explicit = {}
        self._step = step + 1
        self._flush_scalars()

    def log(self, step: int, **scalars) -> None:
        """Record user scalars at ``step``; values for a step not yet recorded are sent with its measurements.

        Example (``lr`` waits for step 0's measurement; ``accuracy`` joins the row of the step just recorded):
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> monitor = AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=2, n_controls=3)
            >>> with monitor:
            ...     monitor.log(0, lr=1e-4); net(torch.randn(16, 8)).sum().backward(); monitor.step()
            ...     monitor.log(0, accuracy=0.71)
            >>> len(monitor), monitor.series("lr")[1].tolist(), monitor.series("accuracy")[1].tolist()
            (1, [0.0001], [0.71])
        """
        step = check_step(step)
        if not scalars:
            raise ValueError("log() needs at least one scalar, e.g. log(step, lr=1e-4)")
        self._pending_scalars.add(step, scalars)
        self._flush_scalars()

    def _flush_scalars(self, final: bool = False) -> None:
        self._pending_scalars.flush(self.history.record, current_step=self._step, measured=self._measured, final=final)

    def _measured(self, step: int) -> bool:
        return step % self.config.every == 0

    def _measure_step(self, step: int) -> None:
        start = time.perf_counter()
        data = self._capture.take(step)
        losses = self._capture.losses
        loss = torch.stack([l.float() for l in losses]).mean() if losses else None
        distributed = world_size() > 1
        if distributed:
            data, loss = gather(data, loss, self.config.gradient)
            if data is None:
                return
        values, raw = self._measurement.measure_step(step, data)
        values["loss"] = math.nan if loss is None else float(loss)
        values.update(self._pending_scalars.pop(step))
        values["monitor_ms"] = (time.perf_counter() - start) * 1e3
        self.history.record(step, values, raw)

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
        self._measurement.fit_now()

    def tangent_proxies(self) -> dict[str, TangentProxy]:
        """The current :class:`~interp_widgets.geometry.alignment.proxy.TangentProxy` of every fitted layer.

        Example:
            >>> import torch
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
            >>> AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=3).tangent_proxies()
            {}
        """
        return dict(self._measurement.fitted)

    # ------------------------------------------------------------------ replay interface
    @property
    def active(self) -> bool:
        """Whether the hooks are installed (inside ``with monitor:``, or between ``__enter__()`` and :meth:`close`).

        Example:
            >>> monitor = AnisotropyMonitor(torch.nn.Sequential(torch.nn.Linear(8, 8)), ["0"], rank=2, total_steps=3)
            >>> with monitor:
            ...     inside = monitor.active
            >>> inside, monitor.active
            (True, False)
        """
        return self._active

    def attach(self, model: nn.Module) -> None:
        """Point the idle monitor at another model of the same architecture (the next checkpoint of a replay); the
        layers keep their names, and a layer whose dimension changed is refused.

        Example:
            >>> import copy
            >>> monitor = AnisotropyMonitor(model, ["layer:1"], rank=4, fit="refit", refit_every=2)
            >>> other = copy.deepcopy(model); monitor.attach(other); monitor.model is other
            True
        """
        if self._active:
            raise RuntimeError("cannot switch models while the monitor is active")
        self.bound.rebind(model)

    def reseed(self) -> None:
        """Restart the row-subsampling generator from ``seed``, so that the next step keeps the same rows as the
        first one did (replay measures every checkpoint on the same tokens).

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8)); x = torch.randn(32, 8)
            >>> monitor = AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=5, n_controls=3, max_tokens=4)
            >>> with monitor:  # the same 4 of the 32 rows at both steps: the same measurement
            ...     for step in range(2):
            ...         monitor.reseed(); net(x).sum().backward(); monitor.step(); net.zero_grad()
            >>> cosine = monitor.series("avg_cosine|0")[1]; bool(abs(cosine[0] - cosine[1]) < 1e-6)
            True
        """
        self._generator.manual_seed(self.config.seed)

    def __repr__(self) -> str:
        state = "active" if self._active else "idle"
        config = self.config
        return f"AnisotropyMonitor(layers={self.layers}, rank={config.rank}, fit={config.fit!r}, {state}, rows={len(self)})"
