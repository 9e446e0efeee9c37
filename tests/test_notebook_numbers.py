"""The notebooks show numbers one way: every notebook that displays pandas tables sets the same
float format (4 decimals) in its first code cell, and no table is rounded to another precision.
Read from the stored notebooks (no kernel: the ``notebooks`` stage executes them)."""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FORMAT = 'pd.options.display.float_format = "{:.4f}".format'


def _code(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_tables_have_one_float_format(path):
    code = _code(path)
    if not any("import pandas as pd" in c for c in code):
        return
    assert FORMAT in code[0], f"{path.name}: its first code cell does not set {FORMAT}"
    for i, c in enumerate(code):
        other = re.findall(r"\.round\((\d+)\)", c) + re.findall(r"np\.round\([^)]*,\s*(\d+)\)", c)
        assert all(d == "4" for d in other), f"{path.name} code cell {i}: rounds to {other} decimals"
