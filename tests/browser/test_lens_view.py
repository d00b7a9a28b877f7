"""The lens view in Debian's chromium (the exported page, no kernel): hover a cell for its top-k, click a position
for the targets' trajectories across the layers, switch logit ↔ tuned in the page, token text escaped.
(tests/browser/test_every_view.py renders it in JupyterLab, Notebook 7 and marimo as well.)"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from playwright.sync_api import expect

from interp_widgets.lens import TunedLens, logit_lens
from tests import tiny_models

pytestmark = pytest.mark.browser


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def test_lens_hover_trajectory_and_switch(tmp_path, recorded_page):
    model, tokenizer = tiny_models.llama_lm()
    tuned = TunedLens.for_model(model)
    tuned.biases[:] = np.random.default_rng(0).normal(0, 0.5, tuned.biases.shape)
    result = logit_lens(
        model, tokenizer, "The <b>cat</b> sat & purred", targets=[" the"], tuned=tuned, top_k=3, progress=False
    )
    (tmp_path / "lens.html").write_text(result.widget().to_html(), encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = recorded_page.page
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/lens.html")
        canvas = page.locator(".iw-lens-canvas")
        expect(canvas).to_be_visible()
        assert page.locator(".iw-lens b").count() == 0, "token text was parsed as markup"
        # hover the cell of layer 0 (bottom row), position 2
        L = len(result.layers)
        x, y = 120 + 2 * 56 + 10, 4 + (L - 1) * 18 + 5
        canvas.hover(position={"x": x, "y": y})
        tip = page.locator(".iw-tooltip")
        expect(tip).to_be_visible()
        text = tip.text_content()
        top = result.top_tokens(layer=0, position=2, lens="logit")
        import json

        assert json.dumps(top[0][0]) in text and "layer:0" in text and "position 2" in text
        # switch to the tuned lens in the page: the same cell now lists the tuned lens's top-k
        page.locator(".iw-lens-select").select_option("tuned")
        expect(page.locator(".iw-caption").first).to_contain_text("tuned lens")
        canvas.hover(position={"x": x + 1, "y": y})
        canvas.hover(position={"x": x, "y": y})
        tuned_top = result.top_tokens(layer=0, position=2, lens="tuned")
        expect(tip).to_contain_text(json.dumps(tuned_top[0][0]))
        # click position 2: probability and rank lines of the next token; tick the second target for two more
        canvas.click(position={"x": x, "y": y})
        plot = page.locator(".iw-lens-plot")
        expect(plot.locator("polyline")).to_have_count(2)
        plot.locator("input[data-target='1']").check()
        expect(plot.locator("polyline")).to_have_count(4)
        points = plot.locator("polyline").first.get_attribute("points").split()
        assert len(points) == L
        expect(plot).to_contain_text(json.dumps(result.tokens[2]))
        assert page.locator(".iw-lens b").count() == 0
        recorded_page.requests.assert_loopback_only()
    finally:
        server.shutdown()
        server.server_close()
