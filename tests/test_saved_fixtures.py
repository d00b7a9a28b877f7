"""Files saved by interp_widgets 0.1 still load and show what they held (tests/fixtures/saved_v0_1, written once by
scripts/make_saved_fixtures.py; expected.json holds the values read from the objects when they were saved). The
notebook's saved view outputs still validate against the schema the front end checks, load as view data and export to
an offline page with no kernel; js/tests/saved_notebook.test.js renders them through the mime renderer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from interp_widgets.attribution import AttributionResult
from interp_widgets.concepts import ConceptInterpretation
from interp_widgets.geometry import GeometryLog
from interp_widgets.lens import LensResult
from interp_widgets.notebook_export import export_notebook
from interp_widgets.widgets.view_data import VIEW_DATA
from interp_widgets.widgets import MIME_TYPE
from interp_widgets.widgets._payload_schema import schema_json
from tests.widgets.test_mime_payload import _conforms

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "saved_v0_1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


def _same(value, expected, name):
    if isinstance(expected, list) and expected and not isinstance(expected[0], str):
        np.testing.assert_allclose(np.asarray(value, dtype=float), np.asarray(expected, dtype=float), rtol=0,
                                   atol=0, equal_nan=True, err_msg=name)  # fmt: skip
    else:
        assert value == expected, name


def test_a_saved_attribution_result_loads_with_its_tokens_scores_and_targets():
    result = AttributionResult.load(FIXTURES / "attribution.safetensors")
    expected = EXPECTED["attribution"]
    for name in ("text", "tokens", "offsets", "special_mask", "word_ids", "scores", "target_labels", "target_ids",
                 "target_probs", "method", "signed"):  # fmt: skip
        _same(getattr(result, name), expected[name], name)
    assert result.score_meaning == expected["score_meaning"]
    assert repr(result) == expected["repr"]
    assert result.aggregate("word").tokens == expected["words"]
    assert result.target_index("positive") == 1 and result.target_index(-2) == 0
    assert type(result.widget()).__name__ == "TokenHighlightWidget"


def test_a_saved_contrastive_generation_result_loads_with_its_foils_and_completeness(tmp_path):
    result = AttributionResult.load(FIXTURES / "attribution_generation.safetensors")
    expected = EXPECTED["attribution_generation"]
    for name in ("tokens", "scores", "target_labels", "target_ids", "target_positions", "generated_mask",
                 "foil_labels", "foil_ids", "contrast", "completeness_error", "score_delta", "method"):  # fmt: skip
        _same(getattr(result, name), expected[name], name)
    assert result.is_contrastive and result.score_meaning == expected["score_meaning"]
    assert repr(result) == expected["repr"]
    assert type(result.widget()).__name__ == "GenerationWidget"
    again = AttributionResult.load(result.save(tmp_path / "resaved.safetensors"))
    assert repr(again) == repr(result) and np.array_equal(again.scores, result.scores, equal_nan=True)


def test_a_saved_lens_result_loads():
    result = LensResult.load(FIXTURES / "lens.safetensors")
    expected = EXPECTED["lens"]
    for name in ("tokens", "token_ids", "layers", "lenses", "target_labels", "target_ids", "target_probs",
                 "target_ranks", "top_ids", "kl"):  # fmt: skip
        _same(getattr(result, name), expected[name], name)
    assert repr(result) == expected["repr"]
    assert result.trajectory(0, target=" and")["probability"].tolist() == pytest.approx(
        [p[0][1] for p in np.asarray(expected["target_probs"])[0].tolist()], nan_ok=True
    )


def test_a_saved_concept_interpretation_loads():
    interp = ConceptInterpretation.load(FIXTURES / "interpretation.safetensors")
    expected = EXPECTED["interpretation"]
    for name in ("labels", "layer", "method", "n_concepts", "density", "top_rows"):
        _same(getattr(interp, name), expected[name], name)
    assert repr(interp) == expected["repr"]


def test_a_saved_geometry_log_loads():
    log = GeometryLog.load(FIXTURES / "geometry_log")
    expected = EXPECTED["geometry_log"]
    assert log.layers == expected["layers"] and log.x_label == expected["x_label"]
    _same(log.steps, expected["steps"], "steps")
    for name, values in expected["series"].items():
        _same(log.series(name)[1], values, name)
    assert {name: list(basis.shape) for name, basis in log.proxies.items()} == expected["proxies"]
    assert repr(log) == expected["repr"]


def _saved_payloads() -> list[dict]:
    notebook = nbformat.read(FIXTURES / "views.ipynb", as_version=4)
    return [o["data"][MIME_TYPE] for cell in notebook.cells for o in cell.get("outputs", []) if MIME_TYPE in o.get("data", {})]  # fmt: skip


def test_the_saved_notebook_holds_the_payloads_of_several_views():
    assert [payload["view"] for payload in _saved_payloads()] == EXPECTED["notebook"]["views"]


@pytest.mark.parametrize("index", range(len(EXPECTED["notebook"]["views"])))
def test_each_saved_view_payload_conforms_to_the_schema_and_loads_as_view_data(index):
    payload = _saved_payloads()[index]
    spec = json.loads(schema_json())["views"][payload["view"]]
    assert payload["version"] <= spec["version"]
    for section in ("data", "state"):
        for name, value in payload[section].items():
            _conforms(value, spec[section][name], f"{section}.{name}")
    data = VIEW_DATA[payload["view"]].from_json({k: payload[k] for k in ("view", "version", "data")})
    assert data.to_json()["data"].keys() == payload["data"].keys()


def test_the_saved_notebook_exports_offline_from_its_payloads_with_no_kernel(tmp_path):
    page = export_notebook(FIXTURES / "views.ipynb", tmp_path / "views.html").read_text(encoding="utf-8")
    blocks = re.findall(
        r'<script (?=[^>]*type="application/json")[^>]*id="(iw-payload-\d+)"[^>]*>(.*?)</script>', page, flags=re.S
    )
    assert [json.loads(text) for _, text in blocks] == _saved_payloads()
    assert "<b>bad</b>" not in page
