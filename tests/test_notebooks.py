"""Every notebook's code cells run top to bottom (no kernel needed: the cells are exec'd)."""

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    nb = json.loads(path.read_text())
    namespace = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), "commit notebooks without outputs"
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)


def test_figures_write(tmp_path):
    from cactus_theory.plots import write_figures

    paths = write_figures(str(tmp_path), ["gamma"])
    assert pathlib.Path(paths[0]).stat().st_size > 10_000
