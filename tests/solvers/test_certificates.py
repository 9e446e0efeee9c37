"""Acceptance certificates (solvers/_certificates.py, analysis/certificates.py).

The closed form is checked against two independent oracles: cvxpy's convex programs, one for
each choice of the rejected children S (all subsets enumerated, so the lemma "S = the m
rejected tokens of largest q" is not used), and scipy's SLSQP from random starts on the
non-convex problem itself; and against random drafters (no rejected drafter below the radius).
"""

from __future__ import annotations

import itertools
import math

import cvxpy as cp
import numpy as np
import pytest
from scipy.optimize import minimize

from cactus_theory.analysis import acceptance_certificate, accepted_set
from cactus_theory.divergences import get_divergence
from cactus_theory.solvers._certificates import rejection_radius, rejection_radius_row

KL = get_divergence("kl")


def _cvx_oracle(q, mask, m, divergence):
    """min D over p with min_S p >= max_A p, for every S of m rejected tokens (convex each)."""
    A, L = np.flatnonzero(mask), np.flatnonzero(~mask)
    best = math.inf
    for S in itertools.combinations(L, m):
        p, t = cp.Variable(q.size, nonneg=True), cp.Variable()
        cons = [cp.sum(p) == 1] + [p[s] >= t for s in S] + [p[a] <= t for a in A]
        obj = cp.sum(cp.rel_entr(p, q)) if divergence == "kl" else cp.sum(cp.rel_entr(q, p))
        prob = cp.Problem(cp.Minimize(obj), cons)
        prob.solve(solver="CLARABEL")
        if prob.value is not None:
            best = min(best, float(prob.value))
    return best


def _rejected(p, mask, m):
    """Greedy top-m drafting is rejected: the m largest p (ties toward rejection) avoid A."""
    kth = np.sort(p)[::-1][m - 1]
    return np.sum(p[~mask] >= kth - 1e-12) >= m and p[mask].max() <= kth + 1e-12


def _slsqp_oracle(q, mask, m, divergence, rng, starts=6):
    """min D over p with min_S p >= max_A p: SLSQP from random starts, for every S of m rejected
    tokens (a local optimiser, so it can only come out at or above the infimum)."""
    A, L = np.flatnonzero(mask), np.flatnonzero(~mask)
    best = math.inf
    eps = 1e-300
    f = (
        (lambda x: float(np.sum(x * np.log(np.maximum(x, eps) / q))))
        if divergence == "kl"
        else (lambda x: float(np.sum(q * np.log(q / np.maximum(x, eps)))))
    )
    for S in itertools.combinations(L, m):
        cons = [{"type": "eq", "fun": lambda x: np.sum(x) - 1.0}]
        cons += [{"type": "ineq", "fun": lambda x, s=s, a=a: x[s] - x[a]} for s in S for a in A]
        for _ in range(starts):
            x0 = rng.dirichlet(np.ones(q.size))
            res = minimize(f, x0, method="SLSQP", bounds=[(1e-12, 1.0)] * q.size, constraints=cons)
            x = res.x / res.x.sum()
            if res.success and all(x[s] >= x[a] - 1e-9 for s in S for a in A):
                best = min(best, f(x))
    return best


def _instances(rng, n):
    rules = [("greedy", {}), ("relaxed-topk", {"relaxed_topk": 3, "relaxed_delta": 0.3}), ("tas", {})]
    for i in range(n):
        V = int(rng.integers(3, 7))
        q = rng.dirichlet(np.full(V, rng.choice([0.4, 1.0, 3.0])))
        rule, kw = rules[i % 3]
        mask = accepted_set(q, rule, **kw)
        n_rej = int((~mask).sum())
        if n_rej == 0:
            continue
        m = int(rng.integers(1, min(3, n_rej) + 1))
        yield q, mask, m, rule, kw


def test_hand_checked_two_and_three_tokens():
    # V = 2, greedy: the closest rejected drafter is the tie p = (1/2, 1/2)
    q = np.array([0.8, 0.2])
    assert acceptance_certificate(q) == pytest.approx(-math.log(2 * math.sqrt(0.8 * 0.2)), abs=1e-15)
    assert acceptance_certificate(q, divergence="reverse_kl") == pytest.approx(
        math.log(2) + 0.8 * math.log(0.8) + 0.2 * math.log(0.2), abs=1e-15
    )
    # V = 3, greedy, q = (.6, .3, .1): tokens 0 and 1 pooled at kappa * sqrt(.18), token 2 at
    # kappa * .1 (KL(p||q)); pooled at their mean .45, token 2 untouched (KL(q||p))
    q = np.array([0.6, 0.3, 0.1])
    G = math.sqrt(0.18)
    kappa = 1 / (2 * G + 0.1)
    p = np.array([kappa * G, kappa * G, kappa * 0.1])
    assert acceptance_certificate(q) == pytest.approx(float(KL(p, q)), abs=1e-14)
    assert acceptance_certificate(q) == pytest.approx(-math.log(0.1 + 2 * G), abs=1e-15)
    p = np.array([0.45, 0.45, 0.1])
    assert acceptance_certificate(q, divergence="reverse_kl") == pytest.approx(float(KL(q, p)), abs=1e-14)


@pytest.mark.parametrize("divergence", ["kl", "reverse_kl"])
def test_closed_form_matches_cvxpy_and_slsqp(divergence):
    rng = np.random.default_rng(20260629)
    worst_cvx = worst_slsqp = 0.0
    for q, mask, m, _rule, _kw in itertools.islice(_instances(rng, 8), 8):
        r = rejection_radius_row(q, mask, m, divergence)
        c = _cvx_oracle(q, mask, m, divergence)
        s = _slsqp_oracle(q, mask, m, divergence, rng)
        worst_cvx = max(worst_cvx, abs(r - c))
        # SLSQP is a local method on a non-convex set: it can only stay above the infimum
        assert s >= r - 1e-9  # 1e-9: the constraint slack allowed in the SLSQP point above
        worst_slsqp = max(worst_slsqp, s - r)
    # Clarabel's default tolerances (1e-8 gap and feasibility) give objective errors around
    # 1e-7 on these small problems
    assert worst_cvx < 1e-6
    # SLSQP's default ftol is 1e-6: its best of 6 starts per S lands within 1e-5 of the infimum
    assert worst_slsqp < 1e-5


def test_no_rejected_drafter_below_the_radius():
    rng = np.random.default_rng(7)
    for q, mask, m, _rule, _kw in itertools.islice(_instances(rng, 9), 9):
        for divergence in ("kl", "reverse_kl"):
            r = rejection_radius_row(q, mask, m, divergence)
            P = rng.dirichlet(np.full(q.size, 0.7), size=1500)
            rej = np.array([_rejected(p, mask, m) for p in P])
            if not rej.any():
                continue
            d = KL(P[rej], q) if divergence == "kl" else KL(np.broadcast_to(q, P[rej].shape), P[rej])
            assert d.min() >= r - 1e-12  # 1e-12: float64 rounding of the two sums


def test_trees_and_relaxation_only_enlarge_the_certificate():
    rng = np.random.default_rng(3)
    Q = rng.dirichlet(np.full(8, 0.5), size=20)
    for divergence in ("kl", "reverse_kl"):
        g1 = acceptance_certificate(Q, divergence=divergence)
        g2 = acceptance_certificate(Q, top_m=2, divergence=divergence)
        g3 = acceptance_certificate(Q, top_m=3, divergence=divergence)
        assert np.all(g2 >= g1 - 1e-15) and np.all(g3 >= g2 - 1e-15)
        relaxed = acceptance_certificate(
            Q, "relaxed-topk", relaxed_topk=3, relaxed_delta=0.2, divergence=divergence
        )
        assert np.all(relaxed >= g1 - 1e-15)
        # delta = 0 (no ties in continuous random rows) is greedy verification
        same = acceptance_certificate(
            Q, "relaxed-topk", relaxed_topk=4, relaxed_delta=0.0, divergence=divergence
        )
        assert np.allclose(same, g1, rtol=0, atol=0)


def test_edge_cases():
    q = np.array([0.5, 0.3, 0.2])
    # every token accepted: no rejection possible
    assert rejection_radius_row(q, np.ones(3, bool)) == math.inf
    # nothing accepted: any drafter is rejected
    assert rejection_radius_row(q, np.zeros(3, bool)) == 0.0
    # a tie at the top: greedy (relaxed-topk K = 1, delta = 0) accepts both tied tokens, and
    # the cheapest rejection pools all three at the geometric mean
    assert acceptance_certificate(np.array([0.4, 0.4, 0.2])) == pytest.approx(
        -math.log(3 * (0.4 * 0.4 * 0.2) ** (1 / 3)), abs=1e-15
    )
    # the only rejected token has q = 0: KL(p||q) cannot put mass there, KL(q||p) can
    q0 = np.array([0.7, 0.3, 0.0])
    assert rejection_radius_row(q0, np.array([True, True, False]), 1, "kl") == math.inf
    # KL(q||p): pool token 2 with token 0 at their mean 0.35, token 1 (0.3) stays below it
    assert rejection_radius_row(q0, np.array([True, True, False]), 1, "reverse_kl") == pytest.approx(
        0.7 * math.log(2), abs=1e-15
    )
    assert np.isfinite(acceptance_certificate(q0, divergence="kl"))
    # batches keep their leading shape
    assert rejection_radius(np.full((2, 3, 4), 0.25), np.zeros((2, 3, 4), bool)).shape == (2, 3)


def test_bad_input_names_the_argument():
    q = np.array([0.6, 0.4])
    with pytest.raises(ValueError, match="rule"):
        acceptance_certificate(q, "sps")
    with pytest.raises(ValueError, match="top_m"):
        acceptance_certificate(q, top_m=0)
    with pytest.raises(ValueError, match="divergence"):
        acceptance_certificate(q, divergence="tv")
    with pytest.raises(ValueError, match="relaxed_delta"):
        acceptance_certificate(q, "relaxed-topk", relaxed_topk=2, relaxed_delta=-0.1)
    with pytest.raises(ValueError, match="relaxed_topk"):
        acceptance_certificate(q, "relaxed-topk", relaxed_topk=0)
    with pytest.raises(ValueError, match="target_probs"):
        acceptance_certificate(np.array([0.6, 0.6]))
    with pytest.raises(ValueError, match="accept_mask"):
        rejection_radius_row(q, np.array([False, True]))  # a lower, not an upper, level set
    with pytest.raises(ValueError, match="accept_mask"):
        rejection_radius_row(q, np.array([1, 0]))
