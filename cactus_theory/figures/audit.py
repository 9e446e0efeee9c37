r"""The audit's figure: every rule at one true emitted divergence, acceptance and length ratio.

Left: each rule's acceptance after calibration to the target (bars, coloured by the
calibration's status), SpS's acceptance and the optimal frontier :math:`F(\epsilon)` as
vertical lines (Theorem 1). Right: the completion-length ratio each rule's end-of-sequence
shift predicts under geometric stopping,
:math:`\mathrm{mean}\, q(\mathrm{EOS}) / \mathrm{mean}\, h_{alg}(\mathrm{EOS})`
(:mod:`cactus_theory.rule_audit`). Rules without a number are named in a note on the panel
(:func:`cactus_theory.figures.notes.record_rules`).

Symbols: q verifier, p drafter, :math:`h_{alg}` the emitted distribution (Hao & Mou, ICLR 2026,
arXiv 2604.04987, Theorem 3).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np

from .notes import NOTE_GID, record_rules
from .style import DOUBLE_COLUMN, PALETTE, legend_above, new_axes_row, styled

__all__ = ["figure_audit", "STATUS_COLOURS"]

#: Bar colour per calibration status (legend entries: at most these).
STATUS_COLOURS = {
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


@styled
def figure_audit(result, *, ax=None):
    r"""Bars per rule: acceptance at the common emitted divergence, and the predicted length ratio.

    Parameters
    ----------
    result : cactus_theory.rule_audit.AuditResult
        From :func:`cactus_theory.rule_audit.audit`.
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
    for axis, key, xlabel in (
        (a1, "acceptance", f"acceptance at {result.per} {result.divergence} = {result.eps:g}"),
        (a2, "length_ratio", "length ratio (geometric stopping)"),
    ):
        drawn, dropped = {}, {}
        ys = np.arange(len(rows))[::-1]
        seen = set()
        for y, r in zip(ys, rows):
            v = r.get(key)
            if not _finite(v):
                why = (
                    "not audited"
                    if r["status"] == "not audited"
                    else ("no EOS column" if result.eos_token_id is None else "EOS never in the support")
                    if key == "length_ratio"
                    else "no value"
                )
                dropped[r["rule"]] = why
                continue
            st = r["status"]
            axis.barh(
                y,
                float(v),
                color=STATUS_COLOURS.get(st, PALETTE[6]),
                height=0.7,
                label=st if st not in seen else None,
            )
            seen.add(st)
            drawn[r["rule"]] = r["rule"]
        axis.set_yticks(ys, [r["rule"] for r in rows])
        axis.set_xlabel(xlabel)
        axis.grid(axis="y", visible=False)
        if key == "acceptance":
            axis.axvline(result.sps_acceptance, color=PALETTE[0], ls=":", lw=1.0, label="SpS")
            if result.frontier_at_eps is not None:
                axis.axvline(
                    result.frontier_at_eps,
                    color=PALETTE[3],
                    ls="--",
                    lw=1.0,
                    label=r"$\bar F(\epsilon)$ (corpus mean)",
                )
            # the figure's legend, above both panels (constrained layout makes room for it)
            legend_above(fig, axis, own, ncol=min(len(axis.get_legend_handles_labels()[1]), 7), fontsize=8)
        else:
            axis.axvline(1.0, color=PALETTE[0], ls=":", lw=1.0)
            axis.tick_params(axis="y", labelleft=False)
        if key == "acceptance":
            # below the panel (under its x label), never across the bars
            record_rules(axis, given, drawn, dropped, loc=(0.0, -0.3), va="top", width=60)
        elif dropped:  # the figure's record is the left panel's; name the rest here too
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
                    0.5,
                    0.5,
                    text,
                    transform=axis.transAxes,
                    ha="center",
                    va="center",
                    fontsize=8,
                    gid=NOTE_GID,
                )
                axis.set_xticks([])
            else:
                axis.text(
                    0.0, -0.3, text, transform=axis.transAxes, ha="left", va="top", fontsize=8, gid=NOTE_GID
                )
    return fig
