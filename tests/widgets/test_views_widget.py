"""Generation, comparison and example-list widgets: traits, two-way state, agreement statistics (against scipy),
static SVG fallbacks (escaped, no script), export pages, unsigned scales and bad input."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from interp_widgets.attribution import agreement_table, spearman, top_k_overlap
from interp_widgets.attribution.result import AttributionCollection, AttributionResult
from interp_widgets.widgets import (
    ComparisonWidget, ExampleListWidget, GenerationWidget, TokenHighlightWidget, buffer_to_array, compare,
)  # fmt: skip
from interp_widgets.widgets._base import WIDGET_VIEW_MIME
from interp_widgets.widgets._colour import score_colours
from interp_widgets.widgets._tokens import unit_sums

EVIL = "<img src=x onerror=alert(1)>"
NAN = np.nan


def _result(scores, *, tokens=("The", "film", "was", EVIL, "."), labels=("negative", "positive"), probs=(0.3, 0.7),
            method="saliency", signed=True, true_label=None, generated=None, positions=None):  # fmt: skip
    tokens = list(tokens)
    text, offsets = "", []
    for k, t in enumerate(tokens):
        start = len(text) + (1 if k else 0)
        text += (" " if k else "") + t
        offsets.append((start, start + len(t)))
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    return AttributionResult.from_flat(
        text=text, tokens=tokens, offsets=np.array(offsets), special_mask=np.zeros(len(tokens), bool),
        word_ids=np.arange(len(tokens)), sentence_ids=np.zeros(len(tokens), int), scores=scores,
        target_labels=list(labels), target_probs=np.array(probs), target_ids=np.arange(len(labels)), method=method,
        signed=signed, true_label=true_label, generated_mask=generated, target_positions=positions,
    )  # fmt: skip


def _gen_result():
    tokens = ["The", EVIL, "was", "great", "!"]
    scores = [[0.1, -0.4, 0.2, NAN, NAN], [0.05, 0.3, -0.1, 0.6, NAN]]
    return _result(
        scores,
        tokens=tokens,
        labels=["'great'@3", "'!'@4"],
        probs=[0.42, 0.9],
        generated=np.array([0, 0, 0, 1, 1], bool),
        positions=np.array([2, 3]),
        method="integrated_gradients",
    )


def _text_elements(svg: str) -> list[str]:
    return re.findall(r">([^<>]*)</text>", svg)


# ------------------------------------------------------------------------------------------------ generation
def test_a_result_with_generated_tokens_displays_as_the_generation_view():
    result = _gen_result()
    widget = result.widget()
    assert isinstance(widget, GenerationWidget)
    assert widget.step_tokens == [3, 4]
    assert widget.step_probs == pytest.approx([0.42, 0.9])
    assert buffer_to_array(widget.generated_mask).tolist() == [False, False, False, True, True]
    assert list(result._repr_mimebundle_()[0])[:2] == [WIDGET_VIEW_MIME, "image/svg+xml"]


def test_generation_state_comes_back_from_the_browser_and_selects_sources():
    widget = GenerationWidget(_gen_result())
    assert [i for i, _, _ in widget.step_sources()] == [1, 2, 0]
    widget.set_state({"selected_step": 1, "selected_token": 1, "view": "heatmap"})
    assert (widget.selected_step, widget.selected_token, widget.view) == (1, 1, "heatmap")
    assert [i for i, _, _ in widget.step_sources()] == [3, 1, 2, 0]
    with pytest.raises(ValueError, match="selected_step 2 is out of range; there are 2 generated tokens"):
        widget.selected_step = 2
    with pytest.raises(ValueError, match="unknown view"):
        widget.view = "3d"


def test_generation_svg_annotates_probabilities_and_marks_unseen_sources():
    widget = GenerationWidget(_gen_result())
    svg = widget.static_svg()
    texts = _text_elements(svg)
    assert "42%" in texts and "90%" in texts  # each generated token carries its probability
    assert '"great": not visible to this step' in svg  # NaN source for step 0
    background, _ = score_colours(-0.4, 0.4)
    assert f'fill="{background}"' in svg  # token 1 is the strongest source of step 0
    assert svg.count('stroke="#1f2328" stroke-width="2"') == 1  # the selected generated token is framed


def test_generation_rejects_results_without_generated_tokens():
    with pytest.raises(ValueError, match="no generated tokens"):
        GenerationWidget(_result([[0.1] * 5, [0.2] * 5]))
    bad = _gen_result().replace(target_positions=np.array([0, 1]))
    with pytest.raises(ValueError, match="target_positions must point just before generated tokens"):
        GenerationWidget(bad)


# ------------------------------------------------------------------------------------------------ agreement
def test_spearman_and_top_k_match_scipy_and_hand_counts():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=30), rng.normal(size=30)
    a[[3, 7]] = np.nan
    keep = ~np.isnan(a)
    assert spearman(a, b, by="signed") == pytest.approx(stats.spearmanr(a[keep], b[keep]).statistic)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(np.abs(a[keep]), np.abs(b[keep])).statistic)
    assert spearman([1, 2, 3], [3, 2, 1], by="signed") == pytest.approx(-1.0)
    assert np.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    # top-3 by |score|: a -> {0, 2, 4}, b -> {0, 1, 4}: two shared
    assert top_k_overlap([0.9, 0.1, -0.8, 0.0, 0.5], [0.7, -0.6, 0.0, 0.1, 0.5], k=3) == pytest.approx(2 / 3)
    assert top_k_overlap([1.0, NAN, 2.0], [NAN, 1.0, 1.0], k=2) == 1.0  # only token 2 is seen by both
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_k_overlap([1.0], [1.0], k=0)


def test_compare_builds_the_agreement_table_for_the_shared_target():
    ig = _result([[0.1, 0.2, -0.3, 0.4, 0.0], [0.5, -0.1, 0.3, 0.9, -0.2]], method="integrated_gradients")
    sal = _result([[1, 1, 1, 1, 1], [0.4, 0.05, 0.2, 1.1, 0.1]], method="saliency", signed=False)
    occ = _result([[0, 0, 0, 0, 0], [-0.2, 0.3, 0.1, 0.8, 0.0]], method="occlusion")
    widget = compare([ig, sal, occ], k=2)
    assert isinstance(widget, ComparisonWidget)
    assert widget.target_label == "positive" and widget.methods == ["integrated_gradients", "saliency", "occlusion"]
    assert widget.signed == [True, False, True]
    rows = {(r["a"], r["b"]): r for r in widget.agreement}
    expected = stats.spearmanr(np.abs(ig.scores[1]), np.abs(occ.scores[1])).statistic
    assert rows[("integrated_gradients", "occlusion")]["spearman"] == pytest.approx(expected)
    assert rows[("integrated_gradients", "saliency")]["top_k_overlap"] == 1.0  # both: tokens 3 and 0
    assert rows[("saliency", "occlusion")]["top_k_overlap"] == 0.5  # {3, 0} vs {3, 1}
    assert json.dumps(widget.agreements)  # JSON-safe (NaN would become null)
    widget.set_state({"hovered_token": 3, "shared_scale": True})
    assert (widget.hovered_token, widget.shared_scale) == (3, True)
    assert "integrated_gradients" in repr(widget)


def test_compare_has_one_agreement_table_per_granularity_over_unit_sums():
    words = np.array([0, 0, 1, 2, 2])
    results = [_result(rows, method=name).replace(word_ids=words) for name, rows in (
        ("ig", [[0.0] * 5, [0.5, -0.1, 0.3, 0.9, -0.2]]), ("saliency", [[0.0] * 5, [0.1, 0.2, 0.3, 0.4, 0.5]]),
        ("occlusion", [[0.0] * 5, [-0.2, 0.3, 0.1, 0.8, 0.0]]))]  # fmt: skip
    widget = compare(results, k=2)
    matrix = widget.score_matrix()  # the float32 scores the widget holds
    for granularity, units in (("token", [[0], [1], [2], [3], [4]]), ("word", [[0, 1], [2], [3, 4]]),
                               ("sentence", [[0, 1, 2, 3, 4]])):  # fmt: skip
        widget.granularity = granularity
        assert widget.units() == units
        expected = agreement_table(unit_sums(units, matrix), widget.methods, k=2)
        assert len(widget.agreement) == len(expected) == 3
        for got, want in zip(widget.agreement, expected):
            assert (got["a"], got["b"], got["k"]) == (want["a"], want["b"], want["k"])
            for key in ("spearman", "top_k_overlap"):
                assert (got[key] is None) if np.isnan(want[key]) else got[key] == pytest.approx(want[key])
        assert f"agreement over {granularity}s" in widget.static_svg()
    assert widget.agreements["word"] != widget.agreements["token"]
    assert all(row["spearman"] is None for row in widget.agreements["sentence"])  # one unit: no ranking
    assert json.dumps(widget.agreements)


def test_compare_rejects_mismatched_inputs():
    a = _result([[0.1] * 5, [0.2] * 5], method="a")
    with pytest.raises(ValueError, match="at least two results"):
        compare([a])
    with pytest.raises(ValueError, match="same tokens"):
        compare([a, _result([[0.1] * 4, [0.2] * 4], tokens=("A", "b", "c", "d"), method="b")])
    with pytest.raises(ValueError, match="method names must be distinct"):
        compare([a, a])
    with_special = _result([[0.1] * 5, [0.2] * 5], method="c")
    with_special = with_special.replace(special_mask=np.array([True, False, False, False, False]))
    without = with_special.aggregate("token").replace(method="d")
    with pytest.raises(ValueError, match=r"aggregate\('token'\)"):  # e.g. IntegratedGradients vs Occlusion
        compare([with_special, without])
    assert compare([a, a], names=["run 1", "run 2"]).methods == ["run 1", "run 2"]


def test_comparison_svg_lists_methods_tokens_and_agreement():
    a = _result([[0.1] * 5, [0.5, -0.1, 0.3, 0.9, -0.2]], method="ig")
    b = _result([[0.1] * 5, [0.4, 0.05, 0.2, 1.1, 0.1]], method="<b>sal</b>", signed=False)
    svg = compare([a, b], k=2).static_svg()
    texts = " ".join(_text_elements(svg))
    assert "ig (scale ±0.9)" in texts and "&lt;b&gt;sal&lt;/b&gt; (scale 0..1.1)" in texts
    assert "Spearman ρ" in texts and "1.00 (k=2)" in texts
    assert "<b>" not in svg and EVIL not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg


def test_comparison_granularity_sums_words_and_sentences_like_the_browser():
    words, sentences = np.array([0, 0, 1, 2, 2]), np.array([0, 0, 0, 1, 1])
    a = _result([[0.0] * 5, [0.5, -1.0, 0.25, 2.0, NAN]], method="ig").replace(word_ids=words, sentence_ids=sentences)
    b = _result([[0.0] * 5, [1.0, 1.0, 0.0, 0.5, 0.5]], method="sal").replace(word_ids=words, sentence_ids=sentences)
    widget = compare([a, b], granularity="word")
    assert buffer_to_array(widget.word_ids).tolist() == words.tolist()
    assert widget.units() == [[0, 1], [2], [3, 4]]
    np.testing.assert_allclose(widget.unit_scores(), [[-0.5, 0.25, 2.0], [2.0, 0.0, 1.0]], rtol=1e-6)
    assert "(scale ±2)" in " ".join(_text_elements(widget.static_svg()))
    widget.set_state({"granularity": "sentence"})
    np.testing.assert_allclose(widget.unit_scores(), [[-0.25, 2.0], [2.0, 1.0]], rtol=1e-6)
    assert any("sum per sentence" in t for t in _text_elements(widget.static_svg()))
    with pytest.raises(ValueError, match="unknown granularity"):
        widget.granularity = "paragraph"


# ------------------------------------------------------------------------------------------------ many inputs
def _collection():
    return AttributionCollection([
        _result([[0.1, 0.2, 0.3, 0.4, 0.5], [0.0, 0.1, 0.1, 0.1, 0.1]], probs=[0.8, 0.2], true_label="negative"),
        _result([[0.1] * 5, [0.9, -2.0, 0.1, 0.1, 0.1]], probs=[0.1, 0.9], true_label="negative"),
        _result([[0.1] * 5, [0.3, 0.1, 0.1, 0.1, 0.1]], probs=[0.4, 0.6], true_label="positive"),
        _result([[0.7, 0.0, 0.0, 0.0, 0.0], [0.1] * 5], probs=[0.95, 0.05]),
    ])  # fmt: skip


def test_a_collection_displays_as_the_example_list():
    widget = _collection().widget()
    assert isinstance(widget, ExampleListWidget)
    assert widget.predicted == ["negative", "positive", "positive", "negative"]
    assert widget.confidence == pytest.approx([0.8, 0.9, 0.6, 0.95])
    assert widget.true_labels == ["negative", "negative", "positive", ""]
    assert widget.max_attribution == pytest.approx([0.5, 2.0, 0.3, 0.7])
    assert widget.example_scores(1).tolist() == pytest.approx([0.9, -2.0, 0.1, 0.1, 0.1])
    assert list(_collection()._repr_mimebundle_()[0])[:2] == [WIDGET_VIEW_MIME, "image/svg+xml"]


def test_sorting_filtering_and_selection_state():
    widget = _collection().widget()
    assert widget.visible_order() == [0, 1, 2, 3]
    widget.set_state({"sort_by": "confidence", "descending": True})
    assert widget.visible_order() == [3, 1, 0, 2]
    widget.set_state({"sort_by": "max_attribution", "descending": False})
    assert widget.visible_order() == [2, 0, 3, 1]
    widget.set_state({"filter_label": "positive"})
    assert widget.visible_order() == [2, 1]
    widget.set_state({"filter_label": "", "filter_outcome": "wrong"})
    assert widget.visible_order() == [1]  # example 3 has no true label
    widget.set_state({"filter_outcome": "correct", "sort_by": "label"})
    assert widget.visible_order() == [0, 2]
    widget.set_state({"selected_example": 2, "page": 1})
    assert (widget.selected_example, widget.page) == (2, 1)
    with pytest.raises(ValueError, match="unknown sort_by"):
        widget.sort_by = "length"
    with pytest.raises(ValueError, match="selected_example 4 is out of range"):
        widget.selected_example = 4


def test_example_list_svg_shows_one_page_with_labels_and_verdicts():
    widget = _collection().widget(page_size=2, sort_by="confidence", descending=True)
    texts = _text_elements(widget.static_svg())
    assert texts[0].startswith("4 of 4 examples · page 1 of 2 · sorted by confidence (descending)")
    assert texts[1].startswith("#3 predicted negative (95.0%) · true unknown")
    assert any(t.startswith("#1 predicted positive (90.0%) · true negative ✗") for t in texts)
    assert not any(t.startswith("#0 ") for t in texts)  # on page 2
    assert "accuracy 0.67 on 3 labelled" in repr(widget)


def test_example_list_granularity_groups_within_each_example():
    first = _result([[0.1, 0.2, 0.3, 0.4, 0.5], [0.0] * 5], probs=[0.8, 0.2]).replace(
        word_ids=np.array([0, 0, 1, 1, 2]), sentence_ids=np.array([0, 0, 0, 1, 1]))  # fmt: skip
    second = _result([[0.0] * 5, [0.9, -2.0, 0.1, 0.1, 0.1]], probs=[0.1, 0.9])
    widget = ExampleListWidget([first, second], granularity="word")
    assert buffer_to_array(widget.word_ids).tolist() == [0, 0, 1, 1, 2, 0, 1, 2, 3, 4]
    assert widget.units(0) == [[0, 1], [2, 3], [4]] and widget.units(1) == [[0], [1], [2], [3], [4]]
    np.testing.assert_allclose(widget.unit_scores(0), [0.3, 0.7, 0.5], rtol=1e-6)
    widget.set_state({"granularity": "sentence"})
    np.testing.assert_allclose(widget.unit_scores(0), [0.6, 0.9], rtol=1e-6)
    np.testing.assert_allclose(widget.unit_scores(1), [-0.8], rtol=1e-6)
    texts = _text_elements(widget.static_svg())
    assert "sum per sentence" in texts[0]
    with pytest.raises(ValueError, match="unknown granularity"):
        widget.granularity = "page"


# ------------------------------------------------------------------------------------------------ scales & fallbacks
def test_unsigned_results_use_the_sequential_scale_and_legend():
    result = _result([[0.0, 0.5, 1.0, 0.25, 0.0], [1, 1, 1, 1, 1]], signed=False, probs=[0.9, 0.1])
    widget = TokenHighlightWidget(result)
    assert widget.signed is False
    svg = widget.static_svg()
    assert "pale = 0, orange = large" in svg and "blue = negative" not in svg
    assert f'fill="{score_colours(1.0, 1.0, signed=False)[0]}"' in svg
    assert not [c for c in re.findall(r'fill="(#[0-9a-f]{6})"', svg) if c in {"#2166ac", "#92c5de"}]  # no blues
    assert "0 " in widget.static_html().split("attribution: ")[1][:3]  # legend starts at 0, not −max


def test_shared_scale_uses_the_largest_magnitude_of_all_targets():
    widget = TokenHighlightWidget(_result([[0.1, 0.2, -0.4, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0, 0.0]], probs=[0.9, 0.1]))
    assert widget.scale_max() == pytest.approx(0.4)
    widget.shared_scale = True
    assert widget.scale_max() == pytest.approx(2.0)
    assert "scale shared by all classes" in widget.static_svg()
    with pytest.raises(ValueError, match="unknown encoding"):
        widget.encoding = "sound"


@pytest.mark.parametrize("make", [
    lambda: TokenHighlightWidget(_result([[0.1] * 5, [0.2] * 5])),
    lambda: GenerationWidget(_gen_result()),
    lambda: compare([_result([[0.1] * 5, [0.2, 0.1, 0.3, 0.4, 0.5]], method="a"),
                     _result([[0.1] * 5, [0.5, 0.4, 0.3, 0.2, 0.1]], method="b")]),
    lambda: _collection().widget(),
])  # fmt: skip
def test_every_widget_has_an_escaped_script_free_fallback_and_an_offline_export(make, tmp_path):
    widget = make()
    data, _ = widget._repr_mimebundle_()
    assert list(data) == [WIDGET_VIEW_MIME, "image/svg+xml", "application/vnd.interp-widgets.v1+json", "text/plain"]
    svg = data["image/svg+xml"]
    assert svg.startswith("<svg xmlns=") and "<script" not in svg
    assert not re.search(r"<[^>]*\son\w+\s*=", svg)  # no event-handler attribute on any element
    assert EVIL not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg
    page = widget.export_html(tmp_path / "view.html").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert EVIL not in page
    assert page.lower().count("</script") == 3  # the module block, the state block, the boot script
    widget.error = "broken <input>"
    assert "broken &lt;input&gt;" in widget._repr_mimebundle_()[0]["image/svg+xml"]


def test_paged_lists_reject_bad_pages_with_the_allowed_range():
    from interp_widgets.widgets import ConceptBrowser
    from tests.widgets.test_concept_widget import _interpretation

    examples, concepts = _collection().widget(), ConceptBrowser(_interpretation())
    with pytest.raises(ValueError, match=r"page_size must be at least 1, got 0"):
        examples.page_size = 0
    with pytest.raises(ValueError, match=r"page_size must be in 1\.\.100, got 101"):
        concepts.page_size = 101
    for widget in (examples, concepts):
        with pytest.raises(ValueError, match="page must be an integer >= 0, got -1"):
            widget.page = -1
    examples.page_size = 500  # no cap on the example list
    assert examples.page_size == 500


def test_a_many_method_comparison_keeps_its_static_picture_an_svg_under_60_kb(bert_classifier):
    from interp_widgets.attribution import METHODS
    from interp_widgets.widgets.comparison import MAX_STATIC_METHODS, MAX_STATIC_PAIRS

    model, tokenizer = bert_classifier
    text = "The food was great, but the service was painfully slow and our waiter seemed bored. We will not be back."
    widget = compare(
        [METHODS[name](progress=False).attribute(model, tokenizer, text, granularity="word") for name in METHODS]
    )
    svg = widget.static_svg()
    assert len(svg.encode()) < 60 * 1024
    assert f"… {len(METHODS) - MAX_STATIC_METHODS} more methods in the live widget" in svg
    assert f"… {len(widget.agreement) - MAX_STATIC_PAIRS} more pairs in the live widget" in svg
    assert "image/svg+xml" in widget._repr_mimebundle_()[0]
