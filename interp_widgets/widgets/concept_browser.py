"""Concept browser: a sortable, searchable list of concepts and a feature-dashboard detail pane for the selected one.

The list shows each concept's label, top tokens, activation density (dead concepts flagged) and, when given, its
importance for a prediction and the detection and fuzzing scores of its label
(:func:`~interp_widgets.concepts.score_labels`, cached with the labels), as numbers beside the label. The detail pane of the selected concept draws its activation histogram, its top
activating contexts with the activating token highlighted, its top texts, the vocabulary it promotes and, for the
input texts given, the concept's activation on every token (or, with ``input_attributions``, which input tokens make
the concept fire: an attribution of its activation to the tokens, computed on the concepts side when a concept is
selected); clicking a token lists the concepts active there.

Only the concepts on the visible page (and the selected one) are sent to the browser: the front end writes the
concept ids it shows into ``requested`` and the kernel answers by replacing ``details``. Top-k contexts and
histograms are precomputed by :func:`~interp_widgets.concepts.interpret_concepts`; no activation matrix is shipped.

The browser only draws prepared data: it computes nothing about a model. ``interpret_concepts(...).widget(...)``
(on the concepts side) also turns plain strings into :class:`~interp_widgets.concepts.TextConcepts`.

Example:
    >>> from interp_widgets.concepts import interpret_concepts, text_concepts
    >>> interp = interpret_concepts(concepts, store, progress=False)
    >>> browser = ConceptBrowser(interp, texts=[text_concepts(concepts, model, tokenizer, "The soup was cold.")])
    >>> browser
    ConceptBrowser(8 NMFConcepts concepts at 'layer:1', 0 dead, 1 texts, selected_concept=-1)
    >>> browser.selected_concept = 3  # what clicking concept 3 in the list does
    >>> browser.concept_detail(3)["label"]
    '. / felt / which'
    >>> interp.widget(texts=["The soup was cold."], concept_model=concepts, model=model, tokenizer=tokenizer)
    ConceptBrowser(8 NMFConcepts concepts at 'layer:1', 0 dead, 1 texts, selected_concept=-1)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import TEXT_TOP, ConceptBrowserData, ConceptTextsPart, LabelScoresPart
from interp_widgets.widgets._base import InterpWidget, PagedList
from interp_widgets.widgets._colour import format_score, score_colours
from interp_widgets.widgets._protocols import (
    ConceptImportanceLike,
    ConceptInputAttributionsLike,
    ConceptSummary,
    ConceptTexts,
)
from interp_widgets.widgets._svg import SvgFigure, TokenPiece
from interp_widgets.widgets._tokens import scored_layout
from interp_widgets.widgets._mime import ANY_ARRAY_1D, compact_json, json_value
from interp_widgets.widgets._traits import array_to_buffer
from interp_widgets.validation import check_choice, check_int

SORT_KEYS = ("index", "label", "density", "max", "importance", "abs_importance", "detection", "fuzzing")


def _percent(fraction: float) -> int:
    """A fraction as a whole percentage, halves rounded up (as the browser's ``Math.round``)."""
    return math.floor(100 * fraction + 0.5)


LABEL_SCORE_KINDS = ("detection", "fuzzing")  # score_labels' two scores, each a balanced accuracy (chance: 0.5)
TEXT_MODES = ("activation", "attribution")
LIST_TOKENS = 5  # distinct top tokens shown per concept in the list
MAX_TEXT_CHARS = 400  # top texts are cut to this length in the detail pane
MAX_PAGE_SIZE = 100
STATIC_CONCEPTS = 12
PRELOAD_CONCEPTS = 200  # concept details an exported page carries, since no kernel answers there
PAYLOAD_DETAIL_BYTES = 256 * 1024  # concept details a saved output carries (its mime payload), in list order
_COMPUTE_OPTIONS = {"store", "model", "tokenizer", "k", "progress"}  # of the old computing constructor


def _looks_like_concept_model(value: Any) -> bool:
    return callable(getattr(value, "fit", None)) and callable(getattr(value, "transform", None))


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _number(value: Any) -> float | None:
    """A finite float, or None for a missing or non-finite value."""
    return None if value is None else _finite(value)


def _p_text(value: float | None) -> str:
    """A chance p-value as the detail pane writes it ("p = 0.031", "p n/a" when it was not tested)."""
    return "p n/a" if value is None else f"p = {format_score(value)}"


def label_control_sentence(control: dict[str, Any]) -> str:
    """One concept's swapped-label control (``concept_detail(c)["label_scores"]["control"]``) in the words of the
    detail pane; the live view writes the same (``controlSentence`` in ``js/src/views/concept_browser/draw.js``).

    Example:
        >>> label_control_sentence({"swapped_from": 2, "swapped_label": "food", "outscores": True,
        ...     "detection": {"balanced_accuracy": 0.5, "p_value": 0.6}, "fuzzing": {"balanced_accuracy": 0.25,
        ...     "p_value": None}, "true_score": 0.875, "swapped_score": 0.375})
        'control: judged again under the label of #2 (“food”): detection 0.5 (p = 0.6) · fuzzing 0.25 (p n/a); the true label outscores it (mean 0.875 against 0.375)'
    """
    scores = " · ".join(
        f"{kind} {format_score(_nan(control[kind]['balanced_accuracy']))} ({_p_text(control[kind]['p_value'])})"
        for kind in LABEL_SCORE_KINDS
    )
    verdict = "outscores it" if control["outscores"] else "does not outscore it"
    return (
        f"control: judged again under the label of #{control['swapped_from']} (“{control['swapped_label']}”): "
        f"{scores}; the true label {verdict} (mean {format_score(_nan(control['true_score']))} against "
        f"{format_score(_nan(control['swapped_score']))})"
    )


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _distinct_tokens(tokens: Sequence[str], n: int) -> list[str]:
    out: list[str] = []
    for token in tokens:
        if token not in out:
            out.append(token)
        if len(out) == n:
            break
    return out


def _text_pieces(text: str, tokens: Sequence[str], offsets: np.ndarray) -> tuple[list[str], list[str]]:
    """Display string and the original text before it (gap) for each token; tokens without a span keep their string."""
    shown, gaps, previous_end = [], [], 0
    for token, (start, end) in zip(tokens, offsets):
        start, end = int(start), int(end)
        if end > start:
            gaps.append(text[previous_end:start] if start >= previous_end else "")
            shown.append(text[start:end])
            previous_end = end
        else:
            gaps.append(" " if shown else "")
            shown.append(token)
    return shown, gaps


class ConceptBrowser(InterpWidget, PagedList, data=ConceptBrowserData):
    """Browse concepts: list (label, label scores, top tokens, density, dead flag, importance), detail pane, per-token
    text view.

    Args:
        interpretation: a :class:`~interp_widgets.concepts.ConceptInterpretation` (from
            :func:`~interp_widgets.concepts.interpret_concepts`), or any object shaped like
            :class:`~interp_widgets.widgets._protocols.ConceptSummary`. For a fitted concept model, use
            ``interpret_concepts(concepts, store, ...).widget(texts=[...], concept_model=concepts, model=lm,
            tokenizer=tok)``.
        texts: input texts for the text view: :class:`~interp_widgets.concepts.TextConcepts` /
            :class:`~interp_widgets.concepts.ConceptImportance` objects (``ConceptTexts`` protocol).
        importance: per-concept importance for a prediction: a ``ConceptImportance`` (summed over tokens for
            ``target``), the DataFrame of :func:`~interp_widgets.concepts.mean_concept_importance`, or one number per
            concept. Defaults to the first ``ConceptImportance`` among ``texts``.
        target: the target row or label of a ``ConceptImportance``.
        input_attributions: which input tokens make a concept fire, for the text view's "input attribution" mode: a
            :class:`~interp_widgets.concepts.ConceptInputAttributions` (``ConceptInputAttributionsLike``), which
            computes the attribution of the selected concept on the selected text when the browser first asks for
            it, and caches it. ``interpretation.widget(..., input_attribution="integrated_gradients")`` builds one.
        page_size: concepts per page of the list.
        hierarchy: parent → children links between the concepts, a
            :class:`~interp_widgets.concepts.ConceptHierarchy` (``MatryoshkaSAE.hierarchy(X)``): the detail pane shows
            the selected concept's parent and its children as a collapsible tree, with each parent's absorption rate.
        importance_label: what the importance column means, shown beside it (default: read off ``importance``,
            ``"importance"`` for plain numbers), e.g. ``"total Sobol index for positive"``.

    The detection and fuzzing scores of the labels (:func:`~interp_widgets.concepts.score_labels`) come from
    ``interpretation.label_scores``: each scored label shows both balanced accuracies beside it (``sort_by``
    ``"detection"`` / ``"fuzzing"``; unscored concepts sort last), ``min_label_score`` keeps the concepts whose two
    scores both reach it (unscored ones are left out while it is above 0), and the detail pane adds their chance
    p-values, AUCs and sample sizes and the label's swapped-label control: the concept whose label it was judged
    under, the scores it got there and whether the true label outscored it (:func:`label_control_sentence`; the
    static picture adds the same for the selected concept). The summary line states the swapped-label control
    (``interpretation.label_control``, :meth:`label_control_text`); only when it passed is a score that
    ``score_labels`` found no better than chance followed by "(not above chance)"; when it failed the summary says the
    scorer cannot discriminate and nothing is marked.

    ``selected_concept`` (-1: none), ``selected_text``, ``selected_token``, ``page``, ``sort_by``, ``descending``,
    ``search``, ``hide_dead``, ``min_label_score`` and ``text_mode`` (``"activation"`` or ``"attribution"``) sync both ways.

    Example:
        >>> from interp_widgets.concepts import interpret_concepts, text_concepts
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> browser = ConceptBrowser(interp, texts=[text_concepts(concepts, model, tokenizer, "Not bad at all.")])
        >>> browser.sort_by = "density"; browser.visible_order()[:3]
        [3, 1, 7]
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "sort_by": {"enum": list(SORT_KEYS)},
        "details": {"map": {"object": {  # concept_detail()
            "concept": "int", "label": "str", "label_source": "str", "density": {"nullable": "num"}, "mean": {"nullable": "num"},
            "max": {"nullable": "num"}, "min": {"nullable": "num"},
            "examples": {"list": {"object": {"tokens": {"list": "str"}, "center": "int", "activation": {"nullable": "num"},
                                             "text_id": "int", "activations": {"list": "num"}}}},
            "top_texts": {"list": {"object": {"text_id": "int", "max_activation": {"nullable": "num"}, "text": "str"}}},
            "vocabulary": {"nullable": {"list": {"object": {"token": "str", "logit": {"nullable": "num"}}}}},
            "text_activations": {"nullable": ANY_ARRAY_1D}, "hist_edges": ANY_ARRAY_1D, "hist_counts": ANY_ARRAY_1D,
            "text_attribution": {"nullable": {"object": {  # _text_attribution()
                "values": ANY_ARRAY_1D, "method": "str", "signed": "bool", "score": "str",
                "activation": {"nullable": "num"}, "completeness_error": {"nullable": "num"}}}},
            "hierarchy": {"nullable": {"object": {  # _hierarchy_detail()
                "parent": {"nullable": {"object": {"concept": "int", "label": "str", "conditional": "num", "cosine": "num"}}},
                "absorption": {"nullable": "num"},
                "children": {"list": {"object": {"concept": "int", "label": "str", "depth": "int", "conditional": "num",
                                                 "cosine": "num", "absorption": {"nullable": "num"}}}}}}},
            "label_scores": {"nullable": {"object": {  # _label_score_detail()
                "scorer": "str",
                **{kind: {"object": {"balanced_accuracy": {"nullable": "num"}, "auc": {"nullable": "num"},
                                     "p_value": {"nullable": "num"}, "n_examples": "int", "n_activating": "int",
                                     "n_non_activating": "int", "n_failed": "int"},
                          "defaults": {"p_value": None}} for kind in LABEL_SCORE_KINDS},  # scored before the test
                "control": {"nullable": {"object": {  # _label_control_detail()
                    "swapped_from": "int", "swapped_label": "str",
                    **{kind: {"object": {"balanced_accuracy": {"nullable": "num"}, "p_value": {"nullable": "num"}}}
                       for kind in LABEL_SCORE_KINDS},
                    "true_score": {"nullable": "num"}, "swapped_score": {"nullable": "num"}, "outscores": "bool"}}}},
                "defaults": {"control": None}}},  # older payloads: no control in the detail pane
        }, "defaults": {"text_attribution": None, "hierarchy": None, "label_scores": None}}},  # older payloads
    }  # fmt: skip

    sort_by = traitlets.Unicode("index", help=f"One of {SORT_KEYS}.").tag(sync=True)
    descending = traitlets.Bool(False).tag(sync=True)
    search = traitlets.Unicode("", help="Keep concepts whose label or top tokens contain this (case-insensitive).").tag(
        sync=True
    )
    hide_dead = traitlets.Bool(
        True, help="Hide concepts that never fired (on by default; the list says how many are hidden)."
    ).tag(sync=True)
    min_label_score = traitlets.Float(
        0.0, help="Keep concepts whose label's detection and fuzzing scores are both at least this (0: no filter)."
    ).tag(sync=True)
    max_page_size = MAX_PAGE_SIZE
    selected_concept = traitlets.Int(-1, help="Concept shown in the detail pane (-1: none).").tag(sync=True)
    requested = traitlets.List(traitlets.Int(), help="Concept ids the browser shows (written by the front end).").tag(
        sync=True
    )
    details = traitlets.Dict(help="Detail of each requested concept, keyed by str(concept).").tag(sync=True)
    selected_text = traitlets.Int(0, help="Input text shown in the text view.").tag(sync=True)
    selected_token = traitlets.Int(
        -1, help="Token of the selected text whose active concepts are listed (-1: none)."
    ).tag(sync=True)
    text_mode = traitlets.Unicode(
        "activation",
        help="What colours the text view: the concept's 'activation' on each "
        "token, or the 'attribution' of its activation to the input tokens.",
    ).tag(sync=True)
    attribution_method = traitlets.Unicode(
        "", help="Method of the input attributions the text view can show (empty: none given)."
    ).tag(sync=True)

    def __init__(
        self,
        interpretation: ConceptSummary,
        *,
        texts: Any = None,
        importance: Any = None,
        target: int | str | None = None,
        input_attributions: Any = None,
        page_size: int = 10,
        hierarchy: Any = None,
        importance_label: str | None = None,
        **kwargs: Any,
    ) -> None:
        computing = sorted(set(kwargs) & _COMPUTE_OPTIONS)
        if computing or _looks_like_concept_model(interpretation):
            given = f" (got {', '.join(n + '=' for n in computing)})" if computing else ""
            raise TypeError(
                f"ConceptBrowser takes prepared data: a ConceptInterpretation and TextConcepts{given}. To browse a fitted "
                "concept model, interpret it first: interpret_concepts(concepts, store, model=lm, tokenizer=tok)"
                ".widget(texts=[...], concept_model=concepts, model=lm, tokenizer=tok), which runs text_concepts on string texts"
            )
        if not isinstance(interpretation, ConceptSummary):
            raise TypeError(
                f"ConceptBrowser takes a ConceptInterpretation (from interpret_concepts), got "
                f"{type(interpretation).__name__}"
            )
        source = self.interpretation = interpretation
        n = len(source.labels)
        texts = [] if texts is None else [texts] if isinstance(texts, (str, ConceptTexts)) else list(texts)
        converted = []
        for text in texts:
            if isinstance(text, str):
                raise TypeError(
                    "ConceptBrowser takes TextConcepts, not strings; pass text_concepts(concepts, lm, "
                    "tokenizer, text) results, or call interpretation.widget(texts=[...], "
                    "concept_model=concepts, model=lm, tokenizer=tok), which computes them"
                )
            if not isinstance(text, ConceptTexts):
                raise TypeError(f"texts must be TextConcepts/ConceptImportance objects, got {type(text).__name__}")
            if text.coefficients.shape[1] != n:
                raise ValueError(
                    f"a text has coefficients for {text.coefficients.shape[1]} concepts but the browser "
                    f"shows {n}; compute it with the same concept model"
                )
            converted.append(text)
        self._texts = converted
        if input_attributions is not None and not isinstance(input_attributions, ConceptInputAttributionsLike):
            raise TypeError(
                "input_attributions must be a ConceptInputAttributions (from interp_widgets.concepts), "
                f"got {type(input_attributions).__name__}"
            )
        self._attributions = input_attributions
        if hierarchy is not None:
            if not all(
                hasattr(hierarchy, name) for name in ("parent_of", "children", "conditional", "cosine", "absorption")
            ):
                raise TypeError(
                    "hierarchy must be a ConceptHierarchy (from MatryoshkaSAE.hierarchy or concept_hierarchy), got "
                    f"{type(hierarchy).__name__}"
                )
            outside = sorted({c for pair in hierarchy.parent_of.items() for c in pair if not 0 <= int(c) < n})
            if outside:
                raise ValueError(
                    f"the hierarchy names concepts outside 0..{n - 1} ({outside[:5]}); compute it with the same concept model"
                )
        self._hierarchy = hierarchy
        self._text_coefficients = [t.coefficients[~t.layout.special_mask] for t in converted]
        if importance is None:
            importance = next((t for t in converted if isinstance(t, ConceptImportanceLike)), None)
        values, meaning = self._importance(importance, target, n)
        if importance_label is not None and values is not None:
            meaning = str(importance_label)
        detection, fuzzing, scorer = self._label_score_columns(source, n)
        chance = self._label_chance_columns(source, n)
        text_tokens, text_gaps, top_ids, top_values = [], [], [], []
        for layout, coefficients in zip((t.layout for t in converted), self._text_coefficients):
            keep = ~layout.special_mask
            shown, gaps = _text_pieces(
                layout.text, [t for t, k_ in zip(layout.tokens, keep) if k_], layout.offsets[keep]
            )
            text_tokens.append(shown)
            text_gaps.append(gaps)
            order = np.argsort(-coefficients, axis=1, kind="stable")[:, :TEXT_TOP]
            chosen = np.take_along_axis(coefficients, order, 1)
            order = np.where(chosen > 0, order, -1)
            top_ids.append(np.pad(order, ((0, 0), (0, TEXT_TOP - order.shape[1])), constant_values=-1))
            top_values.append(np.pad(np.where(chosen > 0, chosen, 0.0), ((0, 0), (0, TEXT_TOP - chosen.shape[1]))))
        top_ids_all = np.concatenate(top_ids) if top_ids else np.zeros((0, TEXT_TOP), np.int32)
        top_values_all = np.concatenate(top_values) if top_values else np.zeros((0, TEXT_TOP), np.float32)
        data = ConceptBrowserData(
            method=source.method, layer=str(source.layer or ""), n_rows=int(source.params.get("rows", 0)),
            labels=list(source.labels),
            top_tokens=[_distinct_tokens([t.strip() or t for t in source.top_tokens(c)], LIST_TOKENS) for c in range(n)],
            density=source.density, max_activation=source.maximum, importance=values, importance_label=meaning,
            texts=ConceptTextsPart(text_tokens=text_tokens, text_gaps=text_gaps, text_top_concepts=top_ids_all,
                                   text_top_values=top_values_all),
            label_scores=LabelScoresPart(label_detection=detection, label_fuzzing=fuzzing, label_scorer=scorer,
                                         **chance, **self._label_control(source)),
        )  # fmt: skip
        method = str(getattr(input_attributions, "method", "")) if input_attributions is not None else ""
        super().__init__(**data.to_traits(), page_size=page_size, attribution_method=method, **kwargs)
        start = self.page * self.page_size
        self.requested = self.visible_order()[start : start + self.page_size]
        self._refresh_details()
        self.observe(self._refresh_details, names=["requested", "selected_concept", "selected_text", "text_mode"])

    @staticmethod
    def _scored_labels(source: Any) -> dict[int, dict]:
        """The cached label scores of ``source`` (``label_scores``: ``{concept: score_labels entry}``) that still judge
        the concept's current label."""
        scores = getattr(source, "label_scores", None) or {}
        labels = source.labels
        return {
            int(c): entry
            for c, entry in scores.items()
            if 0 <= int(c) < len(labels) and entry.get("label", labels[int(c)]) == labels[int(c)]
        }

    @classmethod
    def _label_score_columns(cls, source: Any, n: int) -> tuple[np.ndarray | None, np.ndarray | None, str]:
        """Each concept's detection and fuzzing balanced accuracy (NaN: not scored) and the scorers' names; None,
        None, "" when no label is scored.

        Example:
            >>> from interp_widgets.concepts import interpret_concepts, score_labels
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> _ = score_labels(interp, lambda prompts: ["[1]"] * len(prompts), concepts=[1], n_examples=4)
            >>> detection, fuzzing, scorer = ConceptBrowser._label_score_columns(interp, 8)
            >>> detection[:2].tolist(), scorer
            ([nan, 0.5], '<lambda>')
        """
        scored = cls._scored_labels(source)
        if not scored:
            return None, None, ""
        columns = {kind: np.full(n, np.nan) for kind in LABEL_SCORE_KINDS}
        for c, entry in scored.items():
            for kind in LABEL_SCORE_KINDS:
                value = (entry.get(kind) or {}).get("balanced_accuracy")
                columns[kind][c] = np.nan if value is None else float(value)
        scorers = sorted({str(entry.get("scorer", "")) for entry in scored.values()} - {""})
        return columns["detection"], columns["fuzzing"], ", ".join(scorers)

    @classmethod
    def _label_chance_columns(cls, source: Any, n: int) -> dict[str, np.ndarray | None]:
        """Each concept's chance mark per score (``label_detection_chance`` / ``label_fuzzing_chance``): 1 when
        ``score_labels`` found the score no better than chance, 0 when above it, -1 untested (not scored, or scored
        before the test existed); None when no label is scored.

        Example:
            >>> from interp_widgets.concepts import interpret_concepts, score_labels
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> _ = score_labels(interp, lambda prompts: ["[1]"] * len(prompts), concepts=[1], n_examples=4)
            >>> ConceptBrowser._label_chance_columns(interp, 8)["label_detection_chance"][:3].tolist()
            [-1, 1, -1]
        """
        scored = cls._scored_labels(source)
        if not scored:
            return {f"label_{kind}_chance": None for kind in LABEL_SCORE_KINDS}
        columns = {kind: np.full(n, -1, dtype=np.int8) for kind in LABEL_SCORE_KINDS}
        for c, entry in scored.items():
            for kind in LABEL_SCORE_KINDS:
                above = (entry.get(kind) or {}).get("above_chance")
                if above is not None:
                    columns[kind][c] = 0 if above else 1
        return {f"label_{kind}_chance": columns[kind] for kind in LABEL_SCORE_KINDS}

    @staticmethod
    def _label_control(source: Any) -> dict[str, Any]:
        """The swapped-label control's outcome (``interpretation.label_control``) as view data; no control: 0
        concepts."""
        control = getattr(source, "label_control", None)
        if not control:
            return {}
        return {
            "label_control_n": int(control["n"]), "label_control_wins": int(control["wins"]),
            "label_control_ties": int(control.get("ties", 0)),
            "label_control_threshold": float(control.get("threshold", 0.7)),
            "label_discriminates": bool(control["discriminates"]),
        }  # fmt: skip

    def label_control_text(self) -> str:
        """The control's outcome as the summary line says it ("" when no label is scored); the live view writes the
        same words (``controlText`` in ``js/src/views/concept_browser/draw.js``).

        Example:
            >>> from interp_widgets.concepts import interpret_concepts
            >>> ConceptBrowser(interpret_concepts(concepts, store, progress=False)).label_control_text()
            ''
        """
        if self.label_detection is None:
            return ""
        if self.label_control_n == 0:
            return "no swapped-label control was run, so no score is marked as chance"
        n, wins = self.label_control_n, self.label_control_wins
        told = (
            f"control: the true label outscores a swapped one in {wins} of {n} concepts "
            f"({_percent(wins / n)} %, {self.label_control_ties} tied; ≥ {_percent(self.label_control_threshold)} % needed)"
        )
        if self.label_discriminates:
            return told + ": the scorer discriminates; scores no better than chance are marked"
        return told + ": the scorer cannot discriminate, so no score is marked as chance"

    def _chance_mark(self, kind: str, c: int) -> str:
        """ " (not above chance)" after a score found no better than chance, when the control passed; else ""."""
        marks = self._column(f"label_{kind}_chance") if self.label_discriminates else None
        return " (not above chance)" if marks is not None and marks[c] == 1 else ""

    def _label_score_detail(self, concept: int, label: str) -> dict[str, Any] | None:
        """The scores of ``concept``'s label (both kinds: balanced accuracy, its chance p-value, AUC, sample sizes),
        their scorer and the label's swapped-label control (:meth:`_label_control_detail`), or None when the label
        shown is not the one scored."""
        entry = self._scored_labels(self.interpretation).get(concept)
        if entry is None or entry.get("label", label) != label:
            return None
        out: dict[str, Any] = {"scorer": str(entry.get("scorer", ""))}
        for kind in LABEL_SCORE_KINDS:
            score = entry.get(kind) or {}
            out[kind] = {
                "balanced_accuracy": _number(score.get("balanced_accuracy")), "auc": _number(score.get("auc")),
                "p_value": _number(score.get("p_value")),  # None: scored before the chance test existed
                **{name: int(score.get(name, 0)) for name in ("n_examples", "n_activating", "n_non_activating", "n_failed")},
            }  # fmt: skip
        out["control"] = self._label_control_detail(concept, label)
        return out

    def _label_control_detail(self, concept: int, label: str) -> dict[str, Any] | None:
        """The swapped-label control of ``concept`` (``interpretation.label_control["concepts"][concept]``): the
        concept whose label its examples were judged under again, that label, the scores it got there (balanced
        accuracy and chance p-value of both kinds), the mean of the two balanced accuracies under the true and the
        swapped label and whether the true one outscored the swapped one; None when no control judged the label
        shown.

        Example:
            >>> from interp_widgets.concepts import interpret_concepts, score_labels
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> _ = score_labels(interp, lambda prompts: ["[1]"] * len(prompts), concepts=[0, 1], n_examples=4)
            >>> control = ConceptBrowser(interp).concept_detail(0)["label_scores"]["control"]
            >>> control["swapped_from"], control["outscores"]  # a scorer that says yes to everything ties
            (1, False)
        """
        control = getattr(self.interpretation, "label_control", None) or {}
        entries = {int(c): e for c, e in dict(control.get("concepts") or {}).items()}
        entry = entries.get(concept)
        if entry is None or entry.get("label", label) != label or "swapped_from" not in entry:
            return None
        return {
            "swapped_from": int(entry["swapped_from"]), "swapped_label": str(entry.get("swapped_label", "")),
            **{kind: {"balanced_accuracy": _number((entry.get(kind) or {}).get("balanced_accuracy")),
                      "p_value": _number((entry.get(kind) or {}).get("p_value"))} for kind in LABEL_SCORE_KINDS},
            "true_score": _number(entry.get("true_score")), "swapped_score": _number(entry.get("swapped_score")),
            "outscores": bool(entry.get("outscores", False)),
        }  # fmt: skip

    @staticmethod
    def _importance(importance, target, n: int) -> tuple[np.ndarray | None, str]:
        if importance is None:
            return None, ""
        if isinstance(importance, ConceptImportanceLike):
            return importance.per_concept(target), f"contribution to {importance.target_label(target)}"
        if hasattr(importance, "columns") and {"concept", "mean_contribution"} <= set(importance.columns):
            values = np.full(n, np.nan)
            concepts = importance["concept"].to_numpy(dtype=np.int64)
            if concepts.size and (concepts.min() < 0 or concepts.max() >= n):
                raise ValueError(f"the importance table names concepts outside 0..{n - 1}; use the same concept model")
            values[concepts] = importance["mean_contribution"].to_numpy(dtype=np.float64)
            return values, "mean contribution"
        values = np.asarray(importance, dtype=np.float64).reshape(-1)
        if values.shape != (n,):
            raise ValueError(
                f"importance needs one number per concept ({n}), got {values.size}; or pass a "
                "ConceptImportance / mean_concept_importance table"
            )
        return values, "importance"

    # ----------------------------------------------------------------- validation
    @traitlets.validate("sort_by")
    def _check_sort(self, proposal):
        value = proposal["value"]
        check_choice("sort_by", value, SORT_KEYS)
        if value in ("importance", "abs_importance") and self.importance is None:
            raise ValueError(
                "sorting by importance needs importance=; pass a ConceptImportance or one value per concept"
            )
        if value in LABEL_SCORE_KINDS and self.label_detection is None:
            raise ValueError(
                f"sorting by {value} needs scored labels; score them first with "
                "interp_widgets.concepts.score_labels(interpretation, scorer) and build the browser again"
            )
        return value

    @traitlets.validate("min_label_score")
    def _check_min_label_score(self, proposal):
        value = float(proposal["value"])
        if not 0.0 <= value <= 1.0:
            raise ValueError(
                f"min_label_score is a balanced accuracy in [0, 1] (chance 0.5; 0: no filter), got {value}"
            )
        if value > 0 and self.label_detection is None:
            raise ValueError(
                "filtering by label score needs scored labels; score them first with "
                "interp_widgets.concepts.score_labels(interpretation, scorer) and build the browser again"
            )
        return value

    @traitlets.validate("selected_concept")
    def _check_selected(self, proposal):
        n = len(self.labels)
        if not -1 <= proposal["value"] < n:
            raise ValueError(f"selected_concept {proposal['value']} is out of range; use -1 or 0..{n - 1}")
        return proposal["value"]

    @traitlets.validate("selected_text")
    def _check_text(self, proposal):
        if proposal["value"] != 0 and not 0 <= proposal["value"] < len(self.text_tokens):
            raise ValueError(
                f"selected_text {proposal['value']} is out of range; there are {len(self.text_tokens)} texts"
            )
        return proposal["value"]

    @traitlets.validate("text_mode")
    def _check_text_mode(self, proposal):
        value = check_choice("text_mode", proposal["value"], TEXT_MODES)
        if value == "attribution" and getattr(self, "_attributions", None) is None:
            raise ValueError(
                "text_mode='attribution' needs input attributions; pass input_attributions= "
                "(a ConceptInputAttributions) or interpretation.widget(..., input_attribution='occlusion')"
            )
        return value

    @traitlets.validate("requested")
    def _check_requested(self, proposal):
        n = len(self.labels)
        ids = [int(c) for c in proposal["value"] if 0 <= int(c) < n]
        return ids[:MAX_PAGE_SIZE]

    # ----------------------------------------------------------------- state
    @property
    def n_concepts(self) -> int:
        """Number of concepts."""
        return len(self.labels)

    def _column(self, name: str) -> np.ndarray:
        payload = getattr(self, name)
        return np.full(self.n_concepts, np.nan) if payload is None else payload.astype(np.float64)

    def visible_order(self) -> list[int]:
        """Concept ids after search, dead filter, label-score filter and sort, as the browser lists them (ties keep id order; unknown
        values last). Values are compared as the float32 numbers the browser holds.

        Example:
            >>> from interp_widgets.concepts import interpret_concepts
            >>> browser = ConceptBrowser(interpret_concepts(concepts, store, progress=False))
            >>> browser.labels[2]
            'and / great / no'
            >>> browser.search = "great"; browser.visible_order()  # labels and top tokens are searched
            [2]
        """
        density = self._column("density")
        needle = self.search.lower()
        least = self.min_label_score
        scores = np.minimum(self._column("label_detection"), self._column("label_fuzzing")) if least > 0 else None
        keep = [
            c
            for c in range(self.n_concepts)
            if (not self.hide_dead or density[c] > 0)
            and (not needle or needle in self.labels[c].lower() or any(needle in t.lower() for t in self.top_tokens[c]))
            and (scores is None or scores[c] >= least)  # an unscored label is NaN: left out
        ]
        if self.sort_by == "index":
            key = np.arange(self.n_concepts, dtype=np.float64)
        elif self.sort_by == "label":
            ranks = {label: r for r, label in enumerate(sorted(set(self.labels)))}
            key = np.array([ranks[label] for label in self.labels], dtype=np.float64)
        else:
            column = {"density": "density", "max": "max_activation", "detection": "label_detection",
                      "fuzzing": "label_fuzzing"}.get(self.sort_by, "importance")  # fmt: skip
            key = self._column(column)
            key = np.abs(key) if self.sort_by == "abs_importance" else key
        sign = -1.0 if self.descending else 1.0
        return sorted(keep, key=lambda c: (math.isnan(key[c]), sign * key[c] if not math.isnan(key[c]) else 0.0, c))

    def concept_detail(self, concept: int, *, compute_attribution: bool | None = None,
                       lazy_label: bool = True) -> dict[str, Any]:  # fmt: skip
        """The payload the browser gets for one concept: stats, top contexts, top texts, histogram buffers,
        vocabulary, the concept's activation on each token of the selected text and, in the ``"attribution"`` text
        mode, the attribution of its activation to those tokens (``text_attribution``; ``None`` until computed).

        The attribution is computed (by the concepts side, through ``input_attributions``) for the selected
        concept only; ``compute_attribution`` overrides that rule (``False``: only what is already cached).

        Example:
            >>> from interp_widgets.concepts import interpret_concepts
            >>> browser = ConceptBrowser(interpret_concepts(concepts, store, progress=False))
            >>> top = browser.concept_detail(3)["examples"][0]  # the context that activates concept 3 most
            >>> top["tokens"][top["center"]], top["center"], len(top["tokens"])
            ('felt ', 3, 9)

        ``lazy_label=False`` takes the concept's current label instead of asking a lazy labeller for one (the saved
        output preloads many concepts and must not run a labelling model for each).
        """
        interp = self.interpretation
        if not -self.n_concepts <= int(concept) < self.n_concepts:
            raise ValueError(
                f"concept {concept} out of range; there are {self.n_concepts} concepts (0..{self.n_concepts - 1})"
            )
        c = int(concept) % self.n_concepts
        ensure_label = getattr(interp, "ensure_label", None)  # a lazy labeller labels a concept when first viewed
        label = ensure_label(c) if ensure_label is not None and lazy_label else interp.labels[c]
        examples = [{
            "tokens": list(e["context"]), "center": int(e["center"]), "activation": _finite(e["activation"]),
            "text_id": int(e["text_id"]), "activations": [_finite(v) or 0.0 for v in e["context_activations"]],
        } for e in interp.examples[c]]  # fmt: skip
        keep = interp.top_texts[c] >= 0
        top_texts = []
        for text_id, value in zip(interp.top_texts[c][keep], interp.top_text_values[c][keep]):
            text = interp.texts[str(int(text_id))]
            cut = text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "\u2026"
            top_texts.append({"text_id": int(text_id), "max_activation": _finite(value), "text": cut})
        vocabulary = None
        if interp.vocab_tokens is not None:
            vocabulary = [
                {"token": t, "logit": _finite(v)} for t, v in zip(interp.vocab_tokens[c], interp.vocab_logits[c])
            ]
        text_activations = None
        if self._text_coefficients:
            text_activations = array_to_buffer(self._text_coefficients[self.selected_text][:, c])
        text_attribution = None
        if self._attributions is not None and self._texts and self.text_mode == "attribution":
            compute = c == self.selected_concept if compute_attribution is None else bool(compute_attribution)
            text_attribution = self._text_attribution(c, compute)
        return {
            "concept": c, "label": label, "label_source": str(getattr(interp, "label_source", "")), "density": _finite(interp.density[c]), "mean": _finite(interp.mean[c]),
            "max": _finite(interp.maximum[c]), "min": _finite(interp.minimum[c]), "examples": examples,
            "top_texts": top_texts, "vocabulary": vocabulary, "text_activations": text_activations,
            "text_attribution": text_attribution,
            "hist_edges": array_to_buffer(interp.hist_edges[c]), "hist_counts": array_to_buffer(interp.hist_counts[c]),
            "hierarchy": self._hierarchy_detail(c), "label_scores": self._label_score_detail(c, label),
        }  # fmt: skip

    def _hierarchy_detail(self, concept: int) -> dict[str, Any] | None:
        """The selected concept's parent and its subtree (children in pre-order with their depth), or None.

        Example:
            >>> from interp_widgets.concepts import concept_hierarchy, interpret_concepts
            >>> codes = np.array([[1, 1, 0], [1, 0, 1], [0, 0, 0]], dtype=np.float32)
            >>> tree = concept_hierarchy(codes, [[1, 0], [0.8, 0.6], [0.6, 0.8]], [0, 1, 1])
            >>> browser = ConceptBrowser(interpret_concepts(concepts, store, progress=False), hierarchy=tree)
            >>> [(c["concept"], c["depth"]) for c in browser.concept_detail(0)["hierarchy"]["children"]]
            [(1, 1), (2, 1)]
            >>> browser.concept_detail(2)["hierarchy"]["parent"]["concept"], browser.concept_detail(5)["hierarchy"]
            (0, None)
        """
        tree = self._hierarchy
        if tree is None or (concept not in tree.parent_of and concept not in tree.children):
            return None
        labels = self.interpretation.labels
        parent = tree.parent_of.get(concept)
        children: list[dict[str, Any]] = []

        def walk(node: int, depth: int) -> None:
            for child in tree.children.get(node, []):
                children.append({
                    "concept": int(child), "label": str(labels[child]), "depth": depth,
                    "conditional": float(tree.conditional[child]), "cosine": float(tree.cosine[child]),
                    "absorption": _finite(tree.absorption[child]) if child in tree.absorption else None,
                })  # fmt: skip
                walk(child, depth + 1)

        walk(concept, 1)
        return {
            "parent": None if parent is None else {
                "concept": int(parent), "label": str(labels[parent]),
                "conditional": float(tree.conditional[concept]), "cosine": float(tree.cosine[concept]),
            },
            "absorption": _finite(tree.absorption[concept]) if concept in tree.absorption else None,
            "children": children,
        }  # fmt: skip

    def _text_attribution(self, concept: int, compute: bool) -> dict[str, Any] | None:
        """The attribution of ``concept``'s activation to the shown tokens of the selected text, or None."""
        if self._column("density")[concept] == 0:
            return None  # a dead concept never fires: nothing to attribute
        text = self._texts[self.selected_text]
        result = self._attributions.scores(text.layout.text, concept, compute=compute)
        if result is None:
            return None
        scores = np.asarray(result.scores, dtype=np.float64)
        if scores.ndim == 2:
            if scores.shape[0] != 1:
                raise ValueError(f"an input attribution of one concept has one row of scores, got {scores.shape[0]}")
            scores = scores[0]
        special = scored_layout(result).special_mask
        shown = scores[~special] if len(special) == len(scores) else scores
        n = len(self.text_tokens[self.selected_text])
        if len(shown) != n:
            raise ValueError(
                f"the input attribution of concept {concept} has {len(shown)} tokens but the text view "
                f"shows {n}; compute it at token granularity with the tokenizer of the concept model"
            )
        params = dict(getattr(result, "params", None) or {})
        activation = params.get("concept_activation")
        error = getattr(result, "completeness_error", None)
        return {
            "values": array_to_buffer(np.nan_to_num(shown)),
            "method": str(getattr(result, "method", "")),
            "signed": bool(getattr(result, "signed", True)),
            "score": str(params.get("concept_score", "")),
            "activation": _finite(activation[0]) if activation else None,
            "completeness_error": _finite(np.asarray(error, dtype=np.float64).reshape(-1)[0])
            if error is not None
            else None,
        }

    def _refresh_details(self, change=None) -> None:
        wanted = list(dict.fromkeys(self.requested + ([self.selected_concept] if self.selected_concept >= 0 else [])))
        self.details = {str(c): self.concept_detail(c) for c in wanted}

    # ----------------------------------------------------------------- display
    def static_svg(self) -> str:
        """The first concepts in list order with their statistics and top tokens coloured by activation, then, when
        the selected concept's label is scored, the detail pane's label scores (p-values and control included).

        Example:
            >>> from interp_widgets.concepts import interpret_concepts
            >>> svg = ConceptBrowser(interpret_concepts(concepts, store, progress=False)).static_svg()
            >>> svg.startswith("<svg"), 'aria-label="8 NMFConcepts concepts"' in svg
            (True, True)
        """
        order = self.visible_order()
        density, maximum, importance = (
            self._column("density"),
            self._column("max_activation"),
            self._column("importance"),
        )
        detection, fuzzing = self._column("label_detection"), self._column("label_fuzzing")
        figure = SvgFigure(label=f"{self.n_concepts} {self.method} concepts")
        n_dead = int((density == 0).sum())
        where = f" at {self.layer}" if self.layer else ""
        figure.text(f"{self.n_concepts} {self.method} concepts{where} · {len(order)} listed · sorted by {self.sort_by}"
                    + (" (descending)" if self.descending else "") + (f" · search {self.search!r}" if self.search else "")
                    + (f" · {n_dead} never fired" + (" (hidden)" if self.hide_dead else "") if n_dead else "")
                    + (f" · labels scored by {self.label_scorer} (balanced accuracy, chance 0.5) · {self.label_control_text()}"
                       if self.label_detection is not None else "")
                    + (f" · label scores ≥ {format_score(self.min_label_score)}" if self.min_label_score > 0 else ""),
                    bold=True)  # fmt: skip
        interp = self.interpretation
        for c in order[:STATIC_CONCEPTS]:
            parts = [
                f"#{c} {self.labels[c] or ('(never fired)' if density[c] == 0 else '')}",
                f"density {format_score(density[c])}",
                f"max {format_score(maximum[c])}",
            ]
            if self.importance is not None and not math.isnan(importance[c]):
                parts.append(f"{self.importance_label} {format_score(importance[c], sign=True)}")
            if self.label_detection is not None and not math.isnan(detection[c]):  # beside the label
                parts.insert(1, f"label detection {format_score(detection[c])}{self._chance_mark('detection', c)}"
                                f" · fuzzing {format_score(fuzzing[c])}{self._chance_mark('fuzzing', c)}")  # fmt: skip
            if density[c] == 0:
                parts.append("DEAD")
            figure.text(" · ".join(parts), size=12)
            pieces = []
            for example in interp.examples[c][:8]:
                background, colour = score_colours(example["activation"], maximum[c], signed=False)
                pieces.append(
                    TokenPiece(
                        " " if pieces else "",
                        example["token"].strip() or example["token"],
                        background,
                        colour,
                        f"activation {format_score(example['activation'])}",
                    )
                )
            if pieces:
                figure.tokens(pieces)
        if len(order) > STATIC_CONCEPTS:
            figure.text(f"… {len(order) - STATIC_CONCEPTS} more concepts in the live widget", size=11, colour="#57606a")
        self._static_label_scores(figure)
        figure.legend(1.0, signed=False, title="top-token activation (each concept scaled to its own max = 1)")
        return figure.render()

    def _static_label_scores(self, figure: SvgFigure) -> None:
        """The detail pane's label scores of the selected concept, as lines of the static picture: each score's
        balanced accuracy, chance p-value, AUC and examples, then the concept's swapped-label control."""
        c = self.selected_concept
        detail = self._label_score_detail(c, self.interpretation.labels[c]) if c >= 0 else None
        if detail is None:
            return
        figure.text(f"label scores of #{c} {self.interpretation.labels[c]} (scorer {detail['scorer'] or 'unknown'}; "
                    "chance is 0.5)", size=12, bold=True)  # fmt: skip
        for kind in LABEL_SCORE_KINDS:
            score = detail[kind]
            unreadable = f" ({score['n_failed']} unreadable)" if score["n_failed"] else ""
            figure.text(
                f"{kind}: balanced accuracy {format_score(_nan(score['balanced_accuracy']))} · "
                f"{_p_text(score['p_value'])} · AUC {format_score(_nan(score['auc']))} · firing + not firing "
                f"{score['n_activating']} + {score['n_non_activating']}{unreadable}",
                size=12,
            )
        if detail["control"] is not None:
            figure.text(label_control_sentence(detail["control"]), size=12)

    def to_html(self, title: str | None = None, preload: int = PRELOAD_CONCEPTS) -> str:
        """One offline HTML page of the browser. No kernel answers there, so the page carries the details of the
        first ``preload`` concepts in list order (plus the ones already loaded); any other concept says it needs a
        kernel.

        Example:
            >>> from interp_widgets.concepts import interpret_concepts
            >>> browser = ConceptBrowser(interpret_concepts(concepts, store, progress=False))
            >>> page = browser.to_html(title="Concepts at layer 1", preload=5)
            >>> page.startswith("<!DOCTYPE html>"), "<title>Concepts at layer 1</title>" in page
            (True, True)
        """
        preload = check_int("preload", preload, minimum=0, hint="it counts concepts")
        self._preload = self.visible_order()[:preload]
        try:
            return super().to_html(title=title)
        finally:
            self._preload = []

    def _payload_state(self, names: list[str]) -> dict[str, Any]:
        """The saved output's view state: the details already loaded, then those of further concepts in list order
        (up to :data:`PRELOAD_CONCEPTS` concepts and :data:`PAYLOAD_DETAIL_BYTES` of JSON), since no kernel answers
        a reopened notebook."""
        state = super()._payload_state(names)
        details, size = dict(state.get("details", {})), len(compact_json(json_value(state.get("details", {}))))
        for c in self.visible_order()[:PRELOAD_CONCEPTS]:
            if str(c) in details:
                continue
            detail = self.concept_detail(c, compute_attribution=False, lazy_label=False)
            size += len(compact_json(json_value(detail))) + 8
            if size > PAYLOAD_DETAIL_BYTES:
                break
            details[str(c)] = detail
        state["details"] = details
        return state

    def get_state(self, key=None, drop_defaults=False):
        """Synced state; while :meth:`to_html` runs, ``details`` also holds the preloaded concepts."""
        state = super().get_state(key=key, drop_defaults=drop_defaults)
        if getattr(self, "_preload", None) and "details" in state:  # preloaded concepts carry cached attributions only
            preloaded = {
                str(c): self.concept_detail(c, compute_attribution=False, lazy_label=False) for c in self._preload
            }
            state["details"] = {**preloaded, **state["details"]}
        return state

    def __repr__(self) -> str:
        dead = int((self._column("density") == 0).sum())
        return (
            f"ConceptBrowser({self.n_concepts} {self.method} concepts at {self.layer!r}, {dead} dead, "
            f"{len(self.text_tokens)} texts, selected_concept={self.selected_concept})"
        )
