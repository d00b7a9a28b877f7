"""The patching view's data (PatchingData): panels packed with offsets checked against plain numpy, JSON and mime
round trips, escaping in the static SVG, top-5 lists kept in the view up to 50,000 cells and sent by the kernel
above, and ``PatchingResult.widget()`` with a compared result and its agreement (checked against scipy)."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import numpy as np
import pandas as pd
import pytest
import traitlets
from scipy.stats import spearmanr

from interp_widgets.widgets import MIME_TYPE, PatchingView
from interp_widgets.widgets.patching import demo_patching_data, patching_panels
from interp_widgets.widgets.view_data import PATCHING_STORED_CELLS, PatchingData


def _panel(point, L, U, P, seed, top=True):
    rng = np.random.default_rng(seed)
    shape = (L, U, P)
    return NS(point=point, layers=list(range(L)), units=["stream"] if U == 1 else [f"H{u}" for u in range(U)],
              positions=[f"t{p}" for p in range(P)], values=rng.normal(size=shape).astype(np.float32),
              raw=rng.normal(size=shape).astype(np.float32), spread=rng.random(shape).astype(np.float32),
              top_ids=rng.integers(100, 110, (*shape, 5)) if top else None,
              top_probs=rng.random((*shape, 5)).astype(np.float32) if top else None)  # fmt: skip


TEXT = {i: f"<tok{i}>" for i in range(100, 110)}


def test_panels_are_concatenated_with_offsets_and_a_shared_vocabulary():
    a, b, c = _panel("resid_pre", 3, 1, 4, 0), _panel("head", 3, 2, 4, 1), _panel("resid_pre", 3, 1, 4, 2, top=False)
    part = patching_panels([[a, b], [c]], TEXT, n_positions=4)
    assert part.panel_points == ["resid_pre", "head", "resid_pre"] and part.panel_results == [0, 0, 1]
    assert part.cell_offsets.tolist() == [0, 12, 36, 48] and part.top_offsets.tolist() == [0, 12, 36, 36]
    assert part.panel_positions == [[], [], []]  # the clean tokens
    assert part.values.dtype == np.float32 and part.top_vocab.dtype == np.int32 and part.top_probs.dtype == np.float32
    np.testing.assert_array_equal(part.values[12:36].reshape(3, 2, 4), b.values)
    np.testing.assert_array_equal(part.raw[36:], c.raw.ravel())
    np.testing.assert_array_equal(part.spread[:12], a.spread.ravel())
    # the top-5 ids come back through the vocabulary table
    texts = np.asarray(part.vocab, dtype=object)[part.top_vocab[12:36]]
    expected = np.vectorize(TEXT.get, otypes=[object])(b.top_ids.reshape(24, 5))
    assert (texts == expected).all()
    np.testing.assert_array_equal(part.top_probs[:12], a.top_probs.reshape(12, 5))


def test_bad_panels_are_refused_with_the_fix():
    bad = _panel("resid_pre", 3, 1, 4, 0)
    bad.values = bad.values[:, :, :3]
    with pytest.raises(ValueError, match=r"values of shape \(3, 1, 3\) but 3 layers, 1 units and 4 positions"):
        patching_panels([[bad]], TEXT, n_positions=4)
    with pytest.raises(ValueError, match="no text for the top-5 token ids"):
        patching_panels([[_panel("resid_pre", 3, 1, 4, 0)]], {}, n_positions=4)


def test_json_and_mime_payload_round_trip():
    view = PatchingView(demo_patching_data(heads=True), scale="raw", selected_cell=[1, 2, 1, 3])
    data = view.view_data()
    again = PatchingData.from_json(json.loads(json.dumps(data.to_json())))
    np.testing.assert_array_equal(again.values, data.values)
    np.testing.assert_array_equal(again.top_vocab, data.top_vocab)
    assert again.tokens == ["The", " <b>", " is", " in"] and again.panel_units == [["stream"], ["H0", "H1"]]
    payload = view.mime_payload()
    assert payload["view"] == "patching" and payload["state"]["scale"] == "raw"
    assert payload["state"]["selected_cell"] == [1, 2, 1, 3]
    bundle, _ = view._repr_mimebundle_()
    assert MIME_TYPE in bundle and "image/svg+xml" in bundle


def test_static_svg_escapes_token_text_and_labels_noising():
    svg = PatchingView(demo_patching_data(noise=True, heads=True)).static_svg()
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert "noising: low = important" in svg
    assert svg.count("<rect") == 1 + 3 * 4 + 3 * 2  # background, resid_pre 3 × 4, heads 3 × 2 at the last position


def test_cell_values_and_top_tokens_read_the_right_cells():
    data = demo_patching_data(heads=True)
    view = PatchingView(data, unit_position=1)
    np.testing.assert_array_equal(view.panel_grid(1), view.panel_values(1)[:, :, 1])
    np.testing.assert_array_equal(view.panel_values(1, raw=True).ravel(), data.raw[12:36])
    row = 12 + (2 * 2 + 1) * 4 + 3  # panel 1, layer 2, unit 1, position 3
    assert [t for t, _ in view.top_tokens(1, 2, 1, 3)] == [data.vocab[i] for i in data.top_vocab[row]]
    with pytest.raises(traitlets.TraitError, match="selected_cell must be"):
        view.selected_cell = [5, 0, 0, 0]


def test_above_the_stored_limit_the_kernel_sends_a_cells_top_5():
    P = PATCHING_STORED_CELLS // 20 + 1  # 20 layers × P positions > the limit
    from interp_widgets.text_units import joined_layout
    from interp_widgets.widgets.patching import patching_data
    from interp_widgets.widgets.view_data import PatchingRunsPart

    panel = _panel("resid_pre", 20, 1, P, 3)
    tokens = [f"t{p}" for p in range(P)]
    data = patching_data(joined_layout(tokens), tokens, patching_panels([[panel]], TEXT, n_positions=P),
                         PatchingRunsPart(result_labels=["exact"]))  # fmt: skip
    view = PatchingView(data)
    assert view.top_vocab.shape == (0, 5) and view.vocab == [] and "kernel" in view.top_note
    assert view.top_offsets.tolist() == [0, 0]
    sent = []
    view.send = lambda content, buffers=None: sent.append(content)
    view._on_message(view, {"type": "top", "id": 3, "panel": 0, "layer": 7, "unit": 0, "position": 11}, [])
    assert sent[0]["id"] == 3 and sent[0]["tokens"] == [TEXT[int(i)] for i in panel.top_ids[7, 0, 11]]
    np.testing.assert_allclose(sent[0]["probs"], panel.top_probs[7, 0, 11], rtol=1e-6)
    small = PatchingView(demo_patching_data())
    assert small.top_note == "" and small.top_vocab.shape == (12, 5)


def test_result_widget_side_by_side_with_agreement():
    from interp_widgets.interventions._patching_examples import tiny_patching_result

    exact = tiny_patching_result()
    attribution = tiny_patching_result(method="attribution")
    attribution.panels[0].values[:] = np.array([[[0.1, 0.0, 0.9]], [[0.4, 0.8, 0.7]]], np.float32)
    view = exact.widget(compare=attribution)
    assert view.result_labels == ["exact", "attribution"] and view.panel_results == [0, 1]
    assert view.top_offsets.tolist() == [0, 6, 6]  # attribution patching has no patched runs
    rho = spearmanr(exact.panels[0].values.ravel(), attribution.panels[0].values.ravel())[0]  # effects: value - 0
    assert view.agreement_spearman == [pytest.approx(rho)] and view.agreement_k == 6  # k = 20 capped at 6 cells
    # top 2 cells by |value|: exact 2 and 5 (both 1.0), attribution 2 (0.9) and 4 (0.8)
    assert exact.widget(compare=attribution, agreement_k=2).agreement_overlap == [0.5]
    given = exact.widget(compare=attribution, agreement={"resid_pre": {"spearman": 0.5, "top_k_overlap": 1.0, "k": 3}})
    assert (given.agreement_spearman, given.agreement_overlap, given.agreement_k) == ([0.5], [1.0], 3)
    table = pd.DataFrame({"point": ["resid_pre"], "spearman": [0.25], "top_k_overlap": [0.5], "k": [2], "cells": [6]})
    given = exact.widget(compare=attribution, agreement=table)  # the shape of PatchingResult.agreement's table
    assert (given.agreement_spearman, given.agreement_overlap, given.agreement_k) == ([0.25], [0.5], 2)
    assert exact.widget().agreement_points == []


def test_the_exported_page_holds_the_view_with_its_text_escaped():
    page = PatchingView(demo_patching_data()).to_html(title="<i>patching</i>")
    assert page.startswith("<!DOCTYPE html>") and "<title>&lt;i&gt;patching&lt;/i&gt;</title>" in page
    assert " <b>" not in page and "<img" not in page  # the token and the top-5 text are data, never markup
    assert "\\u003cimg src=x onerror=alert(1)\\u003e" in page  # the vocabulary travels with the page (no kernel)


def test_two_exact_results_are_labelled_by_direction():
    from interp_widgets.interventions._patching_examples import tiny_patching_result

    view = tiny_patching_result().widget(compare=tiny_patching_result(direction="noise"))
    assert view.result_labels == ["exact denoise", "exact noise"] and view.result_directions == ["denoise", "noise"]
    assert view.agreement_points == []  # two different questions: side by side, not ranked together
    assert "noising: low = important" in view.static_svg()
