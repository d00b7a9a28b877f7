"""Faithfulness of attributions: insertion and deletion curves with AOPC, evaluated in large batches.

Deletion removes units (tokens, words or sentences, matching the result's granularity) in order of decreasing score,
replacing their embeddings with a baseline; insertion starts from the all-baseline input and restores them in the
same order. The curves track the target probability. A faithful attribution makes deletion fall fast (high deletion
AOPC) and insertion rise fast (high insertion AUC).

Example:
    >>> from interp_widgets.attribution import IntegratedGradients
    >>> results = IntegratedGradients(progress=False).attribute(model, tokenizer, texts[:3])
    >>> curves = faithfulness(model, tokenizer, results)
    >>> {k: v if isinstance(v, str) else round(v, 3) for k, v in curves.summary().items()}
    {'method': 'integrated_gradients', 'deletion_aopc': 0.131, 'deletion_auc': 0.415, 'insertion_auc': 0.557}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.attribution.base import as_adapter
from interp_widgets.attribution.gradient import baseline_embeddings
from interp_widgets.attribution.result import AttributionCollection, AttributionResult
from interp_widgets.attribution.rows import evaluate_rows
from interp_widgets.layers import evaluation
from interp_widgets.tasks import Explain, task_for
from interp_widgets.text_units import unit_members
from interp_widgets.validation import check_int


@dataclass
class FaithfulnessResult:
    """Insertion and deletion curves per explained input.

    ``fractions[i]`` is the share of units changed at step ``i``; ``deletion[k]`` and ``insertion[k]`` the target
    probability along the curve for input ``k``. AOPC (deletion) = mean over steps of ``p(x) − p(step)``; insertion
    AUC = trapezoid area under the insertion curve.

    Example:
        >>> curves = faithfulness(model, tokenizer, result.aggregate("word"))
        >>> curves.method, curves.granularity, curves.fractions[0].round(2)
        ('saliency', 'word', array([0.  , 0.14, 0.29, 0.43, 0.57, 0.71, 0.86, 1.  ]))
        >>> curves.deletion[0].round(3)  # p(positive) as the top-scored words are deleted
        array([0.63 , 0.529, 0.55 , 0.571, 0.585, 0.529, 0.51 , 0.501])
        >>> curves.insertion[0].round(3)
        array([0.501, 0.439, 0.532, 0.517, 0.528, 0.597, 0.619, 0.63 ])
        >>> curves.deletion_aopc.round(3), curves.insertion_auc.round(3), curves.deletion_auc.round(3)
        (array([0.091]), array([0.543]), array([0.549]))
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
            >>> curves = faithfulness(model, tokenizer, result)
            >>> round(curves.summary()["deletion_aopc"], 3)
            0.091
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
            >>> frame = faithfulness(model, tokenizer, result, max_steps=4).to_dataframe()
            >>> frame.round(3)
               example      curve  fraction  probability    method
            0        0   deletion     0.000        0.630  saliency
            1        0   deletion     0.286        0.550  saliency
            2        0   deletion     0.571        0.585  saliency
            3        0   deletion     0.714        0.529  saliency
            4        0   deletion     1.000        0.501  saliency
            5        0  insertion     0.000        0.501  saliency
            6        0  insertion     0.286        0.532  saliency
            7        0  insertion     0.571        0.528  saliency
            8        0  insertion     0.714        0.597  saliency
            9        0  insertion     1.000        0.630  saliency
            >>> frame.groupby("curve").probability.mean().round(3)
            curve
            deletion     0.559
            insertion    0.558
            Name: probability, dtype: float64
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
            >>> chart = faithfulness(model, tokenizer, result).chart()
            >>> chart.mark.type, chart.title
            ('line', 'Faithfulness of saliency: deletion AOPC 0.091, insertion AUC 0.543')
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
            .encode(
                x=alt.X("fraction:Q", title=f"fraction of {self.granularity}s changed"),
                y=alt.Y("probability:Q", title="target probability", scale=alt.Scale(domain=[0, 1])),
                color="curve:N",
                tooltip=["curve", "fraction", alt.Tooltip("probability:Q", format=".3f")],
            )
            .properties(
                title=f"Faithfulness of {self.method}: deletion AOPC {self.deletion_aopc.mean():.3f}, "
                f"insertion AUC {self.insertion_auc.mean():.3f}"
            )
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
        >>> from interp_widgets.attribution import Saliency
        >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great food.", "A dull, slow film."])
        >>> curves = faithfulness(model, tokenizer, results, max_steps=10, baseline="pad")
        >>> [len(f) for f in curves.fractions], curves.deletion_aopc.round(3)
        ([4, 7], array([-0.082, -0.122]))
    """
    adapter = as_adapter(model, tokenizer, max_batch_tokens)
    task = task_for(adapter)
    if not task.per_class:
        raise ValueError(f"faithfulness curves are defined here for sequence classifiers; this model is a {task.name}")
    max_steps = check_int("max_steps", max_steps, minimum=1)
    items = [results] if isinstance(results, AttributionResult) else list(results)
    if not items:
        raise ValueError("no results given")
    with evaluation(adapter.model):
        problems = task.explain([r.messages or r.text for r in items], Explain())
        plans = []
        for result, problem in zip(items, problems):
            row = result.target_index(target)
            problem = dataclasses.replace(
                problem, targets=result.targets.take([row]), target_positions=[-1], visible=[problem.length]
            )
            enc = problem.encoding
            units = unit_members(enc.special_mask, enc.word_ids, enc.sentence_ids, result.granularity, enc.turn_ids)
            if len(units) != result.scores.shape[1] - (
                int(result.special_mask.sum()) if result.granularity == "token" else 0
            ):
                raise ValueError(
                    "the result does not match this model's tokenization of its text; explain it with this model"
                )
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

        evaluate_rows(
            adapter, problems, [2 * len(c) for _, _, c in plans], build, consume, score="probability", with_grad=False
        )
    fractions = [cuts / max(len(units), 1) for units, _, cuts in plans]
    return FaithfulnessResult(
        method=items[0].method,
        granularity=items[0].granularity,
        fractions=fractions,
        deletion=[c[: len(f)] for c, f in zip(curves, fractions)],
        insertion=[c[len(f) :] for c, f in zip(curves, fractions)],
    )
