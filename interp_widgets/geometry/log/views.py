"""Tables and charts of a :class:`~interp_widgets.geometry.log.geometry_log.GeometryLog`, built from its public reading API
(``steps``, ``series_names()``, ``series()``, ``layers``, ``x_label``, ``meta``). The series-name splitter is passed
in (``split``, :func:`~interp_widgets.geometry.log.geometry_log.split_series_name`), so that this module never imports
``history``, which imports it.

Example:
    >>> from interp_widgets.geometry import GeometryLog
    >>> log = GeometryLog(["layer:0"]); log.log(0, loss=1.0)
    >>> long_frame(log, lambda name: (name, None)).to_dict("records")
    [{'step': 0, 'layer': None, 'metric': 'loss', 'value': 1.0}]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["long_frame", "layer_chart"]


def long_frame(log, split: Callable[[str], tuple[str, str | None]]):
    """The long-format ``pandas.DataFrame`` of :meth:`GeometryLog.to_dataframe` (``step, layer, metric, value``).

    Example:
        >>> from interp_widgets.geometry import GeometryLog
        >>> log = GeometryLog(["layer:0"]); log.log(2, loss=0.5)
        >>> long_frame(log, lambda name: (name, None)).columns.tolist()
        ['step', 'layer', 'metric', 'value']
    """
    import pandas as pd

    frames = []
    steps = log.steps
    for name in log.series_names():
        values = log.series(name)[1]
        keep = ~np.isnan(values)
        if not keep.any():
            continue
        metric, layer = split(name)
        frames.append(
            pd.DataFrame(
                {
                    "step": steps[keep],
                    "layer": layer,
                    "metric": metric,
                    "value": values[keep],
                }
            )
        )
    if not frames:
        return pd.DataFrame(
            {
                "step": pd.Series(dtype="int64"),
                "layer": pd.Series(dtype="object"),
                "metric": pd.Series(dtype="object"),
                "value": pd.Series(dtype="float64"),
            }
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["layer"] = frame["layer"].astype(object).where(frame["layer"].notna(), None)
    return frame.sort_values(["step", "metric", "layer"], kind="stable", na_position="first").reset_index(drop=True)


def layer_chart(
    log,
    split: Callable[[str], tuple[str, str | None]],
    metric: str = "energy_ratio",
    layers: Iterable[str] | None = None,
):
    """The Altair chart of :meth:`GeometryLog.chart`: one per-layer metric against the step, one line per layer.

    Example:
        >>> from interp_widgets.geometry import GeometryLog
        >>> from interp_widgets.geometry.log.geometry_log import split_series_name
        >>> log = GeometryLog(["layer:0"]); log.record(0, {"energy_ratio|layer:0": 3.0})
        >>> type(layer_chart(log, split_series_name)).__name__
        'LayerChart'
    """
    import altair as alt
    import pandas as pd

    chosen = list(log.layers if layers is None else layers)
    unknown = [layer for layer in chosen if layer not in log.layers]
    if unknown:
        raise ValueError(f"unknown layers {unknown}; this record has {log.layers}")
    known = {split(n)[0] for n in log.series_names() if split(n)[1] is not None}
    if metric not in known:
        raise ValueError(f"no per-layer series {metric!r} recorded; available: {sorted(known)}")
    frame = log.to_dataframe()
    frame = frame[frame["layer"].isin(chosen)]
    lines = frame[frame["metric"] == metric]
    log_scale = metric == "energy_ratio" and bool((lines["value"] > 0).all())
    y = alt.Y("value:Q", title=metric, scale=alt.Scale(type="log") if log_scale else alt.Undefined)
    x = alt.X("step:Q", title=log.x_label)
    layered = [
        alt.Chart(lines).mark_line(point=True).encode(x=x, y=y, color="layer:N", tooltip=["step", "layer", "value"])
    ]
    if metric == "energy_ratio":
        wide = (
            frame[frame["metric"].isin(["control_ratio_q05", "control_ratio_q95"])]
            .pivot_table(index=["step", "layer"], columns="metric", values="value")
            .reset_index()
        )
        if {"control_ratio_q05", "control_ratio_q95"} <= set(wide.columns) and len(wide):
            layered.insert(
                0,
                alt.Chart(wide)
                .mark_area(opacity=0.15)
                .encode(
                    x=x,
                    y=alt.Y(
                        "control_ratio_q05:Q", title=metric, scale=alt.Scale(type="log") if log_scale else alt.Undefined
                    ),
                    y2="control_ratio_q95:Q",
                    color="layer:N",
                ),
            )
    window = log.meta.get("fit_window")
    if window:
        shade = pd.DataFrame({"start": [window[0]], "stop": [window[1]]})
        layered.insert(0, alt.Chart(shade).mark_rect(opacity=0.08, color="grey").encode(x="start:Q", x2="stop:Q"))
    return alt.layer(*layered).properties(title=f"{metric} per layer", width=480, height=240)
