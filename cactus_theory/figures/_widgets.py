"""Sliders for the notebooks: controls and one output, redrawn in place, written only there.

A callback that prints or displays while a frontend runs other cells (JupyterLab runs widget
callbacks on a kernel subshell during Run All) sends its output on the kernel's message channel
with the slider's message as parent; once that message counts as finished, JupyterLab has no cell
to route the output to and logs it to its Log Console. :func:`slider_panel` therefore sends
nothing on that channel: each redraw formats what ``draw`` returns (IPython's display formatter,
PNG for a matplotlib Figure) and replaces the Output widget's ``outputs`` state in one update,
which the frontend renders inside the widget. An exception in ``draw`` is shown there too.
"""

from __future__ import annotations

import base64
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["slider_panel"]


def _output(obj: Any) -> dict:
    """One nbformat ``display_data`` output of ``obj`` (a Figure as PNG, as the inline backend)."""
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib.figure import Figure

    if isinstance(obj, Figure):
        from IPython.core.pylabtools import print_figure

        png = print_figure(obj, "png", bbox_inches="tight")
        data = {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": repr(obj)}
        return {"output_type": "display_data", "data": data, "metadata": {}}
    data, metadata = InteractiveShell.instance().display_formatter.format(obj)
    return {"output_type": "display_data", "data": data, "metadata": metadata}


def _error(exc: BaseException) -> dict:
    return {
        "output_type": "error",
        "ename": type(exc).__name__,
        "evalue": str(exc),
        "traceback": traceback.format_exception(exc),
    }


def slider_panel(draw: Callable[..., Any], controls: Mapping[str, Any], *, columns: int = 2):
    """Controls and what ``draw(**values)`` shows, redrawn in place whenever a control moves.

    Parameters
    ----------
    draw : callable
        Called with one keyword per control (its current ``value``); returns what to show: one
        object (a matplotlib Figure, a pandas table or Styler, anything IPython displays) or a
        tuple of them, shown in that order.
    controls : mapping of str to ipywidgets widget
        The keyword of ``draw`` each control sets, e.g. ``{"delta": ipywidgets.FloatSlider(...)}``.
    columns : int, default 2
        Controls per row.

    Returns
    -------
    ipywidgets.VBox
        The controls above an ``ipywidgets.Output`` that holds the current drawing; display it.
        Its default state is drawn before this returns, so an executed notebook's widget state
        holds it (the documentation site shows it as the cell's output).

    Notes
    -----
    The drawing is written into the Output widget's ``outputs`` state, never printed while the
    callback runs: a redraw during Run All cannot reach another cell or JupyterLab's Log Console.
    """
    if not controls:
        raise ValueError("controls: at least one control is needed")
    if int(columns) < 1:
        raise ValueError(f"columns: must be at least 1, got {columns!r}")
    import ipywidgets as w

    out = w.Output()

    def redraw(change=None):
        try:
            shown = draw(**{name: c.value for name, c in controls.items()})
            items = shown if isinstance(shown, tuple) else (shown,)
            out.outputs = tuple(_output(obj) for obj in items)
        except Exception as exc:  # shown in the panel: a callback's stderr would go to the Log Console
            out.outputs = (_error(exc),)

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    grid = w.GridBox(
        list(controls.values()),
        layout=w.Layout(grid_template_columns=f"repeat({int(columns)}, minmax(0, 1fr))"),
    )
    return w.VBox([grid, out])
