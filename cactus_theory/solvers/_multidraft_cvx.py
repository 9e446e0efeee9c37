r"""Oracles for the k-draft solvers (small V, tests only): a coupling LP, cvxpy, certificates.

* :func:`coupling_acceptance_lp` — :math:`\alpha^*(o)` as the linear programme over couplings
  :math:`\pi(x, y)` of the draft tuple :math:`x \in V^k` (law :math:`\prod_j p_{x_j}`) and the
  emitted token y (law o), maximising :math:`\sum_{y \in x} \pi(x, y)`
  (``scipy.optimize.linprog``, HiGHS). It assumes nothing about the min-cut form.
* :func:`multidraft_frontier_cvxpy` — :math:`\max_o \alpha^*(o)` s.t. :math:`D(o\|q)\le\epsilon`
  over the whole simplex with one cut :math:`t \le 2 - o(A) - (1-p(A))^k` per subset A
  (:math:`2^V` cuts; no assumption on which sets bind), the divergence constraints of
  :mod:`cactus_theory.solvers._cvx`, and a certificate: the cuts' dual weights give the
  Lagrangian bound :func:`cactus_theory.solvers._multidraft.multidraft_dual_bound`, polished
  in float64, which must exceed the verified (feasible) value by at most ``tol``.
* :func:`certify_multidraft` — the same bound for any candidate target (the fast solver's),
  with the dual weights read off the KKT conditions of the taut string.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k drafts, o target,
:math:`\epsilon` budget.

References
----------
Boyd & Vandenberghe, Convex Optimization, 5.1-5.2; Sun et al., NeurIPS 2023 (arXiv
2310.15141), the coupling LP of multi-draft verification.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .._validation import as_budget, as_count, as_prob_pair, choice
from ..divergences import get_divergence
from ..results import Result
from ._cvx import CVX_DIVERGENCES, SolverFailure, _constraint, _solver_attempts, pull_towards_q
from ._cvx_certificate import _derivative, _polish
from ._multidraft import min_cut_acceptance, miss_probability, multidraft_dual_bound

__all__ = [
    "coupling_acceptance_lp",
    "MultiDraftCvxResult",
    "multidraft_frontier_cvxpy",
    "certify_multidraft",
    "all_subsets",
]

#: The oracles enumerate V^k tuples or 2^V subsets: refuse sizes that would not finish.
_MAX_TUPLES = 20_000
_MAX_SUBSET_V = 12


def all_subsets(V: int) -> np.ndarray:
    """Every subset of range(V) as a boolean matrix of shape (2^V, V) (row m: bits of m)."""
    V = as_count(V, "V")
    if V > _MAX_SUBSET_V:
        raise ValueError(f"V: at most {_MAX_SUBSET_V} for the enumeration of subsets, got {V}")
    m = np.arange(1 << V)[:, None]
    return ((m >> np.arange(V)[None, :]) & 1).astype(bool)


def coupling_acceptance_lp(emitted_probs, draft_probs, k) -> float:
    r"""The largest :math:`P(Y \in \{X_1..X_k\})` over couplings, by a linear programme.

    .. math:: \max_{\pi \ge 0} \sum_{x, y:\, y \in x} \pi(x, y) \quad \text{s.t.}\quad
              \sum_{y \in x} \pi(x, y) \le \textstyle\prod_j p_{x_j},\ \
              \sum_{x \ni y} \pi(x, y) \le o_y

    over the pairs with y in x only (the flow network; any such flow completes to a coupling
    with the two marginals by pairing the leftover masses, which adds no hits, so the optimum
    is the best coupling's).

    Parameters
    ----------
    emitted_probs, draft_probs : array_like, shape (V,)
    k : int
        ``V**k`` at most 20,000 tuples.

    Returns
    -------
    float
        The optimum (HiGHS; raises :class:`~cactus_theory.solvers._cvx.SolverFailure` unless
        it reports success).

    Symbols: p drafter (``draft_probs``), o emitted. Source: Sun et al., NeurIPS 2023.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    o, p = as_prob_pair(emitted_probs, draft_probs, target_name="emitted_probs")
    k = as_count(k, "k")
    V = o.shape[-1]
    if o.ndim != 1:
        raise ValueError(f"emitted_probs: expected one row of shape (V,), got {o.shape}")
    if V**k > _MAX_TUPLES:
        raise ValueError(f"k: V**k = {V**k} tuples exceeds {_MAX_TUPLES}")
    tuples = np.array(list(itertools.product(range(V), repeat=k)), dtype=np.intp).reshape(-1, k)
    T = tuples.shape[0]
    law = np.prod(p[tuples], axis=1)
    hit = np.zeros((T, V), dtype=bool)
    for j in range(k):
        hit[np.arange(T), tuples[:, j]] = True
    ti, yi = np.nonzero(hit)  # one variable per (tuple, token of the tuple): the flow's edges
    n = ti.size
    rows = np.concatenate([ti, T + yi])
    A = coo_matrix((np.ones(2 * n), (rows, np.concatenate([np.arange(n), np.arange(n)]))), shape=(T + V, n))
    res = linprog(
        -np.ones(n), A_ub=A.tocsr(), b_ub=np.concatenate([law, o]), bounds=(0, None), method="highs"
    )
    if res.status != 0:
        raise SolverFailure(f"coupling LP: {res.message}")
    return float(-res.fun)


@dataclass(frozen=True)
class MultiDraftCvxResult(Result):
    """Result of :func:`multidraft_frontier_cvxpy`.

    Attributes
    ----------
    acceptance : float
        :math:`\\alpha^*` of the verified target.
    target : ndarray, shape (V,)
    divergence : float
        :math:`D(o\\|q)` recomputed in float64 (<= eps).
    gap : float
        Certified duality gap (bound - acceptance), <= ``tol``.
    bound : float
        The float64 dual bound.
    solver : str
    attempts : tuple of (str, str)

    Symbols: q verifier, p drafter, o target. Source: Boyd & Vandenberghe, 5.2.
    """

    acceptance: float
    target: np.ndarray
    divergence: float
    gap: float
    bound: float
    solver: str
    attempts: tuple


def _gap(q, p, k, eps, name, sets, weights, value, lam0, nu0):
    def bound(lam, nu):
        return multidraft_dual_bound(q, p, k, eps, name, sets, weights, lam, nu)

    b, _ = _polish(bound, lam0, nu0, name)
    return b - value, b


def multidraft_frontier_cvxpy(
    target_probs, draft_probs, k, budget, divergence="kl", *, tol: float = 1e-6, solvers=None
) -> MultiDraftCvxResult:
    r"""Solve :math:`\max_o \min_A [2 - o(A) - (1-p(A))^k]` s.t. :math:`D(o\|q) \le \epsilon`.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,)
        V <= 12 (one cut per subset).
    k : int
    budget : float
    divergence : str
        One of :data:`cactus_theory.solvers._cvx.CVX_DIVERGENCES`.
    tol : float
        Feasibility (budget, simplex) and certified duality gap.
    solvers : sequence of str, optional

    Returns
    -------
    MultiDraftCvxResult

    Raises
    ------
    SolverFailure
        When no solver gives a feasible point with a certified gap <= ``tol``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: Boyd & Vandenberghe, 5.2; this toolkit's :mod:`cactus_theory.solvers._multidraft`.
    """
    import cvxpy as cp

    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 1:
        raise ValueError(f"target_probs: expected one row of shape (V,), got {q.shape}")
    k = as_count(k, "k")
    eps = as_budget(budget, "budget")
    name = choice(get_divergence(divergence).name, CVX_DIVERGENCES, "divergence")
    d = get_divergence(name)
    V = q.shape[0]
    S = all_subsets(V)
    c = 2.0 - miss_probability(S.astype(np.float64) @ p, k)
    o = cp.Variable(V, nonneg=True)
    t = cp.Variable()
    cuts = t <= c - S.astype(np.float64) @ o
    budget_con = _constraint(cp, o, q, name, min(eps, 1e6))
    cons = [cp.sum(o) == 1, cuts] + budget_con
    prob = cp.Problem(cp.Maximize(t), cons)
    attempts = []
    for solver, opts in _solver_attempts(
        SOLVERS_DEFAULT if solvers is None else solvers, others=solvers is None
    ):
        try:
            prob.solve(solver=solver, **opts)
        except Exception as exc:  # noqa: BLE001 - every failure is logged and the next solver tried
            attempts.append((solver, f"error: {type(exc).__name__}"))
            continue
        attempts.append((solver, str(prob.status)))
        if o.value is None or cuts.dual_value is None:
            continue
        x = np.clip(np.asarray(o.value, dtype=np.float64), 0.0, None)
        if name in ("kl", "chi2"):
            x = np.where(q > 0, x, 0.0)
        x = x / x.sum()
        D = float(d.unchecked(x, q))
        if D > eps:  # pull towards q until the budget holds (the divergence is convex on the segment)
            x, D = pull_towards_q(x, q, d, eps, 80)
        value = float(min_cut_acceptance(x, p, k))
        mu = np.clip(np.asarray(cuts.dual_value, dtype=np.float64), 0.0, None)
        if not mu.sum() > 0:
            continue
        lam0 = (
            float(np.atleast_1d(budget_con[-1].dual_value)[0])
            if budget_con[-1].dual_value is not None
            else 1.0
        )
        nu0 = float(np.atleast_1d(cons[0].dual_value)[0]) if cons[0].dual_value is not None else 0.0
        gap, b = _gap(q, p, k, eps, name, S, mu, value, lam0 / mu.sum(), -nu0 / mu.sum())
        if D <= eps and gap <= tol:
            return MultiDraftCvxResult(value, x, D, gap, b, solver, tuple(attempts))
        attempts[-1] = (solver, f"{prob.status}, gap {gap:.3g}")
    raise SolverFailure(f"multi-draft frontier (k={k}, eps={eps}, {name}): {attempts}")


SOLVERS_DEFAULT = ("CLARABEL", "SCS")


def certify_multidraft(target_probs, draft_probs, k, budget, divergence, target):
    r"""Certified duality gap of a candidate optimal target (e.g. the fast solver's).

    The dual weights are read off the taut string's KKT conditions: with slopes
    :math:`c_i = o_i/q_i` along the q/p order, :math:`w_i = \lambda(f'(c_{last}) - f'(c_i))`,
    :math:`\lambda = 1/(f'(c_{last}) - f'(c_{first}))`, and :math:`\mu` the decrements of w
    on the prefixes; :math:`(\lambda, \nu)` are then polished in float64.

    Returns
    -------
    gap : float
        :func:`multidraft_dual_bound` minus :math:`\alpha^*` (target); >= 0 up to rounding
        when the target is feasible, and small exactly when it is optimal.
    bound : float

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: as :func:`multidraft_frontier_cvxpy`.
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    o = np.asarray(target, dtype=np.float64)
    k = as_count(k, "k")
    name = choice(get_divergence(divergence).name, CVX_DIVERGENCES, "divergence")
    V = q.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.where(q > 0, np.inf, -2.0))
    key = np.where((q <= 0) & (p > 0), -1.0, key)
    order = np.argsort(-key, kind="stable")
    value = float(min_cut_acceptance(o, p, k))
    sup = order[q[order] > 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        fp = _derivative(o[sup] / q[sup], name)
    span = fp[-1] - fp[0]
    sets, weights = [np.ones(V, dtype=bool)], [1.0]
    lam0, nu0 = 1.0, 0.0
    if np.isfinite(span) and span > 0:
        lam0 = 1.0 / span
        w = np.clip(lam0 * (fp[-1] - fp), 0.0, 1.0)
        drops = np.clip(w[:-1] - w[1:], 0.0, None)
        idx = np.flatnonzero(drops > 0)
        if idx.size:
            sets, weights = [], []
            for i in idx:
                A = np.zeros(V, dtype=bool)
                A[sup[: i + 1]] = True
                sets.append(A)
                weights.append(drops[i])
        nu0 = -lam0 * fp[-1]
    gap, b = _gap(q, p, k, float(budget), name, np.array(sets), np.array(weights), value, lam0, nu0)
    return float(gap), float(b)
