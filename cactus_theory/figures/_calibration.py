r"""The delta needed for a target divergence of what is emitted.

Cactus's delta bounds each per-draft target, not the emitted :math:`h_{alg}`; to emit within
:math:`\epsilon` of q, delta must be calibrated
(:mod:`cactus_theory.analysis.calibration`): per position (the first crossing of
:math:`\Gamma(\delta) = \mathrm{KL}(h_{alg}(\delta)\|q) = \epsilon`, :func:`cactus_theory.api.calibrate_delta`)
or once for a corpus (:func:`global_delta`: the mean, or a quantile, over positions meets
:math:`\epsilon`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`\delta` per-draft
budget, :math:`\epsilon` budget on the emitted distribution. Reference: Hao & Mou, ICLR 2026
(arXiv 2604.04987), Theorem 3 and Corollary 5.
"""

from __future__ import annotations

import numpy as np

from ..analysis.calibration import _calibrate_rows, global_delta
from ._data import coerce_data, synthetic_data
from ._style import PALETTE, SINGLE_COLUMN, legend_above, new_axes, styled

__all__ = ["figure_calibration"]


@styled
def figure_calibration(target_probs=None, draft_probs=None, *, eps_values=None, base="taylor", ax=None):
    r"""Delta that meets a target emitted KL :math:`\epsilon`, against :math:`\epsilon`.

    Per position: median (solid) and 10-90 % band of the calibrated delta over the positions
    where some delta exceeds :math:`\epsilon` (a saturated position meets it at every delta
    and needs none; at least one position per target must not be saturated); one global delta
    whose mean emitted KL is :math:`\epsilon` (dashed) and whose 90th percentile is
    (dash-dot); the naive :math:`\delta = \epsilon` (thin black).

    Parameters
    ----------
    target_probs, draft_probs : array_like (N, V), a Dump or FigureData, optional
        The rows (default: noisy copy, V = 64, 200 positions, the paper's truncation).
    eps_values : array_like, optional
        Targets (default 8 log-spaced points on [0.01, 0.5]).
    base : {"taylor", "exact"}
        Cactus-Taylor (the paper's rule) or Cactus-exact-KL.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    if target_probs is None:
        data = synthetic_data()
    else:
        data = coerce_data(target_probs if draft_probs is None else (target_probs, draft_probs))
    eps = np.geomspace(0.01, 0.5, 8) if eps_values is None else np.asarray(eps_values, dtype=np.float64)
    q, p = data.target_probs, data.draft_probs
    cal = [_calibrate_rows(q, p, float(e), base=base) for e in eps]
    # a saturated position stays within eps at every delta: no delta is "needed" there
    per = np.stack([np.where(c.saturated, np.nan, c.delta) for c in cal], axis=-1)
    glob_mean = [global_delta(q, p, float(e), base=base).delta for e in eps]
    glob_p90 = [global_delta(q, p, float(e), statistic=0.9, base=base).delta for e in eps]
    own = ax is None
    fig, ax = new_axes(ax, SINGLE_COLUMN)
    ax.loglog(eps, eps, color="k", lw=0.8, label=r"$\delta = \epsilon$")
    lo, med, hi = np.nanquantile(per, [0.1, 0.5, 0.9], axis=0)
    ax.loglog(eps, med, color=PALETTE[1], marker="o", mfc="none", label="median per position")
    ax.fill_between(eps, lo, hi, color=PALETTE[1], alpha=0.2, lw=0, label="10-90 % per position")
    ax.loglog(eps, glob_mean, color=PALETTE[2], ls="--", label="one $\\delta$, mean $= \\epsilon$")
    ax.loglog(eps, glob_p90, color=PALETTE[3], ls="-.", label="one $\\delta$, 90 % $\\leq \\epsilon$")
    ax.set(
        xlabel=r"target emitted $\mathrm{KL}(h_{\mathrm{alg}}\|q) = \epsilon$",
        ylabel=r"per-draft budget $\delta$ needed",
    )
    # above the axes: the curves span the panel's corners on real data
    legend_above(fig, ax, own, ncol=2, columnspacing=0.8, handlelength=1.4)
    from matplotlib.ticker import NullFormatter

    for axis in (ax.xaxis, ax.yaxis):  # a narrow log range labels its minor ticks, and they collide
        axis.set_minor_formatter(NullFormatter())
    return fig
