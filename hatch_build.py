"""Hatch build hook: bundle ``js/src`` with esbuild into ``interp_widgets/static`` and build the JupyterLab /
Notebook 7 extension (``@jupyterlab/builder``) into ``interp_widgets/labextension``, which the wheel installs as
``share/jupyter/labextensions/interp-widgets`` (``[tool.hatch.build.targets.wheel.shared-data]``).

Both are rebuilt (``npm run build`` in ``js``) whenever a source file is newer than them, so a wheel never ships stale
JS. The build needs Node.js and the packages of ``js/package-lock.json`` (``npm ci`` runs when they are missing); it
needs no Python JupyterLab and no network beyond that install.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The widget manager, require.js and anywidget's AMD module that `interp-widgets export` inlines (js/build.mjs).
VENDOR_FILES = ("require.js", "embed-amd.js", "anywidget.js")


def _missing_packages(js_dir: Path) -> list[str]:
    """Dependencies in js/package.json that node_modules lacks (an older checkout's install)."""
    manifest = json.loads((js_dir / "package.json").read_text(encoding="utf-8"))
    names = [*manifest.get("dependencies", {}), *manifest.get("devDependencies", {})]
    return [name for name in names if not (js_dir / "node_modules" / name / "package.json").exists()]


class BundleJavaScript(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        root = Path(self.root)
        js_dir = root / "js"
        static = root / "interp_widgets" / "static"
        if not js_dir.exists():  # building from an sdist that already carries the bundle
            return
        sources = [p for p in (js_dir / "src").rglob("*") if p.is_file()]
        sources += [js_dir / "build.mjs", js_dir / "package.json", js_dir / "package-lock.json"]
        bundles = list(static.glob("*.js"))
        vendored = [static / "vendor" / name for name in VENDOR_FILES]  # copied from node_modules by build.mjs
        # written last by the labextension build (the builder's package.json, then install.json)
        labextension = [root / "interp_widgets" / "labextension" / name for name in ("package.json", "install.json")]
        built = bundles + vendored + labextension
        newest_source = max((p.stat().st_mtime for p in sources if p.exists()), default=0.0)
        if bundles and all(p.exists() for p in built) and min(p.stat().st_mtime for p in built) >= newest_source:
            return
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("Building interp_widgets needs Node.js and npm to bundle js/src; install Node 20.19+.")
        if not (js_dir / "node_modules").exists() or _missing_packages(js_dir):
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=js_dir, check=True)
        subprocess.run([npm, "run", "build"], cwd=js_dir, check=True)
