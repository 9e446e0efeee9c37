"""FLy's chain programme (``simulate/_fly.py``): the window port on a hand pattern, the
programme against an enumeration of every round's base tests and against a round-by-round
sampler, and the evidence that it is not a one-step rule."""

import math

import numpy as np
import pytest
from scipy import stats

from cactus_theory.simulate._chain import Trajectory
from cactus_theory.simulate._fly import fly_brute_force, fly_exact_chain, fly_gate, fly_keep, simulate_fly


def _rows(seed, T, V, conc=0.6):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc), T), rng.dirichlet(np.full(V, conc), T)


def test_fly_window_port_on_a_pattern():
    # k = 8, W = 3: the mismatch at 1 has two matches after it (kept); the one at 5 is in the
    # last W positions (never kept); the gate blocks nothing
    base = np.array([1, 0, 1, 1, 0, 1, 0, 1], dtype=bool)
    kept = fly_keep(base, np.ones(8, dtype=bool), 3)
    np.testing.assert_array_equal(kept, [1, 1, 1, 1, 0, 1, 0, 1])
    blocked = fly_keep(base, np.array([1, 0, 1, 1, 1, 1, 1, 1], dtype=bool), 3)
    np.testing.assert_array_equal(blocked, base)


def _fly_trajectory(seed=0, T=7, V=5):
    q, p = _rows(seed, T, V)
    q[2] = [0.97, 0.01, 0.01, 0.005, 0.005]  # a near-deterministic position: the gate closes
    return Trajectory(q, p)


@pytest.mark.parametrize("win_len,threshold", [(1, 0.0), (2, 0.0), (3, 0.3), (2, 0.3)])
def test_fly_programme_equals_enumeration(win_len, threshold):
    tr = _fly_trajectory()
    assert not fly_gate(tr, 0.3)[2] and fly_gate(tr, 0.3).sum() >= 5
    fx = fly_exact_chain(tr, 5, win_len=win_len, entropy_threshold=threshold)
    bf = fly_brute_force(tr, 5, win_len=win_len, entropy_threshold=threshold)
    # the same expectations by two algorithms: float64 rounding of <= 2^7 paths
    for key in ("rounds", "tokens", "accepted", "kept", "drafts"):
        assert getattr(fx, key) == pytest.approx(bf[key], abs=1e-12), key
    np.testing.assert_allclose(fx.weights, bf["weights"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(fx.weights.sum(1), 1.0, atol=1e-12)  # each position emitted once
    np.testing.assert_allclose(fx.emitted.sum(1), 1.0, atol=1e-12)
    assert fx.tokens == pytest.approx(len(tr), abs=1e-12)
    if win_len <= 2 and threshold == 0.0:
        assert fx.kept > 0.05


def test_fly_programme_matches_sampling():
    tr = _fly_trajectory(T=6)
    fx = fly_exact_chain(tr, 4, win_len=2, entropy_threshold=0.0)
    n = 1200
    sim = simulate_fly(tr, 4, n_runs=n, rng=11, win_len=2, entropy_threshold=0.0)
    # per-run totals: 4.5 standard errors, a two-sided false alarm of ~7e-6 each
    for key in ("accepted", "kept", "rounds"):
        se = sim[key].std(ddof=1) / math.sqrt(n)
        assert abs(sim[key].mean() - getattr(fx, key)) <= 4.5 * se + 1e-12, key
    # the emitted token at position 3: chi-square against the exact marginal (alpha 1e-4)
    counts = np.bincount(sim["text"][:, 3], minlength=tr.vocab_size)
    exp = fx.emitted[3] * n
    assert stats.chisquare(counts[exp > 0], exp[exp > 0] * counts.sum() / exp.sum()).pvalue > 1e-4


def test_fly_is_not_a_one_step_rule():
    """The same (q, p) at every position: a one-step rule emits the same law everywhere,
    FLy keeps mismatches at some positions and never at others (the last W drafts of a round)."""
    q, p = np.array([0.4, 0.35, 0.25]), np.array([0.2, 0.3, 0.5])
    tr = Trajectory(np.tile(q, (8, 1)), np.tile(p, (8, 1)))
    fx = fly_exact_chain(tr, 4, win_len=2, entropy_threshold=0.0)
    keep = fx.weights[:, 1]
    assert keep.max() > 0.05 and keep[-1] == 0.0
    assert np.ptp(fx.emitted, axis=0).max() > 0.01  # the per-position law differs
