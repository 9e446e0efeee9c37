r"""The optimal lossless coupling of a draft-set law with the verifier: a linear programme.

For a law P over draft sets S (the distinct tokens drafted at a node) and the verifier q, a
lossless verifier that emits x in S given S with mass :math:`\pi(S, x)` attains the
acceptance :math:`\sum_{S, x \in S} \pi(S, x)`; the largest is the linear programme

.. math::
    \max_{\pi \ge 0} \sum_{S}\sum_{x \in S} \pi(S, x) \quad \text{s.t.}\quad
    \sum_{x \in S} \pi(S, x) \le P(S)\ \forall S, \qquad \sum_{S \ni x} \pi(S, x) \le q(x)\ \forall x,

a bipartite flow (sets to tokens) whose value is, by max-flow/min-cut,
:math:`\min_A\, [q(V \setminus A) + P(S \cap A \neq \emptyset)]`. Given any feasible
:math:`\pi`, emitting x with probability :math:`\pi(S, x)/P(S)` and otherwise a token from
:math:`\mathrm{normalize}(q - A)`, :math:`A(x) = \sum_S \pi(S, x)`, emits exactly q
(SpecTr's optimal transport with membership cost, arXiv 2310.15141, section 3; Hu et al.,
arXiv 2502.18779). Solved by HiGHS through :func:`scipy.optimize.linprog`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SetCoupling", "optimal_set_coupling"]


@dataclass(frozen=True)
class SetCoupling:
    """The LP's solution.

    Attributes
    ----------
    sets : list of tuple of int
        The draft sets (sorted token tuples).
    set_probs : ndarray, shape (n_sets,)
    accept_mass : list of ndarray
        :math:`\\pi(S, x)` for the tokens of each set, in the set's order.
    accepted : ndarray, shape (V,)
        :math:`A(x) = \\sum_S \\pi(S, x)`.
    value : float
        The optimal acceptance :math:`\\sum A`.
    """

    sets: list
    set_probs: np.ndarray
    accept_mass: list
    accepted: np.ndarray
    value: float


def optimal_set_coupling(target_probs, sets, set_probs) -> SetCoupling:
    r"""Solve the LP of the module docstring for one node.

    Parameters
    ----------
    target_probs : array, shape (V,)
        q.
    sets : list of tuple of int
        Draft sets (e.g. from :func:`cactus_theory.drafts.draft_set_law`).
    set_probs : array, shape (len(sets),)
        Their probabilities.

    Returns
    -------
    SetCoupling
        The flow clipped to its constraints (HiGHS' feasibility tolerance, about 1e-9, is
        removed by scaling each set's and each token's flow down to its capacity).
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    q = np.asarray(target_probs, dtype=np.float64)
    probs = np.asarray(set_probs, dtype=np.float64)
    v = q.size
    rows, cols, owner, token = [], [], [], []
    var = 0
    for s, toks in enumerate(sets):
        for x in toks:
            rows += [s, len(sets) + x]
            cols += [var, var]
            owner.append(s)
            token.append(x)
            var += 1
    if var == 0:
        return SetCoupling(list(sets), probs, [np.zeros(0) for _ in sets], np.zeros(v), 0.0)
    a_ub = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(sets) + v, var)).tocsr()
    b_ub = np.concatenate([probs, q])
    res = linprog(-np.ones(var), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"optimal_set_coupling: linprog failed ({res.message})")
    flow = np.maximum(res.x, 0.0)
    owner = np.asarray(owner)
    token = np.asarray(token)
    # remove the solver's feasibility slack: scale each set's, then each token's, flow to capacity
    per_set = np.bincount(owner, flow, minlength=len(sets))
    scale = np.where(per_set > probs, probs / np.where(per_set > 0, per_set, 1.0), 1.0)
    flow = flow * scale[owner]
    per_tok = np.bincount(token, flow, minlength=v)
    scale = np.where(per_tok > q, q / np.where(per_tok > 0, per_tok, 1.0), 1.0)
    flow = flow * scale[token]
    accepted = np.bincount(token, flow, minlength=v)
    masses, start = [], 0
    for toks in sets:
        masses.append(flow[start : start + len(toks)])
        start += len(toks)
    return SetCoupling(list(sets), probs, masses, accepted, float(flow.sum()))
