"""Hatch build hook: bundle ``js/src`` with esbuild into ``interp_widgets/static``.

The bundle is rebuilt whenever a source file is newer than it, so a wheel never ships stale JS.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class BundleJavaScript(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        root = Path(self.root)
        js_dir = root / "js"
        static = root / "interp_widgets" / "static"
        if not js_dir.exists():  # building from an sdist that already carries the bundle
            return
        sources = [p for p in (js_dir / "src").rglob("*") if p.is_file()]
        sources += [js_dir / "build.mjs", js_dir / "package-lock.json"]
        bundles = list(static.glob("*.js"))
        newest_source = max((p.stat().st_mtime for p in sources if p.exists()), default=0.0)
        if bundles and min(p.stat().st_mtime for p in bundles) >= newest_source:
            return
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("Building interp_widgets needs Node.js and npm to bundle js/src; install Node 20+.")
        if not (js_dir / "node_modules").exists():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=js_dir, check=True)
        subprocess.run([npm, "run", "build"], cwd=js_dir, check=True)
