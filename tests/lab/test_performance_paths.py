"""Fast paths against their slow references on the same inputs (correctness only, no timings).

* Theorem 2's root by safeguarded Newton (``exact_spike``, default) against the 64-step
  bisection (``method="bisect"``) and against 50-digit mpmath root finding; numpy and torch.
* The one-step analysis on torch tensors against the numpy analysis (every rule), the torch
  sort/searchsorted emitted distribution at V = 4096, bf16 inputs, bad torch input.
* Cactus's sampler recovery from gamma at the drafted token against the full plan.
* The benchmark's numpy floor against the project's emitted distribution; the report's
  JSON and table.
"""

import math

import mpmath
import numpy as np
import pytest
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.solvers._spike import exact_spike

SMOOTH = sorted(n for n, d in DIVERGENCES.items() if math.isfinite(d.f_second_at_one))

# q_n from subnormal-free tiny values up to 1, on a log scale too (language-model tails)
qn = st.one_of(st.floats(0.0, 1.0), st.floats(-30.0, 0.0).map(lambda e: 10.0**e))
budget = st.one_of(st.just(0.0), st.floats(1e-8, 20.0))


def _mp_two_point(name, g, s):
    """Two-point divergence in mpmath (50 digits), with the 0 log 0 = 0 conventions."""

    def xlogy(a, b):
        if a == 0:
            return mpmath.mpf(0)
        return mpmath.inf if b == 0 else a * mpmath.log(a / b)

    if g >= 1 and name in ("reverse_kl", "neyman_chi2"):
        return mpmath.inf  # roots within 1e-50 of 1 (reverse KL, q_n near 1, big budgets)

    if name == "kl":
        return xlogy(g, s) + xlogy(1 - g, 1 - s)
    if name == "reverse_kl":
        return xlogy(s, g) + xlogy(1 - s, 1 - g)
    if name == "chi2":
        return (g - s) ** 2 / s + (s - g) ** 2 / (1 - s)
    if name == "neyman_chi2":
        return (g - s) ** 2 / g + (s - g) ** 2 / (1 - g)
    if name == "hellinger":
        return ((mpmath.sqrt(g) - mpmath.sqrt(s)) ** 2 + (mpmath.sqrt(1 - g) - mpmath.sqrt(1 - s)) ** 2) / 2
    if name == "js":
        m1, m2 = (g + s) / 2, (2 - g - s) / 2
        return (xlogy(g, m1) + xlogy(s, m1) + xlogy(1 - g, m2) + xlogy(1 - s, m2)) / 2
    raise AssertionError(name)


def _mp_root(name, s, delta):
    """The root of the two-point divergence = delta in (s, 1) by 200 mpmath bisections."""
    with mpmath.workdps(50):
        s, delta = mpmath.mpf(s), mpmath.mpf(delta)
        lo, hi = s, mpmath.mpf(1)
        for _ in range(200):
            mid = (lo + hi) / 2
            if _mp_two_point(name, mid, s) <= delta:
                lo = mid
            else:
                hi = mid
        return float(lo)


_EPS64 = np.finfo(np.float64).eps


def _root_tolerance(name, s, g, eps=_EPS64):
    """How far two feasible-as-computed roots may lie apart: the float64 two-point form has an
    absolute rounding error of a few eps times (1 + |term 1| + |term 2|) (the logs of ratios
    carry ~eps absolute), which moves the computed root by that much over the slope g'(gamma).
    32 eps covers the few roundings per term; plus 8 ulps of gamma and 2**-64 (the
    bisection's resolution)."""
    d = get_divergence(name)
    s_, g_ = np.array(s, dtype=np.float64), np.array(g, dtype=np.float64)
    scale = 1.0 + abs(float(d.term(np, g_, s_))) + abs(float(d.term(np, 1 - g_, 1 - s_)))
    if not math.isfinite(scale) or g >= 1.0:
        return 8 * eps + 2.0**-64
    if 1.0 - g < 1e-12:
        return 64 * eps + 2.0**-64  # next to the cap at 1: a few ulps
    with mpmath.workdps(30):
        slope = float(
            mpmath.diff(lambda x: _mp_two_point(name, x, mpmath.mpf(s)), mpmath.mpf(g), direction=-1)
        )  # one-sided: g may be 1 - ulp
    if not slope > 0:
        return 1.0  # flat to working precision: no resolution to demand (g = s edge)
    return 32 * eps * scale / slope + 8 * eps * g + 2.0**-64


@pytest.mark.parametrize("name", SMOOTH)
@given(s=qn, delta=budget)
def test_newton_root_is_feasible_and_agrees_with_bisection(name, s, delta):
    d = get_divergence(name)
    g = float(exact_spike(np.array(s), delta, name))
    ref = float(exact_spike(np.array(s), delta, name, method="bisect"))
    assert s <= g <= 1
    assert float(d.two_point(np.array(g), np.array(s))) <= delta  # feasible as computed
    # both are feasible floats at a sign change of the computed form; they may differ by
    # the root's conditioning (see _root_tolerance) and the bisection's 2**-64 resolution
    if delta > 0 and g > s:
        assert abs(g - ref) <= _root_tolerance(name, s, ref)
    else:
        assert g == ref


@pytest.mark.parametrize("name", SMOOTH)
@given(
    s=st.one_of(st.floats(1e-6, 1 - 1e-6), st.floats(-12.0, -6.0).map(lambda e: 10.0**e)),
    delta=st.floats(1e-4, 5.0),
)
@settings(max_examples=profile_examples(1 / 4, "an mpmath root at high precision per example"), deadline=None)
def test_newton_root_matches_mpmath(name, s, delta):
    g = float(exact_spike(np.array(s), delta, name))
    d = get_divergence(name)
    if float(d.two_point(np.array(1.0), np.array(s))) <= delta:
        assert g == 1.0
        return
    # the float64 root can only be as accurate as the computed two-point form allows
    root = _mp_root(name, s, delta)
    assert abs(g - root) <= _root_tolerance(name, s, root)


def test_newton_handles_edge_entries_in_one_array():
    """Zeros, subnormals, 1 - ulp, cap at 1, delta = 0 and inf, mixed in one batch."""
    s = np.array([0.0, 5e-324, 1e-300, 1e-30, 0.3, 0.5, 1 - 2**-53, 1.0])
    for name in DIVERGENCES:
        d = get_divergence(name)
        for delta in (0.0, 1e-12, 0.3, math.inf):
            g = exact_spike(s, delta, name)
            assert np.all((g >= s) & (g <= 1))
            assert np.all(d.two_point(g, s) <= delta)
            if name not in SMOOTH:
                continue
            ref = exact_spike(s, delta, name, method="bisect")
            for si, gi, ri in zip(s, g, ref):
                if 0 < delta < math.inf and 1e-200 < si < max(gi, ri) and ri < 1:
                    # bisection resolves 2**-64 absolute only; mpmath is the reference
                    root = _mp_root(name, si, delta)
                    assert abs(gi - root) <= _root_tolerance(name, si, root)
                elif si > 1e-200:
                    assert gi == ri
            # q_n = 1e-300 with delta > 0: the root is ~sqrt(2 delta q_n) for KL-like forms,
            # far below the bisection's 2**-64 resolution, which returns q_n itself
            if 0 < delta < math.inf and d.name in ("kl", "chi2"):
                assert g[2] > 1e-160


@pytest.mark.parametrize("name", SMOOTH)
def test_torch_newton_matches_numpy(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    s = np.concatenate([rng.random(200), 10.0 ** rng.uniform(-12, 0, 200), [0.0, 1.0, 0.5]])
    d = get_divergence(name)
    for delta in (0.0, 1e-6, 0.1, 2.0):
        ref = exact_spike(s, delta, name)
        st = torch.tensor(s)
        got64 = exact_spike(st, delta, name)
        # feasible as computed by the backend that computed it (torch's pow and sqrt may round
        # differently from numpy's)
        assert bool(torch.all(d.two_point(got64, st) <= delta))
        got64 = got64.numpy()
        # float64: fixed steps (12 Newton + pull-back + 64 halvings) reach the numpy root up
        # to the root's conditioning
        for si, gi, ri in zip(s, got64, ref):
            if delta > 0 and si < ri < 1:
                assert abs(gi - ri) <= _root_tolerance(name, si, ri)
            else:
                assert gi == ri
        s32 = torch.tensor(s, dtype=torch.float32)
        got32 = exact_spike(s32, delta, name)
        assert got32.dtype == torch.float32
        assert bool(torch.all(d.two_point(got32, s32) <= delta))
        # against the float64 root of the float32-rounded q_n, up to the conditioning of the
        # float32 two-point form (_root_tolerance with float32's eps)
        s_r = s32.double().numpy()
        ref32 = exact_spike(s_r, delta, name)
        for si, gi, ri in zip(s_r, got32.double().numpy(), ref32):
            if delta > 0 and si < ri < 1:
                assert abs(gi - ri) <= _root_tolerance(name, si, ri, np.finfo(np.float32).eps)
            else:
                assert abs(gi - ri) <= 8 * np.finfo(np.float32).eps


def test_bad_method_names_the_argument():
    with pytest.raises(ValueError, match="method"):
        exact_spike(np.array(0.3), 0.1, "kl", method="secant")


# --- the one-step analysis on torch -----------------------------------------------------------

from strategies import pairs  # noqa: E402

from cactus_theory.analysis import one_step as _one_step  # noqa: E402
from cactus_theory.rules import RULES  # noqa: E402


def _rows_close(a, b, tol):
    """Elementwise |a - b| <= tol, with matching infinities (divergences may be +inf)."""
    a, b = np.asarray(a), np.asarray(b)
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    return bool(np.all(same_inf | (np.abs(np.where(same_inf, 0, a) - np.where(same_inf, 0, b)) <= tol)))


@pytest.mark.parametrize("name", sorted(RULES))
@given(pair=pairs(min_vocab=2, max_vocab=24), batch=st.integers(1, 3))
@settings(
    max_examples=profile_examples(1 / 10, "every registered rule, each its own run, torch and numpy"),
    deadline=None,
)
def test_torch_analysis_matches_numpy(name, pair, batch):
    """analyze() on torch float64 tensors: the numpy numbers, for every registered rule."""
    torch = pytest.importorskip("torch")
    q, p = pair
    q, p = np.tile(q, (batch, 1)), np.tile(p, (batch, 1))
    ref = _one_step.analyze(name, q, p)
    got = _one_step.analyze(name, torch.tensor(q), torch.tensor(p))
    assert isinstance(got.emitted, torch.Tensor) and got.emitted.dtype == torch.float64
    # same float64 formulas, different reduction orders and library kernels (log, sqrt,
    # cumsum): a few hundred ulps of the O(1) quantities
    # a_n where p_n > 0 only: at p_n = 0 convention 2 gives a_n = [h_n > 0], discontinuous at
    # h_n = 0, and a target that is 0 up to rounding flips it (found: cascade-token-v2 with
    # uniform q, where pi_n = p_n + (1 - sum_A p) q_n has 1 - sum p = +1e-17 on torch and
    # <= 0 in numpy). Such n is never drafted: alpha and h_alg are unaffected (tested below).
    drafted = np.broadcast_to(p > 0, ref.accept_probs.shape)
    assert _rows_close(got.accept_probs.numpy()[drafted], ref.accept_probs[drafted], 1e-13)
    assert _rows_close(got.acceptance.numpy(), ref.acceptance, 1e-13)
    assert _rows_close(got.emitted.numpy(), ref.emitted, 1e-13)
    for key, val in ref.divergences.items():
        # D(h_alg || q) sums V terms of size up to |log q_j|; relative 1e-11 plus 1e-13
        assert _rows_close(got.divergences[key].numpy(), val, 1e-13 + 1e-11 * np.abs(val))


def test_torch_emitted_spike_large_vocabulary_matches_numpy():
    """The sort/searchsorted/bincount path on torch at V = 4096, batch 3 (exact Cactus)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    g = rng.gumbel(size=(3, 4096))
    q = np.exp(g - g.max(-1, keepdims=True))
    pl = 0.8 * g + 0.6 * rng.gumbel(size=g.shape)
    p = np.exp(pl - pl.max(-1, keepdims=True))
    q, p = q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)
    for rule in ("cactus-exact-kl", "cactus-taylor"):
        ref = _one_step.emitted_distribution(rule, q, p)
        got = _one_step.emitted_distribution(rule, torch.tensor(q), torch.tensor(p)).numpy()
        # V-term prefix sums in different orders: V * eps of the row mass
        np.testing.assert_allclose(got, ref, rtol=0, atol=4096 * 2.3e-16)


def test_torch_analysis_of_bf16_is_the_analysis_of_the_rounded_rows():
    """bf16 inputs are promoted exactly to float64: the numpy analysis of the rounded values."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    q = rng.dirichlet(np.full(64, 0.3), size=4)
    p = rng.dirichlet(np.full(64, 0.3), size=4)
    qb, pb = torch.tensor(q).to(torch.bfloat16), torch.tensor(p).to(torch.bfloat16)
    got = _one_step.analyze("cactus-exact-kl", qb, pb)
    qr, pr = qb.double().numpy(), pb.double().numpy()
    qr, pr = qr / qr.sum(-1, keepdims=True), pr / pr.sum(-1, keepdims=True)
    ref = _one_step.analyze("cactus-exact-kl", qr, pr)
    # identical float64 inputs after promotion: the same tolerance as the float64 test
    assert _rows_close(got.emitted.numpy(), ref.emitted, 1e-13)
    assert _rows_close(got.acceptance.numpy(), ref.acceptance, 1e-13)


def test_torch_analysis_bad_input_names_the_argument():
    torch = pytest.importorskip("torch")
    q = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    with pytest.raises(ValueError, match="target_probs"):
        _one_step.analyze("sps", torch.tensor([[float("nan"), 1.0]]), q)
    with pytest.raises(ValueError, match="draft_probs"):
        _one_step.analyze("sps", q, torch.tensor([[-0.5, 1.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="draft_probs"):
        _one_step.analyze("sps", q, np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="draft_probs"):
        _one_step.analyze("sps", q, torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="method"):
        _one_step.emitted_distribution("sps", q, q, method="dense")


# --- samplers: Cactus's recovery from gamma at the drafted token only --------------------------


@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact-kl", "cactus-exact-hellinger"])
def test_cactus_recovery_hook_equals_the_full_plan(name):
    """rule.recovery_at (gamma at n only) == plan(...).recovery_at (gamma at every candidate)."""
    torch = pytest.importorskip("torch")
    from cactus_theory.rules import get_rule

    rng = np.random.default_rng(11)
    q = rng.dirichlet(np.full(300, 0.2), size=6)
    p = rng.dirichlet(np.full(300, 0.2), size=6)
    ids = np.array([int(rng.choice(300, p=row)) for row in p])
    rule = get_rule(name, delta=0.3)
    for conv in (np.asarray, lambda x: torch.tensor(x, dtype=torch.float32)):
        qq, pp = conv(q), conv(p)
        ii = ids if conv is np.asarray else torch.tensor(ids)
        fast = rule.recovery_at(qq, pp, ii)
        ref = rule.plan(qq, pp).recovery_at(ii)
        # the same elementwise formula on the same gamma_n (an elementwise function of q_n):
        # bit-identical up to the reduction order of the normalizing sum (float32: 1e-6)
        np.testing.assert_allclose(np.asarray(fast), np.asarray(ref), rtol=0, atol=1e-6)


# --- benchmark pieces (no timings) --------------------------------------------------------------


def test_benchmark_floor_is_the_taylor_emitted_distribution():
    from benchmarks.run import correlated_pair, floor_emitted_taylor
    from cactus_theory.analysis.one_step import emitted_distribution
    from cactus_theory.rules import get_rule

    q, p = correlated_pair(3000, seed=4)
    for delta in (0.01, 0.1, 1.0):
        ref = emitted_distribution(get_rule("cactus-taylor", delta=delta), q, p)
        # same formula, different summation orders: V * eps of the row mass
        np.testing.assert_allclose(floor_emitted_taylor(q, p, delta), ref, rtol=0, atol=3000 * 2.3e-16)


def test_benchmark_report_serializes_and_tabulates():
    import json

    from benchmarks.run import BenchmarkReport, GoalResult

    g = (
        GoalResult("a / b", "a 1 ms, b 2 ms", 0.5, "<= 1", True, "ok: x"),
        GoalResult("c", "3 ms", 3.0, "< 2", False, "ok: y"),
    )
    rep = BenchmarkReport(g, 3, True, {"numpy": np.__version__})
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["all_passed"] is False and len(d["goals"]) == 2 and d["goals"][0]["ratio"] == 0.5
    text = rep.to_text()
    for col in ("goal", "measured", "ratio", "target", "pass/fail"):
        assert col in text
    assert "FAIL" in text and "pass" in text


def test_benchmark_bad_repeats_names_the_argument():
    from benchmarks.run import run_benchmarks

    with pytest.raises(ValueError, match="repeats"):
        run_benchmarks(repeats=0)
