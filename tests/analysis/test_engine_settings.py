"""Serving engines' verification rules and drafting policies against ports of their code.

SGLang's target-only kernel (``TreeSpeculativeSamplingTargetOnly``, chain form) and vLLM's
``NO_DRAFT_PROBS`` path are ported here step by step (the coin test, the residual with the
rejected token's slot overwritten); the overlay's lossy speculative decoding
(``mentored_dec``) is written out from its formula. The registered rules are checked against
those ports on random rows: the acceptance is the port's coin boundary, the recovery its
normalized residual, and the emitted law the enumeration over drafted tokens of the port's
decision. The drafting policies (sample, argmax, top-k of p) of the exact one-step analysis
are checked on the values worked out by hand and against an enumeration.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import pairs

from cactus_theory.analysis.one_step import (
    _drafting_distribution,
    acceptance_probabilities,
    acceptance_rate,
    analyze,
    emitted_distribution,
    make_plan,
)
from cactus_theory.divergences import get_divergence
from cactus_theory.drafts._laws import top_k_tokens
from cactus_theory.rules import RULES, get_rule

# float64 sums of <= 64 terms of size <= 1
ATOL = 1e-12


def _rows(seed, V, conc=0.5):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


# --------------------------------------------------------------------------------------
# ports of the engines' decisions
# --------------------------------------------------------------------------------------


def _sglang_chain_step(q, n, coin, threshold_single, threshold_acc):
    """One chain position of sgl-kernel's TreeSpeculativeSamplingTargetOnly, in numpy.

    ``draft_probs`` is the caller's buffer of zeros; on rejection the kernel writes
    ``draft_probs[n] = target_probs[n]`` and samples from relu(target - draft). Returns
    (accepted, residual weights or None)."""
    t_acc = max(threshold_acc, 1e-9)  # the launcher's fmaxf(threshold_acc, 1e-9f)
    prob_acc = 0.0 + q[n]  # one child: the accumulated probability is the child's own
    if coin <= prob_acc / t_acc or q[n] >= threshold_single:
        return True, None
    draft = np.zeros_like(q)
    draft[n] = q[n]
    return False, np.maximum(q - draft, 0.0)


def _coin_boundary(accepts):
    """The acceptance probability of a coin test u -> accepts(u) monotone in u (accepting
    u <= a): bisection on [0, 1) to 1e-15."""
    if not accepts(0.0):
        return 0.0
    if accepts(np.nextafter(1.0, 0.0)):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if accepts(mid) else (lo, mid)
    return lo


def _port_law(step, q, p, *args):
    """(acceptance, emitted law) of one position through a port, enumerating n ~ p."""
    V = len(q)
    acc, h = 0.0, np.zeros(V)
    for n in np.flatnonzero(p > 0):
        a = _coin_boundary(lambda u, n=n: step(q, n, u, *args)[0])
        acc += p[n] * a
        h[n] += p[n] * a
        if a < 1:
            res = step(q, n, 2.0, *args)[1]  # a coin above every boundary rejects
            h += p[n] * (1 - a) * res / res.sum()
    return acc, h


def _vllm_no_draft_probs_step(q, n, coin):
    """vLLM's rejection sampler without draft probabilities: draft_prob = 1, accept iff
    target_prob / draft_prob >= uniform; the recovery is the target row with n zeroed."""
    if q[n] / 1.0 >= coin and q[n] > 0:
        return True, None
    res = q.copy()
    res[n] = 0.0
    return False, res


# --------------------------------------------------------------------------------------
# SGLang's thresholds
# --------------------------------------------------------------------------------------


def test_sglang_worked_example_and_the_equal_acceptance_cactus_budget():
    """q = (0.5, 0.3, 0.2), draft n = 1 (one-hot), t_acc = 0.5: acceptance 0.6, emitted
    (2/7, 0.6, 0.8/7), KL 0.192042; Cactus-Taylor accepts 0.6 there at delta = 3/14."""
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.0, 1.0, 0.0])
    res = analyze(get_rule("sglang-threshold", threshold_acc=0.5), q, p)
    assert float(res.acceptance) == pytest.approx(0.6, abs=ATOL)
    np.testing.assert_allclose(res.emitted, [0.4 * 0.5 / 0.7, 0.6, 0.4 * 0.2 / 0.7], rtol=0, atol=ATOL)
    assert float(res.divergences["kl"]) == pytest.approx(0.192042, abs=5e-7)  # the quoted 6 digits
    cactus = acceptance_rate(get_rule("cactus-taylor", delta=3 / 14), q, p)
    assert float(cactus) == pytest.approx(0.6, abs=ATOL)


@pytest.mark.parametrize("t_single, t_acc", [(1.0, 1.0), (1.0, 0.5), (0.3, 1.0), (0.2, 0.05), (0.0, 1.0)])
def test_sglang_rule_is_the_kernel_on_random_rows(t_single, t_acc):
    """Acceptance = the port's coin boundary at every drafted token; with a one-hot draft the
    recovery is the port's residual; for a drafter p the emitted law is the port's, drafted
    token by drafted token (the kernel never reads p)."""
    rule = get_rule("sglang-threshold", threshold_single=t_single, threshold_acc=t_acc)
    for seed in range(6):
        q, p = _rows(seed, 9)
        if seed % 2:
            q[np.argsort(q)[:3]] = 0.0  # a truncated verifier
            q /= q.sum()
        a = np.asarray(acceptance_probabilities(rule, q, p))
        for n in range(len(q)):
            port = _coin_boundary(lambda u, n=n, q=q: _sglang_chain_step(q, n, u, t_single, t_acc)[0])
            assert a[n] == pytest.approx(port, abs=1e-14)  # the bisection's resolution
            if port < 1:
                one_hot = np.eye(len(q))[n]
                r = np.asarray(make_plan(rule, q, one_hot).recovery_at(np.array(n)))
                res = _sglang_chain_step(q, n, 2.0, t_single, t_acc)[1]
                np.testing.assert_allclose(r, res / res.sum(), rtol=0, atol=ATOL)
        acc, h = _port_law(_sglang_chain_step, q, p, t_single, t_acc)
        assert float(acceptance_rate(rule, q, p)) == pytest.approx(acc, abs=1e-13)
        np.testing.assert_allclose(emitted_distribution(rule, q, p), h, rtol=0, atol=1e-13)


@given(pair=pairs(1, 24), t_acc=st.floats(0.01, 1.0))
def test_sglang_with_a_one_hot_draft_is_the_spike_rule_of_its_acceptance(pair, t_acc):
    """p = e_n: h^(n)_n = a_n, h^(n)_i = (1 - a_n) q_i / (1 - q_n) (Theorem 2's spike with
    gamma = a_n); the emitted KL is the two-point form at (a_n, q_n)."""
    q, p = pair
    n = int(np.argmax(p))
    e = np.eye(len(q))[n]
    rule = get_rule("sglang-threshold", threshold_acc=t_acc)
    a = min(1.0, q[n] / t_acc)
    h = emitted_distribution(rule, q, e)
    spike = np.where(np.arange(len(q)) == n, a, (1 - a) * q / (1 - q[n]) if q[n] < 1 else 0.0)
    np.testing.assert_allclose(h, spike, rtol=0, atol=ATOL)
    kl = float(get_divergence("kl").unchecked(h, q))
    assert kl == pytest.approx(float(get_divergence("kl").two_point(np.array(a), np.array(q[n]))), abs=1e-12)


def test_sglang_worst_case_kl_per_token_is_log_one_over_t():
    """One-hot drafts: a = 1 on q_n >= t, so the emitted KL is ln(1/q_n) there, largest at
    q_n = t (4.6 nats at t = 0.01); below t the two-point KL stays under it."""
    for t in (0.01, 0.1, 0.5):
        two_point = get_divergence("kl").two_point
        grid = np.linspace(1e-6, 1 - 1e-6, 20_001)
        a = np.minimum(1.0, grid / t)
        kl = two_point(a, grid)
        assert float(kl.max()) <= math.log(1 / t) + 1e-12
        at_t = float(two_point(np.array(1.0), np.array(t)))
        assert at_t == pytest.approx(math.log(1 / t), abs=1e-12)
        V = 3
        q = np.array([t, (1 - t) / 2, (1 - t) / 2])
        h = emitted_distribution(get_rule("sglang-threshold", threshold_single=t), q, np.eye(V)[0])
        assert float(get_divergence("kl").unchecked(h, q)) == pytest.approx(math.log(1 / t), abs=1e-12)
    assert math.log(100) == pytest.approx(4.6, abs=0.01)  # the docstring's 4.6 nats, to its digits


def test_sglang_launcher_floor_on_threshold_acc():
    """threshold_acc is floored at 1e-9 as the launcher does (0 included): a tiny t_acc accepts
    q_n >= 1e-9."""
    q, e = np.array([1e-10, 2e-9, 1 - 2.1e-9]), np.eye(3)
    rule = get_rule("sglang-threshold", threshold_acc=1e-12)
    a = np.asarray(acceptance_probabilities(rule, q, e[0]))
    np.testing.assert_allclose(a, [0.1, 1.0, 1.0], rtol=1e-12, atol=0)
    zero = np.asarray(acceptance_probabilities(get_rule("sglang-threshold", threshold_acc=0.0), q, e[0]))
    np.testing.assert_array_equal(zero, a)
    with pytest.raises(ValueError, match="threshold_acc"):
        get_rule("sglang-threshold", threshold_acc=-0.1)


# --------------------------------------------------------------------------------------
# sampler-match (vLLM without draft probabilities) and drafting policies
# --------------------------------------------------------------------------------------


@given(pair=pairs(1, 32))
def test_sampler_match_is_lossless_with_acceptance_sum_pq(pair):
    q, p = pair
    for name in ("sampler-match", "one-hot-draft"):
        np.testing.assert_allclose(emitted_distribution(name, q, p), q, rtol=0, atol=ATOL)
        assert float(acceptance_rate(name, q, p)) == pytest.approx(float(np.dot(p, q)), abs=ATOL)
    # SGLang at its defaults is the same rule
    sg = make_plan("sglang-threshold", q, p)
    sm = make_plan("sampler-match", q, p)
    np.testing.assert_array_equal(sg.accept_probs(), sm.accept_probs())
    np.testing.assert_array_equal(sg.recovery, sm.recovery)


def test_sampler_match_is_vllm_without_draft_probs():
    for seed in range(4):
        q, p = _rows(100 + seed, 8)
        acc, h = _port_law(_vllm_no_draft_probs_step, q, p)
        assert float(acceptance_rate("sampler-match", q, p)) == pytest.approx(acc, abs=1e-13)
        np.testing.assert_allclose(emitted_distribution("sampler-match", q, p), h, rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    "q, p, sps, match, argmax",
    [
        ([0.9, 0.05, 0.05], [0.4, 0.3, 0.3], 0.50, 0.39, 0.90),
        ([0.6, 0.4], [0.8, 0.2], 0.80, 0.56, 0.60),
        # the counterexample to "argmax drafting always maximises acceptance"
        ([0.0, 1.0, 0.0], [0.51, 0.49, 0.0], 0.49, 0.49, 0.0),
    ],
)
def test_one_step_acceptance_under_drafting_policies(q, p, sps, match, argmax):
    """Sample p and the ratio test (SpS), sample p and sampler-match, the argmax draft (SpS
    on its one-hot law, which sampler-match equals)."""
    assert float(acceptance_rate("sps", q, p)) == pytest.approx(sps, abs=ATOL)
    assert float(acceptance_rate("sampler-match", q, p)) == pytest.approx(match, abs=ATOL)
    for name in ("sps", "sampler-match", "sglang-threshold"):
        assert float(acceptance_rate(name, q, p, drafting="argmax")) == pytest.approx(argmax, abs=ATOL)
        assert float(acceptance_rate(name, q, p, drafting="top_k", draft_top_k=1)) == pytest.approx(
            argmax, abs=ATOL
        )
    # every lossless verification of the argmax draft emits q
    np.testing.assert_allclose(emitted_distribution("sps", q, p, drafting="argmax"), q, rtol=0, atol=ATOL)


def test_argmax_drafting_is_not_always_the_best():
    """q = (0, 1, 0), p = (0.51, 0.49, 0): the argmax draft is never accepted (0), a sampled
    draft is accepted with 0.49 under SpS."""
    q, p = [0.0, 1.0, 0.0], [0.51, 0.49, 0.0]
    assert float(acceptance_rate("sps", q, p, drafting="argmax")) == 0.0
    assert float(acceptance_rate("sps", q, p)) == pytest.approx(0.49, abs=ATOL)


@given(pair=pairs(1, 24), k=st.integers(1, 30))
def test_top_k_drafting_law_and_losslessness(pair, k):
    """The top-k law is p on exactly min(k, V) tokens chosen as drafts.top_k_tokens does
    (ties to the lower id), renormalized; SpS verifying it emits q, with acceptance
    sum min(p_k, q)."""
    q, p = pair
    law = np.asarray(_drafting_distribution(p, "top_k", k))
    keep = top_k_tokens(p, min(k, len(p)))
    expect = np.zeros_like(p)
    expect[keep] = p[keep]
    np.testing.assert_allclose(law, expect / expect.sum(), rtol=0, atol=ATOL)
    np.testing.assert_allclose(
        emitted_distribution("sps", q, p, drafting="top_k", draft_top_k=k), q, atol=ATOL
    )
    a = float(acceptance_rate("sps", q, p, drafting="top_k", draft_top_k=k))
    assert a == pytest.approx(float(np.minimum(law, q).sum()), abs=ATOL)


def test_drafting_default_is_unchanged_and_bad_values_raise():
    q, p = _rows(7, 11)
    for name in ("sps", "cactus-taylor", "tas", "lossy-sd"):
        np.testing.assert_array_equal(
            emitted_distribution(name, q, p), emitted_distribution(name, q, p, drafting="sample")
        )
    with pytest.raises(ValueError, match="drafting"):
        acceptance_rate("sps", q, p, drafting="greedy")
    for bad in (None, 0, 2.5, True):
        with pytest.raises(ValueError, match="draft_top_k"):
            acceptance_rate("sps", q, p, drafting="top_k", draft_top_k=bad)
    with pytest.raises(ValueError, match="drafting"):
        acceptance_rate(make_plan("sps", q, p), drafting="argmax")


def test_drafting_on_torch_rows_matches_numpy():
    torch = pytest.importorskip("torch")
    q, p = _rows(8, 10)
    for drafting, k in (("argmax", None), ("top_k", 3)):
        want = emitted_distribution("cactus-taylor", q, p, drafting=drafting, draft_top_k=k)
        got = emitted_distribution(
            "cactus-taylor", torch.tensor(q), torch.tensor(p), drafting=drafting, draft_top_k=k
        )
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=ATOL)


# --------------------------------------------------------------------------------------
# the overlay's lossy speculative decoding (mentored_dec)
# --------------------------------------------------------------------------------------


def _lossy_sd_law(q, p, alpha):
    """The overlay's decision written out: accept min(1, q_n / ((1 - alpha) p_n)), recover
    from (q - p)+ normalized (q where that is empty); enumerated over n ~ p."""
    a = np.array([min(1.0, q[n] / ((1 - alpha) * p[n])) if p[n] > 0 else 0.0 for n in range(len(q))])
    res = np.maximum(q - p, 0.0)
    r = res / res.sum() if res.sum() > 0 else q
    acc = float(np.dot(p, a))
    return acc, p * a + (1 - acc) * r


@pytest.mark.parametrize("alpha", [0.0, 0.15, 0.35, 0.75, 0.95])
def test_lossy_sd_is_the_overlays_formula(alpha):
    rule = get_rule("lossy-sd", alpha=alpha)
    for seed in range(6):
        q, p = _rows(200 + seed, 12)
        acc, h = _lossy_sd_law(q, p, alpha)
        assert float(acceptance_rate(rule, q, p)) == pytest.approx(acc, abs=ATOL)
        np.testing.assert_allclose(emitted_distribution(rule, q, p), h, rtol=0, atol=ATOL)
        if alpha == 0.0:
            np.testing.assert_allclose(h, q, rtol=0, atol=ATOL)


def test_lossy_sd_differs_from_mentored_at_the_same_emitted_kl():
    """No budget of ``mentored`` reproduces lossy SD: on this pair Mentored accepts strictly
    more (0.80222 against 0.8) at the KL lossy SD's emitted law has (0.10684). Mentored's
    target at a budget D' would have to be h itself, so KL(h) = D <= D'; but its acceptance
    is nondecreasing in the budget, so it would be >= 0.80222 > sum min(p, h) = 0.8."""
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    res = analyze(get_rule("lossy-sd", alpha=0.5), q, p)
    kl = float(res.divergences["kl"])
    mentored = float(acceptance_rate(get_rule("mentored", D=kl), q, p))
    assert float(res.acceptance) == pytest.approx(0.8, abs=ATOL)
    assert float(np.minimum(p, res.emitted).sum()) == pytest.approx(0.8, abs=ATOL)
    # the solver's acceptance is exact to ~1e-12; the gap is 2.2e-3
    assert mentored > float(res.acceptance) + 1e-3


def test_engine_rules_are_registered_with_their_sources():
    for name in ("sglang-threshold", "sampler-match", "lossy-sd"):
        spec = RULES[name]
        assert spec.reference and spec.summary
    assert RULES["one-hot-draft"].alias_of is RULES["sampler-match"]


# --------------------------------------------------------------------------------------
# the engines' settings table (docs/engines.md, generated by scripts/update_readme.py)
# --------------------------------------------------------------------------------------


def test_every_registered_rule_has_a_row_in_the_engine_table():
    from cactus_theory.analysis.engine_settings import _NOT_TABULATED, all_settings

    rules = {s.rule for s in all_settings()}
    assert set(RULES) - set(_NOT_TABULATED) <= rules
    for s in all_settings():  # every setting is a valid configuration
        get_rule(s.rule, **s.knobs)


def test_engine_setting_costs_on_synthetic_rows():
    """Lossless settings cost 0; SGLang's t_single = 0.01 with argmax drafts stays under
    ln(1/t) per token; the pooled mean is the mean of the per-position values."""
    from cactus_theory.analysis.engine_settings import EngineSetting, setting_costs

    rng = np.random.default_rng(5)
    pairs = []
    for n in (30, 20):
        q, p = rng.dirichlet(np.full(16, 0.3), n), rng.dirichlet(np.full(16, 0.3), n)
        pairs.append((q, p, q, p))
    settings = [
        EngineSetting("e", "s", "sps"),
        EngineSetting("e", "s", "sampler-match"),
        EngineSetting("e", "s", "sps", drafting="argmax"),
        EngineSetting("e", "s", "sglang-threshold", {"threshold_single": 0.01}, drafting="argmax"),
    ]
    rows = setting_costs(settings, pairs)
    for r in rows[:3]:
        assert r["positions"] == 50
        assert r["kl_max"] <= 1e-12 and r["tv_max"] <= 1e-12  # float64 rounding of 16 terms
    assert 0 < rows[3]["kl_max"] <= math.log(100)
    q = np.concatenate([x[0] for x in pairs])
    p = np.concatenate([x[1] for x in pairs])
    want = acceptance_rate(get_rule("sps"), q, p, drafting="argmax").mean()
    assert rows[2]["acceptance"] == pytest.approx(float(want), abs=ATOL)


def test_top_level_analysis_takes_the_drafting_policy_in_chunks():
    """ct.analyze and ct.emitted_distribution (chunked) equal the one-step analysis under a
    drafting policy, bit for bit."""
    import cactus_theory as ct

    rng = np.random.default_rng(9)
    q, p = rng.dirichlet(np.ones(20), 150), rng.dirichlet(np.ones(20), 150)
    whole = analyze("cactus-taylor", q, p, drafting="argmax")
    chunked = ct.analyze("cactus-taylor", q, p, drafting="argmax", chunk_rows=32)
    np.testing.assert_array_equal(chunked.acceptance, whole.acceptance)
    np.testing.assert_array_equal(chunked.emitted, whole.emitted)
    h = ct.emitted_distribution("lossy-sd", q, p, drafting="top_k", draft_top_k=3, chunk_rows=40)
    np.testing.assert_array_equal(h, emitted_distribution("lossy-sd", q, p, drafting="top_k", draft_top_k=3))
