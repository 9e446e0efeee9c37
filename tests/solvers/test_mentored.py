"""Mentored decoding: the exact solver's structure, budget, edge cases, and the rule."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import pairs

from cactus_theory.analysis.one_step import acceptance_rate, emitted_distribution
from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.rules import get_rule
from cactus_theory.solvers._frontier import LARGEST_FINITE, frontier
from cactus_theory.solvers._mentored import mentored_target, slope_at_infinity, solve_mentored

DIVS = list(DIVERGENCES)
SMOOTH = [d for d in DIVS if d != "tv"]


def test_slopes_at_infinity():
    expected = {
        "kl": math.inf,
        "reverse_kl": 0.0,
        "chi2": math.inf,
        "neyman_chi2": 1.0,
        "hellinger": 0.5,
        "tv": 0.5,
        "js": 0.5 * math.log(2),
    }
    for d, v in expected.items():
        assert slope_at_infinity(d) == pytest.approx(v, rel=1e-12)


@pytest.mark.parametrize("div", DIVS)
@given(pair=pairs(1, 40), eps=st.sampled_from([0.0, 1e-4, 0.01, 0.1, 1.0, 10.0, math.inf]))
def test_target_is_feasible_and_attains_the_reported_acceptance(div, pair, eps):
    q, p = pair
    sol = solve_mentored(q, p, eps, div)
    pi = sol.target
    d = get_divergence(div)
    assert np.all(pi >= 0) and abs(pi.sum() - 1) <= 1e-12  # V <= 40 terms, renormalized
    D = float(d.unchecked(pi, q))
    # The bisection keeps the feasible end. Recomputing D from pi (rounded to ~1 ulp per
    # entry by the renormalization) adds up to ~ulp * sum_x pi_x |d term/d pi_x|, and
    # |d term/d pi| = |f'(pi/q)| <= f'(b) grows like 2b for chi-square: hence the b factor.
    b = float(sol.upper) if np.isfinite(sol.upper) and sol.upper < 1e6 else 1e6
    assert D <= eps + 1e-14 * (1 + b) * q.size + 1e-13
    np.testing.assert_allclose(np.minimum(p, pi).sum(), sol.acceptance, rtol=0, atol=1e-12)
    assert sol.acceptance >= np.minimum(p, q).sum() - 1e-12  # >= SpS
    assert sol.acceptance <= 1 + 1e-12


@pytest.mark.parametrize("div", SMOOTH)
@given(pair=pairs(2, 40, zeros=False), eps=st.floats(1e-3, 2.0))
def test_budget_is_hit_unless_saturated(div, pair, eps):
    q, p = pair
    sol = solve_mentored(q, p, eps, div, return_target=False)
    sat = solve_mentored(q, p, LARGEST_FINITE, div, return_target=False)
    if sat.divergence > eps * (1 + 1e-6):
        # not saturated: the constraint is active. Bisection resolves b to ~1e-16; where
        # D(b) is steep (dD/db = Q(r>b)(f'(b) - f'(a)), e.g. reverse KL with a -> 0) that is
        # ~1e-8 in D but still ~1e-16 in acceptance (dA/db = Q(r>b) <= 1). So: D hits eps,
        # or the remaining slack buys no acceptance.
        more = solve_mentored(q, p, eps * (1 + 1e-6), div, return_target=False)
        assert (
            abs(sol.divergence - eps) <= 1e-9 * max(1.0, eps)
            or float(more.acceptance) - float(sol.acceptance) <= 1e-9
        )
    else:
        assert sol.acceptance == pytest.approx(float(sat.acceptance), abs=1e-12)


@pytest.mark.parametrize("div", SMOOTH)
@given(pair=pairs(2, 40), eps=st.floats(1e-3, 2.0))
def test_clip_form_on_the_support_of_q(div, pair, eps):
    """pi = clip(p, a q, b q) wherever q > 0, for every strictly convex divergence."""
    q, p = pair
    sol = solve_mentored(q, p, eps, div)
    # supp(q) as the solver sees it: ratios p/q representable in float64 (_OVERFLOW_NOTE)
    on = (q > 0) & (p < q * (np.finfo(float).max / 4))
    clip = np.clip(p, sol.lower * q, sol.upper * q)
    # pi is renormalized after the clip: the sum was 1 up to the bisection's rounding.
    np.testing.assert_allclose(sol.target[on], clip[on], rtol=0, atol=1e-12)
    assert 0 <= sol.lower <= 1 + 1e-12 and sol.upper >= 1 - 1e-12


@pytest.mark.parametrize("div", ["kl", "chi2"])
@given(pair=pairs(2, 40), eps=st.floats(1e-3, 5.0))
def test_no_mass_off_support_for_infinite_slope(div, pair, eps):
    q, p = pair
    sol = solve_mentored(q, p, eps, div)
    assert np.all(sol.target[q == 0] == 0)


def test_reverse_kl_puts_mass_off_the_support_of_q():
    """The clip form fails for a truncated q: pinned counterexample with a closed form.

    q = (1/2, 1/2, 0), p = (0.2, 0.2, 0.6), budget KL(q||pi) <= 1/2. Restricted to supp(q)
    (the clip form) the best acceptance is 0.4; putting m off the support with
    pi = ((1-m)/2, (1-m)/2, m) costs -log(1-m), so m = 1 - e^{-1/2} and acceptance 0.4 + m.
    """
    q = np.array([0.5, 0.5, 0.0])
    p = np.array([0.2, 0.2, 0.6])
    sol = solve_mentored(q, p, 0.5, "reverse_kl")
    m = 1 - math.exp(-0.5)
    np.testing.assert_allclose(sol.target, [(1 - m) / 2, (1 - m) / 2, m], rtol=0, atol=1e-12)
    assert sol.acceptance == pytest.approx(0.4 + m, abs=1e-12)
    assert float(sol.off_support_mass) == pytest.approx(m, abs=1e-12)
    clip_only = solve_mentored(q, p, 0.5, "kl")  # KL forbids that mass
    assert clip_only.acceptance == pytest.approx(0.4, abs=1e-12)


def test_narasimhan_parametrisation_for_kl():
    """accept n w.p. min(1, q_n / ((1 - alpha) p_n)) with b = 1/(1 - alpha) (Table 3)."""
    rng = np.random.default_rng(3)
    q, p = rng.dirichlet(np.ones(9)), rng.dirichlet(np.ones(9))
    sol = solve_mentored(q, p, 0.05, "kl")
    alpha = 1 - 1 / float(sol.upper)
    a_rule = np.minimum(1, sol.target / p)
    expected = np.where(p > sol.upper * q, q / ((1 - alpha) * p), np.minimum(1, sol.target / p))
    np.testing.assert_allclose(a_rule, expected, rtol=1e-12)


@given(pair=pairs(1, 30), div=st.sampled_from(DIVS))
def test_zero_budget_is_q_and_p_equal_q_accepts_all(pair, div):
    q, p = pair
    np.testing.assert_allclose(mentored_target(q, p, 0.0, div), q, rtol=0, atol=1e-14)
    sol = solve_mentored(q, q, 0.3, div)
    assert sol.acceptance == pytest.approx(1.0, abs=1e-12)


def test_vocabulary_of_one():
    for div in DIVS:
        sol = solve_mentored(np.array([1.0]), np.array([1.0]), 0.5, div)
        assert sol.acceptance == 1.0 and sol.target.tolist() == [1.0]


@pytest.mark.parametrize("div", DIVS)
def test_frontier_is_nondecreasing_and_concave(div):
    rng = np.random.default_rng(11)
    q, p = rng.dirichlet(np.full(20, 0.4)), rng.dirichlet(np.full(20, 0.4))
    q[:5] = 0
    q /= q.sum()
    eps = np.linspace(0, 2, 81)
    F = frontier(q, p, eps, div).acceptance
    # F is the value function of a convex problem in eps: concave and nondecreasing;
    # 1e-12 absorbs the bisection's rounding.
    assert np.all(np.diff(F) >= -1e-12)
    assert np.all(F[:-2] + F[2:] - 2 * F[1:-1] <= 1e-10)


def test_batch_and_budget_axis_agree_with_rows():
    rng = np.random.default_rng(5)
    q, p = rng.dirichlet(np.ones(15), size=4), rng.dirichlet(np.ones(15), size=4)
    eps = np.array([0.0, 0.02, 0.3, 3.0])
    batch = solve_mentored(q, p, eps, "js", budget_axis=True, return_target=False).acceptance
    for i in range(4):
        for j, e in enumerate(eps):
            one = solve_mentored(q[i], p[i], e, "js", return_target=False).acceptance
            assert batch[i, j] == pytest.approx(float(one), abs=1e-14)


@pytest.mark.parametrize("div", DIVS)
def test_torch_float32_matches_numpy(div):
    rng = np.random.default_rng(9)
    q, p = rng.dirichlet(np.ones(30), size=2), rng.dirichlet(np.ones(30), size=2)
    q[1, :10] = 0
    q /= q.sum(-1, keepdims=True)
    a = solve_mentored(q, p, 0.1, div).acceptance
    t = solve_mentored(torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32), 0.1, div)
    # float32 rounding of the prefix sums and of the bisection's end point
    np.testing.assert_allclose(t.acceptance.double().numpy(), a, rtol=0, atol=2e-5)


@pytest.mark.parametrize("div", DIVS)
def test_rule_emits_its_target(div):
    rng = np.random.default_rng(2)
    q, p = rng.dirichlet(np.full(12, 0.5)), rng.dirichlet(np.full(12, 0.5))
    q[:3] = 0
    q /= q.sum()
    rule = get_rule(f"mentored-{div.replace('_', '-')}", D=0.2)
    pi = mentored_target(q, p, 0.2, div)
    # Theorem 1: SpS against pi emits pi; float64 rounding of the residual normalization.
    np.testing.assert_allclose(emitted_distribution(rule, q, p), pi, rtol=0, atol=1e-12)
    assert float(acceptance_rate(rule, q, p)) == pytest.approx(np.minimum(p, pi).sum(), abs=1e-12)


def test_bad_input_raises():
    q, p = np.array([0.5, 0.5]), np.array([0.3, 0.7])
    with pytest.raises(ValueError, match="eps"):
        frontier(q, p, -0.1)
    with pytest.raises(ValueError, match="eps"):
        frontier(q, p, float("nan"))
    with pytest.raises(ValueError, match="divergence"):
        frontier(q, p, 0.1, "wasserstein")
    with pytest.raises(ValueError, match="draft_probs"):
        frontier(q, np.array([0.2, 0.2, 0.6]), 0.1)
    with pytest.raises(ValueError, match="target_probs"):
        frontier(np.array([0.5, 0.6]), p, 0.1)
    with pytest.raises(ValueError, match="D"):
        get_rule("mentored-kl", D=-1.0)
