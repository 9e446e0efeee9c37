"""The documentation site as a reader meets it: built with warnings as errors, opened in Chromium.

The test builds the site as ``./dev docs`` does (``sphinx -W --keep-going -b html docs``) into a
temporary folder, with the notebook cache there too, so that every notebook is executed by the
build (a failing cell fails the build). It then serves the HTML from a local ``http.server`` on
127.0.0.1 and drives Debian's Chromium with Playwright (through its executable path, as
tests/test_notebooks_browser.py does). Every request for anything but that server is blocked and
recorded: the pages must need nothing from the network. On

- the index: the title, the navigation to the user guide, the API reference and the notebooks;
- the API page of ``cactus_theory.analyze``: its signature and numpydoc's Parameters section;
- the page of notebook 0: the executed cells' outputs, among them a figure (a loaded PNG);

the maths is typeset: MathJax 3 (served from the site's ``_static``) has rendered every formula
of the page into an ``mjx-container`` and no raw TeX delimiter is left in the text.

Skipped, with the reason, when Chromium, Playwright or the documentation tools are missing
(``./dev setup`` installs them).
"""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest
from chromium import chromium_missing, launched_chromium

ROOT = pathlib.Path(__file__).resolve().parent.parent
MATHJAX = pathlib.Path(
    os.environ.get("CACTUS_THEORY_MATHJAX", ROOT / ".cache" / "mathjax" / "node_modules" / "mathjax")
)
#: Hang guards, not speed tests: the build executes the 11 notebooks (a few minutes on a loaded
#: machine); a page loads and typesets in about a second.
BUILD_S = 900
PAGE_S = 60

pytestmark = [pytest.mark.site, pytest.mark.xdist_group("docs")]


def _missing() -> str | None:
    for mod, extra in (
        ("sphinx", "docs"),
        ("numpydoc", "docs"),
        ("myst_nb", "docs"),
        ("pydata_sphinx_theme", "docs"),
    ):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed (pip install -e '.[{extra}]')"
    if chromium_missing():
        return chromium_missing()
    if not (MATHJAX / "es5" / "tex-chtml.js").is_file():
        return f"MathJax not found at {MATHJAX} (./dev setup installs npm's mathjax@3 there)"
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site's folder, and the build's log."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    env = dict(os.environ)
    env["CACTUS_THEORY_DOCS_NB_CACHE"] = str(tmp / "jupyter_cache")  # a fresh cache: every notebook runs
    env.pop("MPLBACKEND", None)  # the notebooks select the inline backend themselves
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-b",
        "html",
        "-d",
        str(tmp / "doctrees"),
        str(ROOT / "docs"),
        str(out),
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_S)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the documentation build failed:\n{log[-6000:]}"
    print(f"docs build: {time.monotonic() - started:.1f} s")
    return out, log


@pytest.fixture(scope="module")
def server(site):
    out, _ = site
    handler = functools.partial(_QuietHandler, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def browser(server):
    with launched_chromium() as b:
        yield b


#: In the page, once MathJax has typeset it: the formulas, and TeX delimiters left in the text
#: outside code (Sphinx writes inline maths as \( \) and display maths as \[ \]).
_MATH_JS = r"""async () => {
  await MathJax.startup.promise;
  const math = Array.from(document.querySelectorAll('.math'));
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest('pre, code, script, style, mjx-assistive-mml')) continue;
    if (/\\\(|\\\)|\\\[|\\\]|\$\$/.test(n.textContent)) raw.push(n.textContent.slice(0, 120));
  }
  return {version: MathJax.version, formulas: math.length,
          typeset: math.filter((e) => e.querySelector('mjx-container')).length,
          containers: document.querySelectorAll('mjx-container').length, raw: raw};
}"""


def _open(browser, url: str):
    """A page at ``url`` with every request not for the local server blocked; (page, blocked)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []
    local = url.split("/", 3)[:3]

    def route(r):
        if r.request.url.split("/", 3)[:3] == local:
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    response = page.goto(url, wait_until="load", timeout=PAGE_S * 1000)
    assert response is not None and response.ok, f"{url}: {response and response.status}"
    page.wait_for_function(
        "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=PAGE_S * 1000
    )
    return context, page, blocked, errors


def _check_maths(page, where: str, blocked, errors):
    m = page.evaluate(_MATH_JS)
    assert m["version"].startswith("3."), f"{where}: MathJax {m['version']}"
    assert m["formulas"] > 0, f"{where}: no formula on the page"
    assert m["typeset"] == m["formulas"] and m["containers"] >= m["formulas"], (
        f"{where}: {m['typeset']} of {m['formulas']} formulas typeset"
    )
    assert not m["raw"], f"{where}: raw TeX left in the text: {m['raw'][:5]}"
    src = page.evaluate(
        "() => Array.from(document.scripts).map((s) => s.src).find((s) => s.includes('tex-chtml'))"
    )
    assert src and src.startswith(page.url.split("/", 3)[0] + "//127.0.0.1"), f"{where}: MathJax from {src}"
    assert not blocked, f"{where}: requests off the local server: {blocked}"
    assert not errors, f"{where}: JavaScript errors: {errors}"
    return m


def test_build_executed_every_notebook(site):
    """Every notebook's page shows its executed outputs: executed by this build, or (in
    ``./dev test``) rendered from the notebook test's executed copy of the same source."""
    out, log = site
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    for nb in notebooks:
        page = out / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"no page for {nb.name}"
        executed_here = f"{nb.name}: Executed notebook" in log
        copy = (ROOT / "docs" / "notebooks" / nb.name).read_text(encoding="utf-8")
        assert executed_here or '"execution_mode": "off"' in copy, f"{nb.name} was not executed"
        assert 'class="cell_output' in page.read_text(encoding="utf-8"), f"{nb.name}: no outputs"


def test_index_page(browser, server):
    context, page, blocked, errors = _open(browser, f"{server}/index.html")
    try:
        assert "cactus_theory" in page.title()
        nav = page.evaluate(
            "() => Array.from(document.querySelectorAll('a')).map((a) => a.getAttribute('href'))"
        )
        for target in ("theory.html", "conventions.html", "api.html", "notebooks/0_quick_start.html"):
            assert target in nav, f"index: no link to {target}"
        _check_maths(page, "index", blocked, errors)
    finally:
        context.close()


def test_api_page(browser, server):
    context, page, blocked, errors = _open(browser, f"{server}/generated/cactus_theory.analyze.html")
    try:
        sig = page.locator("dt.sig[id='cactus_theory.analyze']")
        assert sig.count() == 1, "no signature of cactus_theory.analyze"
        assert "analyze(" in sig.inner_text().replace("\n", "")
        body = page.locator("dl.py.function > dd").first.inner_text()
        for section in ("Parameters", "Returns", "target_probs", "OneStepResult"):
            assert section in body, f"API page: no {section!r} in the description"
        _check_maths(page, "API page of cactus_theory.analyze", blocked, errors)
    finally:
        context.close()


def test_notebook_page(browser, server):
    context, page, blocked, errors = _open(browser, f"{server}/notebooks/0_quick_start.html")
    try:
        outputs = page.locator(".cell_output")
        assert outputs.count() > 5, f"notebook page: {outputs.count()} cell outputs"
        images = page.evaluate("""() => Array.from(document.querySelectorAll('.cell_output img'))
            .map((i) => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, src: i.src}))""")
        assert images, "notebook page: no output image"
        for img in images:
            assert img["complete"] and img["w"] > 100 and img["h"] > 100, f"image not drawn: {img}"
        text = page.locator(".cell_output").all_inner_texts()
        assert not any("Traceback" in t for t in text), "notebook page: an error output"
        _check_maths(page, "notebook page 0_quick_start", blocked, errors)
    finally:
        context.close()


def _table_rows(page: str, first_cell: str):
    """The cells of the Markdown table rows of ``docs/<page>`` whose first cell matches."""
    import re

    rows = []
    for line in (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if re.fullmatch(first_cell, cells[0]):
                rows.append(cells)
    return rows


def test_theory_page_divergence_table_matches_the_registry():
    from fractions import Fraction

    import numpy as np

    import cactus_theory as ct

    rows = {r[0].split()[0].strip("`"): r for r in _table_rows("theory.md", r"`[a-z_0-9]+`.*")}
    assert set(rows) == set(ct.DIVERGENCES), "the theory page's table lists other divergences"
    for name, d in ct.DIVERGENCES.items():
        f2, finite = rows[name][3], rows[name][4]
        if np.isfinite(d.f_second_at_one):
            assert float(Fraction(f2)) == d.f_second_at_one, f"{name}: f''(1) {f2} on the page"
        else:
            assert f2 == "none", f"{name}: f''(1) {f2} on the page, none in the registry"
        assert finite == ("yes" if d.finite_off_support else "no"), f"{name}: finite off the support"


def test_conventions_page_states_the_toolkit_settings():
    import cactus_theory as ct

    (row,) = _table_rows("conventions.md", r"this toolkit .*PAPER_TRUNCATION.*")
    t = ct.distributions.PAPER_TRUNCATION
    assert row[1:4] == [f"{t['temperature']:g}", f"{t['top_k']}", f"{t['top_p']:g}"]
