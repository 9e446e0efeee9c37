"""Fuzzy SD's Jensen-Shannon bounds (rules/_fuzzy.py) and the samplers' bounds-first accept path.

The bounds are checked against scipy's Jensen-Shannon distance in float64 (an independent
implementation, with logarithms); the samplers' decisions against the float64 divergence of the
same rows, with the threshold placed on a row's own divergence so that the exact test runs.
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token, T threshold.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from rule_configs import FUSED_SHAPE, fused_group
from scipy.special import rel_entr

from cactus_theory.rules import get_rule
from cactus_theory.samplers import make_sampler
from cactus_theory.samplers._kernels import fuzzy as fuzzy_kernels
from cactus_theory.samplers._kernels.fuzzy import (
    JS_BOUND_MARGIN,
    JS_SUM_RATIO_TOL,
    js_bounds_from_rows,
    js_bounds_in_sum_pass,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: The bounds' gap relative to the lower bound: (log 2 - 1/2 - 1/12 - 1/30) M6 over at least
#: M2 / 2, with M6 <= M2 (|u| <= 1).
GAP = 2.0 * (math.log(2.0) - 0.5 - 1.0 / 12.0 - 1.0 / 30.0)

#: float64 rounding of sums of V <= 300 non-negative terms and of scipy's logarithms
#: (relative, with an absolute floor for divergences that are 0).
RTOL64, ATOL64 = 1e-12, 1e-15


def _js64(q, p):
    """JS(p, q) in nats, float64: (KL(p || m) + KL(q || m)) / 2 on the normalized rows, m their
    mean, by scipy's ``rel_entr`` (0 log 0 = 0), as ``scipy.spatial.distance.jensenshannon``
    computes it before its square root (which warns, and gives NaN, where float64 rounding
    leaves the sum of terms of both signs a few ulps below 0 on two nearly equal rows: those
    are clamped at 0, the divergence's value)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    m = 0.5 * (p + q)
    return max(0.5 * float(rel_entr(p, m).sum() + rel_entr(q, m).sum()), 0.0)


def _pair(draw, V):
    """Two distributions on V tokens with zeros, point masses and disjoint supports reachable."""
    w = st.floats(0.0, 1.0, allow_subnormal=False)
    q = np.array(draw(st.lists(w, min_size=V, max_size=V)))
    p = np.array(draw(st.lists(w, min_size=V, max_size=V)))
    q[draw(st.integers(0, V - 1))] += 1e-3  # never all zero
    p[draw(st.integers(0, V - 1))] += 1e-3
    return q, p


@settings(max_examples=profile_examples(5, "a cheap bound check: five times the profile"), deadline=None)
@given(st.data(), st.integers(1, 300), st.floats(0.1, 10.0), st.floats(0.1, 10.0))
def test_js_bounds_enclose_the_divergence(data, V, sq, sp):
    """lower <= JS <= upper <= lower (1 + GAP) for un-normalized rows (sums sq, sp), float64."""
    q, p = _pair(data.draw, V)
    js = _js64(q / q.sum(), p / p.sum())
    x = torch.tensor(q * sq / q.sum())
    y = torch.tensor(p * sp / p.sum())
    lo, hi = js_bounds_from_rows(x, y, x.sum(-1), y.sum(-1))
    lo, hi = float(lo), float(hi)
    assert lo <= js * (1 + RTOL64) + ATOL64, (lo, js)
    assert js <= hi * (1 + RTOL64) + ATOL64, (js, hi)
    assert hi <= lo * (1 + GAP) * (1 + RTOL64) + ATOL64, (lo, hi)


def _d64(y, x):
    """D(y, x): the Jensen-Shannon form on non-negative vectors, float64 (0 log 0 = 0)."""
    a = y + x
    with np.errstate(divide="ignore", invalid="ignore"):
        ty = np.where(y > 0, y * np.log(2.0 * y / a), 0.0)
        tx = np.where(x > 0, x * np.log(2.0 * x / a), 0.0)
    return 0.5 * float(np.sum(ty + tx))


@settings(max_examples=profile_examples(5, "a cheap bound check: five times the profile"), deadline=None)
@given(st.data(), st.integers(1, 300), st.floats(0.1, 10.0), st.floats(1.0 / 3.0, 3.0))
def test_js_bounds_in_the_sum_pass_enclose_the_divergence(data, V, sq, r):
    """The one-pass bounds (moments of the un-normalized rows, over s_q, widened by
    (log 2 / 2) |s_p/s_q - 1|) enclose JS(p, q) for sum ratios r in [1/3, 3], float64; the
    slack itself is the Gibbs bound |JS - D(y, x)/s_q| <= (log 2 / 2) |r - 1| (checked on
    D computed directly), and at r = 1 the bounds are the normalized rows' bounds."""
    q, p = _pair(data.draw, V)
    js = _js64(q / q.sum(), p / p.sum())
    x = q * sq / q.sum()
    y = p * (r * sq) / p.sum()
    xt, yt = torch.tensor(x), torch.tensor(y)
    lo, hi, off = (float(v) for v in js_bounds_in_sum_pass(xt, yt, xt.sum(-1), yt.sum(-1)))
    assert off == pytest.approx(abs(r - 1.0), rel=1e-12, abs=1e-15)
    slack = 0.5 * math.log(2.0) * abs(r - 1.0)
    assert abs(js - _d64(y, x) / sq) <= slack * (1 + RTOL64) + ATOL64  # the Gibbs bound
    assert lo <= js * (1 + RTOL64) + ATOL64, (lo, js)
    assert js <= hi * (1 + RTOL64) + ATOL64, (js, hi)
    if r == 1.0:  # the normalized bounds, up to the 16-eps allowance for the sums' rounding
        lo_n, hi_n = (float(v) for v in js_bounds_from_rows(xt, yt, xt.sum(-1), yt.sum(-1)))
        allowance = 0.5 * math.log(2.0) * 16 * 2.0**-52
        assert lo == pytest.approx(lo_n - allowance, rel=1e-12, abs=1e-15)
        assert hi == pytest.approx(hi_n + allowance, rel=1e-12, abs=1e-15)


def test_js_bounds_at_the_extremes():
    """p = q: both bounds 0 (JS = 0). Disjoint supports (|u| = 1 everywhere): the upper bound is
    log 2 exactly (the series' sum) and the lower bound its first three terms, 1/2 + 1/12 +
    1/30."""
    x = torch.tensor([[0.2, 0.3, 0.5, 0.0]], dtype=torch.float64)
    lo, hi = js_bounds_from_rows(x, x.clone(), x.sum(-1), x.sum(-1))
    assert float(lo) == 0.0 and float(hi) == 0.0
    y = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    lo, hi = js_bounds_from_rows(x, y, x.sum(-1), y.sum(-1))
    assert float(hi) == pytest.approx(math.log(2.0), rel=1e-15)
    assert float(lo) == pytest.approx(0.5 + 1 / 12 + 1 / 30, rel=1e-15)
    assert float(lo) < _js64(x[0].numpy(), y[0].numpy()) == pytest.approx(math.log(2.0))


def _rows(B=6, k=3, V=3000, seed=0):
    """Un-normalized language-model-like rows: q and p softmaxes of correlated logits."""
    g = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(B, k + 1, V, generator=g)
    q = torch.softmax(logits, -1) * (0.5 + torch.rand(B, k + 1, 1, generator=g))
    p = torch.softmax(0.8 * logits[:, :k] + 1.8 * torch.randn(B, k, V, generator=g), -1) * (
        0.5 + torch.rand(B, k, 1, generator=g)
    )
    ids = torch.randint(0, V, (B, k), generator=g)
    return q, p, ids


def _js_of_rows(q, p, k):
    """float64 JS of each of the k draft positions' normalized rows, [B, k]."""
    qq = (q[:, :k] / q[:, :k].sum(-1, keepdim=True)).double().numpy()
    pp = (p / p.sum(-1, keepdim=True)).double().numpy()
    return np.array([[_js64(qq[b, i], pp[b, i]) for i in range(k)] for b in range(q.shape[0])])


def _rows_with_one_at(T, normalized):
    """:func:`_rows` at FUSED_SHAPE (the fused tests' kernel), normalized or not, with the
    draft row of the largest divergence (above T) moved towards its target row until its
    float64 divergence is T (Brent's root of JS(q, (1 - t) p + t q) - T, a decreasing
    function of t; the row keeps its sum)."""
    from scipy.optimize import brentq

    B, k, V = FUSED_SHAPE
    q, p, ids = _rows(B=B, k=k, V=V)
    if normalized:
        q, p = q / q.sum(-1, keepdim=True), p / p.sum(-1, keepdim=True)
    js = _js_of_rows(q, p, k)
    b, i = np.unravel_index(np.argmax(js), js.shape)
    assert js[b, i] > T
    qn = (q[b, i] / q[b, i].sum()).double().numpy()
    pn = (p[b, i] / p[b, i].sum()).double().numpy()
    t = brentq(lambda t: _js64(qn, (1 - t) * pn + t * qn) - T, 0.0, 1.0, xtol=1e-15)
    p = p.clone()
    p[b, i] = torch.tensor(((1 - t) * pn + t * qn) * float(p[b, i].double().sum()))
    return q, p, ids


@pytest.mark.xdist_group(fused_group("fuzzy", {}))
@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
@pytest.mark.parametrize("normalized", [False, True], ids=["scaled-rows", "softmax-rows"])
def test_sampler_decisions_with_the_threshold_on_a_row(fused, normalized):
    """T = 0.4 (the default) = JS of one row (float64; the row built so): that row is left
    undecided by the bounds, so the exact test runs on it; every row's decision, through
    forward (``last_accepted``: the non-causal accept matrix) and through the accept path,
    equals 1[JS <= T] in float64, except a row within 1e-5 of T (the exact test's float32
    entropy terms of size log V cancel: documented in
    the fuzzy kernel's ``accept_from_rows``). The rows exercise both decisions. Softmax
    rows (sums within 1e-3 of each other) take the one-pass bounds; rows scaled by 0.5-1.5
    take the bounds on the normalized rows. The default rule at FUSED_SHAPE: the kernel of the
    fused fuzzy tests (samplers/test_fused.py)."""
    s = make_sampler("fuzzy", fused=fused)
    rule = s.rule
    T = rule.fsd_div_threshold
    q, p, ids = _rows_with_one_at(T, normalized)
    k_ = ids.shape[1]
    off = (p.sum(-1) / q[:, :k_].sum(-1) - 1.0).abs()
    assert bool((off <= JS_SUM_RATIO_TOL).all()) == normalized
    k = ids.shape[1]
    js = _js_of_rows(q, p, k)
    sq, sp = q[:, :k].sum(-1), p.sum(-1)
    accept, undecided = fuzzy_kernels.accept_decided_from_rows(rule, q[:, :k], p, ids, sq, sp)
    at_t = np.abs(js - T) <= 1e-5
    assert at_t.any() and undecided.numpy()[at_t].all()  # the exact test runs there
    assert not undecided.numpy()[np.abs(js - T) > 0.2 * T].any()  # the bounds decide the rest
    ref = js <= T
    decided = ~undecided.numpy()
    assert np.array_equal(accept.numpy()[decided], ref[decided])
    a, _ = s.accept_probs_at_drafts(q[:, :k], p, ids, sq, sp)
    s(q, torch.zeros(q.shape[0], 1, dtype=torch.int64), p, ids)
    for got in (a.numpy() > 0.5, s.last_accepted.numpy()):
        assert np.array_equal(got[~at_t], ref[~at_t])
    assert set(ref[~at_t].ravel()) == {False, True}


def test_exact_test_runs_on_the_undecided_rows_only(monkeypatch):
    """The fused CPU sampler's core calls the exact test on [n, V] rows, n = the undecided
    rows: 0 when T is far from every row's divergence, the rows at T otherwise. The eager
    sampler takes the exact test on every row (its unfused bounds would cost more passes).
    The fused core runs uncompiled here (the selection runs between its two graphs, in
    Python, either way; the compiled core's decisions are tested above): three thresholds
    would be three compiles."""
    from cactus_theory.samplers import _fused as fused_kernels

    monkeypatch.setattr(fused_kernels, "compiled_for", lambda rule, fn, *key: fn)
    q, p, ids = _rows(seed=1)
    k = ids.shape[1]
    bonus = torch.zeros(q.shape[0], 1, dtype=torch.int64)
    eager = make_sampler("fuzzy")
    exact, rows = eager.kernels.accept_from_rows, []
    eager.kernels = dataclasses.replace(
        eager.kernels,
        accept_from_rows=lambda r, x, *a: (rows.append(x.shape[:-1].numel()), exact(r, x, *a))[1],
    )
    eager(q, bonus, p, ids)
    assert rows == [ids.numel()]
    seen = []
    for T in (0.0, math.log(2.0), None):
        s = make_sampler("fuzzy", fused=True, fsd_div_threshold=0.4 if T is None else T)
        rule = s.rule
        if T is None:  # on a row's own divergence (bounds computed as the sampler does)
            lo, hi = js_bounds_from_rows(q[:, :k], p, q[:, :k].sum(-1), p.sum(-1))
            rule.fsd_div_threshold = float(0.5 * (lo[0, 0] + hi[0, 0]))
        exact = s.kernels.accept_from_rows
        rows = []
        s.kernels = dataclasses.replace(
            s.kernels,
            accept_from_rows=lambda r, x, *a, _e=exact, _r=rows: (_r.append(x.shape[0]), _e(r, x, *a))[1],
        )
        s(q, bonus, p, ids)
        seen.append(sum(rows))
    assert seen[0] == 0 and seen[1] == 0  # T = 0 rejects, T = log 2 accepts: all decided
    assert seen[2] >= 1
    # what the bounds leave open is what the sampler evaluated exactly
    _, undecided = fuzzy_kernels.accept_decided_from_rows(rule, q[:, :k], p, ids, q[:, :k].sum(-1), p.sum(-1))
    assert seen[2] == int(undecided.sum())


def test_other_divergences_and_cuda_keep_the_exact_test():
    """kl_div, kl_div_reversed and tv_div have no bounds (the kernel declines the hook for
    them when a sampler is made): every row takes the exact test. The margin is positive and
    small next to the bounds' gap."""
    from cactus_theory.rules._fuzzy import FuzzySpeculative
    from cactus_theory.samplers._kernels import KERNELS

    q, p, ids = _rows(seed=2)
    k = ids.shape[1]
    for kind in ("kl_div", "kl_div_reversed", "tv_div", "js_div"):
        rule = get_rule("fuzzy", fsd_div_type=kind)
        declined = "accept_decided_from_rows" in KERNELS[FuzzySpeculative].declines(rule)
        assert declined == (kind != "js_div")
        program = make_sampler(rule, fused=True)._traced
        decided = program.decide(q[:, :k], p, ids, q[:, :k].sum(-1), p.sum(-1))
        assert (decided is None) == declined
    assert 0.0 < JS_BOUND_MARGIN < 0.01 * GAP
