"""ConceptBrowser: traits, paging payloads, validation, static SVG fallback, export, and a tiny BERT end to end."""

from __future__ import annotations

import json
import re
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from interp_widgets.concepts import (
    ConceptInterpretation,
    NMFConcepts,
    TextConcepts,
    collect_activations,
    concept_importance,
    interpret_concepts,
    text_concepts,
)
from interp_widgets.text_units import TokenLayout
from interp_widgets.widgets import ConceptBrowser, buffer_to_array
from interp_widgets.widgets._base import WIDGET_VIEW_MIME
from interp_widgets.widgets.concept_browser import MAX_TEXT_CHARS
from tests.conftest import model_fingerprint

EVIL = "<img src=x onerror=alert(1)>"


def _label_score(label: str, detection: float, fuzzing: float, auc: float | None = 0.75) -> dict:
    """One score_labels entry (the scorer's name is hostile text too)."""
    score = lambda value: {"balanced_accuracy": value, "auc": auc, "n_examples": 8, "n_activating": 4,
                           "n_non_activating": 4, "n_failed": 0}  # fmt: skip
    return {"label": label, "scorer": "<b>judge</b>", "settings": {"n_examples": 4}, "detection": score(detection),
            "fuzzing": score(fuzzing)}  # fmt: skip


def _interpretation(n: int = 6, k: int = 3, bins: int = 5, scored: bool = True) -> ConceptInterpretation:
    """A hand-made interpretation: concept c's top token is ``tok{c}`` (concept 1's is EVIL), concept n-1 is dead;
    with ``scored``, the labels of concepts 0..2 carry detection / fuzzing scores (concept 2's without an AUC)."""
    rng = np.random.default_rng(0)
    density = np.linspace(0.9, 0.1, n)
    density[-1] = 0.0
    examples = []
    for c in range(n):
        token = EVIL if c == 1 else f"tok{c}"
        examples.append(
            [
                {
                    "row": c * k + r,
                    "activation": float(k - r),
                    "text_id": 0,
                    "position": 1,
                    "token": token,
                    "context": ["a ", token, " b"],
                    "context_activations": [0.0, float(k - r), 0.5],
                    "center": 1,
                }
                for r in range(k)
            ]
            if density[c] > 0
            else []
        )
    long_text = "x" * (MAX_TEXT_CHARS + 50)
    return ConceptInterpretation.from_flat(
        method="NMFConcepts",
        layer="layer.1",
        labels=[f"label {c}" if c != 1 else EVIL for c in range(n)],
        density=density,
        mean=density / 2,
        maximum=np.arange(n, dtype=float) + 1,
        minimum=np.zeros(n),
        top_rows=np.zeros((n, k), int),
        top_values=np.ones((n, k)),
        examples=examples,
        top_texts=np.array([[0, 1, -1]] * n),
        top_text_values=np.array([[2.0, 1.0, np.nan]] * n),
        texts={"0": f"first {EVIL}", "1": long_text},
        hist_counts=rng.integers(0, 9, (n, bins)),
        hist_edges=np.tile(np.linspace(0, 1, bins + 1), (n, 1)),
        vocab_tokens=[["</script>", "b"]] * n,
        vocab_logits=np.tile([2.0, 1.0], (n, 1)),
        params={"rows": 99},
        label_scores={
            0: _label_score("label 0", 0.625, 0.5),
            1: _label_score(EVIL, 0.875, 0.75),
            2: _label_score("label 2", 0.5, 0.375, auc=None),
        }
        if scored and n > 2
        else {},
    )


def _text(n: int = 6) -> TextConcepts:
    coefficients = np.zeros((4, n))
    coefficients[1, 2], coefficients[1, 0], coefficients[2, 1] = 3.0, 1.0, 2.0
    return TextConcepts(
        layout=TokenLayout(
            text=f"Hi {EVIL}!",
            tokens=["[CLS]", "Hi", EVIL, "[SEP]"],
            offsets=[(0, 0), (0, 2), (3, 31), (0, 0)],
            special_mask=[True, False, False, True],
        ),
        coefficients=coefficients,
        layer="layer.1",
        method="NMF",
    )


def _state_bytes(widget) -> int:
    state = {k: v for k, v in widget.get_state().items() if k not in ("_esm", "_css")}
    return len(json.dumps(state, default=lambda o: "x" * len(bytes(o))))


def test_traits_and_first_page_payload():
    interp = _interpretation()
    browser = ConceptBrowser(interp, texts=[_text()], importance=np.array([0.5, -2, np.nan, 1, 0, 0]), page_size=2)
    assert browser.labels[1] == EVIL and browser.n_rows == 99 and browser.layer == "layer.1"
    np.testing.assert_allclose(buffer_to_array(browser.density), interp.density, rtol=1e-6)
    assert browser.top_tokens[0] == ["tok0"] and browser.top_tokens[5] == []
    assert browser.requested == [0, 1] and sorted(browser.details) == ["0", "1"]
    assert browser.text_tokens == [["Hi", EVIL]] and browser.text_gaps == [["", " "]]
    top = buffer_to_array(browser.text_top_concepts)
    assert top.shape == (2, 5) and top[0, :2].tolist() == [2, 0] and top[0, 2] == -1 and top[1, 0] == 1
    assert buffer_to_array(browser.text_top_values)[0, :2].tolist() == [3.0, 1.0]


def test_concept_detail_matches_interpretation():
    interp = _interpretation()
    browser = ConceptBrowser(interp, texts=[_text()])
    detail = browser.concept_detail(2)
    np.testing.assert_array_equal(buffer_to_array(detail["hist_counts"]), interp.hist_counts[2])
    np.testing.assert_allclose(buffer_to_array(detail["hist_edges"]), interp.hist_edges[2], rtol=1e-6)
    assert [e["activation"] for e in detail["examples"]] == [3.0, 2.0, 1.0]
    assert detail["examples"][0]["tokens"] == ["a ", "tok2", " b"] and detail["examples"][0]["center"] == 1
    assert [t["text_id"] for t in detail["top_texts"]] == [0, 1]
    assert len(detail["top_texts"][1]["text"]) == MAX_TEXT_CHARS + 1  # cut, with an ellipsis
    assert detail["vocabulary"][0] == {"token": "</script>", "logit": 2.0}
    assert buffer_to_array(detail["text_activations"]).tolist() == [3.0, 0.0]  # non-special tokens only
    json.dumps(browser.details, default=lambda o: None, allow_nan=False)  # export pages refuse NaN


def test_paging_sends_only_requested_and_selected_details():
    n, k = 300, 10
    interp = _interpretation(n=n, k=k, bins=30)
    browser = ConceptBrowser(interp, page_size=10)
    assert len(browser.details) == 10
    page_bytes = _state_bytes(browser)
    browser.requested = list(range(20, 30)) + [n + 5, -1]  # as the front end writes it; out-of-range ids dropped
    assert browser.requested == list(range(20, 30))
    browser.selected_concept = 200
    assert sorted(map(int, browser.details)) == list(range(20, 30)) + [200]
    everything = {str(c): browser.concept_detail(c) for c in range(n)}
    full = len(json.dumps(everything, default=lambda o: "x" * len(bytes(o))))
    assert page_bytes < full / 10  # the page's state is a small fraction of all details
    assert page_bytes < 60_000


def test_visible_order_sort_search_and_dead_filter():
    browser = ConceptBrowser(_interpretation(), importance=[0.5, -2, np.nan, 1, 0, 0])
    assert browser.hide_dead and browser.visible_order() == [0, 1, 2, 3, 4]  # concept 5 never fired: hidden by default
    browser.hide_dead = False
    assert browser.visible_order() == [0, 1, 2, 3, 4, 5]
    browser.sort_by, browser.descending = "density", False
    assert browser.visible_order() == [5, 4, 3, 2, 1, 0]
    browser.sort_by, browser.descending = "importance", True
    assert browser.visible_order() == [3, 0, 4, 5, 1, 2]  # NaN last, ties by id
    browser.sort_by = "abs_importance"
    assert browser.visible_order() == [1, 3, 0, 4, 5, 2]
    browser.hide_dead = True
    assert 5 not in browser.visible_order()
    browser.search = "TOK3"
    assert browser.visible_order() == [3]
    browser.search = "img"  # matches concept 1's label
    assert browser.visible_order() == [1]


def test_importance_from_concept_importance_and_bad_inputs():
    interp = _interpretation()
    with pytest.raises(TypeError, match="takes a ConceptInterpretation"):
        ConceptBrowser("not concepts")
    with pytest.raises(ValueError, match="one number per concept"):
        ConceptBrowser(interp, importance=[1.0, 2.0])
    with pytest.raises(ValueError, match="same concept model"):
        ConceptBrowser(interp, texts=[_text(n=3)])
    with pytest.raises(TypeError, match=r"not strings.*interpretation\.widget\(texts="):
        ConceptBrowser(interp, texts=["hello"])
    with pytest.raises(ValueError, match="plain-string texts need concept_model="):
        interp.widget(texts=["hello"])
    browser = ConceptBrowser(interp)
    with pytest.raises(Exception, match="needs importance="):
        browser.sort_by = "importance"
    with pytest.raises(Exception, match="out of range"):
        browser.selected_concept = 6
    with pytest.raises(Exception, match="page_size"):
        browser.page_size = 0


def test_static_svg_fallback_is_escaped_and_first_after_the_widget_view():
    browser = ConceptBrowser(_interpretation(), importance=[0.5, -2, 0, 1, 0, 0], hide_dead=False)
    data, _ = browser._repr_mimebundle_()
    assert list(data)[:2] == [WIDGET_VIEW_MIME, "image/svg+xml"]
    assert "text/html" not in data
    svg = data["image/svg+xml"]
    root = ET.fromstring(svg)  # well-formed: token text was escaped
    text = "".join(root.itertext())
    assert EVIL in text and "<img" not in svg
    assert "#1 " + EVIL in text and "DEAD" in text and "contribution" not in text and "importance −2" in text
    assert "tok3" in text
    browser.error = "broken <b>"
    assert "broken &lt;b&gt;" in browser._repr_mimebundle_()[0]["image/svg+xml"]
    assert "ConceptBrowser(6 NMFConcepts concepts" in repr(browser)


def test_export_page_is_offline_and_escaped(tmp_path):
    browser = ConceptBrowser(_interpretation(), texts=[_text()])
    page = browser.export_html(tmp_path / "concepts.html").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert EVIL not in page and "\\u003cimg src=x onerror" in page  # state JSON escapes "<" inside <script>


@pytest.fixture(scope="module")
def tiny_bert_concepts(bert_classifier):
    model, tokenizer = bert_classifier
    texts = [
        "The soup was cold and bland.",
        "Great service, friendly staff!",
        "Not bad at all.",
        f"The movie was awful {EVIL}.",
        "I loved the music and the food.",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
        concepts = NMFConcepts(4, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 200}).fit(store)
    return model, tokenizer, store, concepts


def test_tiny_bert_end_to_end(tiny_bert_concepts):
    model, tokenizer, store, concepts = tiny_bert_concepts
    before = model_fingerprint(model, tokenizer)
    importance = concept_importance(concepts, model, tokenizer, "Not bad at all.", target="positive")
    with pytest.raises(TypeError, match=r"prepared data.*\(got model=, store=, tokenizer=\).*interpret_concepts\("):
        ConceptBrowser(concepts, store=store, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"prepared data.*\.widget\(texts="):
        ConceptBrowser(concepts)
    interpretation = interpret_concepts(concepts, store, k=3, model=model, tokenizer=tokenizer, progress=False)
    browser = interpretation.widget(
        texts=[importance, "Cold soup."], concept_model=concepts, model=model, tokenizer=tokenizer, page_size=2
    )
    assert model_fingerprint(model, tokenizer) == before
    assert (
        browser.n_rows == len(store)
        and len(browser.labels) == 4
        and browser.importance_label == "contribution to positive"
    )
    np.testing.assert_allclose(
        buffer_to_array(browser.importance), importance.per_concept("positive"), rtol=1e-5, atol=1e-6
    )
    browser.selected_text, browser.selected_concept = 1, 3
    expected = text_concepts(concepts, model, tokenizer, "Cold soup.")
    got = buffer_to_array(browser.details["3"]["text_activations"])
    np.testing.assert_allclose(got, expected.coefficients[~expected.special_mask][:, 3], rtol=1e-5, atol=1e-6)
    assert browser.text_tokens == [
        ["Not", "bad", "at", "all", "."],
        ["Cold", "soup", "."],
    ]  # original case from offsets
    assert browser.text_gaps[1] == ["", " ", ""]
    detail = browser.details["3"]
    assert len(detail["examples"]) == 3 and sum(buffer_to_array(detail["hist_counts"])) > 0
    assert ET.fromstring(browser.static_svg()).tag.endswith("svg")
    assert torch.is_grad_enabled()


def test_export_page_preloads_concept_details_for_browsing_without_a_kernel(tmp_path):
    browser = ConceptBrowser(_interpretation(), texts=[_text()], page_size=2)
    assert sorted(browser.details) == ["0", "1"]  # the live widget holds only the shown page
    state = _export_state_of(browser.to_html(preload=5))
    assert sorted(state["details"], key=int) == ["0", "1", "2", "3", "4"]
    assert state["details"]["4"]["label"] == browser.concept_detail(4)["label"]
    assert sorted(browser.details) == ["0", "1"] and browser.get_state()["details"].keys() == {"0", "1"}
    assert sorted(_export_state_of(browser.to_html(preload=0))["details"]) == ["0", "1"]
    with pytest.raises(ValueError, match="preload must be an integer >= 0"):
        browser.to_html(preload=-1)


def _export_state_of(page: str) -> dict:
    block = re.search(r'<script type="application/json" id="iw-state-0">(.*?)</script>', page, re.S).group(1)
    return json.loads(block)["state"]


class _FakeAttributions:
    """A ConceptInputAttributionsLike that records what the browser asks for (concept → signed scores)."""

    method = "occlusion"

    def __init__(self):
        self.asked: list[tuple[str, int, bool]] = []
        self.cache: dict[tuple[str, int], object] = {}

    def scores(self, text, concept, *, compute=True):
        self.asked.append((text, concept, compute))
        if (text, concept) not in self.cache and compute:
            from types import SimpleNamespace

            values = np.array([[0.0, -1.5 * (concept + 1), 2.0, 0.0]])  # [CLS] Hi EVIL [SEP]
            self.cache[(text, concept)] = SimpleNamespace(
                text=text,
                tokens=["[CLS]", "Hi", EVIL, "[SEP]"],
                offsets=[(0, 0)] * 4,
                scores=values,
                special_mask=np.array([True, False, False, True]),
                method="occlusion",
                signed=True,
                completeness_error=None,
                params={"concept_score": f"activation of concept {concept}", "concept_activation": [1.25]},
            )
        return self.cache.get((text, concept))


def test_attribution_text_mode_asks_only_for_the_selected_concept():
    fake = _FakeAttributions()
    browser = ConceptBrowser(_interpretation(), texts=[_text()], input_attributions=fake, page_size=3)
    assert browser.attribution_method == "occlusion" and browser.text_mode == "activation"
    assert fake.asked == [] and browser.details["0"]["text_attribution"] is None  # activation mode asks nothing
    browser.text_mode = "attribution"
    assert not any(compute for *_, compute in fake.asked)  # nothing selected: the page is served from the cache
    browser.selected_concept = 2
    assert (f"Hi {EVIL}!", 2, True) in fake.asked and list(fake.cache) == [(f"Hi {EVIL}!", 2)]
    got = browser.details["2"]["text_attribution"]
    assert buffer_to_array(got["values"]).tolist() == [-4.5, 2.0]  # the shown (non-special) tokens
    assert got["method"] == "occlusion" and got["signed"] and got["activation"] == 1.25
    assert got["score"] == "activation of concept 2" and got["completeness_error"] is None
    assert browser.details["0"]["text_attribution"] is None  # on the page, not selected, not cached
    browser.selected_concept = 5  # never fired: nothing to attribute, nothing asked
    assert browser.details["5"]["text_attribution"] is None and (f"Hi {EVIL}!", 5, True) not in fake.asked
    page = browser.to_html(preload=4)  # an export carries what is cached and computes nothing new
    assert (f"Hi {EVIL}!", 3, True) not in fake.asked and EVIL not in page
    state = _export_state_of(page)
    assert state["details"]["2"]["text_attribution"]["method"] == "occlusion"
    assert state["text_mode"] == "attribution" and state["attribution_method"] == "occlusion"


def test_attribution_text_mode_errors():
    with pytest.raises(Exception, match="needs input attributions"):
        ConceptBrowser(_interpretation(), texts=[_text()]).text_mode = "attribution"
    with pytest.raises(Exception, match="unknown text_mode .both.; use one of"):
        ConceptBrowser(_interpretation(), texts=[_text()], input_attributions=_FakeAttributions()).text_mode = "both"
    with pytest.raises(TypeError, match="input_attributions must be a ConceptInputAttributions"):
        ConceptBrowser(_interpretation(), input_attributions="occlusion")


def test_tiny_bert_input_attribution_in_the_browser(tiny_bert_concepts):
    from interp_widgets.concepts import concept_attribution

    model, tokenizer, store, concepts = tiny_bert_concepts
    before = model_fingerprint(model, tokenizer)
    interpretation = interpret_concepts(concepts, store, k=3, progress=False)
    browser = interpretation.widget(
        texts=["Cold soup.", "Not bad at all."],
        concept_model=concepts,
        model=model,
        tokenizer=tokenizer,
        input_attribution="occlusion",
    )
    browser.text_mode, browser.selected_text, browser.selected_concept = "attribution", 1, 2
    expected = concept_attribution(concepts, model, tokenizer, "Not bad at all.", concept=2, method="occlusion")
    got = buffer_to_array(browser.details["2"]["text_attribution"]["values"])
    np.testing.assert_allclose(got, expected.scores[0][~expected.special_mask], atol=2e-4)
    assert model_fingerprint(model, tokenizer) == before
    with pytest.raises(ValueError, match="needs concept_model=, model= and tokenizer="):
        interpretation.widget(texts=[_text(4)], input_attribution="occlusion")


def test_hierarchy_in_the_detail_pane():
    from interp_widgets.concepts import concept_hierarchy

    codes = np.array([[1, 1, 0, 1, 0, 0], [1, 0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0], [0, 0, 0, 0, 1, 0]], np.float32)
    decoder = np.array([[1, 0], [0.8, 0.6], [0.6, 0.8], [0.7, 0.7], [0, 1], [1, 1]], np.float32)
    tree = concept_hierarchy(codes, decoder, [0, 1, 1, 2, 0, 2])
    assert tree.parent_of == {1: 0, 2: 0, 3: 1}
    browser = ConceptBrowser(_interpretation(), hierarchy=tree, selected_concept=0)
    root = browser.details["0"]["hierarchy"]
    assert root["parent"] is None and root["absorption"] == 0.0
    assert [(c["concept"], c["depth"], c["label"]) for c in root["children"]] == [
        (1, 1, browser.labels[1]),
        (3, 2, browser.labels[3]),
        (2, 1, browser.labels[2]),
    ]
    leaf = browser.concept_detail(3)["hierarchy"]
    assert leaf["parent"]["concept"] == 1 and leaf["parent"]["conditional"] == 1.0 and leaf["children"] == []
    assert browser.concept_detail(4)["hierarchy"] is None  # in no link
    assert ConceptBrowser(_interpretation()).concept_detail(0)["hierarchy"] is None
    with pytest.raises(TypeError, match="hierarchy must be a ConceptHierarchy"):
        ConceptBrowser(_interpretation(), hierarchy={1: 0})
    with pytest.raises(ValueError, match="outside 0..2"):
        ConceptBrowser(_interpretation(3), hierarchy=tree)


def test_label_scores_sit_beside_each_label_in_the_payload_and_sort_the_list():
    browser = ConceptBrowser(_interpretation(), texts=[_text()], hide_dead=False)
    detection, fuzzing = browser._column("label_detection"), browser._column("label_fuzzing")
    np.testing.assert_array_equal(detection, [0.625, 0.875, 0.5, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(fuzzing, [0.5, 0.75, 0.375, np.nan, np.nan, np.nan])
    assert browser.label_scorer == "<b>judge</b>"
    detail = browser.concept_detail(1)["label_scores"]
    assert detail["scorer"] == "<b>judge</b>" and detail["detection"] == {
        "balanced_accuracy": 0.875, "auc": 0.75, "p_value": None, "n_examples": 8, "n_activating": 4,
        "n_non_activating": 4, "n_failed": 0}  # fmt: skip
    assert detail["control"] is None  # scored before the chance test and the control existed
    assert browser.concept_detail(2)["label_scores"]["fuzzing"]["auc"] is None
    assert browser.concept_detail(3)["label_scores"] is None  # not scored
    browser.sort_by, browser.descending = "detection", True
    assert browser.visible_order() == [1, 0, 2, 3, 4, 5]  # unscored last, in id order
    browser.sort_by, browser.descending = "fuzzing", False
    assert browser.visible_order() == [2, 0, 1, 3, 4, 5]
    payload = browser.mime_payload()  # the saved output: the columns, and the preloaded details' scores
    assert (
        payload["data"]["label_scorer"] == "<b>judge</b>" and payload["data"]["label_detection"]["dtype"] == "float32"
    )
    assert payload["state"]["details"]["1"]["label_scores"]["fuzzing"]["balanced_accuracy"] == 0.75


def test_without_scored_labels_there_are_no_score_columns_and_no_score_sorting():
    browser = ConceptBrowser(_interpretation(scored=False))
    assert browser.label_detection is None and browser.label_scorer == ""
    assert browser.concept_detail(0)["label_scores"] is None
    with pytest.raises(ValueError, match="score_labels"):
        browser.sort_by = "detection"
    assert "scored" not in browser.static_svg()


def test_label_scores_in_the_static_picture_and_the_export_stay_escaped(tmp_path):
    browser = ConceptBrowser(_interpretation(), texts=[_text()], sort_by="detection", descending=True)
    svg = browser.static_svg()
    text = "".join(ET.fromstring(svg).itertext())
    assert "#1 " + EVIL + " · density" not in text  # the scores sit between the label and the statistics
    assert f"#1 {EVIL} · label detection 0.875 · fuzzing 0.75 · density" in text
    assert "labels scored by <b>judge</b> (balanced accuracy, chance 0.5)" in text
    assert "<b>" not in svg and "<img" not in svg
    page = browser.export_html(tmp_path / "concepts.html").read_text(encoding="utf-8")
    assert "<b>judge" not in page and EVIL not in page
    state = _export_state_of(browser.to_html(preload=3))
    assert state["details"]["1"]["label_scores"]["detection"]["balanced_accuracy"] == 0.875


def test_score_labels_scores_reach_the_browser_through_a_saved_interpretation(tmp_path):
    from interp_widgets.concepts import score_labels
    from tests.concepts.test_label_scores import WordScorer
    from tests.concepts.test_label_scores import _interpretation as _scored_interpretation

    interp = _scored_interpretation().replace(texts={"0": "text"})  # its texts are a list: the browser reads ids
    score_labels(interp, WordScorer(), concepts=[0, 1], n_examples=10)
    interp = ConceptInterpretation.load(interp.save(tmp_path / "interp.safetensors"))
    browser = ConceptBrowser(interp)
    np.testing.assert_allclose(browser._column("label_detection"), [0.8, 1.0, np.nan], equal_nan=True)
    assert (
        browser.label_scorer == "word scorer" and browser.concept_detail(0)["label_scores"]["detection"]["auc"] == 1.0
    )
    detail = browser.concept_detail(0)["label_scores"]  # the p-values and the control, as score_labels saved them
    saved = interp.label_scores[0]
    assert [detail[kind]["p_value"] for kind in ("detection", "fuzzing")] == pytest.approx(
        [saved["detection"]["p_value"], saved["fuzzing"]["p_value"]]
    )
    control = interp.label_control["concepts"][0]
    assert detail["control"]["swapped_from"] == 1 and detail["control"]["swapped_label"] == interp.labels[1]
    assert detail["control"]["detection"]["p_value"] == pytest.approx(control["detection"]["p_value"])
    assert detail["control"]["outscores"] == control["outscores"] and detail["control"]["true_score"] == pytest.approx(
        control["true_score"]
    )
    new = {0: "soup", 1: "weather", 2: "cat"}
    browser = ConceptBrowser(interp.relabel(lambda c, examples: new[c]))  # a changed label loses its score
    np.testing.assert_allclose(browser._column("label_fuzzing"), [0.8, np.nan, np.nan], equal_nan=True)
    assert browser.concept_detail(0)["label_scores"]["control"] is None  # the relabel dropped the control


def test_the_label_score_filter_keeps_labels_whose_two_scores_reach_it():
    browser = ConceptBrowser(_interpretation(), hide_dead=False)
    browser.min_label_score = 0.5
    assert browser.visible_order() == [0, 1]  # concept 2's fuzzing is 0.375; 3..5 are not scored
    browser.min_label_score = 0.75
    assert browser.visible_order() == [1]
    assert "label scores ≥ 0.75" in "".join(ET.fromstring(browser.static_svg()).itertext())
    assert browser.mime_payload()["state"]["min_label_score"] == 0.75
    browser.min_label_score = 0
    assert len(browser.visible_order()) == 6
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        browser.min_label_score = 1.5
    with pytest.raises(ValueError, match="needs scored labels"):
        ConceptBrowser(_interpretation(scored=False)).min_label_score = 0.5


def _with_control(interp: ConceptInterpretation, wins: int, n: int = 3, ties: int = 0) -> ConceptInterpretation:
    """``interp`` with a swapped-label control over concepts 0..n-1 (each judged under the next one's label, so
    concept 0 under concept 1's hostile label) whose true label won ``wins`` times (concepts 0..wins-1: 0.25 under
    the swapped label, the others tie), and concept 0's detection score (and
    concept 1's fuzzing score) no better than chance."""
    labels = interp.labels
    concepts = {}
    for c in range(n):
        true = (interp.label_scores[c]["detection"]["balanced_accuracy"]
                + interp.label_scores[c]["fuzzing"]["balanced_accuracy"]) / 2  # fmt: skip
        swapped = 0.25 if c < wins else true
        concepts[c] = {
            "label": labels[c], "swapped_from": (c + 1) % n, "swapped_label": labels[(c + 1) % n],
            "detection": {"balanced_accuracy": swapped, "p_value": 0.625, "above_chance": False},
            "fuzzing": {"balanced_accuracy": swapped, "p_value": 0.0004, "above_chance": True},
            "true_score": true, "swapped_score": swapped, "outscores": c < wins,
        }  # fmt: skip
    scores = {c: {**entry} for c, entry in interp.label_scores.items()}
    for entry in scores.values():
        for kind in ("detection", "fuzzing"):
            entry[kind] = {**entry[kind], "p_value": 0.01, "above_chance": True}
    scores[0]["detection"] = {**scores[0]["detection"], "p_value": 0.3, "above_chance": False}
    scores[1]["fuzzing"] = {**scores[1]["fuzzing"], "p_value": 0.2, "above_chance": False}
    control = {"scorer": "<b>judge</b>", "settings": {}, "concepts": concepts, "n": n, "wins": wins, "ties": ties,
               "fraction": wins / n, "threshold": 0.7, "discriminates": wins / n >= 0.7}  # fmt: skip
    return interp.replace(label_scores=scores, label_control=control)


def test_the_control_decides_whether_scores_no_better_than_chance_are_marked(tmp_path):
    passed = ConceptBrowser(_with_control(_interpretation(), wins=3), hide_dead=False)
    assert passed.label_discriminates and (passed.label_control_n, passed.label_control_wins) == (3, 3)
    assert passed.label_detection_chance.tolist() == [1, 0, 0, -1, -1, -1]
    assert passed.label_fuzzing_chance.tolist() == [0, 1, 0, -1, -1, -1]
    text = "".join(ET.fromstring(passed.static_svg()).itertext())
    assert (
        "control: the true label outscores a swapped one in 3 of 3 concepts (100 %, 0 tied; ≥ 70 % needed): "
        "the scorer discriminates; scores no better than chance are marked" in text
    )
    assert "#0 label 0 · label detection 0.625 (not above chance) · fuzzing 0.5 · density" in text
    assert f"#1 {EVIL} · label detection 0.875 · fuzzing 0.75 (not above chance) · density" in text
    failed = ConceptBrowser(_with_control(_interpretation(), wins=2, ties=1), hide_dead=False)
    assert not failed.label_discriminates and failed.label_detection_chance.tolist()[0] == 1  # carried, not shown
    svg = failed.static_svg()
    text = "".join(ET.fromstring(svg).itertext())
    assert (
        "in 2 of 3 concepts (67 %, 1 tied; ≥ 70 % needed): the scorer cannot discriminate, so no score is marked as "
        "chance" in text
    )
    assert "not above chance" not in text and "<b>" not in svg and "<img" not in svg
    unchecked = ConceptBrowser(_interpretation(), hide_dead=False)  # scores saved before the control existed
    assert unchecked.label_control_n == 0 and unchecked.label_detection_chance.tolist() == [-1] * 6
    assert "no swapped-label control was run, so no score is marked as chance" in unchecked.label_control_text()
    payload = passed.mime_payload()["data"]
    assert (payload["label_control_n"], payload["label_control_wins"], payload["label_discriminates"]) == (3, 3, True)
    page = failed.export_html(tmp_path / "concepts.html").read_text(encoding="utf-8")
    assert "<b>judge" not in page and EVIL not in page


HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'


def test_the_detail_pane_gives_each_score_its_p_value_and_the_label_s_swapped_label_control(tmp_path):
    browser = ConceptBrowser(_with_control(_interpretation(), wins=2), hide_dead=False, selected_concept=0)
    detail = browser.concept_detail(0)["label_scores"]
    assert (detail["detection"]["p_value"], detail["fuzzing"]["p_value"]) == (0.3, 0.01)
    assert detail["control"] == {
        "swapped_from": 1, "swapped_label": EVIL, "detection": {"balanced_accuracy": 0.25, "p_value": 0.625},
        "fuzzing": {"balanced_accuracy": 0.25, "p_value": 0.0004}, "true_score": 0.5625, "swapped_score": 0.25,
        "outscores": True}  # fmt: skip
    lost = browser.concept_detail(2)["label_scores"]["control"]  # concept 2's true label did not outscore
    assert (lost["swapped_from"], lost["swapped_label"], lost["outscores"]) == (0, "label 0", False)
    assert browser.concept_detail(3)["label_scores"] is None  # not scored: no control either
    # the saved output and the exported page carry the same details
    saved = browser.mime_payload()["state"]["details"]["0"]["label_scores"]
    assert saved["control"]["swapped_label"] == EVIL and saved["fuzzing"]["p_value"] == 0.01
    exported = _export_state_of(browser.to_html(preload=3))["details"]["0"]["label_scores"]
    assert exported == json.loads(json.dumps(detail))
    # the static picture adds the selected concept's detail-pane scores, in the live view's words
    svg = browser.static_svg()
    text = "".join(ET.fromstring(svg).itertext())
    assert "label scores of #0 label 0 (scorer <b>judge</b>; chance is 0.5)" in text
    assert "detection: balanced accuracy 0.625 · p = 0.3 · AUC 0.75 · firing + not firing 4 + 4" in text
    assert "fuzzing: balanced accuracy 0.5 · p = 0.01 · AUC 0.75 · firing + not firing 4 + 4" in text
    assert (
        f"control: judged again under the label of #1 (“{EVIL}”): detection 0.25 (p = 0.625) · fuzzing 0.25 "
        "(p = 4e-4); the true label outscores it (mean 0.562 against 0.25)" in text
    )
    assert "<img" not in svg and "<b>" not in svg
    browser.selected_concept = 2
    assert "the true label does not outscore it (mean 0.438 against 0.438)" in "".join(
        ET.fromstring(browser.static_svg()).itertext()
    )
    browser.selected_concept = 3
    assert "label scores of #" not in "".join(ET.fromstring(browser.static_svg()).itertext())
    unchecked = ConceptBrowser(_interpretation(), selected_concept=0)  # scored before the test and the control
    text = "".join(ET.fromstring(unchecked.static_svg()).itertext())
    assert "detection: balanced accuracy 0.625 · p n/a · AUC 0.75" in text and "control: judged" not in text


def test_a_hostile_swapped_label_stays_text_in_the_detail_pane_picture_and_export(tmp_path):
    interp = _interpretation()
    labels = list(interp.labels)
    labels[1] = HOSTILE  # concept 0 is judged again under concept 1's label
    scores = {c: {**entry, "label": labels[c]} for c, entry in interp.label_scores.items()}
    browser = ConceptBrowser(_with_control(interp.replace(labels=labels, label_scores=scores), wins=3),
                             selected_concept=0)  # fmt: skip
    assert browser.concept_detail(0)["label_scores"]["control"]["swapped_label"] == HOSTILE
    svg = browser.static_svg()
    assert "<script" not in svg and "<img" not in svg and "</script" not in svg
    assert f"under the label of #1 (“{HOSTILE}”)" in "".join(ET.fromstring(svg).itertext())
    for page in (browser.to_html(preload=3), browser.export_html(tmp_path / "c.html").read_text(encoding="utf-8")):
        assert HOSTILE not in page and "<script>alert" not in page and "<img src=x" not in page
    assert _export_state_of(browser.to_html(preload=3))["details"]["0"]["label_scores"]["control"]["swapped_label"] == (
        HOSTILE
    )
    payload = json.dumps(browser.mime_payload())
    assert json.loads(payload)["state"]["details"]["0"]["label_scores"]["control"]["swapped_label"] == HOSTILE
