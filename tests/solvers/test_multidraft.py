"""The k-draft optimum: the min-cut value and its extremal sets, and the budgeted frontier.

Oracles: every subset (V <= 8), the coupling linear programme (scipy linprog, HiGHS), the
cvxpy programme with one cut per subset and its float64 dual certificate, and today's
single-draft frontier at k = 1. Each test reports (asserts) the rate of agreement and the
worst gap over its random instances.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cactus_theory.divergences import DIVERGENCES
from cactus_theory.solvers._frontier import frontier
from cactus_theory.solvers._multidraft import (
    min_cut_acceptance,
    min_cut_set,
    miss_probability,
    multidraft_frontier,
    multidraft_target,
)
from cactus_theory.solvers._multidraft_cvx import (
    all_subsets,
    certify_multidraft,
    coupling_acceptance_lp,
    multidraft_frontier_cvxpy,
)

DIVS = tuple(DIVERGENCES)


def _row(rng, V, conc=0.5, zeros=False):
    x = rng.dirichlet(np.full(V, conc))
    if zeros:
        x[rng.integers(V)] = 0.0
        x = x / x.sum()
    return x


def _brute(o, p, k):
    """min over all 2^V sets of o(V \\ A) + 1 - (1 - p(A))^k, and the values of every set."""
    S = all_subsets(o.shape[-1]).astype(np.float64)
    vals = (1.0 - S @ o) + 1.0 - (1.0 - S @ p) ** k
    return vals.min(), vals


def test_min_cut_prefix_equals_brute_force_over_all_sets():
    """300 random (o, p, k), V <= 8, with zeros in o and p: agreement rate 1, worst gap <= 1e-12.

    Tolerance: both sides sum at most 8 float64 terms (a few ulps of 1)."""
    rng = np.random.default_rng(0)
    gaps = []
    for t in range(300):
        V, k = int(rng.integers(1, 9)), int(rng.integers(1, 7))
        o, p = _row(rng, V, zeros=t % 3 == 0 and V > 1), _row(rng, V, zeros=t % 4 == 0 and V > 1)
        best, vals = _brute(o, p, k)
        fast = float(min_cut_acceptance(o, p, k))
        A = min_cut_set(o, p, k)
        assert vals[int(np.dot(A, 1 << np.arange(V)))] == pytest.approx(fast, abs=1e-12)  # the set attains it
        gaps.append(abs(fast - best))
    assert np.mean(np.array(gaps) <= 1e-12) == 1.0 and max(gaps) <= 1e-12


def test_min_cut_equals_the_coupling_linear_programme():
    """20 random (o, p, k), V <= 5, k <= 3: |alpha* - LP| <= 1e-7 for every one (the wider
    study: scripts/multidraft_oracle_study.py).

    Tolerance: HiGHS's default primal/dual feasibility tolerance is 1e-7."""
    rng = np.random.default_rng(1)
    gaps = []
    for _ in range(20):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        o, p = _row(rng, V), _row(rng, V)
        gaps.append(abs(coupling_acceptance_lp(o, p, k) - float(min_cut_acceptance(o, p, k))))
    assert max(gaps) <= 1e-7


def test_k1_min_cut_is_sum_min_and_batches():
    rng = np.random.default_rng(2)
    o, p = rng.dirichlet(np.ones(7), size=(3, 4)), rng.dirichlet(np.ones(7), size=(3, 4))
    np.testing.assert_allclose(min_cut_acceptance(o, p, 1), np.minimum(o, p).sum(-1), atol=1e-15)
    assert min_cut_acceptance(o, p, 3).shape == (3, 4)
    # more drafts never lower the optimum: (1 - t)^k decreases in k
    a = [min_cut_acceptance(o, p, k) for k in (1, 2, 4, 8)]
    assert all(np.all(a[i + 1] >= a[i] - 1e-15) for i in range(3))


def test_the_threshold_family_on_o_does_not_attain_the_minimum():
    """Counterexample pinned: the sets {o_i > t} (sorting by o alone) miss the minimum."""
    rng = np.random.default_rng(3)
    found = None
    for _ in range(200):
        o, p, k = _row(rng, 5), _row(rng, 5), 2
        best, vals = _brute(o, p, k)
        order = np.argsort(-o)
        S = np.zeros(5, dtype=bool)
        thr = [((1 - 0.0) + 1 - 1.0)]
        for i in order:
            S[i] = True
            thr.append(float(vals[int(np.dot(S, 1 << np.arange(5)))]))
        if min(thr) > best + 1e-3:
            found = (o, p)
            break
    assert found is not None
    o, p = found
    assert float(min_cut_acceptance(o, p, 2)) == pytest.approx(_brute(o, p, 2)[0], abs=1e-12)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="k"):
        min_cut_acceptance([0.5, 0.5], [0.5, 0.5], 0)
    with pytest.raises(ValueError, match="eps"):
        multidraft_frontier([0.5, 0.5], [0.5, 0.5], 2, -0.1)
    with pytest.raises(ValueError, match="emitted_probs"):
        min_cut_acceptance([0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="k"):
        miss_probability(0.5, 1.5)


@pytest.mark.parametrize("div", DIVS)
def test_k1_frontier_equals_the_single_draft_frontier(div):
    """At k = 1 the multi-draft frontier is today's frontier: 20 rows x 5 budgets, |gap| <= 1e-12.

    Tolerance: two exact solvers of the same problem, each to the float resolution of the
    acceptance (the single-draft one states ~1e-15)."""
    rng = np.random.default_rng(4)
    q = rng.dirichlet(np.full(9, 0.7), size=20)
    p = rng.dirichlet(np.full(9, 0.7), size=20)
    eps = [0.0, 0.003, 0.05, 0.3, 2.0]
    a = multidraft_frontier(q, p, 1, eps, div).acceptance
    b = frontier(q, p, eps, div).acceptance
    assert np.max(np.abs(a - b)) <= 1e-12


@pytest.mark.parametrize("div", DIVS)
def test_frontier_agrees_with_cvxpy_and_is_certified(div):
    """One random row (q > 0, V <= 5, k in 2..4) per divergence: the fast optimum is within the
    oracle's certified gap (1e-6) of the cvxpy optimum, and its own float64 dual certificate
    closes to 1e-7 (tolerances: the oracle's tol; the polished dual bound's resolution). The
    wider study: scripts/multidraft_oracle_study.py."""
    rng = np.random.default_rng(5)
    gaps, certs = [], []
    for _ in range(1):
        V, k = int(rng.integers(3, 6)), int(rng.integers(2, 5))
        q, p = _row(rng, V, 1.0), _row(rng, V, 1.0)
        eps = float(rng.choice([0.01, 0.05]))
        r = multidraft_frontier(q, p, k, [eps], div, return_target=True)
        assert r.divergence[0] <= eps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = multidraft_frontier_cvxpy(q, p, k, eps, div)
        gaps.append(abs(ref.acceptance - float(r.acceptance[0])))
        if r.acceptance[0] < 1 - 1e-9:
            certs.append(certify_multidraft(q, p, k, eps, div, r.target[0])[0])
    assert max(gaps) <= 1e-6
    assert max(certs, default=0.0) <= 1e-7


def test_kl_with_zeros_in_q_agrees_with_cvxpy():
    """KL forbids mass off supp(q), so the path is exact there too (gap <= 1e-6, the oracle's tol)."""
    rng = np.random.default_rng(6)
    for _ in range(2):
        q, p = _row(rng, 5, 1.0, zeros=True), _row(rng, 5, 1.0)
        r = multidraft_frontier(q, p, 3, [0.05], "kl")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = multidraft_frontier_cvxpy(q, p, 3, 0.05, "kl")
        assert abs(ref.acceptance - float(r.acceptance[0])) <= 1e-6


def test_tv_closed_form():
    """F_k(eps) = min(1, alpha*(q) + eps) for TV (q > 0): 30 rows x 4 budgets, |gap| <= 1e-12."""
    rng = np.random.default_rng(7)
    q, p = rng.dirichlet(np.ones(8), size=30), rng.dirichlet(np.ones(8), size=30)
    eps = np.array([0.0, 0.01, 0.1, 0.6])
    for k in (2, 5):
        r = multidraft_frontier(q, p, k, eps, "tv")
        closed = np.minimum(1.0, min_cut_acceptance(q, p, k)[:, None] + eps)
        assert np.max(np.abs(r.acceptance - closed)) <= 1e-12


#: Divergences with a finite cost f'(inf) for mass where q = 0 (the optimum may put mass there).
OFF_SUPPORT_DIVS = tuple(name for name, d in DIVERGENCES.items() if d.finite_off_support)


def _rows_with_zeros(rng, n, V):
    """n (q, p) pairs with zeros in q at random tokens (at least one kept), p > 0."""
    q = rng.dirichlet(np.full(V, 0.7), size=n)
    p = rng.dirichlet(np.full(V, 0.7), size=n)
    zero = rng.random((n, V)) < 0.4
    zero[np.arange(n), rng.integers(V, size=n)] = False
    q = np.where(zero, 0.0, q)
    return q / q.sum(axis=-1, keepdims=True), p


def test_off_support_counterexamples():
    """Mass outside supp(q) pays for TV: the optimum meets the closed form alpha*(q) + eps.

    q = (1, 0), p = (0.1, 0.9), k = 2, eps = 0.3: alpha*(q) = 0.19, optimum 0.49 (o = (0.7, 0.3)).
    p uniform on 3 tokens, q = (1/6, 0, 5/6), eps = 0.2: 0.7, 0.9222 and 1 at k = 1, 2, 3, each
    attained by the returned target as the coupling LP computes it. Tolerances: 1e-12, the
    float resolution of sums of a few terms; 1e-9 against the LP (HiGHS's optimality tolerance).
    """
    q, p = np.array([1.0, 0.0]), np.array([0.1, 0.9])
    r = multidraft_frontier(q, p, 2, [0.3], "tv", return_target=True)
    assert float(min_cut_acceptance(q, p, 2)) == pytest.approx(0.19, abs=1e-15)
    assert float(r.acceptance[0]) == pytest.approx(0.49, abs=1e-12)
    assert float(r.divergence[0]) <= 0.3
    q, p = np.array([1 / 6, 0.0, 5 / 6]), np.full(3, 1 / 3)
    for k, want in ((1, 0.7), (2, 0.9222222222222222), (3, 1.0)):
        r = multidraft_frontier(q, p, k, [0.2], "tv", return_target=True)
        assert float(r.acceptance[0]) == pytest.approx(want, abs=1e-12)
        assert float(r.divergence[0]) <= 0.2 and r.target[0, 1] > 0  # mass where q = 0
        assert coupling_acceptance_lp(r.target[0], p, k) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize(
    "div, want", [("tv", 0.5), ("reverse_kl", 0.49516258), ("hellinger", 0.59), ("js", 0.66033154)]
)
def test_k1_with_a_zero_equals_the_single_draft_values(div, want):
    """q = (.5, .5, 0), p = (.2, .2, .6), eps = 0.1, k = 1: the single-draft frontier's values
    (the on-support path gave 0.4 for all four). Tolerance 1e-8: the expected values are
    printed to 8 digits; the two solvers agree to 1e-12 (the next test)."""
    q, p = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.2, 0.6])
    a = float(multidraft_frontier(q, p, 1, [0.1], div).acceptance[0])
    assert a == pytest.approx(want, abs=1e-8)
    assert a == pytest.approx(float(frontier(q, p, [0.1], div).acceptance[0]), abs=1e-12)


def test_k1_equals_the_single_draft_frontier_on_rows_with_zeros():
    """k = 1 against the single-draft frontier (an independent exact solver with its own
    off-support phase) on 5 rows with zeros in q, every divergence, 2 budgets. Tolerance
    1e-12: both resolve the acceptance to float precision (the single-draft one states ~1e-15;
    this one searches the off-support mass to 2e-17 of its range)."""
    rng = np.random.default_rng(42)
    q, p = _rows_with_zeros(rng, 5, 6)
    eps = [0.02, 0.3]
    for div in DIVS:
        a = multidraft_frontier(q, p, 1, eps, div).acceptance
        b = frontier(q, p, eps, div).acceptance
        assert np.max(np.abs(a - b)) <= 1e-12, div


def test_tv_closed_form_holds_with_zeros_in_q():
    """F_k(eps) = min(1, alpha*(q) + eps) for TV on rows with zeros in q too (k = 2, 4; 6 rows
    x 2 budgets). Tolerance 1e-12: float resolution of the acceptance."""
    rng = np.random.default_rng(43)
    q, p = _rows_with_zeros(rng, 6, 6)
    eps = np.array([0.05, 0.5])
    for k in (2, 4):
        r = multidraft_frontier(q, p, k, eps, "tv")
        closed = np.minimum(1.0, min_cut_acceptance(q, p, k)[:, None] + eps)
        assert np.max(np.abs(r.acceptance - closed)) <= 1e-12


@pytest.mark.parametrize("div", OFF_SUPPORT_DIVS)
def test_zeros_in_q_agree_with_cvxpy(div):
    """Two rows with zeros in q (V = 4-5, k = 2-3) per finite-slope divergence: within the
    oracle's certified gap (1e-6) of cvxpy, which optimises over the whole simplex."""
    rng = np.random.default_rng(44)
    for _ in range(2):
        V, k = int(rng.integers(4, 6)), int(rng.integers(2, 4))
        q, p = _rows_with_zeros(rng, 1, V)
        eps = float(rng.choice([0.02, 0.1]))
        r = multidraft_frontier(q[0], p[0], k, [eps], div)
        assert r.divergence[0] <= eps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = multidraft_frontier_cvxpy(q[0], p[0], k, eps, div)
        assert abs(ref.acceptance - float(r.acceptance[0])) <= 1e-6


def test_frontier_shape_concave_nondecreasing_in_eps_and_k():
    """F_k is concave and nondecreasing in eps and nondecreasing in k (rounding slack 1e-12)."""
    rng = np.random.default_rng(8)
    q, p = _row(rng, 12, 0.3), _row(rng, 12, 0.3)
    eps = np.linspace(0.0, 0.4, 21)
    prev = None
    for k in (1, 2, 4, 8):
        a = multidraft_frontier(q, p, k, eps, "kl").acceptance
        assert np.all(np.diff(a) >= -1e-12)
        assert np.all(np.diff(a, 2) <= 1e-12)
        if prev is not None:
            assert np.all(a >= prev - 1e-12)
        prev = a
    o = multidraft_target(q, p, 4, 0.1, "kl")
    assert o.shape == (12,) and abs(o.sum() - 1) <= 1e-12


def test_the_oracle_study_script_runs_reduced():
    """scripts/multidraft_oracle_study.py end to end on a reduced run (no cvxpy rows)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "multidraft_oracle_study.py"
    spec = importlib.util.spec_from_file_location("multidraft_oracle_study", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.run(n_sets=30, n_lp=3, n_cvx=0, seed=1)
    assert res["subsets"]["rate"] == 1.0 and res["coupling_lp"]["rate"] == 1.0
    assert res["cvxpy/kl"]["n"] == 0


def test_reported_acceptance_is_the_min_cut_of_the_returned_target():
    """The frontier's acceptance (the prefix min-cut in the row's q/p order on supp(q), a sort
    of o/p off it) equals min_cut_acceptance of the returned target: 8 rows (half with zeros
    in q) x k = 1, 3 x KL, TV and Hellinger x 3 budgets. Tolerance 1e-12: sums of <= 10 terms."""
    rng = np.random.default_rng(45)
    qz, pz = _rows_with_zeros(rng, 4, 10)
    q = np.concatenate([qz, rng.dirichlet(np.full(10, 0.5), size=4)])
    p = np.concatenate([pz, rng.dirichlet(np.full(10, 0.5), size=4)])
    for k in (1, 3):
        for div in ("kl", "tv", "hellinger"):
            r = multidraft_frontier(q, p, k, [0.01, 0.1, 0.5], div, return_target=True)
            ref = min_cut_acceptance(r.target, np.broadcast_to(p[:, None, :], r.target.shape), k)
            assert np.max(np.abs(r.acceptance - ref)) <= 1e-12, (k, div)
