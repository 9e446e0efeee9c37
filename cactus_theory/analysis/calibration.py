r"""Calibrating Cactus's delta to a budget on what is actually emitted.

Cactus bounds the divergence of each per-draft target :math:`h^{(n)}` by :math:`\delta`, but
the token it emits follows the mixture :math:`h_{alg}` (Theorem 3), whose divergence
:math:`\Gamma_{q,p}(\delta) = D(h_{alg}(\delta)\|q)` depends on (q, p), not on delta alone, and
has no closed form. This module computes it exactly (the exact O(V log V) emitted
distribution at each delta), its distribution over a corpus of positions, and the inverse:

* per position, the delta that meets a target emitted divergence :math:`\epsilon`
  (:func:`cactus_theory.api.calibrate_delta`, on :func:`_calibrate_rows`; the
  ``cactus-calibrated`` rule of :mod:`cactus_theory.analysis._calibrated_rule` applies it);
* one global delta for a corpus (:func:`global_delta`: the mean, or a quantile, of the
  emitted divergence over positions meets :math:`\epsilon`; in memory, chunk by chunk or as
  Dask tasks, the same numbers);
* both compared with Mentored decoding at the same :math:`\epsilon`
  (:func:`compare_with_mentored`), which emits a distribution within :math:`\epsilon` with
  the best possible acceptance.

The inverse is the **first crossing**: the largest :math:`\delta` such that
:math:`\Gamma(\delta') \le \epsilon` for every :math:`\delta' \le \delta` on a geometric
grid, refined by the Illinois regula falsi (:func:`cactus_theory._search.illinois`). :math:`\Gamma` need not be monotone in :math:`\delta`
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

import numpy as np
from array_api_compat import array_namespace

from .._search import illinois
from .._validation import (
    as_budget,
    as_budget_array,
    as_nonempty_values,
    as_prob_pair,
    as_probs,
    as_probs_or_tensor,
    as_real,
    choice,
)
from ..divergences import get_divergence
from ..results import CalibrationResult, GlobalDelta, MentoredComparison
from ..rules.internal import SMOOTH_DIVERGENCES
from ..rules.plans import SpikePlan
from ..solvers import exact_spike, solve_mentored, taylor_spike
from ._runners import Execution, as_rows, runner_for
from .one_step import emitted_distribution

__all__ = [
    "emitted_divergence_curve",
    "global_delta",
    "compare_with_mentored",
]

#: How gamma is computed from delta: Corollary 5 (the paper's rule) or Theorem 2's root.
_BASES = ("taylor", "exact")

#: Grid points of the first-crossing scan and the most Illinois steps of its refinement.
_GRID_POINTS = 24
_REFINE_STEPS = 60
#: Lower end of the geometric delta grid (below it, gamma - q_n < 1e-4 q_n-ish: no crossing
#: of a practical eps is missed there).
_DELTA_MIN = 1e-8
#: Rows x grid points x V processed at once in the grid scan (memory bound).
_CHUNK_ELEMENTS = 4_000_000
#: Upper end of the scan when the base never saturates (exact rules with a finite cost off
#: supp(q)); such a row that stays within eps up to it is reported saturated at _DELTA_CAP.
_DELTA_CAP = 1e4


def _spike_for(target_probs, delta, base="taylor", divergence="kl"):
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
    choice(base, _BASES, "base")
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
        How gamma follows from delta (:func:`_spike_for`).
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
    gamma = _spike_for(qb, delta, base, div)
    plan = SpikePlan(qb, pb, gamma)
    h = emitted_distribution(plan)
    a = np.sum(pb * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    return m.unchecked(h, qb), a


def _curve_grid(q, p, grids, base, div, m):
    """Rows (n, V) with a grid per row (n, G): D(h_alg || q), shape (n, G)."""
    qb = np.broadcast_to(q[:, None, :], (q.shape[0], grids.shape[1], q.shape[1]))
    pb = np.broadcast_to(p[:, None, :], qb.shape)
    gamma = _spike_for(qb, grids[..., None], base, div)
    return m.unchecked(emitted_distribution(SpikePlan(qb, pb, gamma)), qb)


def _curve_rows(q, p, delta_rows, base, div, m):
    """Per-row delta (shape batch): (D [...], acceptance [...], emitted [..., V])."""
    gamma = _spike_for(q, delta_rows[..., None], base, div)
    plan = SpikePlan(q, p, gamma)
    h = emitted_distribution(plan)
    a = np.sum(p * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    return m.unchecked(h, q), a, h


def _saturation_delta(target_probs, base="taylor", divergence="kl") -> np.ndarray:
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
    """:func:`_saturation_delta` on validated rows (array-agnostic; ``d`` resolved)."""
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


def _grids(tops):
    """Per row, 0 and a geometric grid of ``_GRID_POINTS - 1`` deltas from ``_DELTA_MIN`` up to
    the row's top (``_DELTA_CAP`` where infinite, at least ``10 _DELTA_MIN``), shape (n, G);
    one vectorized ``geomspace`` (the same floats as a call per row)."""
    top = np.maximum(np.where(np.isfinite(tops), tops, _DELTA_CAP), _DELTA_MIN * 10)
    return np.concatenate(
        [np.zeros((top.shape[0], 1)), np.geomspace(_DELTA_MIN, top, _GRID_POINTS - 1, axis=-1)], axis=-1
    )


def _calibrate_rows(
    target_probs, draft_probs, eps, *, base="taylor", divergence="kl", measure=None
) -> CalibrationResult:
    r"""Per position, the delta whose emitted divergence :math:`\Gamma(\delta)` meets eps (the
    numpy core of :func:`cactus_theory.api.calibrate_delta` per position).

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
        Arrays of the batch shape (``per="position"``, ``rule`` ``cactus-<base>``).

    Notes
    -----
    A geometric grid of :data:`_GRID_POINTS` deltas up to the saturation delta is scanned
    for the first grid point above eps, then the bracket is refined by at most
    :data:`_REFINE_STEPS` Illinois (regula falsi) steps, keeping the feasible end.
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
    sat = np.broadcast_to(_saturation_delta(qf, base, d.name), (qf.shape[0],))
    lo = np.zeros(qf.shape[0])
    hi = np.zeros(qf.shape[0])
    saturated = np.zeros(qf.shape[0], dtype=bool)
    N, V = qf.shape
    chunk = max(1, int(_CHUNK_ELEMENTS // (_GRID_POINTS * V)))
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
        # no crossing up to the saturation delta (or, if it never saturates, up to _DELTA_CAP)
        sat_val = np.where(np.isfinite(sat[sl]), sat[sl], _DELTA_CAP)
        saturated[sl] = ~anyover
        lo[sl] = np.where(anyover, lo_c, sat_val)
        hi[sl] = np.where(anyover, hi_c, sat_val)
    active = ~saturated & (hi > lo)
    if np.any(active):
        idx = np.flatnonzero(active)

        def excess(x):
            return _curve_rows(qf[idx], pf[idx], x, base, d.name, m)[0] - eps

        lo[idx], hi[idx] = illinois(excess, lo[idx], hi[idx], steps=_REFINE_STEPS)
    delta_eval = np.where(np.isfinite(lo), lo, _DELTA_CAP)
    D, a, _ = _curve_rows(qf, pf, delta_eval, base, d.name, m)
    return CalibrationResult(
        rule=f"cactus-{base}",
        divergence=d.name,
        eps=eps,
        delta=lo.reshape(batch),
        emitted_divergence=D.reshape(batch),
        acceptance=a.reshape(batch),
        saturated=saturated.reshape(batch),
        n_positions=int(qf.shape[0]),
    )


def _corpus_divergence_distribution(
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


def _as_statistic(statistic):
    """``"mean"``, or a quantile level in (0, 1] as a float (ValueError naming ``statistic``)."""
    if statistic == "mean":
        return statistic
    lv = as_real(statistic, "statistic", "'mean' or a quantile level in (0, 1]")
    if not 0 < lv <= 1:
        raise ValueError(f"statistic: quantile level must lie in (0, 1], got {statistic!r}")
    return lv


def _stat(D, statistic):
    if statistic == "mean":
        return float(np.mean(D))
    return float(np.quantile(D, statistic, method="higher"))


def _saturation_kernel(chunk, base, divergence):
    q, _ = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(_saturation_delta(q, base, divergence)).reshape(-1)


def _grid_kernel(chunk, grid, base, divergence, measure):
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    D, _ = _curve(q2, p2, grid, base, divergence, get_divergence(measure))
    return D


def _rows_kernel(chunk, delta, base, divergence, measure):
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    deltas = np.full(q2.shape[0], float(delta))
    D, a, _ = _curve_rows(q2, p2, deltas, base, divergence, get_divergence(measure))
    return D, a


def global_delta(
    target_probs,
    draft_probs=None,
    eps=0.0,
    *,
    statistic="mean",
    base="taylor",
    divergence="kl",
    measure=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
) -> GlobalDelta:
    r"""One delta for a corpus: the first crossing of ``statistic`` over positions of
    :math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)` with eps.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V), Dask arrays, or a row source
        The corpus (a row source, :mod:`cactus_theory.rows`, alone).
    eps : float
        Budget on the statistic of the emitted divergence.
    statistic : "mean" or float in (0, 1]
        Mean over positions, or a quantile (1.0: every position within eps).
    base, divergence, measure
        As in :func:`emitted_divergence_curve`.
    chunk_rows, max_memory, progress, runner
        Where the work runs, as in :func:`cactus_theory.analysis.analyze` (the same numbers
        whatever the chunking or the runner).

    Returns
    -------
    GlobalDelta

    Notes
    -----
    Passes over the rows: one for the saturation delta (the grid's top), one for the grid
    (:data:`_GRID_POINTS` deltas per row), one per refinement step (at most
    :data:`_REFINE_STEPS` Illinois steps, plus two for the bracket's ends), one for the
    result. Each statistic is taken over all N per-row values (exact,
    ``numpy.quantile(..., method="higher")``). Dask collections are computed once per pass:
    ``persist()`` them first where they fit in the cluster's memory.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    eps = as_budget(eps, "eps")
    statistic = _as_statistic(statistic)
    source = as_rows(target_probs, draft_probs)
    run = runner_for(source, "calibrate", Execution(chunk_rows, max_memory, progress, runner))
    sats = run.map(_saturation_kernel, base, d.name)
    if not sats:
        raise ValueError("target_probs: no rows")
    sat = float(np.max(np.concatenate(sats)))

    def at(delta):
        parts = run.map(_rows_kernel, delta, base, d.name, m.name)
        return np.concatenate([D for D, _ in parts]), np.concatenate([a for _, a in parts])

    status = "calibrated"
    if eps == 0:
        lo = 0.0
    else:
        grid = _grids(np.array([sat]))[0]
        D = np.concatenate(run.map(_grid_kernel, grid, base, d.name, m.name))  # (N, G)
        vals = np.array([_stat(D[:, j], statistic) for j in range(grid.size)])
        over = np.flatnonzero(vals > eps)
        if over.size == 0:
            lo = hi = grid[-1]
            status = "saturated"
        else:
            k = over[0]
            lo, hi = (grid[k - 1] if k > 0 else 0.0), grid[k]
        if hi > lo:

            def excess(x):
                return np.array([_stat(at(float(x[0]))[0], statistic) - eps])

            lo_a, _ = illinois(excess, np.array([lo]), np.array([hi]), steps=_REFINE_STEPS)
            lo = float(lo_a[0])
    D, a = at(lo)
    return GlobalDelta(float(lo), statistic, _stat(D, statistic), D, a, status)


def compare_with_mentored(
    target_probs, draft_probs, eps, *, base="taylor", divergence="kl", statistic="mean"
) -> MentoredComparison:
    r"""Per-position and global calibrated Cactus vs Mentored decoding, all at budget eps.

    Mentored decoding emits :math:`\pi` with :math:`D(\pi\|q) \le \epsilon` and the optimal
    acceptance (:mod:`cactus_theory.solvers._mentored`), so its acceptance bounds both
    calibrated Cactus variants position by position (the frontier).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    d = _check(base, divergence)
    per = _calibrate_rows(q2, p2, eps, base=base, divergence=d.name)
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
        "mean_divergence_per_position": float(per.emitted_divergence.mean()),
        "mean_divergence_global": float(glob.divergences.mean()),
        "fraction_over_eps_global": float(np.mean(glob.divergences > eps)),
    }
    return MentoredComparison(float(eps), per, glob, ment, summary)
