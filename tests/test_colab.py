"""The code path Google Colab takes, with a fake ``google.colab`` package (Colab itself cannot run here).

anywidget decides it is in Colab when ``google.colab.output`` is imported (Colab's kernel imports it at start-up).
It then calls ``google.colab.output.enable_custom_widget_manager()`` once per process and puts Colab's widget-manager
URL into the display metadata of the widget-view MIME type; Colab renders a third-party widget only with that
metadata (anywidget #48 / PR #52, #63). Our widgets' ``_repr_mimebundle_`` reorders the data and adds the static SVG,
so these tests check that the metadata and the one-time enabling survive, through IPython's real display
formatter, in a fresh interpreter whose ``sys.path`` starts with the fake package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
MANAGER_URL = (
    "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/2b70e893a8ba7c0f/manager.min.js"
)

# What anywidget reads of Colab: output.enable_custom_widget_manager() and output._widgets._installed_url.
FAKE_OUTPUT = f"""
calls = []


def enable_custom_widget_manager():
    calls.append("enable_custom_widget_manager")


class _Widgets:
    _installed_url = {{url!r}}


_widgets = _Widgets()
"""

PROBE = """
import json, sys
{imports}
from IPython.core.formatters import DisplayFormatter
from interp_widgets.widgets import MonitorWidget  # needs no torch: a fast subprocess

formatter = DisplayFormatter()
shown = []
for _ in range(2):  # two widgets, each displayed twice
    widget = MonitorWidget(layers=["layer:0"], flush_interval=1e9)
    for _ in range(2):
        data, metadata = formatter.format(widget)
        shown.append({{"mimes": list(data), "metadata": metadata, "model_id": data["{mime}"]["model_id"],
                       "widget_id": widget.model_id}})
output = sys.modules.get("google.colab.output")
print("IW_PROBE " + json.dumps({{"shown": shown, "calls": getattr(output, "calls", None),
                                "torch": "torch" in sys.modules}}))
"""


def _fake_colab(root: Path, url: str | None) -> Path:
    """A ``google.colab`` package under ``root`` (``google`` stays a namespace package, as in Colab)."""
    package = root / "google" / "colab"
    (package / "output").mkdir(parents=True)
    (package / "__init__.py").write_text("from google.colab import output  # Colab imports it at start-up\n")
    (package / "output" / "__init__.py").write_text(FAKE_OUTPUT.format(url=url))
    return root


def _probe(fake: Path | None, imports: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ANYWIDGET_HMR"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (fake, REPO_ROOT) if p is not None)
    code = textwrap.dedent(PROBE.format(imports=imports, mime=WIDGET_VIEW_MIME))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("IW_PROBE "))
    return json.loads(line.removeprefix("IW_PROBE "))


def test_in_colab_the_display_carries_colab_metadata_and_enables_the_custom_widget_manager_once(tmp_path):
    fake = _fake_colab(tmp_path, MANAGER_URL)
    probe = _probe(fake, imports="import google.colab")
    assert not probe["torch"]
    assert probe["calls"] == ["enable_custom_widget_manager"]  # once per process, not per widget or display
    for shown in probe["shown"]:
        assert shown["metadata"] == {WIDGET_VIEW_MIME: {"colab": {"custom_widget_manager": {"url": MANAGER_URL}}}}
        assert shown["mimes"][:2] == [WIDGET_VIEW_MIME, "image/svg+xml"], shown["mimes"]  # live view, then fallback
        assert "text/plain" in shown["mimes"]
        assert shown["model_id"] == shown["widget_id"]


def test_colab_without_an_installed_manager_url_still_enables_it_and_adds_no_metadata(tmp_path):
    probe = _probe(_fake_colab(tmp_path, None), imports="import google.colab")
    assert probe["calls"] == ["enable_custom_widget_manager"]
    assert all(shown["metadata"] == {} for shown in probe["shown"])


def test_outside_colab_nothing_is_enabled_and_no_colab_metadata_is_added(tmp_path):
    # The fake package is importable but not imported (as on a machine where some `google.colab` is installed
    # without running in Colab): anywidget only looks at sys.modules, so nothing changes.
    probe = _probe(_fake_colab(tmp_path, MANAGER_URL))
    assert probe["calls"] is None
    assert all(shown["metadata"] == {} for shown in probe["shown"])
    assert all(shown["mimes"][:2] == [WIDGET_VIEW_MIME, "image/svg+xml"] for shown in probe["shown"])
