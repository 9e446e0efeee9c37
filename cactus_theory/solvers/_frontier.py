r"""The optimal frontier: the best acceptance any single-draft rule can reach within a budget.

For any single-draft scheme whose emitted distribution is o, the acceptance probability is at
most :math:`\sum_x \min(p_x, o_x)` (Theorem 1: the drafted token is emitted when accepted, and
the coupling inequality bounds :math:`P(\text{emit} = \text{draft})`). Hence

.. math:: F(\epsilon) = \max_{o\in\Delta_V} \sum_x \min(p_x, o_x)
          \quad\text{s.t.}\quad D(o\|q) \le \epsilon

bounds the acceptance of every rule whose emitted distribution lies within :math:`\epsilon`
of the verifier, and Mentored decoding attains it. :math:`F(\infty) = 1` (every o is
admitted, :math:`o = p` included); over distributions of finite divergence the supremum is
reached at the saturation budget. It is exactly the Mentored-decoding
problem, so this module shares :func:`cactus_theory.solvers._mentored.solve_mentored`
(one sort per row, a scalar root per budget; V = 151,936 in ~25 ms) and adds validation, the
budget grid and the inverse (the least divergence that reaches an acceptance level).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`\epsilon` budget,
o (or :math:`\pi`) an emitted distribution. :math:`F` is concave and nondecreasing in
:math:`\epsilon`, :math:`F(0) = \sum\min(p,q)` (SpS); over finite budgets it saturates
(at the saturation budget) at 1 when :math:`D(p\|q) < \infty`, or at :math:`p(q > 0)` for
divergences that forbid mass off supp(q) (KL, Pearson chi-square).

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 1; Tran-Thien (2023) for the problem;
Yin et al., NeurIPS 2024 (arXiv 2411.00841) for the TV trade-off :math:`a - a_{SpS} \le TV`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._search import bisect_elementwise
from .._validation import as_count, as_nonempty_values, as_prob_pair
from ..divergences import get_divergence
from ..results import Result
from ._mentored import _solve_checked, solve_mentored

#: The largest finite budget: the frontier's supremum over distributions of finite divergence.
LARGEST_FINITE = float(np.finfo(np.float64).max)

__all__ = [
    "FrontierGrid",
    "frontier",
    "frontier_curve",
    "saturation_budget",
    "min_divergence_for_acceptance",
]


@dataclass(frozen=True)
class FrontierGrid(Result):
    r"""The frontier of a batch of (q, p) pairs at a grid of budgets.

    Attributes
    ----------
    eps : ndarray, shape (E,)
        Budgets.
    acceptance : ndarray, shape batch + (E,)
        :math:`F(\epsilon)`.
    divergence : ndarray, shape batch + (E,)
        :math:`D(\pi^*\|q)` of the maximiser (< eps once the frontier has saturated).
    target : ndarray or None, shape batch + (E, V)
        The maximisers, when requested.
    divergence_name : str
        The divergence.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """

    eps: np.ndarray
    acceptance: np.ndarray
    divergence: np.ndarray
    target: np.ndarray | None
    divergence_name: str


def frontier(target_probs, draft_probs, eps, divergence="kl", *, return_target: bool = False) -> FrontierGrid:
    r"""The optimal acceptance :math:`F(\epsilon)` for every budget in ``eps``.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p (validated; rows renormalized in float64).
    eps : float or array_like, shape (E,)
        Budgets >= 0 (``inf`` allowed).
    divergence : str
        One of :data:`cactus_theory.divergences.DIVERGENCES`; ``D(o || q)`` with o first.
    return_target : bool
        Also return the maximisers (batch x E x V floats).

    Returns
    -------
    FrontierGrid
        ``acceptance`` has shape ``batch + (E,)`` (``E = 1`` for a scalar ``eps``).

    Examples
    --------
    >>> q, p = [0.30, 0.35, 0.35], [0.05, 0.80, 0.15]
    >>> r = frontier(q, p, [0.0, 0.1], "tv")      # TV: min(1, sum min(p, q) + eps)
    >>> [round(float(x), 6) for x in r.acceptance]
    [0.55, 0.65]

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    d = get_divergence(divergence)
    e = as_nonempty_values(eps, "eps")  # non-empty, no NaN, each >= 0
    if e.ndim != 1:
        raise ValueError(f"eps: expected a scalar or a 1-D array of budgets, got shape {e.shape}")
    # validated above: the solver is entered without a second validation pass
    sol = _solve_checked(q, p, e, d, return_target, True, "auto")
    return FrontierGrid(
        e,
        np.asarray(sol.acceptance),
        np.asarray(sol.divergence),
        None if sol.target is None else np.asarray(sol.target),
        d.name,
    )


def saturation_budget(target_probs, draft_probs, divergence="kl") -> np.ndarray:
    r"""The least budget at which the frontier reaches its maximum :math:`F(\infty)`.

    That is :math:`D(\pi\|q)` of the maximiser over distributions of *finite* divergence
    (finite even when :math:`D(p\|q) = \infty`: for KL it is the divergence of
    :math:`\max(p, aq)` on supp(q)). An infinite budget admits :math:`\pi = p` itself
    (acceptance 1, divergence possibly ``inf``).

    Returns
    -------
    ndarray, shape batch

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    sol = solve_mentored(q, p, LARGEST_FINITE, get_divergence(divergence), return_target=False)
    return np.asarray(sol.divergence)


def frontier_curve(target_probs, draft_probs, divergence="kl", n_points: int = 65):
    r"""The frontier of one (q, p) pair on a budget grid from 0 to its saturation budget.

    Returns
    -------
    eps, acceptance : ndarray, shape (n_points,)
        A grid (quadratic spacing: dense near 0, where :math:`F` is steep) and :math:`F`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    if int(n_points) != n_points or n_points < 2:
        raise ValueError(f"n_points: must be an integer >= 2, got {n_points}")
    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim != 1:
        raise ValueError(f"target_probs: expected one row of shape (V,), got {q.shape}")
    top = float(saturation_budget(q, p, divergence))
    grid = top * np.linspace(0.0, 1.0, int(n_points)) ** 2
    return grid, frontier(q, p, grid, divergence).acceptance


def min_divergence_for_acceptance(
    target_probs, draft_probs, acceptance, divergence="kl", *, steps: int = 100
) -> np.ndarray:
    r"""The inverse frontier: :math:`\min\{\epsilon : F(\epsilon) \ge A\}` per row.

    ``+inf`` where A exceeds :math:`F(\infty)` (no distribution within any finite budget, e.g.
    KL when A > p(q > 0)); 0 where :math:`A \le \sum\min(p, q)`. Computed by bisection on
    :math:`\epsilon` over :math:`[0, \text{saturation budget}]` (F is nondecreasing).

    Parameters
    ----------
    acceptance : float or array broadcastable to the batch shape
        Target acceptance levels in [0, 1].

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    steps = as_count(steps, "steps", minimum=1)
    q, p = as_prob_pair(target_probs, draft_probs)
    d = get_divergence(divergence)
    A = np.asarray(acceptance, dtype=np.float64)
    if np.any(~np.isfinite(A)) or np.any((A < 0) | (A > 1)):
        raise ValueError("acceptance: must lie in [0, 1]")
    A = np.broadcast_to(A, q.shape[:-1]).astype(np.float64)
    full = solve_mentored(q, p, LARGEST_FINITE, d, return_target=False)
    lo = np.zeros(q.shape[:-1])
    hi = np.asarray(full.divergence, dtype=np.float64) * np.ones(q.shape[:-1])
    reach = np.asarray(full.acceptance) >= A

    def short(eps):  # F(eps) < A (NaN too): the answer lies above eps
        return ~(np.asarray(solve_mentored(q, p, eps, d, return_target=False).acceptance) >= A)

    hi = bisect_elementwise(np, short, lo, hi, steps)[1]
    sps = np.minimum(p, q).sum(-1) >= A
    return np.where(reach, np.where(sps, 0.0, hi), np.inf)
