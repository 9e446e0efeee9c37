r"""The audit's figure: every rule at one true emitted divergence, acceptance and length ratio.

Left: each rule's acceptance after calibration to the target (bars, coloured by the
calibration's status), SpS's acceptance and the optimal frontier :math:`F(\epsilon)` as
vertical lines (Theorem 1). Right: the completion-length ratio each rule's end-of-sequence
shift predicts under geometric stopping,
:math:`\mathrm{mean}\, q(\mathrm{EOS}) / \mathrm{mean}\, h_{alg}(\mathrm{EOS})`
(:mod:`cactus_theory.simulate.audit`). Rules without a number are named in a note on the panel
(:func:`cactus_theory.figures._notes.record_rules`).

Symbols: q verifier, p drafter, :math:`h_{alg}` the emitted distribution (Hao & Mou, ICLR 2026,
arXiv 2604.04987, Theorem 3).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np

from ._notes import NOTE_GID, record_rules
from ._style import DOUBLE_COLUMN, PALETTE, legend_above, new_axes_row, styled

__all__ = [
    "figure_audit",
]

#: Bar colour per calibration status (legend entries: at most these).
_STATUS_COLOURS = {
    "calibrated": PALETTE[1],
    "within 0.2% of eps": PALETTE[6],
    "step": PALETTE[2],
    "range-end": PALETTE[5],
    "above": PALETTE[4],
    "reference": PALETTE[0],
    "no knob": PALETTE[3],
}


def _finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(float(x))


def _why_missing(result, r, key):
    """Why a rule has no bar in the panel of ``key``."""
    if r["status"] == "not audited":
        return "not audited"
    if key != "length_ratio":
        return "no value"
    return "no EOS column" if result.eos_token_id is None else "EOS never in the support"


def _bars(axis, result, rows, key):
    """One bar per rule with a finite ``key``, coloured by status; (drawn, dropped with why)."""
    drawn, dropped, seen = {}, {}, set()
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        v = r.get(key)
        if not _finite(v):
            dropped[r["rule"]] = _why_missing(result, r, key)
            continue
        st = r["status"]
        colour = _STATUS_COLOURS.get(st, PALETTE[6])
        axis.barh(y, float(v), color=colour, height=0.7, label=st if st not in seen else None)
        seen.add(st)
        drawn[r["rule"]] = r["rule"]
    axis.set_yticks(ys, [r["rule"] for r in rows])
    axis.grid(axis="y", visible=False)
    return drawn, dropped


def _note_dropped(axis, drawn, dropped, n):
    """The right panel's note: the rules it does not draw, grouped by why (the figure's record
    is the left panel's)."""
    by = {}
    for rule, why in dropped.items():
        by.setdefault(why, []).append(rule)
    text = "\n".join(
        textwrap.fill(
            f"not drawn ({why}): " + ("every rule" if len(names) == n else ", ".join(names)),
            40,
            break_on_hyphens=False,
        )
        for why, names in by.items()
    )
    if not drawn:  # an empty panel: its note in the middle, nothing to cover
        axis.text(
            0.5, 0.5, text, transform=axis.transAxes, ha="center", va="center", fontsize=8, gid=NOTE_GID
        )
        axis.set_xticks([])
    else:
        axis.text(0.0, -0.3, text, transform=axis.transAxes, ha="left", va="top", fontsize=8, gid=NOTE_GID)


@styled
def figure_audit(result, *, ax=None):
    r"""Bars per rule: acceptance at the common emitted divergence, and the predicted length ratio.

    Parameters
    ----------
    result : cactus_theory.results.AuditResult
        From :func:`cactus_theory.api.audit`.
    ax : sequence of two matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = list(result.table)
    n = max(1, len(rows))
    own = ax is None
    fig, (a1, a2) = new_axes_row(ax, 2, DOUBLE_COLUMN, 0.9 + 0.17 * n, sharey=False)
    given = [r["rule"] for r in rows]
    drawn, dropped = _bars(a1, result, rows, "acceptance")
    a1.set_xlabel(f"acceptance at {result.per} {result.divergence} = {result.eps:g}")
    a1.axvline(result.sps_acceptance, color=PALETTE[0], ls=":", lw=1.0, label="SpS")
    if result.frontier_at_eps is not None:
        a1.axvline(
            result.frontier_at_eps,
            color=PALETTE[3],
            ls="--",
            lw=1.0,
            label=r"$\bar F(\epsilon)$ (corpus mean)",
        )
    # the figure's legend, above both panels (constrained layout makes room for it)
    legend_above(fig, a1, own, ncol=min(len(a1.get_legend_handles_labels()[1]), 7), fontsize=8)
    # below the panel (under its x label), never across the bars
    record_rules(a1, given, drawn, dropped, loc=(0.0, -0.3), va="top", width=60)
    drawn, dropped = _bars(a2, result, rows, "length_ratio")
    a2.set_xlabel("length ratio (geometric stopping)")
    a2.axvline(1.0, color=PALETTE[0], ls=":", lw=1.0)
    a2.tick_params(axis="y", labelleft=False)
    if dropped:
        _note_dropped(a2, drawn, dropped, n)
    return fig
