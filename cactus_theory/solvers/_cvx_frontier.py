r"""The cvxpy oracle for the frontier / Mentored-decoding problem (small V, tests only).

.. math:: \max_{\pi \in \Delta_V} \sum_x \min(p_x, \pi_x) \quad\text{s.t.}\quad
          D_f(\pi \| q) \le \epsilon

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`\pi` target,
:math:`\epsilon` budget. Solved over the whole simplex with no assumption on the shape of
:math:`\pi` (no clip form), so it checks :mod:`cactus_theory.solvers._mentored`'s derivation,
including q with zeros. It reuses the divergence constraints of
:mod:`cactus_theory.solvers._cvx`, reports the solver status, falls back from Clarabel to SCS
when a solver fails, verifies the answer (feasibility after clipping and renormalizing, the
divergence recomputed in float64, and a duality gap <= ``tol`` from a float64 dual bound:
:mod:`cactus_theory.solvers._cvx_certificate`) and raises :class:`~cactus_theory.solvers._cvx.SolverFailure`
instead of returning an unverified answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_budget, as_prob_pair, choice
from ..divergences import get_divergence
from ..results import Result
from ._cvx import CVX_DIVERGENCES, SOLVERS, SolverFailure, _constraint, solve_budgeted, solve_verified  # noqa: F401
from ._cvx_certificate import frontier_bound, recover_frontier

__all__ = ["FrontierCvxResult", "max_acceptance_cvxpy"]


@dataclass(frozen=True)
class FrontierCvxResult(Result):
    """Result of the cvxpy frontier oracle.

    Attributes
    ----------
    acceptance : float
        :math:`\\sum_x \\min(p_x, \\pi_x)` of the verified (clipped, renormalized) maximiser.
    target : ndarray, shape (V,)
        The maximiser :math:`\\pi`.
    divergence : float
        :math:`D(\\pi\\|q)` recomputed in float64.
    status : str
        cvxpy's status of the accepted solve.
    solver : str
        The solver whose answer was accepted.
    attempts : tuple of (str, str)
        Every (solver, status or error) tried.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023) for the problem; Hao & Mou, ICLR 2026, Theorem 1.
    """

    acceptance: float
    target: np.ndarray
    divergence: float
    status: str
    solver: str
    attempts: tuple


def max_acceptance_cvxpy(
    target_probs, draft_probs, budget, divergence="kl", *, tol: float = 1e-7, solvers=None
) -> FrontierCvxResult:
    r"""Solve :math:`\max \sum\min(p,\pi)` s.t. :math:`D(\pi\|q)\le\epsilon` with cvxpy.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,)
        Verifier q and drafter p (one row each).
    budget : float
        :math:`\epsilon \ge 0`.
    divergence : str
        One of :data:`cactus_theory.solvers._cvx.CVX_DIVERGENCES`.
    tol : float
        Verification tolerance on ``min(pi) >= -tol``, ``|sum pi - 1| <= tol``,
        ``D(pi||q) <= budget`` (exactly, after a pull towards q) and the duality gap (certificate of optimality,
        :func:`cactus_theory.solvers._cvx_certificate.certify_frontier`).
    solvers : sequence of str, optional
        Tried in order; default Clarabel (two option sets), SCS, then other installed solvers.

    Returns
    -------
    FrontierCvxResult

    Raises
    ------
    SolverFailure
        No solver returned a verified answer (the message lists every attempt).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023) for the problem; Hao & Mou, ICLR 2026, Theorem 1.
    """
    import cvxpy as cp

    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 1:
        raise ValueError(f"target_probs: expected one row of shape (V,), got {q.shape}")
    eps = as_budget(budget, "budget")
    name = choice(get_divergence(divergence).name, CVX_DIVERGENCES, "divergence")
    d = get_divergence(name)
    if eps == 0:
        return FrontierCvxResult(
            float(np.minimum(p, q).sum()), q.copy(), 0.0, "optimal", "none (budget 0 forces pi = q)", ()
        )
    x, div, status, solver, attempts = solve_budgeted(
        q,
        d,
        name,
        eps,
        lambda pi: cp.sum(cp.minimum(pi, p)),
        tol=tol,
        solvers=solvers,
        context=f"the frontier, budget={eps}, {name}",
        dual=lambda lam0, nu0: frontier_bound(q, p, eps, name, lam0, nu0),
        value=lambda x: float(np.minimum(p, x).sum()),
        recover=lambda mult: recover_frontier(q, p, name, *mult),
    )
    return FrontierCvxResult(float(np.minimum(p, x).sum()), x, div, status, solver, attempts)
