"""The trackers the Hugging Face ``MonitorCallback`` and the Lightning callback build from ``report_to``.

Example:
    >>> check_report_to("wandb")
    ['wandb']
"""

from __future__ import annotations


from interp_widgets.geometry.trackers._backends import MLflowTracker, TensorBoardTracker, WandbTracker
from interp_widgets.geometry.trackers._base import Tracker

__all__ = ["TRAINER_INTEGRATIONS", "check_report_to", "trainer_trackers"]


# --------------------------------------------------------------------------------------------------- HF Trainer wiring
#: ``TrainingArguments.report_to`` names that have a tracker here; other integrations are left to the Trainer.
TRAINER_INTEGRATIONS = ("tensorboard", "wandb", "mlflow")


def _trainer_tensorboard_dir(output_dir: str) -> str:
    """A TensorBoard run of its own next to the Trainer's (two writers appending to one run directory confuse
    TensorBoard's live reloading): ``$TENSORBOARD_LOGGING_DIR/geometry`` when that is set (the Trainer writes into it),
    else ``<output_dir>/runs/<date>_<host>-geometry`` beside the Trainer's ``<output_dir>/runs/<date>_<host>``."""
    import os
    import socket
    from datetime import datetime

    base = os.getenv("TENSORBOARD_LOGGING_DIR")
    if base is not None:
        return os.path.join(os.path.expanduser(base), "geometry")
    name = datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname() + "-geometry"
    return os.path.join(output_dir, "runs", name)


def trainer_trackers(report_to, trainer_report_to, output_dir: str) -> list[Tracker]:
    """The trackers the HF ``MonitorCallback`` builds (and closes at the end of training).

    ``report_to="trainer"`` follows ``TrainingArguments.report_to`` (its TensorBoard, W&B and MLflow entries; others
    are left to the Trainer); a list names integrations among ``"tensorboard"``, ``"wandb"``, ``"mlflow"``; ``[]``
    sends nothing (attach a :class:`Tracker` yourself for anything else). Geometry step ``s`` is written at the
    Trainer's ``global_step = s + 1``, the step its own loggers give the loss of that update: TensorBoard into a run
    beside the Trainer's (``<output_dir>/runs/<date>_<host>-geometry``, or ``$TENSORBOARD_LOGGING_DIR/geometry``),
    W&B on the ``train/global_step`` axis of ``wandb.run``, MLflow into the active run the Trainer started.

    Example:
        >>> trainer_trackers("trainer", ["codecarbon"], "out")
        []
        >>> trainer_trackers(["comet_ml"], [], "out")
        Traceback (most recent call last):
        ...
        ValueError: unknown report_to entry 'comet_ml'; use 'trainer' (follow TrainingArguments.report_to) or a list of ('tensorboard', 'wandb', 'mlflow')
    """
    if check_report_to(report_to) == "trainer":
        report_to = [name for name in (trainer_report_to or []) if name in TRAINER_INTEGRATIONS]
    trackers = []
    for name in report_to:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(log_dir=_trainer_tensorboard_dir(output_dir), step_offset=1))
        elif name == "wandb":
            trackers.append(WandbTracker(step_metric="train/global_step", step_offset=1))
        elif name == "mlflow":
            trackers.append(MLflowTracker(step_offset=1))
    return trackers


def check_report_to(report_to):
    """``"trainer"``, or ``report_to`` as a list of tracker names (a single name becomes a list); else a ValueError.

    Example:
        >>> check_report_to("wandb"), check_report_to("trainer"), check_report_to(())
        (['wandb'], 'trainer', [])
    """
    if report_to == "trainer":
        return report_to
    names = [report_to] if isinstance(report_to, str) else report_to
    try:
        names = list(names)
    except TypeError:
        names = [report_to]
    for name in names:
        if name not in TRAINER_INTEGRATIONS:
            raise ValueError(
                f"unknown report_to entry {name!r}; use 'trainer' (follow TrainingArguments.report_to) "
                f"or a list of {TRAINER_INTEGRATIONS}"
            )
    return names
