"""The ``application/vnd.interp-widgets.v1+json`` output of every view (interp_widgets/widgets/_mime.py): what it holds,
the per-output cap and its note record, the generated schema the front end checks payloads against, and the payload
fixtures the JS tests render (js/tests/fixtures/payloads.json, regenerated with IW_UPDATE_FIXTURES=1)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interp_widgets.widgets.view_data import VIEW_DATA
from interp_widgets.widgets import ConceptBrowser, MonitorWidget, TokenHighlightWidget, output_cap, set_output_cap
from interp_widgets.widgets._base import WIDGET_VIEW_MIME
from interp_widgets.widgets._mime import (
    DEFAULT_OUTPUT_CAP, MIME_TYPE, compact_json, payload_body, state_trait_names,
)  # fmt: skip
from interp_widgets.widgets._payload_schema import schema_json
from interp_widgets.widgets.concept_browser import PAYLOAD_DETAIL_BYTES
from tests.widgets.test_widget_schema import VIEWS, _filled

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "js" / "src" / "lib" / "view_schema.json"
FIXTURES = ROOT / "js" / "tests" / "fixtures" / "payloads.json"
ids = lambda cls: cls.__name__  # noqa: E731


@pytest.fixture(autouse=True)
def _default_cap():
    previous = set_output_cap(None)
    yield
    set_output_cap(None if previous == DEFAULT_OUTPUT_CAP else previous)


@pytest.mark.parametrize("view", list(VIEWS), ids=ids)
def test_the_payload_holds_the_versioned_view_data_and_the_view_state(view):
    widget = _filled(view)
    data, _ = widget._repr_mimebundle_()
    payload = data[MIME_TYPE]
    assert list(data)[:3] == [WIDGET_VIEW_MIME, "image/svg+xml", MIME_TYPE]
    schema = VIEW_DATA[view._bundle]
    assert {k: payload[k] for k in ("format", "view", "version", "widget")} == {
        "format": 1,
        "view": view._bundle,
        "version": schema.VERSION,
        "widget": view.__name__,
    }
    text = json.dumps(payload, allow_nan=False)  # plain JSON: nbformat stores it as an object, no NaN
    back = schema.from_json({"view": payload["view"], "version": payload["version"], "data": json.loads(text)["data"]})
    expected = widget.view_data()
    for name in schema.field_names():
        a, b = getattr(back, name), getattr(expected, name)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
        else:
            assert a == b, name
    assert set(payload["state"]) == set(state_trait_names(view)) and "error" in payload["state"]
    assert not set(payload["state"]) & set(schema.field_names())
    assert not [name for name in payload["state"] if name.startswith("_") or name in ("layout", "tabbable", "tooltip")]


def test_the_view_state_is_what_the_widget_shows():
    widget = TokenHighlightWidget.from_arrays("Not bad.", ["Not", "bad", "."], [(0, 3), (4, 7), (7, 8)],
                                              [[0.4, -0.2, 0.1], [0.1, 0.2, 0.3]], target_labels=["neg", "pos"],
                                              granularity="word")  # fmt: skip
    widget.selected_target = 1
    state = widget.mime_payload()["state"]
    assert state["granularity"] == "word" and state["selected_target"] == 1 and state["encoding"] == "colour"


def test_the_monitor_payload_carries_the_whole_history_logged_so_far():
    monitor = MonitorWidget(layers=["layer:0"], checkpoint_interval=3600)
    for step in range(5):
        monitor.log(step, {"energy_ratio|layer:0": 1.0 + step}, loss=1.0 / (step + 1))
    monitor.flush()
    payload = monitor.mime_payload()
    assert payload["data"]["checkpoint_schema"]["rows"] == 5
    assert set(payload["data"]["checkpoint"]) == {"base64"}
    assert payload["state"]["layers"] == ["layer:0"] and payload["state"]["panels"][0]["id"] == "loss"


def test_the_concept_browser_payload_preloads_details_in_list_order_within_its_budget():
    browser = _filled(ConceptBrowser)
    browser.page_size = 2
    details = browser.mime_payload()["state"]["details"]
    assert list(details)[:6] and set(details) == {str(c) for c in browser.visible_order()}  # all 6 fit the budget
    assert details["1"]["label"] == "<img src=x onerror=alert(1)>" and set(details["1"]["hist_edges"]) == {
        "dtype",
        "shape",
        "data",
    }
    assert len(compact_json(details)) <= PAYLOAD_DETAIL_BYTES


def test_over_the_cap_the_output_keeps_the_picture_and_a_note_record():
    widget = VIEWS[TokenHighlightWidget]()
    size = len(compact_json(payload_body(widget)).encode())
    assert widget.mime_payload(cap=size)["data"]  # exactly at the cap: kept
    previous = set_output_cap(size - 1)
    assert previous == DEFAULT_OUTPUT_CAP and output_cap() == size - 1
    data, _ = widget._repr_mimebundle_()
    assert data[MIME_TYPE] == {"format": 1, "view": "token_highlight",
                               "version": VIEW_DATA["token_highlight"].VERSION, "widget": "TokenHighlightWidget",
                               "omitted": {"bytes": size, "cap": size - 1}}  # fmt: skip
    assert data["image/svg+xml"].startswith("<svg") and data[WIDGET_VIEW_MIME]["model_id"] == widget.model_id
    with pytest.raises(ValueError, match="nbytes must be an integer >= 0, got -1"):
        set_output_cap(-1)


def test_the_cap_comes_from_the_environment():
    code = ("from interp_widgets.widgets import output_cap, TokenHighlightWidget as T\n"
            "w = T.from_arrays('a', ['a'], [(0, 1)], [1.0])\n"
            "print(output_cap(), sorted(w.mime_payload()))")  # fmt: skip
    env = {**os.environ, "INTERP_WIDGETS_OUTPUT_CAP": "10", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "10 ['format', 'omitted', 'version', 'view', 'widget']", out.stderr[-2000:]
    env["INTERP_WIDGETS_OUTPUT_CAP"] = "lots"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "INTERP_WIDGETS_OUTPUT_CAP='lots' is not a number of bytes" in out.stderr


def test_a_payload_that_cannot_be_built_does_not_stop_the_widget(monkeypatch):
    widget = VIEWS[TokenHighlightWidget]()
    monkeypatch.setattr(type(widget), "view_data", lambda self: 1 / 0)
    data, _ = widget._repr_mimebundle_()
    assert data[MIME_TYPE]["failed"] == "ZeroDivisionError: division by zero"
    assert data[WIDGET_VIEW_MIME]["model_id"] == widget.model_id


def test_the_committed_js_schema_is_generated_from_the_view_classes():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_json(), "run python scripts/view_schema.py"
    schema = json.loads(schema_json())
    assert schema["mime_type"] == MIME_TYPE and set(schema["views"]) == set(VIEW_DATA)
    for view in VIEWS:
        spec = schema["views"][view._bundle]
        assert set(spec["data"]) == set(VIEW_DATA[view._bundle].field_names())
        assert set(spec["state"]) == set(state_trait_names(view))
    token = schema["views"]["token_highlight"]
    assert token["data"]["scores"] == {"array": ["float32"], "ndim": 2}
    assert token["data"]["target_probs"] == {"list": {"nullable": "num"}}
    assert token["state"]["granularity"] == {"enum": ["token", "word", "sentence", "turn"]}


def _conforms(value, type_, path: str = "payload") -> None:
    """Python mirror of js/src/lib/payload.js's check, so that a payload the views write and the schema the front
    end reads cannot drift apart (a field added to a detail dict, say) without a failing Python test."""
    if isinstance(type_, str):
        expected = {"str": str, "int": int, "num": (int, float, type(None)), "bool": bool}.get(type_)
        if type_ == "bytes":
            assert isinstance(value, dict) and set(value) == {"base64"}, path
        else:
            assert isinstance(value, expected) and (type_ == "bool" or not isinstance(value, bool)), (
                f"{path}: {value!r}"
            )
    elif "oneOf" in type_:
        failures = []
        for alternative in type_["oneOf"]:
            try:
                return _conforms(value, alternative, path)
            except AssertionError as error:
                failures.append(error)
        raise AssertionError(f"{path}: {value!r} matches none of {type_['oneOf']}")
    elif "nullable" in type_:
        if value is not None:
            _conforms(value, type_["nullable"], path)
    elif "enum" in type_:
        assert value in type_["enum"], f"{path}: {value!r}"
    elif "list" in type_:
        assert isinstance(value, list), path
        for i, item in enumerate(value):
            _conforms(item, type_["list"], f"{path}[{i}]")
    elif "map" in type_:
        assert isinstance(value, dict), path
        for key, item in value.items():
            _conforms(item, type_["map"], f"{path}[{key!r}]")
    elif "object" in type_:
        assert isinstance(value, dict), path
        assert set(type_.get("required", type_["object"])) <= set(value), f"{path} lacks some of {type_['object']}"
        assert type_.get("open") or set(value) <= set(type_["object"]), (
            f"{path} has unknown {set(value) - set(type_['object'])}"
        )
        for key, item in value.items():
            if key in type_["object"]:
                _conforms(item, type_["object"][key], f"{path}.{key}")
    elif "array" in type_:
        if value in (None, {}) and type_.get("absent"):
            return
        assert set(value) == {"dtype", "shape", "data"} and value["dtype"] in type_["array"], f"{path}: {value!r}"[:200]
        assert len(value["shape"]) == type_["ndim"], path
    else:
        raise AssertionError(f"unknown schema type {type_!r}")


@pytest.mark.parametrize("view", list(VIEWS), ids=ids)
def test_every_payload_conforms_to_the_schema_the_front_end_checks(view):
    spec = json.loads(schema_json())["views"][view._bundle]
    payload = _filled(view).mime_payload()
    assert set(payload["data"]) == set(spec["data"]) and set(payload["state"]) == set(spec["state"])
    for section in ("data", "state"):
        for name, value in payload[section].items():
            _conforms(value, spec[section][name], f"{section}.{name}")
        for name, value in spec["defaults"][section].items():
            _conforms(value, spec[section][name], f"defaults.{section}.{name}")


def test_the_concept_browser_preload_does_not_run_a_lazy_labeller():
    browser = _filled(ConceptBrowser)
    asked: list[int] = []
    browser.interpretation.ensure_label = lambda c: asked.append(c) or f"labelled {c}"
    browser.requested = [0]  # the page shown: its details were asked for (and labelled) by the front end
    asked.clear()
    details = browser.mime_payload()["state"]["details"]
    assert asked == [] and set(details) == {str(c) for c in browser.visible_order()}  # the others: current labels
    assert details["0"]["label"] == "labelled 0" and details["2"]["label"] == browser.labels[2]


def _fixtures() -> str:
    """One payload per view for the JS tests (hostile strings included); the monitor's random stream id fixed."""
    payloads = {}
    for view in sorted(VIEWS, key=lambda cls: cls._bundle):
        payload = _filled(view).mime_payload()
        if "stream_id" in payload["state"]:
            payload["state"]["stream_id"] = "fixture-stream"
        payloads[view._bundle] = payload
    return json.dumps(payloads, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _same_payload(saved, fresh, path: str = "") -> None:
    """Equal JSON, except that floats (scalars and the values of binary arrays) may differ by rounding: some views
    are filled from a small computation whose last bits depend on the CPU's kernels (AVX2 or AVX-512)."""
    if isinstance(saved, dict) and set(saved) == {"dtype", "shape", "data"} and isinstance(saved["data"], str):
        assert isinstance(fresh, dict) and (saved["dtype"], saved["shape"]) == (fresh["dtype"], fresh["shape"]), path
        a, b = (np.frombuffer(base64.b64decode(x["data"]), dtype=saved["dtype"]) for x in (saved, fresh))
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, equal_nan=True, err_msg=path)
        else:
            assert (a == b).all(), path
    elif isinstance(saved, dict):
        assert isinstance(fresh, dict) and saved.keys() == fresh.keys(), f"{path}: keys differ"
        for key in saved:
            _same_payload(saved[key], fresh[key], f"{path}.{key}")
    elif isinstance(saved, list):
        assert isinstance(fresh, list) and len(saved) == len(fresh), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(saved, fresh)):
            _same_payload(x, y, f"{path}[{i}]")
    elif isinstance(saved, float) and isinstance(fresh, (int, float)) and not isinstance(fresh, bool):
        assert fresh == pytest.approx(saved, rel=1e-5, abs=1e-7, nan_ok=True), path
    else:
        assert saved == fresh, f"{path}: {saved!r} != {fresh!r}"[:300]


def test_the_js_payload_fixtures_are_current():
    text = _fixtures()
    if os.environ.get("IW_UPDATE_FIXTURES") == "1":
        FIXTURES.parent.mkdir(parents=True, exist_ok=True)
        FIXTURES.write_text(text, encoding="utf-8")
    try:
        _same_payload(json.loads(FIXTURES.read_text(encoding="utf-8")), json.loads(text))
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nregenerate with IW_UPDATE_FIXTURES=1 python -m pytest tests/widgets/test_mime_payload.py -k fixtures"
        ) from None


def test_the_fixture_comparison_tolerates_rounding_and_nothing_else():
    def array(values, dtype="float32"):
        values = np.asarray(values, dtype=dtype)
        return {"dtype": dtype, "shape": list(values.shape), "data": base64.b64encode(values.tobytes()).decode()}

    _same_payload({"a": array([1.0, 2.0]), "b": [0.1]}, {"a": array([1.0, 2.0 + 1e-6]), "b": [0.1 + 1e-9]})
    for fresh in (
        {"a": array([1.0, 2.1]), "b": [0.1]},
        {"a": array([1.0, 2.0]), "b": [0.2]},
        {"a": array([1, 2], "int32"), "b": [0.1]},
        {"a": array([1.0, 2.0]), "b": [0.1], "c": 1},
    ):
        with pytest.raises(AssertionError):
            _same_payload({"a": array([1.0, 2.0]), "b": [0.1]}, fresh)
