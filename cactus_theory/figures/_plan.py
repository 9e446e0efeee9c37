r"""The plan's figure: predicted speedup and tokens per verifier call against the draft length.

Left: each rule's predicted speedup :math:`E_m c_v(1) / (m c_d + c_v(m+1))` with its interval
over the recorded requests (band), break-even at 1 (dashed), each rule's best m marked. Right:
the expected tokens per verifier call :math:`E_m` with its interval (:func:`cactus_theory.plan`).

Symbols: m draft length, :math:`c_d` drafter cost per token, :math:`c_v(k)` verifier cost over k
tokens.
"""

from __future__ import annotations

import numpy as np

from ._style import DOUBLE_COLUMN, PALETTE, legend_above, new_axes_row, styled

__all__ = ["figure_plan"]


@styled
def figure_plan(result, axes=None):
    """Draw a :class:`~cactus_theory.results.PlanResult` (two panels); returns the Figure."""
    fig, (left, right) = new_axes_row(axes, 2, DOUBLE_COLUMN, 2.6)
    ms = np.asarray(result.draft_lengths)
    for i, r in enumerate(result.table):
        colour = PALETTE[i % len(PALETTE)]
        label = r["rule"] + ("" if r["knob"] in ("-", None) else f" ({r['knob']})")
        for ax, key in ((left, "speedup"), (right, "tokens_per_call")):
            y = np.asarray(r[key], dtype=float)
            ax.plot(ms, y, "o-", color=colour, ms=3, label=label if ax is left else None)
            ax.fill_between(ms, r[key + "_low"], r[key + "_high"], color=colour, alpha=0.2, lw=0)
        if r["best_m"] is not None:
            left.plot([r["best_m"]], [r["best_speedup"]], "*", color=colour, ms=10)
    left.axhline(1.0, color="0.4", ls="--", lw=0.8)
    left.set_xlabel("draft length m")
    left.set_ylabel("predicted speedup")
    right.set_xlabel("draft length m")
    right.set_ylabel("tokens per verifier call")
    for ax in (left, right):
        ax.set_xticks(ms)
    legend_above(fig, left, axes is None, ncol=max(1, len(result.table)))
    return fig
