"""The plans a rule builds (``rules/plans.py``): a spike plan solves gamma lazily and reads
min(gamma_n, p_n) only, and nothing the analysis reports changes against a plan holding the
whole gamma (every spike rule, rows with zeros, the blocked numpy mixture at V = 3,000); the
exact KL root is solved at under 2% of a benchmark-like row.
"""

import math

import numpy as np
import pytest
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import pairs

import cactus_theory.analysis.calibration  # noqa: F401  (registers cactus-calibrated)
from cactus_theory.analysis.one_step import (
    acceptance_probabilities,
    acceptance_rate,
    emitted_distribution,
    make_plan,
)
from cactus_theory.rules import RULES, SpikePlan, get_rule

NAMES = list(RULES.all_names())  # every rule, and every alias (a preset of a knob)


SPIKE_RULES = [n for n in NAMES if RULES[n].family == "spike"]


def _against_solved_spike(name, q, p, delta):
    """A spike rule's plan as made, against a plan holding its whole gamma: the same
    acceptance and emitted law bit for bit, and ``effective_spike`` as documented. The plan
    is read first: reading ``plan.spike`` solves (and keeps) the whole gamma."""
    knobs = {} if delta is None or "delta" not in RULES[name].defaults else {"delta": delta}
    plan = make_plan(get_rule(name, **knobs), q, p)
    eff = np.asarray(plan.effective_spike())
    emitted = np.asarray(emitted_distribution(plan))
    accept = np.asarray(acceptance_probabilities(plan))
    step = max(1, q.shape[-1] // 16)
    ids = [np.array(n) for n in range(0, q.shape[-1], step)]  # a drafted token at a time
    at = [(plan.accept_probs_at(n), np.asarray(plan.recovery_at(n))) for n in ids]
    gamma = np.asarray(plan.spike)  # the whole vocabulary's, solved now
    pq, pp = plan.target_probs, plan.draft_probs
    assert np.array_equal(eff, np.where(pp > 0, np.minimum(gamma, pp), (gamma > 0) * 1.0))
    solved = SpikePlan(pq, pp, gamma)
    assert np.array_equal(emitted, np.asarray(emitted_distribution(solved)))
    assert np.array_equal(accept, np.asarray(acceptance_probabilities(solved)))
    for n, (a_n, r_n) in zip(ids, at):
        assert a_n == solved.accept_probs_at(n)
        assert np.array_equal(r_n, np.asarray(solved.recovery_at(n)))


@pytest.mark.parametrize("name", SPIKE_RULES)
@settings(max_examples=profile_examples(1 / 3, "10 spike rules, each a whole gamma per example"))
@given(pair=pairs(1, 24), delta=st.sampled_from([None, 0.0, 1e-9, 0.1, 3.0, math.inf]))
def test_spike_plans_emit_the_law_of_their_whole_gamma(name, pair, delta):
    """Plans may solve gamma lazily and read min(gamma_n, p_n) only (the exact KL root is
    then solved at a few tokens): nothing the analysis reports may change. Rows with zeros
    in q, p or both (the p_n = 0 convention) included."""
    q, p = pair
    _against_solved_spike(name, q, p, delta)


@pytest.mark.parametrize("name", ["cactus-exact-kl", "cactus-exact-js", "cactus-taylor"])
def test_spike_plans_emit_the_law_of_their_whole_gamma_blocked_rows(name):
    """The same at V = 3,000 (the blocked numpy mixture), a row of a softmax-like q and p
    with truncated supports: p = 0, q = 0 and both on some tokens."""
    rng = np.random.default_rng(3)
    V = 3000
    q, p = np.exp(2.0 * rng.standard_normal(V)), np.exp(2.0 * rng.standard_normal(V))
    q[rng.random(V) < 0.2] = 0.0
    p[rng.random(V) < 0.2] = 0.0
    _against_solved_spike(name, q / q.sum(), p / p.sum(), 0.1)


def test_exact_kl_emitted_law_solves_few_roots(monkeypatch):
    """The emitted law and acceptance of cactus-exact-kl solve the root at the tokens whose
    gamma may lie below p_n only: under 2% of a benchmark-like row (V = 20,000)."""
    from benchmarks.run import correlated_pair
    from cactus_theory.solvers import _spike as spike

    q, p = correlated_pair(20_000, seed=5)
    solved = []
    real = spike._exact_numpy
    monkeypatch.setattr(spike, "_exact_numpy", lambda s, *a, **k: solved.append(s.size) or real(s, *a, **k))
    plan = make_plan(get_rule("cactus-exact-kl", delta=0.1), q, p)
    emitted_distribution(plan)
    acceptance_rate(plan)
    assert sum(solved) < 0.02 * q.size, solved
    assert "not computed" in repr(plan)
