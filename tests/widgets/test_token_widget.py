"""TokenHighlightWidget: traits, binary payloads, static fallback, offline export, input validation."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from interp_widgets.widgets import InterpWidget, TokenHighlightWidget, array_to_buffer, buffer_to_array, html_page
from interp_widgets.widgets._base import STATIC_DIR, WIDGET_VIEW_MIME
from interp_widgets.widgets._colour import score_colours

EVIL = "<img src=x onerror=alert(1)>"
TEXT = f"The film was unbelievable.\nGreat {EVIL} </script>"


def _result(**overrides):
    tokens = ["[CLS]", "The", "film", "was", "un", "believ", "able", ".", "Great", EVIL, "</script>", "[SEP]"]
    starts = [0, 0, 4, 9, 13, 15, 21, 25, 27, 33, 62, 0]
    ends = [0, 3, 8, 12, 15, 21, 25, 26, 32, 61, 71, 0]
    fields = dict(
        text=TEXT,
        tokens=tokens,
        offsets=np.array([starts, ends]).T,
        special_mask=np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool),
        word_ids=np.array([-1, 0, 1, 2, 3, 3, 3, 4, 5, 6, 7, -1]),
        sentence_ids=np.array([-1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, -1]),
        scores=np.array(
            [
                [2.0, 0.1, -0.2, 0.05, -0.4, -0.3, -0.1, 0.0, 0.8, 0.3, -0.05, 2.0],
                [-2.0, -0.1, 0.2, -0.05, 0.4, 0.3, 0.1, 0.0, -0.8, -0.3, 0.05, -2.0],
            ]
        ),
        target_labels=["negative", "positive"],
        target_probs=np.array([0.3, 0.7]),
        method="saliency",
        score_meaning="sum over embedding dimension (signed)",
        completeness_error=None,
    )
    fields.update(overrides)
    return SimpleNamespace(**fields)


class _Tags(HTMLParser):
    """Collects start tags with their attributes, and text, of an HTML document."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(markup: str) -> _Tags:
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    return parser


# ---------------------------------------------------------------------------------------------- traits & payloads
def test_traits_come_from_the_result():
    widget = TokenHighlightWidget(_result())
    assert widget.tokens[1:4] == ["The", "film", "was"]
    assert widget.target_labels == ["negative", "positive"]
    assert widget.target_probs == pytest.approx([0.3, 0.7])
    assert widget.selected_target == 1  # the most probable class by default
    assert widget.method == "saliency"
    assert widget.score_meaning == "sum over embedding dimension (signed)"
    assert widget.completeness_error == []
    assert (widget.granularity, widget.show_special_tokens, widget.selected_token, widget.hovered_token) == (
        "token",
        False,
        -1,
        -1,
    )
    assert widget._esm == (STATIC_DIR / "token_highlight.js").read_text(encoding="utf-8")
    assert ".iw-token" in widget._css


def test_a_plain_text_sends_no_turn_ids_and_a_chat_sends_them():
    plain = TokenHighlightWidget(_result())
    assert plain.turn_ids is None and plain.turn_roles == []
    assert plain.get_state()["turn_ids"] == {}  # travels as an absent array: the views treat it as one turn
    chat = TokenHighlightWidget.from_arrays(
        "Hi. Yo.", ["Hi.", "Yo."], [(0, 3), (4, 7)], [1.0, 2.0], turn_ids=[0, 1], turn_roles=["user", "assistant"]
    )
    assert chat.turn_ids.tolist() == [0, 1] and chat.role_starts(chat.units()) == {0: "user", 1: "assistant"}
    plain.granularity = "turn"
    assert plain.role_starts(plain.units()) == {} and len(plain.units()) == 1  # one turn: every visible token


def test_spaces_before_reproduce_the_text_exactly():
    widget = TokenHighlightWidget(_result())
    special = buffer_to_array(widget.special_mask)
    rebuilt = "".join(gap + tok for gap, tok, s in zip(widget.spaces_before, widget.tokens, special) if not s)
    assert rebuilt == TEXT
    assert widget.spaces_before[8] == "\n"  # the newline before "Great" is kept
    assert widget.spaces_before[5] == ""  # sub-word piece "believ" joins "un"


def test_scores_and_ids_travel_as_little_endian_binary_buffers():
    result = _result()
    widget = TokenHighlightWidget(result)
    assert isinstance(widget.scores, np.ndarray) and widget.scores.dtype == np.float32  # the trait holds the array
    wire = widget.get_state()  # what travels to the browser
    assert wire["scores"]["dtype"] == "float32"
    assert wire["scores"]["shape"] == [2, 12]
    assert isinstance(wire["scores"]["data"], memoryview)
    assert bytes(wire["scores"]["data"]) == result.scores.astype("<f4").tobytes()
    assert wire["word_ids"]["dtype"] == "int8"  # ids travel in the narrowest integer type that holds them
    assert bytes(wire["word_ids"]["data"]) == result.word_ids.astype("i1").tobytes()
    many = TokenHighlightWidget.from_arrays(
        " ".join(["w"] * 300), ["w"] * 300, [(2 * i, 2 * i + 1) for i in range(300)], np.zeros(300)
    )
    many_wire = many.get_state()
    assert many_wire["word_ids"]["dtype"] == "int16" and many_wire["sentence_ids"]["dtype"] == "int8"
    assert buffer_to_array(many_wire["word_ids"]).tolist() == many.word_ids.tolist() == list(range(300))
    assert wire["special_mask"]["dtype"] == "bool"
    assert bytes(wire["special_mask"]["data"]) == bytes([1] + [0] * 10 + [1])
    np.testing.assert_array_equal(widget.score_matrix(), result.scores.astype(np.float32))


def test_array_to_buffer_narrows_dtypes_and_makes_c_contiguous_little_endian_copies():
    matrix = np.arange(6, dtype=np.float64).reshape(2, 3).T  # Fortran-ordered view
    payload = array_to_buffer(matrix)
    assert (payload["dtype"], payload["shape"]) == ("float32", [3, 2])
    assert bytes(payload["data"]) == np.ascontiguousarray(matrix, dtype="<f4").tobytes()

    big_endian = np.array([1, -2, 3], dtype=">i8")
    payload = array_to_buffer(big_endian)
    assert payload["dtype"] == "int32"
    assert bytes(payload["data"]) == np.array([1, -2, 3], dtype="<i4").tobytes()

    source = np.array([1.0, 2.0], dtype=np.float32)
    payload = array_to_buffer(source)
    source[0] = 99.0  # the widget holds a copy
    assert buffer_to_array(payload).tolist() == [1.0, 2.0]


def test_array_to_buffer_accepts_torch_tensors_with_grad_and_bfloat16():
    tensor = torch.tensor([[0.5, -1.5]], requires_grad=True) * 2
    payload = array_to_buffer(tensor)
    assert (payload["dtype"], payload["shape"]) == ("float32", [1, 2])
    assert buffer_to_array(payload).tolist() == [[1.0, -3.0]]
    assert buffer_to_array(array_to_buffer(torch.tensor([0.5, 2.0], dtype=torch.bfloat16))).tolist() == [0.5, 2.0]
    assert array_to_buffer(torch.tensor([3, 4]))["dtype"] == "int32"


def test_array_to_buffer_rejects_what_cannot_be_sent():
    with pytest.raises(ValueError, match="do not fit in int32"):
        array_to_buffer(np.array([2**40]))
    with pytest.raises(TypeError, match="dtype object"):
        array_to_buffer(np.array(["a", None], dtype=object))


def test_front_end_changes_come_back_to_python():
    widget = TokenHighlightWidget(_result())
    widget.set_state({"selected_target": 0, "granularity": "word", "selected_token": 5, "hovered_token": 2})
    assert (widget.selected_target, widget.granularity, widget.selected_token, widget.hovered_token) == (
        0,
        "word",
        5,
        2,
    )


def test_target_can_be_chosen_by_label():
    assert TokenHighlightWidget(_result(), selected_target="negative").selected_target == 0


def test_set_result_swaps_the_data_in_place():
    widget = TokenHighlightWidget(_result(), selected_target=0)
    widget.selected_token = 3
    other = TokenHighlightWidget.from_arrays(
        "Hi there", ["Hi", "there"], [(0, 2), (3, 8)], [[1.0, -1.0]], target_labels=["x"]
    )
    widget.set_result(
        SimpleNamespace(text="Hi there", tokens=["Hi", "there"], offsets=[(0, 2), (3, 8)], scores=[[1.0, -1.0]])
    )
    assert widget.tokens == other.tokens == ["Hi", "there"]
    assert widget.target_labels == ["target 0"]
    assert (widget.selected_target, widget.selected_token) == (0, -1)
    assert buffer_to_array(widget.scores).tolist() == [[1.0, -1.0]]


def test_from_arrays_defaults_words_to_whitespace_runs():
    widget = TokenHighlightWidget.from_arrays(
        "un believable film",
        ["un", "believ", "able", "film"],
        [(0, 2), (3, 9), (9, 13), (14, 18)],
        [1.0, 2.0, 3.0, 4.0],
    )
    assert buffer_to_array(widget.word_ids).tolist() == [0, 1, 1, 2]
    widget.granularity = "word"
    assert widget.units() == [[0], [1, 2], [3]]
    assert widget.unit_scores().tolist() == [1.0, 5.0, 4.0]


# ---------------------------------------------------------------------------------------------- aggregation
def test_units_and_sums_match_the_browser_grouping():
    widget = TokenHighlightWidget(_result(), selected_target=0)
    row = _result().scores[0].astype(np.float32).astype(np.float64)
    assert widget.units() == [[i] for i in range(1, 11)]
    widget.granularity = "word"
    assert widget.units() == [[1], [2], [3], [4, 5, 6], [7], [8], [9], [10]]
    assert widget.unit_scores()[3] == pytest.approx(row[4] + row[5] + row[6])
    widget.granularity = "sentence"
    assert widget.units() == [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]]
    widget.show_special_tokens = True
    assert widget.units() == [[0], [1, 2, 3, 4, 5, 6, 7], [8, 9, 10], [11]]
    assert widget.unit_scores()[0] == pytest.approx(2.0)


def test_nan_scores_are_skipped_and_shown_as_unseen():
    scores = np.array([[np.nan, 1.0, np.nan, np.nan, -0.5]])
    widget = TokenHighlightWidget.from_arrays(
        "a bc d e", ["a", "b", "c", "d", "e"], [(0, 1), (2, 3), (3, 4), (5, 6), (7, 8)], scores
    )
    widget.granularity = "word"
    sums = widget.unit_scores()
    assert np.isnan(sums[0]) and sums[1] == 1.0 and np.isnan(sums[2]) and sums[3] == -0.5
    titles = [attrs["title"] for tag, attrs in _parse(widget.static_html()).tags if tag == "span" and "title" in attrs]
    assert titles[0] == '"a": score none (this class does not see it)'
    assert titles[1] == '"bc": score +1, rank 1 of 2'


# ---------------------------------------------------------------------------------------------- display
def test_mimebundle_puts_the_widget_view_first_then_the_static_svg():
    widget = TokenHighlightWidget(_result())
    data, metadata = widget._repr_mimebundle_()
    # no text/html: nbconvert would prefer it over the SVG, and its sanitiser strips the colours
    assert list(data) == [WIDGET_VIEW_MIME, "image/svg+xml", "application/vnd.interp-widgets.v1+json", "text/plain"]
    assert data[WIDGET_VIEW_MIME]["model_id"] == widget.model_id
    assert data["image/svg+xml"] == widget.static_svg()
    assert data["text/plain"] == repr(widget)
    assert isinstance(metadata, dict)


def test_repr_is_a_useful_summary():
    text = repr(TokenHighlightWidget(_result()))
    assert text.startswith("TokenHighlightWidget(method='saliency', 12 tokens, class='positive' p=0.700")
    assert "top: 'Great' −0.8, 'un' +0.4" in text


def test_static_html_colours_each_visible_token_like_the_js_scale():
    widget = TokenHighlightWidget(_result())
    spans = [attrs for tag, attrs in _parse(widget.static_html()).tags if tag == "span" and "title" in attrs]
    row = _result().scores[1].astype(np.float32).astype(np.float64)[1:11]  # special tokens hidden
    assert len(spans) == 10
    max_abs = np.abs(row).max()
    for attrs, score in zip(spans, row):
        background, colour = score_colours(float(score), float(max_abs))
        assert f"background-color:{background};color:{colour}" in attrs["style"]
    assert spans[7]["style"].startswith("background-color:#2166ac;color:#ffffff")  # "Great", −0.8 = strongest blue
    widget.show_special_tokens = True
    assert sum(1 for tag, attrs in _parse(widget.static_html()).tags if tag == "span" and "title" in attrs) == 12


def test_static_html_escapes_untrusted_text_and_has_no_script():
    widget = TokenHighlightWidget(
        _result(
            target_labels=["<b>neg</b>", "pos"], method="<script>alert(1)</script>", score_meaning='" onmouseover="x'
        )
    )
    markup = widget.static_html()
    parsed = _parse(markup)
    assert not [tag for tag, _ in parsed.tags if tag in {"img", "script", "iframe"}]
    assert "<script" not in markup.lower()
    assert "&lt;img src=x onerror=alert(1)&gt;" in markup
    assert EVIL in "".join(parsed.text)
    assert all(not name.startswith("on") for _, attrs in parsed.tags for name in attrs)
    titles = [attrs["title"] for tag, attrs in parsed.tags if tag == "span" and "title" in attrs]
    assert titles[8].startswith(json.dumps(EVIL) + ": score ")


def test_error_trait_replaces_the_fallback_with_an_escaped_message():
    widget = TokenHighlightWidget(_result())
    widget.error = "attribution failed for <model>"
    markup = widget._fallback_html()
    assert "could not be displayed" in markup
    assert "attribution failed for &lt;model&gt;" in markup
    assert "<span style" not in markup
    svg = widget._repr_mimebundle_()[0]["image/svg+xml"]
    assert "could not be displayed" in svg and "attribution failed for &lt;model&gt;" in svg
    assert "<rect x" not in svg  # no token boxes, only the message


# ---------------------------------------------------------------------------------------------- export
def _blocks(page: str) -> dict[str, str]:
    return dict(re.findall(r'<script type="application/json" id="([^"]+)">(.*?)</script>', page, flags=re.S))


def test_export_html_writes_one_offline_page_whose_state_round_trips(tmp_path):
    widget = TokenHighlightWidget(_result(), granularity="word")
    path = widget.export_html(tmp_path / "explanation.html", title="Why <positive>?")
    assert path == tmp_path / "explanation.html"
    assert [p.name for p in tmp_path.iterdir()] == ["explanation.html"]
    page = path.read_text(encoding="utf-8")
    assert page == widget.to_html(title="Why <positive>?")
    assert "http://" not in page and "https://" not in page
    parsed = _parse(page)
    assert not [(tag, attrs) for tag, attrs in parsed.tags if "src" in attrs or "href" in attrs]
    assert not [tag for tag, _ in parsed.tags if tag in {"link", "iframe", "img"}]
    assert [attrs.get("type") for tag, attrs in parsed.tags if tag == "script"] == [
        "application/json",
        "application/json",
        "module",
    ]
    # token text such as </script> cannot close a script element early: exactly three closing tags
    assert page.lower().count("</script") == 3
    assert "<title>Why &lt;positive&gt;?</title>" in page

    blocks = _blocks(page)
    esm = json.loads(blocks["iw-esm-0"])
    assert esm == (STATIC_DIR / "token_highlight.js").read_text(encoding="utf-8")
    exported = json.loads(blocks["iw-state-0"])
    state = exported["state"]
    assert state["tokens"] == widget.tokens and state["granularity"] == "word"
    assert "_esm" not in state and "_css" not in state
    buffers = {tuple(b["path"]): base64.b64decode(b["data"]) for b in exported["buffers"]}
    assert buffers[("scores", "data")] == widget.scores.astype("<f4").tobytes()
    assert buffers[("word_ids", "data")] == widget.word_ids.tobytes() and widget.word_ids.dtype == np.int8
    assert state["scores"] == {"dtype": "float32", "shape": [2, 12]}
    noscript = page[page.index("<noscript>") + len("<noscript>") : page.index("</noscript>")]
    assert noscript == widget.static_html()


def test_export_embeds_each_module_once_and_escapes_headings():
    first, second = TokenHighlightWidget(_result()), TokenHighlightWidget(_result(), selected_target=0)
    page = html_page([first, "<i>second</i> input", second], title="Report")
    blocks = _blocks(page)
    assert sorted(blocks) == ["iw-esm-0", "iw-state-0", "iw-state-2"]
    assert "<h2>&lt;i&gt;second&lt;/i&gt; input</h2>" in page
    assert json.loads(blocks["iw-state-2"])["state"]["selected_target"] == 0
    with pytest.raises(TypeError, match="not int"):
        html_page([first, 3], title="Report")


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"scores": np.zeros((2, 11))}, ValueError, r"scores have shape \(2, 11\) but there are 12 tokens"),
        ({"scores": np.zeros((2, 12, 1))}, ValueError, r"expected \(n_targets, 12\)"),
        ({"tokens": [], "offsets": np.zeros((0, 2)), "scores": np.zeros((2, 0))}, ValueError, "tokens is empty"),
        ({"offsets": np.zeros((12, 3))}, ValueError, r"offsets have shape \(12, 3\)"),
        ({"offsets": np.full((12, 2), 500)}, ValueError, "offsets must be spans"),
        ({"word_ids": np.zeros(3)}, ValueError, "word_ids has shape"),
        ({"target_labels": ["only one"]}, ValueError, "1 target labels for 2 rows"),
        ({"target_probs": np.ones(5)}, ValueError, "target_probs has 5 entries for 2 targets"),
        ({"scores": np.full((2, 12), np.inf)}, ValueError, "infinity"),
        ({"text": b"bytes"}, TypeError, "text must be a str"),
        ({"tokens": [1] * 12}, TypeError, "tokens must be a list of str"),
    ],
)
def test_bad_inputs_raise_clear_errors(overrides, error, message):
    with pytest.raises(error, match=message):
        TokenHighlightWidget(_result(**overrides))


def test_objects_that_are_not_results_are_rejected():
    with pytest.raises(TypeError, match="has no text, tokens, offsets, scores"):
        TokenHighlightWidget(object())


def test_bad_trait_values_raise_value_errors():
    widget = TokenHighlightWidget(_result())
    with pytest.raises(ValueError, match="unknown granularity"):
        widget.granularity = "paragraph"
    with pytest.raises(ValueError, match="selected_target 2 is out of range; there are 2 targets"):
        widget.selected_target = 2
    with pytest.raises(ValueError, match="selected_token 12 is out of range"):
        widget.selected_token = 12
    with pytest.raises(ValueError, match="unknown target 'neutral'"):
        TokenHighlightWidget(_result(), selected_target="neutral")


def test_a_missing_bundle_gives_build_instructions():
    class Unbuilt(InterpWidget):
        _bundle = "no_such_bundle"

    with pytest.raises(
        FileNotFoundError, match=r"JS bundle not built; run `npm --prefix js ci && npm --prefix js run build`"
    ):
        Unbuilt()


def test_the_engine_result_displays_as_this_widget():
    from interp_widgets.attribution.result import AttributionResult

    r = _result()
    result = AttributionResult.from_flat(
        text=r.text, tokens=r.tokens, offsets=r.offsets, special_mask=r.special_mask, word_ids=r.word_ids,
        sentence_ids=r.sentence_ids, scores=r.scores, target_labels=r.target_labels, target_probs=r.target_probs,
        target_ids=np.array([0, 1]), method="integrated_gradients", completeness_error=np.array([0.01, -0.02]),
    )  # fmt: skip
    widget = result.widget()
    assert isinstance(widget, TokenHighlightWidget)
    assert widget.completeness_error == pytest.approx([0.01, -0.02])
    assert widget.score_meaning == result.score_meaning
    assert list(result._repr_mimebundle_()[0])[:2] == [WIDGET_VIEW_MIME, "image/svg+xml"]


def test_a_result_is_read_through_its_one_token_layout():
    """ScoredTokens reads a result's TokenLayout (``layout``); the plain object with the layout's values flat, which
    the docs and from_arrays promise, reads as the same layout."""
    from interp_widgets.text_units import TokenLayout
    from interp_widgets.widgets._protocols import ScoredTokens
    from interp_widgets.widgets._tokens import scored_layout

    flat = _result()
    layout = scored_layout(flat)
    assert isinstance(layout, TokenLayout) and layout.word_ids.tolist() == flat.word_ids.tolist()
    assert not isinstance(flat, ScoredTokens)  # flat values are read, but the protocol is the layout
    scored = SimpleNamespace(layout=layout, scores=flat.scores, target_labels=flat.target_labels)
    assert isinstance(scored, ScoredTokens) and scored_layout(scored) is layout
    from_layout, from_flat = TokenHighlightWidget(scored), TokenHighlightWidget(flat)
    for name in ("tokens", "spaces_before", "special_mask", "word_ids", "sentence_ids", "scores", "target_labels"):
        assert np.array_equal(getattr(from_layout, name), getattr(from_flat, name)), name
    with pytest.raises(TypeError, match="has no scores; pass an AttributionResult"):
        TokenHighlightWidget(SimpleNamespace(layout=layout))
