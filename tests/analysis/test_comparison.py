"""The Taylor point against the exact root (``analysis/comparison.py``): Corollary 6 and the
tight bound log(1 + 2 delta), the budget from which the Taylor point is always feasible, the
grid against the cvxpy oracle, the corpus comparison of SpS, Taylor and exact, and bad input.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cactus_theory.analysis.comparison import (
    TAYLOR_WITHIN_BUDGET_FROM,
    taylor_kl_bound,
    taylor_vs_exact_grid,
    taylor_vs_exact_pairs,
)
from cactus_theory.divergences import get_divergence
from cactus_theory.solvers._spike import taylor_spike


@given(s=st.floats(0.0, 1.0), delta=st.floats(1e-9, 50.0))
def test_corollary6_and_tight_taylor_bound(s, delta):
    """Corollary 6: gamma_T <= 1/2 => kl <= delta. Beyond: kl <= log(1 + 2 delta), tight."""
    kl = get_divergence("kl")
    g = float(taylor_spike(np.array(s), delta))
    val = float(kl.two_point(np.array(g), np.array(s)))
    if g <= 0.5:
        assert val <= delta * (1 + 1e-12)  # rounding of the two-point sum
    assert val <= float(taylor_kl_bound(delta)) * (1 + 1e-12) + 1e-15


def test_taylor_within_budget_threshold():
    """log(1 + 2 delta) = delta at delta* = 1.25643...: beyond it the Taylor point is feasible."""
    d = TAYLOR_WITHIN_BUDGET_FROM
    assert math.log1p(2 * d) == pytest.approx(d, rel=1e-12)
    assert 1.2564 < d < 1.2565


def test_grid_cvxpy_column_matches_root():
    grid = taylor_vs_exact_grid([0.0, 0.1, 0.5, 0.9, 1.0], [0.0, 0.05, 1.0], with_cvxpy=True)
    np.testing.assert_allclose(grid.gamma_cvxpy, grid.gamma_exact, atol=1e-6)  # solver accuracy
    assert np.all(grid.gamma_taylor[:, 0] == grid.q_values)


def test_taylor_vs_exact_pairs_orders_the_three_rules():
    """Two positions x two budgets: SpS spends nothing and accepts sum min(p, q); both Cactus
    rows accept at least SpS; the exact root spends at most delta per draft (Theorem 2: the
    root of kl(gamma || q_n) = delta), the Taylor point at most log(1 + 2 delta) (the module's
    tight bound); the emitted/delta column is the emitted maximum over delta. Slack 1e-12:
    float64 sums over 6 tokens; 1e-9 relative on the root's bisection."""
    q = np.array([[0.5, 0.25, 0.125, 0.125, 0.0, 0.0], [0.1, 0.2, 0.3, 0.2, 0.1, 0.1]])
    p = np.array([[0.25, 0.25, 0.25, 0.125, 0.125, 0.0], [0.3, 0.3, 0.1, 0.1, 0.1, 0.1]])
    res = taylor_vs_exact_pairs(q, p, [0.05, 0.5])
    assert res.divergence == "kl" and res.n_positions == 2
    assert [(r["rule"], r["delta"]) for r in res.rows] == [
        (rule, d) for d in (0.05, 0.5) for rule in ("sps", "cactus-taylor", "cactus-exact-kl")
    ]
    by = {(r["rule"], r["delta"]): r for r in res.rows}
    for d in (0.05, 0.5):
        sps = by["sps", d]
        assert sps["acceptance"] == pytest.approx(np.minimum(q, p).sum(1).mean(), abs=1e-12)
        for key in ("per_draft_mean", "per_draft_max", "emitted_mean", "emitted_max", "emitted_tv_mean"):
            assert abs(sps[key]) <= 1e-12, key
        for rule in ("cactus-taylor", "cactus-exact-kl"):
            r = by[rule, d]
            assert r["acceptance"] >= sps["acceptance"] - 1e-12, rule
            assert r["emitted_over_delta_max"] == pytest.approx(r["emitted_max"] / d, rel=1e-12)
        assert by["cactus-exact-kl", d]["per_draft_max"] <= d * (1 + 1e-9)
        assert by["cactus-taylor", d]["per_draft_max"] <= float(taylor_kl_bound(d)) * (1 + 1e-12)


def test_grid_and_bound_refuse_bad_input_naming_the_argument():
    with pytest.raises(ValueError, match="^q_values"):
        taylor_vs_exact_grid([0.5, 1.5], [0.1])
    with pytest.raises(ValueError, match="^deltas"):
        taylor_vs_exact_grid([0.5], [-0.1])
    with pytest.raises(ValueError, match="^deltas"):
        taylor_vs_exact_pairs([[0.5, 0.5]], [[0.5, 0.5]], [-1.0])
    with pytest.raises(ValueError, match="^delta"):
        taylor_kl_bound(-0.5)


def test_grid_budget_ratio_is_zero_at_a_zero_budget():
    """At delta = 0 both points are q_n, the Taylor point's divergence is 0 and its ratio to the
    budget is reported 0 (not NaN)."""
    g = taylor_vs_exact_grid([0.0, 0.25, 1.0], [0.0, 0.5])
    assert g.gamma_taylor[:, 0].tolist() == [0.0, 0.25, 1.0] == g.gamma_exact[:, 0].tolist()
    assert g.budget_ratio[:, 0].tolist() == [0.0, 0.0, 0.0]
    assert np.all(g.budget_ratio[:, 1] >= 0)
