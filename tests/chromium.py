"""Debian's Chromium driven by Playwright, for the browser tests (the notebooks in JupyterLab,
the documentation site): its path, its flags, one launch (Playwright's own browser download
is not reachable; ``./dev`` installs Debian's ``chromium``), and what a stage does when
something it needs is missing: someone running the tests by hand gets a skip with the reason;
CI (``.ci/run`` sets ``CACTUS_THEORY_REQUIRE_BROWSER=1``) gets a failure, so a stage that could
not run never passes empty."""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest

CHROMIUM = os.environ.get("CACTUS_THEORY_CHROMIUM", "/usr/bin/chromium")
#: Set to 1 (by ``.ci/run``): a browser stage that cannot run fails instead of skipping.
REQUIRE_ENV = "CACTUS_THEORY_REQUIRE_BROWSER"

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


def skip_or_fail(reason: str) -> None:
    """Skip the test for ``reason``, or fail it where ``CACTUS_THEORY_REQUIRE_BROWSER=1``."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: this stage must run, not skip)", pytrace=False)
    pytest.skip(reason)


def require_module(name: str):
    """``pytest.importorskip`` that fails instead where ``CACTUS_THEORY_REQUIRE_BROWSER=1``."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_or_fail(f"{name} is not installed ({e})")


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
