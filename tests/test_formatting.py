"""The formatters, pinned (ruff in the test extra, prettier in js/package.json), keep every file formatted.

A failure names the files; `ruff format .` and `npm --prefix js run format` fix them.
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_python_files_are_ruff_formatted():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"run `ruff format .`:\n{result.stdout}{result.stderr}"


def test_js_files_are_prettier_formatted():
    npm = shutil.which("npm")
    assert npm, "npm is required (Node 20.19+)"
    result = subprocess.run(
        [npm, "--prefix", "js", "run", "--silent", "format:check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"run `npm --prefix js run format`:\n{result.stdout}{result.stderr}"
