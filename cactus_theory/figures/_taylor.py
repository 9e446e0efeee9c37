r"""Taylor point against exact root: the gamma map, the overshoot and the acceptance gap.

Per draft, Cactus boosts the drafted token's probability to Corollary 5's Taylor point
:math:`\gamma_T = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})` or to Theorem 2's exact root
:math:`\gamma^*` of :math:`kl(\gamma\|q_n) = \delta`. The Taylor point can exceed the budget,
by at most :math:`kl(\gamma_T\|q_n) \le \log(1+2\delta)` (tight at :math:`q_n = 1/(1+2\delta)`),
and never does once :math:`\delta \ge \delta^\star = 1.2564`
(:mod:`cactus_theory.analysis.comparison`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` budget. Reference: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 2,
Corollaries 5 and 6.
"""

from __future__ import annotations

import numpy as np

from ..analysis.comparison import TAYLOR_WITHIN_BUDGET_FROM, taylor_kl_bound, taylor_vs_exact_grid
from ._data import coerce_data, real_data, synthetic_data
from ._style import PALETTE, SINGLE_COLUMN, new_axes, styled

__all__ = ["figure_gamma", "figure_taylor_overshoot", "figure_taylor_exact_acceptance"]


@styled
def figure_gamma(deltas=(0.05, 0.25, 1.0), q_values=None, *, divergence="kl", ax=None):
    r"""The boosted drafted-token probability against :math:`q_n`: Taylor vs exact.

    Plots :math:`\gamma_T(q_n, \delta)` (Corollary 5, dashed) and :math:`\gamma^*(q_n, \delta)`
    (Theorem 2, solid) for each delta, and SpS's :math:`\gamma = q_n` (thin black).

    Parameters
    ----------
    deltas : sequence of float
        Budgets, one colour each.
    q_values : array_like, optional
        Grid of :math:`q_n` (default 401 points on [0, 1]).
    divergence : str
        Budget divergence (default KL).
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    qs = np.linspace(0, 1, 401) if q_values is None else np.asarray(q_values, dtype=np.float64)
    g = taylor_vs_exact_grid(qs, deltas, divergence)
    fig, ax = new_axes(ax)
    for j, d in enumerate(g.deltas):
        c = PALETTE[1 + j % (len(PALETTE) - 1)]
        ax.plot(qs, g.gamma_exact[:, j], color=c, label=rf"$\delta={d:g}$")
        ax.plot(qs, g.gamma_taylor[:, j], color=c, ls="--")
    ax.plot(qs, qs, color="k", lw=0.8, label=r"SpS, $\gamma = q_n$")
    ax.plot([], [], color="k", label=r"exact $\gamma^*$")
    ax.plot([], [], color="k", ls="--", label=r"Taylor $\gamma_T$")
    ax.set(
        xlabel=r"verifier probability of the draft $q_n$",
        ylabel=r"boosted target $\gamma_n$",
        xlim=(0, 1),
        ylim=(0, 1.02),
    )
    ax.legend(loc="lower right", ncol=2, handlelength=1.5, labelspacing=0.25, columnspacing=0.8)
    return fig


@styled
def figure_taylor_overshoot(deltas=None, q_values=None, *, ax=None):
    r"""Worst per-draft KL of the Taylor point over :math:`q_n`, relative to :math:`\delta`.

    .. math:: \max_{q_n} kl(\gamma_T\|q_n)/\delta \;\le\; \log(1+2\delta)/\delta,

    the bound tight (attained at :math:`q_n = 1/(1+2\delta)`); the overshoot ends at
    :math:`\delta^\star = 1.2564` (root of :math:`\log(1+2\delta) = \delta`), marked.

    Parameters
    ----------
    deltas : array_like, optional
        Budgets (default 60 log-spaced points on [1e-3, 10]).
    q_values : array_like, optional
        Grid of :math:`q_n` for the maximum (default 2001 points on [0, 1] and 2000 log-spaced
        towards 1, where the maximiser lies for small delta).
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    ds = np.geomspace(1e-3, 10, 60) if deltas is None else np.asarray(deltas, dtype=np.float64)
    if q_values is None:  # uniform, plus dense near 1 where the maximiser 1/(1+2 delta) lies
        qs = np.union1d(np.linspace(0, 1, 2001), 1 - np.geomspace(1e-7, 0.5, 2000))
    else:
        qs = np.asarray(q_values, dtype=np.float64)
    g = taylor_vs_exact_grid(qs, ds, "kl")
    fig, ax = new_axes(ax)
    ax.semilogx(ds, taylor_kl_bound(ds) / ds, "-", color=PALETTE[2], label=r"bound $\log(1+2\delta)/\delta$")
    ax.semilogx(
        ds,
        g.budget_ratio.max(axis=0),
        "o",
        color=PALETTE[1],
        ms=3,
        mfc="none",
        label=r"$\max_{q_n}\,\mathrm{KL}(h_T^{(n)}\|q)/\delta$",
    )
    ax.axhline(1, color="k", lw=0.8)
    ax.axvline(
        TAYLOR_WITHIN_BUDGET_FROM,
        color=PALETTE[3],
        ls=":",
        lw=1.2,
        label=rf"$\delta^\star = {TAYLOR_WITHIN_BUDGET_FROM:.4f}$",
    )
    ax.set(xlabel=r"per-draft budget $\delta$", ylabel=r"per-draft KL $/\ \delta$")
    ax.legend(loc="lower left")
    return fig


def _acceptance_curves(data, deltas):
    from ..analysis.calibration import emitted_divergence_curve

    out = {}
    for base in ("taylor", "exact"):
        _, a = emitted_divergence_curve(data.target_probs, data.draft_probs, deltas, base=base)
        out[base] = a
    return out


@styled
def figure_taylor_exact_acceptance(datasets=None, deltas=None, *, ax=None):
    r"""Where Taylor and exact Cactus differ in acceptance: mean :math:`\alpha_{exact} - \alpha_T`.

    For each data set, the mean over positions of the exact rule's acceptance minus the Taylor
    rule's (:math:`\alpha = \sum_n p_n \min(1, \gamma_n/p_n)`), with the 10-90 % band over
    positions, against delta.

    Parameters
    ----------
    datasets : dict of str to data, optional
        Label to (q, p) data (a Dump, a :class:`~cactus_theory.figures._data.FigureData` or a
        ``(target_probs, draft_probs)`` tuple). Default: synthetic noisy copy (truncated) and
        the shipped distilled SmolLM2 pair.
    deltas : array_like, optional
        Budgets (default 25 log-spaced points on [1e-3, 5]).
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    ds = np.geomspace(1e-3, 5, 25) if deltas is None else np.asarray(deltas, dtype=np.float64)
    if datasets is None:
        datasets = {
            "synthetic (noisy copy)": synthetic_data(),
            "real (SmolLM2, distilled drafter)": real_data(),
        }
    fig, ax = new_axes(ax, SINGLE_COLUMN)
    for k, (label, raw) in enumerate(datasets.items()):
        data = coerce_data(raw)
        a = _acceptance_curves(data, ds)
        diff = a["exact"] - a["taylor"]
        c = PALETTE[1 + k % (len(PALETTE) - 1)]
        ax.semilogx(ds, diff.mean(axis=0), color=c, label=label)
        lo, hi = np.quantile(diff, [0.1, 0.9], axis=0)
        ax.fill_between(ds, lo, hi, color=c, alpha=0.15, lw=0)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(
        xlabel=r"per-draft budget $\delta$", ylabel=r"$\alpha_{\mathrm{exact}} - \alpha_{\mathrm{Taylor}}$"
    )
    ax.legend(loc="upper left")
    return fig
