"""The peer rules' own formulas against independent oracles, and the chain-level policies.

Registered token-level rules (rfsd, scd, relaxed-topk and its aliases, margin-relaxed,
static-ensemble) also run through the invariant battery with no special casing; here each is
checked against its source's formula written out independently (the TensorRT-LLM kernel's
loop, the overlay's logit arithmetic, transformers' ratio). The relaxed bonus policy is
checked against a sampler that drafts, tests and recovers; FLy's chain programme in
tests/simulate/test_fly.py.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from strategies import pairs

from cactus_theory.analysis.one_step import (
    acceptance_probabilities,
    acceptance_rate,
    emitted_distribution,
    make_plan,
)
from cactus_theory.divergences import get_divergence
from cactus_theory.rules import get_rule
from cactus_theory.simulate._bonus import relaxed_bonus_chain, simulate_relaxed_bonus
from cactus_theory.simulate._chain import Trajectory
from cactus_theory.simulate._exact import exact_chain

# float64 sums of <= 32 terms of size <= 1
ATOL = 1e-12


def _rows(seed, T, V, conc=0.6):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc), T), rng.dirichlet(np.full(V, conc), T)


# --------------------------------------------------------------------------------------
# static ensemble = interpolation
# --------------------------------------------------------------------------------------


def test_static_ensemble_and_interpolation_differ_only_by_the_p0_convention_at_a_subnormal_weight():
    """The counterexample hypothesis found: q = (1, 0), p = (0, 1), w = 2.2e-309. 1 - w rounds to
    1, so interpolation's h puts exactly 0 on token 0 while the ensemble's has w > 0 there: the
    acceptance of token 0, which p never drafts (the h_n > 0 convention at p_n = 0), is 1 against
    0. The drafted token's acceptance and the emitted law agree."""
    q, p, w = np.array([1.0, 0.0]), np.array([0.0, 1.0]), 2.225073858507203e-309
    ens = make_plan(get_rule("static-ensemble", assistant_ensemble_weight=w), q, p)
    itp = make_plan(get_rule("interpolation", alpha=1.0 - w), q, p)
    assert np.asarray(ens.accept_probs())[0] == 1.0 and np.asarray(itp.accept_probs())[0] == 0.0
    assert np.asarray(ens.accept_probs())[1] == np.asarray(itp.accept_probs())[1]
    np.testing.assert_allclose(emitted_distribution(ens), emitted_distribution(itp), rtol=0, atol=ATOL)


@given(pair=pairs(1, 32), w=st.floats(0.0, 1.0))
def test_static_ensemble_is_interpolation_and_matches_transformers(pair, w):
    q, p = pair
    ens = make_plan(get_rule("static-ensemble", assistant_ensemble_weight=w), q, p)
    itp = make_plan(get_rule("interpolation", alpha=1.0 - w), q, p)
    # the acceptance of the tokens that can be drafted (p_n > 0); at p_n = 0 it is the
    # h_n > 0 convention, which rounding of 1 - w can flip (pinned below)
    pos = p > 0
    np.testing.assert_allclose(
        np.asarray(ens.accept_probs())[pos], np.asarray(itp.accept_probs())[pos], rtol=0, atol=ATOL
    )
    np.testing.assert_allclose(emitted_distribution(ens), emitted_distribution(itp), rtol=0, atol=ATOL)
    # the recoveries where they are used: weighted by the rejected mass (at w below one ulp
    # of 1, 1 - (1 - w) rounds to 0 and only rejection-free residuals differ)
    rej_e = float(np.dot(p, 1.0 - np.asarray(ens.accept_probs())))
    rej_i = float(np.dot(p, 1.0 - np.asarray(itp.accept_probs())))
    np.testing.assert_allclose(
        rej_e * np.asarray(ens.recovery_at(np.array(0))),
        rej_i * np.asarray(itp.recovery_at(np.array(0))),
        rtol=0,
        atol=ATOL,
    )
    # transformers' _speculative_sampling with assistant_ensemble_weight: min(1, 1 - w + w q/p)
    np.testing.assert_allclose(
        np.asarray(ens.accept_probs())[pos], np.minimum(1.0, 1.0 - w + w * q[pos] / p[pos]), rtol=0, atol=ATOL
    )
    # DIVERSED: acceptance 1 - w TV(p, q); the emitted law is h itself
    tv = 0.5 * np.abs(p - q).sum()
    assert float(acceptance_rate(ens)) == pytest.approx(1.0 - w * tv, abs=ATOL)
    np.testing.assert_allclose(emitted_distribution(ens), w * q + (1 - w) * p, rtol=0, atol=ATOL)


# --------------------------------------------------------------------------------------
# rfsd
# --------------------------------------------------------------------------------------


def test_rfsd_divergence_direction_and_sps_branch():
    q, p = np.array([0.7, 0.2, 0.1]), np.array([0.3, 0.3, 0.4])
    kl_qp, kl_pq = float(np.sum(q * np.log(q / p))), float(np.sum(p * np.log(p / q)))
    assert kl_qp < kl_pq  # a threshold between them tells the directions apart
    T = 0.5 * (kl_qp + kl_pq)
    rule = get_rule("rfsd", fuzzy_threshold=T, fuzzy_divergence="kl")
    np.testing.assert_allclose(emitted_distribution(rule, q, p), p, atol=ATOL)  # KL(q||p) <= T
    np.testing.assert_array_equal(acceptance_probabilities(rule, q, p), [1.0, 1.0, 1.0])
    below = get_rule("rfsd", fuzzy_threshold=0.99 * kl_qp)
    np.testing.assert_allclose(emitted_distribution(below, q, p), q, atol=ATOL)
    # unlike FSD, the far branch is SpS: it accepts sum min(p, q), FSD accepts nothing
    assert float(acceptance_rate(below, q, p)) == pytest.approx(np.minimum(p, q).sum(), abs=ATOL)
    fsd = get_rule("fuzzy", fsd_div_threshold=0.0, fsd_div_type="kl_div_reversed_processed")
    assert float(acceptance_rate(fsd, q, p)) == 0.0
    js = float(get_divergence("js").unchecked(p, q))
    near = get_rule("rfsd", fuzzy_threshold=js * (1 + 1e-9), fuzzy_divergence="js")
    np.testing.assert_allclose(emitted_distribution(near, q, p), p, atol=ATOL)


# --------------------------------------------------------------------------------------
# scd, against the overlay's arithmetic on logits
# --------------------------------------------------------------------------------------


def _overlay_scd(z_e, z_a, beta, T, gate):
    """apply_scd_constraint: softmax(((1 + beta) z_E - beta z_A) / T) on the gate."""
    s = ((1 + beta) * z_e - beta * z_a) / T
    s = np.where(gate, s, -np.inf)
    w = np.exp(s - s.max())
    return w / w.sum()


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_scd_matches_the_overlay_logit_formula(T):
    rng = np.random.default_rng(5)
    V = 9
    z_e, z_a = 2.0 * rng.standard_normal(V), 2.0 * rng.standard_normal(V)
    rq, rp = np.exp(z_e) / np.exp(z_e).sum(), np.exp(z_a) / np.exp(z_a).sum()
    # the processed verifier: temperature T, then top-k = 4 (the overlay's toppk gate)
    qT = np.exp(z_e / T) / np.exp(z_e / T).sum()
    keep = np.argsort(-qT)[:4]
    q = np.zeros(V)
    q[keep] = qT[keep]
    q /= q.sum()
    p = np.exp(z_a / T) / np.exp(z_a / T).sum()
    for beta in (0.1, 0.5, 1.0):
        rule = get_rule("scd", scd_beta=beta, scd_temperature=T)
        h = emitted_distribution(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
        np.testing.assert_allclose(h, _overlay_scd(z_e, z_a, beta, T, q > 0), rtol=0, atol=1e-12)
        alpha = 0.2
        gate = z_e >= z_e.max() + T * math.log(alpha)  # scd_alpha_gate_from_logits
        rule = get_rule("scd", scd_beta=beta, scd_temperature=T, gate="alpha", scd_alpha=alpha)
        h = emitted_distribution(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
        np.testing.assert_allclose(h, _overlay_scd(z_e, z_a, beta, T, gate), rtol=0, atol=1e-12)


def test_scd_zero_draft_probability_is_the_limit():
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.6, 0.4, 0.0])
    rule = get_rule("scd", scd_beta=0.5)
    limit = emitted_distribution(rule, q, p)
    eps = 1e-12  # the contrastive row as the drafter's entry at token 2 goes to 0
    near = emitted_distribution(rule, q, np.array([0.6, 0.4 - eps, eps]))
    np.testing.assert_allclose(limit, [0.0, 0.0, 1.0], atol=ATOL)
    assert near[2] > 1 - 1e-5


# --------------------------------------------------------------------------------------
# relaxed top-K (TensorRT-LLM kernel, vLLM #45229), margin
# --------------------------------------------------------------------------------------


def _trtllm_accepts(probs, token, K, delta):
    """mtpRelaxedAcceptanceKernel's loop over torch.topk(softmax) values, written out."""
    order = np.argsort(-probs, kind="stable")[:K]
    threshold = probs[order[0]] - delta
    for jj, idx in enumerate(order):
        if jj > 0 and threshold > probs[idx]:
            break
        if idx == token:
            return True
    return False


@pytest.mark.parametrize("K,delta", [(1, 0.0), (3, 0.05), (10, 0.6), (2, 1.0)])
def test_relaxed_topk_is_the_tensorrt_llm_kernel(K, delta):
    rng = np.random.default_rng(K)
    for _ in range(20):
        rq = rng.dirichlet(np.full(12, 0.3))  # continuous: no ties
        q = rng.dirichlet(np.full(12, 0.3))
        p = rng.dirichlet(np.ones(12))
        plan = make_plan(
            get_rule("relaxed-topk", relaxed_topk=K, relaxed_delta=delta), q, p, raw_target_probs=rq
        )
        want = [_trtllm_accepts(rq, n, K, delta) for n in range(12)]
        np.testing.assert_array_equal(np.asarray(plan.accept_probs()) == 1.0, want)
        np.testing.assert_array_equal(plan.recovery_at(np.array(0)), np.eye(12)[np.argmax(q)])


def test_vllm_relaxed_thinking_and_greedy_aliases():
    rng = np.random.default_rng(3)
    z = rng.standard_normal(10)
    rq = np.exp(z) / np.exp(z).sum()
    p = np.full(10, 0.1)
    a = acceptance_probabilities("vllm-relaxed-thinking", rq, p, raw_target_probs=rq)
    top3 = np.argsort(-z)[:3]
    want = np.isin(np.arange(10), top3) & (z >= z.max() + math.log(0.5))  # #45229's logit test
    np.testing.assert_array_equal(a == 1.0, want)
    g = acceptance_probabilities("greedy", rq, p)
    np.testing.assert_array_equal(g, np.eye(10)[np.argmax(rq)])


def test_margin_rule_accepts_the_runner_up_below_the_margin_only():
    q = np.array([0.40, 0.30, 0.20, 0.10])
    p = np.full(4, 0.25)
    gap = math.log(0.40 / 0.30)
    np.testing.assert_array_equal(
        acceptance_probabilities(get_rule("margin-relaxed", margin_threshold=gap * 1.01), q, p), [1, 1, 0, 0]
    )
    np.testing.assert_array_equal(
        acceptance_probabilities(get_rule("margin-relaxed", margin_threshold=gap * 0.99), q, p), [1, 0, 0, 0]
    )


# --------------------------------------------------------------------------------------
# the relaxed bonus policy
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,knobs", [("cactus-taylor", {"delta": 0.3}), ("sps", {})])
def test_relaxed_bonus_chain_matches_sampling(name, knobs):
    q, p = _rows(4, 7, 5)
    tr = Trajectory(q, p)
    rule = get_rule(name, **knobs)
    ex = relaxed_bonus_chain(rule, tr, 3)
    std = exact_chain(rule, tr, 3)
    assert ex.tokens == pytest.approx(float(std.totals.tokens[0]), abs=1e-12)  # unchanged
    assert ex.accepted == pytest.approx(float(std.totals.accepted[0]) + ex.bonus_accepted, abs=1e-12)
    assert ex.bonus_accepted > 0.1
    # every position but the last emits h_t: the text's KL is the per-step sum there
    kl = get_divergence("kl")
    h = std.laws.emitted
    assert ex.sequence_kl == pytest.approx(
        float(kl.unchecked(h[:-1], q[:-1]).sum() + kl.unchecked(ex.emitted[-1], q[-1])), abs=1e-12
    )
    n = 2000
    sim = simulate_relaxed_bonus(rule, tr, 3, n_runs=n, rng=7)
    for key in ("accepted", "bonus_accepted", "drafts", "rounds"):
        se = sim[key].std(ddof=1) / math.sqrt(n)
        assert abs(sim[key].mean() - getattr(ex, key)) <= 4.5 * se + 1e-12, key  # ~7e-6 each
    counts = np.bincount(sim["text"][:, 5], minlength=5)
    exp = ex.emitted[5] * n
    assert stats.chisquare(counts[exp > 0], exp[exp > 0] * counts.sum() / exp.sum()).pvalue > 1e-4
