"""cactus_theory.figures.slider_panel: what a move writes, and where (only the panel's output)."""

from __future__ import annotations

import pytest

w = pytest.importorskip("ipywidgets")

import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from cactus_theory.figures import slider_panel  # noqa: E402


def _draw(delta=0.5, m=4):
    fig = Figure(figsize=(2, 1.5))
    fig.subplots().plot([0, 1], [0, delta * m])
    return pd.DataFrame({"delta": [delta], "m": [m]}), fig


def test_default_state_and_a_move_write_only_the_output_state(capsys):
    controls = {"delta": w.FloatSlider(value=0.5, min=0.1, max=1.0), "m": w.IntSlider(value=4, min=1, max=8)}
    panel = slider_panel(_draw, controls, columns=2)
    grid, out = panel.children
    assert list(grid.children) == list(controls.values())
    first = out.outputs
    assert [sorted(o["data"]) for o in first] == [["text/html", "text/plain"], ["image/png", "text/plain"]]
    assert "0.5" in first[0]["data"]["text/plain"]
    controls["m"].value = 7  # what a slider's move does in the kernel
    assert "7" in out.outputs[0]["data"]["text/plain"]
    assert out.outputs[1]["data"]["image/png"] != first[1]["data"]["image/png"]
    # nothing printed or displayed outside the panel's state (no message for a cell to catch)
    assert capsys.readouterr() == ("", "")


def test_an_exception_in_draw_is_shown_in_the_panel(capsys):
    def draw(delta):
        if delta > 0.5:
            raise ZeroDivisionError("planted")
        return f"delta {delta}"

    slider = w.FloatSlider(value=0.5, min=0.1, max=1.0)
    _, out = slider_panel(draw, {"delta": slider}).children
    assert out.outputs[0]["data"]["text/plain"] == "'delta 0.5'"
    slider.value = 0.9
    (err,) = out.outputs
    assert (
        err["output_type"] == "error" and err["ename"] == "ZeroDivisionError" and err["evalue"] == "planted"
    )
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(("kwargs", "name"), [({"controls": {}}, "controls"), ({"columns": 0}, "columns")])
def test_bad_arguments_name_themselves(kwargs, name):
    args = {"draw": _draw, "controls": {"delta": w.FloatSlider()}, **kwargs}
    with pytest.raises(ValueError, match=name):
        slider_panel(**args)
