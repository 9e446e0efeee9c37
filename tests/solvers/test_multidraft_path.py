"""The path of optimal k-draft targets (``solvers/_multidraft_path.py``): the miss probability,
the lower hull, and one row's solvers against enumeration over every set of tokens."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from cactus_theory.divergences import get_divergence
from cactus_theory.solvers._multidraft_cvx import all_subsets
from cactus_theory.solvers._multidraft_path import (
    _lower_hull,
    _lower_hull_chain,
    miss_probability,
    multiplier_row,
    solve_row,
)


def _min_cut_by_enumeration(o, p, k):
    """alpha*(o) = min over all 2^V sets A of o(V minus A) + 1 - (1 - p(A))^k."""
    S = all_subsets(o.shape[-1]).astype(np.float64)
    return float(((1.0 - S @ o) + 1.0 - (1.0 - S @ p) ** k).min())


def test_miss_probability_is_one_minus_t_to_the_k():
    """phi(t) = (1 - t)^k at dyadic t, exact in float64 (checked with Fractions); masses that
    overshoot [0, 1] by rounding are clipped there."""
    t = [0.0, 0.25, 0.5, 0.75, 1.0]
    for k in (1, 2, 3, 7):
        want = [float((1 - Fraction(x)) ** k) for x in t]
        assert miss_probability(t, k).tolist() == want
    assert miss_probability([1.0 + 2**-52, -(2**-60)], 3).tolist() == [0.0, 1.0]
    assert miss_probability(0.5, 2).dtype == np.float64


@pytest.mark.parametrize("k", [0, -1, 1.5])
def test_miss_probability_refuses_a_bad_count_naming_k(k):
    with pytest.raises(ValueError, match="^k"):
        miss_probability(0.5, k)


def test_pruned_lower_hull_equals_the_monotone_chain():
    """The vectorised pruning keeps exactly the monotone chain's vertices (300 point sets, ties
    and collinear points included, convex ones returned without the chain)."""
    rng = np.random.default_rng(9)
    for t in range(300):
        n = int(rng.integers(1, 60))
        x = np.sort(rng.random(n))
        y = rng.random(n) if t % 2 else -((1 - 0.9 * np.cumsum(rng.random(n)) / n) ** int(rng.integers(1, 9)))
        if t % 5 == 0:
            y = np.round(y, 1)
        assert np.array_equal(_lower_hull(x, y), _lower_hull_chain(x, y))


def _rows(seed, n, V, zeros):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q, p = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        if zeros:  # q = 0 < p on one token: the path may put mass there
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        yield q, p


@pytest.mark.parametrize("zeros", [False, True])
def test_solve_row_targets_hold_the_budget_and_accept_what_enumeration_says(zeros):
    """20 rows (V = 6, k = 1..3) x KL, TV, Hellinger x 4 budgets: the third value is alpha*(q)
    by enumeration over all 64 sets; at eps = 0 the target is q; every target is a
    distribution within its budget as computed, and the acceptance reported for a target on
    supp(q) is its min-cut by enumeration. Tolerance 1e-12: sums of <= 6 float64 terms."""
    eps = [0.0, 0.01, 0.1, 0.5]
    for i, (q, p) in enumerate(_rows(3 + zeros, 20, 6, zeros)):
        k = 1 + i % 3
        for name in ("kl", "tv", "hellinger"):
            d = get_divergence(name)
            targets, acc, acc_q = solve_row(q, p, k, eps, d)
            assert acc_q == pytest.approx(_min_cut_by_enumeration(q, p, k), abs=1e-12)
            assert np.array_equal(targets[0], q)
            for e, o, a in zip(eps, targets, acc, strict=True):
                assert np.all(o >= 0) and abs(o.sum() - 1.0) <= 1e-12
                assert float(d.unchecked(o, q)) <= e
                if a is not None:
                    assert a == pytest.approx(_min_cut_by_enumeration(o, p, k), abs=1e-12)
            alphas = [_min_cut_by_enumeration(o, p, k) for o in targets]
            assert np.all(np.diff(alphas) >= -1e-12), (i, name)  # more budget, no less acceptance


def test_multiplier_row_ends_q_at_infinity_and_best_acceptance_at_zero():
    """lam = inf: the target is q. lam = 0: the best acceptance of any target, 1 (o = p accepts
    the first draft always; 1 - t >= (1 - t)^k), by enumeration (rounding slack 1e-12)."""
    d = get_divergence("kl")
    for i, (q, p) in enumerate(_rows(5, 10, 5, zeros=False)):
        k = 1 + i % 3
        assert np.array_equal(multiplier_row(q, p, k, math.inf, d), q)
        o = multiplier_row(q, p, k, 0.0, d)
        assert _min_cut_by_enumeration(o, p, k) == pytest.approx(1.0, abs=1e-12)


def test_multiplier_row_beats_the_budgeted_targets_on_its_lagrangian():
    """The multiplier's target maximises alpha*(o) - lam D(o||q) over targets: no target of
    solve_row (each on the frontier) scores more, by enumeration. Slack 1e-9: the golden
    section on M and on s stops at 2e-17 of the interval, the value is flat at its top."""
    d = get_divergence("kl")
    eps = [0.0, 0.005, 0.02, 0.05, 0.1, 0.3, 1.0]
    for zeros in (False, True):
        for i, (q, p) in enumerate(_rows(7, 8, 5, zeros)):
            k = 1 + i % 3
            targets, _, _ = solve_row(q, p, k, eps, d)
            for lam in (0.1, 1.0, 10.0):
                best = multiplier_row(q, p, k, lam, d)
                score = _min_cut_by_enumeration(best, p, k) - lam * float(d.unchecked(best, q))
                for o in targets:
                    other = _min_cut_by_enumeration(o, p, k) - lam * float(d.unchecked(o, q))
                    assert score >= other - 1e-9, (zeros, i, lam)
