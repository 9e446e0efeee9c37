r"""What is emitted: per-draft against emitted divergence, and the worked example as bars.

The per-draft budget bounds each target :math:`h^{(n)}`: :math:`D(h^{(n)}\|q) \le \delta`
(exact rule). What is emitted is Theorem 3's mixture

.. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n)\, r^{(n)}_j,

and every draft spends its budget on a different token, so :math:`\Gamma(\delta) =
D(h_{\mathrm{alg}}\|q)` is not bounded by :math:`\delta` (it is several times delta on truncated rows).
These figures draw both, per position, from the exact machinery
(:func:`cactus_theory.analysis.calibration.emitted_divergence_curve`,
:func:`cactus_theory.analysis.one_step.per_draft_divergence`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` budget, :math:`a_n` acceptance, :math:`r^{(n)}` recovery. Reference: Hao &
Mou, ICLR 2026 (arXiv 2604.04987), Theorems 2 and 3, Corollary 5.
"""

from __future__ import annotations

import numpy as np

from ..analysis.calibration import emitted_divergence_curve
from ..analysis.one_step import emitted_distribution, make_plan, per_draft_divergence
from ..rules import get_rule
from ._data import coerce_data, synthetic_data
from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, SINGLE_COLUMN, new_axes, new_axes_row, styled

__all__ = ["per_draft_and_emitted", "figure_per_draft_vs_emitted", "figure_worked_example", "WORKED_EXAMPLE"]

#: Display names of the two Cactus rules.
_RULE_LABELS = {"taylor": "Cactus-Taylor (Cor. 5)", "exact": r"Cactus-exact KL (Thm. 2)"}
#: The worked example of the bars: each draft's target is within delta = 0.1 of q (exact rule),
#: yet the drafter puts its mass on tokens 0 and 2, both boosted, and KL(h_alg||q) = 0.43.
WORKED_EXAMPLE = dict(target_probs=(0.30, 0.45, 0.25), draft_probs=(0.50, 0.02, 0.48), delta=0.1)


def per_draft_and_emitted(target_probs, draft_probs, deltas, base="taylor"):
    r"""Per position and delta: :math:`E_{n\sim p} kl(h^{(n)}\|q)` and :math:`kl(h_{\mathrm{alg}}\|q)`.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
    deltas : array_like, shape (G,)
    base : {"taylor", "exact"}
        Cactus-Taylor (Corollary 5) or Cactus-exact-KL (Theorem 2).

    Returns
    -------
    per_draft, emitted : ndarray, shape (N, G)
    """
    deltas = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    name = "cactus-taylor" if base == "taylor" else "cactus-exact-kl"
    per = []
    for d in deltas:
        plan = make_plan(get_rule(name, delta=float(d)), target_probs, draft_probs)
        pd = per_draft_divergence(plan, divergence="kl")
        w = plan.draft_probs
        per.append(np.sum(np.where(w > 0, w * np.where(w > 0, pd, 0.0), 0.0), axis=-1))
    emitted, _ = emitted_divergence_curve(target_probs, draft_probs, deltas, base=base)
    return np.stack(per, axis=-1).reshape(emitted.shape), emitted


@styled
def figure_per_draft_vs_emitted(target_probs=None, draft_probs=None, *, deltas=None, ax=None):
    r"""Per-draft against emitted KL as delta grows, a band over positions; one panel per rule.

    In each panel: the budget :math:`\delta` (thin black), the per-draft expectation
    :math:`E_{n\sim p}\,\mathrm{KL}(h^{(n)}\|q)` (median over positions, dashed) and the
    emitted :math:`\mathrm{KL}(h_{\mathrm{alg}}\|q)`: median (solid), median to 90th percentile
    (band) and maximum (dotted) over positions. Positions where q has a single token are left
    out (every rule emits q there; the y label says how many remain). The y axis is
    logarithmic above 1e-3 and linear below (Cactus emits q exactly wherever no token has
    :math:`p_n > q_n > 0`).

    Parameters
    ----------
    target_probs, draft_probs : array_like (N, V), a Dump or FigureData, optional
        The rows (default: noisy copy, V = 64, 200 positions, the paper's truncation).
    deltas : array_like, optional
        Budgets (default 16 log-spaced points on [0.01, 3]).
    ax : pair of matplotlib.axes.Axes, optional
        Taylor and exact panels.

    Returns
    -------
    matplotlib.figure.Figure
    """
    data = (
        synthetic_data()
        if target_probs is None
        else coerce_data((target_probs, draft_probs) if draft_probs is not None else target_probs)
    )
    ds = np.geomspace(0.01, 3, 16) if deltas is None else np.asarray(deltas, dtype=np.float64)
    q, p = data.target_probs, data.draft_probs
    # where q has one token every rule emits q exactly (KL 0): such positions (many in real,
    # truncated rows) would only pull the quantiles to 0
    live = np.count_nonzero(q > 0, axis=-1) > 1
    if not live.any():
        raise ValueError("target_probs: every row has a single token; every rule emits q there")
    q, p = q[live], p[live]
    where = "" if live.all() else f", {int(live.sum())} of {live.size} positions"
    fig, axes = new_axes_row(ax, 2, DOUBLE_COLUMN, 2.9, sharey=True)
    for base, axk in zip(("taylor", "exact"), axes):
        per, em = per_draft_and_emitted(q, p, ds, base)
        c = PALETTE[1]
        axk.loglog(ds, ds, color="k", lw=0.8, label=r"$\delta$")
        axk.loglog(
            ds,
            np.median(per, axis=0),
            color=PALETTE[2],
            ls="--",
            label=r"per draft $E_{n\sim p}\,\mathrm{KL}(h^{(n)}\|q)$, median",
        )
        med, p90 = np.median(em, axis=0), np.quantile(em, 0.9, axis=0)
        axk.loglog(ds, med, color=c, label=r"emitted $\mathrm{KL}(h_{\mathrm{alg}}\|q)$, median")
        axk.fill_between(ds, med, p90, color=c, alpha=0.2, lw=0, label="median to 90th percentile")
        axk.loglog(ds, em.max(axis=0), color=c, ls=":", label="maximum over positions")
        axk.set(xlabel=r"per-draft budget $\delta$, " + _RULE_LABELS[base])
        # symlog: positions where Cactus changes nothing (every p_n > q_n has q_n = 0) emit q
        axk.set_yscale("symlog", linthresh=1e-3, linscale=0.4)
    axes[0].set(ylabel=f"KL (nats{where})")
    if ax is None:  # our own figure (constrained layout): the legend below both panels
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=3, columnspacing=1.0)
    else:
        axes[1].legend(loc="lower right")
    return fig


@styled
def figure_worked_example(
    target_probs=None, draft_probs=None, *, delta=None, drafts=None, rule="cactus-exact-kl", ax=None
):
    r"""The worked example as bars: q, p, the per-draft targets of two drafts, and :math:`h_{alg}`.

    Each per-draft target :math:`h^{(n)}` puts :math:`\gamma_n` on the draft and rescales q
    elsewhere; what is emitted is the mixture :math:`h_{alg}` (Theorem 3), whose divergence
    from q is printed in the legend with the per-draft ones.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,), optional
        Default: q = (.30, .45, .25), p = (.50, .02, .48) (:data:`WORKED_EXAMPLE`).
    delta : float, optional
        Budget (default 0.1).
    drafts : pair of int, optional
        The two drafts whose targets are drawn (default: the two most probable under p).
    rule : str
        A Cactus rule (spike structure), default ``cactus-exact-kl`` (each target exactly on
        budget); ``cactus-taylor`` for Corollary 5's point.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    from ..divergences import get_divergence
    from ..rules import SpikePlan

    q = np.asarray(WORKED_EXAMPLE["target_probs"] if target_probs is None else target_probs, dtype=np.float64)
    p = np.asarray(WORKED_EXAMPLE["draft_probs"] if draft_probs is None else draft_probs, dtype=np.float64)
    delta = WORKED_EXAMPLE["delta"] if delta is None else delta
    plan = make_plan(get_rule(rule, delta=delta), q, p)
    if not isinstance(plan, SpikePlan):
        raise ValueError(f"rule: {rule!r} has no per-draft spike target; use a Cactus rule")
    q, p = plan.target_probs, plan.draft_probs
    if drafts is None:
        drafts = tuple(int(i) for i in np.argsort(-p, kind="stable")[:2])
    kl = get_divergence("kl")
    V = q.shape[-1]
    for n in drafts:
        if not 0 <= int(n) < V:
            raise ValueError(f"drafts: token {n} outside the vocabulary of {V}")
    h_alg = emitted_distribution(plan)
    series = [("$q$ (verifier)", q, PALETTE[0], None), ("$p$ (drafter)", p, PALETTE[6], None)]
    for k, n in enumerate(drafts):
        h = np.asarray(plan.target_at(np.array(int(n))))
        series.append((rf"$h^{{({n})}}$: KL {float(kl.unchecked(h, q)):.3f}", h, PALETTE[1 + k], "//"))
    series.append(
        (rf"$h_{{\mathrm{{alg}}}}$: KL {float(kl.unchecked(h_alg, q)):.3f}", h_alg, PALETTE[3], None)
    )
    fig, ax = new_axes(ax, SINGLE_COLUMN)
    width = 0.8 / len(series)
    x = np.arange(V)
    for k, (label, vals, color, hatch) in enumerate(series):
        ax.bar(
            x + (k - (len(series) - 1) / 2) * width,
            vals,
            width,
            color=color,
            label=label,
            hatch=hatch,
            edgecolor="white" if hatch else None,
            linewidth=0,
        )
    ax.set_xticks(x, [f"{i}" for i in x])
    ax.set(xlabel=rf"token $j$ ({rule}, $\delta$ = {delta:g})", ylabel="probability", ylim=(0, 1))
    ax.grid(axis="x", visible=False)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, columnspacing=0.8, handlelength=1.2)
    record_rules(ax, [rule], {rule: rule})
    return fig
