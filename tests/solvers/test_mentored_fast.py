"""The fast Mentored/frontier solver against the bisection reference, cvxpy, and itself.

``solve_mentored(..., method="fast")`` (the numpy default) finds each phase's root with a
safeguarded two-sided secant on the acceptance; ``method="bisect"`` is the fixed 64-step
bisection on log b kept as the reference (and the torch default). Both keep the feasible
end of their bracket, so they agree to the float resolution of the acceptance.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import pairs

from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.solvers._cvx import SolverFailure
from cactus_theory.solvers._cvx_frontier import max_acceptance_cvxpy
from cactus_theory.solvers._frontier import LARGEST_FINITE, frontier
from cactus_theory.solvers._mentored import METHODS, solve_mentored

SMOOTH = [d for d in DIVERGENCES if d != "tv"]
BUDGETS = [0.0, 1e-300, 1e-8, 1e-3, 0.05, 0.3, 2.0, 40.0, LARGEST_FINITE, math.inf]


def _acc_tol(eps):
    """How far two correct solvers may differ in acceptance at budget eps.

    Both stop at the float resolution of their parameter (fast brackets A to 2 ulps, bisect
    resolves log b to 2^-64 of its range) and both keep the end whose *computed* D is
    <= eps. The computed D carries an absolute rounding error dD ~ 1e-16 (1e-15 with
    margin), and near the SpS point D ~ c (A - A_SpS)^2 with c = D''/2 >= f''(1) / 2 >=
    1/8 (Hellinger's f''(1) = 1/4, Q <= 1 in D'' = f''(b)/Q(r>b) + f''(a)/Q(r<a)), so the
    feasible-as-computed end is fixed only to dD / D'(A) = dD / (2 sqrt(c eps)) < 1e-15 /
    sqrt(eps), and never worse than sqrt(dD / c) < 1e-7 (the region where the computed D
    is ~0: budgets below the rounding of D). 1e-12 elsewhere: the V-term prefix sums.
    """
    return 1e-12 + (min(1e-7, 1e-15 / math.sqrt(eps)) if 0 < eps < math.inf else 0.0)


def _both(q, p, eps, div, **kw):
    fast = solve_mentored(q, p, eps, div, method="fast", **kw)
    ref = solve_mentored(q, p, eps, div, method="bisect", **kw)
    return fast, ref


def _check_against_reference(q, p, eps, div):
    fast, ref = _both(q, p, eps, div)
    tol = _acc_tol(eps)
    np.testing.assert_allclose(fast.acceptance, ref.acceptance, rtol=0, atol=tol)
    np.testing.assert_allclose(fast.off_support_mass, ref.off_support_mass, rtol=0, atol=tol)
    # pi = clip(p, a q, b q) (+ m p off supp(q)) moves by ~|dA| in L1 per unit of A (b is
    # refined on log b wherever A cannot resolve it)
    assert np.abs(fast.target - ref.target).sum(-1).max() <= 10 * tol
    # the fast target is feasible as computed (tolerance as in test_mentored: renormalization
    # rounding times |f'| <= f'(b), which grows like 2b for chi-square)
    if math.isfinite(eps):
        D = float(get_divergence(div).unchecked(fast.target, q))
        b = float(fast.upper) if np.isfinite(fast.upper) and fast.upper < 1e6 else 1e6
        assert D <= eps + 1e-14 * (1 + b) * q.size + 1e-13
    return fast, ref


@pytest.mark.parametrize("div", SMOOTH)
@given(pair=pairs(1, 40), eps=st.sampled_from(BUDGETS))
def test_fast_agrees_with_bisection(div, pair, eps):
    """Random rows with zeros in q and p, one-hot and uniform rows, V from 1."""
    _check_against_reference(*pair, eps, div)


@pytest.mark.parametrize("div", SMOOTH)
def test_vocabularies_of_one_and_two(div):
    rows = [
        ([1.0], [1.0]),
        ([0.5, 0.5], [0.5, 0.5]),
        ([1.0, 0.0], [0.0, 1.0]),
        ([0.0, 1.0], [0.3, 0.7]),
        ([0.9, 0.1], [0.1, 0.9]),
        ([0.25, 0.75], [1.0, 0.0]),
        ([1 - 1e-12, 1e-12], [0.5, 0.5]),
    ]
    for q, p in rows:
        for eps in BUDGETS:
            _check_against_reference(np.array(q), np.array(p), eps, div)


def _tied_pair(rng, V):
    """Many equal ratios p/q: blocks of tokens share one ratio, some q and p zeros."""
    q = rng.dirichlet(np.ones(V))
    ratio = rng.choice([0.0, 0.5, 1.0, 2.0, 4.0], size=V)
    p = q * ratio
    p[rng.integers(V)] += 0.3  # not all tied
    q[rng.choice(V, V // 5, replace=False)] = 0.0  # and some mass off supp(q)
    return q / q.sum(), p / p.sum()


@pytest.mark.parametrize("div", SMOOTH)
def test_ties_do_not_matter(div):
    """The unstable sort orders tied ratios arbitrarily: permuting the vocabulary (which
    reorders the ties) changes nothing but the order of the target, and the result is the
    bisection's (whose sort is stable)."""
    rng = np.random.default_rng(7)
    for V in (5, 30, 300):
        q, p = _tied_pair(rng, V)
        perm = rng.permutation(V)
        for eps in (1e-3, 0.1, 1.0, LARGEST_FINITE):
            fast, _ = _check_against_reference(q, p, eps, div)
            moved = solve_mentored(q[perm], p[perm], eps, div, method="fast")
            # the same sums over the same sets in another order: prefix sums of up to V
            # terms of a distribution differ by at most ~V ulps (3e-14 at V = 300)
            assert abs(float(moved.acceptance) - float(fast.acceptance)) <= 1e-13
            np.testing.assert_allclose(moved.target, fast.target[perm], rtol=0, atol=1e-13)


@pytest.mark.parametrize("div", ["kl", "reverse_kl", "chi2", "js"])
def test_large_vocabulary_agrees_with_bisection(div):
    """V = 20,000 peaked rows (as a language model's), a budget grid: 1e-9 relative, the
    benchmark's check at V = 151,936."""
    rng = np.random.default_rng(3)
    g = rng.gumbel(size=20_000)
    q = np.exp(2 * g - (2 * g).max())
    p = np.exp(2 * (0.8 * g + 0.6 * rng.gumbel(size=g.size)))
    q, p = q / q.sum(), p / p.sum()
    eps = np.array([0.0, 1e-4, 0.01, 0.1, 0.5, 3.0])
    fast, ref = _both(q, p, eps, div, return_target=False, budget_axis=True)
    np.testing.assert_allclose(fast.acceptance, ref.acceptance, rtol=1e-9, atol=0)
    np.testing.assert_allclose(fast.divergence, ref.divergence, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(fast.upper, ref.upper, rtol=1e-9)


def test_tiny_tail_beyond_the_acceptance_resolution():
    """One token with q = 2.4e-135 carries b to ~1e67 for chi-square: A cannot resolve b
    there (A changes by 1e-68), so the fast path refines log b; b, D and pi are then the
    bisection's (found by hypothesis in test_rule_invariants)."""
    q = np.array([0.0, 1 / 9, 2.44590405e-135, 8 / 9])
    q /= q.sum()
    p = np.full(4, 0.25)
    fast, ref = _check_against_reference(q, p, 1.53125, "chi2")
    assert float(fast.upper) == pytest.approx(float(ref.upper), rel=1e-9)
    assert float(fast.divergence) == pytest.approx(1.53125, rel=1e-12)


@pytest.mark.parametrize("method", ["fast", "bisect"])
def test_end_of_phase_one_is_judged_at_r_max_itself(method):
    """Pinned counterexample (found by the comparison above): q = (64/65, 1/65), p = (0, 1),
    reverse KL within 40. At b = r_max = 65 the lower factor is a = 0 and D = inf, but
    exp(log 65) rounds 1 ulp away, where a ~ 2e-16 and D ~ 35: the end of phase 1 was
    judged within budget there and then returned at r_max, with D = inf > 40. The optimum
    is a = e^{-40 / (64/65)} q-ratio ~ 1e-18, acceptance 1 - 1e-18: 1 - 1 ulp in float64."""
    q, p = np.array([64 / 65, 1 / 65]), np.array([0.0, 1.0])
    sol = solve_mentored(q, p, 40.0, "reverse_kl", method=method)
    assert float(sol.divergence) <= 40.0
    assert float(get_divergence("reverse_kl").unchecked(sol.target, q)) <= 40.0
    # the float64 resolution of A near 1 (bisect on log b resolves b to ~2^-64 of log 65)
    assert 1 - 2e-15 <= float(sol.acceptance) < 1


@pytest.mark.parametrize("method", ["fast", "bisect"])
def test_lower_clip_never_underflows_to_zero(method):
    """Pinned counterexample (found by the comparison above): q = (0, 1, 7.4e-323),
    p = (1, 0, 0), reverse KL within 40 puts m ~ 1 off supp(q) and a ~ 2e-16, so a q
    underflowed to pi_x = 0 at q_x > 0, where KL(q||pi) is inf (the closed form said 36)."""
    q, p = np.array([0.0, 1.0, 7.4e-323]), np.array([1.0, 0.0, 0.0])
    for div in ("reverse_kl", "neyman_chi2"):
        sol = solve_mentored(q, p, 40.0, div, method=method)
        assert sol.target[2] > 0
        # the closed form's divergence is the target's (the stand-in adds < 1e-300)
        D = float(get_divergence(div).unchecked(sol.target, q))
        assert D <= 40.0 and D == pytest.approx(float(sol.divergence), rel=1e-12)


@pytest.mark.parametrize("div", SMOOTH)
def test_batch_rows_match_single_rows(div):
    """Batches use the generic binary search, one row uses np.searchsorted: same numbers."""
    rng = np.random.default_rng(5)
    q, p = rng.dirichlet(np.full(50, 0.3), size=3), rng.dirichlet(np.full(50, 0.3), size=3)
    q[1, :20] = 0.0
    q /= q.sum(-1, keepdims=True)
    eps = np.array([0.0, 0.02, 0.3, 3.0])
    batch = solve_mentored(q, p, eps, div, budget_axis=True, return_target=False)
    for i in range(3):
        one = solve_mentored(q[i], p[i], eps, div, budget_axis=True, return_target=False)
        # identical arithmetic on identical inputs, up to the searches' tie handling
        np.testing.assert_allclose(batch.acceptance[i], one.acceptance, rtol=0, atol=1e-15)


@pytest.mark.parametrize("div", ["kl", "reverse_kl", "hellinger"])
def test_fast_agrees_with_cvxpy(div):
    """An independent oracle on rows with zeros and ties (cvxpy verified to 1e-7 in budget)."""
    rng = np.random.default_rng(21)
    checked = 0
    for V in (2, 6, 12):
        q, p = _tied_pair(rng, V)
        for eps in (0.01, 0.3):
            fast = float(frontier(q, p, eps, div).acceptance[0])
            try:
                ref = max_acceptance_cvxpy(q, p, eps, div)
            except SolverFailure:
                continue
            tol = 1e-6 if ref.status == "optimal" else 1e-4  # as in test_frontier.py
            assert abs(fast - ref.acceptance) <= tol, (q, p, eps, fast, ref)
            checked += 1
    assert checked >= 4


def test_torch_auto_is_the_bisection_and_fast_matches_numpy():
    """torch defaults to the fixed-step bisection (no host synchronisation in the samplers,
    bit for bit the reference); method="fast" runs on torch too (float64: numpy's numbers)."""
    rng = np.random.default_rng(9)
    q, p = rng.dirichlet(np.ones(30), size=2), rng.dirichlet(np.ones(30), size=2)
    q[1, :10] = 0
    q /= q.sum(-1, keepdims=True)
    tq, tp = torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32)
    auto = solve_mentored(tq, tp, 0.1, "kl")
    ref = solve_mentored(tq, tp, 0.1, "kl", method="bisect")
    assert torch.equal(auto.acceptance, ref.acceptance) and torch.equal(auto.target, ref.target)
    for div in ("kl", "js"):
        t = solve_mentored(torch.tensor(q), torch.tensor(p), 0.1, div, method="fast")
        a = solve_mentored(q, p, 0.1, div, method="fast")
        np.testing.assert_allclose(t.acceptance.numpy(), a.acceptance, rtol=0, atol=1e-14)


def test_method_is_validated():
    assert METHODS == ("auto", "fast", "bisect")
    with pytest.raises(ValueError, match="method"):
        solve_mentored(np.array([0.5, 0.5]), np.array([0.3, 0.7]), 0.1, method="newton")
