"""Per-token concept activations of a new text, and concept importance for a prediction.

Importance is the gradient of the target score with respect to the concept coefficients, through the decomposition
with the reconstruction residual kept: at the concept layer the hidden state ``h`` of every token is replaced by
``decode(c) + (h − decode(c))`` where ``c = transform(h)`` is a leaf tensor, so the forward pass is unchanged and
``∂score/∂c`` is exact (``decode`` is affine for every concept model). Scores are signed, per token and per concept;
``contributions`` are ``c × ∂score/∂c``.

Example:
    >>> concepts  # the namespace's NMF concept model, fitted on layer 1 of the tiny classifier
    NMFConcepts(8, estimator_params={'random_state': 0}, max_fit_rows=200000, nonnegative='shift', stream_epochs=1) [fitted on 32 features]
    >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="positive")
    >>> imp.tokens
    ['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]']
    >>> imp.gradients.shape  # targets × tokens × concepts
    (1, 7, 8)
    >>> imp.ranking().head(3).round(3)
       concept  contribution  gradient  coefficient
    0        0         0.831    13.755        0.204
    1        6        -0.196    -0.928        2.313
    2        4        -0.148    -0.808        1.728
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.layers import capture, evaluation, hooks, resolve_layer
from interp_widgets.tasks import task_for
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.concepts.decompositions import ConceptModel
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout


@dataclass
class TextConcepts:
    """Concept coefficients of every token of one text: ``coefficients[token, concept]``, over the text's
    :class:`~interp_widgets.text_units.TokenLayout` (``layout``; ``text``, ``tokens``, ``offsets`` and
    ``special_mask`` read through to it).

    Example:
        >>> tc = text_concepts(concepts, model, tokenizer, "Great food, slow service.")
        >>> tc.tokens, tc.coefficients.shape
        (['[CLS]', 'Great', 'food', ',', 'slow', 'service', '.', '[SEP]'], (8, 8))
        >>> [(c, round(v, 2)) for c, v in tc.active_concepts(2)]
        [(7, 0.4), (6, 0.33), (5, 0.28), (4, 0.13), (3, 0.09), (2, 0.08), (1, 0.05)]
    """

    layout: TokenLayout
    coefficients: np.ndarray
    layer: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.coefficients = np.asarray(self.coefficients, dtype=np.float64)
        if len(self.coefficients) != len(self.layout):
            raise ValueError(f"coefficients have {len(self.coefficients)} rows for {len(self.layout)} tokens")

    text = property(lambda self: self.layout.text, doc="``layout.text`` (read-only).")
    tokens = property(lambda self: self.layout.tokens, doc="``layout.tokens`` (read-only).")
    offsets = property(lambda self: self.layout.offsets, doc="``layout.offsets`` (read-only).")
    special_mask = property(lambda self: self.layout.special_mask, doc="``layout.special_mask`` (read-only).")

    def active_concepts(self, position: int, *, top: int = 10) -> list[tuple[int, float]]:
        """The concepts with the largest coefficients at one token position: ``[(concept, coefficient), ...]``.

        Example:
            >>> tc = text_concepts(concepts, model, tokenizer, "Great food, slow service.")
            >>> [(c, round(v, 2)) for c, v in tc.active_concepts(3, top=3)]
            [(6, 0.35), (7, 0.26), (1, 0.11)]
        """
        if not -len(self.tokens) <= int(position) < len(self.tokens):
            raise ValueError(f"position {position} out of range for {len(self.tokens)} tokens")
        row = self.coefficients[int(position)]
        order = np.argsort(-row, kind="stable")[: int(top)]
        return [(int(c), float(row[c])) for c in order if row[c] != 0]

    def to_dataframe(self):
        """Long table: one row per (token, concept) with the coefficient.

        Example:
            >>> tc = text_concepts(concepts, model, tokenizer, "Slow service.")
            >>> tc.to_dataframe().query("not special and coefficient > 0.3").round(3)
                position    token  start  end  special  concept  coefficient
            14         1     Slow      0    4    False        6        0.322
            15         1     Slow      0    4    False        7        0.507
            21         2  service      5   12    False        5        0.511
            23         2  service      5   12    False        7        0.347
            29         3        .     12   13    False        5        0.463
            31         3        .     12   13    False        7        0.330
        """
        import pandas as pd

        n_tokens, n_concepts = self.coefficients.shape
        return pd.DataFrame(
            {
                "position": np.repeat(np.arange(n_tokens), n_concepts),
                "token": np.repeat(np.asarray(self.tokens, dtype=object), n_concepts),
                "start": np.repeat(self.offsets[:, 0], n_concepts),
                "end": np.repeat(self.offsets[:, 1], n_concepts),
                "special": np.repeat(self.special_mask, n_concepts),
                "concept": np.tile(np.arange(n_concepts), n_tokens),
                "coefficient": self.coefficients.reshape(-1),
            }
        )

    def chart(self, concepts: list[int] | None = None):
        """Altair heatmap of coefficients, tokens × concepts (``concepts`` restricts the columns).

        Example:
            >>> tc = text_concepts(concepts, model, tokenizer, "Slow service.")
            >>> chart = tc.chart([0, 5, 7])
            >>> chart.mark, chart.title
            ('rect', 'NMFConcepts concepts at layer:1')
        """
        import altair as alt

        frame = self.to_dataframe()
        if concepts is not None:
            frame = frame[frame["concept"].isin(list(concepts))]
        frame["label"] = [f"{p}: {t}" for p, t in zip(frame["position"], frame["token"])]
        return (
            alt.Chart(frame)
            .mark_rect()
            .encode(
                x=alt.X("label:N", sort=None, title="token"),
                y=alt.Y("concept:O"),
                color=alt.Color("coefficient:Q", scale=alt.Scale(scheme="purpleorange", domainMid=0)),
                tooltip=["token:N", "concept:Q", alt.Tooltip("coefficient:Q", format=".4g")],
            )
            .properties(title=f"{self.method} concepts at {self.layer}")
        )

    _ARRAYS = ("offsets", "special_mask", "word_ids", "sentence_ids", "turn_ids", "coefficients", "gradients",
               "target_ids", "target_scores")  # fmt: skip
    _LAYOUT = ("text", "tokens", "offsets", "special_mask", "word_ids", "sentence_ids", "turn_ids", "turn_roles",
               "messages")  # fmt: skip

    def save(self, path: str | Path) -> Path:
        """Write to one safetensors file with a JSON header (never pickle).

        Example:
            >>> tc = text_concepts(concepts, model, tokenizer, "Slow service.")
            >>> path = tc.save(getfixture("tmp_path") / "tc.safetensors")
            >>> again = TextConcepts.load(path)
            >>> again.tokens == tc.tokens, np.array_equal(again.coefficients, tc.coefficients)
            (True, True)
        """
        flat = {name: getattr(self.layout, name) for name in self._LAYOUT}
        flat.update((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "layout")
        arrays = {n: flat[n] for n in self._ARRAYS if flat.get(n) is not None}
        meta = {name: value for name, value in flat.items() if name not in self._ARRAYS}
        return save_bundle(path, f"interp_widgets.{type(self).__name__}", arrays, meta)

    @classmethod
    def load(cls, path: str | Path):
        """Read a file written by :meth:`save`.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.")
            >>> path = imp.save(getfixture("tmp_path") / "importance.safetensors")
            >>> again = ConceptImportance.load(path)
            >>> again.target_labels == imp.target_labels, np.array_equal(again.gradients, imp.gradients)
            (True, True)
        """
        arrays, meta = load_bundle(path, f"interp_widgets.{cls.__name__}")
        flat = {**meta, **arrays}  # files of 0.1 have no word, sentence or turn ids: the layout finds them
        layout = TokenLayout(**{name: flat.pop(name) for name in cls._LAYOUT if name in flat})
        return cls(layout=layout, **flat)


@dataclass
class ConceptImportance(TextConcepts):
    """Signed concept importance for one text: ``gradients[target, token, concept] = ∂score/∂c``.

    ``contributions`` multiplies by the coefficients; :meth:`per_concept` sums them over tokens.

    Example:
        >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target=["negative", "positive"])
        >>> imp.target_labels, imp.contributions.shape
        (['negative', 'positive'], (2, 7, 8))
        >>> imp.per_concept("positive")[:4].round(3)
        array([ 0.831, -0.01 ,  0.091,  0.053])
        >>> imp.ranking("negative").head(2).round(3)
           concept  contribution  gradient  coefficient
        0        5        -0.873    -3.074        1.934
        1        6        -0.310    -1.467        2.313
    """

    gradients: np.ndarray = None
    target_labels: list[str] = field(default_factory=list)
    target_ids: np.ndarray = None
    target_scores: np.ndarray = None

    def __post_init__(self):
        super().__post_init__()
        self.gradients = np.asarray(self.gradients, dtype=np.float64)
        self.target_ids = np.asarray(self.target_ids, dtype=np.int64).reshape(-1)
        self.target_scores = np.asarray(self.target_scores, dtype=np.float64).reshape(-1)

    @property
    def contributions(self) -> np.ndarray:
        """``coefficients × gradients`` per target, token and concept."""
        return self.gradients * self.coefficients[None]

    @property
    def targets(self) -> Targets:
        """The explained targets (labels and class or token ids), which :meth:`per_concept` and the others look up.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad.", target=["negative", "positive"])
            >>> imp.targets.index("positive"), imp.targets.ids.tolist()
            (1, [0, 2])
        """
        return Targets(self.target_labels, ids=self.target_ids)

    def _target(self, target: int | str | None) -> int:
        return self.targets.index(target)

    def target_label(self, target: int | str | None = None) -> str:
        """The label of one target (a label, a row index, or ``None`` for the first row).

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target=["negative", "positive"])
            >>> imp.target_label(), imp.target_label(1), imp.target_label("negative")
            ('negative', 'positive', 'negative')
        """
        return self.target_labels[self._target(target)]

    def per_concept(
        self, target: int | str | None = None, *, kind: str = "contribution", include_special: bool = True
    ) -> np.ndarray:
        """Importance of each concept for one target, summed over tokens.

        ``kind="contribution"`` (coefficient × gradient) or ``"gradient"``. Special tokens count by default: a
        classifier reads its prediction from [CLS], so at the last layer only [CLS] carries importance.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.")
            >>> imp.per_concept(kind="gradient").shape
            (8,)
            >>> imp.per_concept(include_special=False).round(3)  # layer 1 is the last: only [CLS] matters
            array([0., 0., 0., 0., 0., 0., 0., 0.])
        """
        if kind not in ("contribution", "gradient"):
            raise ValueError(f"unknown kind {kind!r}; use 'contribution' or 'gradient'")
        values = (self.contributions if kind == "contribution" else self.gradients)[self._target(target)]
        keep = np.ones(len(self.tokens), bool) if include_special else ~self.special_mask
        return values[keep].sum(axis=0)

    def ranking(self, target: int | str | None = None):
        """Concepts ranked by absolute contribution to one target: concept, contribution, gradient, coefficient sum.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="positive")
            >>> imp.ranking("positive").head(3).round(3)
               concept  contribution  gradient  coefficient
            0        0         0.831    13.755        0.204
            1        6        -0.196    -0.928        2.313
            2        4        -0.148    -0.808        1.728
        """
        import pandas as pd

        contribution = self.per_concept(target)
        order = np.argsort(-np.abs(contribution), kind="stable")
        return pd.DataFrame(
            {
                "concept": order,
                "contribution": contribution[order],
                "gradient": self.per_concept(target, kind="gradient")[order],
                "coefficient": self.coefficients.sum(axis=0)[order],
            }
        )

    def to_dataframe(self):
        """Long table: one row per (target, token, concept) with coefficient, gradient and contribution.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="positive")
            >>> frame = imp.to_dataframe()
            >>> len(frame), frame.columns.tolist()
            (56, ['position', 'token', 'start', 'end', 'special', 'concept', 'coefficient', 'target', 'gradient', 'contribution'])
            >>> frame.groupby("concept").contribution.sum().round(3).head(3)
            concept
            0    0.831
            1   -0.010
            2    0.091
            Name: contribution, dtype: float64
        """
        import pandas as pd

        base = super().to_dataframe()
        frames = [
            base.assign(
                target=label, gradient=self.gradients[t].reshape(-1), contribution=self.contributions[t].reshape(-1)
            )
            for t, label in enumerate(self.target_labels)
        ]
        return pd.concat(frames, ignore_index=True)

    def chart(self, target: int | str | None = None, *, top: int = 15):
        """Altair bar chart of the ``top`` concepts by absolute contribution, signed colours centred on zero.

        Example:
            >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="negative")
            >>> chart = imp.chart("negative", top=5)
            >>> chart.mark, chart.title, len(chart.data)
            ('bar', 'concept importance for negative', 5)
        """
        import altair as alt

        row = self._target(target)
        frame = self.ranking(row).head(int(top))
        limit = float(np.abs(frame["contribution"]).max() or 1.0)
        return (
            alt.Chart(frame)
            .mark_bar()
            .encode(
                x=alt.X("concept:N", sort=None),
                y=alt.Y("contribution:Q"),
                color=alt.Color(
                    "contribution:Q", scale=alt.Scale(scheme="purpleorange", domain=[-limit, limit]), legend=None
                ),
                tooltip=[
                    "concept:Q",
                    alt.Tooltip("contribution:Q", format=".4g"),
                    alt.Tooltip("gradient:Q", format=".4g"),
                ],
            )
            .properties(title=f"concept importance for {self.target_labels[row]}")
        )


def _hidden(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def _replace_hidden(output, hidden):
    if isinstance(output, tuple):
        return (hidden,) + output[1:]
    if isinstance(output, list):
        return [hidden] + output[1:]
    return hidden


def _prepare(concept_model: ConceptModel, model, tokenizer, text: str, layer):
    if not isinstance(concept_model, ConceptModel):
        raise TypeError(f"concept_model must be a fitted ConceptModel, got {type(concept_model).__name__}")
    concept_model._check_fitted()
    concept_model.check_model(model)
    adapter = ModelAdapter(model, tokenizer)
    layer = layer if layer is not None else concept_model.layer_
    if layer is None:
        raise ValueError("the concept model does not record its layer (it was fitted on an array); pass layer=")
    layer_name = resolve_layer(model, layer).name
    fitted_on = concept_model.layer_ and resolve_layer(model, concept_model.layer_).name  # older saves hold paths
    if fitted_on is not None and layer_name != fitted_on:
        raise ValueError(
            f"the concept model was fitted on layer {fitted_on}, not {layer_name}; pass the layer it was fitted on"
        )
    return adapter, layer_name, task_for(adapter).encode_scored(text)


def text_concepts(concept_model: ConceptModel, model, tokenizer, text: str, *, layer=None) -> TextConcepts:
    """Concept coefficients of every token (special tokens included, flagged) of a new text, or of a chat
    conversation rendered by the tokenizer's chat template (its template tokens flagged special).

    ``layer`` defaults to the layer the concept model was fitted on (known when it was fitted on a store).

    Example:
        >>> tc = text_concepts(concepts, model, tokenizer, "The soup was cold.")
        >>> tc.layer, tc.method, tc.tokens
        ('layer:1', 'NMFConcepts', ['[CLS]', 'The', 'soup', 'was', 'cold', '.', '[SEP]'])
        >>> tc.special_mask.tolist()
        [True, False, False, False, False, False, True]
    """
    adapter, layer_name, enc = _prepare(concept_model, model, tokenizer, text, layer)
    ids = torch.as_tensor(enc.input_ids, device=adapter.device)[None]
    with evaluation(model), torch.inference_mode(), capture(model, [layer_name]) as captured:
        model(input_ids=ids)
    hidden = captured[layer_name][0][0].float().cpu().numpy()
    return TextConcepts(
        layout=enc.layout,
        coefficients=concept_model.transform(hidden),
        layer=layer_name,
        method=type(concept_model).__name__,
    )


def concept_importance(
    concept_model: ConceptModel, model, tokenizer, text: str, *, target=None, layer=None
) -> ConceptImportance:
    """Gradient of the target score w.r.t. every token's concept coefficients, with the residual kept.

    Args:
        concept_model: fitted on activations of ``layer`` (per-token activations suit per-token importance).
        model, tokenizer: a sequence classifier (score = class logit) or causal LM (score = next-token logit at the
            last position).
        text: the input: a text, or a chat conversation (a list of ``{"role", "content"}`` messages) rendered by the
            tokenizer's chat template; a causal LM scores the next token of the assistant reply (after the
            template's generation prompt, or continuing a last assistant message).
        target: classifier: class index, label, list of them, or ``None`` for the predicted class; causal LM: token
            id, single-token string, list of them, or ``None`` for the predicted next token.
        layer: defaults to the layer the concept model was fitted on.

    The model is not modified: the patch is a forward hook removed on exit, gradients are taken with
    ``torch.autograd.grad`` (no ``.grad`` left on parameters) and modes are restored.

    Example:
        >>> imp = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="positive")
        >>> imp.target_labels, round(float(imp.target_scores[0]), 3)
        (['positive'], 0.204)
        >>> imp.per_concept("positive").round(3)
        array([ 0.831, -0.01 ,  0.091,  0.053, -0.148,  0.041, -0.196,  0.033])
        >>> concept_importance(concepts, model, tokenizer, "Not bad at all.").target_labels  # the predicted class
        ['positive']
    """
    adapter, layer_name, enc = _prepare(concept_model, model, tokenizer, text, layer)
    task = task_for(adapter)
    if not task.supports_concept_importance:
        raise ValueError(f"concept importance explains classifiers and causal LMs; this model is a {task.name}")
    ids = torch.as_tensor(enc.input_ids, device=adapter.device)[None]
    state: dict[str, torch.Tensor] = {}

    def patch(module, inputs, output):
        hidden = _hidden(output)
        with torch.no_grad():
            coefficients = concept_model.transform(hidden[0].float().cpu().numpy())
        leaf = torch.tensor(coefficients, dtype=hidden.dtype, device=hidden.device, requires_grad=True)
        decoded = concept_model.decode_torch(leaf, hidden[0])[None]  # X: row statistics of SAEs that normalise rows
        state["coefficients"], state["residual"] = leaf, (hidden - decoded).detach()
        return _replace_hidden(output, decoded + state["residual"])

    with evaluation(model), torch.enable_grad(), hooks(model, {layer_name: patch}):
        last = torch.tensor([[ids.shape[1] - 1]])  # a causal LM's logits at the scored (last) position only
        logits = adapter.forward_ids(ids, positions=last if task.scores_next_token else None)
        target_ids, labels, scores = task.concept_targets(logits, target)
        gradients = [torch.autograd.grad(scores[t], state["coefficients"], retain_graph=True)[0] for t in target_ids]
    leaf = state["coefficients"]
    return ConceptImportance(
        layout=enc.layout,
        coefficients=leaf.detach().double().cpu().numpy(),
        layer=layer_name,
        method=type(concept_model).__name__,
        gradients=torch.stack(gradients).double().cpu().numpy(),
        target_labels=labels,
        target_ids=target_ids,
        target_scores=[float(scores[t].detach()) for t in target_ids],
        params={"score": "logit", "residual": "kept"},
    )


def mean_concept_importance(
    concept_model: ConceptModel, model, tokenizer, texts, *, target=None, layer=None, progress: bool = True
):
    """Average per-concept importance over texts: mean signed contribution and mean absolute contribution.

    ``target`` is resolved per text as in :func:`concept_importance` (``None``: each text's own prediction), and one
    target is used per text. Returns a DataFrame ``concept, mean_contribution, mean_abs_contribution`` sorted by the
    absolute column.

    Example:
        >>> frame = mean_concept_importance(concepts, model, tokenizer, texts[:5], target="positive", progress=False)
        >>> frame.head(3).round(3)
           concept  mean_contribution  mean_abs_contribution
        0        0              0.185                  0.281
        1        4             -0.256                  0.256
        2        2              0.134                  0.192
    """
    import pandas as pd
    from tqdm.auto import tqdm

    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise ValueError("no texts given; pass a non-empty list of strings")
    if isinstance(target, (list, tuple)):
        raise ValueError("give one target (or None for each text's prediction); call concept_importance for several")
    signed = np.zeros(concept_model.n_concepts)
    absolute = np.zeros(concept_model.n_concepts)
    for text in tqdm(texts, desc="concept importance", unit="text", disable=not progress):
        values = concept_importance(concept_model, model, tokenizer, text, target=target, layer=layer).per_concept()
        signed += values
        absolute += np.abs(values)
    frame = pd.DataFrame(
        {
            "concept": np.arange(concept_model.n_concepts),
            "mean_contribution": signed / len(texts),
            "mean_abs_contribution": absolute / len(texts),
        }
    )
    return frame.sort_values("mean_abs_contribution", ascending=False, kind="stable").reset_index(drop=True)
