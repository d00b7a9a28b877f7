"""Masked language models: the token predicted at a masked position.

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> from interp_widgets.tasks import task_for
    >>> task_for(ModelAdapter(masked_lm, tokenizer)).explain("The food was [MASK].")[0].target_positions.tolist()
    [4]
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from interp_widgets.targets import Contrast, Targets
from interp_widgets.tasks.base import Explain, ExplainedInput, Task
from interp_widgets.tasks.foils import resolve_masked_foil

__all__ = ["MaskedLMTask"]


class MaskedLMTask(Task):
    """A masked LM (``*ForMaskedLM``): one target token, scored at ``mask_position`` (default: the first mask).

    Example:
        >>> from interp_widgets.adapter import ModelAdapter
        >>> from interp_widgets.tasks import task_for
        >>> task = task_for(ModelAdapter(masked_lm, tokenizer))
        >>> task.name, task.lens_targets(np.array([5, 6]))[1]
        ('masked-lm', 'token itself')
    """

    name = "masked-lm"
    priority = 0

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return cls.model_class_in(model, "MODEL_FOR_MASKED_LM_MAPPING_NAMES", ("ForMaskedLM",))

    def explain_inputs(self, items, encodings, options: Explain) -> list[ExplainedInput]:
        return [self._masked_input(enc, options.target, options.mask_position) for enc in encodings]

    def _masked_input(self, enc, target, mask_position) -> ExplainedInput:
        tokenizer = self.adapter.tokenizer
        if mask_position is None:
            hits = np.flatnonzero(enc.input_ids == tokenizer.mask_token_id)
            if len(hits) == 0:
                raise ValueError(f"no {tokenizer.mask_token} token in the text; add one or pass mask_position=.")
            mask_position = int(hits[0])
        if not 0 <= mask_position < len(enc):
            raise ValueError(f"mask_position {mask_position} outside the {len(enc)} tokens of the input")
        logits = self.logits([enc.input_ids], [np.array([mask_position])])[0][0]
        probs = torch.softmax(logits.float(), dim=-1)
        if target is None:
            token_id = int(logits.argmax())
        elif isinstance(target, str):
            ids = tokenizer(target, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise ValueError(f"target {target!r} is {len(ids)} tokens; a masked-LM target must be a single token.")
            token_id = ids[0]
        else:
            token_id = int(target)
            if not 0 <= token_id < logits.shape[-1]:
                raise ValueError(f"token id {token_id} outside the vocabulary of {logits.shape[-1]}")
        return ExplainedInput(
            encoding=enc,
            targets=Targets(
                [tokenizer.convert_ids_to_tokens(token_id)],
                ids=np.asarray([token_id]),
                probs=np.asarray([float(probs[token_id])]),
            ),
            target_positions=np.asarray([mask_position]),
            visible=np.asarray([len(enc)]),
        )

    def foils(self, problem: ExplainedInput, foil, logits: torch.Tensor, alignment) -> Contrast:
        return resolve_masked_foil(self.adapter.tokenizer, logits.shape[-1], foil)

    @classmethod
    def training_batch(cls, tokenizer, batch: dict, labels, generator: torch.Generator, mlm_probability: float) -> dict:
        """A seeded ``mlm_probability`` share of the non-special tokens (at least one per text) becomes ``[MASK]``
        and is labelled."""
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token; a masked-LM probe needs one")
        special = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
        candidates = (batch["attention_mask"] == 1) & ~special
        chosen = (torch.rand(candidates.shape, generator=generator) < mlm_probability) & candidates
        for row in range(chosen.shape[0]):  # at least one masked token per text
            if candidates[row].any() and not chosen[row].any():
                chosen[row, candidates[row].nonzero()[0, 0]] = True
        return {
            **batch,
            "labels": batch["input_ids"].masked_fill(~chosen, -100),
            "input_ids": batch["input_ids"].masked_fill(chosen, tokenizer.mask_token_id),
        }

    def lens_targets(self, ids: np.ndarray) -> tuple[np.ndarray, str]:
        """A masked LM predicts each token in place."""
        return ids.copy(), "token itself"
