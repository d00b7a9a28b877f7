"""PyTorch Lightning integration: drive an :class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor` from
``lightning.pytorch.Trainer.fit`` and send its scalars to the trainer's loggers (``pip install
"interp-widgets[lightning]"``).

The callback only reads: it never changes the loss, the optimizer or the control flow, so training with it is
bit-identical to training without it. Build the monitor on the module your ``LightningModule`` *calls* (e.g. the
Hugging Face model it holds as ``self.model``): forward hooks fire on calls, and Lightning calls ``training_step``,
not ``forward``.

* ``on_fit_start``: checks that the monitor's model is the LightningModule or one of its sub-modules and that an
  optimizer trains its parameters (``configure_optimizers`` returning None is refused: the monitor records at the
  optimizer step); fills in ``total_steps`` from ``trainer.estimated_stepping_batches`` (``fit="early"``); installs
  the hooks unless the monitor is already active (``with monitor: trainer.fit(...)``);
* ``on_train_batch_start``: sets the monitor's step to ``trainer.global_step`` (micro-batches of one accumulated
  step share it, and their rows are pooled);
* ``on_before_backward``: keeps the loss Lightning back-propagates (already divided by ``accumulate_grad_batches``;
  their sum is the step's mean loss);
* ``on_before_optimizer_step``: records the step (after every micro-batch's backward, before ``optimizer.step()``),
  unless the monitor was given ``optimizer=`` and records from its own pre-step hook;
* ``on_fit_end`` / ``on_exception``: removes the hooks it installed (Lightning calls ``on_exception`` on errors and
  Ctrl-C, so no hook is left behind).

Loggers: by default (``report_to="trainer"``) every logger of the trainer (``trainer.loggers``: TensorBoardLogger,
WandbLogger, MLFlowLogger, CSVLogger, …) receives the scalars through its own ``log_metrics(metrics, step)``, so each
applies its own conventions (WandbLogger's ``trainer/global_step`` axis, MLFlowLogger's batching), at the step
Lightning gives the values ``self.log`` records in that ``training_step`` (``trainer.global_step`` when the batch
started). Keys are ``geometry/<metric>/<layer>`` (see :mod:`interp_widgets.geometry.trackers`; ``:`` becomes ``_``
for MLflow).

"""

from __future__ import annotations

import torch

from interp_widgets.geometry.monitor.anisotropy_monitor import AnisotropyMonitor
from interp_widgets.geometry.trackers import Tracker, mlflow_key, require

__all__ = ["LightningMonitorCallback", "LoggerTracker"]

_pl = require("lightning.pytorch", "lightning", "LightningMonitorCallback")


class LoggerTracker(Tracker):
    """Write the monitor's scalars through a Lightning logger's ``log_metrics(metrics, step)``.

    Any ``lightning.pytorch.loggers.Logger`` works; each applies its own conventions. For ``MLFlowLogger`` the keys
    are made MLflow-safe first (``layer:2`` → ``layer_2``), which it would otherwise rename with a warning per key.

    Args:
        logger: the Lightning logger.
        prefix, metrics, step_offset: see :class:`~interp_widgets.geometry.trackers.Tracker`.

    Example:
        >>> import tempfile
        >>> from lightning.pytorch.loggers import CSVLogger
        >>> from interp_widgets.geometry.log.geometry_log import GeometryLog
        >>> log = GeometryLog(["layer:0"])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     logger = CSVLogger(tmp, name="doc")
        ...     _ = LoggerTracker(logger).attach(log)
        ...     log.record(2, {"energy_ratio|layer:0": 2.5}); logger.save()
        ...     print(open(logger.experiment.metrics_file_path).read().strip())
        geometry/energy_ratio/layer:0,step
        2.5,2
    """

    def __init__(self, logger, *, prefix: str = "geometry", metrics=None, step_offset: int = 0) -> None:
        super().__init__(prefix=prefix, metrics=metrics, step_offset=step_offset)
        if not isinstance(logger, _pl.loggers.Logger):
            raise TypeError(f"logger must be a lightning.pytorch.loggers.Logger, got {type(logger).__name__}")
        self.logger = logger
        self._mlflow = isinstance(logger, _pl.loggers.MLFlowLogger)

    def _clean(self, key: str) -> str:
        return mlflow_key(key) if self._mlflow else key

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        self.logger.log_metrics(scalars, step=step)


def _contains(parent: torch.nn.Module, module: torch.nn.Module) -> bool:
    return any(m is module for m in parent.modules())


class LightningMonitorCallback(_pl.Callback):
    """A Lightning ``Callback`` that records an :class:`AnisotropyMonitor` at every optimizer step of ``fit``.

    Args:
        monitor: the monitor, built on the LightningModule or on the sub-module it calls.
        report_to: ``"trainer"`` (every logger in ``trainer.loggers``), or a list of
            :class:`~interp_widgets.geometry.trackers.Tracker` objects (attached for the fit, then detached), ``[]``
            for none.

    Example:
        >>> import torch, lightning.pytorch as pl
        >>> class Regression(pl.LightningModule):
        ...     def __init__(self):
        ...         super().__init__(); self.net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
        ...     def training_step(self, batch, batch_idx):
        ...         return self.net(batch).pow(2).mean()
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        >>> module = Regression()
        >>> monitor = AnisotropyMonitor(module.net, ["0"], rank=2, n_controls=3)
        >>> trainer = pl.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        ...                      enable_model_summary=False, callbacks=[LightningMonitorCallback(monitor)])
        >>> trainer.fit(module, torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=16))
        >>> monitor.steps.tolist(), monitor.total_steps
        ([0, 1, 2, 3], 4)
    """

    def __init__(self, monitor: AnisotropyMonitor, report_to="trainer") -> None:
        if not isinstance(monitor, AnisotropyMonitor):
            raise TypeError(f"monitor must be an AnisotropyMonitor, got {type(monitor).__name__}")
        if report_to != "trainer":
            report_to = list(report_to)
            bad = [t for t in report_to if not isinstance(t, Tracker)]
            if bad:
                raise TypeError(
                    f"report_to must be 'trainer' or a list of Tracker objects (e.g. "
                    f"TensorBoardTracker(writer)), got {bad!r}"
                )
        self.monitor = monitor
        self.report_to = report_to
        self.trackers: list[Tracker] = []
        self._owns_hooks = False
        self._losses: list[torch.Tensor] = []

    # ------------------------------------------------------------------ checks and set-up
    def _check(self, trainer, pl_module) -> None:
        model = self.monitor.model
        if not _contains(pl_module, model):
            raise ValueError(
                "the monitor watches a model that is not part of the LightningModule being fitted; "
                "build the AnisotropyMonitor on the module (or the sub-module it calls, e.g. "
                "module.model) that trainer.fit trains"
            )
        own = {id(p) for p in model.parameters()}
        trained = [
            opt
            for opt in trainer.optimizers
            if any(id(p) in own for group in opt.param_groups for p in group["params"])
        ]
        if not trained:
            raise ValueError(
                f"{type(pl_module).__name__} has no optimizer over the monitored model's parameters "
                f"(configure_optimizers returned None or optimizes other parameters); the monitor "
                f"records at each optimizer step, so return an optimizer from configure_optimizers"
            )
        self._optimizer = trained[0]

    def on_fit_start(self, trainer, pl_module) -> None:
        self._check(trainer, pl_module)
        monitor = self.monitor
        if monitor.fit == "early" and monitor.total_steps is None:
            monitor.set_total_steps(int(trainer.estimated_stepping_batches))
        self._owns_hooks = not monitor.active  # else `with monitor: trainer.fit(...)` manages the hooks
        if self._owns_hooks:
            monitor.__enter__()
        if trainer.is_global_zero:
            trackers = (
                [LoggerTracker(logger) for logger in trainer.loggers] if self.report_to == "trainer" else self.report_to
            )
            self.trackers = [tracker.attach(monitor) for tracker in trackers]

    # ------------------------------------------------------------------ steps
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step > self.monitor.current_step:
            self.monitor.track(trainer.global_step)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._losses.append(loss.detach())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if optimizer is not self._optimizer and getattr(optimizer, "optimizer", None) is not self._optimizer:
            return  # several optimizers: record once per step, at the one that trains the monitored model
        losses, self._losses = self._losses, []
        if self.monitor.optimizer is not None:
            return  # the monitor records from its own optimizer pre-step hook
        if losses and pl_module.automatic_optimization:
            self.monitor.step(loss=torch.stack([l.float() for l in losses]).sum())
        elif losses:
            self.monitor.step(loss=torch.stack([l.float() for l in losses]).mean())
        else:
            self.monitor.step()

    # ------------------------------------------------------------------ teardown
    def _teardown(self) -> None:
        if self._owns_hooks:
            self.monitor.close()
            self._owns_hooks = False
        while self.trackers:
            tracker = self.trackers.pop()
            tracker.detach()
            tracker.flush()
        self._losses = []

    def on_fit_end(self, trainer, pl_module) -> None:
        self._teardown()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._teardown()
