"""COCKATIEL (Jourdan et al., 2023): concepts of a classifier's penultimate activations, ranked by Sobol indices.

The pipeline, as the paper describes it (it adapts CRAFT, Fel et al., 2023, to text):

1. **Excerpts.** Each input is cut into excerpts (``excerpts="clause"`` or ``"sentence"``,
   :func:`~interp_widgets.text_units.clause_spans` / :func:`~interp_widgets.text_units.sentence_spans`), and each
   excerpt is run through the model on its own. Its *penultimate activation* is the input of the classifier's last
   linear layer (the layer that gives the logits: ``classifier`` in BERT, ``classifier.out_proj`` in RoBERTa).
2. **One NMF per predicted class**, as in CRAFT: the excerpts of the inputs the model predicts as class ``k`` (the
   whole input's prediction) form the matrix ``A_k ≈ U_k W_k`` that class ``k``'s
   :class:`~interp_widgets.concepts.NMFConcepts` factorises. No other class's excerpt reaches it.
3. **Importance: total Sobol indices.** Each excerpt's coefficients ``u`` are multiplied by continuous masks
   ``M ∈ [0, 1)^k`` from a scrambled Sobol sequence (:func:`~interp_widgets.attribution.sobol_design`: ``A``, ``B``
   and ``A_B^i``, ``N · (k + 2)`` masks), decoded back to activations ``(u ⊙ M) W + offset`` and run through the
   **classifier head only** (the last linear layer: no forward pass of the model). The Jansen estimator
   (:func:`~interp_widgets.attribution.jansen_total_indices`) gives each concept's total index for that excerpt's
   class score; a concept's importance is the mean over the class's excerpts (excerpts whose score does not vary under
   the masks are left out of the mean). ``score="logit"`` (default) explains the class logit, ``"probability"`` its
   softmax probability.
4. **Input → concept: occlusion.** :meth:`CockatielResult.explain` removes each word (or clause) of a text in turn and
   reports how much each concept's coefficient drops: ``coefficient(text) − coefficient(text without the unit)``.

**Non-negative activations (a departure from the paper).** The paper fine-tunes its RoBERTa with a ReLU in place of the
``tanh`` of the classification head, so the NMF sees non-negative activations. We do not retrain the user's model. A
BERT classifier such as the demo's MiniLM feeds its last layer the ``tanh`` pooler output, which is signed, so by
default (``nonnegative="shift"``) each class's NMF subtracts the per-feature minimum of that class's excerpt
activations (``NMFConcepts(..., nonnegative="shift")``, ``concept_model.shift_``) and decoding adds it back: the head
sees the activations it would see, up to the NMF's reconstruction error, and masking a concept moves the activation
towards that per-feature floor rather than towards zero. ``nonnegative="relu"`` keeps the positive part instead
(the head then sees ``max(a, 0)``, not ``a``). On a head whose penultimate activations are already non-negative (the
paper's ReLU head) the shift is zero and the pipeline is the paper's.

Other departures: clauses are cut at punctuation only (``,;:``, dashes and sentence ends); occlusion deletes a unit's
characters from the text and re-encodes it.

Example:
    >>> result = cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256, progress=False)
    >>> result
    CockatielResult(2 classes: neutral (3 concepts, 8 excerpts), positive (3 concepts, 84 excerpts); head 'classifier', clause excerpts)
    >>> result["positive"].ranking().round(3)
       concept  sobol_total  mean_coefficient
    0        0        0.729             0.262
    1        2        0.146             0.399
    2        1        0.125             0.264
    >>> result["positive"].top_excerpts(0, n=2)
    ['Great sound when it works.', 'Our room was next to the elevator shaft,']
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from interp_widgets._inputs import check_texts
from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import jansen_total_indices, sobol_design
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.concepts.activations import ActivationStore
from interp_widgets.concepts.decompositions import ConceptModel, NMFConcepts
from interp_widgets.layers import evaluation
from interp_widgets.targets import Targets
from interp_widgets.tasks import task_for
from interp_widgets.text_units import clause_spans, sentence_spans, word_spans
from interp_widgets.validation import check_choice, check_int

__all__ = [
    "ClassConcepts",
    "CockatielResult",
    "ConceptOcclusion",
    "cockatiel",
    "excerpt_spans",
    "sobol_concept_importance",
]

EXCERPTS = ("clause", "sentence")
OCCLUSION_UNITS = ("word", "clause", "sentence")
SCORES = ("logit", "probability")
NONNEGATIVE = ("shift", "relu", None)
_FORMAT = "interp_widgets.CockatielResult"
_DECODED_VALUES = 1 << 22  # decoded activation values per head call of the Sobol estimation (about 16 MB)
_SPANS = {"word": word_spans, "clause": clause_spans, "sentence": sentence_spans}


def excerpt_spans(text: str, unit: str = "clause") -> list[tuple[int, int]]:
    """Character spans of the excerpts (``"clause"`` or ``"sentence"``) or words (``"word"``) of ``text``.

    Example:
        >>> text = "Great food, slow service. Back soon."
        >>> [text[a:b] for a, b in excerpt_spans(text, "clause")], len(excerpt_spans(text, "sentence"))
        (['Great food,', 'slow service.', 'Back soon.'], 2)
    """
    check_choice("unit", unit, OCCLUSION_UNITS)
    return _SPANS[unit](text)


def _without(text: str, start: int, end: int) -> str:
    """``text`` with the characters ``[start, end)`` removed and the whitespace around the gap joined."""
    left, right = text[:start].rstrip(), text[end:].lstrip()
    return f"{left} {right}".strip() if left and right else (left or right)


# ---------------------------------------------------------------------- the model's head
def _find_head(model: nn.Module, head: str | None) -> tuple[str, nn.Module]:
    """The module path and module of the classifier's last layer: ``head`` if given, else the last ``nn.Linear``
    with ``config.num_labels`` outputs."""
    modules = dict(model.named_modules())
    if head is not None:
        if head not in modules:
            linear = [n for n, m in modules.items() if isinstance(m, nn.Linear)][-5:]
            raise ValueError(f"the model has no module {head!r}; its last linear layers are {linear}")
        return head, modules[head]
    n_labels = int(getattr(model.config, "num_labels", 0) or 0)
    found = [(n, m) for n, m in modules.items() if isinstance(m, nn.Linear) and m.out_features == n_labels]
    if not found:
        raise ValueError(
            f"found no linear layer with {n_labels} outputs (one per class) to use as the classifier head; "
            "name it with head='module.path'"
        )
    return found[-1]


def _head_pass(adapter: ModelAdapter, head: nn.Module, head_name: str, texts: list[str], progress: bool, desc: str):
    """Run ``texts`` through the model (batched by length): the input of ``head`` for each text (its penultimate
    activation, ``(texts, width)``) and the logits ``(texts, classes)``, both float32 on the CPU.

    A head applied at every position (decoder classifiers) is read at each text's last token, as the model reads it;
    the head applied to the captured rows must give the model's logits, else a ValueError says so."""
    from tqdm.auto import tqdm

    model = adapter.model
    task = task_for(adapter)
    ids_of = [np.asarray(adapter.encode(text).input_ids) if text.strip() else _empty_ids(adapter) for text in texts]
    lengths = [len(ids) for ids in ids_of]
    pad = adapter.tokenizer.pad_token_id if adapter.tokenizer.pad_token_id is not None else 0
    inputs: list[np.ndarray | None] = [None] * len(texts)
    logits: list[np.ndarray | None] = [None] * len(texts)
    captured: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach()))
    checked = False
    bar = tqdm(total=len(texts), desc=desc, unit="text", disable=not progress)
    try:
        with evaluation(model), torch.inference_mode():
            for batch in adapter.length_buckets(lengths):
                groups = [batch] if task.pad_safe or len({lengths[i] for i in batch}) == 1 else [[i] for i in batch]
                for group in groups:
                    width = max(lengths[i] for i in group)
                    ids = torch.full((len(group), width), pad, dtype=torch.long)
                    mask = torch.zeros((len(group), width), dtype=torch.long)
                    for row, i in enumerate(group):
                        ids[row, : lengths[i]] = torch.from_numpy(ids_of[i])
                        mask[row, : lengths[i]] = 1
                    captured.clear()
                    out = adapter.forward_ids(ids, mask).reshape(len(group), -1)
                    if len(captured) != 1:
                        raise ValueError(
                            f"the head {head_name!r} ran {len(captured)} times in one forward pass; name the "
                            "classifier's last layer with head="
                        )
                    acts = captured[0]
                    if acts.dim() == 3:  # a head applied at every position: the model reads the last token
                        acts = acts[torch.arange(len(group)), torch.tensor([lengths[i] - 1 for i in group])]
                    if acts.dim() != 2 or acts.shape[0] != len(group):
                        raise ValueError(
                            f"the head {head_name!r} receives activations of shape {tuple(captured[0].shape)}, not one "
                            "vector per text; name the classifier's last layer with head="
                        )
                    if not checked:
                        again = head(acts).reshape(len(group), -1)
                        if again.shape != out.shape or not torch.allclose(again, out, rtol=1e-3, atol=1e-4):
                            raise ValueError(
                                f"{head_name!r} applied to its inputs does not give the model's logits, so it is "
                                "not the classifier's last layer; name that layer with head="
                            )
                        checked = True
                    acts, out = acts.float().cpu().numpy(), out.float().cpu().numpy()
                    for row, i in enumerate(group):
                        inputs[i], logits[i] = acts[row], out[row]
                bar.update(len(batch))
    finally:
        handle.remove()
        bar.close()
    return np.stack(inputs).astype(np.float32), np.stack(logits).astype(np.float32)


def _empty_ids(adapter: ModelAdapter) -> np.ndarray:
    """The ids of an empty text (its special tokens only): what the model sees once occlusion deleted every unit."""
    ids = np.asarray(adapter.tokenizer("", add_special_tokens=True)["input_ids"], dtype=np.int64)
    if not len(ids):
        raise ValueError(
            "deleting this unit leaves an empty text, and the tokenizer adds no special tokens to run instead; "
            "explain a longer text or use a finer granularity"
        )
    return ids


def _class_scores(head: nn.Module, decoded: torch.Tensor, class_id: int, score: str) -> torch.Tensor:
    out = head(decoded)
    if score == "probability":
        out = torch.softmax(out.float(), dim=-1)
    return out[..., class_id]


def sobol_concept_importance(
    concept_model: ConceptModel,
    coefficients: np.ndarray,
    head,
    class_id: int,
    *,
    n_samples: int = 32,
    score: str = "logit",
    seed: int = 0,
) -> np.ndarray:
    """Total Sobol index of every concept for every row of ``coefficients``: ``(rows, concepts)``.

    Each row's coefficients are multiplied by the continuous masks of :func:`~interp_widgets.attribution.sobol_design`
    (``n_samples`` rounded up to a power of two, ``N · (k + 2)`` masks shared by all rows), decoded by
    ``concept_model.decode_torch`` and scored by ``head`` (a module or a function of ``(..., width)`` activations
    returning ``(..., classes)``) at ``class_id``; :func:`~interp_widgets.attribution.jansen_total_indices` turns the
    scores into indices. A row whose score does not vary gets NaN.

    With a linear head ``h(a) = a · w + b`` the score is ``Σ_i c_i M_i + const`` with ``c_i = u_i (W_i · w)``: the
    masks are independent and uniform, so the total indices are exactly ``c_i² / Σ_j c_j²`` (up to the QMC error).

    Example:
        >>> head = torch.nn.Linear(32, 3)
        >>> u = concepts.transform(store[:4])
        >>> indices = sobol_concept_importance(concepts, u, head, 2, n_samples=1024)
        >>> c = u * (concepts.components_ @ head.weight[2].detach().numpy())
        >>> bool(np.abs(indices - c**2 / (c**2).sum(1, keepdims=True)).max() < 0.02)
        True
    """
    check_choice("score", score, SCORES)
    coefficients = np.asarray(coefficients, dtype=np.float32)
    n_concepts = coefficients.shape[1]
    n = 2 ** int(np.ceil(np.log2(check_int("n_samples", n_samples, minimum=1))))
    masks = sobol_design(n_concepts, n, rng=np.random.default_rng([int(seed), n_concepts]), binary=False)
    parameter = next(iter(head.parameters()), None) if isinstance(head, nn.Module) else None
    dtype = parameter.dtype if parameter is not None else torch.float32
    device = parameter.device if parameter is not None else torch.device("cpu")
    masks_t = torch.as_tensor(masks, dtype=dtype, device=device)
    width = concept_model.n_features_in_
    per_call = max(1, _DECODED_VALUES // (len(masks) * max(width, 1)))
    out = np.empty((len(coefficients), n_concepts))
    with torch.inference_mode():
        for start in range(0, len(coefficients), per_call):
            u = torch.as_tensor(coefficients[start : start + per_call], dtype=dtype, device=device)
            masked = u[:, None, :] * masks_t[None]  # (rows, masks, concepts)
            decoded = concept_model.decode_torch(masked.reshape(-1, n_concepts)).reshape(len(u), len(masks), -1)
            values = _class_scores(head, decoded, int(class_id), score).double().cpu().numpy()
            out[start : start + len(u)] = jansen_total_indices(values, n_concepts, n)
    return out


# ---------------------------------------------------------------------- results
@dataclass
class ClassConcepts:
    """One class's concepts: its NMF, the excerpts of the inputs predicted as the class, and the Sobol importance.

    ``activations`` are the excerpts' penultimate activations (``excerpts × width``), ``coefficients`` their
    concept coefficients ``U`` (``excerpts × concepts``), ``text_ids`` the input each excerpt comes from, ``sobol``
    each concept's total Sobol index averaged over the excerpts, and ``sobol_per_excerpt`` the indices of each
    excerpt (NaN where its score did not vary).

    Example:
        >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
        >>> positive = result["positive"]
        >>> positive.label, positive.coefficients.shape, positive.concept_model.fit_info_["rows"]
        ('positive', (84, 3), 84)
        >>> positive.top_concepts(2)
        [0, 2]
    """

    label: str
    class_id: int
    concept_model: ConceptModel
    excerpts: list[str]
    text_ids: np.ndarray
    activations: np.ndarray
    coefficients: np.ndarray
    sobol: np.ndarray
    sobol_per_excerpt: np.ndarray

    def __post_init__(self):
        self.text_ids = np.asarray(self.text_ids, dtype=np.int64)
        self.activations = np.asarray(self.activations, dtype=np.float32)
        self.coefficients = np.asarray(self.coefficients, dtype=np.float32)
        self.sobol = np.asarray(self.sobol, dtype=np.float64)
        self.sobol_per_excerpt = np.asarray(self.sobol_per_excerpt, dtype=np.float64)

    @property
    def n_concepts(self) -> int:
        """The number of concepts of this class."""
        return int(self.coefficients.shape[1])

    def top_concepts(self, n: int | None = None) -> list[int]:
        """The concepts by decreasing total Sobol index (the ``n`` first; all when ``None``).

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> result["positive"].top_concepts()
            [0, 2, 1]
        """
        order = [int(c) for c in np.argsort(-np.nan_to_num(self.sobol, nan=-1.0), kind="stable")]
        return order if n is None else order[: check_int("n", n, minimum=0)]

    def top_excerpts(self, concept: int, n: int = 5) -> list[str]:
        """The ``n`` excerpts with the largest coefficient of ``concept`` (excerpts where it is zero are left out).

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> result["neutral"].top_excerpts(2, n=1)
            ['the beds are heavenly,']
        """
        if not 0 <= int(concept) < self.n_concepts:
            raise ValueError(f"concept {concept} out of range; class {self.label!r} has {self.n_concepts} concepts")
        column = self.coefficients[:, int(concept)]
        order = np.argsort(-column, kind="stable")[: check_int("n", n, minimum=0)]
        return [self.excerpts[i] for i in order if column[i] > 0]

    def ranking(self):
        """The concepts by decreasing total Sobol index: ``concept, sobol_total, mean_coefficient``.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> result["positive"].ranking()["concept"].tolist()
            [0, 2, 1]
        """
        import pandas as pd

        order = self.top_concepts()
        return pd.DataFrame(
            {
                "concept": order,
                "sobol_total": self.sobol[order],
                "mean_coefficient": self.coefficients.mean(axis=0)[order].astype(np.float64),
            }
        )

    def store(self, *, model_name: str = "", layer: str = "") -> ActivationStore:
        """The excerpts' activations as an :class:`~interp_widgets.concepts.ActivationStore` of one row per excerpt
        (each row's text is its excerpt), which :func:`~interp_widgets.concepts.interpret_concepts` summarises.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> store = result["neutral"].store()
            >>> store.shape, store.tokens([0])
            ((8, 32), ['More gripping than most thrillers twice its length.'])
        """
        n = len(self.excerpts)
        meta = {
            "text_id": np.arange(n),
            "position": np.zeros(n, np.int64),
            "start": np.zeros(n, np.int64),
            "end": np.array([len(e) for e in self.excerpts], dtype=np.int64),
            "token_id": np.full(n, -1, np.int64),
        }
        info = {"layer": layer, "unit": "sentence", "pooling": "head input", "name_or_path": model_name}
        return ActivationStore([self.activations], meta, self.excerpts, {**info, "dim": self.activations.shape[1]})


@dataclass
class ConceptOcclusion:
    """Which words (or clauses) of a text drive each concept of its class: occlusion of the concept coefficients.

    ``importance[unit, concept] = coefficients[concept] − occluded[unit, concept]``, where ``occluded`` are the
    coefficients of the text with that unit deleted. Positive: the unit raises the concept.

    Example:
        >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
        >>> occ = result.explain("Great food, slow service.", granularity="clause")
        >>> occ.label, occ.units, occ.importance.shape
        ('positive', ['Great food,', 'slow service.'], (2, 3))
    """

    text: str
    label: str
    granularity: str
    units: list[str]
    spans: np.ndarray
    coefficients: np.ndarray
    occluded: np.ndarray
    sobol: np.ndarray

    def __post_init__(self):
        self.spans = np.asarray(self.spans, dtype=np.int64).reshape(-1, 2)
        self.coefficients = np.asarray(self.coefficients, dtype=np.float64)
        self.occluded = np.asarray(self.occluded, dtype=np.float64).reshape(len(self.units), -1)
        self.sobol = np.asarray(self.sobol, dtype=np.float64)

    @property
    def importance(self) -> np.ndarray:
        """``(units, concepts)``: how much deleting each unit lowers each concept's coefficient."""
        return self.coefficients[None] - self.occluded

    def to_dataframe(self):
        """Long table: one row per (unit, concept): ``unit, start, end, concept, importance, coefficient,
        sobol_total``.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> frame = result.explain("Slow service.").to_dataframe()
            >>> len(frame), frame.columns.tolist()[:5]
            (9, ['unit', 'start', 'end', 'concept', 'importance'])
        """
        import pandas as pd

        n_units, k = self.importance.shape
        return pd.DataFrame(
            {
                "unit": np.repeat(np.asarray(self.units, dtype=object), k),
                "start": np.repeat(self.spans[:, 0], k),
                "end": np.repeat(self.spans[:, 1], k),
                "concept": np.tile(np.arange(k), n_units),
                "importance": self.importance.reshape(-1),
                "coefficient": np.tile(self.coefficients, n_units),
                "sobol_total": np.tile(self.sobol, n_units),
            }
        )

    def chart(self, top: int = 5):
        """Altair heatmap, units × the ``top`` concepts of the class by Sobol index, coloured by the signed
        occlusion importance.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> chart = result.explain("Slow service.").chart(top=2)
            >>> chart.mark, len(chart.data)
            ('rect', 6)
        """
        import altair as alt

        order = [int(c) for c in np.argsort(-np.nan_to_num(self.sobol, nan=-1.0), kind="stable")[: int(top)]]
        frame = self.to_dataframe()
        frame = frame[frame["concept"].isin(order)].copy()
        frame["label"] = [f"{i}: {u}" for i, u in zip(frame.index // self.importance.shape[1], frame["unit"])]
        limit = float(np.abs(frame["importance"]).max() or 1.0)
        return (
            alt.Chart(frame)
            .mark_rect()
            .encode(
                x=alt.X("label:N", sort=None, title=self.granularity),
                y=alt.Y("concept:O", sort=order),
                color=alt.Color("importance:Q", scale=alt.Scale(scheme="purpleorange", domain=[-limit, limit])),
                tooltip=["unit:N", "concept:Q", alt.Tooltip("importance:Q", format=".4g")],
            )
            .properties(title=f"occlusion of {self.label} concepts")
        )

    def _repr_html_(self) -> str:
        return _table_html(self.to_dataframe().round(4), f"Occlusion of the {html.escape(self.label)} concepts")


def _table_html(frame, title: str) -> str:
    return f"<div><b>{title}</b>{frame.to_html(index=False, escape=True)}</div>"


@dataclass
class CockatielResult:
    """The per-class concepts of :func:`cockatiel`: ``result[label]`` is a :class:`ClassConcepts`.

    ``texts`` are the inputs, ``predictions`` the class each was predicted as, ``labels`` all the model's classes,
    ``head`` the path of the classifier's last layer and ``params`` the settings. The model and tokenizer are kept
    in memory (never saved) for :meth:`explain`.

    Example:
        >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
        >>> [c.label for c in result.classes], np.bincount(result.predictions, minlength=3).tolist()
        (['neutral', 'positive'], [0, 4, 36])
        >>> path = result.save(getfixture("tmp_path") / "cockatiel.safetensors")
        >>> again = CockatielResult.load(path)
        >>> np.array_equal(again["positive"].sobol, result["positive"].sobol)
        True
    """

    classes: list[ClassConcepts]
    texts: list[str]
    predictions: np.ndarray
    labels: list[str]
    head: str
    params: dict[str, Any] = field(default_factory=dict)
    _model: Any = field(default=None, repr=False, compare=False)
    _tokenizer: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.predictions = np.asarray(self.predictions, dtype=np.int64)

    @property
    def targets(self) -> Targets:
        """The classes that have concepts (labels and class ids), which ``result[...]`` looks up.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> result.targets.labels, result.targets.ids.tolist()
            (['neutral', 'positive'], [1, 2])
        """
        return Targets([c.label for c in self.classes], ids=[c.class_id for c in self.classes])

    def __getitem__(self, target: int | str) -> ClassConcepts:
        return self.classes[self.targets.index(target, name="class")]

    def __len__(self) -> int:
        return len(self.classes)

    def to_dataframe(self, *, excerpts: int = 3):
        """One row per (class, concept), by decreasing Sobol index within each class: ``class, concept, rank,
        sobol_total, mean_coefficient, n_excerpts, top_excerpts`` (the ``excerpts`` first, joined by `` | ``).

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> frame = result.to_dataframe(excerpts=1)
            >>> frame[["class", "concept", "rank", "n_excerpts"]].head(4)
                  class  concept  rank  n_excerpts
            0   neutral        0     0           8
            1   neutral        1     1           8
            2   neutral        2     2           8
            3  positive        0     0          84
        """
        import pandas as pd

        frames = []
        for part in self.classes:
            frame = part.ranking()
            frame.insert(0, "class", part.label)
            frame.insert(2, "rank", np.arange(len(frame)))
            frame["n_excerpts"] = len(part.excerpts)
            frame["top_excerpts"] = [" | ".join(part.top_excerpts(c, excerpts)) for c in frame["concept"]]
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def chart(self, top: int = 10):
        """Altair bar chart of each class's ``top`` concepts by total Sobol index, one panel per class.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> chart = result.chart(top=2)
            >>> chart.mark, len(chart.data)
            ('bar', 4)
        """
        import altair as alt

        frame = self.to_dataframe()
        frame = frame[frame["rank"] < int(top)].copy()
        return (
            alt.Chart(frame)
            .mark_bar()
            .encode(
                x=alt.X("concept:N", sort=None),
                y=alt.Y("sobol_total:Q", title="total Sobol index"),
                column=alt.Column("class:N"),
                tooltip=["class:N", "concept:Q", alt.Tooltip("sobol_total:Q", format=".3f"), "top_excerpts:N"],
            )
            .properties(title="COCKATIEL concepts by class")
        )

    def widget(self, target: int | str | None = None, *, k: int = 10, **options):
        """The concept browser for one class's concepts (``None``: the first class), sorted by total Sobol index;
        each concept's top contexts are its top excerpts. ``options`` go to
        :class:`~interp_widgets.widgets.ConceptBrowser`.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> browser = result.widget("positive")
            >>> browser.visible_order(), browser.importance_label
            ([0, 2, 1], 'total Sobol index for positive')
        """
        from interp_widgets.concepts.interpret import interpret_concepts

        part = self[target] if target is not None else self.classes[0]
        store = part.store(model_name=str(self.params.get("model_name", "")), layer=f"{self.head} (input)")
        interp = interpret_concepts(part.concept_model, store, k=int(k), window=0, progress=False)
        options.setdefault("sort_by", "importance")
        options.setdefault("descending", True)
        return interp.widget(importance=part.sobol, importance_label=f"total Sobol index for {part.label}", **options)

    def explain(
        self, text: str, *, target: int | str | None = None, granularity: str = "word", model=None, tokenizer=None
    ) -> ConceptOcclusion:
        """Occlusion of ``text``'s words (``granularity="word"``) or clauses / sentences on the concepts of its class.

        ``target`` picks the class (a label or an index into :attr:`classes`; ``None``: the class the model predicts
        for ``text``). ``model`` and ``tokenizer`` default to those :func:`cockatiel` ran on (needed after
        :meth:`load`). One forward pass per unit, batched.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> occ = result.explain("Not bad at all.", target="neutral")
            >>> occ.units, occ.importance.shape
            (['Not', 'bad', 'at', 'all', '.'], (5, 3))
        """
        model = model if model is not None else self._model
        tokenizer = tokenizer if tokenizer is not None else self._tokenizer
        if model is None or tokenizer is None:
            raise ValueError(
                "explain needs the model and tokenizer (a loaded result has none); pass model= and tokenizer="
            )
        if not isinstance(text, str) or not text.strip():
            raise ValueError("explain takes one non-empty text")
        check_choice("granularity", granularity, OCCLUSION_UNITS)
        spans = excerpt_spans(text, granularity)
        variants = [text] + [_without(text, a, b) for a, b in spans]
        adapter = ModelAdapter(model, tokenizer, max_batch_tokens=int(self.params.get("max_batch_tokens", 8192)))
        _, head = _find_head(model, self.head)
        acts, logits = _head_pass(adapter, head, self.head, variants, False, "occlusion")
        if target is None:
            predicted = int(logits[0].argmax())
            if predicted not in self.targets.ids.tolist():
                raise ValueError(
                    f"the model predicts {self.labels[predicted]!r} for this text, a class without concepts here "
                    f"(fitted: {self.targets.labels}); pass target= one of them"
                )
            part = self.classes[self.targets.ids.tolist().index(predicted)]
        else:
            part = self[target]
        coefficients = part.concept_model.transform(acts)
        return ConceptOcclusion(
            text=text,
            label=part.label,
            granularity=granularity,
            units=[text[a:b] for a, b in spans],
            spans=np.array(spans, dtype=np.int64).reshape(-1, 2),
            coefficients=coefficients[0],
            occluded=coefficients[1:],
            sobol=part.sobol,
        )

    # ------------------------------------------------------------------ persistence and display
    def save(self, path: str | Path) -> Path:
        """Write to one safetensors file (the arrays, each class's NMF, the rest as JSON; never pickle).

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> again = CockatielResult.load(result.save(getfixture("tmp_path") / "c.safetensors"))
            >>> again["neutral"].excerpts == result["neutral"].excerpts, again.head
            (True, 'classifier')
        """
        arrays: dict[str, np.ndarray] = {"predictions": self.predictions}
        classes = []
        for j, part in enumerate(self.classes):
            for name in ("text_ids", "activations", "coefficients", "sobol", "sobol_per_excerpt"):
                arrays[f"{j}/{name}"] = getattr(part, name)
            model_arrays, model_meta = part.concept_model._bundle()
            arrays.update({f"{j}/model/{name}": value for name, value in model_arrays.items()})
            classes.append(
                {"label": part.label, "class_id": part.class_id, "excerpts": part.excerpts, "model": model_meta}
            )
        meta = {
            "texts": self.texts,
            "labels": self.labels,
            "head": self.head,
            "params": self.params,
            "classes": classes,
        }
        return save_bundle(path, _FORMAT, arrays, meta)

    @classmethod
    def load(cls, path: str | Path) -> CockatielResult:
        """Read a file written by :meth:`save`; :meth:`explain` then needs ``model=`` and ``tokenizer=``.

        Example:
            >>> result = cockatiel_result  # cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)
            >>> again = CockatielResult.load(result.save(getfixture("tmp_path") / "c.safetensors"))
            >>> again.explain("Slow service.", model=model, tokenizer=tokenizer).units
            ['Slow', 'service', '.']
        """
        arrays, meta = load_bundle(path, _FORMAT)
        classes = []
        for j, saved in enumerate(meta["classes"]):
            prefix = f"{j}/model/"
            model_arrays = {name[len(prefix) :]: value for name, value in arrays.items() if name.startswith(prefix)}
            classes.append(
                ClassConcepts(
                    label=saved["label"],
                    class_id=int(saved["class_id"]),
                    concept_model=ConceptModel._from_bundle(model_arrays, saved["model"], path),
                    excerpts=list(saved["excerpts"]),
                    **{
                        name: arrays[f"{j}/{name}"]
                        for name in ("text_ids", "activations", "coefficients", "sobol", "sobol_per_excerpt")
                    },
                )
            )
        return cls(
            classes=classes,
            texts=list(meta["texts"]),
            predictions=arrays["predictions"],
            labels=list(meta["labels"]),
            head=meta["head"],
            params=dict(meta["params"]),
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{c.label} ({c.n_concepts} concepts, {len(c.excerpts)} excerpts)" for c in self.classes)
        return (
            f"CockatielResult({len(self.classes)} classes: {parts}; head {self.head!r}, "
            f"{self.params.get('excerpts', '')} excerpts)"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        frame = self.to_dataframe().round(4)
        title = html.escape(f"COCKATIEL concepts of {len(self.classes)} classes, by total Sobol index")
        return {"text/plain": repr(self), "text/html": _table_html(frame, title)}


# ---------------------------------------------------------------------- the pipeline
def cockatiel(
    model,
    tokenizer,
    texts,
    *,
    n_concepts: int = 10,
    excerpts: str = "clause",
    classes=None,
    n_samples: int = 32,
    score: str = "logit",
    nonnegative: str | None = "shift",
    head: str | None = None,
    seed: int = 0,
    estimator_params: dict[str, Any] | None = None,
    max_batch_tokens: int = 8192,
    progress: bool = True,
) -> CockatielResult:
    """COCKATIEL's concepts of a sequence classifier: one NMF per predicted class on the penultimate activations of
    excerpts, ranked by total Sobol indices through the classifier head (see the module docstring).

    Args:
        model, tokenizer: a Hugging Face sequence classifier and its fast tokenizer (left untouched).
        texts: the inputs; each is predicted as a whole, then cut into excerpts.
        n_concepts: concepts per class (at most the class's number of excerpts).
        excerpts: ``"clause"`` (default) or ``"sentence"``.
        classes: the classes to explain (labels or class indices); ``None``: every class predicted for at least one
            input. A class predicted for no input is refused.
        n_samples: ``N`` of the Sobol design (rounded up to a power of two); ``N · (n_concepts + 2)`` head calls per
            excerpt.
        score: ``"logit"`` (the class logit, default) or ``"probability"``.
        nonnegative: how the penultimate activations become non-negative: ``"shift"`` (default: subtract each class's
            per-feature minimum, added back when decoding), ``"relu"`` (their positive part) or ``None`` (they are
            non-negative already, as behind the paper's ReLU head). See the module docstring: this departs from the
            paper, which retrains the head with a ReLU.
        head: the module path of the classifier's last layer; default: the last ``nn.Linear`` with one output per
            class, checked to give the model's logits.
        seed: seeds the NMF (``random_state``) and the scrambling of the Sobol design.
        estimator_params: more arguments of scikit-learn's ``NMF`` (default ``{"max_iter": 1000}``, and
            ``random_state=seed``).
        max_batch_tokens, progress: forward-pass batching and progress bars.

    Example:
        >>> result = cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256, progress=False)
        >>> result.params["score"], result["positive"].concept_model.fit_info_["nonnegative"]
        ('logit', 'shift')
        >>> cockatiel(model, tokenizer, texts, n_concepts=3, classes=["negative"], progress=False)
        Traceback (most recent call last):
        ...
        ValueError: no input is predicted as 'negative' (predictions: neutral 4, positive 36), so its NMF would have no excerpts; pass texts the model predicts as 'negative', or leave it out of classes=
        >>> cockatiel(lm, lm_tokenizer, texts, progress=False)
        Traceback (most recent call last):
        ...
        ValueError: COCKATIEL explains sequence classifiers (one score per class); this model is a causal-lm
    """
    n_concepts = check_int("n_concepts", n_concepts, minimum=1)
    check_choice("excerpts", excerpts, EXCERPTS)
    check_choice("score", score, SCORES)
    check_int("n_samples", n_samples, minimum=1)
    check_int("seed", seed, minimum=0)
    if nonnegative not in NONNEGATIVE:
        raise ValueError(f"unknown nonnegative={nonnegative!r}; use 'shift', 'relu' or None")
    if estimator_params is not None and not isinstance(estimator_params, dict):
        raise TypeError(f"estimator_params must be a dict or None, got {type(estimator_params).__name__}")
    check_texts(texts, name="texts", call='cockatiel(model, tokenizer, ["a text", ...])')
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a non-empty list of strings")
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=max_batch_tokens)
    task = task_for(adapter)
    if not task.per_class:
        raise ValueError(f"COCKATIEL explains sequence classifiers (one score per class); this model is a {task.name}")
    labels = list(task.labels)
    head_name, head_module = _find_head(model, head)

    _, logits = _head_pass(adapter, head_module, head_name, texts, progress, "predicting inputs")
    predictions = logits.argmax(axis=1)
    counts = np.bincount(predictions, minlength=len(labels))
    if classes is None:
        wanted = [int(c) for c in np.flatnonzero(counts)]
    else:
        items = [classes] if isinstance(classes, (str, int)) else list(classes)
        wanted = [Targets(labels, ids=np.arange(len(labels))).index(c, name="class") for c in items]
    summary = ", ".join(f"{labels[c]} {int(counts[c])}" for c in np.flatnonzero(counts))
    for c in wanted:
        if counts[c] == 0:
            raise ValueError(
                f"no input is predicted as {labels[c]!r} (predictions: {summary}), so its NMF would have no "
                f"excerpts; pass texts the model predicts as {labels[c]!r}, or leave it out of classes="
            )

    pieces, owners = [], []
    for i, text in enumerate(texts):
        for a, b in excerpt_spans(text, excerpts):
            pieces.append(text[a:b].strip())
            owners.append(i)
    owners = np.asarray(owners, dtype=np.int64)
    activations, _ = _head_pass(adapter, head_module, head_name, pieces, progress, "excerpt activations")

    params = {"random_state": int(seed), "max_iter": 1000, **(estimator_params or {})}
    results = []
    for c in wanted:
        rows = np.flatnonzero(predictions[owners] == c)
        if len(rows) < n_concepts:
            raise ValueError(
                f"class {labels[c]!r} has {len(rows)} excerpts, fewer than n_concepts={n_concepts}; use fewer "
                f"concepts, shorter excerpts (excerpts='clause') or more texts predicted as {labels[c]!r}"
            )
        nmf = NMFConcepts(n_concepts, nonnegative=nonnegative, estimator_params=params).fit(activations[rows])
        nmf.fit_info_["class"] = labels[c]
        coefficients = nmf.transform(activations[rows])
        per_excerpt = sobol_concept_importance(
            nmf, coefficients, head_module, c, n_samples=n_samples, score=score, seed=seed
        )
        varied = ~np.isnan(per_excerpt).all(axis=1)
        sobol = per_excerpt[varied].mean(axis=0) if varied.any() else np.zeros(n_concepts)
        results.append(
            ClassConcepts(
                label=labels[c],
                class_id=c,
                concept_model=nmf,
                excerpts=[pieces[r] for r in rows],
                text_ids=owners[rows],
                activations=activations[rows],
                coefficients=coefficients,
                sobol=sobol,
                sobol_per_excerpt=per_excerpt,
            )
        )
    from interp_widgets._model_names import model_name_of

    settings = {
        "n_concepts": n_concepts,
        "excerpts": excerpts,
        "n_samples": int(2 ** int(np.ceil(np.log2(n_samples)))),
        "score": score,
        "nonnegative": nonnegative,
        "seed": int(seed),
        "estimator_params": estimator_params,
        "max_batch_tokens": int(max_batch_tokens),
        "model_name": model_name_of(model) or "",
    }
    return CockatielResult(
        classes=results,
        texts=texts,
        predictions=predictions,
        labels=labels,
        head=head_name,
        params=settings,
        _model=model,
        _tokenizer=tokenizer,
    )
