"""Tasks: what a model predicts, and everything that follows from it (see :mod:`interp_widgets.tasks.base`).

One module per task: :mod:`~interp_widgets.tasks.classification`, :mod:`~interp_widgets.tasks.causal_lm`,
:mod:`~interp_widgets.tasks.masked_lm` and :mod:`~interp_widgets.tasks.seq2seq`. Code outside this package asks
:func:`task_for` for the task of an adapter and uses its methods and facts; it never tests a task's name or class.

Example:
    >>> from interp_widgets.tasks import task_for
    >>> sorted(TASKS)
    ['causal-lm', 'masked-lm', 'seq2seq-lm', 'sequence-classification']
"""

from interp_widgets.tasks import causal_lm, classification, masked_lm, seq2seq  # noqa: F401  (they register)
from interp_widgets.tasks.base import (
    TASKS,
    Explain,
    ExplainedInput,
    Task,
    detect_task,
    prepare_inputs,
    task_class,
    task_for,
)

__all__ = ["TASKS", "Explain", "ExplainedInput", "Task", "detect_task", "prepare_inputs", "task_class", "task_for"]
