"""The documentation site as a reader meets it: built with warnings as errors, opened in Chromium.

The test builds the site as ``./dev docs`` does (``sphinx -W --keep-going -b html docs``) into a
temporary folder. The notebooks' outputs come from one execution per notebook source
(docs/_ext/notebook_gallery.py): in ``./dev test`` the notebook stage's executed copies, else a
run by the build itself, cached in a fresh temporary folder (a failing cell fails the build). It
then serves the HTML from a local ``http.server`` on 127.0.0.1 and drives Debian's Chromium with
Playwright (through its executable path, as tests/test_notebooks_browser.py does). Every request
for anything but that server is blocked and recorded: the pages must need nothing from the
network. On

- the index: the title, the navigation to the user guide, the API reference and the notebooks;
  the top navigation bar shows the user guide, the notebooks and the API reference (not under a
  "More" menu);
- the gallery: one card per notebook, in order, with its thumbnail (the notebook's last figure,
  reduced), its title and its run time (the notebook page states the same), linking to it;
- the API page of ``cactus_theory.analyze``: its signature and numpydoc's Parameters section;
  the API page of ``cactus_theory.audit``: the notebooks whose code calls it, as cards;
- the page of notebook 0: the executed cells' outputs, among them a figure (a loaded PNG);
- the pages of the notebooks with sliders: the slider cell shows the sliders' default state (the
  controls' values and a drawn figure), not code without output;
- every notebook page: a table wider than the text column scrolls sideways inside its output,
  and scrolling reaches its last column (it is not clipped);

the maths is typeset: MathJax 3 (served from the site's ``_static``) has rendered every formula
of the page into an ``mjx-container`` and no raw TeX delimiter is left in the text.

Skipped, with the reason, when Chromium, Playwright or the documentation tools are missing
(``./dev setup`` installs them).
"""

from __future__ import annotations

import datetime
import functools
import http.server
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
from chromium import chromium_missing, launched_chromium, skip_or_fail

ROOT = pathlib.Path(__file__).resolve().parent.parent
MATHJAX = pathlib.Path(
    os.environ.get("CACTUS_THEORY_MATHJAX", ROOT / ".cache" / "mathjax" / "node_modules" / "mathjax")
)
#: Hang guards, not speed tests: the build executes the 13 notebooks where no executed copy is
#: given (a few minutes on a loaded machine); a page loads and typesets in about a second.
BUILD_S = 900
PAGE_S = 60
#: The notebooks in the gallery's order (by their leading number).
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"), key=lambda p: int(p.stem.split("_")[0]))
#: The notebooks with a slider panel (their static page shows the sliders' default state).
SLIDERS = [p for p in NOTEBOOKS if "slider_panel(" in p.read_text(encoding="utf-8")]

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
        skip_or_fail(reason)
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    env = dict(os.environ)
    env["CACTUS_THEORY_DOCS_NB_CACHE"] = str(tmp / "executed")  # a fresh cache: no stale outputs
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


def _open(browser, url: str, maths: bool = True):
    """A page at ``url`` with every request not for the local server blocked; (page, blocked).
    ``maths``: the page has formulas, so MathJax is awaited (Sphinx loads it only there)."""
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
    if not maths:
        return context, page, blocked, errors
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
    """Every notebook's page shows its executed outputs and no error."""
    out, _ = site
    for nb in NOTEBOOKS:
        page = out / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"no page for {nb.name}"
        text = page.read_text(encoding="utf-8")
        assert 'class="cell_output' in text, f"{nb.name}: no outputs"
        assert "Traceback" not in text, f"{nb.name}: an error output"


def _run_time_s(stem: str) -> float:
    """A notebook's run time from the executed copy the site rendered: the sum over code cells
    of nbclient's execute_input to execute_reply timestamps."""
    nb = json.loads((ROOT / "docs" / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    total = 0.0
    for cell in nb["cells"]:
        t = cell.get("metadata", {}).get("execution", {})
        if "shell.execute_reply" in t:
            end, start = (
                datetime.datetime.fromisoformat(t[k]) for k in ("shell.execute_reply", "iopub.execute_input")
            )
            total += (end - start).total_seconds()
    return total


def test_index_page(browser, server):
    context, page, blocked, errors = _open(browser, f"{server}/index.html")
    try:
        assert "cactus_theory" in page.title()
        nav = page.evaluate(
            "() => Array.from(document.querySelectorAll('a')).map((a) => a.getAttribute('href'))"
        )
        for target in ("theory.html", "conventions.html", "api.html", "notebooks/0_quick_start.html"):
            assert target in nav, f"index: no link to {target}"
        # the top navigation bar: its links shown without opening a menu, and no "More" menu
        top = page.evaluate("""() => Array.from(document.querySelectorAll('.bd-header .navbar-nav a.nav-link'))
            .filter((a) => a.offsetParent !== null && !a.closest('.dropdown-menu'))
            .map((a) => [a.innerText.trim(), a.getAttribute('href')])""")
        assert top == [
            ["User guide", "user-guide.html"],
            ["Notebooks", "gallery.html"],
            ["API reference", "api.html"],
        ], f"top navigation: {top}"
        assert page.locator(".bd-header ul.navbar-nav li.dropdown").count() == 0, (
            "top navigation: a 'More' menu"
        )
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


_IMAGES_JS = """(el) => Array.from(el.querySelectorAll('img')).map((i) => ({complete: i.complete,
    w: i.naturalWidth, h: i.naturalHeight, src: i.getAttribute('src')}))"""


def test_gallery_page(browser, server):
    context, page, blocked, errors = _open(browser, f"{server}/gallery.html", maths=False)
    try:
        cards = page.locator(".ct-gallery-card")
        hrefs = [
            cards.nth(k).locator("a.sd-stretched-link").get_attribute("href") for k in range(cards.count())
        ]
        assert hrefs == [f"notebooks/{p.stem}.html" for p in NOTEBOOKS], f"gallery: cards {hrefs}"
        for k, nb in enumerate(NOTEBOOKS):
            card = cards.nth(k)
            (thumb,) = card.locator("img.sd-card-img-top").evaluate_all(
                "(imgs) => imgs.map((i) => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}))"
            )
            assert thumb["complete"] and thumb["w"] > 100 and thumb["h"] > 50, f"{nb.stem}: thumbnail {thumb}"
            title = json.loads(nb.read_text(encoding="utf-8"))["cells"][0]["source"][0].lstrip("# ").strip()
            shown = card.locator(".sd-card-title").inner_text().strip().replace("\u2019", "'")  # smart quotes
            assert shown == title, f"{nb.stem}: card title {shown!r}, notebook {title!r}"
            footer = card.locator(".sd-card-footer").inner_text()
            m = re.fullmatch(r"Run time (\d+\.\d) s", footer.strip())
            assert m, f"{nb.stem}: card footer {footer!r}"
            assert float(m.group(1)) == round(_run_time_s(nb.stem), 1) > 0, f"{nb.stem}: run time {footer}"
        assert not blocked, f"gallery: requests off the local server: {blocked}"
        assert not errors, f"gallery: JavaScript errors: {errors}"
    finally:
        context.close()


def test_gallery_thumbnail_is_the_last_figure(browser, server):
    """The thumbnail of notebook 0 is its page's last figure, reduced (same aspect ratio)."""
    context, page, blocked, errors = _open(browser, f"{server}/notebooks/0_quick_start.html", maths=False)
    try:
        figures = page.locator("article").evaluate(_IMAGES_JS)
        last = [f for f in figures if "_images/" in f["src"] and "_thumbnails" not in f["src"]][-1]
        runtime = page.locator("article").inner_text()
        m = re.search(r"Run time of this notebook: (\d+\.\d) s \(its cells,", runtime)
        assert m and float(m.group(1)) == round(_run_time_s("0_quick_start"), 1), "notebook page: run time"
    finally:
        context.close()
    from PIL import Image

    with Image.open(ROOT / "docs" / "notebooks" / "_thumbnails" / "0_quick_start.png") as img:
        thumb = img.copy()
    assert max(thumb.size) <= 400 and thumb.size[0] < last["w"], f"thumbnail {thumb.size}, figure {last}"
    # rounding to whole pixels: the aspect ratios agree to one pixel of the thumbnail's height
    assert abs(thumb.size[0] * last["h"] / last["w"] - thumb.size[1]) <= 1, (
        f"thumbnail {thumb.size}, figure {last}"
    )


def test_api_page_links_the_notebooks_that_use_it(browser, server):
    users = sorted(p.stem for p in NOTEBOOKS if re.search(r"\bct\.audit\(", p.read_text(encoding="utf-8")))
    assert users, "no notebook calls ct.audit"
    context, page, blocked, errors = _open(
        browser, f"{server}/generated/cactus_theory.audit.html", maths=False
    )
    try:
        assert page.locator("p.rubric", has_text="Notebooks using audit").count() == 1
        cards = page.locator(".ct-gallery-card")
        linked = sorted(
            cards.nth(k)
            .locator("a.sd-stretched-link")
            .get_attribute("href")
            .removeprefix("../notebooks/")
            .removesuffix(".html")
            for k in range(cards.count())
        )
        assert linked == users, f"API page of audit: cards {linked}, notebooks calling ct.audit {users}"
        for img in page.locator(".ct-gallery-card").evaluate_all(
            "(cs) => cs.map((c) => { const i = c.querySelector('img'); return {complete: i.complete, w: i.naturalWidth}; })"
        ):
            assert img["complete"] and img["w"] > 100, f"API page of audit: thumbnail {img}"
    finally:
        context.close()


@pytest.mark.parametrize("nb", SLIDERS, ids=lambda p: p.stem)
def test_slider_cell_shows_its_default_state(browser, server, nb):
    assert SLIDERS, "no notebook has sliders"
    context, page, blocked, errors = _open(browser, f"{server}/notebooks/{nb.stem}.html", maths=False)
    try:
        cell = page.locator("div.cell", has=page.locator("div.cell_input", has_text="slider_panel(")).last
        state = cell.locator(".cell_output p.ct-slider-state")
        assert state.count() == 1, f"{nb.stem}: no line naming the sliders' values"
        assert re.search(r"defaults.*: \S+ = \S+", state.inner_text()), state.inner_text()
        images = cell.locator(".cell_output").evaluate(_IMAGES_JS)
        assert images, f"{nb.stem}: the slider cell shows no figure"
        for img in images:
            assert img["complete"] and img["w"] > 100 and img["h"] > 100, f"{nb.stem}: figure not drawn {img}"
    finally:
        context.close()


#: Each table of a cell output wider than the output: the scrolling box that holds it, and
#: whether scrolling that box to its end brings the table's right edge into view.
_WIDE_TABLES_JS = """() => Array.from(document.querySelectorAll('.cell_output table')).map((t) => {
  const cell = t.closest('.cell_output');
  let s = t.parentElement;
  while (s && s !== document.body && getComputedStyle(s).overflowX === 'visible') s = s.parentElement;
  const inside = !!s && cell.contains(s);
  let reached = false;
  if (inside) {
    s.scrollLeft = s.scrollWidth;
    reached = t.getBoundingClientRect().right <= s.getBoundingClientRect().right + 1;
    s.scrollLeft = 0;
  }
  return {wide: t.getBoundingClientRect().width > cell.clientWidth + 1, inside: inside, reached: reached,
          overflow: s ? getComputedStyle(s).overflowX : null};
}).filter((x) => x.wide)"""


def test_wide_tables_scroll(browser, server):
    wide = 0
    for nb in NOTEBOOKS:
        context, page, blocked, errors = _open(browser, f"{server}/notebooks/{nb.stem}.html", maths=False)
        try:
            for t in page.evaluate(_WIDE_TABLES_JS):
                assert t["inside"] and t["overflow"] in ("auto", "scroll"), (
                    f"{nb.stem}: a wide table is clipped {t}"
                )
                assert t["reached"], f"{nb.stem}: scrolling does not reach a wide table's last column {t}"
                wide += 1
        finally:
            context.close()
    assert wide > 0, "no table wider than its output: the check above checked nothing"


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
