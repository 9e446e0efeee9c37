"""The teacher-forced chain simulator (``simulate/_chain.py``): its simulated metrics against the
exact expectations for every rule, the structure of its rounds, the emitted marginal, and its
bad inputs.
"""

import numpy as np
import pytest
from rule_configs import CONFIGS  # every rule at its defaults and halfway to SpS

from cactus_theory.rules import get_rule
from cactus_theory.simulate import (
    Trajectory,
    compute_metrics,
    exact_chain,
    position_laws,
    simulate_chain,
    synthetic_trajectory,
)
from cactus_theory.simulate._exact import brute_force_chain


def _tiny(T, V, seed, truncated=False):
    return synthetic_trajectory("dirichlet", T, V, seed, top_k=2 if truncated else None, concentration=0.7)


# ---------------------------------------------------------------------------------------------
# Simulation against the exact expectations (every rule)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, knobs", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_simulated_metrics_within_5_se_of_exact(name, knobs):
    """Pooled simulated ratios vs ratios of expected totals, |diff| <= 5 se.

    5 standard errors: two-sided false-alarm ~6e-7 per check under the normal approximation of
    the delta method (400 runs of ~60 rounds). When the simulated se is 0 (every run
    identical) the values must agree to 1e-12 (floating-point summation).
    """
    rule = get_rule(name, **knobs)
    traj = synthetic_trajectory("noisy_copy", 60, 16, 3, temperature=0.8, top_k=8)
    laws = position_laws(rule, traj)
    run = simulate_chain(rule, traj, 4, n_runs=400, rng=5, laws=laws, record_tokens=False)
    sim = compute_metrics(run.totals(), cost_ratio=0.1)
    ex = compute_metrics(exact_chain(rule, traj, 4, laws=laws).totals, cost_ratio=0.1)
    checks = [
        "al_paper",
        "tokens_per_call",
        "v0_acceptance_rate",
        "prefix_acceptance_rate",
        "rejected_per_token",
        "speedup",
    ]
    for key in checks:
        s, e = sim[key], ex[key]
        assert abs(s.value - e.value) <= 5 * s.se + 1e-12, f"{name} {key}: {s} vs {e.value}"
    for i in range(4):
        s, e = sim["pos_marginal"][i], ex["pos_marginal"][i]
        assert abs(s.value - e.value) <= 5 * s.se + 1e-12, f"{name} pos {i}: {s} vs {e.value}"


def test_round_structure_invariants():
    traj = _tiny(40, 5, seed=1)
    m = 3
    run = simulate_chain("cactus-taylor", traj, m, n_runs=50, rng=0)
    for r in range(50):
        sel = run.round_run == r
        st, ms, N = run.round_start[sel], run.round_drafts[sel], run.round_accepted[sel]
        assert st[0] == 0 and np.all(np.diff(st) == N[:-1] + 1)  # rounds tile the text
        assert st[-1] + N[-1] + 1 == 40
        assert np.all(ms == np.minimum(m, 40 - 1 - st))
        assert np.all((N >= 0) & (N <= ms))
        bonus_at = (st + ms)[N == ms]
        assert set(np.flatnonzero(run.bonus_position[r])) == set(bonus_at.tolist())
        nc = run.round_noncausal[sel]
        assert np.all((nc >= N) & (nc <= ms))
    assert run.tokens.shape == (50, 40) and run.tokens.min() >= 0 and run.tokens.max() < 5


def test_emitted_marginal_matches_exact():
    """Emitted token at position t ~ b_t q_t + (1 - b_t) h_t; chi-square, false alarm 1e-3."""
    from scipy import stats

    traj = _tiny(6, 4, seed=2)
    laws = position_laws("cactus-exact-kl", traj)
    ex = exact_chain("cactus-exact-kl", traj, 2, laws=laws)
    run = simulate_chain("cactus-exact-kl", traj, 2, n_runs=20_000, rng=4, laws=laws)
    for t in range(6):
        b = ex.bonus_prob[t]
        marg = b * traj.target_probs[t] + (1 - b) * laws.emitted[t]
        counts = np.bincount(run.tokens[:, t], minlength=4)
        keep = marg > 0
        assert counts[~keep].sum() == 0
        assert stats.chisquare(counts[keep], marg[keep] / marg[keep].sum() * 20_000).pvalue > 1e-3


def test_bad_inputs_raise():
    traj = _tiny(5, 3, seed=0)
    with pytest.raises(ValueError, match="m"):
        simulate_chain("sps", traj, 0)
    with pytest.raises(ValueError, match="n_runs"):
        simulate_chain("sps", traj, 2, n_runs=0)
    with pytest.raises(ValueError, match="draft_probs|shape"):
        Trajectory(np.full((3, 4), 0.25), np.full((3, 5), 0.2))
    with pytest.raises(ValueError, match="T"):
        brute_force_chain("sps", _tiny(20, 3, seed=0), 2)
