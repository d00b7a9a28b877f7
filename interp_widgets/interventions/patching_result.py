"""The result of activation patching and attribution patching: :class:`PatchingResult`, made of parts.

- ``pair`` (:class:`PatchingPair`): the clean prompt's :class:`~interp_widgets.text_units.TokenLayout`, the corrupt
  prompt's tokens, the answer and foil (strings and ids, one per pair), the number of pairs and the scored position;
- ``setting`` (:class:`PatchingSetting`): the metric (``"logit_diff"``, ``"answer_prob"``, ``"kl"`` or
  ``"custom"``), the direction (``"denoise"``: corrupt run, clean value patched in; ``"noise"``: the reverse), the
  method (``"exact"`` or ``"attribution"``), the positions (``"each"`` or ``"all"``) and the model's name;
- ``baseline`` (:class:`PatchingBaseline`): the clean and corrupt metrics, their means and per-pair values;
- ``panels``: one :class:`PatchingPanel` per patched point type, in the order asked.

Values are normalised so that 0 = the corrupt run and 1 = the clean run, (M_patched − M_corrupt) / (M_clean −
M_corrupt), per pair and then averaged; in the noising direction the formula stays, so a LOW value means important.

Example:
    >>> panel = PatchingPanel("resid_pre", [0, 1], ["stream"], ["a", "b"], values=np.ones((2, 1, 2)))
    >>> panel.values.shape, panel.raw.dtype, panel.spread.max()
    ((2, 1, 2), dtype('float32'), np.float32(0.0))
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from interp_widgets._files import output_path, read_saved
from interp_widgets.interventions import patching_checks
from interp_widgets.text_units import TokenLayout
from interp_widgets.validation import check_choice

POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head", "q", "k", "v", "pattern")
METHODS = ("exact", "attribution")
POSITIONS = ("each", "all")
TOP_K = 5
_FORMAT = "interp_widgets.PatchingResult"
_VERSION = 1


@dataclass
class PatchingPanel:
    """One patched point type: ``values`` (normalised), ``raw`` (the metric of the patched run) and ``spread`` (the
    standard deviation of the normalised value over pairs, population: zeros for one pair), each (layers, units,
    positions), float32, means over pairs.

    ``layers`` are block indices; ``units`` the unit labels (``["stream"]`` for a residual or sublayer point,
    ``["H0", ...]`` for heads, queries and patterns, ``["KV0", ...]`` for keys and values); ``positions`` the clean
    tokens, or ``["all"]`` when every position was patched at once. ``top_ids`` (int64) and ``top_probs`` (float32),
    (layers, units, positions, 5), are the top 5 next tokens of each patched run at the scored position (None for
    attribution patching, which runs no patched model); ``vocab_ids`` (sorted unique ids of ``top_ids``) and
    ``top_tokens`` (their decoded strings) are the vocabulary table that labels them.

    Example:
        >>> panel = PatchingPanel("head", [0], ["H0", "H1"], ["all"], values=np.zeros((1, 2, 1)),
        ...                       top_ids=np.array([[[[7, 3, 1, 2, 5]]] * 2]), top_probs=np.full((1, 2, 1, 5), 0.2),
        ...                       vocab_ids=np.array([1, 2, 3, 5, 7]), top_tokens=["a", "b", "c", "d", "e"])
        >>> panel.token_of(7), panel.shape
        ('e', (1, 2, 1))
    """

    point: str
    layers: list[int]
    units: list[str]
    positions: list[str]
    values: np.ndarray
    raw: np.ndarray | None = None
    spread: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_probs: np.ndarray | None = None
    vocab_ids: np.ndarray | None = None
    top_tokens: list[str] = field(default_factory=list)

    def __post_init__(self):
        check_choice("point", self.point, POINTS)
        self.layers = [int(layer) for layer in self.layers]
        self.units = [str(unit) for unit in self.units]
        self.positions = [str(position) for position in self.positions]
        shape = self.shape
        self.values = np.asarray(self.values, dtype=np.float32)
        self.raw = np.full(shape, np.nan, np.float32) if self.raw is None else np.asarray(self.raw, dtype=np.float32)
        self.spread = np.zeros(shape, np.float32) if self.spread is None else np.asarray(self.spread, np.float32)
        for name in ("values", "raw", "spread"):
            if getattr(self, name).shape != shape:
                raise ValueError(
                    f"{name} has shape {getattr(self, name).shape}, but the panel is (layers, units, positions) = "
                    f"{shape}"
                )
        if (self.top_ids is None) != (self.top_probs is None):
            raise ValueError("top_ids and top_probs go together: give both or neither")
        if self.top_ids is not None:
            self.top_ids = np.asarray(self.top_ids, dtype=np.int64)
            self.top_probs = np.asarray(self.top_probs, dtype=np.float32)
            for name in ("top_ids", "top_probs"):
                if getattr(self, name).shape[:3] != shape or getattr(self, name).ndim != 4:
                    raise ValueError(f"{name} has shape {getattr(self, name).shape}, not {shape} + (top k,)")
        self.vocab_ids = None if self.vocab_ids is None else np.asarray(self.vocab_ids, dtype=np.int64).reshape(-1)
        self.top_tokens = [str(token) for token in self.top_tokens]
        if self.top_ids is not None:
            if self.vocab_ids is None or len(self.vocab_ids) != len(self.top_tokens):
                raise ValueError("top_ids need their vocabulary table: vocab_ids and top_tokens of the same length")
            if not np.isin(self.top_ids, self.vocab_ids).all():
                raise ValueError("top_ids holds ids missing from vocab_ids; pass the sorted unique ids of top_ids")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, units, positions)."""
        return len(self.layers), len(self.units), len(self.positions)

    def token_of(self, token_id: int) -> str:
        """The decoded string of a token id of ``top_ids``."""
        index = int(np.searchsorted(self.vocab_ids, token_id))
        if index >= len(self.vocab_ids) or self.vocab_ids[index] != token_id:
            raise KeyError(f"token id {token_id} is not among this panel's top tokens")
        return self.top_tokens[index]


@dataclass
class PatchingPair:
    """What was compared: the clean prompt's ``layout`` (its tokens label the positions), the first corrupt prompt's
    ``corrupt_tokens``, the ``answers`` / ``answer_ids`` and ``foils`` / ``foil_ids`` of every pair (the foils are
    None when the metric needs none), ``n_pairs`` and the scored ``position`` (the token whose next-token logits are
    scored; -1 for a classifier's class logits).

    Example:
        >>> from interp_widgets.text_units import joined_layout
        >>> pair = PatchingPair(joined_layout(["a", " b"]), ["a", " c"], [" d"], np.array([5]), None, None)
        >>> pair.n_pairs, pair.tokens
        (1, ['a', ' b'])
    """

    layout: TokenLayout
    corrupt_tokens: list[str]
    answers: list[str]
    answer_ids: np.ndarray
    foils: list[str] | None
    foil_ids: np.ndarray | None
    n_pairs: int = 1
    position: int = -1

    def __post_init__(self):
        self.corrupt_tokens = [str(t) for t in self.corrupt_tokens]
        self.answers = [str(a) for a in self.answers]
        self.answer_ids = np.asarray(self.answer_ids, dtype=np.int64).reshape(-1)
        self.foils = None if self.foils is None else [str(f) for f in self.foils]
        self.foil_ids = None if self.foil_ids is None else np.asarray(self.foil_ids, dtype=np.int64).reshape(-1)
        self.n_pairs, self.position = int(self.n_pairs), int(self.position)
        if len(self.answer_ids) != self.n_pairs or len(self.answers) != self.n_pairs:
            raise ValueError(f"{len(self.answer_ids)} answers for {self.n_pairs} pairs; pass one per pair")

    @property
    def tokens(self) -> list[str]:
        """The clean prompt's tokens."""
        return self.layout.tokens


@dataclass
class PatchingSetting:
    """How the patching was done: ``metric``, ``direction`` (``"denoise"`` | ``"noise"``), ``method``
    (``"exact"`` | ``"attribution"``), ``positions`` (``"each"`` | ``"all"``) and the ``model`` name.

    Example:
        >>> PatchingSetting("kl", "noise", "exact", "all").direction
        'noise'
    """

    metric: str
    direction: str = "denoise"
    method: str = "exact"
    positions: str = "each"
    model: str = ""

    def __post_init__(self):
        check_choice("metric", self.metric, ("logit_diff", "answer_prob", "kl", "custom"))
        check_choice("direction", self.direction, ("denoise", "noise"))
        check_choice("method", self.method, METHODS)
        check_choice("positions", self.positions, POSITIONS)


@dataclass
class PatchingBaseline:
    """The metric of the unpatched runs: ``clean_metrics`` and ``corrupt_metrics`` per pair, and their means.

    Example:
        >>> PatchingBaseline(np.array([3.0, 1.0]), np.array([0.0, -1.0])).clean_metric
        2.0
    """

    clean_metrics: np.ndarray
    corrupt_metrics: np.ndarray

    def __post_init__(self):
        self.clean_metrics = np.asarray(self.clean_metrics, dtype=np.float64).reshape(-1)
        self.corrupt_metrics = np.asarray(self.corrupt_metrics, dtype=np.float64).reshape(-1)

    @property
    def clean_metric(self) -> float:
        """The clean runs' metric, mean over pairs."""
        return float(self.clean_metrics.mean())

    @property
    def corrupt_metric(self) -> float:
        """The corrupt runs' metric, mean over pairs."""
        return float(self.corrupt_metrics.mean())


@dataclass
class PatchingResult:
    """Activation or attribution patching: ``pair``, ``setting``, ``baseline`` and one ``panels`` entry per point.

    Example:
        >>> from interp_widgets.interventions import activation_patching
        >>> result = activation_patching(lm, lm_tokenizer, "the cat sat on the", "the dog sat on the",
        ...                              answer=" the", foil=" on", progress=False)
        >>> result.points, result.panel("resid_pre").values.shape
        (['resid_pre'], (2, 1, 8))
        >>> again = PatchingResult.load(result.save(getfixture("tmp_path") / "patching.safetensors"))
        >>> bool(np.array_equal(again.panels[0].top_ids, result.panels[0].top_ids)), again.tokens == result.tokens
        (True, True)
    """

    pair: PatchingPair
    setting: PatchingSetting
    baseline: PatchingBaseline
    panels: tuple[PatchingPanel, ...]
    # attribution patching keeps its model and call here, in memory only, for verify() (never saved or compared)
    _rerun: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.panels = tuple(self.panels)
        points = [panel.point for panel in self.panels]
        if len(set(points)) != len(points):
            raise ValueError(f"the panels repeat a point: {points}; give one panel per point type")

    # ------------------------------------------------------------------ reading
    @property
    def points(self) -> list[str]:
        """The patched point types, in order."""
        return [panel.point for panel in self.panels]

    @property
    def tokens(self) -> list[str]:
        """The clean prompt's tokens (the position labels)."""
        return self.pair.tokens

    def panel(self, point: str) -> PatchingPanel:
        """The panel of one point type.

        Example:
            >>> from interp_widgets.interventions import activation_patching
            >>> result = activation_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on",
            ...                              foil=" the", progress=False)
            >>> result.panel("head")
            Traceback (most recent call last):
            ...
            KeyError: "no 'head' panel; this result holds ['resid_pre']"
        """
        for panel in self.panels:
            if panel.point == point:
                return panel
        raise KeyError(f"no {point!r} panel; this result holds {self.points}")

    def to_dataframe(self):
        """One row per (point, layer, unit, position): ``point``, ``layer``, ``unit``, ``position`` (the token index,
        -1 for ``"all"``), ``token``, ``value`` (normalised), ``raw`` and ``spread``, and ``top1`` / ``top1_prob``
        when the patched runs' top tokens are known.

        Example:
            >>> from interp_widgets.interventions import activation_patching
            >>> result = activation_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on",
            ...                              foil=" the", points=("resid_pre", "head"), progress=False)
            >>> frame = result.to_dataframe()
            >>> len(frame), list(frame.columns[:8])
            (36, ['point', 'layer', 'unit', 'position', 'token', 'value', 'raw', 'spread'])
        """
        import pandas as pd

        frames = []
        for panel in self.panels:
            n_layers, n_units, n_positions = panel.shape
            layer, unit, position = np.meshgrid(
                np.arange(n_layers), np.arange(n_units), np.arange(n_positions), indexing="ij"
            )
            layer, unit, position = layer.reshape(-1), unit.reshape(-1), position.reshape(-1)
            every = panel.positions == ["all"]
            columns = {
                "point": panel.point,
                "layer": np.asarray(panel.layers, dtype=np.int64)[layer],
                "unit": np.asarray(panel.units, dtype=object)[unit],
                "position": np.full(len(position), -1) if every else position,
                "token": np.asarray(panel.positions, dtype=object)[position],
                "value": panel.values.reshape(-1),
                "raw": panel.raw.reshape(-1),
                "spread": panel.spread.reshape(-1),
            }
            if panel.top_ids is not None:
                top = panel.top_ids[..., 0].reshape(-1)
                index = np.searchsorted(panel.vocab_ids, top)
                columns["top1"] = np.asarray(panel.top_tokens, dtype=object)[index]
                columns["top1_prob"] = panel.top_probs[..., 0].reshape(-1)
            frames.append(pd.DataFrame(columns))
        if not frames:
            return pd.DataFrame(columns=["point", "layer", "unit", "position", "token", "value", "raw", "spread"])
        return pd.concat(frames, ignore_index=True)

    def chart(self, point: str | None = None, value: str = "value"):
        """An altair heatmap of one panel (the first by default): layers × positions for a point with one unit,
        layers × units for heads patched at all positions, else one row of layers × positions per unit. ``value``:
        ``"value"`` (normalised) or ``"raw"``.

        Example:
            >>> from interp_widgets.interventions import activation_patching
            >>> result = activation_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on",
            ...                              foil=" the", progress=False)
            >>> result.chart().to_dict()["mark"]["type"]
            'rect'
        """
        import altair as alt

        check_choice("value", value, ("value", "raw"))
        panel = self.panels[0] if point is None else self.panel(point)
        frame = self.to_dataframe()
        frame = frame[frame["point"] == panel.point]
        frame = frame.assign(label=[f"{p}: {t}" if p >= 0 else t for p, t in zip(frame["position"], frame["token"])])
        across_units = len(panel.units) > 1 and len(panel.positions) == 1
        x = ("unit:N", panel.units, "unit") if across_units else ("label:N", list(dict.fromkeys(frame["label"])), "")
        tooltip = ["layer", "unit", "position", "token", alt.Tooltip("value:Q", format=".3f"),
                   alt.Tooltip("raw:Q", format=".4g"), alt.Tooltip("spread:Q", format=".3f")]  # fmt: skip
        chart = (
            alt.Chart(frame)
            .mark_rect()
            .encode(
                x=alt.X(x[0], sort=x[1], title=x[2] or "position"),
                y=alt.Y("layer:O", sort="descending"),
                color=alt.Color(
                    f"{value}:Q",
                    scale=alt.Scale(scheme="redblue", domainMid=0 if value == "value" else None, reverse=True),
                ),
                tooltip=tooltip,
            )
        )
        if len(panel.units) > 1 and not across_units:
            chart = chart.encode(row=alt.Row("unit:N", sort=panel.units))
        low = " (noising: low = important)" if self.setting.direction == "noise" else ""
        return chart.properties(title=f"{self.setting.method} patching, {panel.point}: {value}{low}")

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        return (
            f"PatchingResult({self.setting.method}, {self.setting.direction}, metric={self.setting.metric}, "
            f"points={self.points}, {len(self.tokens)} tokens, {self.pair.n_pairs} pair(s))"
        )

    def _repr_html_(self) -> str:
        escape = html.escape
        rows = "".join(
            f"<tr><td>{escape(p.point)}</td><td>{len(p.layers)} × {len(p.units)} × {len(p.positions)}</td>"
            f"<td>{float(np.nanmax(p.values)) if p.values.size else float('nan'):.3f}</td></tr>"
            for p in self.panels
        )
        setting = self.setting
        return (
            f"<div><b>PatchingResult</b> ({escape(setting.method)}, {escape(setting.direction)}, metric "
            f"{escape(setting.metric)}): clean {self.baseline.clean_metric:.4g}, corrupt "
            f"{self.baseline.corrupt_metric:.4g}, answer {escape(' / '.join(dict.fromkeys(self.pair.answers)))}"
            f"<br>prompt: {escape(''.join(self.tokens))}"
            f"<table><tr><th>point</th><th>layers × units × positions</th><th>max value</th></tr>{rows}</table></div>"
        )

    def widget(self, compare: "PatchingResult | None" = None, **options: object):
        """The patching view (:class:`~interp_widgets.widgets.PatchingView`): a heatmap per point type; hover shows
        a cell's value and raw metric, a click its patched run's top-5 next tokens (no kernel needed). ``compare``
        puts another result of the same pair beside it (e.g. attribution against exact patching), with their
        agreement (``agreement=``, or computed; see :func:`~interp_widgets.interventions.patching_view.patching_view`).

        Example:
            >>> from interp_widgets.interventions._patching_examples import tiny_patching_result
            >>> tiny_patching_result().widget(scale="raw")
            PatchingView(1 result, panels=['resid_pre'], 2 layers × 3 positions, scale='raw')
        """
        from interp_widgets.interventions.patching_view import patching_view

        return patching_view(self, compare, **options)

    # ------------------------------------------------------------------ persistence
    _PANEL_ARRAYS = ("values", "raw", "spread", "top_ids", "top_probs", "vocab_ids")
    _LAYOUT_ARRAYS = ("offsets", "special_mask", "word_ids", "sentence_ids", "turn_ids")

    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.safetensors`` file: the arrays in its body, the rest as JSON in its header.
        Never pickles. (See the class example.)"""
        from safetensors.numpy import save_file

        path = output_path(path)
        layout = self.pair.layout
        arrays = {f"layout.{name}": np.ascontiguousarray(getattr(layout, name)) for name in self._LAYOUT_ARRAYS}
        arrays["layout.special_mask"] = arrays["layout.special_mask"].astype(np.uint8)
        arrays["pair.answer_ids"] = self.pair.answer_ids
        if self.pair.foil_ids is not None:
            arrays["pair.foil_ids"] = self.pair.foil_ids
        arrays["baseline.clean_metrics"] = self.baseline.clean_metrics
        arrays["baseline.corrupt_metrics"] = self.baseline.corrupt_metrics
        panels = []
        for i, panel in enumerate(self.panels):
            for name in self._PANEL_ARRAYS:
                if getattr(panel, name) is not None:
                    arrays[f"panels.{i}.{name}"] = np.ascontiguousarray(getattr(panel, name))
            panels.append(
                {name: getattr(panel, name) for name in ("point", "layers", "units", "positions", "top_tokens")}
            )
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "layout": {
                "text": layout.text,
                "tokens": layout.tokens,
                "turn_roles": layout.turn_roles,
                "messages": layout.messages,
            },  # fmt: skip
            "pair": {
                name: getattr(self.pair, name) for name in ("corrupt_tokens", "answers", "foils", "n_pairs", "position")
            },
            "setting": {f.name: getattr(self.setting, f.name) for f in fields(PatchingSetting)},
            "panels": panels,
        }
        save_file(arrays, str(path), metadata={"interp_widgets": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "PatchingResult":
        """Read a result written by :meth:`save` (see the class example)."""
        meta, arrays = read_saved(path, name="PatchingResult", format=_FORMAT, versions=(_VERSION,))
        layout_arrays = {name: arrays[f"layout.{name}"] for name in cls._LAYOUT_ARRAYS}
        layout_arrays["special_mask"] = layout_arrays["special_mask"].astype(bool)
        layout = TokenLayout(**meta["layout"], **layout_arrays)
        pair = PatchingPair(
            layout, answer_ids=arrays["pair.answer_ids"], foil_ids=arrays.get("pair.foil_ids"), **meta["pair"]
        )
        panels = tuple(
            PatchingPanel(**info, **{name: arrays.get(f"panels.{i}.{name}") for name in cls._PANEL_ARRAYS})
            for i, info in enumerate(meta["panels"])
        )
        baseline = PatchingBaseline(arrays["baseline.clean_metrics"], arrays["baseline.corrupt_metrics"])
        return cls(pair, PatchingSetting(**meta["setting"]), baseline, panels)

    # ------------------------------------------------------------------ checking an estimate
    def agreement(self, exact: "PatchingResult", k: int = 20) -> patching_checks.PatchingAgreement:
        """How well this result (an attribution patching estimate) agrees with ``exact`` (activation patching with
        the same metric, direction and positions): per shared point type, the Spearman correlation of the cells'
        effects and the overlap of their top ``k`` cells by |effect|
        (:class:`~interp_widgets.interventions.patching_checks.PatchingAgreement`, with ``.to_dataframe()``).

        Example:
            >>> from interp_widgets.interventions import activation_patching, attribution_patching
            >>> args = (lm, lm_tokenizer, "the cat sat", "the dog sat")
            >>> estimate = attribution_patching(*args, answer=" on", foil=" the", points=("resid_pre", "head"))
            >>> exact = activation_patching(*args, answer=" on", foil=" the", points=("resid_pre", "head"),
            ...                             progress=False)
            >>> estimate.agreement(exact, k=5).to_dataframe()["point"].tolist()
            ['resid_pre', 'head']
        """
        return patching_checks.agreement(self, exact, k)

    def verify(
        self, top_k: int = 20, *, sample: int | None = None, seed: int = 0
    ) -> patching_checks.PatchingVerification:
        """Re-run exactly this attribution patching result's ``top_k`` cells of largest estimated |effect|, and
        ``sample`` (default ``top_k``) cells drawn at random from the rest, to catch what the linear estimate
        misses (saturated attention, cancelling paths: AtP*). Needs the model: the result of
        :func:`~interp_widgets.interventions.attribution_patching` keeps a reference to its model, tokenizer and
        prompts in memory only, so a loaded result cannot be verified (re-run it). Returns a
        :class:`~interp_widgets.interventions.patching_checks.PatchingVerification` (estimate vs exact per cell,
        ``false_negatives``, ``.to_dataframe()``).

        Example:
            >>> from interp_widgets.interventions import attribution_patching
            >>> estimate = attribution_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on",
            ...                                 foil=" the", points=("resid_pre", "head"))
            >>> estimate.verify(top_k=4).to_dataframe()["chosen"].tolist()
            ['top', 'top', 'top', 'top', 'sample', 'sample', 'sample', 'sample']
        """
        return patching_checks.verify(self, top_k, sample=sample, seed=seed)
