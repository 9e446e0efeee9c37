r"""Every rule's operating points against the optimal frontier, averaged over positions.

An operating point is (true :math:`\mathrm{KL}(h_{\mathrm{alg}}\|q)`, acceptance
:math:`\alpha = \sum_n p_n a_n`) of a rule at one knob value
(:func:`cactus_theory.analysis.frontier.operating_points`). Per position, the frontier
:math:`F_i(\epsilon)` (:func:`cactus_theory.solvers.frontier.frontier`; Mentored decoding
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
from .data import coerce_data, synthetic_data
from .style import DOUBLE_COLUMN, PALETTE, new_axes_row, styled

__all__ = ["pooled_frontier", "SPIKE_PANEL", "PEER_PANEL", "figure_frontier"]

#: Rules of the left panel: Cactus variants and Mentored decoding (the frontier's attainer).
SPIKE_PANEL = ("cactus-taylor", "cactus-exact-kl", "cactus-exact-chi2", "cactus-calibrated",
               "mentored-kl", "mentored-chi2")
#: Rules of the right panel: the peers (every other registered rule with a knob).
PEER_PANEL = ("tas", "topk", "interpolation", "cascade-chow", "cascade-diff", "cascade-opt",
              "cascade-token-v1", "cascade-token-v2", "cascade-token-v3", "fuzzy")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def pooled_frontier(target_probs, draft_probs, divergence="kl", *, n_budgets: int = 160,
                    n_multipliers: int = 240):
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
    from ..solvers.frontier import frontier, saturation_budget

    top = float(np.max(saturation_budget(target_probs, draft_probs, divergence)))
    top = max(top, 1e-6)
    grid = np.concatenate([[0.0], np.geomspace(top * 1e-5, top, n_budgets - 1)])
    F = frontier(target_probs, draft_probs, grid, divergence).acceptance     # (N, E)
    F = F.reshape(-1, grid.size)
    slopes = np.diff(F, axis=-1) / np.diff(grid)
    pos = slopes[slopes > 0]
    lam_hi = float(pos.max()) * 2 if pos.size else 1.0
    lam_lo = float(pos.min()) / 2 if pos.size else 1e-6
    lams = np.concatenate([np.geomspace(lam_hi, lam_lo, n_multipliers - 1), [0.0]])
    eps_bar, acc_bar = [], []
    for lam in lams:
        k = np.argmax(F - lam * grid, axis=-1)           # first maximiser: the least budget
        eps_bar.append(grid[k].mean())
        acc_bar.append(np.take_along_axis(F, k[:, None], -1).mean())
    eps_bar, acc_bar = np.asarray(eps_bar), np.asarray(acc_bar)
    order = np.argsort(eps_bar, kind="stable")
    return eps_bar[order], np.maximum.accumulate(acc_bar[order])


def _sweep_points(rule, data):
    knob, values = default_sweep(rule)
    op = operating_points(rule, data.target_probs, data.draft_probs, knob=knob, values=values,
                          divergences=("kl",), raw_target_probs=data.raw_target_probs,
                          raw_draft_probs=data.raw_draft_probs)
    kl = op.divergences["kl"].reshape(-1, len(op.values)).mean(axis=0)
    acc = op.acceptance.reshape(-1, len(op.values)).mean(axis=0)
    ok = np.isfinite(kl)
    return kl[ok], acc[ok]


@styled
def figure_frontier(target_probs=None, draft_probs=None, *, raw_target_probs=None,
                    raw_draft_probs=None, panels=(SPIKE_PANEL, PEER_PANEL), ax=None):
    r"""Mean acceptance against mean true emitted KL, every rule's knob sweep, and the frontier.

    Each rule sweeps its knob (:func:`cactus_theory.analysis.frontier.default_sweep`); a point
    is drawn where the mean KL over positions is finite (a rule that emits mass outside
    supp(q) at some position has infinite KL there and is not drawn at that knob value). SpS
    is the star at KL = 0. The black curve is the pooled frontier (:func:`pooled_frontier`).
    Every registered rule appears: those outside ``panels`` join the first panel, or, when
    they have no finite point besides SpS's, are listed in a note on it.

    Parameters
    ----------
    target_probs, draft_probs : array_like (N, V), a Dump or FigureData, optional
        The rows (default: noisy copy, V = 128, 64 positions, the paper's truncation; raw rows
        for the rules that decide on them).
    raw_target_probs, raw_draft_probs : array_like (N, V), optional
    panels : sequence of sequences of rule names
        One panel per group (default: Cactus and Mentored; the peers).
    ax : sequence of matplotlib.axes.Axes, optional
        One per panel.

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
    for group in panels:
        for name in group:
            if name not in RULES:
                raise ValueError(f"panels: unknown rule {name!r}")
    eps, G = pooled_frontier(data.target_probs, data.draft_probs, "kl")
    points = {name: _sweep_points(name, data) for group in panels for name in group}
    shown = {name for group in panels for name in group}
    # every other registered rule: listed in a note when it has no finite point besides SpS
    rest = {name: _sweep_points(name, data) for name in RULES if name not in shown and name != "sps"}
    never = [name for name, (kl, _) in rest.items() if not np.any(kl > 0)]
    extra = [name for name in rest if name not in never]
    right = max([eps[-1]] + [float(kl.max()) for kl, _ in points.values() if kl.size])
    eps, G = np.append(eps, 1.5 * right), np.append(G, G[-1])   # F is flat past saturation
    sps = float(np.minimum(data.target_probs, data.draft_probs).sum(-1).mean())
    groups = [list(g) for g in panels]
    groups[0] += extra
    rows = max((len(g) + 3) // 2 for g in groups)          # legend rows below the panels
    fig, axes = new_axes_row(ax, len(panels), DOUBLE_COLUMN, 2.2 + 0.17 * rows, sharey=True)
    points.update({name: rest[name] for name in extra})
    for axk, group in zip(axes, groups):
        axk.plot(eps, G, color="k", lw=1.6, label="optimal frontier")
        for j, name in enumerate(group):
            kl, acc = points[name]
            c = PALETTE[1 + j % (len(PALETTE) - 2)]
            mk = _MARKERS[j % len(_MARKERS)]
            label = name if kl.size else f"{name} (KL = $\\infty$)"
            axk.plot(kl, acc, ls="-", lw=0.8, marker=mk, ms=3.5, mfc="none", color=c, label=label)
        axk.plot([0], [sps], marker="*", ms=9, color=PALETTE[5], ls="none", label="SpS", zorder=5)
        axk.set(xlabel=r"mean emitted $\mathrm{KL}(h_{\mathrm{alg}}\|q)$ (nats)", xlim=(0, 1.5 * right))
        axk.set_xscale("symlog", linthresh=1e-3, linscale=0.5)
        axk.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, columnspacing=0.8,
                   handlelength=1.6, borderaxespad=0)
    axes[0].set(ylabel=r"mean acceptance $\alpha$")
    if never:
        axes[0].text(0.98, 0.03, "KL = $\\infty$ at every knob value but SpS's:\n" + _grouped(never),
                     transform=axes[0].transAxes, ha="right", va="bottom", fontsize=8)
    return fig


def _grouped(names) -> str:
    """``cactus-exact-{tv, js}``-style short list, one family per line."""
    fams = {}
    for n in names:
        head, tail = n, ""
        for prefix in ("cactus-exact-", "mentored-", "cascade-"):
            if n.startswith(prefix):
                head, tail = prefix[:-1], n[len(prefix):]
        fams.setdefault(head, []).append(tail)
    return "\n".join(f"{h}-{{{', '.join(t)}}}" if all(t) else h for h, t in fams.items())
