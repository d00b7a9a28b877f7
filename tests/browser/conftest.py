"""Fixtures of the browser suite: Debian's chromium through Playwright, one JupyterLab server for the session,
and pages that record every request so each test can assert that nothing left the loopback interface.

A missing chromium or an unbuilt/stale JS bundle makes the tests fail (never skip), naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.browser.harness import (
    ARTIFACTS,
    LABEXTENSION,
    REPO_ROOT,
    ChromiumMissing,
    JupyterServer,
    RequestLog,
    chromium_executable,
    jupyter_lab,
    launch_chromium,
)

STATIC = REPO_ROOT / "interp_widgets" / "static"
BUNDLES = ("token_highlight.js", "token_highlight.css", "export_boot.js")


@dataclass
class RecordedPage:
    """A Playwright page and the log of every request it made."""

    page: object
    requests: RequestLog


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def built_bundles() -> Path:
    """The esbuild output the widgets load and the JupyterLab extension; fails if either is missing or older than
    ``js/src``."""
    sources = [p for p in (REPO_ROOT / "js" / "src").rglob("*") if p.is_file()]
    missing = [name for name in BUNDLES if not (STATIC / name).is_file()]
    if missing:
        pytest.fail(f"JS bundle not built ({', '.join(missing)} missing in {STATIC}); run `npm --prefix js ci && "
                    "npm --prefix js run build` or `pip install -e .`")  # fmt: skip
    oldest_bundle = min((STATIC / name).stat().st_mtime for name in BUNDLES)
    stale = [str(p.relative_to(REPO_ROOT)) for p in sources if p.stat().st_mtime > oldest_bundle]
    if stale:
        pytest.fail(f"JS bundle in {STATIC} is older than {stale[:5]}; rebuild with `npm --prefix js run build`")
    entry = LABEXTENSION / "package.json"
    if not entry.is_file():
        pytest.fail(f"the interp-widgets JupyterLab extension is not built ({entry} missing); run `npm --prefix js ci && "
                    "npm --prefix js run build` or `pip install -e .`")  # fmt: skip
    stale = [str(p.relative_to(REPO_ROOT)) for p in sources if p.stat().st_mtime > entry.stat().st_mtime]
    if stale:
        pytest.fail(f"the JupyterLab extension in {LABEXTENSION} is older than {stale[:5]}; rebuild with "
                    "`npm --prefix js run build`")  # fmt: skip
    return STATIC


@pytest.fixture(scope="session")
def playwright_driver():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


def require_chromium() -> str:
    """Path of Debian's chromium, or a test failure (never a skip) that names `apt-get install -y chromium`."""
    try:
        return chromium_executable()
    except ChromiumMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def browser(playwright_driver, built_bundles):
    """Headless Debian chromium, shared by the session (each test opens its own context)."""
    require_chromium()
    browser = launch_chromium(playwright_driver)
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """Root directory of the JupyterLab server; tests write their notebooks here at run time."""
    return tmp_path_factory.mktemp("lab-root")


@pytest.fixture(scope="session")
def jupyter_server(lab_root, built_bundles) -> Iterator[JupyterServer]:
    """One real JupyterLab server (Notebook 7 included) on 127.0.0.1 for the whole session."""
    with jupyter_lab(lab_root) as server:
        try:
            yield server
        finally:  # kept for diagnosing failures (tests/_artifacts is gitignored)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "jupyter-server.log").write_text(server.log_tail(200_000), encoding="utf-8")


@pytest.fixture()
def recorded_page(browser, request) -> Iterator[RecordedPage]:
    """A fresh browser context and page whose requests are all recorded; on failure its screenshot and console
    log go to tests/_artifacts."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    recorded = RecordedPage(page=page, requests=RequestLog(page))
    yield recorded
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"failed-{request.node.name}.png"), full_page=True)
        (ARTIFACTS / f"failed-{request.node.name}.console.txt").write_text("\n".join(console), encoding="utf-8")
    context.close()
