r"""Calibrating Cactus's delta to a budget on what is actually emitted.

Cactus bounds the divergence of each per-draft target :math:`h^{(n)}` by :math:`\delta`, but
the token it emits follows the mixture :math:`h_{alg}` (Theorem 3), whose divergence
:math:`\Gamma_{q,p}(\delta) = D(h_{alg}(\delta)\|q)` depends on (q, p), not on delta alone, and
has no closed form. This module computes it exactly (the exact O(V log V) emitted
distribution at each delta), its distribution over a corpus of positions, and the inverse:

* per position, the delta that meets a target emitted divergence :math:`\epsilon`
  (:func:`calibrate_delta`; the ``cactus-calibrated`` rule, :class:`CalibratedCactus`,
  registered by this module, applies it);
* one global delta for a corpus (:func:`global_delta`: the mean, or a quantile, of the
  emitted divergence over positions meets :math:`\epsilon`);
* both compared with Mentored decoding at the same :math:`\epsilon`
  (:func:`compare_with_mentored`), which emits a distribution within :math:`\epsilon` with
  the best possible acceptance.

The inverse is the **first crossing**: the largest :math:`\delta` such that
:math:`\Gamma(\delta') \le \epsilon` for every :math:`\delta' \le \delta` on a geometric
grid, refined by bisection. :math:`\Gamma` need not be monotone in :math:`\delta`
(:func:`emitted_divergence_curve` shows it), so a crossing narrower than the grid spacing
can be missed; the achieved divergence is always recomputed and returned.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` Cactus's per-draft budget, :math:`\epsilon` the budget on the emitted
distribution, :math:`h_{alg}` the emitted distribution.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3 (the paper's
:math:`\Gamma(\delta)`), Corollary 5; Tran-Thien (2023) for Mentored decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace, to_device
from array_api_compat import device as array_device

from .._validation import (
    _is_torch,
    as_budget,
    as_budget_array,
    as_nonempty_values,
    as_prob_pair,
    as_probs,
    as_probs_or_tensor,
    choice,
)
from ..divergences import DIVERGENCES, get_divergence
from ..rules.cactus import SMOOTH_DIVERGENCES
from ..rules.plans import SpikePlan
from ..rules.registry import Knob, Rule, RuleSpec, register
from ..solvers import spike as _spike
from ..solvers.mentored import solve_mentored
from ..solvers.spike import exact_spike, taylor_spike
from .one_step import emitted_distribution

__all__ = [
    "BASES",
    "spike_for",
    "emitted_divergence_curve",
    "saturation_delta",
    "calibrate_delta",
    "CalibrationResult",
    "corpus_divergence_distribution",
    "global_delta",
    "GlobalDelta",
    "compare_with_mentored",
    "MentoredComparison",
    "CalibratedCactus",
    "KnobCalibration",
    "calibrate_knob",
]

#: How gamma is computed from delta: Corollary 5 (the paper's rule) or Theorem 2's root.
BASES = ("taylor", "exact")

#: Grid points of the first-crossing scan and bisection steps of its refinement.
GRID_POINTS = 24
REFINE_STEPS = 60
#: Lower end of the geometric delta grid (below it, gamma - q_n < 1e-4 q_n-ish: no crossing
#: of a practical eps is missed there).
DELTA_MIN = 1e-8
#: Rows x grid points x V processed at once in the grid scan (memory bound).
CHUNK_ELEMENTS = 4_000_000
#: Upper end of the scan when the base never saturates (exact rules with a finite cost off
#: supp(q)); such a row that stays within eps up to it is reported saturated at DELTA_CAP.
DELTA_CAP = 1e4


def spike_for(target_probs, delta, base="taylor", divergence="kl"):
    r"""Cactus's :math:`\gamma_n` for every candidate n at budget(s) ``delta`` (array-agnostic).

    ``base="taylor"``: Corollary 5, :math:`\min(1, q_n + \sqrt{2\delta q_n(1-q_n)/f''(1)})`
    (KL's expansion unless ``divergence`` is another smooth divergence); ``"exact"``:
    Theorem 2's root of the two-point ``divergence`` = delta.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    _check(base, divergence)
    target_probs = as_probs_or_tensor(target_probs, "target_probs")  # numpy validated; torch as given
    if base == "taylor":
        d = divergence if get_divergence(divergence).name in SMOOTH_DIVERGENCES else "kl"
        return taylor_spike(target_probs, delta, d)
    return exact_spike(target_probs, delta, divergence)


def _check(base, divergence):
    choice(base, BASES, "base")
    return get_divergence(divergence)


def emitted_divergence_curve(
    target_probs, draft_probs, deltas, *, base="taylor", divergence="kl", measure=None
):
    r""":math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)` exactly at each delta.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p.
    deltas : array_like, shape (G,)
        Cactus budgets >= 0.
    base : {"taylor", "exact"}
        How gamma follows from delta (:func:`spike_for`).
    divergence : str
        The per-draft divergence of the rule (Taylor: its expansion; exact: its two-point form).
    measure : str, optional
        The divergence of the emitted distribution reported (default: ``divergence``).

    Returns
    -------
    divergences : ndarray, shape (..., G)
        :math:`D(h_{alg}\|q)`; ``+inf`` where infinite, never NaN.
    acceptance : ndarray, shape (..., G)
        :math:`\sum_n p_n \min(1, \gamma_n/p_n)`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    g = np.atleast_1d(as_budget_array(deltas, "deltas"))
    as_nonempty_values(g, "deltas")  # an empty list of budgets is an error, not an empty curve
    if g.ndim != 1:
        raise ValueError(f"deltas: expected a 1-D array, got shape {g.shape}")
    return _curve(q, p, g, base, d.name, m)


def _curve(q, p, g, base, div, m):
    """Vectorised over rows and grid: returns (D [..., G], acceptance [..., G])."""
    qb = np.broadcast_to(q[..., None, :], q.shape[:-1] + (g.size, q.shape[-1]))
    pb = np.broadcast_to(p[..., None, :], qb.shape)
    delta = np.broadcast_to(g[:, None], qb.shape[:-1] + (1,))
    gamma = spike_for(qb, delta, base, div)
    plan = SpikePlan(qb, pb, gamma)
    h = emitted_distribution(plan)
    a = np.sum(pb * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    return m.unchecked(h, qb), a


def _curve_grid(q, p, grids, base, div, m):
    """Rows (n, V) with a grid per row (n, G): D(h_alg || q), shape (n, G)."""
    qb = np.broadcast_to(q[:, None, :], (q.shape[0], grids.shape[1], q.shape[1]))
    pb = np.broadcast_to(p[:, None, :], qb.shape)
    gamma = spike_for(qb, grids[..., None], base, div)
    return m.unchecked(emitted_distribution(SpikePlan(qb, pb, gamma)), qb)


def _curve_rows(q, p, delta_rows, base, div, m):
    """Per-row delta (shape batch): (D [...], acceptance [...], emitted [..., V])."""
    gamma = spike_for(q, delta_rows[..., None], base, div)
    plan = SpikePlan(q, p, gamma)
    h = emitted_distribution(plan)
    a = np.sum(p * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    return m.unchecked(h, q), a, h


def saturation_delta(target_probs, base="taylor", divergence="kl") -> np.ndarray:
    r"""The least delta at which every :math:`\gamma_n` with :math:`0 < q_n < 1` reaches 1.

    Taylor: :math:`\max_n f''(1)(1-q_n)/(2q_n)`; exact: :math:`\max_n` of the two-point
    divergence at :math:`\gamma = 1`. Beyond it the rule (and :math:`\Gamma`) no longer
    changes. ``+inf`` where it never saturates (exact rules whose two-point divergence at
    1 is infinite, e.g. reverse KL). Shape: the batch shape of q.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q = as_probs(target_probs, "target_probs")
    d = _check(base, divergence)
    return _saturation(q, base, d)


def _saturation(q, base, d):
    """:func:`saturation_delta` on validated rows (array-agnostic; ``d`` resolved)."""
    xp = array_namespace(q)
    mid = (q > 0) & (q < 1)
    zero, one = xp.zeros_like(q), xp.ones_like(q)
    if base == "taylor":
        name = d.name if d.name in SMOOTH_DIVERGENCES else "kl"
        f2 = get_divergence(name).f_second_at_one
        with np.errstate(over="ignore"):  # a subnormal q_n: beyond the float range -> inf
            val = xp.where(mid, f2 * (1 - q) / (2 * xp.where(mid, q, one)), zero)
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            val = xp.where(mid, d.two_point(one, q), zero)
            # tokens with q_n = 0 whose gamma can grow (finite cost off supp): never saturate
            if d.finite_off_support:
                zero_t = d.two_point(one, zero)
                val = xp.where(q == 0, zero_t, val)  # inf: gamma -> 1 only as delta -> inf
    return xp.max(val, axis=-1)


@dataclass(frozen=True)
class CalibrationResult:
    r"""Per-position calibration of delta.

    Attributes
    ----------
    delta : ndarray, shape batch
        The calibrated delta (first crossing of :math:`\Gamma = \epsilon`; the saturation
        delta where :math:`\Gamma` never exceeds :math:`\epsilon`, or :data:`DELTA_CAP` for a
        base that never saturates).
    divergence : ndarray, shape batch
        :math:`\Gamma(\delta)` achieved (<= eps).
    acceptance : ndarray, shape batch
        Cactus's acceptance at that delta.
    saturated : ndarray of bool, shape batch
        True where no delta up to the saturation delta makes :math:`\Gamma` exceed
        :math:`\epsilon`; where the saturation delta is infinite (a base that never
        saturates, or one beyond the float range for a subnormal q_n) the scan stops at
        :data:`DELTA_CAP`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    delta: np.ndarray
    divergence: np.ndarray
    acceptance: np.ndarray
    saturated: np.ndarray


def _illinois(excess, lo, hi, steps=REFINE_STEPS, tol=1e-15):
    """Refine brackets excess(lo) <= 0 < excess(hi) (vectorised) by the Illinois variant of
    regula falsi, with a bisection step wherever the secant is unusable (an infinite end);
    returns (lo, hi) with the feasible end lo. Each bracket stops once it is within ~1e-13
    or its feasible end is within ``tol`` of the target, ``excess(lo) >= -tol`` (lane by
    lane: a row's result does not depend on the other rows refined with it)."""
    xp = array_namespace(lo)
    host = isinstance(lo, np.ndarray)
    f_lo = excess(lo)
    f_hi = excess(hi)
    side = xp.zeros_like(lo)  # +1: lo moved last, -1: hi moved last
    for _ in range(steps):
        width = hi - lo
        run = ~((width <= 1e-13 * xp.abs(hi)) | (f_lo >= -tol))
        if host and not np.any(run):  # (a device runs every step: no host read)
            break
        ok = xp.isfinite(f_hi) & xp.isfinite(f_lo) & (f_hi > f_lo)
        den = xp.where(ok, f_hi - f_lo, xp.ones_like(lo))
        x = xp.where(ok, lo - f_lo * (width / den), 0.5 * (lo + hi))
        # keep strictly inside the bracket (a secant at an end makes no progress)
        x = xp.minimum(xp.maximum(x, lo + 1e-3 * width), hi - 1e-3 * width)
        x = xp.where(width > 0, x, lo)
        fx = excess(x)
        up, down = run & (fx <= 0), run & ~(fx <= 0)  # converged lanes stay as they are
        lo, f_lo = xp.where(up, x, lo), xp.where(up, fx, f_lo)
        hi, f_hi = xp.where(down, x, hi), xp.where(down, fx, f_hi)
        # Illinois: halve the stale end's value when the same end moved twice in a row
        f_hi = xp.where(up & (side == 1), 0.5 * f_hi, f_hi)
        f_lo = xp.where(down & (side == -1), 0.5 * f_lo, f_lo)
        side = xp.where(up, xp.ones_like(lo), xp.where(down, -xp.ones_like(lo), side))
    return lo, hi


def _grids(tops):
    """Per row, 0 and a geometric grid of ``GRID_POINTS - 1`` deltas from ``DELTA_MIN`` up to
    the row's top (``DELTA_CAP`` where infinite, at least ``10 DELTA_MIN``), shape (n, G);
    one vectorized ``geomspace`` (the same floats as a call per row)."""
    top = np.maximum(np.where(np.isfinite(tops), tops, DELTA_CAP), DELTA_MIN * 10)
    return np.concatenate(
        [np.zeros((top.shape[0], 1)), np.geomspace(DELTA_MIN, top, GRID_POINTS - 1, axis=-1)], axis=-1
    )


def calibrate_delta(
    target_probs, draft_probs, eps, *, base="taylor", divergence="kl", measure=None
) -> CalibrationResult:
    r"""Per position, the delta whose emitted divergence :math:`\Gamma(\delta)` meets eps.

    .. math:: \delta^*(q, p) = \sup\{\delta : D(h_{alg}(\delta')\|q) \le \epsilon
              \ \ \forall \delta' \le \delta\}

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p.
    eps : float
        Target budget on the emitted distribution, >= 0.
    base, divergence, measure
        As in :func:`emitted_divergence_curve`.

    Returns
    -------
    CalibrationResult

    Notes
    -----
    A geometric grid of :data:`GRID_POINTS` deltas up to the saturation delta is scanned
    for the first grid point above eps, then the bracket is refined by at most
    :data:`REFINE_STEPS` Illinois (regula falsi) steps, keeping the feasible end.
    eps = 0 gives delta = 0 (SpS) exactly.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    eps = as_budget(eps, "eps")
    batch = q.shape[:-1]
    qf, pf = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    sat = np.broadcast_to(saturation_delta(qf, base, d.name), (qf.shape[0],))
    lo = np.zeros(qf.shape[0])
    hi = np.zeros(qf.shape[0])
    saturated = np.zeros(qf.shape[0], dtype=bool)
    N, V = qf.shape
    chunk = max(1, int(CHUNK_ELEMENTS // (GRID_POINTS * V)))
    for start in range(0, N if eps > 0 else 0, chunk):
        sl = slice(start, min(N, start + chunk))
        grids = _grids(sat[sl])  # (n, G)
        D = _curve_grid(qf[sl], pf[sl], grids, base, d.name, m)  # (n, G)
        over = D > eps
        anyover = over.any(axis=-1)
        k = np.argmax(over, axis=-1)
        rows = np.arange(grids.shape[0])
        lo_c = np.where(k > 0, grids[rows, np.maximum(k - 1, 0)], 0.0)
        hi_c = grids[rows, k]
        # no crossing up to the saturation delta (or, if it never saturates, up to DELTA_CAP)
        sat_val = np.where(np.isfinite(sat[sl]), sat[sl], DELTA_CAP)
        saturated[sl] = ~anyover
        lo[sl] = np.where(anyover, lo_c, sat_val)
        hi[sl] = np.where(anyover, hi_c, sat_val)
    active = ~saturated & (hi > lo)
    if np.any(active):
        idx = np.flatnonzero(active)

        def excess(x):
            return _curve_rows(qf[idx], pf[idx], x, base, d.name, m)[0] - eps

        lo[idx], hi[idx] = _illinois(excess, lo[idx], hi[idx])
    delta_eval = np.where(np.isfinite(lo), lo, DELTA_CAP)
    D, a, _ = _curve_rows(qf, pf, delta_eval, base, d.name, m)
    return CalibrationResult(lo.reshape(batch), D.reshape(batch), a.reshape(batch), saturated.reshape(batch))


def corpus_divergence_distribution(
    target_probs,
    draft_probs,
    deltas,
    *,
    base="taylor",
    divergence="kl",
    measure=None,
    quantiles=(0.1, 0.5, 0.9, 0.99),
):
    r"""Over a corpus of positions, the distribution of :math:`\Gamma(\delta)` at each delta.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
        One (q, p) pair per position (synthetic, or real model distributions).
    deltas : array_like, shape (G,)
        Budgets.
    quantiles : sequence of float
        Quantile levels reported.

    Returns
    -------
    dict
        ``"deltas"`` (G,), ``"divergences"`` (N, G) exact values, ``"mean"`` (G,),
        ``"quantiles"`` (len(quantiles), G), ``"max"`` (G,), ``"acceptance_mean"`` (G,).
        Infinite values propagate to the mean and the upper quantiles (never NaN).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    D, a = emitted_divergence_curve(
        target_probs, draft_probs, deltas, base=base, divergence=divergence, measure=measure
    )
    D = D.reshape(-1, D.shape[-1])
    a = a.reshape(-1, a.shape[-1])
    qs = np.array([np.quantile(D, lv, axis=0, method="higher") for lv in quantiles])
    return {
        "deltas": np.atleast_1d(np.asarray(deltas, dtype=np.float64)),
        "divergences": D,
        "mean": D.mean(axis=0),
        "quantiles": qs,
        "quantile_levels": tuple(quantiles),
        "max": D.max(axis=0),
        "acceptance_mean": a.mean(axis=0),
    }


@dataclass(frozen=True)
class GlobalDelta:
    """One delta for a corpus.

    Attributes
    ----------
    delta : float
        First crossing of the corpus statistic of :math:`\\Gamma` with eps.
    statistic : str or float
        ``"mean"`` or a quantile level in (0, 1] (1 = the worst position).
    value : float
        The statistic at ``delta`` (<= eps).
    divergences : ndarray, shape (N,)
        :math:`\\Gamma` per position at ``delta``.
    acceptance : ndarray, shape (N,)
        Cactus's acceptance per position at ``delta``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    delta: float
    statistic: object
    value: float
    divergences: np.ndarray
    acceptance: np.ndarray


def _as_statistic(statistic):
    """``"mean"``, or a quantile level in (0, 1] as a float (ValueError naming ``statistic``)."""
    if statistic == "mean":
        return statistic
    try:
        lv = float(statistic)
    except (TypeError, ValueError):
        raise ValueError(f"statistic: 'mean' or a quantile level in (0, 1], got {statistic!r}") from None
    if not 0 < lv <= 1:
        raise ValueError(f"statistic: quantile level must lie in (0, 1], got {statistic!r}")
    return lv


def _stat(D, statistic):
    if statistic == "mean":
        return float(np.mean(D))
    return float(np.quantile(D, statistic, method="higher"))


def global_delta(
    target_probs, draft_probs, eps, *, statistic="mean", base="taylor", divergence="kl", measure=None
) -> GlobalDelta:
    r"""One delta for a corpus: the first crossing of ``statistic`` over positions of
    :math:`\Gamma(\delta)` with eps.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
        The corpus.
    eps : float
        Budget on the statistic of the emitted divergence.
    statistic : "mean" or float in (0, 1]
        Mean over positions, or a quantile (1.0: every position within eps).

    Returns
    -------
    GlobalDelta

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    eps = as_budget(eps, "eps")
    statistic = _as_statistic(statistic)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    sat = float(np.max(saturation_delta(q2, base, d.name)))
    if eps == 0:
        lo = 0.0
    else:
        grid = _grids(np.array([sat]))[0]
        D, _ = _curve(q2, p2, grid, base, d.name, m)  # (N, G)
        vals = np.array([_stat(D[:, j], statistic) for j in range(grid.size)])
        over = np.flatnonzero(vals > eps)
        if over.size == 0:
            lo = hi = grid[-1]
        else:
            k = over[0]
            lo, hi = (grid[k - 1] if k > 0 else 0.0), grid[k]
        if hi > lo:

            def excess(x):
                Dm, _, _ = _curve_rows(q2, p2, np.full(q2.shape[0], float(x[0])), base, d.name, m)
                return np.array([_stat(Dm, statistic) - eps])

            lo_a, _ = _illinois(excess, np.array([lo]), np.array([hi]))
            lo = float(lo_a[0])
    D, a, _ = _curve_rows(q2, p2, np.full(q2.shape[0], lo), base, d.name, m)
    return GlobalDelta(float(lo), statistic, _stat(D, statistic), D, a)


@dataclass(frozen=True)
class MentoredComparison:
    """Calibrated Cactus (per position and global) against Mentored decoding at the same eps.

    Attributes
    ----------
    eps : float
    per_position : CalibrationResult
    global_ : GlobalDelta
        One delta with mean divergence (``statistic``) <= eps.
    mentored_acceptance : ndarray, shape (N,)
        Mentored decoding's (optimal) acceptance with budget eps on its emitted distribution.
    summary : dict
        Mean acceptance of the three, mean emitted divergence, and the fraction of positions
        whose emitted divergence exceeds eps (global delta).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    eps: float
    per_position: CalibrationResult
    global_: GlobalDelta
    mentored_acceptance: np.ndarray
    summary: dict


def compare_with_mentored(
    target_probs, draft_probs, eps, *, base="taylor", divergence="kl", statistic="mean"
) -> MentoredComparison:
    r"""Per-position and global calibrated Cactus vs Mentored decoding, all at budget eps.

    Mentored decoding emits :math:`\pi` with :math:`D(\pi\|q) \le \epsilon` and the optimal
    acceptance (:mod:`cactus_theory.solvers.mentored`), so its acceptance bounds both
    calibrated Cactus variants position by position (the frontier).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    d = _check(base, divergence)
    per = calibrate_delta(q2, p2, eps, base=base, divergence=d.name)
    glob = global_delta(q2, p2, eps, statistic=statistic, base=base, divergence=d.name)
    ment = np.asarray(solve_mentored(q2, p2, float(eps), d, return_target=False).acceptance)
    summary = {
        "eps": float(eps),
        "divergence": d.name,
        "base": base,
        "acceptance_sps": float(np.minimum(p2, q2).sum(-1).mean()),
        "acceptance_per_position": float(per.acceptance.mean()),
        "acceptance_global": float(glob.acceptance.mean()),
        "acceptance_mentored": float(ment.mean()),
        "global_delta": glob.delta,
        "median_per_position_delta": float(np.median(per.delta)),
        "mean_divergence_per_position": float(per.divergence.mean()),
        "mean_divergence_global": float(glob.divergences.mean()),
        "fraction_over_eps_global": float(np.mean(glob.divergences > eps)),
    }
    return MentoredComparison(float(eps), per, glob, ment, summary)


#: Grid points of :func:`calibrate_knob`'s first-crossing scan (on the mapped knob u in [0, 1]).
KNOB_GRID_POINTS = 13
#: Relative tolerance of :func:`calibrate_knob`: a statistic within ``KNOB_RTOL * target``
#: below the target counts as meeting it (the refinement stops there).
KNOB_RTOL = 1e-3


@dataclass(frozen=True)
class KnobCalibration:
    r"""One knob set so that a corpus statistic meets a target (:func:`calibrate_knob`).

    Attributes
    ----------
    value : float or int
        The knob: the last point of the path from ``start`` with ``statistic <= target``
        (first crossing).
    achieved : float
        ``statistic(value)`` (<= target, except status ``"above"``).
    status : str
        ``"calibrated"``: within ``rtol * target`` of the target; ``"step"``: the statistic
        jumps over the target (a 0/1 rule, an integer knob, or a divergence that becomes
        infinite), ``value`` is the last knob below the jump and ``next_value``/``next_achieved``
        the first above it; ``"range-end"``: the whole published range stays below the target
        (``value`` is its far end); ``"above"``: even ``start`` exceeds the target.
    next_value, next_achieved : float or None
        The first knob past the crossing and its statistic (``"step"``; None otherwise).
    evaluations : int
        Calls of ``statistic``.
    """

    value: float
    achieved: float
    status: str
    next_value: float | None
    next_achieved: float | None
    evaluations: int


def _knob_map(start, end, scale):
    """u in [0, 1] -> knob on the path from ``start`` (u = 0) to ``end`` (u = 1): linear between
    finite ends, ``tan`` towards an infinite end (``scale`` sets where u = 1/2 lands)."""
    fs, fe = math.isfinite(start), math.isfinite(end)
    if fs and fe:
        return lambda u: start + u * (end - start)
    if fs:
        sign = 1.0 if end > start else -1.0
        return lambda u: start + sign * scale * math.tan(0.5 * math.pi * u)
    if fe:
        sign = 1.0 if start > end else -1.0
        return lambda u: end + sign * scale * math.tan(0.5 * math.pi * (1.0 - u))
    sign = 1.0 if end > start else -1.0
    return lambda u: sign * scale * math.tan(math.pi * (u - 0.5))


def calibrate_knob(
    statistic,
    start,
    end,
    target,
    *,
    scale=1.0,
    integer=False,
    grid_points=KNOB_GRID_POINTS,
    rtol=KNOB_RTOL,
    steps=REFINE_STEPS,
) -> KnobCalibration:
    r"""Monotone bisection of one knob: the knob on the path ``start -> end`` where a corpus
    statistic (an emitted divergence) first reaches ``target``.

    .. math:: x^* = \sup\{x \in [\mathrm{start}, \mathrm{end}] : s(x') \le \epsilon
              \ \ \forall x' \text{ between start and } x\}

    The path is mapped to u in [0, 1] (linear between finite ends, :math:`\tan` towards an
    infinite one); a grid of ``grid_points`` values of u is scanned for the first point above
    the target, and that bracket is refined by the Illinois regula falsi of
    :func:`calibrate_delta` (bisection where the statistic is infinite) until the feasible end
    is within ``rtol * target`` of the target. s need not be monotone: a crossing narrower
    than the grid spacing can be missed; the achieved value is always the statistic itself.

    Parameters
    ----------
    statistic : callable
        ``statistic(x) -> float`` (NaN is read as ``+inf``).
    start, end : float
        Ends of the knob's path: ``start`` the end with the least statistic (SpS's value where
        the rule has one), ``end`` the other end of the published range (``+-inf`` allowed).
    target : float
        The target eps >= 0.
    scale : float
        Knob distance from ``start`` (or to ``end`` when ``start`` is infinite) of the path's
        midpoint u = 1/2 when an end is infinite.
    integer : bool
        An integer knob: evaluated at ``round(x)``.
    grid_points, rtol, steps
        Scan points, relative tolerance and refinement steps.

    Returns
    -------
    KnobCalibration

    Symbols: q verifier, p drafter, eps the target on the emitted divergence.
    Source: the first-crossing inverse of :func:`calibrate_delta` (Hao & Mou, ICLR 2026,
    arXiv 2604.04987, Theorem 3, applied to any rule's knob).
    """
    target = as_budget(target, "target")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be a positive finite number, got {scale!r}")
    x_of = _knob_map(float(start), float(end), float(scale))
    cache, count = {}, [0]

    def knob(u):
        x = x_of(float(min(1.0, max(0.0, u))))
        if integer and math.isfinite(x):
            x = int(round(x))
        return x

    def sx(x):
        if x not in cache:
            count[0] += 1
            v = float(statistic(x))
            cache[x] = math.inf if math.isnan(v) else v
        return cache[x]

    def s(u):
        return sx(knob(u))

    tol = rtol * target

    def result(u_lo, u_hi, status):
        x_lo = knob(u_lo)
        nxt = (knob(u_hi), s(u_hi)) if status == "step" else (None, None)
        return KnobCalibration(x_lo, s(u_lo), status, nxt[0], nxt[1], count[0])

    if s(0.0) > target:
        return result(0.0, 0.0, "above")
    grid = np.linspace(0.0, 1.0, grid_points)
    vals = np.array([s(u) for u in grid])
    over = np.flatnonzero(vals > target)
    if over.size == 0:
        return result(1.0, 1.0, "range-end")
    k = int(over[0])
    lo, hi = grid[k - 1], grid[k]
    if integer:  # bisection on the integers between the bracket's ends
        a, b = knob(lo), knob(hi)
        while b - a > 1:
            mid = (a + b) // 2
            if sx(mid) <= target:
                a = mid
            else:
                b = mid
        status = "calibrated" if target - sx(a) <= tol else "step"
        nxt = (b, sx(b)) if status == "step" else (None, None)
        return KnobCalibration(a, sx(a), status, nxt[0], nxt[1], count[0])
    if target - vals[k - 1] > tol:

        def excess(u):
            return np.array([s(float(u[0])) - target])

        lo_a, hi_a = _illinois(excess, np.array([lo]), np.array([hi]), steps=steps, tol=tol)
        lo, hi = float(lo_a[0]), float(hi_a[0])
    status = "calibrated" if target - s(lo) <= tol else "step"
    return result(lo, hi, status)


# --------------------------------------------------------------------------- the rule


def _on_device(x) -> bool:
    """True for a torch tensor whose values the host does not hold (off the CPU; the switch
    is the exact root's, :func:`cactus_theory.solvers.spike._host_tensor`, which the tests
    flip to run the device paths on CPU tensors): its calibration runs where it lives
    (:func:`calibrate_delta_device`); numpy arrays and CPU tensors calibrate in numpy."""
    return _is_torch(x) and not _spike._host_tensor(x)


def calibrate_delta_device(target_probs, draft_probs, eps, base="taylor", divergence="kl"):
    r""":func:`calibrate_delta`'s delta on torch rows where they live, without a host read.

    The same first crossing in float64 on the rows' device: the geometric grid of
    :data:`GRID_POINTS` deltas up to each row's saturation delta (rows in chunks of at most
    :data:`CHUNK_ELEMENTS` grid entries, a count fixed by the shape), the first grid point
    whose :math:`\Gamma` exceeds eps, then exactly :data:`REFINE_STEPS` Illinois steps on
    every row (converged rows stay as they are, so each row gets the floats of numpy's
    early-stopping loop up to the rounding of the two libraries' sorts and sums). eps is a
    Python float (a knob): eps = 0 gives delta = 0 (SpS), as in numpy. Inputs are not
    validated (the samplers' rows: positive sums; NaN rows are the samplers' to mask).

    Returns
    -------
    Tensor, shape batch
        The calibrated delta, float64 (``DELTA_CAP`` where the row never crosses and never
        saturates).
    """
    import torch

    d = get_divergence(divergence)
    m = d
    q = target_probs.to(torch.float64)
    p = draft_probs.to(torch.float64)
    q = q / q.sum(-1, keepdim=True)
    p = p / p.sum(-1, keepdim=True)
    batch, V = q.shape[:-1], q.shape[-1]
    qf, pf = q.reshape(-1, V), p.reshape(-1, V)
    N = qf.shape[0]
    if not eps > 0 or N == 0:
        return torch.zeros(batch, dtype=torch.float64, device=q.device)
    sat = _saturation(qf, base, d)
    finite_sat = torch.isfinite(sat)
    sat_val = torch.where(finite_sat, sat, torch.full_like(sat, DELTA_CAP))
    top = torch.clamp(sat_val, min=DELTA_MIN * 10)
    # the grid: 0, then geometric from DELTA_MIN to top (numpy's geomspace, in logarithms)
    frac = torch.arange(GRID_POINTS - 1, dtype=torch.float64, device=q.device) / (GRID_POINTS - 2)
    geo = torch.exp(math.log(DELTA_MIN) + frac * (torch.log(top)[:, None] - math.log(DELTA_MIN)))
    geo[:, 0].fill_(DELTA_MIN)  # the ends exactly, as geomspace gives them
    geo[:, -1] = top
    grids = torch.cat([torch.zeros_like(top)[:, None], geo], dim=-1)  # (N, G)
    chunk = max(1, int(CHUNK_ELEMENTS // (GRID_POINTS * V)))
    over = torch.empty(grids.shape, dtype=torch.bool, device=q.device)
    for start in range(0, N, chunk):
        sl = slice(start, min(N, start + chunk))
        shape = (sl.stop - sl.start, GRID_POINTS, V)
        qb, pb = qf[sl, None, :].expand(shape), pf[sl, None, :].expand(shape)
        over[sl] = _divergence_at(qb, pb, grids[sl, :, None], base, d, m) > eps
    anyover = over.any(dim=-1)
    k = torch.argmax(over.to(torch.int8), dim=-1)
    lo_c = torch.gather(grids, -1, torch.clamp(k - 1, min=0)[:, None])[:, 0]
    lo_c = torch.where(k > 0, lo_c, torch.zeros_like(lo_c))
    hi_c = torch.gather(grids, -1, k[:, None])[:, 0]
    lo = torch.where(anyover, lo_c, sat_val)
    hi = torch.where(anyover, hi_c, sat_val)

    def excess(x):
        return _divergence_at(qf, pf, x[:, None], base, d, m) - eps

    lo, _ = _illinois(excess, lo, hi)
    lo = torch.where(torch.isfinite(lo), lo, torch.full_like(lo, DELTA_CAP))
    return lo.reshape(batch)


def _divergence_at(q, p, delta, base, d, m):
    r""":math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)` of rows q, p (array-agnostic; delta
    broadcast against q's last axis as gamma's budget)."""
    gamma = spike_for(q, delta, base, d.name)
    return m.unchecked(emitted_distribution(SpikePlan(q, p, gamma)), q)


class CalibratedCactus(Rule):
    r"""Cactus with delta calibrated per position so that :math:`D(h_{alg}\|q) \le \epsilon`.

    .. warning::
       Not part of the paper: the paper fixes one delta. The calibration runs the exact
       float64 analysis (numpy) on each row; with torch input the rows are copied to the
       host, calibrated, and gamma is rebuilt on the input's device and dtype from the
       calibrated deltas (the only non-array-API step of any rule's ``plan``).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    def __init__(self, eps: float, base: str, divergence: str):
        self.eps = eps
        self.base = base
        self.divergence = divergence

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``SpikePlan`` whose per-row delta meets the emitted budget eps."""
        xp = array_namespace(target_probs, draft_probs)
        if _on_device(target_probs):
            delta = calibrate_delta_device(target_probs, draft_probs, self.eps, self.base, self.divergence)
            dt = xp.astype(delta[..., None], target_probs.dtype)
            return SpikePlan(
                target_probs, draft_probs, spike_for(target_probs, dt, self.base, self.divergence)
            )
        to_np = lambda x: np.asarray(to_device(xp.astype(x, xp.float64), "cpu"))  # noqa: E731
        qn, pn = to_np(target_probs), to_np(draft_probs)
        qn = qn / qn.sum(-1, keepdims=True)
        pn = pn / pn.sum(-1, keepdims=True)
        delta = calibrate_delta(qn, pn, self.eps, base=self.base, divergence=self.divergence).delta
        delta = np.where(np.isfinite(delta), delta, DELTA_CAP)
        dt = xp.asarray(delta[..., None], dtype=target_probs.dtype, device=array_device(target_probs))
        return SpikePlan(target_probs, draft_probs, spike_for(target_probs, dt, self.base, self.divergence))


register(
    RuleSpec(
        name="cactus-calibrated",
        factory=CalibratedCactus,
        knobs=(
            Knob("eps", 0.1, 0.0, math.inf, doc="budget on D(h_alg || q) of the emitted distribution"),
            Knob("base", "taylor", choices=BASES, doc="gamma from delta: Corollary 5 or Theorem 2"),
            Knob(
                "divergence",
                "kl",
                choices=tuple(DIVERGENCES),
                doc="divergence of the budget (and of the exact base's two-point form)",
            ),
        ),
        sps_knobs={"eps": 0.0},
        deterministic=False,
        reads_draft=True,
        needs_raw=False,
        family="spike",
        summary="Cactus with a per-position delta meeting D(h_alg||q) <= eps (first crossing)",
        reference="this toolkit (issue 3); Cactus Theorem 3 for h_alg",
    )
)
