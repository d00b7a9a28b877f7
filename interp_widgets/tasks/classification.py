"""Sequence classification: one score per class for the whole text.

Example:
    >>> from interp_widgets.tasks import task_for
    >>> task_for(adapter).explain("Not bad.")[0].target_labels
    ['positive']
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from interp_widgets.targets import Targets
from interp_widgets.tasks.base import Explain, ExplainedInput, Task

__all__ = ["ClassificationTask"]


class ClassificationTask(Task):
    """A sequence classifier (``*ForSequenceClassification``): targets are classes, read from the whole text.

    Example:
        >>> from interp_widgets.tasks import task_for
        >>> task = task_for(adapter)
        >>> task.labels, task.resolve_targets(["negative", 1])
        (['negative', 'neutral', 'positive'], [0, 1])
    """

    name = "sequence-classification"
    priority = 10
    per_class = True
    supports_concept_importance = True

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return cls.model_class_in(
            model, "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", ("ForSequenceClassification",)
        )

    @property
    def labels(self) -> list[str]:
        """Class names from ``config.id2label`` in index order."""
        config = self.adapter.model.config
        n = int(getattr(config, "num_labels", 0) or 0)
        id2label = getattr(config, "id2label", None) or {}
        return [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n)]

    def resolve_targets(self, target, logits: torch.Tensor | None = None) -> list[int]:
        """Turn a class index, a label name, a list of them, or ``None`` (the predicted class) into class indices.

        Example:
            >>> from interp_widgets.tasks import task_for
            >>> task_for(adapter).resolve_targets("positive")
            [2]
        """
        labels = self.labels
        if target is None:
            if logits is None:
                raise ValueError("the predicted class needs the model's logits")
            return [int(logits.reshape(-1, logits.shape[-1])[0].argmax())]
        items = list(target) if isinstance(target, (list, tuple, np.ndarray, torch.Tensor)) else [target]
        if not items:
            raise ValueError("target list is empty; pass a class index, a label name or None for the prediction.")
        classes = Targets(labels, ids=np.arange(len(labels)))
        resolved = []
        for item in items:
            if isinstance(item, torch.Tensor):
                item = item.item()
            if isinstance(item, np.generic):
                item = item.item()
            if not isinstance(item, (int, str)) or isinstance(item, bool):
                raise TypeError(
                    f"target must be an int, a label name, a list of them or None; got {type(item).__name__}"
                )
            resolved.append(classes.index(item, name="class" if isinstance(item, int) else "label"))
        return resolved

    def concept_targets(self, logits: torch.Tensor, target) -> tuple[list[int], list[str], torch.Tensor]:
        ids = self.resolve_targets(target, logits)
        return ids, [self.labels[i] for i in ids], logits[0]

    def explain_inputs(self, items, encodings, options: Explain) -> list[ExplainedInput]:
        if options.continuation is not None:
            raise ValueError("continuation applies to causal language models; this model is a sequence classifier.")
        logits = self.logits([e.input_ids for e in encodings])
        labels = self.labels
        problems = []
        for enc, lg in zip(encodings, logits):
            probs = torch.softmax(lg.float(), dim=-1).cpu().numpy()
            ids = self.resolve_targets(options.target, lg[None])
            problems.append(
                ExplainedInput(
                    encoding=enc,
                    targets=Targets([labels[i] for i in ids], ids=ids, probs=probs[ids]),
                    target_positions=np.full(len(ids), -1, dtype=np.int64),
                    visible=np.full(len(ids), len(enc), dtype=np.int64),
                )
            )
        return problems

    def query_position(self, problem: ExplainedInput, target: int) -> int:
        """The classifier's read-out position: ``[CLS]`` (position 0) for an encoder, the last token for a decoder."""
        return 0 if self.pad_safe else problem.length - 1

    @classmethod
    def check_training_labels(cls, tokenizer, labels, n_texts: int) -> None:
        if labels is None or len(labels) != n_texts:
            raise ValueError("a sequence classifier's probe needs labels= (one class index per probe text)")

    @classmethod
    def training_batch(cls, tokenizer, batch: dict, labels, generator: torch.Generator, mlm_probability: float) -> dict:
        return {**batch, "labels": torch.as_tensor(list(labels), dtype=torch.long)}
