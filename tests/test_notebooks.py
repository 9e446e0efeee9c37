"""Every notebook runs top to bottom in a real Jupyter kernel, stored without outputs.

Each notebook is executed by nbclient with the ``python3`` kernel of the running interpreter
(the venv). The kernel's matplotlib backend is set explicitly to the inline backend (headless:
it renders PNGs into the cell outputs, as in JupyterLab), overriding an inherited
``MPLBACKEND=Agg``; the tests then check that every cell that draws a figure really displays
one, which fails if the library switched the backend. A failing cell fails the test with that
cell's traceback (nbclient's CellExecutionError).
"""

import json
import os
import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: A hang guard per cell, not a speed test (the notebooks take seconds).
CELL_TIMEOUT_S = 300
DRAWS = re.compile(r"^fig\s*=\s*figure_|plt\.subplots", re.M)


def test_the_five_notebooks_exist():
    names = [p.stem for p in NOTEBOOKS]
    assert names == ["1_delta_tradeoff", "2_taylor_vs_exact", "3_emitted_distribution",
                     "4_rules_and_frontier", "5_real_logits"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i}: commit notebooks without outputs"
            assert cell.execution_count is None, f"{path.name} cell {i}: execution count stored"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel(path, monkeypatch):
    # the kernel inherits this environment: the worktree's package first, inline plots
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    code = [c for c in nb.cells if c.cell_type == "code"]
    drawing = [c for c in code if DRAWS.search(c.source) and "def explore" not in c.source]
    assert drawing, f"{path.name}: no cell draws a figure"
    for cell in drawing:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"{path.name}: no figure displayed by the cell\n{cell.source}"
    for cell in code:
        for out in cell.outputs:
            assert out.get("output_type") != "error", f"{path.name}: error output in\n{cell.source}"
            if out.get("name") == "stderr":
                assert "Warning" not in out.get("text", ""), f"{path.name}: warning\n{out['text']}"

    # widgets (ipywidgets.interact) draw into Output widgets, whose outputs nbclient keeps in
    # the notebook's widget state: an exception there must fail the test too
    state = json.dumps(nb.metadata.get("widgets", {}))
    assert '"output_type": "error"' not in state, f"{path.name}: error inside a widget"
    if path.stem == "1_delta_tradeoff":
        shown = state + "".join(o.get("text", "") for c in code for o in c.outputs)
        assert "F@KL" in shown, "explore() did not print its table"
