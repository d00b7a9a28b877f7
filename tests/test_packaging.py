"""The built wheel ships the esbuild bundles, the demo data and the JupyterLab extension (found by `jupyter
labextension list` once pip installs the wheel), and nothing shipped points at the network."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LABEXTENSION = "interp_widgets-0.1.0.data/data/share/jupyter/labextensions/interp-widgets/"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, f"wheel build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    (path,) = out.glob("interp_widgets-*.whl")
    return path


def test_wheel_ships_the_labextension_as_shared_data(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        package = json.loads(archive.read(LABEXTENSION + "package.json"))
        install = json.loads(archive.read(LABEXTENSION + "install.json"))
    assert package["name"] == "interp-widgets" and package["jupyterlab"]["_build"]["extension"] == "./extension"
    assert LABEXTENSION + package["jupyterlab"]["_build"]["load"] in names  # the remoteEntry the page loads
    assert install == {"packageManager": "python", "packageName": "interp-widgets",
                       "uninstallInstructions": "Use your Python package manager (pip, conda, etc.) to uninstall the "
                                                "package interp-widgets"}  # fmt: skip
    assert not [name for name in names if name.startswith("interp_widgets/labextension")]  # not also in the package


def test_jupyter_labextension_list_finds_the_installed_extension(wheel, tmp_path):
    prefix = tmp_path / "prefix"
    # --ignore-installed: without it pip uninstalls the test venv's own (editable) interp-widgets first
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                              "--prefix", str(prefix), str(wheel)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    still = subprocess.run(
        [sys.executable, "-c", "import interp_widgets"], capture_output=True, text=True, cwd=tmp_path
    )
    assert still.returncode == 0, f"installing the wheel elsewhere broke this environment's own:\n{still.stderr}"
    data = prefix / "share" / "jupyter"
    assert (data / "labextensions" / "interp-widgets" / "package.json").is_file()
    env = {**os.environ, "JUPYTER_PATH": str(data), "JUPYTER_PLATFORM_DIRS": "1",
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "NO_COLOR": "1"}  # fmt: skip
    listing = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True,
                             env=env, timeout=300)  # fmt: skip
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    assert listing.returncode == 0, text
    section = text.split(str(data / "labextensions"), 1)[1].split("\n\n", 1)[0]
    assert re.search(r"interp-widgets v0\.1\.0 enabled\s+OK \(python, interp-widgets\)", section), text


def test_wheel_contains_the_bundles_and_no_external_urls(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for bundle in ("token_highlight.js", "token_highlight.css", "export_boot.js"):
            assert f"interp_widgets/static/{bundle}" in names
        data = "interp_widgets/demo/data/"
        manifest = json.loads(archive.read(data + "python_docs.json"))  # the text corpus, byte for byte as recorded
        for name, entry in manifest["files"].items():
            assert hashlib.sha256(archive.read(data + name)).hexdigest() == entry["sha256"]
        for name in ("PYTHON_DOCS_LICENSE.txt", "README.md", "sentiment_part_a.csv", "sentiment_part_b.csv"):
            assert data + name in names
        assert not [name for name in names if name.startswith(("js/", "node_modules/")) or "/node_modules/" in name]
        shipped = [name for name in names if name.endswith((".js", ".mjs", ".html", ".css"))]
        ours = [name for name in shipped if not name.startswith(VENDOR)]
        assert ours
        for name in ours:
            text = archive.read(name).decode("utf-8")
            assert "http://" not in text and "https://" not in text, f"{name} references an external URL"
            assert "define.amd" not in text, f"{name} would register with a global AMD loader"
        vendored = {name.removeprefix(VENDOR): archive.read(name).decode("utf-8") for name in shipped
                    if name.startswith(VENDOR)}  # fmt: skip
    assert_vendor_files_are_the_npm_copies(vendored)


# Third-party files that `interp-widgets export` inlines into notebook pages (copied by js/build.mjs). They are
# exempt from the URL grep above, for a documented reason: as published on npm they contain URL text that is never
# requested (licence notices, XML namespaces, JSON-schema identifiers, CSS comments, an anchor helper), and
# require.js *is* the AMD loader. Instead they must equal the npm files byte for byte, except html-manager's one
# network fallback (jsDelivr for undefined widget modules), which the build replaces with the page's directory.
# That no request leaves the machine is checked where it matters, in a browser: tests/browser/test_notebook_export.py.
VENDOR = "interp_widgets/static/vendor/"
NPM_SOURCES = {
    "require.js": ("requirejs", "require.js", None),
    "embed-amd.js": ("@jupyter-widgets/html-manager", "dist/embed-amd.js",
                     ('"https://cdn.jsdelivr.net/npm/"', '"./"')),
    "anywidget.js": ("anywidget", "dist/index.js", None),
}  # fmt: skip
CDN_HOSTS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "esm.sh")


def assert_vendor_files_are_the_npm_copies(vendored: dict[str, str]) -> None:
    assert set(vendored) == set(NPM_SOURCES)
    for name, text in vendored.items():
        package, path, patch = NPM_SOURCES[name]
        original = (ROOT / "js" / "node_modules" / package / path).read_text(encoding="utf-8")
        if patch is not None:
            assert original.count(patch[0]) == 2, f"{package}/{path} changed; review the patch in js/build.mjs"
            original = original.replace(*patch)
        assert text == original, f"{name} differs from {package}/{path} beyond the documented patch"
        assert not [host for host in CDN_HOSTS if host in text], f"{name} still names a CDN"


def test_every_benchmark_puts_the_repository_root_on_its_path():
    """`python benchmarks/run.py <name>` runs each script as a file: `benchmarks/` is on sys.path, the root is not.

    `benchmarks/_repo.py` adds it; every script that imports the repository's `tests` package imports `_repo`.
    """
    import ast

    for script in sorted(Path(__file__).resolve().parents[1].joinpath("benchmarks").glob("*.py")):
        if script.name.startswith("_") or script.name == "run.py":
            continue
        modules = []
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                modules += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module)
        roots = [m.split(".")[0] for m in modules]
        assert "tests" not in roots or "_repo" in roots, f"{script.name} imports tests without `import _repo`"
