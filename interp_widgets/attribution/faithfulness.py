"""Faithfulness of attributions: insertion and deletion curves with AOPC, evaluated in large batches.

Deletion removes units (tokens, words or sentences, matching the result's granularity) in order of decreasing score,
replacing their embeddings with a baseline; insertion starts from the all-baseline input and restores them in the
same order. The curves track the target probability. A faithful attribution makes deletion fall fast (high deletion
AOPC) and insertion rise fast (high insertion AUC).

Example:
    >>> curves = faithfulness(model, tokenizer, IntegratedGradients().attribute(model, tokenizer, texts))  # doctest: +SKIP
    >>> curves.summary()                                                                                 # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.adapter import TASK_CLASSIFICATION
from interp_widgets.attribution.base import as_adapter
from interp_widgets.attribution.gradient import baseline_embeddings
from interp_widgets.attribution.problem import evaluate_rows, prepare_inputs
from interp_widgets.attribution.result import AttributionCollection, AttributionResult
from interp_widgets.text_units import unit_members
from interp_widgets.validation import check_int


@dataclass
class FaithfulnessResult:
    """Insertion and deletion curves per explained input.

    ``fractions[i]`` is the share of units changed at step ``i``; ``deletion[k]`` and ``insertion[k]`` the target
    probability along the curve for input ``k``. AOPC (deletion) = mean over steps of ``p(x) − p(step)``; insertion
    AUC = trapezoid area under the insertion curve.

    Example:
        >>> curves.to_dataframe().head()  # doctest: +SKIP
    """

    method: str
    granularity: str
    fractions: list[np.ndarray]
    deletion: list[np.ndarray]
    insertion: list[np.ndarray]

    @property
    def deletion_aopc(self) -> np.ndarray:
        """Per input: mean drop of the target probability as top units are deleted (higher is more faithful)."""
        return np.array([float(np.mean(curve[0] - curve[1:])) if len(curve) > 1 else 0.0 for curve in self.deletion])

    @property
    def insertion_auc(self) -> np.ndarray:
        """Per input: area under the insertion curve over the fraction of units inserted (higher is more faithful)."""
        return np.array([float(np.trapezoid(c, f)) for c, f in zip(self.insertion, self.fractions)])

    @property
    def deletion_auc(self) -> np.ndarray:
        """Per input: area under the deletion curve (lower is more faithful)."""
        return np.array([float(np.trapezoid(c, f)) for c, f in zip(self.deletion, self.fractions)])

    def summary(self) -> dict[str, float]:
        """Means over inputs of deletion AOPC, deletion AUC and insertion AUC.

        Example:
            >>> curves.summary()["deletion_aopc"]  # doctest: +SKIP
        """
        return {
            "method": self.method,
            "deletion_aopc": float(self.deletion_aopc.mean()),
            "deletion_auc": float(self.deletion_auc.mean()),
            "insertion_auc": float(self.insertion_auc.mean()),
        }

    def to_dataframe(self):
        """Long table: example, curve (deletion/insertion), fraction, probability.

        Example:
            >>> curves.to_dataframe().groupby("curve").probability.mean()  # doctest: +SKIP
        """
        import pandas as pd

        rows = []
        for k, (f, d, i) in enumerate(zip(self.fractions, self.deletion, self.insertion)):
            rows.append(pd.DataFrame({"example": k, "curve": "deletion", "fraction": f, "probability": d}))
            rows.append(pd.DataFrame({"example": k, "curve": "insertion", "fraction": f, "probability": i}))
        frame = pd.concat(rows, ignore_index=True)
        frame["method"] = self.method
        return frame

    def chart(self):
        """Mean insertion and deletion curves (altair), interpolated onto a common grid of fractions.

        Example:
            >>> curves.chart()  # doctest: +SKIP
        """
        import altair as alt
        import pandas as pd

        grid = np.linspace(0, 1, 21)
        frames = []
        for name, curves in (("deletion", self.deletion), ("insertion", self.insertion)):
            mean = np.mean([np.interp(grid, f, c) for f, c in zip(self.fractions, curves)], axis=0)
            frames.append(pd.DataFrame({"fraction": grid, "probability": mean, "curve": name}))
        return (
            alt.Chart(pd.concat(frames))
            .mark_line(point=True)
            .encode(x=alt.X("fraction:Q", title=f"fraction of {self.granularity}s changed"),
                    y=alt.Y("probability:Q", title="target probability", scale=alt.Scale(domain=[0, 1])),
                    color="curve:N", tooltip=["curve", "fraction", alt.Tooltip("probability:Q", format=".3f")])
            .properties(title=f"Faithfulness of {self.method}: deletion AOPC {self.deletion_aopc.mean():.3f}, "
                              f"insertion AUC {self.insertion_auc.mean():.3f}")
        )


def faithfulness(
    model,
    tokenizer,
    results: AttributionResult | AttributionCollection,
    *,
    baseline="mask",
    max_steps: int = 20,
    target: int | str | None = None,
    max_batch_tokens: int | None = None,
) -> FaithfulnessResult:
    """Insertion and deletion curves for classification results, all evaluations batched.

    Units follow each result's granularity (a word-level result deletes whole words). At most ``max_steps`` points
    per curve (units are removed in equal chunks when there are more). ``target`` picks the explained class row
    (default: the first).

    Example:
        >>> faithfulness(model, tokenizer, results, max_steps=10).summary()  # doctest: +SKIP
    """
    adapter = as_adapter(model, tokenizer, max_batch_tokens)
    if adapter.task != TASK_CLASSIFICATION:
        raise ValueError(f"faithfulness curves are defined here for sequence classifiers; this model is a {adapter.task}")
    max_steps = check_int("max_steps", max_steps, minimum=1)
    items = [results] if isinstance(results, AttributionResult) else list(results)
    if not items:
        raise ValueError("no results given")
    with adapter.evaluation():
        problems = prepare_inputs(adapter, [r.text for r in items], target=None)
        plans = []
        for result, problem in zip(items, problems):
            row = result.target_index(target)
            problem.target_ids = result.target_ids[row : row + 1]
            problem.target_positions = np.array([-1])
            problem.visible = np.array([problem.length])
            enc = problem.encoding
            units = unit_members(enc.special_mask, enc.word_ids, enc.sentence_ids, result.granularity)
            if len(units) != result.scores.shape[1] - (int(result.special_mask.sum()) if result.granularity == "token" else 0):
                raise ValueError("the result does not match this model's tokenization of its text; explain it with this model")
            scores = result.scores[row][~result.special_mask] if result.granularity == "token" else result.scores[row]
            order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
            cuts = np.unique(np.linspace(0, len(units), min(max_steps, len(units)) + 1).round().astype(int))
            plans.append((units, order, cuts))
        with torch.no_grad():
            inputs = [adapter.embed(torch.as_tensor(p.encoding.input_ids)[None])[0] for p in problems]
            bases = [baseline_embeddings(adapter, p.encoding, baseline) for p in problems]
        curves = [np.zeros(2 * len(cuts)) for _, _, cuts in plans]

        def build(item, start, stop):
            units, order, cuts = plans[item]
            rows = []
            for r in range(start, stop):
                curve, step = divmod(r, len(cuts))
                changed = np.concatenate([units[u] for u in order[: cuts[step]]] or [np.array([], int)])
                keep = torch.ones(problems[item].length, dtype=torch.bool)
                keep[torch.as_tensor(changed, dtype=torch.long)] = False
                if curve == 1:  # insertion: start from the baseline, restore the changed units
                    keep = ~keep | torch.as_tensor(problems[item].encoding.special_mask)
                rows.append(torch.where(keep[:, None], inputs[item], bases[item]))
            return torch.stack(rows), np.zeros(stop - start, dtype=np.int64)

        def consume(chunk, scores, grads):
            curves[chunk.item][chunk.start : chunk.stop] = scores.double().cpu().numpy()

        evaluate_rows(adapter, problems, [2 * len(c) for _, _, c in plans], build, consume, score="probability",
                      with_grad=False)
    fractions = [cuts / max(len(units), 1) for units, _, cuts in plans]
    return FaithfulnessResult(
        method=items[0].method,
        granularity=items[0].granularity,
        fractions=fractions,
        deletion=[c[: len(f)] for c, f in zip(curves, fractions)],
        insertion=[c[len(f):] for c, f in zip(curves, fractions)],
    )
