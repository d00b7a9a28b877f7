"""The steering view on a hand-made SteeringResult (no model): data, escaping, toggles, static SVG, export."""

from __future__ import annotations

import json

import numpy as np
import pytest
import traitlets

from interp_widgets.interventions.steering_result import (
    SteeringGenerations,
    SteeringMetric,
    SteeringResult,
    SteeringRun,
)
from interp_widgets.widgets import SteeringView
from interp_widgets.widgets.view_data import SteeringData


def _steering_result(metric: bool = True) -> SteeringResult:
    """Three scales; scale 2 changes the second token to an HTML-looking one."""
    return SteeringResult(
        run=SteeringRun("The <b>room</b> &", "layer:1", np.ones(4, np.float32), "direction", "residual_norm", 2.5),
        scales=[-2.0, 0.0, 2.0],
        generations=SteeringGenerations(
            prompt_tokens=["The", " <b>room</b>", " &"],
            unsteered=[" was", " quiet"],
            steered=[[" was", " quiet"], [" was", " quiet"], [" was", "<script>x</script>", "!"]],
            unsteered_ids=[5, 6],
            steered_ids=[[5, 6], [5, 6], [5, 9, 10]],
        ),
        metric=SteeringMetric("logit difference", [0.0, 1.0], [[-1.0, -3.0], [0.0, 1.0], [2.0, 4.0]])
        if metric
        else None,
        damage=[0.5, 0.0, 0.7],
    )


def test_the_view_data_holds_each_scale_with_changed_tokens_and_the_dose_response():
    view = SteeringView(_steering_result())
    assert view.changed == [[False, False], [False, False], [False, True, True]]
    assert view.steered_tokens[2][1] == "<script>x</script>"
    np.testing.assert_allclose(view.metric_mean, [-2.0, 0.5, 3.0])
    np.testing.assert_allclose(view.metric_spread, [np.sqrt(2), np.sqrt(0.5), np.sqrt(2)], rtol=1e-6)
    np.testing.assert_allclose(view.damage, [0.5, 0.0, 0.7])
    assert view.scale_meaning.startswith("scale × mean residual norm at layer:1 (2.5)")
    assert repr(view) == "SteeringView(layer:1, scales [-2.0, 0.0, 2.0], metric='logit difference', 0 hidden)"


def test_without_a_metric_the_metric_is_nan_and_the_view_still_builds():
    view = SteeringView(_steering_result(metric=False))
    assert np.isnan(view.metric_mean).all() and view.metric_name == ""
    assert "no metric" in view.static_svg()


def test_hidden_scales_are_checked_and_toggle_the_static_picture():
    view = SteeringView(_steering_result(), hidden_scales=[2, 0, 2])
    assert view.hidden_scales == [0, 2] and view.shown() == [1]
    assert "scale 2</text>" not in view.static_svg() and "scale 0</text>" in view.static_svg()
    with pytest.raises(traitlets.TraitError, match=r"indices of the 3 scales \(0..2\), got \[3\]"):
        view.hidden_scales = [3]


def test_token_text_is_escaped_in_the_static_svg_and_the_export_page():
    view = SteeringView(_steering_result())
    svg = view.static_svg()
    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;x&lt;/script&gt;" in svg and "&lt;b&gt;" in svg
    page = view.to_html()
    assert "<script>x</script>" not in page and "<b>room</b>" not in page


def test_the_view_data_round_trips_through_json():
    data = SteeringView(_steering_result()).view_data()
    back = SteeringData.from_json(json.loads(json.dumps(data.to_json(), allow_nan=False)))
    assert back.steered_tokens == data.steered_tokens and back.changed == data.changed
    np.testing.assert_array_equal(back.metric_mean, data.metric_mean)


def test_the_mime_payload_carries_the_view_data_and_the_hidden_scales():
    bundle, _ = SteeringView(_steering_result(), hidden_scales=[1])._repr_mimebundle_()
    payload = bundle["application/vnd.interp-widgets.v1+json"]
    assert payload["view"] == "steering" and payload["state"]["hidden_scales"] == [1]
    assert "<script>" not in bundle["image/svg+xml"] and "&lt;script&gt;" in bundle["image/svg+xml"]
    assert payload["data"]["steered_tokens"][2][1] == "<script>x</script>"  # data, drawn with textContent


def test_result_save_load_chart_and_dataframe(tmp_path):
    result = _steering_result()
    again = SteeringResult.load(result.save(tmp_path / "s.safetensors"))
    assert again.generations == result.generations and again.run.prompt == result.run.prompt
    np.testing.assert_array_equal(again.metric.values, result.metric.values)
    frame = result.to_dataframe()
    assert frame["changed_tokens"].tolist() == [0, 0, 2]
    assert frame["generation"].tolist()[2] == " was<script>x</script>!"
    spec = result.chart().to_dict()
    assert len(spec["hconcat"]) == 2
    assert "<script>x</script>" not in result._repr_html_() and "&lt;script&gt;" in result._repr_html_()
    with pytest.raises(ValueError, match="not a SteeringResult"):
        (tmp_path / "x.safetensors").write_bytes(b"")
        from safetensors.numpy import save_file

        save_file({"a": np.zeros(1)}, str(tmp_path / "x.safetensors"))
        SteeringResult.load(tmp_path / "x.safetensors")
