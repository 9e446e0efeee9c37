r"""Optimal acceptance of k drafts: the min-cut value, its extremal sets, and the budgeted optimum.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k drafts at one position
drawn i.i.d. from p, S the drafted set, o the emitted distribution (a target), :math:`\epsilon`
a budget. Every function here is numpy float64; the vocabulary is the last axis.

1. The optimal acceptance of a target (max-flow/min-cut)
--------------------------------------------------------
A verifier of k drafts emits a token Y with law o and accepts when Y is one of the drafts.
Over all couplings of the draft tuple :math:`X = (X_1..X_k)` with :math:`Y \sim o`, the largest
:math:`P(Y \in S)` is a maximum flow (source -> tuples with capacity P(X = x), tuple -> each
of its tokens, token y -> sink with capacity :math:`o_y`), so by max-flow/min-cut

.. math:: \alpha^*(o) = \min_{A \subseteq V}\ \big[o(V \setminus A) + P(S \cap A \neq
          \emptyset)\big] = 2 - \max_{A} \big[o(A) + \varphi(p(A))\big],
          \qquad \varphi(t) = (1 - t)^k,

since :math:`P(S \cap A \ne \emptyset) = 1 - (1 - p(A))^k` for i.i.d. drafts.

**Theorem (ratio prefixes attain the minimum).** Sort the tokens by :math:`o_i/p_i`,
decreasing (:math:`o_i/0 = +\infty` for :math:`o_i > 0`). Some prefix of this order attains
the minimum; more precisely every superlevel set :math:`A_\lambda = \{i : o_i > \lambda p_i\}`
with :math:`\lambda = -\varphi'(p(A^*))` at a minimiser :math:`A^*` is a minimiser, and every
minimiser is such a set up to tokens with :math:`o_i = \lambda p_i`. So
:math:`\alpha^*(o) = 2 - \max_{0 \le m \le V} [O_m + \varphi(P_m)]` over the V + 1 prefixes
(:math:`O_m, P_m` the prefix sums of o and p in that order): one sort and two prefix sums,
O(V log V).

*Proof.* :math:`\varphi` is convex on [0, 1], so it is the supremum of its tangent lines:
:math:`\varphi(t) = \max_{\lambda} [c(\lambda) - \lambda t]` with the tangent at
:math:`t^*` attaining it (:math:`\lambda = -\varphi'(t^*) \ge 0`, one-sided at t = 1). Let
:math:`A^*` maximise :math:`g(A) = o(A) + \varphi(p(A))` and :math:`t^* = p(A^*)`. Then

.. math:: g(A^*) = o(A^*) - \lambda p(A^*) + c(\lambda)
          \le \max_A\,[o(A) - \lambda p(A)] + c(\lambda)
          = o(A_\lambda) - \lambda p(A_\lambda) + c(\lambda) \le g(A_\lambda),

the middle equality because :math:`\sum_{i \in A}(o_i - \lambda p_i)` is maximised by
taking exactly the positive terms, and the last inequality because
:math:`c(\lambda) - \lambda t \le \varphi(t)` for every t. So :math:`A_\lambda` is a
maximiser, and equality in the first inequality forces :math:`A^*` to hold every i with
:math:`o_i > \lambda p_i` and none with :math:`o_i < \lambda p_i`. :math:`\square` The proof
uses only the convexity of :math:`\varphi`: any draft-set law with
:math:`P(S \cap A = \emptyset) = \varphi(p(A))`, :math:`\varphi` convex, has the same
extremal family. With k = 1, :math:`\alpha^* = \sum_i \min(o_i, p_i)` (the prefix
:math:`\{o > p\}`); the threshold family :math:`\{o_i > t\}` (sorting by o alone) does
*not* attain the minimum in general (a test pins a counterexample).

2. The budgeted optimum
-----------------------
.. math:: F_k(\epsilon) = \max_{o \in \Delta_V} \alpha^*(o) \quad \text{s.t.}\quad
          D_f(o \| q) \le \epsilon

is a concave maximisation (:math:`\alpha^*` is a minimum of affine functions of o).

**Theorem (one path for every divergence).** Sort the tokens by :math:`q_i/p_i` decreasing
(tokens with q = 0 last). For :math:`M \in [1, M_0]`, :math:`M_0 = 2 - \alpha^*(q)`, let
:math:`o(M)` be the target whose prefix sums :math:`O_m`, as a function of
:math:`Q_m = q(\text{first } m)`, form the greatest convex minorant (the taut string) of the
points :math:`(0, 0)`, :math:`(Q_m, M - \varphi(P_m))` and :math:`(1, 1)`. Then for every
convex f with :math:`f'(\infty) = \infty` (KL, Pearson chi-square), and for every convex f
when q > 0, :math:`o(M)` solves the problem at :math:`\epsilon = D_f(o(M)\|q)` with
:math:`\alpha^*(o(M)) = 2 - M`; so :math:`F_k(\epsilon) = 2 - M(\epsilon)` with
:math:`M(\epsilon)` the root of the decreasing function :math:`D_f(o(M)\|q) = \epsilon`.

*Proof.* (i) Fix the q/p order and let :math:`\beta(o) = 2 - \max_m [O_m + \varphi(P_m)]`
(the minimum over its prefixes only), so :math:`\beta \ge \alpha^*`. :math:`\beta(o) \ge 2 - M`
is the set of linear constraints :math:`O_m \le b_m = M - \varphi(P_m)`, and minimising
:math:`\sum_i q_i f(o_i/q_i)` under upper bounds on the prefix sums is solved by the taut
string for every convex f: its KKT conditions read
:math:`f'(o_i/q_i) = -\nu - W_i/\lambda`, :math:`W_i` the summed multipliers of the binding
prefixes containing i, nonincreasing in i, so the slopes :math:`o_i/q_i` are nondecreasing
and constant between binding prefixes, which is the greatest convex minorant (whose slope
jumps only where it touches a constraint). (ii) :math:`o(M)` has :math:`o_i/p_i`
nonincreasing along the q/p order: inside a segment of the minorant :math:`o_i/p_i =
c\,q_i/p_i`; across a touching point m (token i ends at m, token j starts there),
:math:`o_i \ge b_m - b_{m-1}` and :math:`o_j \le b_{m+1} - b_m`, so by convexity of
:math:`\varphi`

.. math:: \frac{o_i}{p_i} \ge \frac{\varphi(P_m - p_i) - \varphi(P_m)}{p_i}
          \ge -\varphi'(P_m) \ge \frac{\varphi(P_m) - \varphi(P_m + p_j)}{p_j}
          \ge \frac{o_j}{p_j}.

So the q/p order is an o/p order and, by the first theorem, :math:`\alpha^*(o(M)) =
\beta(o(M)) = 2 - M`. (iii) Hence :math:`\max_{D \le \epsilon} \alpha^* \le
\max_{D \le \epsilon} \beta = 2 - M(\epsilon) = \alpha^*(o(M(\epsilon)))`: the bound is
attained. :math:`\square`

So the optimal targets of *every* divergence lie on one path :math:`o(M)` (the divergence
only picks the point), and the optimal verifier for the optimal target is the lossless
optimal k-draft verifier run against :math:`o(M)`. With k = 1 the minorant is the clip form
:math:`\mathrm{clip}(p, a q, b q)` of Mentored decoding.

3. Mass outside supp(q)
-----------------------
The path keeps every target on supp(q). That is no restriction for KL and Pearson chi-square
(mass off supp(q) costs :math:`+\infty`) nor where p puts no mass outside supp(q). Otherwise
(TV, squared Hellinger, Jensen-Shannon, reverse KL, Neyman chi-square: a finite cost
:math:`c = f'(\infty)` per unit of mass where q = 0, 0 for reverse KL) moving mass onto the
drafter's tokens outside supp(q) can pay. Let Z be the tokens with :math:`q = 0 < p`,
:math:`P_Z = p(Z)`, and s the target's mass on Z.

* *Within Z, mass proportional to p is optimal.* Replace o on Z by :math:`\tilde o_i = s
  p_i / P_Z`. For any set A, split :math:`A = A_1 \cup A_2`, :math:`A_2 \subseteq Z`:
  :math:`\tilde o(A) + \varphi(p(A)) = o(A_1) + s t / P_Z + \varphi(p(A_1) + t)` with
  :math:`t = p(A_2)` is convex in t, so its largest value is at :math:`A_2 = \emptyset` or
  :math:`A_2 = Z`, where :math:`\tilde o` equals o; hence :math:`\alpha^*(\tilde o) \ge
  \alpha^*(o)`, and the cost :math:`c\,s` is the same. Z acts as one token of drafter mass
  :math:`P_Z`.
* *For a fixed s the path is again a taut string.* The prefixes of the q/p order of supp(q),
  with or without Z, give the ceilings :math:`O_j \le M - \psi_s(P_j)`,
  :math:`\psi_s(t) = \max(\varphi(t), s + \varphi(t + P_Z))`, convex and decreasing; so
  (i)-(iii) above hold with :math:`\psi_s` for :math:`\varphi` and the string ending at
  :math:`(1, 1 - s)`: its o/p order is the q/p order with Z inserted, every o/p prefix is
  among the constraints, and :math:`\alpha^* = 2 - M`.
* *The best s.* The pairs (s, M) with a target of budget :math:`\le \epsilon` form a convex
  set (:math:`\alpha^*` is concave, D convex), so the least M is a convex function of s:
  :math:`F_k(\epsilon) = 2 - \min_s M_\epsilon(s)`, found by golden section over
  :math:`s \in [0, \min(1, \epsilon / c)]`, each :math:`M_\epsilon(s)` a root on its path.

At k = 1 this is the single-draft frontier (phase 2 of :mod:`cactus_theory.solvers._mentored`)
for every divergence, rows with zeros in q included (a test compares them).

**TV in closed form.** :math:`F_k(\epsilon) = \min(1, \alpha^*(q) + \epsilon)` for every
draft-set law and every q, zeros included, provided mass may move outside supp(q) (as here):
each affine piece of :math:`\alpha^*` has coefficients in {0, -1}, so :math:`\alpha^*(o) \le
\alpha^*(q) + TV(o, q)`; and re-routing :math:`\epsilon` of the rejected mass of an optimal
coupling for q onto a drafted token, wherever q puts it, moves o by at most
:math:`\epsilon` in TV and raises the acceptance by exactly :math:`\epsilon`. Restricted to
supp(q) it fails where the drafts land outside supp(q) (q = (1, 0), p = (0.1, 0.9), k = 2,
:math:`\epsilon = 0.3`: 0.19 on supp(q), 0.49 in all; tests pin both).

References
----------
Sun et al., "SpecTr", NeurIPS 2023 (arXiv 2310.15141), the optimal transport view of
multi-draft verification; Hu et al. 2025 (arXiv 2502.18779), the optimal acceptance of
i.i.d. drafts by a sort; Khisti et al. 2024 (arXiv 2410.18234); Barlow et al., *Statistical
Inference under Order Restrictions* (1972), the greatest convex minorant; Hao & Mou, ICLR
2026 (arXiv 2604.04987), Theorem 1 (the single-draft frontier).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validation import as_count, as_nonempty_values, as_prob_pair, as_probs
from ..divergences import get_divergence
from ._multidraft_path import miss_probability, multiplier_row, solve_row

__all__ = [
    "miss_probability",
    "min_cut_acceptance",
    "min_cut_set",
    "MultiDraftFrontier",
    "multidraft_frontier",
    "multidraft_target",
    "multidraft_dual_bound",
    "multidraft_multiplier_target",
]


def _ratio_order(o, p):
    """Token order by o/p decreasing (o/0 = inf for o > 0; tokens with o = p = 0 last)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(p > 0, o / np.where(p > 0, p, 1.0), np.where(o > 0, np.inf, -1.0))
    return np.argsort(-r, axis=-1)  # ties in o/p: any order (the theorem's sets are unions of tie groups)


def _prefix_objective(o, p, k, order):
    """``O_m + phi(P_m)`` for m = 0..V along ``order`` (shape batch + (V + 1,))."""
    os_ = np.take_along_axis(o, order, axis=-1)
    ps_ = np.take_along_axis(p, order, axis=-1)
    zero = np.zeros(o.shape[:-1] + (1,))
    cum_o = np.concatenate([zero, np.cumsum(os_, axis=-1)], axis=-1)
    P = np.concatenate([zero, np.cumsum(ps_, axis=-1)], axis=-1)
    return cum_o + miss_probability(P, k)


def min_cut_acceptance(emitted_probs, draft_probs, k):
    r"""The optimal acceptance :math:`\alpha^*(o)` of k i.i.d. drafts from p for a target o.

    .. math:: \alpha^*(o) = \min_{A \subseteq V} [o(V\setminus A) + 1 - (1 - p(A))^k]
              = 2 - \max_{0\le m\le V}[O_m + (1 - P_m)^k]

    over the prefixes of the o/p order (module docstring: the theorem and its proof). It is
    the largest probability, over every verifier whose emitted law is o, that the emitted
    token is one of the drafts; with o = q it is the acceptance of the optimal lossless
    k-draft verifier.

    Parameters
    ----------
    emitted_probs, draft_probs : array_like, shape (..., V)
        The target o and the drafter p (validated).
    k : int
        Number of drafts, >= 1.

    Returns
    -------
    ndarray, shape batch
        :math:`\alpha^*(o)` in [0, 1].

    Examples
    --------
    >>> round(float(min_cut_acceptance([0.5, 0.5], [0.9, 0.1], 1)), 12)  # sum min(o, p)
    0.6
    >>> round(float(min_cut_acceptance([0.5, 0.5], [0.9, 0.1], 2)), 12)  # 0.5 + 1 - 0.9^2
    0.69

    Symbols: q verifier, p drafter (``draft_probs``), o emitted. Source: Hu et al. 2025
    (arXiv 2502.18779); Sun et al., NeurIPS 2023 (arXiv 2310.15141).
    """
    o, p = as_prob_pair(emitted_probs, draft_probs, target_name="emitted_probs")
    k = as_count(k, "k")
    o, p = np.broadcast_arrays(o, p)
    vals = _prefix_objective(o, p, k, _ratio_order(o, p))
    return np.clip(2.0 - vals.max(axis=-1), 0.0, 1.0)


def min_cut_set(emitted_probs, draft_probs, k):
    r"""A minimising set of :math:`\alpha^*(o)`: the best prefix of the o/p order.

    Returns
    -------
    ndarray of bool, shape (..., V)
        The set A (tokens in A: True) with :math:`o(V\setminus A) + 1 - (1-p(A))^k =
        \alpha^*(o)`.

    Symbols: p drafter (``draft_probs``), o emitted. Source: as :func:`min_cut_acceptance`.
    """
    o, p = as_prob_pair(emitted_probs, draft_probs, target_name="emitted_probs")
    k = as_count(k, "k")
    o, p = np.broadcast_arrays(o, p)
    order = _ratio_order(o, p)
    m = np.argmax(_prefix_objective(o, p, k, order), axis=-1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(o.shape[-1]), o.shape), axis=-1)
    return ranks < m[..., None]


@dataclass(frozen=True)
class MultiDraftFrontier:
    r"""The k-draft frontier :math:`F_k(\epsilon)` of a batch of (q, p) rows.

    Attributes
    ----------
    eps : ndarray, shape (E,)
        Budgets.
    k : int
        Number of i.i.d. drafts.
    acceptance : ndarray, shape batch + (E,)
        :math:`\alpha^*` of the returned target, exact: the min-cut over the prefixes of its
        row's q/p order where it lies on supp(q) (an o/p order there, section 2 (ii)), else
        :func:`min_cut_acceptance`.
    divergence : ndarray, shape batch + (E,)
        :math:`D(o^*\|q)` of the returned target (<= eps).
    lossless : ndarray, shape batch
        :math:`\alpha^*(q)`, the optimal lossless k-draft acceptance (:math:`F_k(0)`).
    target : ndarray or None, shape batch + (E, V)
        The optimal targets :math:`o^*`, when requested.
    divergence_name : str

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: this module's theorems; Hao & Mou, ICLR 2026, Theorem 1 at k = 1.
    """

    eps: np.ndarray
    k: int
    acceptance: np.ndarray
    divergence: np.ndarray
    lossless: np.ndarray
    target: np.ndarray | None
    divergence_name: str


def multidraft_frontier(
    target_probs, draft_probs, k, eps, divergence="kl", *, return_target: bool = False
) -> MultiDraftFrontier:
    r"""The best acceptance of k i.i.d. drafts within a divergence budget, exactly.

    .. math:: F_k(\epsilon) = \max_{o} \alpha^*(o) \ \text{s.t.}\ D(o\|q) \le \epsilon

    Solved on the path :math:`o(M)` of the module docstring (one sort and one lower hull per
    row, O(V log V); then a bisection on M per budget whose evaluations read the hull's knots
    only, and one O(V) build of the target); where the divergence gives mass outside supp(q)
    a finite cost and p drafts there, a golden section over that mass (section 3). TV also
    has the closed form :math:`\min(1, \alpha^*(q) + \epsilon)`. At k = 1 it is
    :func:`cactus_theory.solvers._frontier.frontier`.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p (validated).
    k : int
        Number of drafts, >= 1.
    eps : float or array_like, shape (E,)
        Budgets >= 0.
    divergence : str or Divergence
        ``D(o || q)``, any of :data:`cactus_theory.divergences.DIVERGENCES` or a
        :func:`~cactus_theory.divergences.f_divergence`.
    return_target : bool
        Also return the maximisers.

    Returns
    -------
    MultiDraftFrontier

    Examples
    --------
    >>> q, p = [0.30, 0.35, 0.35], [0.05, 0.80, 0.15]
    >>> r = multidraft_frontier(q, p, 2, [0.0, 0.05], "tv")  # TV: min(1, alpha*(q) + eps)
    >>> [round(float(x), 6) for x in r.acceptance]
    [0.71, 0.76]

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: this module's theorems; Hao & Mou, ICLR 2026, Theorem 1 at k = 1.
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    q, p = np.broadcast_arrays(q, p)
    k = as_count(k, "k")
    d = get_divergence(divergence)
    e = as_nonempty_values(eps, "eps")
    if e.ndim != 1:
        raise ValueError(f"eps: expected a scalar or a 1-D array of budgets, got shape {e.shape}")
    batch, V = q.shape[:-1], q.shape[-1]
    qf, pf = q.reshape(-1, V), p.reshape(-1, V)
    solved = [solve_row(qr, pr, k, e, d) for qr, pr in zip(qf, pf, strict=True)]
    # alpha* of each target: by the prefixes of its row's q/p order on supp(q) (an o/p order
    # there), by a sort of its own o/p (min_cut_acceptance) where it has mass off supp(q)
    acc = np.array(
        [
            [float(min_cut_acceptance(o, pr, k)) if a is None else a for o, a in zip(t, accs)]
            for (t, accs, _), pr in zip(solved, pf)
        ]
    ).reshape(batch + (e.size,))
    targets = np.stack([np.stack(t) for t, _, _ in solved]).reshape(batch + (e.size, V))
    div = d.unchecked(targets, q[..., None, :])
    lossless = np.array([a for _, _, a in solved]).reshape(batch)  # alpha*(q), from the row's own sort
    return MultiDraftFrontier(e, k, acc, div, lossless, targets if return_target else None, d.name)


def multidraft_target(target_probs, draft_probs, k, budget, divergence="kl"):
    r"""The optimal target :math:`o^*` of :func:`multidraft_frontier` at one budget.

    Returns
    -------
    ndarray, shape (..., V)
        :math:`o^*`, a point of the path :math:`o(M)` with :math:`D(o^*\|q) \le` ``budget``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: as :func:`multidraft_frontier`.
    """
    r = multidraft_frontier(target_probs, draft_probs, k, [budget], divergence, return_target=True)
    return r.target[..., 0, :]


def multidraft_dual_bound(target_probs, draft_probs, k, eps, divergence, sets, weights, lam, nu) -> float:
    r"""A weak-duality upper bound on :math:`F_k(\epsilon)` (a certificate of optimality).

    For any weights :math:`\mu \ge 0`, :math:`\sum \mu_j = 1` on sets :math:`A_j`,
    :math:`\alpha^*(o) \le \sum_j \mu_j [2 - \varphi(p(A_j))] - \langle w, o\rangle` with
    :math:`w_i = \sum_{j: i \in A_j} \mu_j`, so for :math:`\lambda > 0`, real :math:`\nu`

    .. math:: F_k(\epsilon) \le \sum_j \mu_j [2 - \varphi(p(A_j))] + \nu + \lambda\epsilon
              + \sum_{q_i>0} \lambda q_i f^+\!\Big(\frac{-w_i - \nu}{\lambda}\Big)

    (plus :math:`+\infty` where some :math:`q_i = 0` has :math:`-w_i - \nu > \lambda
    f'(\infty)`), :math:`f^+(s) = \sup_{t\ge0}(st - f(t))`.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,)
    k : int
    eps : float
    divergence : str
        One of :data:`cactus_theory.solvers._cvx_certificate.CONJUGATE_DIVERGENCES`.
    sets : array_like of bool, shape (J, V)
    weights : array_like, shape (J,)
        Nonnegative; renormalised to sum 1.
    lam, nu : float

    Returns
    -------
    float
        The bound (``inf`` where the Lagrangian is unbounded).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target.
    Source: Boyd & Vandenberghe, Convex Optimization, 5.1 (weak duality).
    """
    from ._cvx_certificate import _support_terms

    q = as_probs(target_probs, "target_probs")
    p = as_probs(draft_probs, "draft_probs")
    k = as_count(k, "k")
    A = np.asarray(sets, dtype=bool)
    mu = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    if mu.sum() <= 0:
        raise ValueError("weights: must have a positive sum")
    mu = mu / mu.sum()
    w = mu @ A.astype(np.float64)
    C = float(mu @ (2.0 - miss_probability(A.astype(np.float64) @ p, k)))
    if not lam > 0 or not math.isfinite(nu):
        return math.inf
    return float(C + nu + lam * eps + _support_terms(q, -w, lam, nu, get_divergence(divergence).name))


def multidraft_multiplier_target(target_probs, draft_probs, k, lam, divergence="kl"):
    r"""The point of the k-draft frontier that maximises acceptance minus :math:`\lambda` times
    divergence.

    .. math:: o^*(\lambda) = \arg\max_o\ \alpha^*(o) - \lambda D(o\|q)

    On the path :math:`o(M)` (module docstring) :math:`\alpha^* = 2 - M` and D is convex in M
    (the inverse of the concave frontier), so the objective is concave in M and a
    golden-section search finds it. :math:`\lambda = \infty` gives q (the lossless optimum),
    :math:`\lambda = 0` the saturation point. By Lagrangian sufficiency (Everett 1963) every
    :math:`\lambda` is optimal for the divergence it spends, and across the nodes of a tree or
    the steps of a chain one :math:`\lambda` allocates any total budget optimally when the
    nodes' weights are held fixed (the per-node weights cancel).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
    k : int
    lam : float
        :math:`\lambda \ge 0` (acceptance per unit of divergence; ``inf`` allowed).
    divergence : str or Divergence

    Returns
    -------
    ndarray, shape (..., V)

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o target,
    :math:`\lambda` multiplier. Source: this module; H. Everett, Operations Research 11 (1963).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    q, p = np.broadcast_arrays(q, p)
    k = as_count(k, "k")
    lam = float(lam)
    if not lam >= 0:
        raise ValueError(f"lam: must be >= 0, got {lam}")
    d = get_divergence(divergence)
    V = q.shape[-1]
    rows = [
        multiplier_row(qr, pr, k, lam, d) for qr, pr in zip(q.reshape(-1, V), p.reshape(-1, V), strict=True)
    ]
    return np.stack(rows).reshape(q.shape)
