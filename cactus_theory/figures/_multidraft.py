r"""Figures: the k-draft frontier, and trees at one sequence divergence per verification.

* :func:`figure_multidraft_frontier` — :math:`F_k(\epsilon)`, the best acceptance of any
  verifier of k i.i.d. drafts emitting within :math:`\epsilon` of q, for several k, with the
  single-draft frontier (k = 1, the paper's Theorem 1 bound) drawn over it.
* :func:`figure_tree_budget` — expected accepted drafts per verification of a set of trees
  against the spend per verification: lossless ``optimal``, one per-node budget
  (``optimal-budget``) and one multiplier (``optimal-multiplier``).

Symbols: q verifier, p drafter, k drafts, :math:`\epsilon` budget, E[L] accepted drafts.
Source: :mod:`cactus_theory.solvers._multidraft`, :mod:`cactus_theory.analysis.tree_budget`;
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 1.
"""

from __future__ import annotations

import numpy as np

from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, legend_above, new_axes, new_axes_row, styled

_MARKERS = ("o", "s", "^", "D", "v", "P", "X")

__all__ = ["figure_multidraft_frontier", "figure_tree_budget"]


@styled
def figure_multidraft_frontier(
    target_probs, draft_probs, ks=(1, 2, 4, 8), divergence="kl", eps_max=None, ax=None
):
    r"""Plot :math:`F_k(\epsilon)` against :math:`\epsilon` for each k (one row of q and p).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,)
    ks : sequence of int
        At most 7 values (with the single-draft curve: 8 legend entries).
    divergence : str
    eps_max : float, optional
        Right end of the budget axis (default: the single-draft saturation budget, capped at 1).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure

    Symbols: q verifier, p drafter, k drafts, :math:`\epsilon` budget. Source: as the module.
    """
    from ..solvers import frontier, multidraft_frontier, saturation_budget

    ks = [int(k) for k in ks]
    if not ks or len(ks) > 7:
        raise ValueError(f"ks: give 1 to 7 draft counts, got {len(ks)}")
    q = np.asarray(target_probs, dtype=np.float64)
    p = np.asarray(draft_probs, dtype=np.float64)
    top = float(min(1.0, saturation_budget(q, p, divergence))) if eps_max is None else float(eps_max)
    grid = top * np.linspace(0.0, 1.0, 33) ** 2
    own = ax is None
    fig, ax = new_axes(ax)
    labels = {}
    for i, k in enumerate(ks):
        acc = multidraft_frontier(q, p, k, grid, divergence).acceptance
        labels[f"k={k}"] = f"$k = {k}$"
        # a marker per k at staggered budgets: two k whose frontiers coincide (every k >= the
        # support size reaches the same optimum) stay visible side by side
        ax.plot(
            grid,
            acc,
            color=PALETTE[(i + 1) % len(PALETTE)],
            marker=_MARKERS[i % len(_MARKERS)],
            markevery=(i % len(ks), len(ks)),
            ms=4,
            mfc="none",
            label=labels[f"k={k}"],
        )
    labels["single-draft frontier"] = "single-draft frontier"
    ax.plot(
        grid,
        frontier(q, p, grid, divergence).acceptance,
        color=PALETTE[0],
        ls=":",
        label=labels["single-draft frontier"],
    )
    ax.set_xlabel(rf"budget $\epsilon$ on $D(o\,\|\,q)$ ({divergence})")
    ax.set_ylabel(r"$F_k(\epsilon)$")
    ax.set_ylim(None, 1.01)
    # above the axes: the frontiers rise from the lower left to the upper right
    legend_above(fig, ax, own, ncol=3, columnspacing=0.8, handlelength=1.6)
    record_rules(ax, list(labels), labels)
    return fig


@styled
def figure_tree_budget(trees, budgets=(0.02, 0.05, 0.1, 0.2), divergence="kl", ax=None):
    r"""Mean E[accepted drafts] per verification against the spend per verification.

    Parameters
    ----------
    trees : sequence of TokenTree
    budgets : sequence of float
        Spends per verification (sequence divergence of one verification's emitted block).
    divergence : str
    ax : pair of matplotlib Axes, optional
        (E[L], gain over lossless).

    Returns
    -------
    matplotlib.figure.Figure

    Symbols: E[L] accepted drafts, B budget. Source: :mod:`cactus_theory.analysis.tree_budget`.
    """
    from ..analysis.tree_budget import tree_budget_rows

    budgets = [float(b) for b in budgets]
    if not budgets:
        raise ValueError("budgets: give at least one budget")
    rows = [tree_budget_rows(trees, b, divergence) for b in budgets]
    own = ax is None
    fig, (a1, a2) = new_axes_row(ax, n=2, width=DOUBLE_COLUMN, height=2.8)
    names = [r["verifier"] for r in rows[0]]
    styles = {
        "optimal": dict(color=PALETTE[0], ls=":", marker=""),
        "optimal-budget": dict(color=PALETTE[1], marker="o"),
        "optimal-multiplier": dict(color=PALETTE[2], marker="D"),
        "cactus-rrs": dict(color=PALETTE[3], marker="s"),
    }
    labels = {}
    for i, name in enumerate(names):
        spend = [r[i]["spend"] for r in rows]
        el = [r[i]["expected_accepted"] for r in rows]
        labels[name] = f"{name} ({rows[0][i]['knob']})"
        style = styles.get(name, {})
        if rows[0][i]["knob"] == "lossless":  # spends nothing at every budget: a level
            a1.axhline(el[0], label=labels[name], color=style.get("color", PALETTE[0]), ls=":")
            continue
        a1.plot(spend, el, label=labels[name], **style)
        a2.plot(spend, [r[i]["gain"] for r in rows], **style)
    a1.set_xlabel(f"{divergence} spent per verification")
    a1.set_ylabel("E[accepted drafts]")
    a2.set_xlabel(f"{divergence} spent per verification")
    a2.set_ylabel("gain over lossless optimal")
    legend_above(fig, a1, own, ncol=2, columnspacing=0.8)
    record_rules(a1, names, labels)
    return fig
