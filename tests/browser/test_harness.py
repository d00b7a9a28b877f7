"""The harness itself: a missing chromium is an error naming the apt command, and the loopback filter is right."""

from __future__ import annotations

import subprocess

import pytest

from tests.browser import harness
from tests.browser.conftest import require_chromium

pytestmark = pytest.mark.browser


def test_missing_chromium_fails_with_install_command(monkeypatch):
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    with pytest.raises(harness.ChromiumMissing, match="apt-get install -y chromium"):
        harness.launch_chromium(playwright=None)
    # The browser fixture turns it into a failure, not a skip.
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as outcome:
        require_chromium()
    assert outcome.type is pytest.fail.Exception, f"a missing chromium must fail the test, not {outcome.typename}"
    assert "apt-get install -y chromium" in str(outcome.value)


def test_browser_fixture_runs_debian_chromium(browser):
    # Playwright's own default path (under ms-playwright/) is never installed; the running browser reports the
    # version of the distribution's binary.
    reported = subprocess.run([harness.chromium_executable(), "--version"], capture_output=True, text=True, check=True)
    assert browser.version in reported.stdout


def test_request_log_catches_a_request_off_loopback(browser):
    context = browser.new_context()
    try:
        context.route("http://192.0.2.1/**", lambda route: route.abort())  # TEST-NET-1; aborted, nothing leaves
        page = context.new_page()
        log = harness.RequestLog(page)
        page.set_content('<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><img src="http://192.0.2.1/x.png">')
        page.wait_for_load_state()
        assert log.outside() == ["http://192.0.2.1/x.png"]
        with pytest.raises(AssertionError, match="192.0.2.1"):
            log.assert_loopback_only()
    finally:
        context.close()


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8888/lab", True),
        ("ws://localhost:8888/api/kernels/x/channels", True),
        ("http://[::1]:8000/", True),
        ("data:image/png;base64,AAAA", True),
        ("blob:http://127.0.0.1:8888/5f0c", True),
        ("file:///tmp/export.html", True),
        ("https://cdn.jsdelivr.net/npm/anywidget", False),
        ("http://127.0.0.1.nip.io/", False),
        ("http://10.0.0.1/", False),
        ("chrome-extension://abc/page.html", False),
    ],
)
def test_is_loopback(url, local):
    assert harness.is_loopback(url) is local
