"""Hugging Face ``Trainer`` integration: drive an :class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor`.

The callback only reads: it never changes the loss, the optimizer or the control flow, so training with it is
bit-identical to training without it.

* ``on_train_begin``: fills in ``total_steps`` from ``state.max_steps`` (for ``fit="early"``) and, unless the
  monitor is already active (``with monitor: trainer.train()``), installs its hooks;
* ``on_step_begin``: sets the monitor's step to ``state.global_step``; padding is dropped with the
  ``attention_mask`` the Trainer passes to the model;
* ``on_pre_optimizer_step``: records the step — after all micro-batches' backward passes (gradient
  accumulation pools their rows), before ``optimizer.step()`` and ``zero_grad()``;
* ``on_log``: forwards numeric Trainer logs (``learning_rate``, ``grad_norm``, …; the Trainer's running ``loss``
  as ``trainer_loss``) with :meth:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor.log`, attached to the
  step just completed (``global_step − 1``);
* ``on_train_end``: removes the hooks it installed and closes the trackers it opened.

Trackers (:mod:`interp_widgets.geometry.trackers`): by default (``report_to="trainer"``) the geometry goes to the
TensorBoard, W&B and MLflow integrations of ``TrainingArguments.report_to``, beside the Trainer's own logs and at
the same ``global_step`` (a geometry ``geometry/…`` section; the Trainer logs it forwards to the monitor are not
sent again); see :func:`~interp_widgets.geometry.trackers.trainer_trackers`.

The Trainer calls no callback when training raises, so for hook removal on errors and Ctrl-C wrap the call:
``with monitor: trainer.train()`` (the callback then leaves hook management to the ``with`` block).

Example (4 Trainer steps of a copy of the tiny BERT classifier; the fit window comes from ``max_steps``):
    >>> import copy, tempfile
    >>> from transformers import DataCollatorWithPadding, PrinterCallback, Trainer, TrainingArguments
    >>> net = copy.deepcopy(model); train = [dict(tokenizer(text), labels=i % 3) for i, text in enumerate(texts[:8])]
    >>> monitor = AnisotropyMonitor(net, ["layer:1"], rank=4, n_controls=5)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     args = TrainingArguments(tmp, per_device_train_batch_size=2, max_steps=4, report_to=[], use_cpu=True,
    ...                              save_strategy="no", disable_tqdm=True)
    ...     trainer = Trainer(net, args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer),
    ...                       callbacks=[MonitorCallback(monitor)])
    ...     trainer.remove_callback(PrinterCallback)  # no log lines printed here
    ...     with monitor:
    ...         _ = trainer.train()
    >>> monitor.steps.tolist(), monitor.meta["fit_window"], monitor.active
    ([0, 1, 2, 3], [0, 2], False)
"""

from __future__ import annotations

import numbers

from transformers import TrainerCallback

from interp_widgets.geometry.monitor.anisotropy_monitor import AnisotropyMonitor
from interp_widgets.geometry.trackers import check_report_to, trainer_trackers

__all__ = ["MonitorCallback"]


class MonitorCallback(TrainerCallback):
    """A ``TrainerCallback`` that records an :class:`AnisotropyMonitor` at every optimizer step of ``Trainer``.

    Args:
        monitor: the monitor, built on the same model object the Trainer trains.
        report_to: ``"trainer"`` (follow ``TrainingArguments.report_to``), or a list among ``"tensorboard"``,
            ``"wandb"``, ``"mlflow"``; ``[]`` for none.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(8, 8))
        >>> callback = MonitorCallback(AnisotropyMonitor(net, ["0"], rank=2, fit="refit", refit_every=5))
        >>> type(callback).__name__
        'MonitorCallback'
    """

    def __init__(self, monitor: AnisotropyMonitor, report_to="trainer") -> None:
        if not isinstance(monitor, AnisotropyMonitor):
            raise TypeError(f"monitor must be an AnisotropyMonitor, got {type(monitor).__name__}")
        self.monitor = monitor
        self.report_to = check_report_to(report_to)
        self.trackers: list = []
        self._owns_hooks = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        monitor = self.monitor
        if model is not None:
            inner = getattr(model, "module", model)
            if inner is not monitor.model and model is not monitor.model:
                raise ValueError(
                    "the monitor watches a different model object than the one the Trainer trains; "
                    "build the AnisotropyMonitor on the model you pass to Trainer"
                )
        if monitor.fit == "early" and monitor.total_steps is None:
            monitor.set_total_steps(state.max_steps)
        if not monitor.active:
            monitor.__enter__()
            self._owns_hooks = True
        if state.is_world_process_zero and not self.trackers:
            self.trackers = [
                tracker.attach(monitor) for tracker in trainer_trackers(self.report_to, args.report_to, args.output_dir)
            ]
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step > self.monitor.current_step:
            self.monitor.track(state.global_step)
        return control

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.monitor.step()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        scalars = {
            ("trainer_loss" if key == "loss" else key): value
            for key, value in (logs or {}).items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and "|" not in key
        }
        if scalars:  # logs after step s arrive with global_step = s + 1: attach them to step s
            for tracker in self.trackers:  # the Trainer reports these itself
                tracker.exclude.update(scalars)
            self.monitor.log(max(state.global_step - 1, 0), **scalars)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._owns_hooks:
            self.monitor.close()
            self._owns_hooks = False
        while self.trackers:
            self.trackers.pop().close()
        return control
