r"""The cvxpy oracle for the per-draft problem over the whole simplex.

.. math:: \max_{h \in \Delta_V} h_n \quad \text{s.t.} \quad D_f(h \| q) \le \delta

This is the problem Theorem 2 reduces to a scalar root; solving it over the whole simplex (no
assumption on the shape of h) is what checks that reduction, including q with zeros. Symbols:
q verifier (``target_probs``), n drafted token, delta budget, h target.

The oracle is slow (an interior-point solve per instance) and meant for small V in tests.
An answer is accepted only with a **certificate of optimality**: it must be feasible (h in the
simplex within ``tol``, its divergence recomputed in float64 at most ``delta``) and a
Lagrangian dual bound evaluated in float64 (:mod:`cactus_theory.solvers._cvx_certificate`,
multipliers from the solver's duals, polished) must exceed its value by at most ``tol``, so
an answer labelled "optimal" that is feasible but not the maximum is rejected. Solvers are
tried in order: Clarabel with tightened tolerances, Clarabel with more iterations and
regularization, SCS at high accuracy, then any other installed solver that accepts the
problem (HiGHS for TV). Where q has entries near 0 the solvers often stop short
("optimal_inaccurate", a point slightly over budget or below the maximum): such a point is
pulled back into the budget along the segment to q, and the Lagrangian maximizer at the
certificate's polished multipliers (h_i = q_i (f')^{-1}((c_i - nu)/lambda), float64) is
tried as a second candidate; either is accepted only with its certificate.
:class:`SolverFailure` is raised rather than an uncertified answer returned. Measured success
rate: ``scripts/oracle_success_rate.py``.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987, Theorem 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._search import bisect_threshold
from .._validation import as_budget, as_probs, choice
from .._validation import token_id as as_token_id
from ..divergences import get_divergence
from ..results import Result
from ._cvx_certificate import draft_bound, recover_draft

__all__ = [
    "CvxResult",
    "SolverFailure",
    "max_draft_probability_cvxpy",
    "solve_verified",
    "CVX_DIVERGENCES",
    "SOLVERS",
]

#: Divergences the oracle can express in disciplined convex form.
CVX_DIVERGENCES = ("kl", "reverse_kl", "chi2", "neyman_chi2", "hellinger", "tv", "js")
#: Solvers tried in order (then any other installed one, see :func:`_solver_attempts`).
SOLVERS = ("CLARABEL", "SCS")
#: Option sets per solver, tried in order (the defaults leave about 1e-6 of budget violation
#: with inv_pos/sqrt). The second Clarabel set trades speed for robustness on the instances
#: where the first stalls (tiny q entries: more iterations, static regularization, no
#: presolve-driven equilibration limits).
_SOLVER_OPTIONS = {
    "CLARABEL": (
        dict(tol_feas=1e-10, tol_gap_abs=1e-10, tol_gap_rel=1e-10, max_iter=400),
        dict(
            tol_feas=1e-9,
            tol_gap_abs=1e-9,
            tol_gap_rel=1e-9,
            max_iter=2000,
            static_regularization_constant=1e-7,
            equilibrate_max_iter=50,
            tol_ktratio=1e-7,
        ),
    ),
    "SCS": (dict(eps_abs=1e-9, eps_rel=1e-9, max_iters=200_000),),
}
#: Installed solvers never tried (they accept none of these problems, or only LPs worse).
_NEVER = ("SCIPY", "OSQP", "ECOS_BB", "GLPK_MI", "CBC", "SCIP")


def _solver_attempts(solvers=SOLVERS, *, others: bool = True):
    """The (solver, options) pairs tried in order: each of ``solvers`` with its option sets.

    With ``others`` (the default order only), every other installed solver follows once with
    its defaults (cvxpy rejects those that cannot express the problem, which is logged).
    """
    import cvxpy as cp

    out = [(name, opts) for name in solvers for opts in _SOLVER_OPTIONS.get(name, ({},))]
    if others:
        out += [(name, {}) for name in cp.installed_solvers() if name not in solvers and name not in _NEVER]
    return out


class SolverFailure(RuntimeError):
    """Every solver failed or returned an answer that did not verify."""


@dataclass(frozen=True)
class CvxResult(Result):
    """Result of the cvxpy oracle.

    Attributes
    ----------
    value : float
        The optimum :math:`h_n` (the largest drafted-token probability within budget).
    h : ndarray, shape (V,)
        The maximizer (clipped at 0 and renormalized after verification).
    divergence : float
        :math:`D(h \\| q)` of the returned h, recomputed in float64.
    status : str
        cvxpy's status of the accepted solve (``"optimal"`` or ``"optimal_inaccurate"``).
    solver : str
        The solver that produced the accepted answer.
    attempts : tuple of (str, str)
        Every (solver, status or error) tried, in order.
    """

    value: float
    h: np.ndarray
    divergence: float
    status: str
    solver: str
    attempts: tuple


def _constraint(cp, h, q, name, delta):
    """Disciplined-convex ``D(h || q) <= delta`` (and support constraints)."""
    sup = q > 0
    qs = q[sup]
    cons = []
    if name in ("kl", "chi2"):  # the divergences with f'(inf) = inf
        # infinite cost for mass where q = 0
        if np.any(~sup):
            cons.append(h[np.flatnonzero(~sup)] == 0)
    hs = h[np.flatnonzero(sup)]
    if name == "kl":
        cons.append(cp.sum(cp.rel_entr(hs, qs)) <= delta)
    elif name == "reverse_kl":
        cons.append(cp.sum(cp.multiply(qs, np.log(qs))) - cp.sum(cp.multiply(qs, cp.log(hs))) <= delta)
    elif name == "chi2":
        cons.append(cp.sum(cp.multiply(1.0 / qs, cp.square(hs - qs))) <= delta)
    elif name == "neyman_chi2":
        # sum (h - q)^2 / h = sum_{q > 0} q^2 / h - 1 on the simplex
        cons.append(cp.sum(cp.multiply(qs, cp.inv_pos(cp.multiply(1.0 / qs, hs)))) - 1 <= delta)
    elif name == "hellinger":
        # (1/2) sum (sqrt h - sqrt q)^2 = 1 - sum sqrt(q h) on the simplex
        cons.append(1 - cp.sum(cp.multiply(np.sqrt(qs), cp.sqrt(hs))) <= delta)
    elif name == "tv":
        cons.append(0.5 * cp.sum(cp.abs(h - q)) <= delta)
    elif name == "js":
        m_sup = (hs + qs) / 2
        cons.append(0.5 * cp.sum(cp.rel_entr(h, (h + q) / 2)) + 0.5 * cp.sum(cp.rel_entr(qs, m_sup)) <= delta)
    return cons


def max_draft_probability_cvxpy(
    target_probs, token_id: int, delta, divergence="kl", *, tol: float = 1e-7, solvers=None
) -> CvxResult:
    r"""Solve :math:`\max h_n` s.t. :math:`h \in \Delta_V,\ D(h\|q) \le \delta` with cvxpy.

    Parameters
    ----------
    target_probs : array_like, shape (V,)
        The verifier distribution q (one row).
    token_id : int
        The drafted token n.
    delta : float
        Budget >= 0.
    divergence : str
        One of :data:`CVX_DIVERGENCES`.
    tol : float
        Verification tolerance: the answer is accepted only if ``min(h) >= -tol``,
        ``|sum h - 1| <= tol``, ``D(h||q) <= delta`` (after clipping h at 0 and
        renormalizing, the divergence is recomputed exactly in float64) and the duality gap
        of h_n (certificate of optimality) is at most ``tol``.
    solvers : sequence of str, optional
        cvxpy solver names tried in order; default :data:`SOLVERS` then every other
        installed solver.

    Returns
    -------
    CvxResult

    Raises
    ------
    SolverFailure
        When no solver returns a verified answer (the message lists every attempt).
    ValueError
        For invalid q, token id, delta or divergence.
    """

    q = as_probs(target_probs, "target_probs")
    if q.ndim != 1:
        raise ValueError(f"target_probs: expected one row of shape (V,), got {q.shape}")
    V = q.shape[0]
    n = as_token_id(token_id, V, "token_id")
    delta = as_budget(delta)
    name = choice(get_divergence(divergence).name, CVX_DIVERGENCES, "divergence")
    d = get_divergence(name)
    if delta == 0:
        # D(h || q) = 0 iff h = q for every divergence here (f strictly convex at 1, or TV).
        return CvxResult(float(q[n]), q.copy(), 0.0, "optimal", "none (delta = 0 forces h = q)", ())
    x, div, status, solver, attempts = solve_budgeted(
        q,
        d,
        name,
        delta,
        lambda h: h[n],
        tol=tol,
        solvers=solvers,
        context=f"token {n}, delta={delta}, {name}",
        dual=lambda lam0, nu0: draft_bound(q, n, delta, name, lam0, nu0),
        value=lambda x: float(x[n]),
        recover=lambda mult: recover_draft(q, n, name, *mult),
    )
    return CvxResult(float(x[n]), x, div, status, solver, attempts)


def solve_budgeted(q, d, name, budget, objective, *, tol, solvers, context, dual, value, recover):
    r"""Maximise the concave ``objective(h)`` over distributions h with
    :math:`D(h \| q) \le` ``budget`` in cvxpy, answered by :func:`solve_verified` (the
    certificate of ``dual``, the candidates of ``recover``; the budget's multiplier and the
    simplex's are the multipliers). Returns :func:`solve_verified`'s tuple."""
    import cvxpy as cp

    h = cp.Variable(q.shape[0], nonneg=True)
    cons = [cp.sum(h) == 1] + _constraint(cp, h, q, name, min(budget, 1e6))
    prob = cp.Problem(cp.Maximize(objective(h)), cons)
    return solve_verified(
        prob,
        h,
        q,
        d,
        budget,
        tol=tol,
        solvers=solvers,
        context=context,
        dual=dual,
        value=value,
        recover=recover,
        multipliers=(cons[-1], cons[0]),
    )


def solve_verified(
    prob, var, q, d, budget, *, tol, solvers, context, dual=None, value=None, recover=None, multipliers=None
):
    """Solve ``prob`` with each solver in turn; return the first answer that is certified.

    A candidate point is accepted only if it is finite, ``min >= -tol``, ``|sum - 1| <= tol``
    and, after clipping at 0 (and zeroing mass off supp(q) where the divergence forbids it)
    and renormalizing, ``D(x || q) <= budget`` recomputed in float64 (a point over budget is
    first pulled towards q along the segment, the least step that meets the budget), and (with ``dual``) the duality gap ``bound - value(x)`` is at most ``tol``, where
    ``bound, multipliers = dual(lam0, nu0)`` is a float64 Lagrangian bound started from the
    solver's dual values (:mod:`cactus_theory.solvers._cvx_certificate`). The candidates of an
    attempt are the solver's point and ``recover(multipliers)``, the Lagrangian maximizer at
    the polished multipliers (it rescues answers that the solver left inaccurate, typically
    where q has entries near 0); after every solver, one last dual-only attempt starts from
    fixed multipliers. cvxpy's warnings are kept in the attempt log.

    Parameters
    ----------
    solvers : sequence of str or None
        Solver names (each with its option sets); None: the default order
        :data:`SOLVERS` followed by every other installed solver (:func:`_solver_attempts`).
    dual, value, recover : callable, optional
        The certificate (see above); without ``dual`` only feasibility is checked.
    multipliers : (constraint, constraint), optional
        The budget and mass constraints whose dual values start the certificate's search.

    Returns
    -------
    x, divergence, status, solver, attempts

    Raises
    ------
    SolverFailure
        No solver produced a certified answer (``context`` and every attempt in the message).
    """
    import warnings

    import cvxpy as cp

    plan = _solver_attempts(SOLVERS) if solvers is None else _solver_attempts(solvers, others=False)
    attempts = []

    def feasible(x):
        if x is None:
            return None, "no point"
        x = np.asarray(x, dtype=np.float64)
        if np.any(~np.isfinite(x)) or x.min() < -tol or abs(x.sum() - 1) > tol:
            return None, "infeasible point"
        x = np.clip(x, 0.0, None)
        if not d.finite_off_support:
            x[q == 0] = 0.0  # the constraint forces 0 there, up to the solver's tolerance
        x /= x.sum()
        div = float(d.unchecked(x, q))
        if not div <= budget:
            # the budget is met exactly, not within tol: where the optimum is steep in the
            # budget (tiny delta, q near 0) a 1e-7 excess would buy ~1e-6 of value
            x, div = pull_towards_q(x, q, d, budget)
        if not div <= budget:
            return None, f"divergence {div:.3g} > budget"
        return (x, div), ""

    def judge(label, status, x, lam0, nu0):
        """Certify the solver's point, else the recovered one; log and return the winner."""
        got, why = feasible(x)
        if dual is None:
            if got is None:
                attempts[-1] = (label, f"{status}, {why}")
                return None
            return got
        bound, mult = dual(lam0, nu0)
        notes = []
        for source, point in (("solver", got), ("dual recovery", None)):
            if source == "dual recovery":
                if recover is None or not np.isfinite(bound):
                    break
                point, why = feasible(recover(mult))
            if point is None:
                notes.append(f"{source}: {why}")
                continue
            gap = bound - value(point[0])
            if gap <= tol:
                attempts[-1] = (label, f"{status}, {source} certified: duality gap {gap:.2g}")
                return point
            notes.append(f"{source}: duality gap {gap:.3g} > {tol:g}")
        attempts[-1] = (label, f"{status}, not certified ({'; '.join(notes)})")
        return None

    for solver, options in plan:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                prob.solve(solver=solver, **options)
        except (cp.error.SolverError, cp.error.DCPError, ValueError, ArithmeticError, TypeError) as exc:
            attempts.append((solver, f"error: {str(exc)[:200]}"))
            continue
        note = "; ".join(str(w.message)[:200] for w in caught)
        attempts.append((solver, str(prob.status) + (f" ({note})" if note else "")))
        if prob.status not in ("optimal", "optimal_inaccurate") or var.value is None:
            continue
        lam0 = nu0 = None
        if multipliers is not None:
            lam0, nu0 = (_scalar_dual(c) for c in multipliers)
        got = judge(solver, str(prob.status), var.value, lam0, nu0)
        if got is not None:
            return got[0], got[1], str(prob.status), solver, tuple(attempts)
    if dual is not None and recover is not None:
        attempts.append(("float64 dual", ""))
        got = judge("float64 dual", "no solver answer", None, None, None)
        if got is not None:
            return got[0], got[1], "certified", "float64 dual", tuple(attempts)
    raise SolverFailure(f"no certified solution for {context}: {attempts}")


def _scalar_dual(constraint):
    """A constraint's dual value as a float (None when the solver gave none)."""
    try:
        v = np.asarray(constraint.dual_value, dtype=np.float64).ravel()
        return float(v[0]) if v.size and np.isfinite(v[0]) else None
    except (TypeError, ValueError, AttributeError):
        return None


def pull_towards_q(x, q, d, budget, steps: int = 60):
    """Repair a slightly infeasible point: the least theta with ``D((1-theta) x + theta q) <= budget``.

    D is convex in its first argument and 0 at q, so the mixture is feasible for theta
    close enough to 1 and the feasible thetas form an interval [theta*, 1]; bisection finds
    theta* within ``2**-steps``. The repaired point's value is then judged by the certificate
    (a large theta costs value and fails it). Returns ``(x, D(x || q))``.
    """
    if not np.isfinite(float(d.unchecked(x, q))) and d.finite_off_support is False:
        return x, float(d.unchecked(x, q))
    hi = bisect_threshold(
        lambda t: float(d.unchecked((1 - t) * x + t * q, q)) <= budget, 0.0, 1.0, steps
    ).value
    y = (1 - hi) * x + hi * q
    return y, float(d.unchecked(y, q))
