r"""The sequence-level KL budget: the best acceptance over a trajectory at a total divergence.

Problem (single-token steps, teacher-forced positions :math:`t = 0..T-1` with verifier
:math:`q_t` and drafter :math:`p_t`): choose the emitted distribution :math:`o_t` of every step
to

.. math:: \max_{o_0..o_{T-1}\in\Delta_V} \sum_t \sum_x \min(p_{t,x}, o_{t,x})
          \quad\text{s.t.}\quad \sum_t KL(o_t \| q_t) \le T\epsilon .

Why the sum: the law P of the emitted text against the verifier's :math:`Q = \prod_t q_t`
satisfies :math:`KL(P\|Q) = \sum_t E_P\,KL(P(\cdot|x_{<t})\|q_t)` (chain rule), and with
single-token steps :math:`P(\cdot|x_{<t}) = o_t`. The per-step value is the optimal frontier
:math:`A_t(e) = \max\{\sum\min(p_t, o): KL(o\|q_t) \le e\}` (Theorem 1 bounds the acceptance
of any rule emitting o by :math:`\sum\min(p, o)`; :mod:`cactus_theory.solvers._frontier`), so
the problem is :math:`\max \sum_t A_t(e_t)` s.t. :math:`\sum_t e_t \le T\epsilon`: a convex
programme (each :math:`A_t` is concave), separable with one multiplier :math:`\lambda \ge 0`.

Per step at multiplier lambda (closed form). From the KKT conditions of the frontier
(:mod:`cactus_theory.solvers._mentored`), the frontier point with budget e is
:math:`o = \mathrm{clip}(p, a q, b q)` on supp(q) and its slope is
:math:`dA/de = 1/(f'(b) - f'(a)) = 1/\log(b/a)` for KL. So the maximiser of
:math:`A_t(e) - \lambda e` is the clip with the band width fixed,

.. math:: o_t(\lambda) = \mathrm{clip}(p_t,\ a q_t,\ a e^{1/\lambda} q_t)\ \text{on supp}(q_t),
          \qquad \sum_x o_{t,x} = 1 \ \text{fixes}\ a\in(0, 1],

(0 off supp(q_t)): :math:`\lambda = \infty` gives :math:`o = q` (SpS), :math:`\lambda = 0` the
saturation point :math:`\max(p, aq)` (the frontier's largest finite-budget value). The total
spend :math:`\sum_t KL(o_t(\lambda)\|q_t)` is continuous and nonincreasing in lambda (each
:math:`A_t` is strictly concave below its saturation budget), so bisection on
:math:`1/\lambda` meets :math:`T\epsilon` exactly; by Lagrangian sufficiency (Everett 1963) the
result is the optimum of the problem, and *every* lambda is optimal for the budget it spends.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o (or :math:`\pi`) the
emitted distribution of a step, e its divergence :math:`KL(o\|q)`, :math:`\epsilon` the
per-token budget, :math:`\lambda` the multiplier (acceptance per nat).

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023) for the
per-step problem; H. Everett, Operations Research 11 (1963), generalized Lagrange multipliers;
Cover & Thomas, Thm 2.5.3 (chain rule of KL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace

from .._search import bisect_elementwise
from .._validation import _is_torch, as_budget, as_prob_pair
from ..divergences import get_divergence
from ._mentored import solve_mentored
from ._sequence_device import band_step_torch

__all__ = [
    "multiplier_step",
    "budgeted_multiplier_step",
    "SequenceBudgetSolution",
    "solve_sequence_budget",
    "sequence_budget_cvxpy",
    "budget_account",
]

#: Bisection steps on the lower clip factor a in [0, 1]: 2**-64 is below float64's resolution.
_BAND_STEPS = 64
#: Bisection steps on the band width 1/lambda of the sequence problem.
MULTIPLIER_STEPS = 100


def multiplier_step(target_probs, draft_probs, lam):
    r"""The frontier point maximising :math:`A(e) - \lambda e` (KL), row by row.

    .. math:: o = \mathrm{clip}(p,\ a q,\ a e^{1/\lambda} q)\ \text{on supp}(q),\ 0\ \text{off it},
              \qquad \textstyle\sum_x o_x = 1.

    On numpy rows (the analysis, float64) ``a`` is found by :data:`_BAND_STEPS` bisection
    steps on [0, 1] (the sum is nondecreasing in a, 0 at a = 0 and >= 1 at a = 1); on torch
    rows (the samplers and the vLLM plugin, in the rows' dtype and device) exactly, by one sort
    per row and a binary search over its breakpoints
    (:func:`~cactus_theory.solvers._sequence_device.band_step_torch`; within 5e-7 of the
    float64 analysis on the shipped rows in float32).

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        q and p (normalized rows; not validated here).
    lam : float or array broadcastable to the batch shape
        :math:`\lambda \in [0, \infty]` (acceptance per nat): ``inf`` gives o = q (SpS), 0
        the saturation point.

    Returns
    -------
    array, shape (..., V)
        o (normalized up to the bisection's resolution).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o the emitted
    distribution. Source: Hao & Mou, ICLR 2026, Theorem 1; Tran-Thien (2023).
    """
    if _is_torch(target_probs):
        # torch rows (the samplers, the vLLM plugin): the exact clip factor by one sort per row
        return band_step_torch(target_probs, draft_probs, lam)
    xp = array_namespace(target_probs, draft_probs)
    q = target_probs
    shape = q.shape[:-1] + (1,)
    lo = xp.zeros(shape, dtype=q.dtype, device=getattr(q, "device", None))
    hi = xp.ones(shape, dtype=q.dtype, device=getattr(q, "device", None))
    o, _, _ = _band(xp, target_probs, draft_probs, lam, lo, hi, _BAND_STEPS)
    return o


def _on_device(xp, x, q):
    """``x`` (a Python number or an array) in q's dtype on q's device; a number is filled in
    on the device (``asarray`` of it would be a host-to-device copy, a synchronization)."""
    dev = getattr(q, "device", None)
    if not hasattr(x, "shape"):
        return xp.full((), x, dtype=q.dtype, device=dev)
    return xp.asarray(x, dtype=q.dtype, device=dev)


def _band(xp, q, p, lam, lo, hi, steps, early_stop=False):
    """Bisection for a in [lo, hi] (per row); returns (o, lo, hi) with o at the upper end."""
    on = q > 0
    zero = xp.zeros_like(q)
    lam_arr = _on_device(xp, lam, q)
    if lam_arr.ndim:
        lam_arr = lam_arr[..., None]
    # band width b/a = e^{1/lambda}: inf at lambda = 0, 1 at lambda = inf
    expo = xp.where(lam_arr > 0, 1.0 / xp.where(lam_arr > 0, lam_arr, 1.0), math.inf)
    # e^x overflows float64 past 709.78: the band is then infinitely wide (no warning raised)
    width = xp.where(expo > 700.0, math.inf, xp.exp(xp.minimum(expo, xp.full_like(expo, 700.0))))
    p_on = xp.where(on, p, zero)
    q_on = xp.where(on, q, xp.ones_like(q))  # 1 off supp(q): keeps inf * 0 out of the band

    def clipped(a):
        return xp.clip(p_on, xp.where(on, a * q, zero), xp.where(on, a * q_on * width, zero))

    def under(a):
        return xp.sum(clipped(a), axis=-1, keepdims=True) < 1.0

    def ulp_apart(lo, hi):  # numpy only (a host read): a float64 ulp
        return bool(np.all(hi - lo <= 2.3e-16 * hi))

    lo, hi = bisect_elementwise(xp, under, lo, hi, steps, stop=ulp_apart if early_stop else None)
    o = clipped(hi)
    return o / xp.sum(o, axis=-1, keepdims=True), lo, hi


def _kl_rows(xp, o, q):
    """KL(o||q) per row, clipped at 0 (the closed-form terms can round to -1e-16)."""
    kl = xp.sum(get_divergence("kl").term(xp, o, q), axis=-1)
    return xp.maximum(kl, xp.zeros_like(kl))


def budgeted_multiplier_step(target_probs, draft_probs, lam, cap=math.inf):
    r"""The frontier point maximising :math:`A(e) - \lambda e` subject to :math:`e \le` ``cap``.

    A is concave, so the answer is the frontier point at :math:`\min(e(\lambda), cap)`:
    :func:`multiplier_step` where its divergence is within ``cap``, else the frontier
    (Mentored decoding) at budget ``cap``. ``cap`` is what a running budget account passes:
    the budget left for the rest of the text.

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        q and p (normalized rows).
    lam : float
        :math:`\lambda \in [0, \infty]`.
    cap : float or array broadcastable to the batch shape
        Largest divergence :math:`KL(o\|q)` allowed at this step (``inf``: none).

    Returns
    -------
    array, shape (..., V)
        o with :math:`KL(o\|q) \le` cap (up to the frontier solver's rounding).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026, Theorem 1; Tran-Thien (2023).
    """
    o = multiplier_step(target_probs, draft_probs, lam)
    if isinstance(cap, (int, float)) and math.isinf(cap):
        return o
    xp = array_namespace(target_probs, draft_probs)
    q = target_probs
    capped = solve_mentored(q, draft_probs, cap, "kl", return_target=True).target
    over = _kl_rows(xp, o, q) > _on_device(xp, cap, q)
    return xp.where(over[..., None], capped, o)


@dataclass(frozen=True)
class SequenceBudgetSolution:
    r"""The exact optimum of the sequence-level budget problem (module docstring).

    Attributes
    ----------
    lam : float
        The multiplier :math:`\lambda^*` (0 when every step is saturated within the budget).
    emitted : ndarray, shape (T, V)
        The optimal per-step emitted distributions :math:`o_t`.
    acceptance : ndarray, shape (T,)
        :math:`A_t = \sum_x \min(p_{t,x}, o_{t,x})`.
    divergence : ndarray, shape (T,)
        :math:`e_t = KL(o_t\|q_t)`; :math:`\sum_t e_t \le T\epsilon`.
    budget : float
        :math:`T\epsilon`.

    Symbols: q verifier, p drafter, o emitted. Source: Hao & Mou, ICLR 2026, Theorem 1.
    """

    lam: float
    emitted: np.ndarray
    acceptance: np.ndarray
    divergence: np.ndarray
    budget: float

    @property
    def total_acceptance(self) -> float:
        """:math:`\\sum_t A_t`."""
        return float(self.acceptance.sum())


def _evaluate(q, p, o):
    return np.minimum(p, o).sum(-1), np.asarray(_kl_rows(np, o, q), dtype=np.float64)


def solve_sequence_budget(target_probs, draft_probs, eps) -> SequenceBudgetSolution:
    r"""Exact optimum of :math:`\max\sum_t\sum_x\min(p_t, o_t)` s.t. :math:`\sum_t KL(o_t\|q_t)\le T\epsilon`.

    Bisection on the band width :math:`w = 1/\lambda` (the spend is nondecreasing in w) after
    doubling w until the spend reaches :math:`T\epsilon`; the feasible end is returned.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (T, V)
        The trajectory's q_t and p_t (validated, float64).
    eps : float
        Per-token budget :math:`\epsilon \ge 0`.

    Returns
    -------
    SequenceBudgetSolution

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026, Theorem 1; Everett (1963).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 2:
        raise ValueError(f"target_probs: expected shape (T, V), got {q.shape}")
    eps = as_budget(eps, "eps")
    budget = eps * q.shape[0]
    if budget == 0:
        o = q.copy()
        A, D = _evaluate(q, p, o)
        return SequenceBudgetSolution(math.inf, o, A, D, 0.0)
    o_sat = multiplier_step(q, p, 0.0)
    if float(_kl_rows(np, o_sat, q).sum()) <= budget:
        A, D = _evaluate(q, p, o_sat)
        return SequenceBudgetSolution(0.0, o_sat, A, D, budget)
    shape = q.shape[:-1] + (1,)
    # a(w), the lower clip factor, decreases as the band width w = e^{1/lambda} grows, so the
    # roots at the two ends of the bracket on 1/lambda bracket the root at any width between
    a_lo, a_hi = np.zeros(shape), np.ones(shape)

    def spend(c, lo, hi):
        # the band of width e^c (lambda = 1/c): infinitely wide past c = 700 (_band), so the
        # bracket on c may reach 1024; its root a per row by bisection from the warm bracket,
        # to a float64 ulp
        o, lo, hi = _band(np, q, p, 1.0 / c if c > 0 else math.inf, lo, hi, _BAND_STEPS, early_stop=True)
        return float(_kl_rows(np, o, q).sum()), lo, hi

    lo_c, hi_c = 0.0, 1.0
    f_lo = -budget  # spend(0) = 0: the band of width 1 emits q
    while True:
        val, l_, h_ = spend(hi_c, a_lo, a_hi)
        if val > budget:
            a_lo, f_hi = l_, val - budget
            break
        lo_c, a_hi, f_lo = hi_c, h_, val - budget
        hi_c *= 2.0
        if hi_c > 700:  # e^700 is near float64's largest: the band is saturated beyond it
            f_hi = val - budget
            break
    # Why a root search of its own and not _search.brent_root: where the budget is at rounding
    # level (1e-16 nats: the audit's corpus frontier on shipped dumps) the computed spend is
    # flat and noisy near c = 0 and Brent does not converge to a relative tolerance on c;
    # this loop also stops on the spend (within 1e-13 of the budget).
    # Illinois (regula falsi with halving of the stale end's value) on spend(c) - budget: the
    # spend is continuous and nondecreasing in c = 1/lambda; the feasible end lo_c is kept
    # (a bisection step whenever two steps did not halve the bracket: where the spend is flat
    # at the budget up to rounding, e.g. a saturated band whose divergence is the budget, the
    # false-position point stays at the infeasible end for dozens of steps)
    side = 0
    widths = [math.inf, math.inf]
    for _ in range(MULTIPLIER_STEPS):
        if hi_c - lo_c <= 1e-13 * hi_c or -f_lo <= 1e-13 * budget:
            break
        mid = (lo_c * f_hi - hi_c * f_lo) / (f_hi - f_lo) if f_hi > f_lo else 0.5 * (lo_c + hi_c)
        if not lo_c < mid < hi_c or hi_c - lo_c > 0.5 * widths[0]:
            mid = 0.5 * (lo_c + hi_c)
        widths = [widths[1], hi_c - lo_c]
        val, l_, h_ = spend(mid, a_lo, a_hi)
        if val <= budget:
            lo_c, a_hi, f_lo = mid, h_, val - budget
            if side == -1:
                f_hi *= 0.5
            side = -1
        else:
            hi_c, a_lo, f_hi = mid, l_, val - budget
            if side == 1:
                f_lo *= 0.5
            side = 1
    lam = 1.0 / lo_c if lo_c > 0 else math.inf
    o = multiplier_step(q, p, lam)
    A, D = _evaluate(q, p, o)
    return SequenceBudgetSolution(lam, o, A, D, budget)


def budget_account(target_probs, draft_probs, lam, eps):
    r"""The running budget account along a teacher-forced trajectory (the online rule's loop).

    Step t spends :math:`e_t = \min(e_t(\lambda), B_t)` with :math:`B_0 = T\epsilon`,
    :math:`B_{t+1} = B_t - e_t` (:func:`budgeted_multiplier_step` with ``cap = B_t``); it
    reads only position t and the budget left, so a decoding loop can run it. Guarantee, per
    realised sequence: :math:`\sum_t KL(o_t\|q_t) \le T\epsilon`.

    Returns
    -------
    emitted : ndarray, shape (T, V)
    remaining : ndarray, shape (T + 1,)
        :math:`B_t` (clipped at 0).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026, Theorem 1; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 2:
        raise ValueError(f"target_probs: expected shape (T, V), got {q.shape}")
    eps = as_budget(eps, "eps")
    T = q.shape[0]
    # until the account binds every step spends e_t(lambda); at the first step t* whose
    # e_t(lambda) exceeds the budget left, it spends exactly what is left (the frontier at
    # that budget); after t* nothing is left, and budget 0 is SpS (o = q)
    out = multiplier_step(q, p, lam)
    e = np.asarray(_kl_rows(np, out, q), dtype=np.float64)
    B = np.empty(T + 1)
    B[0] = eps * T
    over = np.flatnonzero(np.cumsum(e) > B[0])
    if over.size:
        t = int(over[0])
        left = max(0.0, B[0] - float(e[:t].sum()))
        out[t] = budgeted_multiplier_step(q[t], p[t], lam, left)
        out[t + 1 :] = q[t + 1 :]
        e = np.asarray(_kl_rows(np, out, q), dtype=np.float64)
    B[1:] = np.maximum(0.0, B[0] - np.cumsum(e))
    return out, B


def sequence_budget_cvxpy(
    target_probs, draft_probs, eps, *, tol: float = 1e-7, solvers=("CLARABEL", "SCS")
) -> SequenceBudgetSolution:
    r"""cvxpy oracle of the sequence problem over the per-step emitted distributions (small T, V).

    .. math:: \max_{O \ge 0,\ O\mathbf 1 = \mathbf 1} \sum_{t,x}\min(P_{t,x}, O_{t,x})
              \quad\text{s.t.}\quad \sum_{t,x} O_{t,x}\log(O_{t,x}/Q_{t,x}) \le T\epsilon,

    :math:`O_{t,x} = 0` where :math:`Q_{t,x} = 0`. No clip form, no multiplier: it checks
    :func:`solve_sequence_budget`. The answer is verified (clipped, renormalized, total KL
    recomputed in float64 within ``T eps + tol``) or the next solver is tried; raises
    :class:`~cactus_theory.solvers._cvx.SolverFailure` when none verifies.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026, Theorem 1.
    """
    import warnings

    import cvxpy as cp

    from ._cvx import SolverFailure

    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 2:
        raise ValueError(f"target_probs: expected shape (T, V), got {q.shape}")
    eps = as_budget(eps, "eps")
    budget = eps * q.shape[0]
    on = q > 0
    o_rows = cp.Variable(q.shape, nonneg=True)
    idx = np.nonzero(on)
    cons = [cp.sum(o_rows, axis=1) == 1, cp.sum(cp.rel_entr(o_rows[idx], q[idx])) <= budget]
    if np.any(~on):
        cons.append(o_rows[np.nonzero(~on)] == 0)
    prob = cp.Problem(cp.Maximize(cp.sum(cp.minimum(o_rows, p))), cons)
    attempts = []
    for solver in solvers:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prob.solve(solver=solver)
        except (cp.error.SolverError, ValueError, ArithmeticError) as exc:
            attempts.append((solver, f"error: {exc}"))
            continue
        attempts.append((solver, str(prob.status)))
        if prob.status not in ("optimal", "optimal_inaccurate") or o_rows.value is None:
            continue
        x = np.clip(np.asarray(o_rows.value, dtype=np.float64), 0.0, None)
        x[~on] = 0.0
        x /= x.sum(-1, keepdims=True)
        A, D = _evaluate(q, p, x)
        if float(D.sum()) <= budget + tol:
            return SequenceBudgetSolution(math.nan, x, A, D, budget)
        attempts[-1] = (solver, f"{prob.status}, divergence {D.sum():.3g} > budget + tol")
    raise SolverFailure(f"no verified solution of the sequence budget problem: {attempts}")
