"""``SteeringResult``: the dose-response of a steering run, made of parts (run, generations, metric, damage).

A result holds, for each scale: the greedy generation, the behaviour metric on held-out prompts (one value per
prompt, so the mean and the spread) and the damage (mean KL(unsteered ‖ steered) on held-out text). It saves to one
``.safetensors`` file (arrays, with the rest as JSON in its header); nothing is pickled.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interp_widgets._files import output_path, read_saved

_FORMAT = "interp_widgets.SteeringResult"
_VERSION = 1


@dataclass
class SteeringRun:
    """What was steered and how: the ``prompt``, the canonical ``layer``, the ``direction`` as given (float32) and
    where it came from (``direction_label``), the scale ``unit`` (``"residual_norm"``: scales are multiples of
    ``residual_norm``, the mean norm of the activation at the layer, along the unit direction; ``"direction"``:
    multiples of the direction as given), ``positions`` (``"generated"`` or ``"all"``), ``max_new_tokens`` and
    ``damage_tokens`` (the tokens of held-out text the damage is averaged over).

    Example:
        >>> SteeringRun("Hi", "layer:1", np.ones(4, np.float32), "direction", "residual_norm", 2.0).vector(3.0).tolist()
        [3.0, 3.0, 3.0, 3.0]
    """

    prompt: str
    layer: str
    direction: np.ndarray
    direction_label: str
    unit: str
    residual_norm: float
    positions: str = "generated"
    max_new_tokens: int = 20
    damage_tokens: int = 4096

    def __post_init__(self):
        self.direction = np.asarray(self.direction, dtype=np.float32).reshape(-1)
        self.residual_norm = float(self.residual_norm)

    def vector(self, scale: float) -> np.ndarray:
        """The vector added at ``scale``: scale × residual_norm × d̂, or scale × direction (``unit="direction"``).

        Example:
            >>> SteeringRun("Hi", "layer:1", np.array([3.0, 4.0]), "d", "direction", 2.0).vector(2.0).tolist()
            [6.0, 8.0]
        """
        d = self.direction.astype(np.float64)
        if self.unit == "residual_norm":
            return (scale * self.residual_norm * d / np.linalg.norm(d)).astype(np.float32)
        return (scale * d).astype(np.float32)

    @property
    def scale_meaning(self) -> str:
        """What a scale means, in words.

        Example:
            >>> SteeringRun("Hi", "layer:1", np.ones(2), "d", "residual_norm", 2.5).scale_meaning
            'scale × mean residual norm at layer:1 (2.5) along the unit direction'
        """
        if self.unit == "residual_norm":
            return f"scale × mean residual norm at {self.layer} ({self.residual_norm:.4g}) along the unit direction"
        return "scale × the direction as given"


@dataclass
class SteeringGenerations:
    """The greedy generations: the prompt's tokens, the unsteered continuation and one continuation per scale,
    as token texts (decoded one by one) and ids.

    Example:
        >>> g = SteeringGenerations(["Hi"], [" a", " b"], [[" a", " c"]], [1, 2], [[1, 3]])
        >>> g.changed(0).tolist(), g.text(0)
        ([False, True], ' a c')
    """

    prompt_tokens: list[str]
    unsteered: list[str]
    steered: list[list[str]]
    unsteered_ids: list[int] = field(default_factory=list)
    steered_ids: list[list[int]] = field(default_factory=list)

    def changed(self, k: int) -> np.ndarray:
        """Which generated tokens of scale ``k`` differ from the unsteered run's token at the same place (a token
        past the unsteered run's end counts as changed).

        Example:
            >>> SteeringGenerations(["Hi"], [" a"], [[" a", " b"]], [1], [[1, 2]]).changed(0).tolist()
            [False, True]
        """
        ids, base = self.steered_ids[k], self.unsteered_ids
        return np.array([i >= len(base) or ids[i] != base[i] for i in range(len(ids))], dtype=bool)

    def text(self, k: int | None = None) -> str:
        """The continuation of scale ``k`` as text (None: the unsteered one).

        Example:
            >>> SteeringGenerations(["Hi"], [" a"], [[" b"]], [1], [[2]]).text()
            ' a'
        """
        return "".join(self.unsteered if k is None else self.steered[k])


@dataclass
class SteeringMetric:
    """The behaviour metric: its ``name``, its value on each eval prompt unsteered (``unsteered``, shape (prompts,))
    and per scale (``values``, (scales, prompts)).

    Example:
        >>> m = SteeringMetric("logit difference", np.array([0.0, 1.0]), np.array([[1.0, 3.0], [2.0, 2.0]]))
        >>> m.mean.tolist(), m.spread.tolist()
        ([2.0, 2.0], [1.4142135623730951, 0.0])
    """

    name: str
    unsteered: np.ndarray
    values: np.ndarray

    def __post_init__(self):
        self.unsteered = np.asarray(self.unsteered, dtype=np.float64).reshape(-1)
        self.values = np.asarray(self.values, dtype=np.float64).reshape(-1, self.unsteered.shape[0])

    @property
    def mean(self) -> np.ndarray:
        """The mean over prompts, per scale.

        Example:
            >>> SteeringMetric("m", np.zeros(2), np.array([[1.0, 3.0]])).mean.tolist()
            [2.0]
        """
        return self.values.mean(1)

    @property
    def spread(self) -> np.ndarray:
        """The standard deviation over prompts (ddof=1; 0 for a single prompt), per scale.

        Example:
            >>> SteeringMetric("m", np.zeros(1), np.array([[1.0], [2.0]])).spread.tolist()
            [0.0, 0.0]
        """
        if self.values.shape[1] < 2:
            return np.zeros(self.values.shape[0])
        return self.values.std(1, ddof=1)


@dataclass
class SteeringResult:
    """The dose-response of :func:`~interp_widgets.interventions.steer`: for each of ``scales``, the generation
    (``generations.steered[k]``), the behaviour metric (``metric``, None when no metric was asked for) and the
    ``damage`` (mean KL(unsteered ‖ steered) of the next-token distribution over ``run.damage_tokens`` tokens of
    held-out text, the vector at every position). ``run`` says what a scale means (``run.scale_meaning``).

    Example:
        >>> from interp_widgets.interventions import steer
        >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
        ...                damage_texts=texts, damage_tokens=16, progress=False)
        >>> result.to_dataframe().columns.tolist()
        ['scale', 'metric', 'metric_spread', 'damage', 'generation', 'changed_tokens']
    """

    run: SteeringRun
    scales: np.ndarray
    generations: SteeringGenerations
    metric: SteeringMetric | None
    damage: np.ndarray

    def __post_init__(self):
        self.scales = np.asarray(self.scales, dtype=np.float64).reshape(-1)
        self.damage = np.asarray(self.damage, dtype=np.float64).reshape(-1)
        n = len(self.scales)
        if len(self.damage) != n or len(self.generations.steered) != n:
            raise ValueError(
                f"a SteeringResult needs one damage value and one generation per scale ({n} scales), got "
                f"{len(self.damage)} and {len(self.generations.steered)}"
            )
        if self.metric is not None and self.metric.values.shape[0] != n:
            raise ValueError(f"the metric has {self.metric.values.shape[0]} rows of values for {n} scales")

    # ------------------------------------------------------------------ reading
    def to_dataframe(self):
        """One row per scale: ``scale``, ``metric`` (mean over prompts), ``metric_spread`` (their standard
        deviation), ``damage``, ``generation`` (the continuation's text) and ``changed_tokens`` (how many generated
        tokens differ from the unsteered run's).

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> result.to_dataframe()["changed_tokens"].tolist()[0]
            0
        """
        import pandas as pd

        nan = np.full(len(self.scales), np.nan)
        return pd.DataFrame(
            {
                "scale": self.scales,
                "metric": nan if self.metric is None else self.metric.mean,
                "metric_spread": nan if self.metric is None else self.metric.spread,
                "damage": self.damage,
                "generation": [self.generations.text(k) for k in range(len(self.scales))],
                "changed_tokens": [int(self.generations.changed(k).sum()) for k in range(len(self.scales))],
            }
        )

    def chart(self):
        """An altair dose-response chart: the metric (mean, with a ± one-spread band) and the damage against the
        scale, side by side.

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> len(result.chart().to_dict()["hconcat"])
            2
        """
        import altair as alt

        frame = self.to_dataframe().drop(columns=["generation"])
        frame = frame.assign(
            low=frame["metric"] - frame["metric_spread"], high=frame["metric"] + frame["metric_spread"]
        )
        x = alt.X(
            "scale:Q", title=f"scale ({'× mean residual norm' if self.run.unit == 'residual_norm' else '× direction'})"
        )
        base = alt.Chart(frame).encode(x=x)
        name = self.metric.name if self.metric is not None else "no metric"
        metric = (
            base.mark_area(opacity=0.25).encode(y="low:Q", y2="high:Q")
            + base.mark_line(point=True).encode(
                y=alt.Y("metric:Q", title=name),
                tooltip=["scale", alt.Tooltip("metric:Q", format=".3f"), alt.Tooltip("metric_spread:Q", format=".3f")],
            )
        ).properties(title="metric (mean ± spread over prompts)", width=260, height=200)
        damage = (
            base.mark_line(point=True, color="#d62728")
            .encode(
                y=alt.Y("damage:Q", title="KL(unsteered ‖ steered)"),
                tooltip=["scale", alt.Tooltip("damage:Q", format=".4f")],
            )
            .properties(title=f"damage ({self.run.damage_tokens} held-out tokens)", width=260, height=200)
        )
        return alt.hconcat(metric, damage).properties(title=f"steering at {self.run.layer}")

    # ------------------------------------------------------------------ display
    def widget(self, **options):
        """The steering view: the generations side by side with changed tokens marked, and the dose-response.

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> type(result.widget()).__name__
            'SteeringView'
        """
        from interp_widgets.widgets import SteeringView

        return SteeringView(self, **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.widget()._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self):  # marimo's display protocol
        return self.widget()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{s:g}</td><td>{'' if np.isnan(m) else f'{m:.3f} ± {sd:.3f}'}</td><td>{dmg:.4f}</td>"
            f"<td>{html.escape(text)}</td></tr>"
            for s, m, sd, dmg, text in self.to_dataframe()[
                ["scale", "metric", "metric_spread", "damage", "generation"]
            ].itertuples(index=False)
        )
        return (
            f"<div><b>steering at {html.escape(self.run.layer)}</b>: {html.escape(self.run.prompt)!s} "
            f"({html.escape(self.run.scale_meaning)})<table><tr><th>scale</th><th>metric</th><th>damage</th>"
            f"<th>generation</th></tr>{rows}</table></div>"
        )

    def __repr__(self) -> str:
        metric = "no metric" if self.metric is None else f"metric={self.metric.name!r}"
        return (
            f"SteeringResult({self.run.layer}, {len(self.scales)} scales {self.scales.tolist()}, unit="
            f"{self.run.unit!r}, {metric}, prompt={self.run.prompt!r})"
        )

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.safetensors`` file (arrays; the rest as JSON in its header). Never pickles.

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> again = SteeringResult.load(result.save(getfixture("tmp_path") / "steer.safetensors"))
            >>> again.generations == result.generations, bool(np.array_equal(again.damage, result.damage))
            (True, True)
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        g, r = self.generations, self.run
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "run": {
                "prompt": r.prompt,
                "layer": r.layer,
                "direction_label": r.direction_label,
                "unit": r.unit,
                "residual_norm": r.residual_norm,
                "positions": r.positions,
                "max_new_tokens": r.max_new_tokens,
                "damage_tokens": r.damage_tokens,
            },
            "generations": {
                "prompt_tokens": g.prompt_tokens,
                "unsteered": g.unsteered,
                "steered": g.steered,
                "unsteered_ids": g.unsteered_ids,
                "steered_ids": g.steered_ids,
            },
            "metric_name": None if self.metric is None else self.metric.name,
        }
        arrays = {"direction": r.direction, "scales": self.scales, "damage": self.damage}
        if self.metric is not None:
            arrays["metric_unsteered"] = self.metric.unsteered
            arrays["metric_values"] = self.metric.values
        arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        save_file(arrays, str(path), metadata={"interp_widgets": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> SteeringResult:
        """Read a result written by :meth:`save`.

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 1], max_new_tokens=3,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> SteeringResult.load(result.save(getfixture("tmp_path") / "s.safetensors")).scales.tolist()
            [0.0, 1.0]
        """
        meta, arrays = read_saved(path, name="SteeringResult", format=_FORMAT, versions=(_VERSION,))
        metric = None
        if meta["metric_name"] is not None:
            metric = SteeringMetric(meta["metric_name"], arrays["metric_unsteered"], arrays["metric_values"])
        return cls(
            run=SteeringRun(direction=arrays["direction"], **meta["run"]),
            scales=arrays["scales"],
            generations=SteeringGenerations(**meta["generations"]),
            metric=metric,
            damage=arrays["damage"],
        )
