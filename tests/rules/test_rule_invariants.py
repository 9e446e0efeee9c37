"""One invariant battery for every registered rule (adding a rule to RULES adds it here).

Invariants: valid probabilities (acceptance, recovery, emitted); the rule's own SpS knobs give
SpS exactly; rules that do not read p ignore it; frontier dominance (no operating point above
the optimal frontier, hypothesis, truncated q included); exact analysis vs sampling; bad knobs
raise ValueError; numpy float64 and torch float32 plans agree.
"""

import math

import numpy as np
import pytest
import torch
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import pairs

import cactus_theory.analysis.calibration  # noqa: F401  (registers cactus-calibrated)
from cactus_theory.analysis.one_step import (
    acceptance_probabilities,
    acceptance_rate,
    emitted_distribution,
    make_plan,
)
from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.rules import RULES, get_rule
from cactus_theory.solvers._frontier import frontier

NAMES = list(RULES.all_names())  # every rule, and every alias (a preset of a knob)
# Rules run at their defaults and, where a knob is numeric, at a second value inside its range:
# enough to exercise both sides of the deterministic tests without multiplying the run time.
SPS_RULES = [n for n in NAMES if RULES[n].sps_knobs is not None]
NO_SPS = [n for n in NAMES if RULES[n].sps_knobs is None]
BLIND = [n for n in NAMES if not RULES[n].reads_draft]

# Rounding of sums of <= 64 float64 terms of size <= 1: a few hundred ulps at most.
PROB_ATOL = 1e-12


def test_ratio_acceptance_subnormal_draft():
    """Found by this battery (h_n / p_n overflowed for a subnormal p_n); fixed in the core."""
    from cactus_theory.rules.plans import _ratio_acceptance

    with np.errstate(over="raise"):
        a = _ratio_acceptance(np.array([1.0]), np.array([1.16290051e-309]))
    assert a[0] == 1.0


def test_the_frontier_treats_a_q_below_its_ratio_limit_as_zero():
    """Found by this battery: q with a subnormal entry (6.6e-310, p uniform over 9). The frontier
    solver treats q_x < ~4.5e-308 p_x as q_x = 0 (its stated departure, _OVERFLOW_NOTE: p/q is
    not representable), so its KL frontier stays at 8/9 for every budget, while cascade-opt at
    alpha = 0.5 emits p itself (acceptance 1) at a finite KL of 78.75 nats. The yardstick is
    below a feasible point there; the battery's pairs are drawn without such entries."""
    q = np.full(9, 0.125)
    q[6] = 6.60501939e-310
    p = np.full(9, 1 / 9)
    plan = make_plan(get_rule("cascade-opt", alpha=0.5), q, p)
    D = float(get_divergence("kl").unchecked(emitted_distribution(plan), q))
    assert float(acceptance_rate(plan)) == pytest.approx(1.0, abs=1e-12)
    assert D == pytest.approx(78.7527, abs=1e-4)  # (1/9) log((1/9)/q_6) + (8/9) log(8/9)
    F = float(frontier(q, p, 2 * D, "kl").acceptance[0])
    assert F == pytest.approx(8 / 9, abs=1e-12)  # the token is off supp(q) for the solver


def _raw(q, p, seed):
    """Raw (temperature-1) rows for needs_raw rules: a flatter version of the processed ones
    on the same support plus mass elsewhere (raw rows have full support in practice)."""
    rng = np.random.default_rng(seed)
    out = []
    for x in (q, p):
        w = np.sqrt(x) + 0.05 * rng.random(x.shape)
        out.append(w / w.sum(-1, keepdims=True))
    return out


def _recoveries(plan, V):
    """Every r^(n), shape (V, V) (row n = recovery after rejecting n)."""
    return np.stack([np.asarray(plan.recovery_at(np.array(n))) for n in range(V)])


def _check_row(x, what):
    assert np.all(np.isfinite(x)), f"{what}: non-finite"
    assert np.all(x >= -PROB_ATOL), f"{what}: negative {x.min()}"
    assert abs(x.sum() - 1) <= 1e-9, f"{what}: sums to {x.sum()}"  # V <= 64 terms, renormalized


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=profile_examples(5 / 12, "42 rules, each its own run"))
@given(pair=pairs(1, 24), seed=st.integers(0, 2**16))
def test_valid_probabilities(name, pair, seed):
    q, p = pair
    rq, rp = _raw(q, p, seed)
    rule = get_rule(name)
    plan = make_plan(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    a = np.asarray(plan.accept_probs())
    assert np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(a <= 1 + PROB_ATOL)
    if RULES[name].deterministic:
        assert np.all((a == 0) | (a == 1)), "a deterministic rule has 0/1 acceptance"
    R = _recoveries(plan, q.shape[-1])
    for n in range(q.shape[-1]):
        _check_row(R[n], f"recovery after {n}")
    h = emitted_distribution(plan)
    _check_row(h, "emitted")
    dense = emitted_distribution(plan, method="dense")
    # Fast (prefix sums) and dense (enumeration) paths: ~V ulps apart.
    np.testing.assert_allclose(h, dense, rtol=0, atol=1e-11)
    for d in DIVERGENCES.values():
        assert not np.isnan(d.unchecked(h, q)), f"{d.name}(h_alg || q) is NaN"


@pytest.mark.parametrize("name", SPS_RULES)
@given(pair=pairs(1, 32), seed=st.integers(0, 2**16))
@settings(max_examples=profile_examples(1 / 2, "32 rules, each its own run"))
def test_sps_knobs_give_sps(name, pair, seed):
    q, p = pair
    rq, rp = _raw(q, p, seed)
    rule = get_rule(name, **RULES[name].sps_knobs)
    h = emitted_distribution(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    acc = acceptance_rate(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    # Exact in exact arithmetic; float64 rounding of V <= 32 terms (the Mentored solver's
    # a = (T + P)/Q at budget 0 is 1 up to a few ulps).
    np.testing.assert_allclose(h, q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(acc, np.minimum(p, q).sum(), rtol=0, atol=1e-12)
    a = acceptance_probabilities(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    sps_a = acceptance_probabilities("sps", q, p)
    np.testing.assert_allclose(a[p > 0], sps_a[p > 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NO_SPS)
def test_rules_without_sps_knobs_say_why(name):
    assert RULES[name].sps_note, "sps_knobs=None needs an sps_note"


@pytest.mark.parametrize("name", BLIND)
@given(q=pairs(2, 24), ps=pairs(2, 24))
def test_rules_that_do_not_read_p_ignore_it(name, q, ps):
    q = q[0]
    V = q.shape[-1]
    rng = np.random.default_rng(V)
    p1, p2 = rng.dirichlet(np.ones(V)), np.eye(V)[0]
    rule = get_rule(name)
    a1, a2 = make_plan(rule, q, p1), make_plan(rule, q, p2)
    np.testing.assert_array_equal(a1.accept_probs(), a2.accept_probs())
    np.testing.assert_array_equal(_recoveries(a1, V), _recoveries(a2, V))


def test_the_rules_that_never_read_p():
    """TAS and the greedy family (relaxed top-K and its aliases, the margin rule) only."""
    assert sorted(BLIND) == ["greedy", "margin-relaxed", "relaxed-topk", "tas", "vllm-relaxed-thinking"]


def _knob_settings(name):
    """Defaults, plus each numeric knob moved to a second value in its range."""
    spec = RULES[name]
    out = [dict(spec.defaults)]
    for k in spec.knobs:
        if k.name in spec.preset:  # fixed by the alias
            continue
        if k.choices is not None:
            for c in k.choices:
                if c != k.default:
                    out.append({**spec.defaults, k.name: c})
            continue
        lo = k.low if math.isfinite(k.low) else -5.0
        hi = k.high if math.isfinite(k.high) else 5.0
        for v in (lo + 0.25 * (hi - lo), lo + 0.8 * (hi - lo)):
            v = int(round(v)) if k.integer else v
            try:
                out.append({**spec.defaults, k.name: k.validate(v)})
            except ValueError:
                pass
    return out


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=profile_examples(1 / 6, "42 rules, each its own run, every divergence's frontier"))
@given(pair=pairs(1, 16), seed=st.integers(0, 2**16), truncate_q=st.booleans())
def test_frontier_dominance(name, pair, seed, truncate_q):
    """sum_n p_n a_n <= F(D(h_alg||q)) for every divergence: Theorem 1 + coupling inequality."""
    q, p = pair
    if truncate_q and q.size > 2:
        keep = np.argsort(-q)[: max(1, q.size // 3)]  # top-k truncation of the verifier
        qt = np.zeros_like(q)
        qt[keep] = q[keep]
        q = qt / qt.sum()
    rq, rp = _raw(q, p, seed)
    for knobs in _knob_settings(name)[:2]:
        rule = get_rule(name, **knobs)
        plan = make_plan(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
        acc = float(acceptance_rate(plan))
        h = emitted_distribution(plan)
        for d in DIVERGENCES:
            D = float(get_divergence(d).unchecked(h, q))
            assert not math.isnan(D)
            if math.isinf(D):
                continue
            # The rule's D is computed with ~1e-15 absolute error; F is steep near 0
            # (F ~ sqrt(eps)), so evaluate F a hair above D and allow 1e-9 of slack.
            F = float(frontier(q, p, D * (1 + 1e-9) + 1e-14, d).acceptance[0])
            assert acc <= F + 1e-9, (knobs, d, D, acc, F)


def _processed(x, temperature, top_k, top_p):
    """x at a temperature, then top-k and top-p truncated (the engines' order), renormalised."""
    with np.errstate(divide="ignore"):
        y = np.where(x > 0, np.exp(np.log(np.where(x > 0, x, 1.0)) / temperature), 0.0)
    y = y / y.sum(-1, keepdims=True)
    order = np.argsort(-y, axis=-1, kind="stable")
    ys = np.take_along_axis(y, order, -1)
    keep = (np.arange(y.shape[-1]) < top_k) & (np.cumsum(ys, -1) - ys < top_p)  # top-p: the least prefix
    out = np.zeros_like(y)
    np.put_along_axis(out, order, np.where(keep, ys, 0.0), -1)
    return out / out.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=profile_examples(1 / 30, "42 rules, each its own run over three pooled rows"))
@given(
    rows=st.integers(2, 12).flatmap(lambda V: st.lists(pairs(V, V), min_size=3, max_size=3)),
    temperature=st.sampled_from([0.6, 1.0, 1.4]),
    top_k=st.integers(1, 12),
    top_p=st.sampled_from([0.8, 0.95, 1.0]),
)
def test_pooled_frontier_dominance(name, rows, temperature, top_k, top_p):
    """Pooled over a batch of rows processed as engines sample (temperature, top-k, top-p on
    both models): mean acceptance <= the corpus-mean frontier at the batch's mean KL and mean
    TV (analysis.frontier.corpus_frontier). Evaluated a hair above the mean (its ~1e-15
    rounding; the frontier is steep near 0), slack 1e-9."""
    from cactus_theory.analysis.frontier import corpus_frontier

    q = _processed(np.stack([r[0] for r in rows]), temperature, top_k, top_p)
    p = _processed(np.stack([r[1] for r in rows]), temperature, top_k, top_p)
    rq, rp = _raw(q, p, 0)
    for knobs in _knob_settings(name)[:2]:
        plan = make_plan(get_rule(name, **knobs), q, p, raw_target_probs=rq, raw_draft_probs=rp)
        acc = float(np.mean(acceptance_rate(plan)))
        h = emitted_distribution(plan)
        for d in ("kl", "tv"):
            D = float(np.mean(get_divergence(d).unchecked(h, q)))
            if not math.isfinite(D):
                continue
            F = corpus_frontier(q, p, D * (1 + 1e-9) + 1e-14, d)
            assert acc <= F + 1e-9, (knobs, d, D, acc, F)


# ---------------------------------------------------------------------------------------
# exact analysis vs sampling
# ---------------------------------------------------------------------------------------

N_SAMPLES = 40_000
# Each rule is tested on two pairs with two tests each; at ALPHA = 1e-4 per test and ~40
# rules the family-wise false-alarm rate is <= 160 * 1e-4 = 1.6% (the seeds are fixed, so a
# pass is reproducible; a failure after a change is a real discrepancy with that probability).
ALPHA = 1e-4


def _sample_step(plan, rng, n_samples):
    """Simulate one verification step n_samples times: (accepted count, emitted counts)."""
    p = plan.draft_probs
    V = p.shape[-1]
    a = np.clip(np.asarray(plan.accept_probs()), 0, 1)
    draws = rng.choice(V, size=n_samples, p=p)
    acc = rng.random(n_samples) < a[draws]
    counts = np.bincount(draws[acc], minlength=V).astype(np.int64)
    rejected = np.bincount(draws[~acc], minlength=V)
    for n in np.flatnonzero(rejected):
        r = np.asarray(plan.recovery_at(np.array(n)), dtype=np.float64)
        counts += rng.multinomial(rejected[n], r / r.sum())
    return int(acc.sum()), counts


def _pairs_for_sampling():
    rng = np.random.default_rng(2026)
    V = 7
    q = rng.dirichlet(np.full(V, 0.7))
    p = rng.dirichlet(np.full(V, 0.7))
    qt = q.copy()
    qt[np.argsort(q)[:3]] = 0.0  # a truncated verifier
    qt /= qt.sum()
    return [(q, p), (qt, p)]


@pytest.mark.parametrize("name", NAMES)
def test_exact_analysis_matches_sampling(name):
    rng = np.random.default_rng(NAMES.index(name))
    for q, p in _pairs_for_sampling():
        rq, rp = _raw(q, p, 0)
        plan = make_plan(get_rule(name), q, p, raw_target_probs=rq, raw_draft_probs=rp)
        h = emitted_distribution(plan)
        acc = float(acceptance_rate(plan))
        n_acc, counts = _sample_step(plan, rng, N_SAMPLES)
        # acceptance: exact binomial test
        if 0 < acc < 1:
            assert stats.binomtest(n_acc, N_SAMPLES, acc).pvalue > ALPHA
        else:
            assert n_acc == round(acc * N_SAMPLES)
        # emitted: impossible cells never occur; chi-square on the rest (cells with expected
        # count < 5 merged into one)
        assert np.all(counts[h <= 0] == 0), "emitted a token of probability 0"
        exp = h * N_SAMPLES
        big = exp >= 5
        obs_c = list(counts[big]) + ([counts[~big].sum()] if np.any(~big & (h > 0)) else [])
        exp_c = list(exp[big]) + ([exp[~big].sum()] if np.any(~big & (h > 0)) else [])
        if len(obs_c) > 1:
            exp_c = np.array(exp_c) * (sum(obs_c) / sum(exp_c))  # absorb float rounding
            assert stats.chisquare(obs_c, exp_c).pvalue > ALPHA


# ---------------------------------------------------------------------------------------
# bad knobs
# ---------------------------------------------------------------------------------------


def _bad_values(name):
    out = [("__not_a_knob__", 1.0)]
    for k in RULES[name].knobs:
        if k.choices is not None:
            out.append((k.name, "__bogus__"))
            continue
        out.append((k.name, float("nan")))
        out.append((k.name, "abc"))
        if math.isfinite(k.low):
            out.append((k.name, k.low - 1.0))
        if math.isfinite(k.high):
            out.append((k.name, k.high + 1.0))
        if k.integer:
            out.append((k.name, 1.5))
    return out


@pytest.mark.parametrize("name,knob,value", [(n, k, v) for n in NAMES for k, v in _bad_values(n)])
def test_bad_knobs_raise(name, knob, value):
    with pytest.raises(ValueError, match=knob if knob != "__not_a_knob__" else "not a knob"):
        get_rule(name, **{knob: value})


def test_named_bad_knobs_from_the_issue():
    for name, knobs in [
        ("mentored-kl", {"D": -0.1}),
        ("topk", {"topk": 0}),
        ("interpolation", {"alpha": 1.5}),
        ("interpolation", {"alpha": -0.1}),
        ("cascade-chow", {"alpha": 2.0}),
        ("tas", {"posterior_alpha": -1}),
        ("tas", {"posterior_threshold": 1.5}),
        ("fuzzy", {"fsd_div_threshold": -1}),
        ("cactus-calibrated", {"eps": -1.0}),
    ]:
        with pytest.raises(ValueError):
            get_rule(name, **knobs)


# ---------------------------------------------------------------------------------------
# numpy float64 vs torch float32 (the samplers call plan() on torch tensors)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_torch_plan_matches_numpy(name):
    rng = np.random.default_rng(7)
    V = 12
    q = rng.dirichlet(np.full(V, 0.5), size=3)
    p = rng.dirichlet(np.full(V, 0.5), size=3)
    q[1, :4] = 0.0
    q /= q.sum(-1, keepdims=True)
    rq, rp = _raw(q, p, 1)
    rule = get_rule(name)
    plan_np = make_plan(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    plan_t = rule.plan(t(q), t(p), raw_target_probs=t(rq), raw_draft_probs=t(rp))
    a_np = np.asarray(plan_np.accept_probs())
    a_t = plan_t.accept_probs().double().numpy()
    assert a_t.shape == a_np.shape
    if RULES[name].deterministic:
        # 0/1 decisions may flip only where a float32 threshold test is within rounding of
        # its boundary; with these seeded rows none is.
        np.testing.assert_array_equal(a_t, a_np)
    else:
        # float32 rounding of ratios of O(1) quantities (and of the solvers' bisections).
        np.testing.assert_allclose(a_t, a_np, rtol=0, atol=2e-5)
    # Recoveries compared weighted by the rejection probability: where a_n = 1 up to
    # rounding the residual is rounding noise in either precision and is never used.
    ids = np.argmax(p, axis=-1)
    rej = (1 - a_np[np.arange(3), ids])[:, None]
    r_np = np.asarray(plan_np.recovery_at(ids))
    r_t = plan_t.recovery_at(torch.tensor(ids)).double().numpy()
    np.testing.assert_allclose(rej * r_t, rej * r_np, rtol=0, atol=2e-5)


# ---------------------------------------------------------------------------------------
# rule-specific pins (each rule's own formula, and the claims that fail)
# ---------------------------------------------------------------------------------------

README_Q = np.array([0.30, 0.35, 0.35])
README_P = np.array([0.05, 0.80, 0.15])


def test_tas_threshold_and_recoveries():
    from cactus_theory.rules._tas import tas_threshold

    q = np.array([0.6, 0.25, 0.1, 0.05])
    H_vllm = -np.sum(q * np.log(q + 1e-5))
    tau = min(0.09, 0.3 * np.exp(-H_vllm))
    assert float(tas_threshold(q, 0.09, 0.3)[0]) == pytest.approx(tau, rel=1e-15)
    H = -np.sum(q * np.log(q))
    assert float(tas_threshold(q, 0.09, 0.3, "exact")[0]) == pytest.approx(
        min(0.09, 0.3 * np.exp(-H)), rel=1e-15
    )
    p = np.array([0.1, 0.2, 0.3, 0.4])
    plan = make_plan(get_rule("tas"), q, p)
    np.testing.assert_array_equal(plan.accept_probs(), (q > tau).astype(float))
    np.testing.assert_array_equal(plan.recovery, [1, 0, 0, 0])  # vLLM: argmax q
    med = make_plan(get_rule("tas", recovery="truncated"), q, p)
    keep = q >= tau
    np.testing.assert_allclose(med.recovery, np.where(keep, q, 0) / q[keep].sum(), rtol=1e-15)
    # one step: p on {q > tau} plus the rejected mass on the recovery
    h = emitted_distribution(plan)
    np.testing.assert_allclose(h, p * (q > tau) + p[q <= tau].sum() * np.eye(4)[0], atol=1e-15)


def test_topk_ties_and_truncated_q():
    q = np.array([0.4, 0.2, 0.2, 0.2])
    p = np.array([0.1, 0.1, 0.1, 0.7])
    a = make_plan(get_rule("topk", topk=2), q, p).accept_probs()
    np.testing.assert_array_equal(a, [1, 1, 1, 1])  # ties at the k-th value are accepted
    # k beyond supp(q): the k-th largest q is 0 and every token passes, zeros of q included
    qt = np.array([0.5, 0.5, 0.0, 0.0])
    r = emitted_distribution(get_rule("topk", topk=3), qt, p)
    np.testing.assert_allclose(r, p, atol=1e-15)
    assert math.isinf(float(get_divergence("kl").unchecked(r, qt)))
    # inside the set q's values are ignored: recovery normalize((1 - p) 1[top-k])
    plan = make_plan(get_rule("topk", topk=1), q, p)
    np.testing.assert_allclose(plan.recovery_at(np.array(3)), [1, 0, 0, 0], atol=1e-15)


@given(pair=pairs(1, 32), alpha=st.floats(0, 1))
def test_interpolation_formulas(pair, alpha):
    q, p = pair
    rule = get_rule("interpolation", alpha=alpha)
    sps = np.minimum(p, q).sum()
    # float64 rounding of V <= 32 terms
    assert float(acceptance_rate(rule, q, p)) == pytest.approx(alpha + (1 - alpha) * sps, abs=1e-12)
    h = emitted_distribution(rule, q, p)
    tv_pq = 0.5 * np.abs(p - q).sum()
    assert 0.5 * np.abs(h - q).sum() == pytest.approx(alpha * tv_pq, abs=1e-12)


def test_cascade_sps_ends_are_their_own():
    """alpha = 0 is not SpS for Chow (one-hot p), OPT and Token-V2/V3; -1 / -inf are."""
    q = np.array([0.5, 0.3, 0.2])
    onehot = np.array([0.0, 1.0, 0.0])
    h = emitted_distribution(get_rule("cascade-chow", alpha=0.0), q, onehot)
    np.testing.assert_allclose(h, onehot)  # max p = 1 >= 1 - 0: defer to p
    p = np.array([0.1, 0.6, 0.3])
    h = emitted_distribution(get_rule("cascade-opt", alpha=0.0), q, p)
    np.testing.assert_allclose(h, p)  # max p >= max q
    for name in ("cascade-token-v2", "cascade-token-v3"):
        h = emitted_distribution(get_rule(name, alpha=0.0), q, p)
        # A = {argmax q} = {0}: pi = p_0 e_0 + (1 - p_0) q, not q
        np.testing.assert_allclose(h, 0.1 * np.eye(3)[0] + 0.9 * q, atol=1e-15)
    for name in ("cascade-chow", "cascade-opt", "cascade-token-v2", "cascade-token-v3"):
        sps = get_rule(name, **RULES[name].sps_knobs)
        np.testing.assert_allclose(emitted_distribution(sps, q, onehot), q, atol=1e-15)


def test_cascades_decide_on_raw_distributions():
    """Diff: pick p iff max p~ >= max q~ - alpha on the raw rows; pi uses the processed ones."""
    q, p = np.array([0.9, 0.1, 0.0]), np.array([0.2, 0.7, 0.1])  # processed
    raw_q, raw_p = np.array([0.5, 0.3, 0.2]), np.array([0.4, 0.35, 0.25])
    rule = get_rule("cascade-diff", alpha=0.05)
    # processed: 0.7 >= 0.9 - 0.05 is false (q); raw: 0.4 >= 0.5 - 0.05 is false too
    np.testing.assert_allclose(
        emitted_distribution(rule, q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p), q, atol=1e-15
    )
    rule = get_rule("cascade-diff", alpha=0.15)
    # raw: 0.4 >= 0.35 -> p, although processed 0.7 >= 0.75 would say q
    np.testing.assert_allclose(
        emitted_distribution(rule, q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p), p, atol=1e-15
    )


def test_fuzzy_emits_p_or_q():
    from cactus_theory.rules._fuzzy import fsd_divergence

    js = float(fsd_divergence("js_div", README_Q, README_P))
    assert js == pytest.approx(float(get_divergence("js").unchecked(README_P, README_Q)))
    for T, expected in ((js + 1e-9, README_P), (js - 1e-9, README_Q)):
        rule = get_rule("fuzzy", fsd_div_threshold=T)
        np.testing.assert_allclose(emitted_distribution(rule, README_Q, README_P), expected, atol=1e-15)
    # kl_div is KL(p || q), kl_div_reversed KL(q || p)
    assert float(fsd_divergence("kl_div", README_Q, README_P)) == pytest.approx(
        float(np.sum(README_P * np.log(README_P / README_Q)))
    )
    assert float(fsd_divergence("kl_div_reversed", README_Q, README_P)) == pytest.approx(
        float(np.sum(README_Q * np.log(README_Q / README_P)))
    )


def test_token_cascade_can_accept_less_than_sps():
    """Counterexample: Token-V3 (notebook default lenience 0.5) accepts less than SpS.

    Outside A the target is (1 - p(A)) q < q, so drafts the verifier likes but A excludes
    lose acceptance. q = (.5, .3, .2), p = (.1, .2, .7): A = {0, 1}, pi = (.45, .41, .14),
    acceptance .44 < SpS .5.
    """
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.2, 0.7])
    acc = float(acceptance_rate(get_rule("cascade-token-v3"), q, p))
    assert acc == pytest.approx(0.44, abs=1e-15)
    assert acc < float(np.minimum(p, q).sum()) == pytest.approx(0.5)
