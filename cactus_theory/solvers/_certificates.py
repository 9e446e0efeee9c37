r"""Acceptance certificates: the smallest drafter-verifier divergence that can force a rejection.

Setting (Sharma, "When Is a Draft Accepted? A Theory of Acceptance in Speculative Decoding",
arXiv 2606.30265): the verifier row q is fixed, the drafter drafts **greedily** (its argmax,
or its top-m children in a tree), and the acceptance test is deterministic with an accepted
set :math:`A(q)` that depends on q alone and is an *upper* level set of q; its complement, the
rejection set :math:`L(q) = V \setminus A(q)`, is a lower level set. A draft is rejected iff
every proposed child lies in L:

.. math:: \text{reject} \iff \operatorname{top}_m(p) \subseteq L(q)
          \iff \exists S \subseteq L,\ |S| = m:\ \min_{s \in S} p_s \ge \max_{a \in A} p_a

(ties counted as rejection: the set is closed, so the radius is an infimum attained at a tie).
The **certificate** is

.. math:: r_D(q) = \inf\{D(p, q) : p \in \Delta_V,\ \operatorname{top}_m(p) \subseteq L(q)\},

so every drafter with :math:`D(p, q) < r_D(q)` is accepted, whatever the tie-breaking. Both
KL directions are solved: ``"kl"`` is :math:`KL(p\|q) = \sum p \log(p/q)` and
``"reverse_kl"`` is :math:`KL(q\|p) = \sum q \log(q/p)`.

Exact solution (both directions). By the rearrangement inequality the optimal S is the m
tokens of L with the largest q (swapping two drafter values so that the larger p meets the
larger q lowers both objectives), and at the optimum the tokens whose constraint binds form
one pooled set :math:`P` = the k smallest-q tokens of S and the l largest-q tokens of A, all at
one level, the other tokens untouched up to a common scale. Minimising over p with
:math:`p_P` equal gives, with :math:`Q_P = \sum_{i\in P} q_i` and :math:`|P| = k + l`,

* :math:`KL(p\|q)`: :math:`p_i = \kappa q_i` off P, :math:`p_P = \kappa G_P` with
  :math:`G_P = (\prod_{i\in P} q_i)^{1/|P|}` (geometric mean), :math:`\kappa = 1/(1 - Q_P + |P| G_P)`,
  and the value :math:`-\log(1 - Q_P + |P|\, G_P)`;
* :math:`KL(q\|p)`: :math:`p_i = q_i` off P, :math:`p_P = \bar q_P = Q_P/|P|` (arithmetic
  mean), and the value :math:`\sum_{i\in P} q_i \log(q_i / \bar q_P)`.

A pooled set is feasible when the level c (:math:`G_P` or :math:`\bar q_P`) satisfies
:math:`q_s \ge c` for the un-pooled tokens of S and :math:`q_a \le c` for the un-pooled tokens
of A; the optimum is the smallest value over the feasible (k, l) (the optimum is itself one of
them, and each feasible one is a feasible p). That is an exact enumeration of
:math:`m\,|A|` candidates, vectorised by prefix sums. Examples at V = 2, greedy,
:math:`q = (q_1, q_2)`, :math:`q_1 > q_2`: :math:`KL(p\|q) = -\log(2\sqrt{q_1 q_2})` and
:math:`KL(q\|p) = \log 2 - H(q)`, both reached at :math:`p = (1/2, 1/2)`.

Symbols: q verifier (``target_probs``), p drafter, m children per node (``top_m``).

References
----------
A. Sharma, arXiv 2606.30265 (2026): rejection regions of deterministic acceptance criteria as
lower level sets of the target, exact KL certificates for greedy, relaxed, top-m, entropy and
tree acceptance. Csiszar (1975) for I-projections; Hardy, Littlewood & Polya, Inequalities,
Thm. 368 (rearrangement).
"""

from __future__ import annotations

import numpy as np

from .._validation import as_probs, choice, positive_int

__all__ = ["CERTIFICATE_DIVERGENCES", "rejection_radius", "rejection_radius_row"]

#: The two KL directions: ``"kl"`` = KL(p || q) (drafter first), ``"reverse_kl"`` = KL(q || p).
CERTIFICATE_DIVERGENCES = ("kl", "reverse_kl")


def _candidates(q_s: np.ndarray, q_a: np.ndarray, divergence: str) -> np.ndarray:
    """Values of every pooled set (k smallest of S, l largest of A); ``inf`` where infeasible.

    ``q_s`` ascending (the m largest-q rejected tokens), ``q_a`` descending (the accepted set).
    Returns an array ``[m, |A|]`` indexed by (k - 1, l - 1).
    """
    m, na = q_s.size, q_a.size
    k = np.arange(1, m + 1)[:, None]
    j = np.arange(1, na + 1)[None, :]
    n = k + j
    Q = np.cumsum(q_s)[:, None] + np.cumsum(q_a)[None, :]
    # the next un-pooled token of S (its smallest q) and of A (its largest q)
    next_s = np.append(q_s[1:], np.inf)[:, None]
    next_a = np.append(q_a[1:], -np.inf)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        if divergence == "kl":
            logs = np.cumsum(np.log(q_s))[:, None] + np.cumsum(np.log(q_a))[None, :]
            level = np.exp(logs / n)  # geometric mean; 0 if a pooled q is 0
            rest = np.maximum(1.0 - Q, 0.0) + n * level
            value = np.where(rest > 0, -np.log(np.where(rest > 0, rest, 1.0)), np.inf)
        else:
            level = Q / n  # arithmetic mean
            xlogx = lambda x: np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)
            ent = np.cumsum(xlogx(q_s))[:, None] + np.cumsum(xlogx(q_a))[None, :]
            value = np.where(Q > 0, ent - Q * np.log(np.where(Q > 0, level, 1.0)), 0.0)
    feasible = (next_s >= level) & (next_a <= level)
    return np.where(feasible, np.maximum(value, 0.0), np.inf)


def rejection_radius_row(target_probs, accept_mask, top_m: int = 1, divergence: str = "kl") -> float:
    r"""The certificate :math:`r_D(q)` of one verifier row for a given accepted set.

    Parameters
    ----------
    target_probs : array_like, shape (V,)
        Verifier row q.
    accept_mask : array_like of bool, shape (V,)
        The accepted set :math:`A(q)`: True where a drafted token would be accepted. It must be
        an upper level set of q (every accepted token has q at least that of every rejected
        one); the deterministic rules' sets are (greedy, relaxed top-K, TAS).
    top_m : int
        Children the drafter proposes (its top m); 1 for a chain with greedy drafting.
    divergence : {"kl", "reverse_kl"}
        :math:`KL(p\|q)` or :math:`KL(q\|p)`.

    Returns
    -------
    float
        The infimum of D over drafters whose top m are all rejected: 0 when A is empty (every
        draft is rejected), ``inf`` when fewer than m tokens are rejected (no rejection possible)
        or when no such drafter has finite divergence.

    Symbols: q verifier (``target_probs``), p drafter, m children (``top_m``).
    """
    q = as_probs(target_probs, "target_probs")
    if q.ndim != 1:
        raise ValueError(f"target_probs: expected one row of shape (V,), got shape {q.shape}")
    mask = np.asarray(accept_mask)
    if mask.shape != q.shape or mask.dtype != bool:
        raise ValueError(
            f"accept_mask: expected a bool array of shape {q.shape}, got {mask.dtype} {mask.shape}"
        )
    m = positive_int(top_m, "top_m")
    choice(divergence, CERTIFICATE_DIVERGENCES, "divergence")
    q_a = np.sort(q[mask])[::-1]
    q_l = np.sort(q[~mask])
    if q_a.size and q_l.size and q_l[-1] > q_a[-1]:
        raise ValueError(
            "accept_mask: not an upper level set of target_probs (a rejected token has larger q)"
        )
    if q_a.size == 0:
        return 0.0
    if q_l.size < m:
        return float("inf")
    q_s = q_l[-m:]  # ascending: the m largest-q rejected tokens
    if q_s[0] >= q_a[0]:
        return 0.0
    return float(_candidates(q_s, q_a, divergence).min())


def rejection_radius(target_probs, accept_mask, top_m: int = 1, divergence: str = "kl") -> np.ndarray:
    r"""Row-wise :func:`rejection_radius_row` over a batch ``[..., V]`` (float64 ``[...]``).

    Parameters
    ----------
    target_probs : array_like, shape (..., V)
        Verifier rows q.
    accept_mask : array_like of bool, shape (..., V)
        The accepted set of each row (an upper level set of that row).
    top_m : int
        Children proposed per node (the drafter's top m).
    divergence : {"kl", "reverse_kl"}
        :math:`KL(p\|q)` or :math:`KL(q\|p)`.

    Returns
    -------
    numpy.ndarray, shape (...)
        The certificate of every row.
    """
    q = as_probs(target_probs, "target_probs")
    mask = np.asarray(accept_mask)
    if mask.shape != q.shape:
        raise ValueError(f"accept_mask: shape {mask.shape} differs from target_probs' {q.shape}")
    flat_q, flat_m = q.reshape(-1, q.shape[-1]), mask.reshape(-1, q.shape[-1])
    out = np.array([rejection_radius_row(r, a, top_m, divergence) for r, a in zip(flat_q, flat_m)])
    return out.reshape(q.shape[:-1])
