"""The product-tour notebooks: every ``notebooks/*.ipynb`` runs top to bottom offline within its time budget, and the
committed copies (saved with outputs, without widget state) render their static pictures through ``nbconvert --sanitize-html``.

The demo classifier and decoder are trained, SmolLM2 is dequantised and notebook 8's transcoders are trained (or all
are loaded from the cache), once per session before any notebook runs, so the budgets measure the notebooks themselves, model loading included, not
first-use training or conversion.

To add a notebook, add a row to ``NOTEBOOKS``; a notebook without a row fails with a message saying so.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"

# name: (time budget in seconds on 2 CPU cores, minimum number of coloured-token SVG pictures in the saved outputs)
NOTEBOOKS = {
    "01_attributions.ipynb": (300, 3),
    "02_generation.ipynb": (360, 2),
    "03_concepts.ipynb": (600, 2),
    "04_anisotropy_during_training.ipynb": (240, 0),
    "05_interop.ipynb": (180, 3),
    "06_paper_smollm2.ipynb": (900, 0),  # 10 monitored SmolLM2 steps, replay and two frequency analyses
    "07_interventions_smollm2.ipynb": (600, 0),  # patching and steering views draw heatmaps and text, no token boxes
    "08_circuits_smollm2.ipynb": (600, 0),  # one graph of 4,096 features, six interventions; the circuit view
}
MAX_SAVED_BYTES = 1_500_000  # committed notebooks with outputs stay small enough to review and to load on GitHub

PATHS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SVG_DATA_URI = re.compile(r'src="data:image/svg\+xml;base64,([^"]+)"')
# a token box drawn by the static fallback (widgets/_svg.py): a rounded rect filled with the token's colour
TOKEN_RECT = re.compile(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="[^"]+" rx="3" fill="(#[0-9a-f]{6})"')
# XML namespace names are identifiers, never fetched; everything else that looks like a URL is a reference
NAMESPACE = re.compile(r'xmlns(:\w+)?="http://www\.w3\.org/[^"]*"')
URL = re.compile(r"https?://", re.IGNORECASE)


def test_every_notebook_has_a_budget():
    assert PATHS, f"no notebooks in {NOTEBOOK_DIR}"
    missing = [p.name for p in PATHS if p.name not in NOTEBOOKS]
    assert not missing, f"add a (budget, min token pictures) row to NOTEBOOKS in {__file__} for {missing}"
    gone = sorted(set(NOTEBOOKS) - {p.name for p in PATHS})
    assert not gone, f"NOTEBOOKS lists notebooks that do not exist: {gone}"


@pytest.fixture(scope="session")
def trained_demo_models():
    """Train or convert (or load from the cache) the demo models once, in the same cache directory the kernels
    will use."""
    from interp_widgets import demo
    from interp_widgets.demo.decoder import load_decoder

    from interp_widgets.demo_transcoders import tour_transcoders

    demo.load_classifier(progress=False)
    load_decoder(progress=False)
    model, tokenizer = demo.load_lm(progress=False)
    tour_transcoders(model, tokenizer, progress=False)  # notebook 8's transcoders: the quick set where none is built


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _urls(nb) -> list[str]:
    """Every http(s) reference in the outputs (text, SVG, widget view JSON), XML namespace names excepted."""
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for text in _strings({k: v for k, v in output.items() if k != "metadata"}):
                text = NAMESPACE.sub("", text)
                found += [text[max(0, m.start() - 40) : m.end() + 40] for m in URL.finditer(text)]
    return found


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs_top_to_bottom_within_budget(path, trained_demo_models):
    budget, _ = NOTEBOOKS.get(path.name, (None, None))
    assert budget is not None, f"{path.name} has no row in NOTEBOOKS"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # kernel "python3" is started with sys.executable (jupyter_client swaps a bare "python" for the running
    # interpreter), so the notebook sees this venv and its editable interp_widgets
    client = NotebookClient(
        nb,
        timeout=budget,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    assert elapsed <= budget, f"{path.name} took {elapsed:.0f} s; its budget is {budget} s"
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert not _urls(nb), f"{path.name}: outputs reference URLs: {_urls(nb)[:3]}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_committed_notebook_is_saved_executed_small_and_offline(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), f"{path.name}: save it executed, top to bottom"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{path.name}: run it in order"
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    # with saved widget state nbconvert renders the (script-only) widget views instead of the SVG fallbacks
    assert "widgets" not in nb.metadata, f"{path.name}: save it without widget state (store_widget_state=False)"
    assert path.stat().st_size <= MAX_SAVED_BYTES, f"{path.name} is {path.stat().st_size} bytes"
    assert not _urls(nb), f"{path.name}: outputs reference URLs: {_urls(nb)[:3]}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_sanitized_html_export_shows_coloured_tokens(path, tmp_path):
    _, minimum = NOTEBOOKS.get(path.name, (None, None))
    assert minimum is not None, f"{path.name} has no row in NOTEBOOKS"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--sanitize-html",
            "--output-dir",
            str(tmp_path),
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    page = (tmp_path / path.with_suffix(".html").name).read_text(encoding="utf-8")
    svgs = [base64.b64decode(data).decode("utf-8") for data in SVG_DATA_URI.findall(page)]
    coloured = [svg for svg in svgs if len(set(TOKEN_RECT.findall(svg))) >= 3]
    assert len(coloured) >= minimum, (
        f"{path.name}: {len(coloured)} coloured-token pictures survive --sanitize-html ({len(svgs)} SVG images), "
        f"expected at least {minimum}"
    )
    assert all("<script" not in svg for svg in svgs)
