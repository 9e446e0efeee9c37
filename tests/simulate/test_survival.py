"""Exact survival labels of realised drafts and the throughput-maximising verify length,
against an enumeration of the verifier's coin outcomes and a sampled round; the chain
analysis under a drafting policy against its one-step laws."""

import itertools

import numpy as np
import pytest

from cactus_theory.analysis.one_step import acceptance_probabilities, acceptance_rate
from cactus_theory.rules import get_rule
from cactus_theory.simulate import Trajectory, exact_chain, position_laws
from cactus_theory.simulate._survival import (
    best_verify_length,
    expected_round_tokens,
    realised_acceptance,
    survival_probabilities,
)

# float64 sums and products of <= 8 terms of size <= 1
ATOL = 1e-13


def _round(seed, m=5, V=9):
    rng = np.random.default_rng(seed)
    q, p = rng.dirichlet(np.full(V, 0.5), m), rng.dirichlet(np.full(V, 0.5), m)
    drafts = np.array([rng.choice(V, p=row) for row in p])
    return q, p, drafts


def _enumerated_tokens(a, k):
    """E[N + 1] verifying the first k drafts, by enumerating every accept/reject pattern."""
    total = 0.0
    for pattern in itertools.product((True, False), repeat=k):
        prob = np.prod([a[i] if ok else 1 - a[i] for i, ok in enumerate(pattern)])
        n = next((i for i, ok in enumerate(pattern) if not ok), k)
        total += prob * (n + 1)
    return total


@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "sglang-threshold", "lossy-sd"])
def test_labels_are_the_rules_acceptance_at_the_realised_drafts(name):
    rule = get_rule(name)
    q, p, drafts = _round(1)
    a = realised_acceptance(rule, q, p, drafts)
    full = np.asarray(acceptance_probabilities(rule, q, p))
    np.testing.assert_allclose(a, full[np.arange(len(drafts)), drafts], rtol=0, atol=0)
    s = survival_probabilities(a)
    np.testing.assert_allclose(s, np.cumprod(a), rtol=0, atol=ATOL)
    e = expected_round_tokens(s)
    for k in range(len(a) + 1):
        assert e[k] == pytest.approx(_enumerated_tokens(a, k), abs=ATOL)


def test_survival_label_is_the_mean_of_the_sampled_outcome():
    """Sampling the verifier's coins: the fraction of rounds whose first j drafts survive
    matches S_j (binomial standard error; 6 sigma)."""
    q, p, drafts = _round(2)
    a = realised_acceptance("sps", q, p, drafts)
    s = survival_probabilities(a)
    rng = np.random.default_rng(3)
    N = 200_000
    survived = np.cumprod(rng.random((N, len(a))) < a, axis=1).mean(axis=0)
    se = np.sqrt(s * (1 - s) / N)
    assert np.all(np.abs(survived - s) <= 6 * se + 1e-12)


def test_best_verify_length_against_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(20):
        m = int(rng.integers(1, 7))
        a = rng.uniform(0.2, 1.0, m)
        cost = 1.0 + rng.uniform(0.05, 0.4) * np.arange(m + 1)
        k, thr = best_verify_length(survival_probabilities(a), cost)
        brute = [_enumerated_tokens(a, j) / cost[j] for j in range(m + 1)]
        np.testing.assert_allclose(thr, brute, rtol=0, atol=ATOL)
        assert int(k) == int(np.argmax(brute))


def test_best_verify_length_batched_and_hand_values():
    # a = (0.9, 0.5, 0.1), cost 1 + 0.25 k: E = 1, 1.9, 2.35, 2.395; E/c = 1, 1.52, 1.5667, 1.3686
    k, thr = best_verify_length(
        survival_probabilities([[0.9, 0.5, 0.1], [1.0, 1.0, 1.0]]), [1, 1.25, 1.5, 1.75]
    )
    np.testing.assert_allclose(thr[0], [1.0, 1.9 / 1.25, 2.35 / 1.5, 2.395 / 1.75], rtol=0, atol=ATOL)
    assert k.tolist() == [2, 3]


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="accept_at_drafts"):
        survival_probabilities([0.5, 1.2])
    with pytest.raises(ValueError, match="accept_at_drafts"):
        survival_probabilities([])
    with pytest.raises(ValueError, match="survival"):
        expected_round_tokens([0.5, 0.6])
    with pytest.raises(ValueError, match="cost"):
        best_verify_length([0.5, 0.25], [1.0, 1.1])
    with pytest.raises(ValueError, match="cost"):
        best_verify_length([0.5, 0.25], [1.0, 0.0, 1.2])
    q, p, drafts = _round(5)
    with pytest.raises(ValueError, match="draft_token_ids"):
        realised_acceptance("sps", q, p, drafts + 100)


def test_chain_under_argmax_drafting():
    """position_laws(drafting='argmax'): alpha_t = a_t(argmax p_t); SpS stays lossless; the
    exact chain's accepted count is the DP over those alphas."""
    rng = np.random.default_rng(6)
    T, V = 12, 7
    q, p = rng.dirichlet(np.full(V, 0.5), T), rng.dirichlet(np.full(V, 0.5), T)
    traj = Trajectory(target_probs=q, draft_probs=p)
    laws = position_laws("sps", traj, drafting="argmax")
    np.testing.assert_allclose(laws.alpha, q[np.arange(T), p.argmax(axis=1)], rtol=0, atol=ATOL)
    np.testing.assert_allclose(laws.emitted, q, rtol=0, atol=ATOL)
    np.testing.assert_allclose(laws.alpha, acceptance_rate("sps", q, p, drafting="argmax"), rtol=0, atol=0)
    chain = exact_chain("sps", traj, 3, laws=laws)
    default = exact_chain("sps", traj, 3)
    assert chain.totals.accepted != pytest.approx(default.totals.accepted)
    # the keyword gives the same chain as the laws made with it
    keyword = exact_chain("sps", traj, 3, drafting="argmax")
    assert keyword.totals.accepted == chain.totals.accepted and keyword.totals.rounds == chain.totals.rounds
    top2 = exact_chain("sps", traj, 3, drafting="top_k", draft_top_k=2)
    assert (
        top2.totals.accepted
        == exact_chain(
            "sps", traj, 3, laws=position_laws("sps", traj, drafting="top_k", draft_top_k=2)
        ).totals.accepted
    )
    with pytest.raises(ValueError, match="drafting"):
        exact_chain("sps", traj, 3, laws=laws, drafting="argmax")
    with pytest.raises(ValueError, match="drafting"):
        exact_chain("sps", traj, 3, drafting="greedy")
