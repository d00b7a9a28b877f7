"""The attention view's export buttons in Debian's chromium, on its exported page (no kernel, one pinned head): the
PNG is a real picture at twice the view's size, the SVG is well-formed with the axis titles and the token text as
inert text, and the CSV holds every non-zero weight of the pinned head exactly as Python stored it (float32)."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import expect

from interp_widgets.attribution.patterns import AttentionPatterns
from tests.widgets.test_views_widget import EVIL

pytestmark = pytest.mark.browser

TOKENS = ["<b>x</b>", EVIL, 'a,"b"', "\n", "cat", "sat"]


def _patterns() -> AttentionPatterns:
    rng = np.random.default_rng(3)
    raw = rng.random((2, 2, 6, 6)) * np.tril(np.ones((6, 6)))
    weights = [(w / w.sum(-1, keepdims=True)).astype(np.float16) for w in raw]
    return AttentionPatterns(tokens=TOKENS, weights=weights, n_kv_heads=1, layer_names=["l.0", "l.1"], model_name="m")


def _download(page, button, folder):
    with page.expect_download() as info:
        button.click()
    path = folder / info.value.suggested_filename
    info.value.save_as(path)
    return path


def test_attention_export_buttons(tmp_path, recorded_page):
    patterns = _patterns()
    widget = patterns.widget(layer=1, heads=[1], pin=[(1, 1)])
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(widget.export_html(tmp_path / "attention.html").as_uri())
    view = page.locator(".iw-attention")
    expect(view.locator('canvas.iw-attn-heatmap[data-source="pinned"]')).to_be_visible()
    expect(view.locator(".iw-attn-axis-y")).to_have_text("queries 0–5 ↓")
    expect(view.locator(".iw-attn-axis-x")).to_have_text("keys 0–5 →")
    assert view.locator(".iw-attn-ticks-y > div").all_text_contents() == [
        "<b>x</b>",
        EVIL,
        'a,"b"',
        "↵\n",
        "cat",
        "sat",
    ]
    assert view.locator("b, img").count() == 0, "token text was parsed as markup"

    buttons = view.locator(".iw-export [data-iw-export]")
    assert buttons.evaluate_all("bs => bs.map(b => b.dataset.iwExport)") == ["png", "svg", "csv", "html"]
    files = {kind: _download(page, buttons.nth(k), tmp_path) for k, kind in enumerate(["png", "svg", "csv"])}
    assert {kind: p.name for kind, p in files.items()} == {kind: f"attention.{kind}" for kind in files}

    image = Image.open(files["png"])
    image.load()
    box = view.bounding_box()
    assert abs(image.width - 2 * box["width"]) <= 2 and abs(image.height - 2 * box["height"]) <= 2
    colours = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=1 << 20)}
    assert len(colours) > 8 and (230, 97, 1) in colours  # the ramp's top colour: the heatmap is in the picture

    root = ET.fromstring(files["svg"].read_bytes())
    assert not [e for e in root.iter() if e.tag.endswith(("}script", "}foreignObject"))]
    texts = [e.text or "" for e in root.iter() if e.tag.endswith("}text")]
    assert "queries 0–5 ↓" in texts and "keys 0–5 →" in texts and "<b>x</b>" in texts
    assert any("layer 1 (l.1), head 1" in t for t in texts)
    assert [e for e in root.iter() if e.tag.endswith("}image")], "the heatmap canvas is missing from the SVG"

    rows = list(csv.reader(io.StringIO(files["csv"].read_text(encoding="utf-8"), newline="")))
    assert rows[0] == ["layer", "layer_name", "head", "source", "query", "query_token", "key", "key_token", "weight"]
    head = patterns.head(1, 1).astype(np.float32)
    expected = [(q, k) for q in range(6) for k in range(6) if head[q, k] > 0]
    assert [(int(r[4]), int(r[6])) for r in rows[1:]] == expected
    assert all(r[:4] == ["1", "l.1", "1", "pinned top-32"] for r in rows[1:])
    assert [r[5] for r in rows[1:]] == [TOKENS[q] for q, _ in expected]  # raw token text, quoted by the CSV
    assert [r[7] for r in rows[1:]] == [TOKENS[k] for _, k in expected]
    np.testing.assert_array_equal(np.array([float(r[8]) for r in rows[1:]], dtype=np.float32),
                                  np.array([head[q, k] for q, k in expected], dtype=np.float32))  # fmt: skip
    assert dialogs == []
    recorded_page.requests.assert_loopback_only()
