"""Sizes of the saved-output path (issue 19): the JupyterLab extension, the per-output payload and the exported page.

Prints ``bench:`` lines:
- ``labextension_bytes``: all of interp_widgets/labextension/static (what JupyterLab may load; a notebook loads the
  remote entry, the shared chunk and the chunks of the views it shows);
- ``labextension_remote_entry_bytes``: what every JupyterLab page loads at start (the views' chunks come on demand);
- ``token_payload_bytes_<n>``: the ``application/vnd.interp-widgets.v1+json`` payload of an n-word two-class token
  view (compact JSON, what the per-output cap counts);
- ``one_view_export_bytes``: ``interp-widgets export`` of a notebook holding one small token view (nbclient-executed,
  widget state saved), the issue's goal being <= 500 KB (it was 4.0 MB).

Usage: python benchmarks/mime.py   (needs the built JS: npm --prefix js run build)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from _repo import ROOT  # noqa: E402  (the repository root, on sys.path)

import numpy as np  # noqa: E402

from interp_widgets.widgets import TokenHighlightWidget  # noqa: E402
from interp_widgets.widgets._mime import compact_json, payload_body  # noqa: E402


def widget(n: int) -> TokenHighlightWidget:
    """A two-class token view over ``n`` words with random scores (deterministic), as in benchmarks/widgets.py."""
    words = [f"w{i % 97}" for i in range(n)]
    offsets, start = [], 0
    for w in words:
        offsets.append((start, start + len(w)))
        start += len(w) + 1
    scores = np.random.default_rng(0).normal(size=(2, n))
    return TokenHighlightWidget.from_arrays(" ".join(words), words, offsets, scores, target_labels=["neg", "pos"])


def main() -> None:
    static = ROOT / "interp_widgets" / "labextension" / "static"
    files = [p for p in static.glob("*.js")]
    entry = next(p for p in files if p.name.startswith("remoteEntry."))
    print(f"bench: labextension_bytes = {sum(p.stat().st_size for p in files)} (goal <= 300000)")
    print(f"bench: labextension_remote_entry_bytes = {entry.stat().st_size} (goal <= 20000)")
    for n in (100, 1000, 10000):
        print(
            f"bench: token_payload_bytes_{n} = {len(compact_json(payload_body(widget(n))).encode())} (goal <= 1048576)"
        )
    from tests.test_cli_export import execute_notebook

    from interp_widgets.notebook_export import export_notebook

    with tempfile.TemporaryDirectory() as tmp:
        notebook = execute_notebook(Path(tmp) / "one_view.ipynb", slider=False)
        page = export_notebook(notebook, Path(tmp) / "one_view.html")
        print(f"bench: one_view_export_bytes = {page.stat().st_size} (goal <= 500000)")


if __name__ == "__main__":
    main()
