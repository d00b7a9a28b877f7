"""A real marimo server on loopback for the browser tests: a notebook file written at run time, served headless by
``marimo run`` (the notebook runs as an app: every cell executes when a page connects, no keystrokes).

marimo speaks anywidget natively: a cell whose last expression is an ``AnyWidget`` is shown through
``mo.ui.anywidget`` inside a ``<marimo-anywidget>`` element (an open shadow root, which Playwright's CSS locators
pierce). Each cell's output sits in ``.marimo-cell[data-cell-name=<function name>]``, so a test finds a view by the
name of the cell that displays it.

The server gets the same offline environment as JupyterLab (:func:`tests.browser.harness._server_env`: dead proxy,
offline Hugging Face, this repository on ``PYTHONPATH``), its own config/state directories, and no update check.

Example (needs a browser and a server, so shown as text): ::

    path = write_marimo_notebook(tmp_path / "views.py", {"setup": "import marimo as mo", "show": "mo.md('hi')"})
    with marimo_app(path) as app:
        page.goto(app.url)
        cell_output(page, "show").wait_for()
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from tests.browser.harness import _server_env, _stop, free_port


def write_marimo_notebook(path: str | Path, cells: Mapping[str, str]) -> Path:
    """Write a marimo notebook whose cells are ``cells`` (function name -> code), in order.

    marimo works out each cell's inputs and outputs from its code, so cell functions take no parameters here;
    names meant for other cells must not start with ``_`` (those are local to their cell).
    """
    parts = ['import marimo\n\n__generated_with = "0.25.2"\napp = marimo.App()\n']
    for name, code in cells.items():
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"cell name must be a public identifier, got {name!r}")
        body = textwrap.indent(textwrap.dedent(code).strip() + "\n", "    ")
        parts.append(f"\n@app.cell\ndef {name}():\n{body}    return\n")
    parts.append('\n\nif __name__ == "__main__":\n    app.run()\n')
    path = Path(path)
    path.write_text("".join(parts), encoding="utf-8")
    return path


@dataclass
class MarimoApp:
    """A running ``marimo run`` server of one notebook."""

    port: int
    log_path: Path
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's combined stdout/stderr (cell tracebacks land here too)."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return text[-chars:]


@contextmanager
def marimo_app(notebook: str | Path, *, timeout: float = 90.0) -> Iterator[MarimoApp]:
    """Serve ``notebook`` with ``marimo run --headless --no-token`` on a free 127.0.0.1 port; stop it (and its
    process group) on exit, also when the body raises."""
    notebook = Path(notebook).resolve()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="iw-marimo-") as state_name:
        state = Path(state_name)
        env = _server_env(state)
        env.update(
            MARIMO_SKIP_UPDATE_CHECK="1",
            XDG_CONFIG_HOME=str(state / "xdg-config"),  # no user marimo.toml
            XDG_STATE_HOME=str(state / "xdg-state"),
            XDG_CACHE_HOME=str(state / "xdg-cache"),
            PYTHONUNBUFFERED="1",
        )
        log_path = state / "marimo.log"
        command = [
            sys.executable, "-m", "marimo", "run", str(notebook), "--headless", "--no-token", "--host", "127.0.0.1",
            "--port", str(port), "--no-sandbox", "--session-ttl", "0", "--no-skew-protection",
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command, cwd=notebook.parent, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        app = MarimoApp(port=port, log_path=log_path, process=process)
        try:
            _wait_until_ready(app, timeout)
            yield app
        finally:
            _stop(process)


def _wait_until_ready(app: MarimoApp, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.process.poll() is not None:
            raise RuntimeError(f"marimo exited with code {app.process.returncode}:\n{app.log_tail()}")
        try:
            with urllib.request.urlopen(app.url + "health", timeout=2.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise TimeoutError(f"marimo did not answer on port {app.port} within {timeout:.0f} s:\n{app.log_tail()}")


def cell_output(page, name: str):
    """Locator of the output area of the cell named ``name`` (its function name in the notebook file)."""
    return page.locator(f'.marimo-cell[data-cell-name="{name}"] .output-area')
