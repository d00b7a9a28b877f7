"""`interp-widgets clean`: saved widget state that GitHub accepts (the entry has ``state`` or is absent), no state for
models no output shows, one copy of each front-end module; outputs and static pictures survive. Notebooks from
nbclient and from `interp-widgets export` render through nbconvert and pass nbformat validation (the JupyterLab
writer, setting on and off, is in tests/browser/test_saved_state.py)."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from interp_widgets.notebook_clean import (
    WIDGET_STATE_MIME,
    WIDGET_VIEW_MIME,
    clean_notebook,
    clean_widget_metadata,
    github_widget_problem,
)
from interp_widgets.notebook_export import export_notebook, has_widget_state

ROOT = Path(__file__).resolve().parent.parent
CELLS = [
    "import ipywidgets\nfrom interp_widgets.widgets import TokenHighlightWidget\n"
    "def view(text, scores):\n"
    "    tokens = text.split()\n"
    "    spans, start = [], 0\n"
    "    for token in tokens:\n"
    "        start = text.index(token, start); spans.append((start, start + len(token))); start += len(token)\n"
    "    return TokenHighlightWidget.from_arrays(text, tokens, spans, scores)",
    "view('fine zero <b>awful</b>', [0.8, 0.0, -0.8])",
    "view('good bad', [0.5, -0.5])",
    "hidden = view('never shown', [0.1, 0.2])  # a model no output shows",
    "ipywidgets.IntSlider(value=7, max=10, description='steps')",
]


def write_executed(path: Path) -> Path:
    """nbclient's notebook (widget state saved): two token views, a slider, and a model no output shows."""
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    NotebookClient(notebook, kernel_name="python3", timeout=120, store_widget_state=True,
                   resources={"metadata": {"path": str(ROOT)}}).execute()  # fmt: skip
    nbformat.write(notebook, path)
    return path


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    return write_executed(tmp_path_factory.mktemp("nb") / "executed.ipynb")


def _states(notebook) -> dict:
    return notebook.metadata["widgets"][WIDGET_STATE_MIME]["state"]


def _shown(notebook) -> list[str]:
    return [o["data"][WIDGET_VIEW_MIME]["model_id"] for c in notebook.cells for o in c.get("outputs", [])
            if WIDGET_VIEW_MIME in o.get("data", {})]  # fmt: skip


def assert_renders_everywhere(path: Path) -> None:
    """nbformat validation, GitHub's widget check, and nbconvert's HTML export of the notebook at ``path``."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert github_widget_problem(notebook) is None
    page, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    assert "<svg" in page or "image/svg+xml" in page or "image/png" in page


def _copy(executed: Path, tmp_path: Path, name: str, edit=None) -> Path:
    notebook = nbformat.read(executed, as_version=4)
    if edit is not None:
        edit(notebook)
    path = tmp_path / name
    nbformat.write(notebook, path)
    return path


def test_nbclient_notebook_renders_and_clean_prunes_and_dedupes(executed, tmp_path):
    assert_renders_everywhere(executed)
    before = nbformat.read(executed, as_version=4)
    states = _states(before)
    token_models = [k for k, v in states.items() if v["model_name"] == "AnyModel"]
    assert len(token_models) == 3  # two shown, one hidden
    path = _copy(executed, tmp_path, "run.ipynb")
    size = path.stat().st_size
    problems = clean_notebook(path)
    after = nbformat.read(path, as_version=4)
    assert any("no output shows" in p for p in problems) and any("duplicate" in p for p in problems), problems
    kept = _states(after)
    hidden = [k for k in token_models if k not in _shown(before)]
    assert hidden and not set(hidden) & set(kept)
    assert set(_shown(before)) <= set(kept)
    slider = next(v for v in kept.values() if v["model_name"] == "IntSliderModel")
    for ref in (slider["state"]["layout"], slider["state"]["style"]):  # the slider's own models stay
        assert ref.removeprefix("IPY_MODEL_") in kept
    esm = [v["state"]["_esm"] for v in kept.values() if v["model_name"] == "AnyModel"]
    css = [v["state"]["_css"] for v in kept.values() if v["model_name"] == "AnyModel"]
    assert len(esm) == 2 and len(esm[0]) > 10_000 and len(esm[1]) < 1500 and "get_model" in esm[1]
    assert css[0] and css[1] == ""
    assert after.cells == before.cells  # outputs and their SVG fallbacks untouched
    assert path.stat().st_size < size - 20_000
    print(f"\nnbclient notebook: {size} bytes -> {path.stat().st_size} bytes after clean")
    assert_renders_everywhere(path)
    stable = path.read_bytes()
    assert clean_notebook(path) == [] and path.read_bytes() == stable  # clean again: nothing to do, same bytes


def test_missing_state_is_repaired(executed, tmp_path):
    def colab_style(notebook):  # GitHub's 2025 error: model states straight under the entry, no "state" key
        entry = notebook.metadata["widgets"][WIDGET_STATE_MIME]
        notebook.metadata["widgets"][WIDGET_STATE_MIME] = dict(entry.pop("state"))

    path = _copy(executed, tmp_path, "colab.ipynb", colab_style)
    assert "no 'state' key" in github_widget_problem(nbformat.read(path, as_version=4))
    problems = clean_notebook(path)
    assert "moved" in problems[0] and "under 'state'" in problems[0]
    notebook = nbformat.read(path, as_version=4)
    assert has_widget_state(notebook) and set(_shown(notebook)) <= set(_states(notebook))
    assert_renders_everywhere(path)


def test_entry_without_any_state_is_stripped_and_fallbacks_stay(executed, tmp_path):
    def versions_only(notebook):
        notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0}}

    path = _copy(executed, tmp_path, "bare.ipynb", versions_only)
    original = nbformat.read(path, as_version=4)
    assert clean_notebook(path)
    notebook = nbformat.read(path, as_version=4)
    assert "widgets" not in notebook.metadata
    assert notebook.cells == original.cells
    svgs = [o["data"]["image/svg+xml"] for c in notebook.cells for o in c.get("outputs", [])
            if "image/svg+xml" in o.get("data", {})]  # fmt: skip
    assert len(svgs) == 2 and all(s.startswith("<svg") for s in svgs)
    assert_renders_everywhere(path)


def test_clean_notebook_is_left_byte_for_byte(tmp_path):
    path = tmp_path / "plain.ipynb"
    text = json.dumps(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), indent=4) + "\n"
    path.write_text(text, encoding="utf-8")  # not nbformat's layout: a rewrite would show
    assert clean_notebook(path) == [] and path.read_text(encoding="utf-8") == text


def test_broken_loader_is_dropped(executed, tmp_path):
    path = _copy(executed, tmp_path, "broken.ipynb")
    clean_notebook(path)
    notebook = nbformat.read(path, as_version=4)
    states = _states(notebook)
    source = next(k for k, v in states.items() if v["model_name"] == "AnyModel" and len(v["state"]["_esm"]) > 10_000)
    del states[source]  # the model holding the module is gone (edited by hand, or by another tool)
    nbformat.write(notebook, path)
    problems = clean_notebook(path)
    assert any("no longer saved" in p for p in problems), problems
    assert not [v for v in _states(nbformat.read(path, as_version=4)).values() if v["model_name"] == "AnyModel"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interp_widgets.cli", "clean", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)  # fmt: skip


def test_cli_check_exit_codes_and_messages(executed, tmp_path):
    dirty = _copy(
        executed,
        tmp_path,
        "dirty.ipynb",
        lambda nb: nb.metadata["widgets"].__setitem__(WIDGET_STATE_MIME, {"version_major": 2}),
    )
    clean = _copy(executed, tmp_path, "clean.ipynb", lambda nb: nb.metadata.pop("widgets"))
    before = dirty.read_bytes()
    done = _cli("--check", str(dirty), str(clean))
    assert done.returncode == 1, done
    assert f"{dirty}: metadata.widgets['{WIDGET_STATE_MIME}'] has no 'state' key" in done.stdout
    assert str(clean) not in done.stdout and dirty.read_bytes() == before  # --check writes nothing
    assert _cli("--check", str(clean)).returncode == 0
    fixed = _cli(str(dirty))
    assert fixed.returncode == 0 and f"{dirty}: fixed:" in fixed.stdout
    assert _cli("--check", str(dirty)).returncode == 0
    missing = _cli("--check", str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2 and "no notebook at" in missing.stderr


def test_export_page_embeds_deduplicated_state(executed, tmp_path):
    raw = HTMLExporter(template_name="lab").from_notebook_node(nbformat.read(executed, as_version=4))[0]
    page = export_notebook(executed, tmp_path / "page.html").read_text(encoding="utf-8")
    state = page.split('<script type="application/vnd.jupyter.widget-state+json">', 1)[1].split("</script>", 1)[0]
    models = json.loads(state)["state"]
    assert sum(m["model_name"] == "AnyModel" for m in models.values()) == 2
    print(f"\nwidget state in the page: {len(state)} chars (nbconvert's page embeds {len(raw)} chars in all)")


def test_pre_commit_hook_entry():
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "entry: interp-widgets clean\n" in hooks and "language: python" in hooks
    assert "entry: interp-widgets clean --check" in hooks


def test_large_picture_falls_back_to_png():
    from interp_widgets.widgets import TokenHighlightWidget
    from interp_widgets.widgets._base import MAX_STATIC_SVG_BYTES

    words = [f"w{i}<&>" for i in range(1500)]
    text = " ".join(words)
    spans, start = [], 0
    for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    small = TokenHighlightWidget.from_arrays("a b", ["a", "b"], [(0, 1), (2, 3)], [0.5, -0.5])
    data, _ = small._repr_mimebundle_()
    assert "image/svg+xml" in data and "image/png" not in data
    large = TokenHighlightWidget.from_arrays(text, words, spans, [((i % 7) - 3) / 3 for i in range(1500)])
    assert len(large.static_svg().encode()) > MAX_STATIC_SVG_BYTES
    data, _ = large._repr_mimebundle_()
    assert "image/svg+xml" not in data and list(data)[:2] == [WIDGET_VIEW_MIME, "image/png"]
    png = base64.b64decode(data["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 1_000_000


# today's sizes (KB = 1024 bytes); a notebook may shrink, never grow past them
TOUR_LIMITS_KB = {"01_attributions.ipynb": 196, "02_generation.ipynb": 150, "03_concepts.ipynb": 112,
                  "04_anisotropy_during_training.ipynb": 498, "05_interop.ipynb": 87,
                  "06_paper_smollm2.ipynb": 176, "07_interventions_smollm2.ipynb": 295,
                  "08_circuits_smollm2.ipynb": 513}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TOUR_LIMITS_KB))
def test_tour_notebook_stays_small_and_clean(name):
    path = ROOT / "notebooks" / name
    assert path.stat().st_size <= TOUR_LIMITS_KB[name] * 1024, f"{name} is {path.stat().st_size / 1024:.0f} KB"
    notebook = nbformat.read(path, as_version=4)
    assert clean_widget_metadata(copy.deepcopy(notebook)) == [] and github_widget_problem(notebook) is None


def test_every_tour_notebook_has_a_size_limit():
    assert sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")) == sorted(TOUR_LIMITS_KB)
