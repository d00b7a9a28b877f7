"""What each concept responds to: top activating tokens with context, top texts, histograms, labels, vocabulary.

:func:`interpret_concepts` streams an :class:`~interp_widgets.concepts.ActivationStore` through a fitted concept
model twice (top-k and ranges, then histograms) and returns a :class:`ConceptInterpretation`. Labels are built from
the top tokens; a labelling function (for example one that asks an LLM) can replace them through
:meth:`ConceptInterpretation.relabel`; :mod:`interp_widgets.concepts.labels` ships a local-LM labeller. :func:`vocabulary_projection` reads the tokens
each concept direction promotes through the model's output embedding, where the model has one.

Example:
    >>> interp = interpret_concepts(concepts, store, progress=False)  # the namespace's 8 NMF concepts
    >>> interp
    ConceptInterpretation(8 NMFConcepts concepts at 'layer:1', labels from top tokens)
    >>> interp.to_dataframe()[["concept", "label", "density"]].round(3).head(3)
       concept               label  density
    0        0    it / , / sitting    0.943
    1        1  overnight / an / .    0.899
    2        2    and / great / no    0.919
    >>> interp.examples_dataframe(3)[["rank", "token", "right"]].head(3)  # concept 3's strongest tokens in context
       rank  token                         right
    0     0   felt            the three-hour run
    1     1  which  is rare in this neighborhood
    2     2      a     terrific chase scene, but
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from interp_widgets._flat import group_flat, install_flat_properties
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.concepts.decompositions import ConceptModel
from interp_widgets.validation import check_int

_FORMAT = "interp_widgets.ConceptInterpretation"
#: Values in one block of coefficients or logits (about 64 MB of float32): interpretation never holds more at once,
#: whatever the number of concepts or the vocabulary size.
_BLOCK_VALUES = 1 << 24
Labeler = Callable[[int, list[dict]], str]


@dataclass
class InterpretationRun:
    """What an interpretation was made of: the concept model's class (``method``), the store's ``layer`` and the
    scan's ``params`` (``k``, ``window``, ``bins``, the number of ``rows`` scanned and their ``unit``).

    Example:
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> interp.run.method, interp.run.layer, interp.run.params["rows"]
        ('NMFConcepts', 'layer:1', 775)
    """

    method: str
    layer: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConceptLabels:
    """One label per concept and where they came from (``source``: ``"top tokens"``, a labeller's name …). A lazy
    labeller (:meth:`ConceptInterpretation.relabel` with ``lazy=True``) is kept as ``labeler`` with the concepts it
    has not been asked about yet (``pending``); neither is saved. ``scores`` caches each label's detection and fuzzing
    scores (:func:`~interp_widgets.concepts.score_labels`) by concept; it is saved, and an entry whose ``label`` is no
    longer the concept's label is dropped. ``control`` holds the swapped-label control of those scores (``None``:
    none run); it is saved too, and dropped when any label it judged changes (a relabel drops it).

    Example:
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> interp.labelling.labels[:2], interp.labelling.source, interp.labelling.pending
        (['it / , / sitting', 'overnight / an / .'], 'top tokens', frozenset())
    """

    labels: list[str]
    source: str = "top tokens"
    labeler: Labeler | None = None
    pending: frozenset[int] = frozenset()
    scores: dict[int, dict] = field(default_factory=dict)
    control: dict | None = None

    def __post_init__(self):
        self.labels = list(self.labels)
        self.pending = frozenset(int(c) for c in self.pending)
        # label scores (label_scores.score_labels) hold for the label they judged: a changed label drops them
        scores = {int(c): entry for c, entry in dict(self.scores or {}).items()}
        self.scores = {
            c: entry
            for c, entry in scores.items()
            if 0 <= c < len(self.labels) and entry.get("label") == self.labels[c]
        }
        self.control = _current_control(self.control, self.labels)

    def __len__(self) -> int:
        return len(self.labels)


def _current_control(control: dict | None, labels: list[str]) -> dict | None:
    """``control`` with its concept keys as ints (a saved file's JSON has strings), or None when it is absent or any
    label it judged (a concept's own or the one swapped onto it) is no longer that concept's label."""
    if not control:
        return None
    concepts = {int(c): entry for c, entry in dict(control.get("concepts") or {}).items()}

    def holds(c: int, entry: dict) -> bool:
        d = int(entry.get("swapped_from", -1))
        return (0 <= c < len(labels) and 0 <= d < len(labels) and entry.get("label") == labels[c]
                and entry.get("swapped_label") == labels[d])  # fmt: skip

    if not concepts or not all(holds(c, entry) for c, entry in concepts.items()):
        return None
    return {**control, "concepts": concepts}


@dataclass
class ActivationStats:
    """Each concept's coefficients over the scanned rows: the fraction of rows where it is active (``density``,
    ``|c| > 0``), its ``mean``, ``maximum`` and ``minimum``, and a histogram of its active values (``hist_counts[c]``
    over the bin edges ``hist_edges[c]``).

    Example:
        >>> stats = interpret_concepts(concepts, store, progress=False).stats
        >>> stats.density.shape, stats.hist_counts.shape, stats.hist_edges.shape  # concepts; concepts × bins (+ 1)
        ((8,), (8, 30), (8, 31))
    """

    density: np.ndarray
    mean: np.ndarray
    maximum: np.ndarray
    minimum: np.ndarray
    hist_counts: np.ndarray
    hist_edges: np.ndarray

    def __post_init__(self):
        for name in ("density", "mean", "maximum", "minimum", "hist_edges"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        self.hist_counts = np.asarray(self.hist_counts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.density)


@dataclass
class TopExamples:
    """The strongest rows of each concept: ``rows[c]`` / ``values[c]`` are the store rows with the highest coefficient
    of concept ``c`` (``-1`` / NaN pad when there are fewer), and ``examples[c]`` one dict per row with its token, the
    tokens of a context window around it and the concept's coefficient on each.

    Example:
        >>> top = interpret_concepts(concepts, store, progress=False).top_examples
        >>> top.rows.shape, top.examples[0][0]["token"]
        ((8, 10), ',')
    """

    rows: np.ndarray
    values: np.ndarray
    examples: list[list[dict]]

    def __post_init__(self):
        self.rows = np.asarray(self.rows, dtype=np.int64)
        self.values = np.asarray(self.values, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class TopTexts:
    """The texts where each concept is strongest: ``ids[c]`` / ``values[c]`` are the text ids and their largest
    coefficient of concept ``c`` (``-1`` / NaN pad), and ``texts`` maps each text id used (as a string) to its text.

    Example:
        >>> maxima = interpret_concepts(concepts, store, progress=False).text_maxima
        >>> maxima.ids[0, :3].tolist(), maxima.texts["20"][:20]
        ([20, 21, 5], 'A bit of street nois')
    """

    ids: np.ndarray
    values: np.ndarray
    texts: dict[str, str]

    def __post_init__(self):
        self.ids = np.asarray(self.ids, dtype=np.int64)
        self.values = np.asarray(self.values, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class VocabularyProjection:
    """The tokens each concept direction promotes through the model's output embedding (``tokens[c]``, strongest
    first) and their logits (``logits``: concepts × top), from :func:`vocabulary_projection`.

    Example:
        >>> from interp_widgets.concepts import PCAConcepts, collect_activations
        >>> lm_store = collect_activations(lm, lm_tokenizer, texts[:10], layer=1, progress=False)
        >>> projection = VocabularyProjection(*vocabulary_projection(PCAConcepts(4).fit(lm_store), lm, lm_tokenizer,
        ...                                                           top=3))
        >>> projection.tokens[1], projection.logits.shape
        (['ur', ' I', '`'], (4, 3))
    """

    tokens: list[list[str]]
    logits: np.ndarray

    def __post_init__(self):
        self.tokens = [list(row) for row in self.tokens]
        self.logits = np.asarray(self.logits, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.tokens)


#: Each flat attribute of a :class:`ConceptInterpretation` (the names of 0.1's fields, and of its saved files) as
#: ``(part, attribute of the part)``: ``interp.density`` is ``interp.stats.density``. The one table behind the
#: read-only properties, :meth:`ConceptInterpretation.from_flat`, :meth:`ConceptInterpretation.replace` and the
#: saved files.
FLAT_ATTRIBUTES: dict[str, tuple[str, str]] = {
    "method": ("run", "method"), "layer": ("run", "layer"),
    "labels": ("labelling", "labels"),
    **{name: ("stats", name) for name in ("density", "mean", "maximum", "minimum")},
    "top_rows": ("top_examples", "rows"), "top_values": ("top_examples", "values"),
    "examples": ("top_examples", "examples"),
    "top_texts": ("text_maxima", "ids"), "top_text_values": ("text_maxima", "values"),
    "texts": ("text_maxima", "texts"),
    "hist_counts": ("stats", "hist_counts"), "hist_edges": ("stats", "hist_edges"),
    "vocab_tokens": ("vocabulary", "tokens"), "vocab_logits": ("vocabulary", "logits"),
    "label_source": ("labelling", "source"),
    "label_scores": ("labelling", "scores"),
    "label_control": ("labelling", "control"),
    "params": ("run", "params"),
}  # fmt: skip
#: Flat values a :class:`ConceptInterpretation` can be built without (their defaults: none, "top tokens", {}, no control).
_OPTIONAL = ("vocab_tokens", "vocab_logits", "label_source", "label_scores", "label_control", "params")
_PART_TYPES = {"run": InterpretationRun, "labelling": ConceptLabels, "stats": ActivationStats,
               "top_examples": TopExamples, "text_maxima": TopTexts, "vocabulary": VocabularyProjection}  # fmt: skip


@dataclass
class ConceptInterpretation:
    """Per-concept summaries: statistics, top examples with context, top texts, histogram, label, vocabulary.

    An interpretation is made of a few parts, each indexed by concept: the ``run`` (:class:`InterpretationRun`:
    concept model class, layer, scan parameters), the ``labelling`` (:class:`ConceptLabels`: labels and their
    source), the ``stats`` (:class:`ActivationStats`: density, mean, maximum, minimum and histogram of each
    concept's coefficients), the ``top_examples`` (:class:`TopExamples`: the strongest rows with their context),
    the ``text_maxima`` (:class:`TopTexts`: the texts where each concept is strongest) and an optional
    ``vocabulary`` (:class:`VocabularyProjection`: promoted tokens and logits). The parts' values read as flat
    attributes too (``labels``, ``density``, ``top_rows``, ``examples``, ``vocab_tokens`` …); see
    :data:`FLAT_ATTRIBUTES`.

    ``top_rows[c]`` / ``top_values[c]`` are the store rows with the highest coefficient of concept ``c`` (``-1`` /
    NaN pad when there are fewer rows); ``examples[c]`` holds, for each of them, the tokens of a context window
    (each running to the next token's start, so joined they give the text; tokens without a text span, such as
    special tokens, keep their own string) and that concept's coefficient on each token. ``hist_counts[c]`` counts
    the rows where the concept is active (``|c| > 0``) over ``hist_edges[c]``; ``density[c]`` is the fraction of
    rows where it is active.

    Example:
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> interp.labels[:3]
        ['it / , / sitting', 'overnight / an / .', 'and / great / no']
        >>> interp.top_rows.shape, interp.top_values.shape  # concepts × k
        ((8, 10), (8, 10))
        >>> example = interp.examples[0][0]  # the strongest row of concept 0
        >>> example["token"], example["row"], example["text_id"], round(example["activation"], 3)
        (',', 354, 20, 0.068)
        >>> "".join(example["context"]), example["context"][example["center"]]
        ('bathroom, but friendly staff, a fantastic breakfast and an', ', ')
    """

    run: InterpretationRun
    labelling: ConceptLabels
    stats: ActivationStats
    top_examples: TopExamples
    text_maxima: TopTexts
    vocabulary: VocabularyProjection | None = None

    def __post_init__(self):
        n = len(self.labelling)
        for name in ("stats", "top_examples", "text_maxima", "vocabulary"):
            part = getattr(self, name)
            if part is not None and len(part) != n:
                raise ValueError(
                    f"{name} covers {len(part)} concepts but there are {n} labels; every part has one entry per concept"
                )

    @classmethod
    def from_flat(cls, **values: Any) -> "ConceptInterpretation":
        """An interpretation from flat values, by the names of :data:`FLAT_ATTRIBUTES` (0.1's constructor
        keywords, and what a saved file holds); ``vocab_tokens``, ``vocab_logits``, ``label_source``, ``label_scores``, ``label_control`` and ``params``
        may be left out.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> flat = {name: getattr(interp, name) for name in FLAT_ATTRIBUTES}
            >>> ConceptInterpretation.from_flat(**flat)
            ConceptInterpretation(8 NMFConcepts concepts at 'layer:1', labels from top tokens)
            >>> ConceptInterpretation.from_flat(method="NMFConcepts")
            Traceback (most recent call last):
                ...
            TypeError: missing concept interpretation values ['density', 'examples', ...]; ...
        """
        grouped = group_flat(FLAT_ATTRIBUTES, values, what="concept interpretation")
        missing = sorted(set(FLAT_ATTRIBUTES) - set(_OPTIONAL) - set(values))
        if missing:
            raise TypeError(
                f"missing concept interpretation values {missing}; give every name of FLAT_ATTRIBUTES but "
                f"{', '.join(_OPTIONAL)}"
            )
        grouped = {part: {k: v for k, v in found.items() if v is not None} for part, found in grouped.items()}
        vocabulary = grouped.pop("vocabulary", None) or None
        if vocabulary is not None and len(vocabulary) != 2:
            raise ValueError("vocab_tokens and vocab_logits go together (vocabulary_projection gives both); give both")
        parts = {part: _PART_TYPES[part](**attributes) for part, attributes in grouped.items()}
        return cls(**parts, vocabulary=VocabularyProjection(**vocabulary) if vocabulary else None)

    def replace(self, **changes) -> "ConceptInterpretation":
        """A copy with some values changed, by part (``stats=``) or by flat name (``labels=``, ``params=``).

        Parts no change touches are shared with this interpretation; a copy with new ``labels`` or ``label_source``
        keeps no lazy labeller (:meth:`relabel` labels in place).

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> renamed = interp.replace(labels=[f"c{c}" for c in range(8)], label_source="by hand")
            >>> renamed.labels[:2], renamed.label_source, interp.labels[0]
            (['c0', 'c1'], 'by hand', 'it / , / sitting')
        """
        own = {f.name for f in fields(self)}
        parts = {name: changes.pop(name) for name in list(changes) if name in own}
        base = replace(self, **parts)
        if not changes:
            return base
        group_flat(FLAT_ATTRIBUTES, changes, what="concept interpretation")  # names the unknown ones
        flat = {name: getattr(base, name) for name in FLAT_ATTRIBUTES}
        rebuilt = ConceptInterpretation.from_flat(**{**flat, **changes})
        touched = {FLAT_ATTRIBUTES[name][0] for name in changes}  # the other parts stay as they are (a lazy labeller)
        return replace(rebuilt, **{name: getattr(base, name) for name in own if name not in touched})

    @property
    def n_concepts(self) -> int:
        """Number of concepts."""
        return len(self.labelling)

    @property
    def dead(self) -> np.ndarray:
        """Whether each concept never fired (zero on every scanned row): such a concept has no top contexts, no top
        texts and an empty label.

        Example:
            >>> interpret_concepts(concepts, store, progress=False).dead.tolist()
            [False, False, False, False, False, False, False, False]
        """
        return np.asarray(self.density) == 0

    def _index(self, concept: int) -> int:
        if not -self.n_concepts <= int(concept) < self.n_concepts:
            raise ValueError(
                f"concept {concept} out of range; there are {self.n_concepts} concepts (0..{self.n_concepts - 1})"
            )
        return int(concept) % self.n_concepts

    def top_tokens(self, concept: int) -> list[str]:
        """The tokens of the top activating rows of one concept, strongest first.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.top_tokens(0)[:5]
            [',', 'sitting', 'h', 'gets', 'it']
        """
        return [example["token"] for example in self.examples[self._index(concept)]]

    # ------------------------------------------------------------------ tables and charts
    def widget(
        self,
        *,
        texts: Any = None,
        concept_model: ConceptModel | None = None,
        model=None,
        tokenizer=None,
        input_attribution: Any = None,
        **options,
    ):
        """The concept browser for these concepts; ``options`` go to :class:`~interp_widgets.widgets.ConceptBrowser`.

        ``texts`` are :class:`~interp_widgets.concepts.TextConcepts` / ``ConceptImportance`` objects or plain strings;
        strings are run through :func:`~interp_widgets.concepts.text_concepts` here, which needs the fitted
        ``concept_model`` and the language ``model`` and ``tokenizer`` (the browser itself computes nothing).

        ``input_attribution`` adds the text view's "input attribution" mode (which input tokens make the selected
        concept fire): an attribution method name (``"integrated_gradients"``, ``"occlusion"`` ...), ``True`` for
        the default method of the concept model, or a :class:`~interp_widgets.concepts.ConceptInputAttributions`.
        A name needs ``concept_model``, ``model`` and ``tokenizer``; attributions are computed on the concepts side
        when a concept is first selected in that mode, then cached.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> browser = interp.widget(texts=["Not bad at all."], concept_model=concepts, model=model,
            ...                         tokenizer=tokenizer, input_attribution="occlusion")
            >>> type(browser).__name__, browser.attribution_method
            ('ConceptBrowser', 'occlusion')
            >>> browser.text_mode, browser.selected_concept = "attribution", 5  # what the text view's toggle does
            >>> browser.details["5"]["text_attribution"]["score"]
            'activation of concept 5 summed over the non-special tokens'
        """
        from interp_widgets.concepts.importance import text_concepts
        from interp_widgets.concepts.inputs import ConceptInputAttributions
        from interp_widgets.widgets.concept_browser import ConceptBrowser

        if (
            input_attribution is not None
            and input_attribution is not False
            and not isinstance(input_attribution, ConceptInputAttributions)
        ):
            if concept_model is None or model is None or tokenizer is None:
                raise ValueError(
                    "input_attribution= by method name needs concept_model=, model= and tokenizer=; or "
                    "pass a ConceptInputAttributions"
                )
            method = None if input_attribution is True else input_attribution
            input_attribution = ConceptInputAttributions(concept_model, model, tokenizer, method=method)
        if input_attribution is not None and input_attribution is not False:
            options["input_attributions"] = input_attribution

        if texts is not None:
            texts = [texts] if isinstance(texts, str) or hasattr(texts, "coefficients") else list(texts)
            if any(isinstance(text, str) for text in texts):
                if concept_model is None or model is None or tokenizer is None:
                    raise ValueError(
                        "plain-string texts need concept_model=, model= and tokenizer= (to run "
                        "text_concepts); otherwise pass text_concepts(...) results"
                    )
                texts = [
                    text_concepts(concept_model, model, tokenizer, text) if isinstance(text, str) else text
                    for text in texts
                ]
        return ConceptBrowser(self, texts=texts, **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.widget()._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self):  # marimo's display protocol: shown as the view, through marimo's anywidget support
        return self.widget()

    def to_dataframe(self):
        """One row per concept: label, density, mean/max/min coefficient, top tokens and promoted vocabulary.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> frame = interp.to_dataframe()
            >>> frame.columns.tolist()
            ['concept', 'label', 'density', 'dead', 'mean', 'max', 'min', 'top_tokens', 'vocabulary']
            >>> frame.sort_values("density")[["concept", "label", "density", "max"]].round(3).head(3)
               concept                label  density    max
            3        3     . / felt / which    0.879  0.342
            1        1   overnight / an / .    0.899  0.131
            7        7  the / ' / breakfast    0.908  0.748
        """
        import pandas as pd

        return pd.DataFrame(
            {
                "concept": np.arange(self.n_concepts),
                "label": self.labels,
                "density": self.density,
                "dead": self.dead,
                "mean": self.mean,
                "max": self.maximum,
                "min": self.minimum,
                "top_tokens": [" | ".join(self.top_tokens(c)) for c in range(self.n_concepts)],
                "vocabulary": [" | ".join(v) for v in self.vocab_tokens]
                if self.vocab_tokens
                else [""] * self.n_concepts,
            }
        )

    def examples_dataframe(self, concept: int | None = None):
        """Top examples in long form: concept, rank, activation, text id, position, token, left/right context.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.examples_dataframe(2)[["rank", "text_id", "position", "token", "right"]].head(3)
               rank  text_id  position    token                 right
            0     0       31         1    Great  sound when it works.
            1     1        2         1       No  buzzing, no hissing,
            2     2       23         1  Parking      was a hassle and
            >>> len(interp.examples_dataframe())  # every concept: 8 concepts × k=10
            80
        """
        import pandas as pd

        concepts = range(self.n_concepts) if concept is None else [self._index(concept)]
        rows = []
        for c in concepts:
            for rank, example in enumerate(self.examples[c]):
                center = example["center"]
                rows.append(
                    {
                        "concept": c,
                        "rank": rank,
                        "activation": example["activation"],
                        "row": example["row"],
                        "text_id": example["text_id"],
                        "position": example["position"],
                        "token": example["token"],
                        "left": "".join(example["context"][:center]),
                        "right": "".join(example["context"][center + 1 :]),
                    }
                )
        return pd.DataFrame(
            rows, columns=["concept", "rank", "activation", "row", "text_id", "position", "token", "left", "right"]
        )

    def top_texts_dataframe(self, concept: int):
        """The texts where one concept is strongest: rank, text id, max activation, text.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.top_texts_dataframe(0)[["rank", "text_id", "max_activation"]].round(3).head(3)
               rank  text_id  max_activation
            0     0       20           0.068
            1     1       21           0.065
            2     2        5           0.065
        """
        import pandas as pd

        c = self._index(concept)
        keep = self.top_texts[c] >= 0
        ids = self.top_texts[c][keep]
        return pd.DataFrame(
            {
                "rank": np.arange(len(ids)),
                "text_id": ids,
                "max_activation": self.top_text_values[c][keep],
                "text": [self.texts[str(i)] for i in ids],
            }
        )

    def histogram(self, concept: int):
        """Histogram of the active coefficients of one concept as a DataFrame (``start, end, count``).

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.histogram(0).round(3).head(3)
               start    end  count
            0  0.000  0.002     19
            1  0.002  0.005     20
            2  0.005  0.007     33
            >>> int(interp.histogram(0)["count"].sum()) == round(interp.density[0] * len(store))  # the active rows
            True
        """
        import pandas as pd

        c = self._index(concept)
        edges = self.hist_edges[c]
        return pd.DataFrame({"start": edges[:-1], "end": edges[1:], "count": self.hist_counts[c]})

    def chart(self, concept: int | None = None):
        """Altair chart: the activation histogram of ``concept``, or the density of every concept if ``None``.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> chart = interp.chart(4)
            >>> chart.mark, chart.title
            ('bar', 'concept 4: s / garden / : (density 0.915)')
            >>> interp.chart().title  # density of every concept
            'NMFConcepts concepts at layer:1'
        """
        import altair as alt

        if concept is None:
            frame = self.to_dataframe()
            return (
                alt.Chart(frame)
                .mark_bar()
                .encode(
                    x=alt.X("concept:O"),
                    y=alt.Y("density:Q", title="fraction of rows active"),
                    tooltip=["concept:Q", "label:N", alt.Tooltip("density:Q", format=".3g"), "top_tokens:N"],
                )
                .properties(title=f"{self.method} concepts at {self.layer}")
            )
        c = self._index(concept)
        return (
            alt.Chart(self.histogram(c))
            .mark_bar()
            .encode(
                x=alt.X("start:Q", bin="binned", title="coefficient"),
                x2="end:Q",
                y=alt.Y("count:Q", title="active rows"),
                tooltip=["start:Q", "end:Q", "count:Q"],
            )
            .properties(title=f"concept {c}: {self.labels[c]} (density {self.density[c]:.3g})")
        )

    def detail(self, concept: int) -> dict[str, Any]:
        """Everything known about one concept as a JSON-ready dict (for a browser that loads concepts on request).

        Keys: ``concept, label, density, mean, max, min, examples, top_texts, histogram, vocabulary``.

        Example:
            >>> import json
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> detail = interp.detail(3)
            >>> list(detail)
            ['concept', 'label', 'density', 'mean', 'max', 'min', 'examples', 'top_texts', 'histogram', 'vocabulary']
            >>> detail["label"], len(detail["examples"]), detail["vocabulary"]  # no vocabulary: a classifier
            ('. / felt / which', 10, None)
            >>> len(json.dumps(detail)) > 0
            True
        """
        c = self._index(concept)
        texts = self.top_texts_dataframe(c)
        return {
            "concept": c,
            "label": self.labels[c],
            "density": float(self.density[c]),
            "mean": float(self.mean[c]),
            "max": float(self.maximum[c]),
            "min": float(self.minimum[c]),
            "examples": self.examples[c],
            "top_texts": [
                {"text_id": int(i), "max_activation": float(v), "text": t}
                for i, v, t in zip(texts["text_id"], texts["max_activation"], texts["text"])
            ],
            "histogram": {"edges": self.hist_edges[c].tolist(), "counts": self.hist_counts[c].tolist()},
            "vocabulary": None
            if self.vocab_tokens is None
            else [{"token": t, "logit": float(v)} for t, v in zip(self.vocab_tokens[c], self.vocab_logits[c])],
        }

    # ------------------------------------------------------------------ labels
    def relabel(self, labeler: Labeler, *, source: str | None = None, lazy: bool = False) -> "ConceptInterpretation":
        """Replace the labels with ``labeler(concept, examples) -> str`` (e.g. :class:`~interp_widgets.concepts.
        LMLabeler`, which asks a local LM).

        ``examples`` are the concept's top examples (dicts with ``token``, ``context``, ``center``, ``activation``…).
        Concepts that never fired keep an empty label; the labeller is never asked about them. With ``lazy=True``
        nothing is labelled now: :meth:`ensure_label` labels a concept the first time it is needed (the concept
        browser calls it for the concepts it shows) and caches the label. ``label_source`` records ``source``
        (default: the labeller's ``name``). Returns ``self`` so calls chain.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.relabel(lambda c, ex: ex[0]["token"].upper(), source="shout")
            ConceptInterpretation(8 NMFConcepts concepts at 'layer:1', labels from shout)
            >>> interp.labels[:3]
            [',', 'OVERNIGHT', 'GREAT']
            >>> interp.relabel(lambda c, ex: f"concept {c}", source="lazy", lazy=True).ensure_label(5), interp.labels[:2]
            ('concept 5', [',', 'OVERNIGHT'])
        """
        if not callable(labeler):
            raise TypeError("labeler must be a callable (concept index, examples) -> str")
        live = {c for c in range(self.n_concepts) if not self.dead[c]}
        labels = (
            [""] * self.n_concepts if not lazy else [label if c in live else "" for c, label in enumerate(self.labels)]
        )
        if not lazy:  # all or nothing: a failing labeller leaves the previous labels in place
            for c in sorted(live):
                labels[c] = _checked_label(labeler(c, self.examples[c]), c, self.density[c])
        self.labelling = ConceptLabels(
            labels,
            source or getattr(labeler, "name", None) or "custom",
            labeler=labeler if lazy else None,
            pending=frozenset(live) if lazy else frozenset(),
            scores=self.labelling.scores,  # kept where a label is unchanged
        )  # the swapped-label control is not carried over: a relabel drops it
        return self

    def ensure_label(self, concept: int) -> str:
        """The label of ``concept``, asking a lazy labeller (:meth:`relabel` with ``lazy=True``) the first time.

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> interp.ensure_label(0)  # labels from top tokens are made up front
            'it / , / sitting'
        """
        c = self._index(concept)
        labelling = self.labelling
        if c in labelling.pending:
            label = _checked_label(labelling.labeler(c, self.examples[c]), c, self.density[c])
            labels = [*labelling.labels[:c], label, *labelling.labels[c + 1 :]]
            self.labelling = replace(labelling, labels=labels, pending=labelling.pending - {c})
        return self.labels[c]

    @property
    def unlabelled(self) -> list[int]:
        """Concepts a lazy labeller has not labelled yet (they show their top-token label until then).

        Example:
            >>> interpret_concepts(concepts, store, progress=False).unlabelled
            []
        """
        return sorted(self.labelling.pending)

    # ------------------------------------------------------------------ persistence
    # Saved files hold the flat values (FLAT_ATTRIBUTES): these arrays in the safetensors body, the rest as JSON.
    _ARRAYS = (
        "density",
        "mean",
        "maximum",
        "minimum",
        "top_rows",
        "top_values",
        "top_texts",
        "top_text_values",
        "hist_counts",
        "hist_edges",
        "vocab_logits",
    )

    def save(self, path: str | Path) -> Path:
        """Write to one safetensors file with a JSON header (never pickle).

        Example:
            >>> interp = interpret_concepts(concepts, store, progress=False)
            >>> path = interp.save(getfixture("tmp_path") / "interp.safetensors")
            >>> ConceptInterpretation.load(path).labels == interp.labels
            True
        """
        arrays = {n: getattr(self, n) for n in self._ARRAYS if getattr(self, n) is not None}
        meta = {name: getattr(self, name) for name in FLAT_ATTRIBUTES if name not in self._ARRAYS}
        return save_bundle(path, _FORMAT, arrays, meta)

    @classmethod
    def load(cls, path: str | Path) -> "ConceptInterpretation":
        """Read a file written by :meth:`save`.

        Example:
            >>> saved = interpret_concepts(concepts, store, progress=False)
            >>> path = saved.save(getfixture("tmp_path") / "interp.safetensors")
            >>> interp = ConceptInterpretation.load(path)
            >>> interp
            ConceptInterpretation(8 NMFConcepts concepts at 'layer:1', labels from top tokens)
            >>> interp.top_texts_dataframe(0).text_id.tolist()[:3]
            [20, 21, 5]
        """
        arrays, meta = load_bundle(path, _FORMAT)
        return cls.from_flat(**meta, **arrays)

    def __repr__(self) -> str:
        return f"ConceptInterpretation({self.n_concepts} {self.method} concepts at {self.layer!r}, labels from {self.label_source})"


install_flat_properties(ConceptInterpretation, FLAT_ATTRIBUTES)


def _checked_label(label, concept: int, density: float) -> str:
    if not isinstance(label, str):
        raise TypeError(f"labeler returned {type(label).__name__} for concept {concept}; it must return a str")
    if not label.strip():
        raise ValueError(
            f"labeler returned no text for concept {concept}, which fired on {density:.2%} of rows; "
            "return a short label (or '?' when unsure)"
        )
    return label


def label_from_tokens(tokens: list[str], n: int = 3) -> str:
    """A label from top tokens: the ``n`` most frequent distinct tokens (stripped, case-folded), strongest first.

    Example:
        >>> label_from_tokens(["bad", " Bad", "awful", "bad", "dull"])
        'bad / awful / dull'
    """
    cleaned = [t.strip().lower() for t in tokens if t.strip()]
    counts = Counter(cleaned)
    first = {t: i for i, t in reversed(list(enumerate(cleaned)))}
    ranked = sorted(counts, key=lambda t: (-counts[t], first[t]))
    return " / ".join(ranked[:n]) if ranked else "(no tokens)"


def _merge_topk(values: np.ndarray, rows: np.ndarray, new_values: np.ndarray, new_rows: np.ndarray, k: int):
    """Keep the ``k`` largest of the current and the new candidates of every concept (ties: current first)."""
    all_values = np.concatenate([values, new_values], axis=1)
    all_rows = np.concatenate([rows, new_rows], axis=1)
    order = np.argsort(-all_values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_values, order, 1), np.take_along_axis(all_rows, order, 1)


def _block_top(C: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest rows of each column of ``C`` as ``(concepts × ≤k)`` float64 values and their ``ids``, largest
    first, ties by lower row (as a stable sort of the column would give), found by partition, not a full sort."""
    part = _top_columns(C.T, min(int(k), len(C)))
    return np.take_along_axis(C.T, part, 1).astype(np.float64), ids[part]


class _TextMaxima:
    """Top-``k`` texts of every concept by their largest coefficient, streamed block by block in store order: the
    maximum of each text is finished when its last row has been seen (a text may span blocks), then merged into
    the running top ``k``. Memory is ``concepts × k``, not ``texts × concepts``."""

    def __init__(self, n: int, k: int):
        self.k = k
        self.values = np.full((n, 0), -np.inf)
        self.texts = np.full((n, 0), -1, dtype=np.int64)
        self.carry_id, self.carry = -1, None

    def add(self, C: np.ndarray, text_ids: np.ndarray) -> None:
        starts = np.flatnonzero(np.r_[True, text_ids[1:] != text_ids[:-1]])
        maxima = np.maximum.reduceat(C, starts, axis=0)
        ids = text_ids[starts]
        if self.carry is not None:
            if ids[0] == self.carry_id:
                maxima[0] = np.maximum(maxima[0], self.carry)
            else:
                self._merge(self.carry[None], np.array([self.carry_id]))
        if len(ids) > 1:
            self._merge(maxima[:-1], ids[:-1])
        self.carry_id, self.carry = int(ids[-1]), maxima[-1].copy()  # the last text may go on in the next block

    def _merge(self, maxima: np.ndarray, ids: np.ndarray) -> None:
        values, texts = _block_top(maxima, ids, self.k)
        self.values, self.texts = _merge_topk(self.values, self.texts, values, texts, self.k)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        if self.carry is not None:
            self._merge(self.carry[None], np.array([self.carry_id]))
            self.carry = None
        pad = self.k - self.values.shape[1]
        if pad > 0:
            self.values = np.pad(self.values, ((0, 0), (0, pad)), constant_values=-np.inf)
            self.texts = np.pad(self.texts, ((0, 0), (0, pad)), constant_values=-1)
        return self.texts, self.values


def interpret_concepts(
    concept_model: ConceptModel,
    store,
    *,
    k: int = 10,
    window: int = 5,
    bins: int = 30,
    n_label_tokens: int = 3,
    labeler: Labeler | None = None,
    lazy_labels: bool = False,
    model=None,
    tokenizer=None,
    vocab_top: int = 10,
    rows_per_chunk: int = 65536,
    progress: bool = True,
) -> ConceptInterpretation:
    """Summarise every concept of a fitted model over an activation store.

    Args:
        concept_model: a fitted concept model whose width matches the store.
        store: the :class:`~interp_widgets.concepts.ActivationStore` to scan (two streaming passes).
        k: top examples and top texts per concept.
        window: tokens of context on each side of a top example (same text only).
        bins: histogram bins.
        n_label_tokens: distinct top tokens joined into the automatic label.
        labeler: optional ``(concept, examples) -> str`` replacing the automatic labels (see
            :mod:`interp_widgets.concepts.labels`); ``lazy_labels=True`` asks it only when a concept is first viewed.
        model, tokenizer: give both to add the vocabulary projection (skipped when the model has no output
            embedding, as for classifiers).
        vocab_top: promoted tokens per concept in the projection.
        rows_per_chunk, progress: streaming block size and progress bar.

    Example:
        >>> interp = interpret_concepts(concepts, store, k=20, window=8, progress=False)
        >>> interp.top_rows.shape, interp.params
        ((8, 20), {'k': 20, 'window': 8, 'bins': 30, 'rows': 775, 'unit': 'token'})
        >>> from interp_widgets.concepts import PCAConcepts, collect_activations  # with an LM: vocabulary too
        >>> lm_store = collect_activations(lm, lm_tokenizer, texts[:10], layer=1, progress=False)
        >>> lm_interp = interpret_concepts(PCAConcepts(4).fit(lm_store), lm_store, k=3, model=lm,
        ...                                tokenizer=lm_tokenizer, vocab_top=3, progress=False)
        >>> lm_interp.to_dataframe()[["concept", "top_tokens", "vocabulary"]]
           concept         top_tokens       vocabulary
        0        0         M | M | th  � |  half | ive
        1        1          h | g | g      ur |  I | `
        2        2       ll | es | ll    aff | me | nd
        3        3  I | atter | ation   com | x | ning
    """
    from tqdm.auto import tqdm

    from interp_widgets.concepts.activations import ActivationStore

    if not isinstance(store, ActivationStore):
        raise TypeError(f"store must be an ActivationStore (from collect_activations), got {type(store).__name__}")
    if len(store) == 0:
        raise ValueError("the store is empty; collect activations from at least one text")
    concept_model._check_fitted()
    concept_model.check_model(str(store.info.get("name_or_path", "")))
    if store.dim != concept_model.n_features_in_:
        raise ValueError(
            f"the concept model was fitted on {concept_model.n_features_in_} features but the store has "
            f"{store.dim} (layer {store.layer}); use a store from the layer the model was fitted on"
        )
    k, window, bins = (
        check_int("k", k, minimum=1),
        check_int("window", window, minimum=0),
        check_int("bins", bins, minimum=1),
    )
    n = concept_model.n_concepts
    top_values = np.full((n, 0), -np.inf)
    top_rows = np.full((n, 0), -1, dtype=np.int64)
    low, high = np.full(n, np.inf), np.full(n, -np.inf)
    active, total = np.zeros(n, dtype=np.int64), np.zeros(n)
    text_top = _TextMaxima(n, int(k))
    text_ids = store.text_ids
    # bound the (rows x concepts) coefficient block: about 64 MB of float32 (plus the partition's indices),
    # whatever the number of concepts
    rows_per_chunk = max(256, min(int(rows_per_chunk), _BLOCK_VALUES // n))
    bar = tqdm(total=2 * len(store), desc="interpreting concepts", unit="row", disable=not progress)
    for start, block in store.iter_chunks(rows_per_chunk):
        C = concept_model.transform(block)  # float32: maxima, minima and top values are exact in it
        rows = np.arange(start, start + len(block))
        values, candidates = _block_top(C, rows, int(k))
        top_values, top_rows = _merge_topk(top_values, top_rows, values, candidates, int(k))
        low, high = np.minimum(low, C.min(0)), np.maximum(high, C.max(0))
        active += np.count_nonzero(C, axis=0)
        total += C.sum(0, dtype=np.float64)
        text_top.add(C, text_ids[rows])
        bar.update(len(block))
    counts = np.zeros((n, int(bins)), dtype=np.int64)
    edges = np.stack([np.linspace(lo, hi if hi > lo else lo + 1.0, int(bins) + 1) for lo, hi in zip(low, high)])
    width = edges[:, -1] - edges[:, 0]
    for start, block in store.iter_chunks(rows_per_chunk):
        C = concept_model.transform(block)
        row, concept = np.nonzero(C)  # only active coefficients are counted (sparse for SAEs)
        values = C[row, concept].astype(np.float64)
        index = np.clip(((values - edges[concept, 0]) / width[concept] * bins).astype(np.int64), 0, int(bins) - 1)
        counts += np.bincount(concept * int(bins) + index, minlength=n * int(bins)).reshape(n, int(bins))
        bar.update(len(block))
    bar.close()

    pad = int(k) - top_values.shape[1]
    if pad > 0:
        top_values = np.pad(top_values, ((0, 0), (0, pad)), constant_values=np.nan)
        top_rows = np.pad(top_rows, ((0, 0), (0, pad)), constant_values=-1)
    # A row where the concept is exactly 0 did not fire: it is no top context (a dead concept, which never fires,
    # has none at all, rather than the first rows of a tie at zero).
    silent = ~(top_values != 0) | (top_rows < 0)
    top_rows, top_values = np.where(silent, -1, top_rows), np.where(silent, np.nan, top_values)
    examples = _contexts(concept_model, store, top_rows, top_values, int(window))
    order, top_text_values = text_top.finish()
    top_texts = np.where(np.isfinite(top_text_values) & (top_text_values != 0) & (order >= 0), order, -1)
    used = sorted({int(t) for t in top_texts.ravel() if t >= 0} | {e["text_id"] for ex in examples for e in ex})
    labels = [
        label_from_tokens([e["token"] for e in examples[c]], n_label_tokens) if active[c] else "" for c in range(n)
    ]
    vocabulary = None
    has_unembedding = model is not None and getattr(model, "get_output_embeddings", lambda: None)() is not None
    if has_unembedding and tokenizer is not None:
        vocabulary = VocabularyProjection(*vocabulary_projection(concept_model, model, tokenizer, top=vocab_top))
    result = ConceptInterpretation(
        run=InterpretationRun(
            type(concept_model).__name__,
            store.layer,
            {"k": int(k), "window": int(window), "bins": int(bins), "rows": len(store), "unit": store.unit},
        ),
        labelling=ConceptLabels(labels),
        stats=ActivationStats(active / len(store), total / len(store), high, low, counts, edges),
        top_examples=TopExamples(top_rows, top_values, examples),
        text_maxima=TopTexts(
            top_texts, np.where(top_texts >= 0, top_text_values, np.nan), {str(i): store.texts[i] for i in used}
        ),
        vocabulary=vocabulary,
    )
    if labeler is not None:
        result.relabel(labeler, lazy=lazy_labels)
    return result


def _contexts(
    concept_model: ConceptModel, store, top_rows: np.ndarray, top_values: np.ndarray, window: int
) -> list[list[dict]]:
    """Context windows (same text, ±window rows) around each top row, with the concept's coefficient per token.

    Only the (row, concept) coefficients the windows show are kept: the rows are encoded in blocks of about 64 MB
    of coefficients, so 16k concepts × k examples × (2 window + 1) tokens never form one dense matrix."""
    text_ids = store.text_ids
    spans = {}
    for r in np.unique(top_rows[top_rows >= 0]):
        lo, hi = max(0, r - window), min(len(store), r + window + 1)
        span = np.arange(lo, hi)
        spans[int(r)] = span[text_ids[span] == text_ids[r]]
    n = concept_model.n_concepts
    pair_rows = [spans[int(r)] for c in range(n) for r in top_rows[c] if r >= 0]
    pair_concepts = [np.full(len(spans[int(r)]), c) for c in range(n) for r in top_rows[c] if r >= 0]
    pair_rows = np.concatenate(pair_rows) if pair_rows else np.zeros(0, np.int64)
    pair_concepts = np.concatenate(pair_concepts) if pair_concepts else np.zeros(0, np.int64)
    needed = np.unique(pair_rows)
    values = np.zeros(len(pair_rows), dtype=np.float32)
    if len(needed):
        position = np.searchsorted(needed, pair_rows)
        order = np.argsort(position, kind="stable")
        sorted_position = position[order]
        block = max(256, _BLOCK_VALUES // n)
        for start in range(0, len(needed), block):
            C = concept_model.transform(store[needed[start : start + block]])
            a, b = np.searchsorted(sorted_position, [start, start + block])
            chosen = order[a:b]
            values[chosen] = C[position[chosen] - start, pair_concepts[chosen]]
    tokens = dict(zip(needed.tolist(), store.tokens(needed))) if len(needed) else {}
    offsets = store.offsets
    examples, cursor = [], 0
    for c in range(n):
        items = []
        for r, value in zip(top_rows[c], top_values[c]):
            if r < 0:
                continue
            span = spans[int(r)]
            items.append(
                {
                    "row": int(r),
                    "activation": float(value),
                    "text_id": int(text_ids[r]),
                    "position": int(store.positions[r]),
                    "token": tokens[int(r)],
                    "context": _pieces(store.texts[int(text_ids[r])], offsets[span], [tokens[int(s)] for s in span]),
                    "context_activations": values[cursor : cursor + len(span)].astype(np.float64).tolist(),
                    "center": int(np.flatnonzero(span == r)[0]),
                }
            )
            cursor += len(span)
        examples.append(items)
    return examples


def _pieces(text: str, offsets: np.ndarray, tokens: list[str]) -> list[str]:
    """Token strings that each run to the next token's start, so joining them gives the text with its spaces."""
    pieces = []
    for i, ((a, b), token) in enumerate(zip(offsets, tokens)):
        following = offsets[i + 1][0] if i + 1 < len(offsets) else b
        pieces.append(text[a:following] if b > a and following >= b else token)
    return pieces


def vocabulary_projection(concept_model: ConceptModel, model, tokenizer, *, top: int = 10):
    """Tokens each concept direction promotes: ``components_ @ W_outᵀ`` through the output embedding.

    The direction is projected through the unembedding matrix only (no final norm or LM-head transform), as in
    feature dashboards' logit tables. Returns ``(tokens per concept, logits (concepts × top))``, strongest first;
    each token is its decoded text (a leading space included), not the tokenizer's internal spelling.

    Example:
        >>> from interp_widgets.concepts import PCAConcepts, collect_activations
        >>> lm_store = collect_activations(lm, lm_tokenizer, texts[:10], layer=1, progress=False)
        >>> tokens, logits = vocabulary_projection(PCAConcepts(4).fit(lm_store), lm, lm_tokenizer, top=3)
        >>> tokens[0], logits.shape
        (['�', ' half', 'ive'], (4, 3))
        >>> vocabulary_projection(concepts, model, tokenizer)  # a classifier has no output embedding
        Traceback (most recent call last):
            ...
        ValueError: BertForSequenceClassification has no output embedding (it is not a language model); ...
    """
    concept_model._check_fitted()
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is None or not hasattr(output, "weight"):
        raise ValueError(
            f"{type(model).__name__} has no output embedding (it is not a language model); "
            "vocabulary projection needs a causal or masked LM"
        )
    weight = output.weight.detach().float().cpu().numpy()
    if weight.shape[1] != concept_model.n_features_in_:
        raise ValueError(
            f"the output embedding has width {weight.shape[1]} but the concepts have "
            f"{concept_model.n_features_in_} features; project concepts of a residual-stream layer"
        )
    components = concept_model.components_.astype(np.float32)
    vocab = weight.shape[0]
    top = min(int(top), vocab)
    # concepts in blocks of about 64 MB of logits: 16k concepts × a 49k vocabulary would be 3 GB at once
    block = max(1, _BLOCK_VALUES // vocab)
    orders, values = [], []
    for start in range(0, len(components), block):
        logits = components[start : start + block] @ weight.T
        order = _top_columns(logits, top)
        orders.append(order)
        values.append(np.take_along_axis(logits, order, 1))
    order = np.concatenate(orders) if orders else np.zeros((0, top), np.int64)
    # as text, not in the tokenizer's own alphabet ("Ġhalf" of byte-level BPE is " half")
    tokens = [[tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in row.tolist()] for row in order]
    return tokens, np.concatenate(values) if values else np.zeros((0, top), np.float32)


def _top_columns(values: np.ndarray, top: int) -> np.ndarray:
    """Column indices of the ``top`` largest values of each row, largest first, ties by lower index (what a stable
    sort of the whole row gives), by partition and masks: O(columns) per row, no full sort.

    Example:
        >>> _top_columns(np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 1.0, 1.0, 1.0]]), 2).tolist()
        [[1, 2], [1, 2]]
    """
    n_rows, n_columns = values.shape
    top = min(int(top), n_columns)
    if top == n_columns:
        return np.argsort(-values, axis=1, kind="stable")
    kth = np.partition(values, n_columns - top, axis=1)[:, n_columns - top]  # the top-th largest of each row
    above = values > kth[:, None]
    tied = values == kth[:, None]
    room = top - above.sum(1)  # how many of the ties at the cut are kept: the lowest-indexed ones
    keep = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= room[:, None]))
    picked = np.nonzero(keep)[1].reshape(n_rows, top)  # row-major: indices ascending within each row
    order = np.argsort(-np.take_along_axis(values, picked, 1), axis=1, kind="stable")  # ties keep index order
    return np.take_along_axis(picked, order, 1)
