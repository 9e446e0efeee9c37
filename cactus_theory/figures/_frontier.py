r"""Every rule's operating points against the optimal frontier, averaged over positions.

An operating point is (true :math:`\mathrm{KL}(h_{\mathrm{alg}}\|q)`, acceptance
:math:`\alpha = \sum_n p_n a_n`) of a rule at one knob value
(:func:`cactus_theory.analysis.frontier.operating_points`). Per position, the frontier
:math:`F_i(\epsilon)` (:func:`cactus_theory.solvers._frontier.frontier`; Mentored decoding
attains it) bounds :math:`\alpha_i \le F_i(\mathrm{KL}_i)`. Averaged over N positions the bound
is the *pooled* frontier

.. math:: G(\bar\epsilon) = \max\Big\{\tfrac1N\textstyle\sum_i F_i(\epsilon_i) :
          \tfrac1N\sum_i \epsilon_i = \bar\epsilon\Big\} \;\ge\; \tfrac1N\textstyle\sum_i \alpha_i
          \quad\text{at}\quad \bar\epsilon = \tfrac1N\textstyle\sum_i \mathrm{KL}_i,

(a rule may spend its divergence unevenly over positions, so the frontier at one common
budget is not a bound on averages). Each :math:`F_i` is concave, so G is traced by the
Lagrangian: for a multiplier :math:`\lambda`, every position takes
:math:`\arg\max_\epsilon F_i(\epsilon) - \lambda\epsilon` on a budget grid
(:func:`pooled_frontier`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\epsilon` budget on the emitted distribution. Reference: Hao & Mou, ICLR 2026 (arXiv
2604.04987), Theorems 1 and 3; Tran-Thien (2023) for Mentored decoding.
"""

from __future__ import annotations

import numpy as np

from ..analysis.frontier import default_sweep, operating_points
from ..rules import RULES
from ._data import coerce_data, synthetic_data
from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, styled

__all__ = ["pooled_frontier", "frontier_rules", "FRONTIER_FAMILIES", "figure_frontier"]

#: Families of the frontier figure, one panel each: (label, name prefixes); a rule joins the
#: first family whose prefix it starts with, the last family takes every other rule.
FRONTIER_FAMILIES = (
    ("Cactus", ("cactus",)),
    ("Mentored", ("mentored",)),
    ("cascades", ("cascade",)),
    ("others", ()),
)
#: Most legend entries of one panel: a family with more drawn rules is split over panels.
_MAX_LEGEND = 8
#: A mean emitted KL at or below this is the SpS point (every sweep starts there).
SPS_KL = 1e-12
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<")


def pooled_frontier(
    target_probs, draft_probs, divergence="kl", *, n_budgets: int = 160, n_multipliers: int = 240
):
    r"""The pooled frontier G: best mean acceptance at each mean divergence over positions.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
    divergence : str
    n_budgets : int
        Grid of per-position budgets: 0 and log-spaced points up to the largest saturation
        budget (beyond it every :math:`F_i` is flat).
    n_multipliers : int
        Multipliers :math:`\lambda` (log-spaced over the grid's slopes, plus 0).

    Returns
    -------
    eps_mean, acceptance_mean : ndarray
        Points of G, increasing in eps_mean; every point is attained (by Mentored decoding with
        the per-position budgets chosen), so G is exact at these points and a lower bound of
        the true pooled frontier between them.
    """
    from ..solvers import frontier, saturation_budget

    top = float(np.max(saturation_budget(target_probs, draft_probs, divergence)))
    top = max(top, 1e-6)
    grid = np.concatenate([[0.0], np.geomspace(top * 1e-5, top, n_budgets - 1)])
    F = frontier(target_probs, draft_probs, grid, divergence).acceptance  # (N, E)
    F = F.reshape(-1, grid.size)
    slopes = np.diff(F, axis=-1) / np.diff(grid)
    pos = slopes[slopes > 0]
    lam_hi = float(pos.max()) * 2 if pos.size else 1.0
    lam_lo = float(pos.min()) / 2 if pos.size else 1e-6
    lams = np.concatenate([np.geomspace(lam_hi, lam_lo, n_multipliers - 1), [0.0]])
    eps_bar, acc_bar = [], []
    for lam in lams:
        k = np.argmax(F - lam * grid, axis=-1)  # first maximiser: the least budget
        eps_bar.append(grid[k].mean())
        acc_bar.append(np.take_along_axis(F, k[:, None], -1).mean())
    eps_bar, acc_bar = np.asarray(eps_bar), np.asarray(acc_bar)
    order = np.argsort(eps_bar, kind="stable")
    return eps_bar[order], np.maximum.accumulate(acc_bar[order])


def frontier_rules() -> list:
    """The rules of the frontier figure: every registered rule but SpS, a rule whose choices have
    names of their own (``cactus-exact-kl``, ``mentored-tv``, ...) by those names."""
    based = {spec.alias_of.name for spec in getattr(RULES, "aliases", {}).values()}
    return [n for n in RULES if n != "sps" and n not in based] + list(getattr(RULES, "aliases", {}))


def _family(name) -> int:
    for k, (_, prefixes) in enumerate(FRONTIER_FAMILIES):
        if not prefixes or name.startswith(prefixes):
            return k
    return len(FRONTIER_FAMILIES) - 1


def _sweep_gaps(rule, data):
    """Mean emitted KL and mean gap to the per-position frontier at each knob value (finite KL)."""
    knob, values = default_sweep(rule)
    op = operating_points(
        rule,
        data.target_probs,
        data.draft_probs,
        knob=knob,
        values=values,
        divergences=("kl",),
        raw_target_probs=data.raw_target_probs,
        raw_draft_probs=data.raw_draft_probs,
    )
    K = len(op.values)
    kl = op.divergences["kl"].reshape(-1, K).mean(axis=0)
    gap = op.gap["kl"].reshape(-1, K).mean(axis=0)
    ok = np.isfinite(kl)
    return kl[ok], gap[ok]


@styled
def figure_frontier(
    target_probs=None, draft_probs=None, *, raw_target_probs=None, raw_draft_probs=None, rules=None, ax=None
):
    r"""Each rule's gap to the optimal frontier at its own true emitted KL, one panel per family.

    Each rule sweeps its knob (:func:`cactus_theory.analysis.frontier.default_sweep`). At each
    knob value the point is (mean over positions of :math:`\mathrm{KL}(h_{\mathrm{alg},i}\|q_i)`,
    mean over positions of :math:`F_i(\mathrm{KL}_i) - \alpha_i`): the acceptance the rule leaves
    on the table against the best acceptance of any rule emitting the same divergence at that
    position (:math:`F_i`, :func:`cactus_theory.solvers._frontier.frontier`; Mentored decoding
    attains it, so every gap is >= 0 and exact, with no budget grid). The y axis is symmetric-log
    (linear below 1e-4), so gaps of 0.001 and of 0.5 are both readable. A knob value whose mean
    KL is infinite (mass emitted outside supp(q) at some position) is not drawn; a rule with no
    finite point besides SpS's (KL = 0, gap 0: every sweep starts there) is named in a note on
    its family's panel. Families (:data:`FRONTIER_FAMILIES`) with more than :data:`_MAX_LEGEND`
    drawn rules are split over panels.

    Parameters
    ----------
    target_probs, draft_probs : array_like (N, V), a Dump or FigureData, optional
        The rows (default: noisy copy, V = 128, 64 positions, the paper's truncation; raw rows
        for the rules that decide on them).
    raw_target_probs, raw_draft_probs : array_like (N, V), optional
    rules : sequence of str, optional
        Registered rule names (default :func:`frontier_rules`: every rule but SpS).
    ax : sequence of matplotlib.axes.Axes, optional
        One per panel (as many as the families need).

    Returns
    -------
    matplotlib.figure.Figure
    """
    if target_probs is None:
        data = synthetic_data(64, 128)
    elif draft_probs is None:
        data = coerce_data(target_probs)
    else:
        data = coerce_data((target_probs, draft_probs, raw_target_probs, raw_draft_probs))
    rules = frontier_rules() if rules is None else list(rules)
    for name in rules:
        if name not in RULES:
            raise ValueError(f"rules: unknown rule {name!r}")
    points = {name: _sweep_gaps(name, data) for name in rules}
    drawn = [n for n in rules if np.any(points[n][0] > SPS_KL)]
    panels = []  # (family label, drawn rules of the panel, left-out rules named on it)
    for k, (label, _) in enumerate(FRONTIER_FAMILIES):
        mine = [n for n in drawn if _family(n) == k]
        out = [n for n in rules if _family(n) == k and n not in drawn]
        chunks = [mine[i : i + _MAX_LEGEND] for i in range(0, len(mine), _MAX_LEGEND)] or [[]]
        if mine or out:
            panels += [(label, c, out if j == 0 else []) for j, c in enumerate(chunks)]
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(DOUBLE_COLUMN, 0.5 + 1.45 * len(panels)))
        axes = list(np.atleast_1d(fig.subplots(len(panels), 1, sharex=True, sharey=True)))
    else:
        axes = list(np.atleast_1d(ax))
        if len(axes) != len(panels):
            raise ValueError(f"ax: {len(panels)} panels needed, got {len(axes)} axes")
        fig = axes[0].figure
    right = max([float(points[n][0].max()) for n in drawn] + [1e-3])
    reason = "KL = inf at every knob value but SpS's"
    for axk, (label, group, out) in zip(axes, panels):
        axk.axhline(0.0, color="k", lw=1.0)
        for j, name in enumerate(group):
            kl, gap = points[name]
            axk.plot(
                kl,
                gap,
                ls="-",
                lw=0.8,
                marker=_MARKERS[j % len(_MARKERS)],
                ms=3.5,
                mfc="none",
                color=PALETTE[1 + j % (len(PALETTE) - 2)],
                label=name,
            )
        axk.set_xscale("symlog", linthresh=1e-3, linscale=0.5)
        axk.set_yscale("symlog", linthresh=1e-4, linscale=0.6)
        # a gap is an acceptance difference, in [0, 1]; the bottom margin keeps 0 off the frame
        axk.set(xlim=(0, 1.5 * right), ylim=(-3e-5, 1.0), ylabel=f"{label}:\ngap to frontier")
        note_y, note_va = 1.02, "top"
        if group:
            leg = axk.legend(
                loc="upper left",
                bbox_to_anchor=(1.01, 1.02),
                ncol=2 if len(group) > 4 else 1,
                handlelength=1.6,
                borderaxespad=0,
                columnspacing=0.8,
            )
            # the note of the rules not drawn starts below the legend, never across it
            fig.draw_without_rendering()
            note_y = leg.get_window_extent().transformed(axk.transAxes.inverted()).y0 - 0.03
        record_rules(
            axk,
            list(group) + list(out),
            {n: n for n in group},
            {n: reason for n in out},
            loc=(1.01, note_y),
            va=note_va,
            width=44,
        )
    axes[-1].set_xlabel(r"mean emitted $\mathrm{KL}(h_{\mathrm{alg}}\|q)$ (nats), the rule's own")
    return fig
