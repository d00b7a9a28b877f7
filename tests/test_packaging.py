"""The built wheel ships the esbuild bundles, and nothing shipped points at the network."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_the_bundles_and_no_external_urls(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, f"wheel build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    (wheel,) = tmp_path.glob("interp_widgets-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for bundle in ("token_highlight.js", "token_highlight.css", "export_boot.js"):
            assert f"interp_widgets/static/{bundle}" in names
        assert not [name for name in names if name.startswith(("js/", "node_modules/")) or "/node_modules/" in name]
        shipped = [name for name in names if name.endswith((".js", ".mjs", ".html", ".css"))]
        assert shipped
        for name in shipped:
            text = archive.read(name).decode("utf-8")
            assert "http://" not in text and "https://" not in text, f"{name} references an external URL"
            assert "define.amd" not in text, f"{name} would register with a global AMD loader"
