"""The optimal frontier: agreement with cvxpy, shape (also at V = 151,936), operating points."""

import math

import numpy as np
import pytest

from cactus_theory.analysis.frontier import _sweep_values, default_sweep, operating_points
from cactus_theory.distributions import synthetic_pairs, truncate
from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.rules import RULES, Knob
from cactus_theory.solvers._cvx import SolverFailure
from cactus_theory.solvers._cvx_frontier import max_acceptance_cvxpy
from cactus_theory.solvers._frontier import (
    LARGEST_FINITE,
    frontier,
    frontier_curve,
    min_divergence_for_acceptance,
    saturation_budget,
)

DIVS = list(DIVERGENCES)


def _instances():
    rng = np.random.default_rng(20)
    out = []
    for i in range(4):
        V = int(rng.integers(3, 12))
        q, p = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        if i % 2:  # truncated verifier (and a drafter zero)
            q[np.argsort(q)[: V // 3]] = 0.0
            q /= q.sum()
            p[int(np.argmax(q))] = 0.0
            p /= p.sum()
        out.append((q, p))
    return out


@pytest.mark.parametrize("div", DIVS)
def test_fast_solver_agrees_with_cvxpy(div):
    """|A_fast - A_cvx| <= 1e-6 wherever cvxpy returns a verified 'optimal' answer."""
    checked = 0
    for q, p in _instances():
        for eps in (1e-3, 0.05, 0.4, 3.0):
            fast = float(frontier(q, p, eps, div).acceptance[0])
            try:
                ref = max_acceptance_cvxpy(q, p, eps, div)
            except SolverFailure:
                continue
            # cvxpy's interior-point answer is verified to 1e-7 in budget; 1e-6 in acceptance
            # is what Clarabel/SCS reach here ('optimal_inaccurate' gets 1e-4).
            tol = 1e-6 if ref.status == "optimal" else 1e-4
            assert abs(fast - ref.acceptance) <= tol, (q, p, eps, fast, ref)
            checked += 1
    assert checked >= 14, "cvxpy failed on most instances"


def test_fast_solver_beats_the_clip_form_for_reverse_kl_with_truncated_q_as_cvxpy_does():
    q = np.array([0.5, 0.5, 0.0])
    p = np.array([0.2, 0.2, 0.6])
    ref = max_acceptance_cvxpy(q, p, 0.5, "reverse_kl")
    fast = float(frontier(q, p, 0.5, "reverse_kl").acceptance[0])
    assert fast == pytest.approx(0.4 + 1 - math.exp(-0.5), abs=1e-12)
    assert abs(ref.acceptance - fast) <= 1e-6  # cvxpy puts the same mass off supp(q)
    assert ref.target[2] > 0.39


@pytest.mark.parametrize("div", DIVS)
def test_frontier_endpoints(div):
    rng = np.random.default_rng(4)
    q, p = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    q[:8] = 0
    q /= q.sum()
    F = frontier(q, p, [0.0, LARGEST_FINITE, math.inf], div).acceptance
    assert F[0] == pytest.approx(np.minimum(p, q).sum(), abs=1e-15)
    assert F[2] == 1.0  # an infinite budget admits o = p
    d = get_divergence(div)
    if d.finite_off_support and math.isfinite(float(d.unchecked(p, q))):
        assert F[1] == pytest.approx(1.0, abs=1e-12)
    elif not d.finite_off_support:
        assert F[1] == pytest.approx(p[q > 0].sum(), abs=1e-12)
    grid, curve = frontier_curve(q, p, div, n_points=9)
    assert curve[-1] == pytest.approx(F[1], abs=1e-12)
    assert grid[-1] == pytest.approx(float(saturation_budget(q, p, div)), rel=1e-12)


def test_tv_frontier_closed_form_and_interpolation_lies_on_it():
    rng = np.random.default_rng(8)
    q, p = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    sps = np.minimum(p, q).sum()
    eps = np.array([0.0, 0.05, 0.2, 0.9])
    np.testing.assert_allclose(
        frontier(q, p, eps, "tv").acceptance, np.minimum(1, sps + eps), rtol=0, atol=1e-15
    )
    op = operating_points("interpolation", q, p)
    # a - a_SpS = alpha TV(p, q) = TV(h, q): interpolation attains the TV frontier exactly
    np.testing.assert_allclose(op.gap["tv"], 0.0, atol=1e-12)


@pytest.mark.parametrize("div", DIVS)
def test_mentored_lies_on_its_own_frontier(div):
    rng = np.random.default_rng(6)
    q, p = rng.dirichlet(np.ones(25)), rng.dirichlet(np.ones(25))
    op = operating_points(f"mentored-{div.replace('_', '-')}", q, p, divergences=(div,))
    # F is evaluated at the rule's recomputed divergence. F rises like sqrt(eps) near 0, so a
    # rounding residue of ~1e-16 in the divergence of the D = 0 point (which emits q) reads
    # as ~1e-8 of frontier; elsewhere the gap is rounding (~1e-12).
    np.testing.assert_allclose(op.gap[div][1:], 0.0, atol=1e-9)
    assert abs(op.gap[div][0]) <= 1e-7


def test_inverse_frontier():
    rng = np.random.default_rng(12)
    q, p = rng.dirichlet(np.ones(20)), rng.dirichlet(np.ones(20))
    sps = np.minimum(p, q).sum()
    for A in (sps, sps + 0.05, sps + 0.2):
        D = float(min_divergence_for_acceptance(q, p, A, "kl"))
        assert float(frontier(q, p, D * (1 + 1e-9) + 1e-15, "kl").acceptance[0]) >= A - 1e-12
        if D > 0:
            assert float(frontier(q, p, D * (1 - 1e-6), "kl").acceptance[0]) < A
    q[:5] = 0
    q /= q.sum()
    assert min_divergence_for_acceptance(q, p, 1.0, "kl") == math.inf  # KL forbids q = 0 mass


def test_operating_points_report_inf_not_nan():
    """Top-k emits only the verifier's top-k set: KL(q||h) = inf, reported as such."""
    rng = np.random.default_rng(1)
    q, p = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(40))
    op = operating_points("topk", q, p, values=[1, 3, 5])
    assert np.all(np.isinf(op.divergences["reverse_kl"]))
    for d in op.gap:
        assert not np.any(np.isnan(op.gap[d])) and not np.any(np.isnan(op.divergences[d]))
    # at an infinite divergence every distribution qualifies: the bound is 1
    np.testing.assert_array_equal(op.frontier["reverse_kl"], 1.0)
    np.testing.assert_allclose(op.gap["reverse_kl"], 1.0 - op.acceptance, atol=1e-15)


@pytest.mark.parametrize("name", list(RULES))
def test_default_sweep_values_are_valid(name):
    knob, values = default_sweep(name)
    for v in values:
        RULES[name].make(**{knob: v})


@pytest.mark.parametrize(
    "low, high, integer",
    [(0.0, 1.0, False), (0.0, math.inf, False), (-math.inf, math.inf, False), (1.0, math.inf, True)],
)
@pytest.mark.parametrize("low_open, high_open", [(False, False), (True, False), (False, True), (True, True)])
def test_sweep_values_stay_inside_open_and_closed_ranges(low, high, integer, low_open, high_open):
    """Every value of a knob's sweep passes the knob's own check, open ends included (a knob
    whose open low end was swept from that end used to make the rule raise)."""
    knob = Knob(
        "x", 1.0 if integer else 0.5, low, high, integer=integer, low_open=low_open, high_open=high_open
    )
    values = _sweep_values(knob, 7)
    assert len(values) == 7 and len(set(values)) == 7
    for v in values:
        knob.validate(v)


def test_frontier_at_full_qwen_vocabulary_is_nondecreasing():
    """V = 151,936 (Qwen's vocabulary): the frontier over 16 budgets is nondecreasing for three
    divergences. Its speed at this V is a goal of ``cactus-theory benchmark`` (the frontier
    section), not of this test."""
    q, p = synthetic_pairs("noisy_copy", 1, 151_936, 0)
    for div in ("kl", "reverse_kl", "js"):
        F = frontier(q[0], p[0], np.linspace(0, 1, 16), div).acceptance
        assert np.all(np.isfinite(F))
        # the acceptance at a larger budget is a maximum over a larger set: never smaller,
        # up to the solver's rounding
        assert np.all(np.diff(F) >= -1e-12)


def test_every_rule_sweep_stays_below_the_frontier():
    """All rules, all default sweep points, truncated q: gap >= 0 (never NaN; inf reported)."""
    from cactus_theory.analysis.frontier import all_operating_points

    q, p = synthetic_pairs("logits", 2, 40, 5)
    qt = truncate(q, temperature=0.6, top_k=10, top_p=0.95)
    pt = truncate(p, temperature=0.6, top_k=10, top_p=0.95)
    ops = all_operating_points(qt, pt, raw_target_probs=q, raw_draft_probs=p)
    assert set(ops) == set(RULES)
    for name, op in ops.items():
        for d, gap in op.gap.items():
            assert not np.any(np.isnan(gap)) and not np.any(np.isnan(op.divergences[d]))
            # the rule's recomputed divergence carries ~1e-15 of rounding and F ~ sqrt(eps)
            # near 0, so a point at D = 0 may read up to ~1e-7 above F; elsewhere ~1e-12
            assert np.all(gap >= -1e-7), (name, d, gap.min())


def test_cvxpy_oracle_falls_back_and_never_returns_unverified():
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    res = max_acceptance_cvxpy(q, p, 0.1, "kl", solvers=("NOT_A_SOLVER", "CLARABEL"))
    assert res.solver == "CLARABEL" and res.attempts[0][1].startswith("error")
    assert abs(res.acceptance - float(frontier(q, p, 0.1, "kl").acceptance[0])) <= 1e-6
    with pytest.raises(SolverFailure, match="NOT_A_SOLVER"):  # TV: no dual recovery either
        max_acceptance_cvxpy(q, p, 0.1, "tv", solvers=("NOT_A_SOLVER",))
    res = max_acceptance_cvxpy(q, p, 0.1, "kl", solvers=("NOT_A_SOLVER",))
    assert res.solver == "float64 dual"  # certified without any solver
    assert abs(res.acceptance - float(frontier(q, p, 0.1, "kl").acceptance[0])) <= 1e-7
    with pytest.raises(ValueError, match="budget"):
        max_acceptance_cvxpy(q, p, -1.0, "kl")


def test_frontier_curve_grid_is_quadratic_from_zero_to_saturation():
    """n_points = 2 is the smallest grid (0 and the saturation budget); spacing quadratic."""
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    top = float(saturation_budget(q, p, "kl"))
    grid, acc = frontier_curve(q, p, "kl", n_points=2)
    assert grid.tolist() == [0.0, top] and acc.shape == (2,)
    grid, _ = frontier_curve(q, p, "kl", n_points=5)
    np.testing.assert_allclose(grid, top * np.array([0, 1, 4, 9, 16]) / 16, rtol=1e-15)  # float64 ops
