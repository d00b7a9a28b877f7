"""Attribution results: one object per explained input, and a collection for batches.

A result holds the tokens with their character offsets and word/sentence units, a targets × tokens score matrix,
the explained targets with their probabilities, the method and its parameters, and (for path methods) the
completeness error. It aggregates to words or sentences, exports to pandas, altair, safetensors + JSON, and displays
as the token widget.

Example:
    >>> from interp_widgets.attribution import IntegratedGradients
    >>> result = IntegratedGradients(progress=False).attribute(model, tokenizer, "Not bad at all.")
    >>> result
    AttributionResult(method='integrated_gradients', 7 tokens, targets=[positive (p=0.421)])
    >>> result.aggregate("word").to_dataframe()[["target", "unit", "score"]].round(3)
         target unit  score
    0  positive  Not  0.027
    1  positive  bad -0.139
    2  positive   at  0.129
    3  positive  all  0.072
    4  positive    . -0.029
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from interp_widgets._files import output_path, read_safetensors
from interp_widgets._flat import group_flat, install_flat_properties, replace_flat
from interp_widgets.targets import Contrast, Targets
from interp_widgets.text_units import GRANULARITIES, TokenLayout, unit_members
from interp_widgets.validation import check_choice

AGGREGATIONS = ("sum", "mean", "maxabs")
_FORMAT_VERSION = 2  # 2: "reduce" renamed "score_meaning"


@dataclass
class MethodRun:
    """How the scores of an :class:`AttributionResult` were computed: the method's ``name`` and ``params``, what a
    score means (``score_meaning``: the reduction over the embedding, say) and whether it has a sign, and for path
    methods the ``completeness_error`` (``Σ scores − score_delta``) and ``score_delta`` (``f(x) − f(baseline)``) of
    every target.

    Example:
        >>> result.run.name, result.run.score_meaning
        ('saliency', 'L2 norm over embedding dimension (unsigned)')
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    score_meaning: str = "sum over embedding dimension (signed)"
    signed: bool = True
    completeness_error: np.ndarray | None = None
    score_delta: np.ndarray | None = None

    def __post_init__(self):
        for name in ("completeness_error", "score_delta"):
            if getattr(self, name) is not None:
                setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64).reshape(-1))


@dataclass
class Generation:
    """What a language model's result adds to its layout: which units were generated (``generated_mask``), the
    position each target is read at (``positions``), and for an encoder–decoder which units are the source
    (``source_mask``) with the decoder's cross-attention over them (``cross_attentions``, float16).

    Example:
        >>> from interp_widgets.attribution import Saliency
        >>> r = Saliency(progress=False).attribute(lm, lm_tokenizer, "The room was", max_new_tokens=2)
        >>> r.generation.generated_mask.sum(), r.generation.positions.tolist()
        (np.int64(2), [2, 3])
    """

    generated_mask: np.ndarray | None = None
    positions: np.ndarray | None = None
    source_mask: np.ndarray | None = None
    cross_attentions: np.ndarray | None = None

    def __post_init__(self):
        for name, dtype in (("generated_mask", bool), ("positions", np.int64), ("source_mask", bool)):
            if getattr(self, name) is not None:
                setattr(self, name, np.asarray(getattr(self, name), dtype=dtype).reshape(-1))
        if self.cross_attentions is not None:
            self.cross_attentions = np.asarray(self.cross_attentions, dtype=np.float16)


#: Each flat attribute of an :class:`AttributionResult` (the names of 0.1's fields, and of its saved files) as
#: ``(part, attribute of the part)``: ``result.tokens`` is ``result.layout.tokens``. The one table behind the
#: read-only properties, :meth:`AttributionResult.replace` and the saved files.
FLAT_ATTRIBUTES: dict[str, tuple[str, str]] = {
    **{name: ("layout", name) for name in ("text", "tokens", "offsets", "special_mask", "word_ids", "sentence_ids",
                                           "turn_ids", "turn_roles", "messages")},
    "target_labels": ("targets", "labels"), "target_ids": ("targets", "ids"), "target_probs": ("targets", "probs"),
    "method": ("run", "name"), "params": ("run", "params"),
    "score_meaning": ("run", "score_meaning"), "signed": ("run", "signed"),
    "completeness_error": ("run", "completeness_error"), "score_delta": ("run", "score_delta"),
    "foil_labels": ("contrast_info", "foils.labels"), "foil_ids": ("contrast_info", "foils.ids"),
    "foil_probs": ("contrast_info", "foils.probs"), "foil_alignment": ("contrast_info", "alignment"),
    "contrast": ("contrast_info", "text"),
    "generated_mask": ("generation", "generated_mask"), "target_positions": ("generation", "positions"),
    "source_mask": ("generation", "source_mask"), "cross_attentions": ("generation", "cross_attentions"),
}  # fmt: skip


@dataclass
class AttributionResult:
    """Scores for one input: ``scores[t, i]`` is the contribution of unit ``i`` to target ``t``.

    NaN marks a unit that a target cannot see (a source after a generated token). For token granularity the units
    are tokens; after :meth:`aggregate` they are words, sentences or turns (``tokens`` then holds the unit texts).
    A chat conversation's result names the role of each turn in ``turn_roles`` (``turn_ids`` gives each unit's
    turn, -1 for the template's own tokens, which are special) and keeps the conversation in ``messages``.

    A result is made of a few parts: the ``layout`` (a :class:`~interp_widgets.text_units.TokenLayout`: text,
    tokens, offsets, special tokens, word / sentence / turn ids and roles), the ``scores``, the explained
    ``targets`` (:class:`~interp_widgets.targets.Targets`), the ``run`` (:class:`MethodRun`: name,
    parameters, what the scores mean, path-method completeness), an optional ``contrast_info`` (:class:`Contrast`:
    the foils of a contrastive explanation), optional ``generation`` info (:class:`Generation`: generated tokens,
    scored positions, encoder–decoder sides), the ``granularity`` of the units and the input's ``true_label``. The
    parts' values read as flat attributes too (``tokens``, ``target_labels``, ``method``, ``score_meaning`` …); see
    :data:`FLAT_ATTRIBUTES`.

    Example of a chat result (the tiny model's template inserts a default system prompt, a turn of its own):
        >>> from interp_widgets.attribution import Saliency
        >>> chat = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]
        >>> reply = Saliency(progress=False).attribute(chat_lm, chat_tokenizer, chat).aggregate("turn")
        >>> reply.tokens, reply.turn_roles
        (['You are a tiny helpful assistant.', 'Hi!', 'Hello.'], ['system', 'user', 'assistant'])
        >>> reply.to_dataframe().query("target == target.iloc[-1]")[["role", "unit", "score"]].round(2)
                 role                               unit  score
        12     system  You are a tiny helpful assistant.  21.44
        13       user                                Hi!   2.00
        14  assistant                             Hello.  14.42

    Example:
        >>> result.text, result.tokens[:3], result.scores.shape
        ('Not bad at all, honestly.', ['[CLS]', 'Not', 'bad'], (1, 9))
        >>> result.target_labels, result.target_probs.round(3), result.method, result.signed
        (['positive'], array([0.63]), 'saliency', False)
    """

    layout: TokenLayout
    scores: np.ndarray
    targets: Targets
    run: MethodRun
    contrast_info: Contrast | None = None
    generation: Generation | None = None
    granularity: str = "token"
    true_label: str | None = None

    def __post_init__(self):
        self.scores = np.atleast_2d(np.asarray(self.scores, dtype=np.float64))
        n_targets, n_units = self.scores.shape
        if n_units != len(self.layout):
            raise ValueError(f"scores have {n_units} columns but there are {len(self.layout)} tokens")
        if len(self.targets) != n_targets:
            raise ValueError(f"{len(self.targets)} targets for {n_targets} rows of scores")
        for name in ("completeness_error", "score_delta"):
            value = getattr(self.run, name)
            if value is not None and len(value) != n_targets:
                raise ValueError(f"{name} has {len(value)} entries for {n_targets} targets")
        if self.contrast_info is not None:
            if len(self.contrast_info.foils) != n_targets:
                raise ValueError(f"{len(self.contrast_info.foils)} foils for {n_targets} targets")
            alignment = self.contrast_info.alignment
            if alignment is not None and len(alignment) != n_targets:
                raise ValueError(f"foil_alignment has {len(alignment)} entries for {n_targets} targets")
        if self.generation is not None:
            for name in ("generated_mask", "source_mask"):
                value = getattr(self.generation, name)
                if value is not None and len(value) != n_units:
                    raise ValueError(f"{name} has {len(value)} entries for {n_units} units")

    @classmethod
    def from_flat(cls, **values: Any) -> AttributionResult:
        """A result from flat values, by the names of :data:`FLAT_ATTRIBUTES` plus ``scores``, ``granularity`` and
        ``true_label`` (a file saved by 0.1 holds these; ``reduce`` is read as ``score_meaning``).

        Example:
            >>> flat = {name: getattr(result, name) for name in FLAT_ATTRIBUTES} | {"scores": result.scores}
            >>> AttributionResult.from_flat(**flat)
            AttributionResult(method='saliency', 9 tokens, targets=[positive (p=0.630)])
        """
        if "reduce" in values:  # 0.1's name of score_meaning
            values.setdefault("score_meaning", values.pop("reduce"))
        grouped = group_flat(FLAT_ATTRIBUTES, values, what="attribution result",
                             extra=("scores", "granularity", "true_label"))  # fmt: skip
        layout = TokenLayout(**grouped["layout"])
        targets = grouped.get("targets", {})
        method = grouped["run"]
        foils = {k: v for k, v in grouped.get("contrast_info", {}).items() if v is not None}
        contrast = None
        if foils.get("foils.ids") is not None:
            ids = np.asarray(foils["foils.ids"], dtype=np.int64).reshape(-1)
            labels = foils.get("foils.labels") or [str(i) for i in ids]
            contrast = Contrast(Targets(labels, ids=ids, probs=foils.get("foils.probs")), foils.get("alignment"),
                                foils.get("text"))  # fmt: skip
        generation = {k: v for k, v in grouped.get("generation", {}).items() if v is not None}
        return cls(
            layout=layout,
            scores=values["scores"],
            targets=Targets(targets.get("labels", []), ids=targets.get("ids"), probs=targets.get("probs")),
            run=MethodRun(**method),
            contrast_info=contrast,
            generation=Generation(**generation) if generation else None,
            granularity=values.get("granularity", "token"),
            true_label=values.get("true_label"),
        )

    def replace(self, **changes) -> AttributionResult:
        """A copy with some values changed, by part (``layout=``) or by flat name (``word_ids=``, ``method=``).

        Example:
            >>> result.replace(method="renamed").method, result.method
            ('renamed', 'saliency')
        """
        return replace_flat(self, FLAT_ATTRIBUTES, changes, what="attribution result")

    def target_index(self, target: int | str | None = None) -> int:
        """Row of ``scores`` for a target given by row index (negative from the end), label, or ``None`` (the first
        target): :meth:`Targets.index <interp_widgets.targets.Targets.index>`.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> both = Saliency(progress=False).attribute(model, tokenizer, "Not bad.", target=["negative", "positive"])
            >>> both.target_index("positive"), both.target_index(-1), both.target_index()
            (1, 1, 0)
        """
        return self.targets.index(target)

    @property
    def is_contrastive(self) -> bool:
        """Whether the scores explain a difference ``score(target) − score(foil)`` (the call had ``contrast=``).

        Example:
            >>> result.is_contrastive
            False
        """
        return self.foil_ids is not None

    # ------------------------------------------------------------------ encoder–decoder sides
    @property
    def is_seq2seq(self) -> bool:
        """Whether the result explains an encoder–decoder: its units are the source (encoder) units, then the
        target (decoder) units, one axis with ``source_mask`` telling them apart.

        Example:
            >>> result.is_seq2seq
            False
        """
        return self.source_mask is not None

    def _side(self, source: bool) -> np.ndarray:
        if self.source_mask is None:
            raise ValueError(
                "this result explains a single sequence; source_scores and target_scores apply to "
                "encoder–decoder results (a T5, BART, Marian… model)"
            )
        return self.scores[:, self.source_mask == source]

    @property
    def source_scores(self) -> np.ndarray:
        """``(targets, source units)``: each target token's scores over the encoder's source units.

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> r = IntegratedGradients(progress=False).attribute(seq2seq, seq2seq_tokenizer, "The room was clean.",
            ...                                                   continuation=" room.")
            >>> r.source_scores.shape, r.target_scores.shape  # 7 source tokens; the decoder start + 3 target tokens
            ((3, 7), (3, 4))
        """
        return self._side(True)

    @property
    def target_scores(self) -> np.ndarray:
        """``(targets, target units)``: each target token's scores over the decoder's units (its start token and
        the target tokens); a target sees only the earlier ones (later ones are NaN).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> r = Saliency(progress=False).attribute(seq2seq, seq2seq_tokenizer, "The room was clean.",
            ...                                        continuation=" room.")
            >>> np.isnan(r.target_scores).tolist()  # target t sees the start token and targets before it
            [[False, True, True, True], [False, False, True, True], [False, False, False, True]]
        """
        return self._side(False)

    @property
    def side_totals(self) -> dict[str, np.ndarray]:
        """The summed scores of each side per target, ``{"source": (targets,), "target": (targets,)}``; for a path
        method their sum is what completeness compares with the score change (both sides move along one path).

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> r = IntegratedGradients(progress=False).attribute(seq2seq, seq2seq_tokenizer, "The room was clean.",
            ...                                                   continuation=" room.")
            >>> total = r.side_totals["source"] + r.side_totals["target"]
            >>> bool(np.allclose(total - r.score_delta, r.completeness_error, atol=1e-6))
            True
        """
        return {"source": np.nansum(self.source_scores, axis=1), "target": np.nansum(self.target_scores, axis=1)}

    # ------------------------------------------------------------------ views
    @property
    def relative_completeness_error(self) -> np.ndarray | None:
        """``|Σattr − Δf| / |Δf|`` per target (path methods only).

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> ig = IntegratedGradients(progress=False).attribute(model, tokenizer, "Not bad at all.")
            >>> float(ig.relative_completeness_error[0]) < 0.01
            True
            >>> result.relative_completeness_error is None  # saliency is not a path method
            True
        """
        if self.completeness_error is None or self.score_delta is None:
            return None
        return np.abs(self.completeness_error) / np.maximum(np.abs(self.score_delta), 1e-12)

    def aggregate(
        self, granularity: str = "word", how: str = "sum", *, include_special: bool = False
    ) -> AttributionResult:
        """Scores per word, sentence or turn (one per chat message), aggregated from token scores by ``sum``,
        ``mean`` or ``maxabs``.

        Special tokens are dropped unless ``include_special``; a unit is NaN for a target only if all its tokens are.

        Example:
            >>> words = result.aggregate("word")
            >>> words.tokens, words.granularity
            (['Not', 'bad', 'at', 'all', ',', 'honestly', '.'], 'word')
            >>> words.scores.round(3)
            array([[0.654, 0.918, 0.335, 0.328, 0.755, 0.56 , 1.29 ]])
            >>> result.aggregate("sentence", how="maxabs").tokens
            ['Not bad at all, honestly.']
        """
        if self.granularity != "token":
            raise ValueError(
                f"this result is already at {self.granularity} granularity; aggregate the token-level result"
            )
        check_choice("granularity", granularity, GRANULARITIES)
        check_choice("aggregation", how, AGGREGATIONS)
        if granularity == "token":
            keep = np.ones(len(self.tokens), bool) if include_special else ~self.special_mask
            return self._select(keep)
        members_of = unit_members(self.special_mask, self.word_ids, self.sentence_ids, granularity, self.turn_ids)
        columns, texts, spans = [], [], []
        for members in members_of:
            block = self.scores[:, members]
            with np.errstate(all="ignore"):
                all_nan = np.isnan(block).all(axis=1)
                filled = np.where(np.isnan(block), 0.0, block)
                if how == "sum":
                    col = filled.sum(axis=1)
                elif how == "mean":
                    col = filled.sum(axis=1) / np.maximum((~np.isnan(block)).sum(axis=1), 1)
                else:
                    pick = np.abs(filled).argmax(axis=1)
                    col = filled[np.arange(len(pick)), pick]
            columns.append(np.where(all_nan, np.nan, col))
            start, end = int(self.offsets[members, 0].min()), int(self.offsets[members, 1].max())
            spans.append((start, end))
            texts.append(self.text[start:end].strip())
        scores = np.stack(columns, axis=1) if columns else np.zeros((len(self.target_labels), 0))
        n = len(members_of)
        word_ids = np.arange(n) if granularity == "word" else np.full(n, -1)
        sentence_ids = np.array([int(np.max(self.sentence_ids[m])) for m in members_of], dtype=np.int64)
        turn_ids = np.array([int(np.max(self.turn_ids[m])) for m in members_of], dtype=np.int64)
        generation = None
        if self.generation is not None:
            gen = self.generation
            generation = Generation(
                generated_mask=None
                if gen.generated_mask is None
                else np.array([bool(gen.generated_mask[m].any()) for m in members_of]),
                positions=gen.positions,
                # units never span sides: source and target have their own words
                source_mask=None
                if gen.source_mask is None
                else np.array([bool(gen.source_mask[m].all()) for m in members_of], dtype=bool),
            )
        layout = TokenLayout(
            text=self.text,
            tokens=texts,
            offsets=np.asarray(spans, dtype=np.int64).reshape(-1, 2),
            special_mask=np.zeros(n, bool),
            word_ids=word_ids,
            sentence_ids=sentence_ids if granularity == "word" else np.arange(n),
            turn_ids=turn_ids,
            turn_roles=self.turn_roles,
            messages=self.messages,
        )
        info = replace(self.run, params={**self.params, "aggregation": how})
        return replace(self, layout=layout, scores=scores, granularity=granularity, generation=generation,
                       run=info)  # fmt: skip

    def _select(self, keep: np.ndarray) -> AttributionResult:
        generation = self.generation
        if generation is not None:
            source = generation.source_mask
            generation = Generation(
                generated_mask=None if generation.generated_mask is None else generation.generated_mask[keep],
                positions=generation.positions,
                source_mask=None if source is None else source[keep],
                cross_attentions=None
                if generation.cross_attentions is None or source is None
                else generation.cross_attentions[..., keep[source]],
            )
        return replace(self, layout=self.layout.select(keep), scores=self.scores[:, keep], generation=generation)

    # ------------------------------------------------------------------ exports
    def to_dataframe(self):
        """Long-format table: one row per (target, unit) with the score and the unit's character span (and, for a
        chat conversation, a ``role`` column: the role of the unit's turn, empty for template tokens).

        A contrastive result adds the ``foil`` and ``foil_prob`` of each target after ``target_prob``; an
        encoder–decoder result adds ``side`` (``"source"`` or ``"target"``) after ``position``.

        Example:
            >>> frame = result.to_dataframe()
            >>> frame.columns.tolist()
            ['target', 'target_prob', 'position', 'unit', 'start', 'end', 'special', 'score', 'method', 'granularity']
            >>> frame[["unit", "start", "end", "score"]].head(3).round(3)
                unit  start  end  score
            0  [CLS]      0    0  2.741
            1    Not      0    3  0.654
            2    bad      4    7  0.918
        """
        import pandas as pd

        n_targets, n_units = self.scores.shape
        roles = {}
        if self.turn_roles:
            names = np.asarray([self.turn_roles[t] if 0 <= t < len(self.turn_roles) else "" for t in self.turn_ids],
                               dtype=object)  # fmt: skip
            roles = {"role": np.tile(names, n_targets)}
        foil = {}
        if self.is_contrastive:
            labels = self.foil_labels or [str(i) for i in self.foil_ids]
            probs = self.foil_probs if self.foil_probs is not None else np.full(n_targets, np.nan)
            foil = {
                "foil": np.repeat(np.asarray(labels, dtype=object), n_units),
                "foil_prob": np.repeat(probs, n_units),
            }
        return pd.DataFrame(
            {
                "target": np.repeat(self.target_labels, n_units),
                "target_prob": np.repeat(self.target_probs, n_units),
                **foil,
                "position": np.tile(np.arange(n_units), n_targets),
                **(
                    {}
                    if self.source_mask is None
                    else {"side": np.tile(np.where(self.source_mask, "source", "target").astype(object), n_targets)}
                ),
                "unit": np.tile(np.asarray(self.tokens, dtype=object), n_targets),
                "start": np.tile(self.offsets[:, 0], n_targets),
                "end": np.tile(self.offsets[:, 1], n_targets),
                "special": np.tile(self.special_mask, n_targets),
                "score": self.scores.reshape(-1),
                "method": self.method,
                "granularity": self.granularity,
                **roles,
            }
        )

    def chart(self, target: int | str | None = None):
        """An altair bar chart of the scores of one target, in text order, diverging colours centred on zero.

        Example:
            >>> chart = result.aggregate("word").chart()
            >>> chart.mark, chart.title
            ('bar', 'saliency: positive (p=0.630)')
        """
        import altair as alt

        row = self.target_index(target)
        frame = self.to_dataframe()
        frame = frame[frame["target"] == self.target_labels[row]].copy()
        frame["label"] = [f"{i}: {u}" for i, u in zip(frame["position"], frame["unit"])]
        if self.source_mask is not None:  # encoder–decoder: source units first, then target units, side by side
            frame["label"] = [f"{s}·{label}" for s, label in zip(frame["side"], frame["label"])]
        limit = float(np.nanmax(np.abs(frame["score"]))) if len(frame) and np.isfinite(frame["score"]).any() else 1.0
        return (
            alt.Chart(frame)
            .mark_bar()
            .encode(
                x=alt.X("label:N", sort=None, title=self.granularity),
                y=alt.Y("score:Q", title=f"{self.method} score"),
                color=alt.Color(
                    "score:Q", scale=alt.Scale(scheme="purpleorange", domain=[-limit or -1, limit or 1]), legend=None
                ),
                tooltip=["unit:N", alt.Tooltip("score:Q", format=".4g"), "position:Q"],
            )
            .properties(
                title=f"{self.method}: {self.target_labels[row]}"
                + (f" (p={self.target_probs[row]:.3f})" if np.isfinite(self.target_probs[row]) else "")
                + (f" rather than {self.foil_labels[row]!r}" if self.is_contrastive and self.foil_labels else "")
            )
        )

    def to_html(self) -> str:
        """A self-contained offline HTML page with the interactive token view (no kernel, no network).

        Example:
            >>> page = result.to_html()
            >>> page.startswith("<!DOCTYPE html>"), "honestly" in page, "https://" in page
            (True, True, False)
            >>> path = getfixture("tmp_path") / "explanation.html"
            >>> path.write_text(page) == len(page)
            True
        """
        return self.widget().to_html()

    def widget(self, **options):
        """The widget for this result: the generation view if it has generated tokens, else the token highlighter.

        ``options`` go to the widget (``granularity="word"``, ``shared_scale=True`` …).

        Example:
            >>> type(result.widget(granularity="word")).__name__
            'TokenHighlightWidget'
        """
        from interp_widgets.widgets import GenerationWidget, TokenHighlightWidget

        if self.generated_mask is not None and self.granularity == "token":
            return GenerationWidget(self, **options)
        return TokenHighlightWidget(self, **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.widget()._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self):  # marimo's display protocol: shown as the view, through marimo's anywidget support
        return self.widget()

    def __repr__(self) -> str:
        targets = ", ".join(
            f"{label} (p={p:.3f})" if np.isfinite(p) else str(label)  # NaN: no probability
            for label, p in zip(self.target_labels, self.target_probs)
        )
        turns = f", turns=[{', '.join(self.turn_roles)}]" if self.turn_roles else ""
        foil = f", contrast={self.contrast!r}" if self.is_contrastive else ""
        return (
            f"AttributionResult(method={self.method!r}, {len(self.tokens)} {self.granularity}s{turns}, "
            f"targets=[{targets}]{foil})"
        )

    # ------------------------------------------------------------------ persistence
    # Saved files hold the flat values (FLAT_ATTRIBUTES): arrays in the safetensors body, the rest as JSON.
    _ARRAYS = ("offsets", "special_mask", "word_ids", "sentence_ids", "turn_ids", "scores", "target_probs",
               "target_ids", "completeness_error", "score_delta", "target_positions", "generated_mask", "foil_ids",
               "foil_probs", "foil_alignment", "source_mask", "cross_attentions")  # fmt: skip

    def _metadata(self) -> dict[str, Any]:
        names = [*FLAT_ATTRIBUTES, "granularity", "true_label"]
        return {name: getattr(self, name) for name in names if name not in self._ARRAYS}

    def _arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self._ARRAYS:
            value = getattr(self, name)
            if value is not None:
                value = np.ascontiguousarray(value)
                out[name] = value.astype(np.uint8) if value.dtype == bool else value
        return out

    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.safetensors`` file (arrays) whose header metadata holds JSON (text, tokens, params).

        Missing parent directories are created. Never pickles. Example:
            >>> path = result.save(getfixture("tmp_path") / "explanation.safetensors")
            >>> AttributionResult.load(path)
            AttributionResult(method='saliency', 9 tokens, targets=[positive (p=0.630)])
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        meta = {"format": "interp_widgets.AttributionResult", "version": _FORMAT_VERSION, **self._metadata()}
        save_file(self._arrays(), str(path), metadata={"interp_widgets": json.dumps(meta, default=_json_default)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> AttributionResult:
        """Read a result written by :meth:`save`.

        Example:
            >>> path = result.save(getfixture("tmp_path") / "explanation.safetensors")
            >>> again = AttributionResult.load(path)
            >>> again.method, again.tokens == result.tokens, np.array_equal(again.scores, result.scores)
            ('saliency', True, True)
        """
        fix = "pass the path of a file written by AttributionResult.save(path)"
        metadata, arrays = read_safetensors(path, what="a saved AttributionResult", fix=fix)
        header = metadata.get("interp_widgets")
        if header is None:
            raise ValueError(f"{path} is not an interp_widgets attribution file (no interp_widgets metadata); {fix}")
        meta = json.loads(header)
        found = meta.pop("format", None)
        if found != "interp_widgets.AttributionResult":
            raise ValueError(
                f"{path} holds a different interp_widgets object ({found}), not an AttributionResult; "
                f"load it with its own class's load()"
            )
        if meta.pop("version", None) not in (1, _FORMAT_VERSION):
            raise ValueError(f"{path} has a newer format than this interp_widgets reads; upgrade interp_widgets")
        return cls._from_saved(meta, arrays)  # version 1 (0.1) named score_meaning "reduce"

    @classmethod
    def _from_saved(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> AttributionResult:
        """A result from what :meth:`_metadata` and :meth:`_arrays` wrote (masks were stored as uint8)."""
        arrays = dict(arrays)
        for name in ("special_mask", "generated_mask", "source_mask"):
            if name in arrays:
                arrays[name] = arrays[name].astype(bool)
        return cls.from_flat(**meta, **arrays)


install_flat_properties(AttributionResult, FLAT_ATTRIBUTES)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


class AttributionCollection(Sequence[AttributionResult]):
    """Results for a batch of inputs, in input order.

    Its methods read the results through ``len``, indexing and iteration only, so a subclass that reads them
    lazily (:class:`~interp_widgets.attribution.corpus.CorpusAttribution`, from files) overrides those three.

    Example:
        >>> from interp_widgets.attribution import IntegratedGradients
        >>> results = IntegratedGradients(progress=False).attribute(model, tokenizer, ["Great!", "Awful."])
        >>> results
        AttributionCollection(2 results, method='integrated_gradients')
        >>> results[0].method, len(results), [r.text for r in results]
        ('integrated_gradients', 2, ['Great!', 'Awful.'])
    """

    def __init__(self, results: Sequence[AttributionResult]):
        self.results = list(results)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return AttributionCollection(self.results[index])
        return self.results[index]

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[AttributionResult]:
        return iter(self.results)

    def aggregate(self, granularity: str = "word", how: str = "sum") -> AttributionCollection:
        """Aggregate every result (see :meth:`AttributionResult.aggregate`).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great food. Slow service.", "Awful."])
            >>> [r.tokens for r in results.aggregate("sentence")]
            [['Great food.', 'Slow service.'], ['Awful.']]
        """
        return AttributionCollection([r.aggregate(granularity, how) for r in self])

    def to_dataframe(self):
        """All results in one long table with an ``example`` column.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great!", "Awful."])
            >>> results.to_dataframe().groupby("example").score.sum().round(3)
            example
            0    6.257
            1    7.475
            Name: score, dtype: float64
        """
        import pandas as pd

        frames = [r.to_dataframe().assign(example=i) for i, r in enumerate(self)]
        return pd.concat(frames, ignore_index=True)

    def widget(self, **options):
        """A paged, sortable, filterable list of the examples (``options`` go to ``ExampleListWidget``).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great!", "Awful.", "Fine."])
            >>> type(results.widget(page_size=5, sort_by="confidence")).__name__
            'ExampleListWidget'
        """
        from interp_widgets.widgets import ExampleListWidget

        return ExampleListWidget(list(self), **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.widget()._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self):  # marimo's display protocol: shown as the view, through marimo's anywidget support
        return self.widget()

    def __repr__(self) -> str:
        method = self[0].method if len(self) else "?"
        return f"{type(self).__name__}({len(self)} results, method={method!r})"
