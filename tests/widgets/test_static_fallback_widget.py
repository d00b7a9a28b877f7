"""Static fallback in real notebook renderers: a notebook executed with nbclient (tiny BERT classifier), exported by
nbconvert without widget state and with ``--sanitize-html``, must still show coloured tokens and the legend."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import vl_convert
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from interp_widgets.widgets._colour import score_colours

REPO = Path(__file__).resolve().parents[2]
EVIL = "<img src=x onerror=alert(1)>"

SETUP = f"""
import sys, os
sys.path.insert(0, {str(REPO)!r})
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np, torch
from tests import tiny_models
from interp_widgets.attribution import InputXGradient
from transformers import BertConfig, BertForSequenceClassification
tok = tiny_models.wordpiece_tokenizer()
config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, num_labels=2, id2label={{0: "negative", 1: "positive"}})
model = tiny_models.seeded(lambda: BertForSequenceClassification(config))
result = InputXGradient().attribute(model, tok, "Great film, awful {EVIL} ending")
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell("result")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    path = tmp_path_factory.mktemp("nb") / "saved.ipynb"
    nbformat.write(nb, path)
    return path


def _without_state(path: Path, out: Path) -> Path:
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, out)
    return out


def _svgs(page: str) -> list[str]:
    return [
        base64.b64decode(data).decode("utf-8") for data in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    ]


def _assert_coloured_tokens_and_legend(svg: str) -> None:
    assert ">Great<" in svg and ">film<" in svg
    assert ">&lt;<" in svg and "<img" not in svg  # "<" of the evil token is escaped text inside the SVG
    fills = set(re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="[^"]+" rx="3" fill="(#[0-9a-f]{6})"', svg))
    assert len(fills) >= 4  # tokens really have different colours
    legend_swatches = re.findall(r'height="10" fill="(#[0-9a-f]{6})"', svg)
    assert (
        legend_swatches[0] == score_colours(-1 + 1 / 24, 1.0)[0]
        and legend_swatches[-1] == score_colours(1 - 1 / 24, 1.0)[0]
    )
    assert "blue = negative, orange = positive" in svg
    # draw it (resvg, offline) and check that strong blue and strong orange pixels are on the picture
    png = vl_convert.svg_to_png(svg)
    from PIL import Image
    import io

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3).astype(int)
    near = lambda rgb: (np.abs(pixels - np.array(rgb)).sum(axis=1) < 30).sum()  # noqa: E731
    assert near((33, 102, 172)) > 20 and near((230, 97, 1)) > 20


def test_the_saved_output_carries_the_widget_view_and_an_svg_but_no_text_html(executed):
    nb = nbformat.read(executed, as_version=4)
    output = nb.cells[1].outputs[0]
    assert set(output["data"]) == {
        "application/vnd.jupyter.widget-view+json",
        "image/svg+xml",
        "application/vnd.interp-widgets.v1+json",
        "text/plain",
    }  # nbformat sorts keys
    assert "widgets" in nb.metadata  # nbclient saved the widget state
    _assert_coloured_tokens_and_legend(output["data"]["image/svg+xml"])


def test_notebook_without_widget_state_shows_the_svg(executed, tmp_path):
    page, _ = HTMLExporter().from_filename(str(_without_state(executed, tmp_path / "plain.ipynb")))
    svgs = _svgs(page)
    assert len(svgs) == 1
    _assert_coloured_tokens_and_legend(svgs[0])
    assert "onerror=alert" not in page.replace("onerror=alert(1)&gt;", "")  # never live markup


def test_sanitized_nbconvert_export_still_shows_coloured_tokens_and_legend(executed, tmp_path):
    source = _without_state(executed, tmp_path / "shared.ipynb")
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--sanitize-html", str(source)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    page = (tmp_path / "shared.html").read_text(encoding="utf-8")
    assert 'data-mime-type="image/svg+xml"' in page
    svgs = _svgs(page)
    assert len(svgs) == 1
    _assert_coloured_tokens_and_legend(svgs[0])
