"""Every notebook runs top to bottom in a real Jupyter kernel, stored without outputs.

Notebooks are found by glob (``notebooks/*.ipynb``). Each is executed by nbclient with the
``python3`` kernel of the running interpreter (the venv). The kernel's matplotlib backend is set
explicitly to the inline backend (headless: it renders PNGs into the cell outputs, as in
JupyterLab), overriding an inherited ``MPLBACKEND=Agg``. A failing cell (including the cells
that assert the prose's numbers) fails the test with that cell's traceback (nbclient's
CellExecutionError). The notebooks' figures are made without pyplot (safe beside widget
callbacks on a kernel subshell); JupyterLab itself is exercised by test_notebooks_browser.py.

Where ``CACTUS_THEORY_EXECUTED_NOTEBOOKS`` names a folder (``./dev test`` sets it), each
notebook that passed is written there executed, with the SHA-256 of its source in its metadata
(``cactus_theory.source_sha256``): the documentation build that follows renders those outputs
instead of executing the notebooks a second time (docs/conf.py).
"""

import hashlib
import json
import os
import pathlib
import re

import pytest
from chromium import require_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: A hang guard per cell, not a speed test (the notebooks take seconds).
CELL_TIMEOUT_S = 300
#: A cell that makes a figure: a figure function's call or a Figure of its own.
DRAWS = re.compile(r"\bfigure_[a-z_]+\(|\bFigure\(|\bplot_[a-z_]+\(")


def _stored(path: pathlib.Path) -> dict:
    """The notebook as stored: its JSON (nbformat 4). The checks of the stored files read it
    directly: importing nbformat builds jsonschema's format grammars, a cost every process
    that collects this file would pay, so only the test that runs the notebooks imports it."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{path.name}: not an nbformat 4 notebook"
    return nb


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def test_notebooks_found():
    names = [p.stem for p in NOTEBOOKS]
    for stem in (
        "1_delta_tradeoff",
        "2_taylor_vs_exact",
        "3_emitted_distribution",
        "4_rules_and_frontier",
        "5_real_logits",
    ):
        assert stem in names


def test_index_lists_every_notebook():
    index = ROOT / "notebooks" / "README.md"
    assert index.exists(), "notebooks/README.md (the index of the notebooks) is missing"
    text = index.read_text(encoding="utf-8")
    missing = [p.name for p in NOTEBOOKS if p.name not in text]
    assert not missing, f"notebooks/README.md does not list {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_stored_without_outputs(path):
    nb = _stored(path)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i}: commit notebooks without outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i}: execution count stored"
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: widget state stored"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_no_pyplot(path):
    # pyplot's figure registry is shared between threads: JupyterLab runs widget callbacks on a
    # kernel subshell (a second thread) whose inline-backend flush would show and close a figure
    # another cell is still drawing (plots came out blank or half-drawn)
    for i, cell in enumerate(_stored(path)["cells"]):
        if cell["cell_type"] == "code":
            assert not re.search(r"matplotlib\.pyplot|import pyplot|\bplt\.", _source(cell)), (
                f"{path.name} cell {i} uses pyplot"
            )


def test_figure_functions_leave_pyplot_alone():
    plt = pytest.importorskip("matplotlib.pyplot")
    from cactus_theory.figures import figure_gamma
    from cactus_theory.figures._style import new_axes, new_axes_row

    before = plt.get_fignums()
    fig = figure_gamma(deltas=(0.1,))
    new_axes()
    new_axes_row(n=2)
    assert plt.get_fignums() == before
    assert fig.canvas.manager is None  # not registered with pyplot


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel(path, monkeypatch):
    # the kernel inherits this environment: the worktree's package first, inline plots
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nbformat = require_module("nbformat")  # CI (CACTUS_THEORY_REQUIRE_BROWSER=1): fails if missing
    nbclient = require_module("nbclient")
    require_module("ipykernel")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "import cactus_theory as ct" in "\n".join(c.source for c in code), (
        f"{path.name}: does not go through the front door"
    )
    # the widget state nbclient keeps: what the Output widgets (sliders' plots) displayed
    state = json.dumps(nb.metadata.get("widgets", {}))
    drawing = [c for c in code if DRAWS.search(c.source) and not re.search(r"^\s*def ", c.source, re.M)]
    assert any(DRAWS.search(c.source) for c in code), f"{path.name}: no cell draws a figure"
    for cell in drawing:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"{path.name}: no figure displayed by the cell\n{cell.source}"
    for cell in code:
        for out in cell.outputs:
            assert out.get("output_type") != "error", f"{path.name}: error output in\n{cell.source}"
            if out.get("name") == "stderr":
                assert "Warning" not in out.get("text", ""), f"{path.name}: warning\n{out['text']}"
    assert '"output_type": "error"' not in state, f"{path.name}: error inside a widget"
    if any("slider_panel(" in c.source for c in code):
        assert "image/png" in state, f"{path.name}: the sliders' Output widget shows no figure"
    _keep_executed(path, nb)


def _keep_executed(path: pathlib.Path, nb) -> None:
    """Write the executed notebook into ``$CACTUS_THEORY_EXECUTED_NOTEBOOKS`` (if set), tagged
    with its source's hash; written to a temporary name and renamed, never half-written."""
    folder = os.environ.get("CACTUS_THEORY_EXECUTED_NOTEBOOKS")
    if not folder:
        return
    import nbformat

    from cactus_theory._cli import write_atomic

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # a copy
    # the widget state stays: the site shows each slider panel's default drawing from it
    nb.metadata["cactus_theory"] = {"source_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    write_atomic(str(pathlib.Path(folder) / path.name), nbformat.writes(nb))
