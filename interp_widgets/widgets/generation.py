"""Generation attribution: prompt and generated tokens with their probabilities, sources of each generated token,
and a source × target heatmap drawn on canvas.

Example:
    >>> from interp_widgets.attribution import IntegratedGradients
    >>> generation = IntegratedGradients().attribute(lm, lm_tokenizer, "The hotel was", max_new_tokens=3)
    >>> GenerationWidget(generation)  # doctest: +ELLIPSIS
    GenerationWidget(method='integrated_gradients', 8 tokens, generated='cth)', step 0: 'c', top sources: 'ot' +1.52, ...)
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, ClassVar

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import FoilsPart, GenerationData, GenerationLayoutPart, GenerationStepsPart
from interp_widgets.widgets._colour import format_score, score_colours
from interp_widgets.widgets._svg import MAX_STATIC_TOKENS, SvgFigure, TokenPiece, unseen_colours
from interp_widgets.text_units import display_units
from interp_widgets.widgets._tokens import (
    ChatTurns,
    GroupedTokens,
    TokenScoresWidget,
    display_token,
    finite_max,
    magnitude_ranks,
    role_piece,
    role_starts,
    token_data,
)
from interp_widgets.validation import check_choice

VIEWS = ("text", "heatmap")
_DIFFERENCES = {
    "log_probability": "log p(target) − log p(foil)",
    "probability": "p(target) − p(foil)",
    "logit": "logit(target) − logit(foil)",
}
MAX_STATIC_STEPS = 40  # heatmap rows drawn in the static picture
MAX_STATIC_SOURCES = 240  # heatmap columns drawn in the static picture


def _step_tokens(result: Any, n_tokens: int, n_steps: int) -> tuple[np.ndarray, list[int]]:
    generated = np.asarray(result.generated_mask, dtype=bool).reshape(-1)
    if generated.shape != (n_tokens,):
        raise ValueError(f"generated_mask has {generated.size} entries for {n_tokens} tokens; pass one per token")
    positions = getattr(result, "target_positions", None)
    if positions is not None:
        steps = (np.asarray(positions, dtype=np.int64).reshape(-1) + 1).tolist()  # a target predicts the next token
    else:
        steps = np.flatnonzero(generated).tolist()
    if len(steps) != n_steps:
        raise ValueError(
            f"{n_steps} rows of scores but {len(steps)} generated tokens; a generation result has one row per "
            "generated token"
        )
    if any(not 0 <= s < n_tokens or not generated[s] for s in steps):
        raise ValueError("target_positions must point just before generated tokens (target_positions + 1 is generated)")
    return generated, steps


def _foils(result: Any, n_steps: int) -> tuple[list[str], list[float | None], str]:
    """The foil token and probability of each step, and the foil continuation (all empty without a contrast)."""
    labels = getattr(result, "foil_labels", None)
    if labels is None:
        return [], [], ""
    labels = [str(label) for label in labels]
    if len(labels) != n_steps:
        raise ValueError(
            f"foil_labels has {len(labels)} entries for {n_steps} generated tokens; pass one foil per step"
        )
    probs = getattr(result, "foil_probs", None)
    probs = (
        [] if probs is None else [float(p) if math.isfinite(p) else None for p in np.asarray(probs, float).reshape(-1)]
    )
    if probs and len(probs) != n_steps:
        raise ValueError(f"foil_probs has {len(probs)} entries for {n_steps} generated tokens; pass one per step")
    return labels, probs, str(getattr(result, "contrast", None) or "")


def _source_mask(result: Any, n_tokens: int) -> np.ndarray:
    """True for the source tokens of an encoder–decoder result (all False for a decoder's generation)."""
    mask = getattr(result, "source_mask", None)
    if mask is None:
        return np.zeros(n_tokens, bool)
    mask = np.asarray(mask, dtype=bool).reshape(-1)
    if mask.shape != (n_tokens,):
        raise ValueError(f"source_mask has {mask.size} entries for {n_tokens} tokens; pass one per token")
    return mask


def _log_ratio(p: float | None, q: float | None) -> float | None:
    """``ln(p / q)``: log p(target) − log p(foil), when both probabilities are known and positive."""
    if p is None or q is None or p <= 0 or q <= 0:
        return None
    return math.log(p) - math.log(q)


class GenerationWidget(TokenScoresWidget, GroupedTokens, ChatTurns, data=GenerationData):
    """Prompt + generated tokens; pick a generated token to colour the sources it was attributed to.

    For a chat conversation each turn starts with its role's label (the default system prompt a template inserts
    included), and the template's own tokens are folded away like every special prompt token.

    ``granularity`` (``"token"``, ``"word"``, ``"sentence"`` or ``"turn"``) colours every token with the summed score
    of its unit. An encoder–decoder result shows its two sides, the source and the target, each with its own units (a
    word or sentence never spans both); the heatmap marks the boundary.

    Each generated token shows its probability. Hovering a generated token previews its sources, clicking (or Enter)
    selects it; a canvas heatmap (rows: generated tokens, columns: all tokens) shows every step at once, with hover
    values. ``selected_step`` (row of ``scores``), ``selected_token`` and ``view`` sync back to Python.

    A contrastive result (``contrast=``) shows each generated token beside its foil: one chip per step with the
    pair, their probabilities and ``ln(p/p′)``. Its signed scores explain the difference: positive sources push the
    model towards the generated token, negative ones towards the foil.

    Example:
        >>> from interp_widgets.attribution import IntegratedGradients
        >>> generation = IntegratedGradients().attribute(lm, lm_tokenizer, "The hotel was", max_new_tokens=3)
        >>> widget = generation.widget()  # a result with generated_mask gives a GenerationWidget
        >>> widget.selected_step = 2
        >>> [(i, token, round(score, 2)) for i, token, score in widget.step_sources()[:3]]
        [(1, 'h', 0.47), (2, 'ot', -0.46), (6, 'th', 0.43)]
    """

    _payload_schema: ClassVar[dict[str, Any]] = {"view": {"enum": list(VIEWS)}}

    shared_scale = traitlets.Bool(False, help="One colour scale for all steps instead of one per step.").tag(sync=True)
    high_contrast = traitlets.Bool(False).tag(sync=True)
    view = traitlets.Unicode("text", help="'text' (coloured tokens) or 'heatmap' (canvas, all steps).").tag(sync=True)
    selected_step = traitlets.Int(0, help="Generated token (row of scores) whose sources are coloured.").tag(sync=True)

    def __init__(self, result: Any, *, selected_step: int = 0, view: str = "text", **kwargs: Any) -> None:
        if getattr(result, "generated_mask", None) is None:
            raise ValueError("this result has no generated tokens (generated_mask is None); use TokenHighlightWidget")
        tokens = token_data(result)
        generated, steps = _step_tokens(result, len(tokens.tokens), len(tokens.target_labels))
        foil_tokens, foil_probs, contrast = _foils(result, len(steps))
        meaning = tokens.score_meaning
        if foil_tokens:
            score = (getattr(result, "params", None) or {}).get("score", "log_probability")
            meaning = f"{meaning}; explains {_DIFFERENCES.get(score, 'score(target) − score(foil)')}".lstrip("; ")
        data = GenerationData(
            layout=GenerationLayoutPart(**dataclasses.asdict(tokens.layout)),
            steps=GenerationStepsPart(generated_mask=generated, step_tokens=steps, step_probs=tokens.target_probs),
            scoring=dataclasses.replace(tokens.scoring, score_meaning=meaning),
            foils=FoilsPart(foil_tokens=foil_tokens, foil_probs=foil_probs, contrast=contrast),
            source_mask=_source_mask(result, len(tokens.tokens)),
        )  # fmt: skip
        super().__init__(**data.to_traits(), selected_step=selected_step, view=view, **kwargs)

    # ----------------------------------------------------------------- validation
    @traitlets.validate("view")
    def _check_view(self, proposal):
        return check_choice("view", proposal["value"], VIEWS)

    @traitlets.validate("selected_step")
    def _check_step(self, proposal):
        n = len(self.step_tokens)
        if not 0 <= proposal["value"] < n:
            raise ValueError(
                f"selected_step {proposal['value']} is out of range; there are {n} generated tokens (0..{n - 1})"
            )
        return proposal["value"]

    # ----------------------------------------------------------------- state

    def step_sources(self) -> list[tuple[int, str, float]]:
        """Sources of the selected step, most important first: ``(token index, token, score)``, NaN excluded.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> widget = GenerationWidget(Saliency().attribute(lm, lm_tokenizer, "The hotel was", max_new_tokens=3))
            >>> index, token, score = widget.step_sources()[0]
            >>> index, token, round(score, 2)
            (2, 'ot', 2.87)
        """
        row = self.score_matrix()[self.selected_step].astype(np.float64)
        visible = [i for i in range(len(row)) if not math.isnan(row[i])]
        return [(i, self.tokens[i], float(row[i])) for i in sorted(visible, key=lambda i: -abs(row[i]))]

    def unit_matrix(self) -> np.ndarray:
        """The scores as drawn at the current ``granularity``: every token carries the summed score of its unit
        (NaN only where all the unit's tokens are), ``(steps, tokens)`` float64; the token scores at ``"token"``.

        Example:
            >>> from interp_widgets.attribution import InputXGradient
            >>> r = InputXGradient().attribute(seq2seq, seq2seq_tokenizer, "The room was clean.", continuation=" The room.")
            >>> widget = r.widget(granularity="sentence")
            >>> int(widget.source_mask.sum()), widget.unit_matrix()[0, :6].round(3).tolist()  # one source sentence
            (7, [-0.083, -0.083, -0.083, -0.083, -0.083, -0.083])
        """
        matrix = self.score_matrix().astype(np.float64)
        if self.granularity == "token":
            return matrix
        out = matrix.copy()
        for unit in display_units(
            self.special_mask,
            self.word_ids,
            self.sentence_ids,
            self.granularity,
            show_special=True,
            turn_ids=self.turn_ids,
        ):
            block = matrix[:, unit]
            seen = ~np.isnan(block)
            out[:, unit] = np.where(seen.any(1), np.where(seen, block, 0).sum(1), np.nan)[:, None]
        return out

    def _scale_max(self) -> float:
        matrix = self.unit_matrix()
        content = ~np.asarray(self.special_mask, dtype=bool)  # hidden template tokens do not set the scale
        matrix = matrix[:, content] if content.any() else matrix
        return finite_max(matrix if self.shared_scale else matrix[self.selected_step])

    # ----------------------------------------------------------------- display
    def static_svg(self) -> str:
        """Tokens coloured by the selected step's sources (generated tokens annotated with their probability),
        the legend, and the source × target heatmap.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> widget = GenerationWidget(Saliency().attribute(lm, lm_tokenizer, "The hotel was", max_new_tokens=3))
            >>> svg = widget.static_svg()
            >>> svg.startswith("<svg"), "Sources of generated token 'c'" in svg
            (True, True)
        """
        matrix = self.unit_matrix()
        step = self.selected_step
        row, max_abs = matrix[step], self._scale_max()
        special = self.special_mask
        step_of = {index: s for s, index in enumerate(self.step_tokens)}
        chosen = self.step_tokens[step]
        ranks = magnitude_ranks(row)
        figure = SvgFigure(label=f"Sources of generated token {self.tokens[chosen]!r}")
        prob = self.step_probs[step] if self.step_probs else None
        foil = self.foil_tokens[step] if self.foil_tokens else None
        foil_prob = self.foil_probs[step] if self.foil_probs else None
        rather = (
            ""
            if foil is None
            else f" rather than {json.dumps(foil, ensure_ascii=False)}"
            + (f" (p = {100 * foil_prob:.1f}%)" if foil_prob is not None else "")
        )
        figure.text(
            f"generated token {step + 1} of {len(self.step_tokens)}: {json.dumps(self.tokens[chosen], ensure_ascii=False)}"
            + (f" (p = {100 * prob:.1f}%)" if prob is not None else "") + rather + " · its sources are coloured",
            bold=True,
        )  # fmt: skip
        if foil is not None:
            shown = self.contrast if len(self.contrast) <= 60 else self.contrast[:59] + "\u2026"
            figure.text(
                f"contrast: why each generated token rather than its foil (foil continuation "
                f"{json.dumps(shown, ensure_ascii=False)})",
                size=11,
                colour="#57606a",
            )
            figure.text(
                "orange pushes towards the generated token, blue towards the foil"
                if self.signed
                else "scores are magnitudes (unsigned): how strongly a source moves the difference",
                size=11,
                colour="#57606a",
            )
            figure.mono_lines(self._pair_lines()[:MAX_STATIC_STEPS], size=11)
        pieces = []
        shown = [i for i in range(len(self.tokens)) if not special[i]][:MAX_STATIC_TOKENS]
        roles = role_starts([[i] for i in shown], self.turn_ids, special, self.turn_roles)
        sides = bool(np.asarray(self.source_mask).any())
        for k, i in enumerate(shown):
            if sides and (k == 0 or self.source_mask[i] != self.source_mask[shown[k - 1]]):
                if pieces:
                    figure.tokens(pieces)
                    pieces = []
                figure.text(
                    "source (encoder)" if self.source_mask[i] else "target (decoder)", size=11, colour="#57606a"
                )
            if k in roles:
                pieces.append(role_piece(roles[k], first=k == 0))
            score = float(row[i])
            if math.isnan(score):
                background, colour = unseen_colours()
                note = "not visible to this step"
            else:
                background, colour = score_colours(score, max_abs, self.signed)
                note = f"score {format_score(score, 6, self.signed)}, rank {ranks[i]} of {len(ranks)}"
            label = ""
            if i in step_of and self.step_probs and self.step_probs[step_of[i]] is not None:
                label = f"{100 * self.step_probs[step_of[i]]:.0f}%"
            gap = (self.spaces_before[i].lstrip("\r\n") or " ") if k in roles else self.spaces_before[i]
            pieces.append(TokenPiece(gap, display_token(self.tokens[i]), background, colour,
                                     f"{json.dumps(self.tokens[i], ensure_ascii=False)}: {note}", note=label,
                                     outline=i == chosen))  # fmt: skip
        non_special = int((~special).sum())
        figure.tokens(pieces, omitted=non_special - len(shown))
        scale = ", scale shared by all steps" if self.shared_scale else ""
        target = "the selected token" if foil is None else "the selected token rather than its foil"
        figure.legend(max_abs, signed=self.signed, title=f"attribution to {target}{scale}")
        figure.text("source × generated-token heatmap (each row scaled to its own maximum)", size=11, colour="#57606a")
        cells = []
        for s in range(min(len(self.step_tokens), MAX_STATIC_STEPS)):
            values, target = matrix[s], self.tokens[self.step_tokens[s]]
            content = ~np.asarray(self.special_mask, dtype=bool)
            row_max = finite_max(values[content] if content.any() else values)
            cells.append([
                (unseen_colours()[0], f"{self.tokens[i]!r} → {target!r}: not visible") if math.isnan(v)
                else (score_colours(float(v), row_max, self.signed)[0],
                      f"{self.tokens[i]!r} → {target!r}: {format_score(float(v), 6, self.signed)}")
                for i, v in enumerate(values[:MAX_STATIC_SOURCES])
            ])  # fmt: skip
        figure.heatmap(cells, [self._step_label(s) for s in range(len(cells))])
        if len(self.step_tokens) > MAX_STATIC_STEPS or len(self.tokens) > MAX_STATIC_SOURCES:
            figure.text(
                f"(heatmap shows at most {MAX_STATIC_STEPS} steps × {MAX_STATIC_SOURCES} tokens)",
                size=11,
                colour="#57606a",
            )
        if self.method:
            figure.text(
                f"method: {self.method}" + (f" · score: {self.score_meaning}" if self.score_meaning else ""),
                size=11,
                colour="#57606a",
            )
        return figure.render()

    def _step_label(self, step: int) -> str:
        """A heatmap row label: the generated token, and its foil for a contrastive result."""
        token = self.tokens[self.step_tokens[step]]
        return f"{token} vs {self.foil_tokens[step]}" if self.foil_tokens else token

    def _pair_lines(self) -> list[str]:
        """One line per step of a contrastive result: target and foil, their probabilities and ln(p/p′)."""
        lines = []
        for s, index in enumerate(self.step_tokens):
            p = self.step_probs[s] if self.step_probs else None
            q = self.foil_probs[s] if self.foil_probs else None
            ratio = _log_ratio(p, q)
            lines.append(
                f"{s + 1:>3}. {json.dumps(self.tokens[index], ensure_ascii=False)}"
                + (f" {100 * p:.1f}%" if p is not None else "")
                + f" vs {json.dumps(self.foil_tokens[s], ensure_ascii=False)}" + (f" {100 * q:.1f}%" if q is not None else "")
                + ("" if ratio is None else f"   ln(p/p′) = {format_score(ratio, 3, True)}")
            )  # fmt: skip
        return lines

    def step_pairs(self) -> list[tuple[str, str, float | None]]:
        """Each step's ``(generated token, foil, ln(p/p′))`` for a contrastive result (empty without a contrast).

        Example:
            >>> from interp_widgets.attribution import InputXGradient
            >>> why = InputXGradient().attribute(lm, lm_tokenizer, "The room was", continuation=" clean", contrast=" cold")
            >>> [(target, foil) for target, foil, _ in why.widget().step_pairs()]
            [(' cle', ' co'), ('an', 'ld')]
        """
        return [(self.tokens[index], self.foil_tokens[s],
                 _log_ratio(self.step_probs[s] if self.step_probs else None, self.foil_probs[s] if self.foil_probs else None))
                for s, index in enumerate(self.step_tokens) if self.foil_tokens]  # fmt: skip

    def __repr__(self) -> str:
        step = self.selected_step
        top = ", ".join(f"{tok!r} {format_score(score, sign=self.signed)}" for _, tok, score in self.step_sources()[:3])
        generated = "".join(self.tokens[i] for i in self.step_tokens)
        foil = f" rather than {self.foil_tokens[step]!r}" if self.foil_tokens else ""
        return (
            f"GenerationWidget(method={self.method!r}, {len(self.tokens)} tokens, generated={generated!r}, "
            f"step {step}: {self.tokens[self.step_tokens[step]]!r}{foil}, top sources: {top})"
        )
