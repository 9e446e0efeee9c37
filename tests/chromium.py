"""Debian's Chromium driven by Playwright, for the browser tests (the notebooks in JupyterLab,
the documentation site): its path, its flags and one launch (Playwright's own browser download
is not reachable; ``./dev`` installs Debian's ``chromium``)."""

from __future__ import annotations

import contextlib
import os
import pathlib

CHROMIUM = os.environ.get("CACTUS_THEORY_CHROMIUM", "/usr/bin/chromium")
#: Chromium flags for a headless run as root in a container without network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_missing() -> str | None:
    """Why Chromium or Playwright cannot run here (a skip reason), or None."""
    if not pathlib.Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM} (./dev installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[notebooks]')"
    return None


@contextlib.contextmanager
def launched_chromium():
    """A headless Chromium browser (Playwright's ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
