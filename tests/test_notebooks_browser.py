"""The notebooks as a researcher meets them: JupyterLab in a browser, Run All, then the sliders.

The test starts JupyterLab itself (a free loopback port, a random token, Lab's default settings in
temporary settings and workspace folders, a temporary copy of ``notebooks/`` so nothing is ever
saved into the repository) and drives Debian's Chromium with Playwright through its executable
path. For every notebook it runs all cells from the menu command, waits for the kernel to go
idle, and then checks

- that every cell ran and no output is an error or a warning (stderr text with a traceback);
- that every output image is completely drawn: a PNG whose every row holds an opaque pixel (the
  figures have an opaque face; a plot cut short by a thread race leaves transparent rows);
- that moving each slider once (one keyboard step on its handle) redraws the plot of its cell:
  the image bytes change, and the new image is complete too.

JupyterLab's defaults matter: widget callbacks run on a kernel subshell, a second thread, while
later cells execute; the notebooks' figures are made without pyplot so the two cannot collide.

Skipped, with the reason, only when Chromium or Playwright is missing (``./dev`` installs both).
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from chromium import chromium_missing, launched_chromium, skip_or_fail

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Hang guards, not speed tests: each bounds a wait many times longer than it takes.
SERVER_START_S = 60
RUN_ALL_S = 240
SLIDER_S = 60

pytestmark = [pytest.mark.jupyterlab]


def _missing() -> str | None:
    if chromium_missing():
        return chromium_missing()
    for mod in ("jupyterlab", "ipywidgets", "ipykernel"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed (pip install -e '.[notebooks]')"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a temporary copy of the notebooks; yields (base url, token)."""
    reason = _missing()
    if reason:
        skip_or_fail(reason)
    tmp = tmp_path_factory.mktemp("lab")
    work = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", work)
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("IPYTHONDIR", "ipython"),
    ):
        (tmp / sub).mkdir()
        env[var] = str(tmp / sub)
    # the kernel inherits this environment: the worktree's package, the inline backend
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["OMP_NUM_THREADS"] = "1"
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={work}",
        "--ServerApp.port_retries=0",
        "--LabApp.expose_app_in_browser=True",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp / "lab.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(f"JupyterLab did not start:\n{(tmp / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield base, token, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser_context(lab):
    """One browser context per worker: each notebook opens in a new page of it (a fresh
    JupyterLab app), and the pages share the context's HTTP cache of Lab's static files."""
    with launched_chromium() as b:
        context = b.new_context(viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


def _png_rows_complete(src: str) -> str | None:
    """None if every row of the PNG has an opaque pixel, else a description of the problem."""
    import numpy as np
    from PIL import Image

    if not src.startswith("data:image/png;base64,"):
        return f"not an inline PNG: {src[:40]!r}"
    img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
    img.load()
    if img.mode != "RGBA":
        return None  # no alpha channel: every pixel is opaque
    alpha = np.asarray(img)[..., 3]
    empty = np.flatnonzero(alpha.max(axis=1) < 255)
    if empty.size:
        return (
            f"{img.size[0]}x{img.size[1]} PNG with {empty.size} rows lacking an opaque pixel "
            f"(first {empty[0]}, last {empty[-1]})"
        )
    return None


#: JavaScript run in the page: the state of the open notebook, cell by cell. ``full`` false: the
#: images as fingerprints (length and tail of the data URL, where the PNG's last CRCs sit), cheap
#: enough to poll; true: the data URLs themselves.
_CELLS_JS = """(full) => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((cell) => {
    const node = cell.node;
    return {
      type: cell.model.type,
      count: cell.model.type === 'code' ? cell.model.executionCount : null,
      images: Array.from(node.querySelectorAll('.jp-OutputArea-output img')).map(
        (e) => full ? e.src : e.src.length + ':' + e.src.slice(-64)),
      stderr: Array.from(node.querySelectorAll(
        '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]')).map((e) => e.innerText),
      sliders: node.querySelectorAll('.noUi-handle').length,
    };
  });
}"""

_KERNEL_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const k = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return k ? k.status : 'none';
}"""


def _wait_settled(page, timeout_s: float, settle_s: float = 1.0, until=None, what: str = "outputs"):
    """The cells once the kernel is idle, ``until(cells)`` holds and nothing changed for ``settle_s``.

    Widget callbacks run on a kernel subshell, whose work the kernel status may not show: a
    redraw is awaited by its outputs (``until``), not by the status alone.
    """
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while True:
        status = page.evaluate(_KERNEL_JS)
        cells = page.evaluate(_CELLS_JS, False)
        snap = json.dumps([status, cells])
        if snap != last:
            last, since = snap, time.monotonic()
        elif status == "idle" and (until is None or until(cells)) and time.monotonic() - since >= settle_s:
            return page.evaluate(_CELLS_JS, True)
        if time.monotonic() > deadline:
            texts = page.evaluate(
                "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'))"
                ".map((c) => c.innerText.slice(-1500))"
            )
            raise AssertionError(
                f"{what}: not settled after {timeout_s} s (kernel {status}); cells:\n" + "\n---\n".join(texts)
            )
        page.wait_for_timeout(200)


def _check_outputs(name: str, cells, where: str):
    for i, cell in enumerate(cells):
        for text in cell["stderr"]:
            assert not any(w in text for w in ("Traceback", "Error", "Warning")), (
                f"{name} cell {i} {where}: error output\n{text[-2000:]}"
            )
        for j, src in enumerate(cell["images"]):
            problem = _png_rows_complete(src)
            assert problem is None, f"{name} cell {i} image {j} {where}: {problem}"


def _open_notebook(page, base, token, path):
    """Open ``path`` in JupyterLab (a fresh workspace) and wait until its kernel is idle."""
    page.goto(f"{base}/lab/tree/{path.name}?token={token}&reset", wait_until="load")
    page.wait_for_function(
        """(name) => { const a = window.jupyterapp; if (!a) return false;
             const w = a.shell.currentWidget;
             return !!(w && w.context && w.context.path.endsWith(name) && w.sessionContext
                       && w.sessionContext.session && w.sessionContext.session.kernel
                       && w.sessionContext.session.kernel.status === 'idle'); }""",
        arg=path.name,
        timeout=SERVER_START_S * 1000,
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_in_jupyterlab(path, lab, browser_context):
    base, token, work = lab
    started = time.monotonic()
    page = browser_context.new_page()
    try:
        _open_notebook(page, base, token, path)
        loaded = time.monotonic() - started
        # Run All, as the Run menu does
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        cells = _wait_settled(page, RUN_ALL_S, settle_s=1.5, what=f"{path.name} Run All")
        ran = time.monotonic() - started
        code = [c for c in cells if c["type"] == "code"]
        assert code and all(c["count"] is not None for c in code), f"{path.name}: not every cell ran"
        _check_outputs(path.name, cells, "after Run All")
        assert any(c["images"] for c in cells), f"{path.name}: no figure displayed"

        def short(images):  # the fingerprints _CELLS_JS polls
            return [f"{len(src)}:{src[-64:]}" for src in images]

        moved = 0
        for i, cell in enumerate(cells):
            for k in range(cell["sliders"]):
                before = page.evaluate(_CELLS_JS, True)[i]["images"]
                assert before, f"{path.name} cell {i}: sliders without a plot"
                handle = page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".noUi-handle").nth(k)
                handle.scroll_into_view_if_needed()
                handle.focus()
                value = handle.get_attribute("aria-valuenow")
                handle.press("ArrowRight")
                if handle.get_attribute("aria-valuenow") == value:  # at its maximum
                    handle.press("ArrowLeft")
                assert handle.get_attribute("aria-valuenow") != value, (
                    f"{path.name} cell {i} slider {k}: the key did not move it"
                )
                cells = _wait_settled(
                    page,
                    SLIDER_S,
                    until=lambda c, i=i, before=before: c[i]["images"] and c[i]["images"] != short(before),
                    what=f"{path.name} cell {i} slider {k}: the plot's redraw",
                )
                _check_outputs(path.name, cells, f"after moving slider {k} of cell {i}")
                moved += 1
        print(
            f"{path.name}: page and idle kernel {loaded:.1f} s, run all {ran - loaded:.1f} s, {moved} slider(s), "
            f"total {time.monotonic() - started:.1f} s"
        )
    finally:
        page.close()
        _shut_down_kernels(base, token)


def _slider_then_code(path: pathlib.Path) -> bool:
    """Whether a code cell that makes sliders is followed by further code cells."""
    code = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    src = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in code]
    first = next((i for i, s in enumerate(src) if "Slider(" in s), None)
    return first is not None and first < len(src) - 1


#: The Log Console's entries for the open notebook (what JupyterLab logs there: outputs that reach
#: the kernel connection without a cell to go to, at the warning level the console shows).
_LOG_CONSOLE_JS = """async () => {
  const app = window.jupyterapp;
  await app.commands.execute('logconsole:open', {insertMode: 'split-bottom'});
  await new Promise((r) => setTimeout(r, 500));
  const panel = document.querySelector('.jp-LogConsolePanel');
  if (!panel) return null;
  return Array.from(panel.querySelectorAll('.jp-OutputArea-child')).map((e) => e.innerText.slice(0, 200));
}"""


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if _slider_then_code(p)], ids=lambda p: p.name)
def test_slider_moved_during_run_all(path, lab, browser_context):
    """A slider moved while Run All still executes later cells redraws its own output only:
    nothing reaches JupyterLab's Log Console, and the slider's plot shows the new value."""
    base, token, work = lab
    page = browser_context.new_page()
    try:
        _open_notebook(page, base, token, path)
        # Run All started, not awaited (the command's promise settles when every cell has run)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        # the first slider cell as soon as its plot is drawn, while later cells still run
        deadline = time.monotonic() + RUN_ALL_S
        while True:
            cells = page.evaluate(_CELLS_JS, False)
            i = next((j for j, c in enumerate(cells) if c["sliders"]), None)
            if i is not None and cells[i]["images"]:
                break
            assert time.monotonic() < deadline, f"{path.name}: no slider with a plot after {RUN_ALL_S} s"
            page.wait_for_timeout(20)
        before = cells[i]["images"]
        # every slider of the cell three steps, 150 ms apart (moves arrive while a redraw runs,
        # as when a slider is dragged), while the later cells run
        pending = None
        for k in range(cells[i]["sliders"]):
            handle = page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".noUi-handle").nth(k)
            handle.focus()
            value = handle.get_attribute("aria-valuenow")
            for _ in range(3):
                handle.press("ArrowRight")
                if pending is None:  # the code cells after the slider's that had not run yet
                    now = page.evaluate(_CELLS_JS, False)
                    pending = [
                        j for j, c in enumerate(now) if j > i and c["type"] == "code" and c["count"] is None
                    ]
                page.wait_for_timeout(150)
            if handle.get_attribute("aria-valuenow") == value:  # at its maximum
                handle.press("ArrowLeft")
            assert handle.get_attribute("aria-valuenow") != value, f"{path.name}: slider {k} did not move"
        assert pending, f"{path.name}: Run All had ended before the first move"
        cells = _wait_settled(
            page,
            RUN_ALL_S,
            settle_s=1.5,
            until=lambda c: c[i]["images"] and c[i]["images"] != before,
            what=f"{path.name}: Run All with the slider moved",
        )
        code = [c for c in cells if c["type"] == "code"]
        assert all(c["count"] is not None for c in code), f"{path.name}: not every cell ran"
        _check_outputs(path.name, cells, "after a slider moved during Run All")
        assert len(cells[i]["images"]) == len(before), f"{path.name}: the slider's cell has other images"
        logged = page.evaluate(_LOG_CONSOLE_JS)
        assert logged is not None, f"{path.name}: the Log Console did not open"
        assert logged == [], f"{path.name}: {len(logged)} Log Console entries: {logged[:3]}"
    finally:
        page.close()
        _shut_down_kernels(base, token)


def _shut_down_kernels(base: str, token: str):
    """Delete every session of the server and its kernel, so that one kernel runs at a time."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()
