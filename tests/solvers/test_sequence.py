"""The sequence-level KL budget: exact solver vs cvxpy, the rule's guarantees (the comparison
of calibrations at equal divergence: tests/simulate/test_sequence_budget.py)."""

import itertools
import math

import numpy as np
import pytest
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import simplex

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.divergences import get_divergence
from cactus_theory.rules import RULES, get_rule
from cactus_theory.solvers._mentored import solve_mentored
from cactus_theory.solvers._sequence import (
    budget_account,
    budgeted_multiplier_step,
    multiplier_step,
    sequence_budget_cvxpy,
    solve_sequence_budget,
)

KL = get_divergence("kl")


def _kl(o, q):
    return np.maximum(np.asarray(KL.unchecked(o, q), dtype=np.float64), 0.0)


def _F(q, p, e):
    """The per-step frontier F_t(e_t) (exact solver, one budget per row)."""
    return np.asarray(
        solve_mentored(
            q, p, np.maximum(np.asarray(e, dtype=np.float64), 0.0), "kl", return_target=False
        ).acceptance
    )


@st.composite
def trajectories(draw, max_T=5, max_V=8):
    T = draw(st.integers(1, max_T))
    V = draw(st.integers(2, max_V))
    q = np.stack([draw(simplex(V)) for _ in range(T)])
    p = np.stack([draw(simplex(V)) for _ in range(T)])
    return q, p


lams = st.one_of(st.sampled_from([0.0, 0.1, 1.0, 10.0, math.inf]), st.floats(1e-3, 1e3))


@given(trajectories(), lams)
def test_multiplier_step_is_on_the_frontier_and_maximises_the_lagrangian(traj, lam):
    q, p = traj
    o = multiplier_step(q, p, lam)
    np.testing.assert_allclose(o.sum(-1), 1.0, atol=1e-12)
    assert np.all(o[q == 0] == 0)  # KL forbids mass off supp(q)
    A, e = np.minimum(p, o).sum(-1), _kl(o, q)
    # on the frontier at its own divergence: 1e-7 covers the frontier solver's bisection and
    # the sqrt-steep frontier near e = 0 (where 1e-16 of divergence is worth 1e-8 of acceptance)
    np.testing.assert_allclose(A, _F(q, p, e), atol=1e-7)
    if math.isfinite(lam) and lam > 0:
        # Lagrangian optimality against frontier points at other budgets (1e-7: as above)
        for factor in (0.0, 0.5, 0.9, 1.1, 2.0):
            e2 = e * factor + (0.01 if factor > 1 else 0.0)
            assert np.all(_F(q, p, e2) - lam * e2 <= A - lam * e + 1e-7)


CVX_CASES = [(T, V, seed) for T, V, seed in [(1, 3, 0), (3, 4, 1), (5, 6, 2), (4, 5, 3), (2, 6, 4)]]


@pytest.mark.parametrize("T,V,seed", CVX_CASES)
@pytest.mark.parametrize("eps", [0.02, 0.2])
def test_exact_solver_matches_cvxpy(T, V, seed, eps):
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(V, 0.5), T)
    p = rng.dirichlet(np.full(V, 0.5), T)
    if seed % 2:
        q[0, 0] = 0.0  # a zero of q: the support constraint
        q /= q.sum(-1, keepdims=True)
    exact = solve_sequence_budget(q, p, eps)
    oracle = sequence_budget_cvxpy(q, p, eps)
    assert exact.divergence.sum() <= T * eps * (1 + 1e-12)
    # the solvers' tolerances are ~1e-8; the oracle may overspend by its tol = 1e-7 nats
    assert exact.total_acceptance == pytest.approx(oracle.total_acceptance, abs=2e-6)
    assert exact.total_acceptance >= oracle.total_acceptance - 2e-6


@given(trajectories(max_T=6), st.floats(0.05, 5.0), st.integers(0, 2**16))
def test_fixed_multiplier_spends_its_budget_optimally_per_trajectory(traj, lam, seed):
    """Guarantee 1: no allocation of at most the same total divergence accepts more."""
    q, p = traj
    o = multiplier_step(q, p, lam)
    A, e = np.minimum(p, o).sum(-1), _kl(o, q)
    total = float(e.sum())
    rng = np.random.default_rng(seed)
    for _ in range(5):
        share = rng.dirichlet(np.ones(len(q))) * total  # another split of the same budget
        assert _F(q, p, share).sum() <= A.sum() + 1e-7  # 1e-7: frontier solver, per step
    if total > 0:
        best = solve_sequence_budget(q, p, total / len(q))
        assert best.total_acceptance == pytest.approx(A.sum(), abs=1e-7)


def test_a_saturating_budget_with_a_root_past_c_700_is_solved():
    """A counterexample hypothesis found (the property above): q with a 3e-16 token p never
    drafts, at lambda = 0.125's spend. The multiplier search's bracket on c = 1/lambda grew to
    1024 and exp(c) overflowed (OverflowError); past c = 700 the band is infinitely wide."""
    q = np.array([[1.0, 2.96296296e-16]])
    q /= q.sum(-1, keepdims=True)
    p = np.array([[1.0, 0.0]])
    o = multiplier_step(q, p, 0.125)
    total = float(_kl(o, q).sum())
    best = solve_sequence_budget(q, p, total)
    # the budget is 2.2e-16 nats: the KL of a 3e-16 perturbation is computed to within an
    # epsilon absolute, and the solution overspends by 8e-19 (not within 1e-12 relative)
    assert float(best.divergence.sum()) <= total + np.finfo(float).eps
    assert best.total_acceptance == pytest.approx(float(np.minimum(p, o).sum()), abs=1e-7)


@given(trajectories(max_T=6), st.floats(0.01, 3.0), st.floats(1e-3, 0.5))
def test_account_never_overspends_teacher_forced(traj, lam, eps):
    q, p = traj
    o, B = budget_account(q, p, lam, eps)
    spent = _kl(o, q)
    assert spent.sum() <= len(q) * eps * (1 + 1e-9) + 1e-12  # rounding of the frontier's divergence
    assert np.all(np.diff(B) <= 1e-15) and B[-1] >= 0


@settings(max_examples=profile_examples(1 / 6, "every path of length 3 enumerated per example"))
@given(st.integers(0, 2**16), st.floats(0.05, 3.0), st.floats(1e-3, 0.3))
def test_account_guarantee_per_realised_sequence_with_feedback(seed, lam, eps):
    """Guarantee 2, not teacher-forced: q_t, p_t depend on the previous token; every path of
    length T = 3 over V = 3 tokens is enumerated. Along every path the spent KL is <= T eps,
    and the sequence KL(P||Q) equals E_P of it (chain rule), so it is <= T eps too."""
    V, T = 3, 3
    rng = np.random.default_rng(seed)
    qtab = rng.dirichlet(np.full(V, 0.7), V + 1)  # row V: the first position
    ptab = rng.dirichlet(np.full(V, 0.7), V + 1)
    rule_cache = {}
    P_path, Q_path, spent_path = {}, {}, {}
    for path in itertools.product(range(V), repeat=T):
        prob_p, prob_q, left = 1.0, 1.0, T * eps
        prev = V
        spent = 0.0
        for x in path:
            q, p = qtab[prev], ptab[prev]
            key = (prev, round(left, 15))
            if key not in rule_cache:
                rule = get_rule("sequence-budget-kl", lam=lam, cap=left)
                h = emitted_distribution(rule, q, p)  # what the rule emits (Theorem 1)
                np.testing.assert_allclose(h, budgeted_multiplier_step(q, p, lam, left), atol=1e-12)
                rule_cache[key] = h
            h = rule_cache[key]
            e = float(_kl(h, q))
            prob_p *= h[x]
            prob_q *= q[x]
            spent += e
            left = max(0.0, left - e)
            prev = x
        P_path[path], Q_path[path], spent_path[path] = prob_p, prob_q, spent
        assert spent <= T * eps * (1 + 1e-9) + 1e-12
    Pv = np.array(list(P_path.values()))
    Qv = np.array(list(Q_path.values()))
    seq_kl = float(
        np.sum(np.where(Pv > 0, Pv * np.log(np.where(Pv > 0, Pv, 1) / np.where(Qv > 0, Qv, 1)), 0))
    )
    expected_spent = float(np.dot(Pv, list(spent_path.values())))
    assert seq_kl == pytest.approx(expected_spent, abs=1e-10)  # chain rule, float64 sums of 27 terms
    assert seq_kl <= T * eps * (1 + 1e-9) + 1e-12


def test_rule_registered_with_its_sps_end():
    spec = RULES["sequence-budget-kl"]
    assert spec.sps_knobs == {"lam": math.inf} and spec.family == "target"
    q, p = np.array([0.3, 0.35, 0.35]), np.array([0.05, 0.8, 0.15])
    np.testing.assert_allclose(
        emitted_distribution(get_rule("sequence-budget-kl", lam=math.inf), q, p), q, atol=1e-15
    )
    np.testing.assert_allclose(
        emitted_distribution(get_rule("sequence-budget-kl", cap=0.0), q, p), q, atol=1e-9
    )  # the frontier solver's bisection at budget 0
    with pytest.raises(ValueError, match="lam"):
        get_rule("sequence-budget-kl", lam=-1.0)
    with pytest.raises(ValueError, match="cap"):
        get_rule("sequence-budget-kl", cap=-0.1)


def test_solver_bad_input():
    with pytest.raises(ValueError, match="target_probs"):
        solve_sequence_budget([0.5, 0.5], [0.5, 0.5], 0.1)
    with pytest.raises(ValueError, match="eps"):
        solve_sequence_budget([[0.5, 0.5]], [[0.5, 0.5]], -0.1)
    with pytest.raises(ValueError, match="eps"):
        budget_account([[0.5, 0.5]], [[0.5, 0.5]], 1.0, math.nan)


def test_saturated_and_zero_budgets():
    q = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    p = np.array([[0.1, 0.1, 0.8], [0.6, 0.2, 0.2]])
    zero = solve_sequence_budget(q, p, 0.0)
    np.testing.assert_array_equal(zero.emitted, q)
    sat = solve_sequence_budget(q, p, 100.0)
    assert sat.lam == 0.0
    # saturation: every step at the frontier's maximum, p(q > 0) for KL
    np.testing.assert_allclose(sat.acceptance, [0.2, 1.0], atol=1e-12)


def test_budget_equal_to_the_saturation_divergence_reaches_saturation():
    """A counterexample hypothesis found: q on 3 of 7 tokens, p uniform, the budget exactly
    the divergence of the saturated band (up to the rounding of the input renormalization).
    The false-position search stayed at the infeasible end and returned the zero-spend
    solution (SpS, 0.4185); the bisection safeguard reaches the saturated acceptance 3/7."""
    q = np.array([[0.13279132791327913, 0.19821912504839334, 0.6689895470383276, 0, 0, 0, 0]])
    p = np.full((1, 7), 1 / 7)
    o = multiplier_step(q, p, 1.0)
    total = float(_kl(o, q).sum())
    best = solve_sequence_budget(q, p, total)
    # the solution is feasible and its acceptance is 3/7 up to the frontier's slope times the
    # 1e-13 relative resolution of the search (the frontier is flat at saturation: 1e-9)
    assert float(best.divergence.sum()) <= total
    assert best.total_acceptance == pytest.approx(3 / 7, abs=1e-9)
