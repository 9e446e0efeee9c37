r"""One figure style: print sizes, a colour-blind-safe palette, mathtext labels, vector PDF text.

Every figure function of :mod:`cactus_theory.figures` draws inside :func:`figure_style`
(a ``matplotlib.rc_context``: nothing global changes, and no backend is ever selected: the
backend is the caller's choice, e.g. ``MPLBACKEND=Agg`` for the command line and the tests).

- Widths: :data:`SINGLE_COLUMN` (3.3 in) and :data:`DOUBLE_COLUMN` (6.9 in), the column and
  text widths of two-column conference formats.
- Fonts: 8 pt ticks and legends, 9 pt axis labels (readable when printed at these widths).
- Colours: the Okabe-Ito palette (:data:`PALETTE`), distinguishable under the common colour
  vision deficiencies; lines also differ by style or marker where colour carries meaning.
- Output: PDF with TrueType (Type 42) fonts, so the text stays text; PNG at 300 dpi.
- No titles: captions belong to the paper.

Symbols in labels: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` Cactus's per-draft budget, :math:`h_{alg}` the emitted distribution (Hao & Mou,
ICLR 2026, Theorem 3).
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path

__all__ = [
    "PALETTE",
    "SINGLE_COLUMN",
    "DOUBLE_COLUMN",
    "STYLE",
    "FORMATS",
    "figure_style",
    "styled",
    "new_axes",
    "new_axes_row",
    "figure_bytes",
    "save_figure",
]

#: Okabe & Ito (2008) colour-blind-safe palette (black first; yellow last, weak on white).
PALETTE = ("#000000", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442")
#: Single-column figure width in inches.
SINGLE_COLUMN = 3.3
#: Double-column (text) width in inches.
DOUBLE_COLUMN = 6.9
#: Output formats :func:`save_figure` writes.
FORMATS = ("pdf", "png")

#: rcParams of the style (applied only inside :func:`figure_style`).
STYLE = {
    "font.size": 8,
    "axes.labelsize": 9,
    "axes.titlesize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "legend.handlelength": 1.8,
    "legend.borderaxespad": 0.3,
    "axes.prop_cycle": None,  # set below (needs cycler)
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.3,
    "lines.markersize": 3.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "mathtext.fontset": "dejavusans",
    "figure.dpi": 100,
    "figure.constrained_layout.use": True,
    "savefig.dpi": 300,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
}


def _style():
    from cycler import cycler

    return dict(STYLE, **{"axes.prop_cycle": cycler(color=list(PALETTE[1:]) + [PALETTE[0]])})


@contextlib.contextmanager
def figure_style():
    """Context in which the style's rcParams hold (``matplotlib.rc_context``; nothing global).

    Examples
    --------
    >>> from cactus_theory.figures._style import figure_style
    >>> with figure_style():
    ...     import matplotlib.pyplot as plt
    ...     fig, ax = plt.subplots()
    >>> plt.close(fig)
    """
    import matplotlib as mpl

    with mpl.rc_context(_style()):
        try:
            yield
        finally:
            # A backend loaded for the first time inside the context (e.g. Jupyter's inline
            # backend on the first figure of a session) switches interactive mode on; keep
            # that, or later figures in the notebook would no longer display.
            interactive = mpl.is_interactive()
    mpl.interactive(interactive)


def styled(fn):
    """Decorator: run a figure function inside :func:`figure_style`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with figure_style():
            return fn(*args, **kwargs)

    return wrapper


def new_axes(ax=None, width: float = SINGLE_COLUMN, height: float | None = None):
    """``(fig, ax)``: the given axes and its figure, or a new figure of the given print size.

    A new figure is a ``matplotlib.figure.Figure`` made without pyplot: no pyplot state is
    touched (safe beside widget callbacks in other threads); display or save it explicitly.

    Parameters
    ----------
    ax : matplotlib.axes.Axes, optional
        Draw into it (the caller's figure and size).
    width, height : float
        Inches of a new figure (height default: 0.72 x width for one column).
    """
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 0.72 * width if height is None else height))
    return fig, fig.subplots()


def legend_above(fig, ax, own: bool, **kwargs):
    """The legend of ``ax``'s entries above the axes of a figure this package made (``own``:
    its constrained layout keeps room for it, so it covers no data), else on ``ax`` where it
    covers the least data (``loc="best"``) in the caller's figure."""
    if own:
        return fig.legend(*ax.get_legend_handles_labels(), loc="outside upper center", **kwargs)
    kwargs.pop("ncol", None)
    return ax.legend(loc="best", **kwargs)


def new_axes_row(axes=None, n: int = 2, width: float = DOUBLE_COLUMN, height: float = 2.5, **kwargs):
    """``(fig, axes)``: ``n`` given axes, or a new double-column row of ``n`` axes."""
    if axes is not None:
        axes = list(axes)
        if len(axes) != n:
            raise ValueError(f"ax: expected {n} axes, got {len(axes)}")
        return axes[0].figure, axes
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, list(fig.subplots(1, n, **kwargs))


def figure_bytes(fig, fmt: str) -> bytes:
    """The figure encoded as ``fmt`` ("pdf": Type 42 vector text; "png": 300 dpi)."""
    if fmt not in FORMATS:
        raise ValueError(f"formats: unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    buf = io.BytesIO()
    with figure_style():
        # a fixed creation date keeps the PDF bytes reproducible
        meta = {"CreationDate": None} if fmt == "pdf" else {}
        fig.savefig(buf, format=fmt, metadata=meta)
    return buf.getvalue()


def save_figure(fig, stem, formats=FORMATS) -> list:
    """Write ``<stem>.<fmt>`` for each format atomically (never half-written); return the paths."""
    from .._io import atomic_write_bytes

    formats = tuple(formats)
    for fmt in formats:  # validate all before writing any
        if fmt not in FORMATS:
            raise ValueError(f"formats: unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    stem = Path(stem)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        atomic_write_bytes(str(path), figure_bytes(fig, fmt))
        paths.append(path)
    return paths
