"""Offline browser harness: Debian's chromium through Playwright, and a real JupyterLab server on loopback.

Shared by the browser tests, the screenshot script and browser benchmarks. Nothing here downloads anything:
chromium is the distribution's binary (never ``playwright install``), JupyterLab runs with news, update checks
and the PyPI extension manager turned off, and :class:`RequestLog` records every request a page makes so a
caller can assert that none left the loopback interface.

Example:
    >>> from playwright.sync_api import sync_playwright           # doctest: +SKIP
    >>> with sync_playwright() as pw, jupyter_lab(root) as server: # doctest: +SKIP
    ...     browser = launch_chromium(pw)
    ...     page = browser.new_page()
    ...     log = RequestLog(page)
    ...     page.goto(server.notebook_url("demo.ipynb"))
    ...     wait_for_kernel_idle(page)
    ...     run_cells(page, 0, 2)
    ...     log.assert_loopback_only()
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The interp-widgets JupyterLab extension built by `npm --prefix js run build` (the wheel installs it as
#: share/jupyter/labextensions/interp-widgets); servers started here load this build through JUPYTER_PATH.
LABEXTENSION = REPO_ROOT / "interp_widgets" / "labextension"
ARTIFACTS = REPO_ROOT / "tests" / "_artifacts"  # screenshots (gitignored)
INSTALL_HINT = "apt-get install -y chromium"

#: Flags for every chromium launch. The background-networking, component-update and sync flags stop chromium's
#: own update/sync/field-trial traffic; QUIC is off so nothing tries UDP either.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
LOCAL_SCHEMES = frozenset({"data", "blob", "about", "file"})  # never leave this machine


class ChromiumMissing(RuntimeError):
    """Debian's chromium is not on PATH (browser tests must fail, not skip, without it)."""


def chromium_executable() -> str:
    """Absolute path of Debian's chromium binary; raises :class:`ChromiumMissing` naming the install command.

    Example:
        >>> chromium_executable()  # doctest: +SKIP
        '/usr/bin/chromium'
    """
    path = shutil.which("chromium")
    if path is None:
        raise ChromiumMissing(
            f"Debian's chromium is not installed (no `chromium` on PATH). Install it with `{INSTALL_HINT}`; "
            "do not run `playwright install` (it downloads a browser build)."
        )
    return path


def launch_chromium(playwright, *, args: tuple[str, ...] = (), **options):
    """Launch headless Debian chromium with :data:`CHROMIUM_ARGS` (plus ``args``); ``options`` go to Playwright.

    Example:
        >>> browser = launch_chromium(pw, slow_mo=50)  # doctest: +SKIP
    """
    executable = chromium_executable()  # first: a missing binary must say how to install it
    return playwright.chromium.launch(executable_path=executable, args=[*CHROMIUM_ARGS, *args], **options)


def is_loopback(url: str) -> bool:
    """True for URLs that stay on this machine: loopback http(s)/ws(s) hosts, and data:, blob:, about:, file: URLs.

    Example:
        >>> is_loopback("http://127.0.0.1:8888/lab"), is_loopback("https://cdn.jsdelivr.net/x.js")
        (True, False)
    """
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return True
    return parts.scheme in {"http", "https", "ws", "wss"} and (parts.hostname or "") in LOOPBACK_HOSTS


@dataclass
class RequestLog:
    """Records every request of a page's browser context (the page, its popups and workers) and every WebSocket
    its pages open; :meth:`assert_loopback_only` fails on any other host.

    Example:
        >>> log = RequestLog(page)       # doctest: +SKIP
        >>> log.assert_loopback_only()   # doctest: +SKIP
    """

    page: object
    urls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        context = self.page.context
        context.on("request", lambda request: self.urls.append(request.url))
        context.on("page", self._watch_websockets)
        self._watch_websockets(self.page)

    def _watch_websockets(self, page) -> None:
        page.on("websocket", lambda socket_: self.urls.append(socket_.url))

    def outside(self) -> list[str]:
        """URLs that did not stay on loopback."""
        return [url for url in self.urls if not is_loopback(url)]

    def assert_loopback_only(self) -> None:
        """Raise AssertionError listing every non-loopback request (and check that something was recorded)."""
        assert self.urls, "no request was recorded at all; the request log is not attached to the page"
        leaked = self.outside()
        assert not leaked, f"{len(leaked)} request(s) left the loopback interface: {leaked[:20]}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# JupyterLab settings that would otherwise reach the internet: the news feed, the update check and the
# extension manager's PyPI queries.
_SERVER_CONFIG = {
    "LabApp": {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
        "extension_manager": "readonly",
    },
}
# Front-end plugins that ask about news or look for updates are disabled outright.
_PAGE_CONFIG = {
    "disabledExtensions": {
        "@jupyterlab/apputils-extension:announcements": True,
    }
}


@dataclass
class JupyterServer:
    """A running JupyterLab server (also serves Notebook 7 at ``/notebooks/``).

    Example:
        >>> server.url("lab/tree/demo.ipynb")  # doctest: +SKIP
        'http://127.0.0.1:40123/lab/tree/demo.ipynb'
    """

    port: int
    root_dir: Path
    log_path: Path
    process: subprocess.Popen

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, path: str) -> str:
        """Absolute URL of ``path`` on this server."""
        return self.base_url + path.lstrip("/")

    def request(self, method: str, path: str, timeout: float = 10.0):
        """Call ``path`` on the server (e.g. ``api/sessions``); returns the decoded JSON or None for an empty body."""
        request = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def api(self, method: str, path: str, timeout: float = 10.0):
        """Call the server's REST API: ``api("GET", "sessions")`` is ``GET /api/sessions``."""
        return self.request(method, f"api/{path.lstrip('/')}", timeout=timeout)

    def shutdown_sessions(self) -> None:
        """Shut down every notebook session and its kernel (frees the CPU between tests)."""
        for session in self.api("GET", "sessions"):
            self.api("DELETE", f"sessions/{session['id']}")

    def reset(self) -> None:
        """Shut down all sessions and forget every saved JupyterLab workspace, so the next page opens only the
        notebook it asks for (a restored tab of an earlier test would start its own kernel)."""
        self.shutdown_sessions()
        for workspace in self.request("GET", "lab/api/workspaces")["workspaces"]["ids"]:
            self.request("DELETE", f"lab/api/workspaces/{workspace}")

    def write_notebook(self, name: str, sources) -> str:
        """Write a fresh notebook of code cells ``sources`` (no outputs, Python 3 kernel) into the root; returns
        ``name``.

        Example:
            >>> server.write_notebook("demo.ipynb", ["print(1)"])  # doctest: +SKIP
            'demo.ipynb'
        """
        notebook = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(source) for source in sources],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
        )
        nbformat.write(notebook, self.root_dir / name)
        return name

    def notebook_url(self, path: str, ui: str = "lab") -> str:
        """URL opening notebook ``path`` in JupyterLab (``ui="lab"``, with a reset workspace) or Notebook 7
        (``ui="notebook"``)."""
        if ui == "lab":
            return self.url(f"lab/tree/{path}?reset")
        if ui == "notebook":
            return self.url(f"notebooks/{path}")
        raise ValueError(f"ui must be 'lab' or 'notebook', got {ui!r}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's combined stdout/stderr, for failure messages."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return text[-chars:]


_DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens there
_LOOPBACK_NAMES = "127.0.0.1,localhost,::1"


def _server_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ANYWIDGET_HMR"}
    config = state / "config"
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps(_SERVER_CONFIG), encoding="utf-8")
    (config / "labconfig" / "page_config.json").write_text(json.dumps(_PAGE_CONFIG), encoding="utf-8")
    # This checkout's build of the interp-widgets extension comes first on the data path (ahead of an installed copy,
    # which `pip install -e .` made at install time and which may be older).
    data = state / "data"
    (data / "labextensions").mkdir(parents=True, exist_ok=True)
    if LABEXTENSION.is_dir() and not (data / "labextensions" / "interp-widgets").exists():
        (data / "labextensions" / "interp-widgets").symlink_to(LABEXTENSION, target_is_directory=True)
    env.update(
        JUPYTER_PATH=os.pathsep.join(p for p in (str(data), os.environ.get("JUPYTER_PATH", "")) if p),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_RUNTIME_DIR=str(state / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(state / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(state / "lab-workspaces"),
        IPYTHONDIR=str(state / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        # Any HTTP client in the server or a kernel that honours proxy variables gets a dead loopback port
        # instead of the internet; loopback itself is exempt.
        HTTP_PROXY=_DEAD_PROXY,
        HTTPS_PROXY=_DEAD_PROXY,
        http_proxy=_DEAD_PROXY,
        https_proxy=_DEAD_PROXY,
        NO_PROXY=_LOOPBACK_NAMES,
        no_proxy=_LOOPBACK_NAMES,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    return env


@contextmanager
def jupyter_lab(root_dir: str | Path, *, timeout: float = 90.0) -> Iterator[JupyterServer]:
    """Run real JupyterLab (this interpreter's ``jupyter``) on 127.0.0.1 with no token, serving ``root_dir``.

    Settings, workspaces and runtime files live in a private temporary directory; the server and its kernels get
    an offline Hugging Face environment, proxy variables pointing at a dead loopback port and ``PYTHONPATH`` with
    this repository. The server is terminated (and its process group killed) on exit, also when the body raises.

    Example:
        >>> with jupyter_lab(tmp_path) as server:  # doctest: +SKIP
        ...     page.goto(server.url("lab"))
    """
    root_dir = Path(root_dir).resolve()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="iw-jupyter-") as state_name:
        state = Path(state_name)
        log_path = state / "server.log"
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
            "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root_dir}",
            "--allow-root", "--ServerApp.port_retries=0",
            # Kernels talk over Unix sockets in the private runtime directory: no TCP port races with other
            # Jupyter processes on the machine (a kernel losing its port looks like dropped executions).
            "--KernelManager.transport=ipc",
            # Lets :meth:`JupyterServer.api` DELETE sessions without a browser's XSRF cookie (loopback test server).
            "--ServerApp.disable_check_xsrf=True",
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command, env=_server_env(state), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        server = JupyterServer(port=port, root_dir=root_dir, log_path=log_path, process=process)
        try:
            _wait_until_ready(server, timeout)
            yield server
        finally:
            _stop(process)


def _wait_until_ready(server: JupyterServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {server.process.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "status", timeout=2.0)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise TimeoutError(f"jupyter lab did not answer on port {server.port} within {timeout:.0f} s:\n{server.log_tail()}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    try:  # anything the server started and left behind (kernels) shares its process group
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------------------------------- notebook UI
# These work in JupyterLab (/lab/tree/...) and Notebook 7 (/notebooks/...), which share the notebook panel. They
# look only at the visible notebook panel: JupyterLab keeps restored background tabs in the DOM, hidden.

VISIBLE_NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"

_KERNEL_IDLE = """() => {
    const toolbar = document.querySelector('PANEL .jp-NotebookPanel-toolbar');
    const name = toolbar && toolbar.querySelector('.jp-Toolbar-kernelName');
    const state = toolbar && toolbar.querySelector('.jp-Notebook-ExecutionIndicator');
    return Boolean(name && state && name.textContent.includes(KERNEL) && state.dataset.status === 'idle');
}""".replace("PANEL", VISIBLE_NOTEBOOK)


def notebook_cells(page):
    """Locator of the cells of the visible notebook, in order.

    Example:
        >>> notebook_cells(page).nth(1).locator(".jp-OutputArea-output")  # doctest: +SKIP
    """
    return page.locator(f"{VISIBLE_NOTEBOOK} .jp-Notebook .jp-Cell")


def wait_for_kernel_idle(page, kernel: str = "Python 3 (ipykernel)", timeout: float = 90_000) -> None:
    """Wait until the open notebook is connected to ``kernel`` and it reports Idle (Lab and Notebook 7).

    Before the kernel connects the toolbar shows "No Kernel" (with an idle indicator), then "connecting";
    only the kernel's name together with the idle state means that keystrokes will execute.

    Example:
        >>> wait_for_kernel_idle(page)  # doctest: +SKIP
    """
    page.wait_for_function(_KERNEL_IDLE.replace("KERNEL", json.dumps(kernel)), timeout=timeout)


def run_cells(page, first: int, count: int = 1, timeout: float = 120_000) -> None:
    """Select cell ``first`` (0-based) and press Shift+Enter ``count`` times; wait until each of those cells has
    finished (its prompt shows an execution number). Fails with the traceback if one of them raised.

    Under heavy CPU load JupyterLab occasionally drops the very first executions after the kernel reports Idle
    (the prompts go back to ``[ ]`` and nothing runs). That is detected (first cell still ``[ ]`` with the kernel
    idle five seconds after the keystrokes) and the keystrokes are sent once more, with a warning.

    Example:
        >>> run_cells(page, 0, 3)  # doctest: +SKIP
    """
    from playwright.sync_api import expect

    cells = notebook_cells(page)
    for attempt in (1, 2):
        cells.nth(first).locator(".jp-InputPrompt").click()
        for _ in range(count):
            page.keyboard.press("Shift+Enter")
        if attempt == 2 or not _executions_dropped(page, cells.nth(first), timeout / 1000):
            break
        warnings.warn(f"JupyterLab dropped the execution of cells {first}..{first + count - 1}; sent them again",
                      stacklevel=2)  # fmt: skip
        wait_for_kernel_idle(page)
    for index in range(first, first + count):
        cell = cells.nth(index)
        cell.locator(".jp-InputPrompt").filter(has_text=_NUMBERED).wait_for(timeout=timeout)
        errors = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        for text in errors.all_inner_texts():
            if "Traceback" in text:
                raise AssertionError(f"cell {index} raised:\n{text}")
        # While the widget manager is still restoring from the kernel, an output first shows the view rebuilt from
        # its payload and hands over to the live widget a moment later; controls used before that act on the
        # rebuilt view and are lost. The renderer marks that moment (data-iw-handover): wait it out.
        expect(cell.locator("[data-iw-handover]")).to_have_count(0, timeout=60_000)


_NUMBERED = re.compile(r"^\s*\[\d+\]:\s*$")


def _executions_dropped(page, cell, timeout: float, grace: float = 5.0) -> bool:
    """Watch ``cell`` after its Shift+Enter: False once it has an execution number (or is still running when
    ``timeout`` runs out), True if it shows ``[ ]`` while the kernel is idle ``grace`` seconds later."""
    start = time.monotonic()
    idle = _KERNEL_IDLE.replace("KERNEL", json.dumps(""))
    while time.monotonic() - start < timeout:
        prompt = cell.locator(".jp-InputPrompt").inner_text().strip()
        if _NUMBERED.match(prompt):
            return False
        if prompt == "[ ]:" and time.monotonic() - start > grace and page.evaluate(idle):
            return True
        page.wait_for_timeout(250)
    return False


def printed_state(page, cell: int = 1) -> dict:
    """Run cell ``cell``, which prints ``IW_STATE {json}`` (a widget's synced traits), and return that JSON."""
    from playwright.sync_api import expect

    run_cells(page, cell)
    out = notebook_cells(page).nth(cell).locator(".jp-OutputArea-output", has_text="IW_STATE")
    expect(out).to_have_count(1)
    return json.loads(re.search(r"IW_STATE (\{.*\})", out.inner_text()).group(1))
