"""Divergences: conventions (0 log 0, mass off the support), two-point forms, reference values."""

import math

import mpmath
import numpy as np
import pytest
from conftest import assert_close
from hypothesis import given
from hypothesis import strategies as st
from strategies import pairs

from cactus_theory.divergences import DIVERGENCES, divergence, f_divergence, get_divergence


def _mp_reference(name, h, q):
    """The divergence in 50-digit arithmetic, straight from its definition."""
    mpmath.mp.dps = 50
    total = mpmath.mpf(0)
    for hi, qi in zip(h, q):
        hi, qi = mpmath.mpf(float(hi)), mpmath.mpf(float(qi))
        if name == "kl":
            total += 0 if hi == 0 else (mpmath.inf if qi == 0 else hi * mpmath.log(hi / qi))
        elif name == "reverse_kl":
            total += 0 if qi == 0 else (mpmath.inf if hi == 0 else qi * mpmath.log(qi / hi))
        elif name == "chi2":
            total += (0 if hi == 0 else mpmath.inf) if qi == 0 else (hi - qi) ** 2 / qi
        elif name == "neyman_chi2":
            total += (0 if qi == 0 else mpmath.inf) if hi == 0 else (hi - qi) ** 2 / hi
        elif name == "hellinger":
            total += (mpmath.sqrt(hi) - mpmath.sqrt(qi)) ** 2 / 2
        elif name == "tv":
            total += abs(hi - qi) / 2
        elif name == "js":
            m = (hi + qi) / 2
            if hi > 0:
                total += hi * mpmath.log(hi / m) / 2
            if qi > 0:
                total += qi * mpmath.log(qi / m) / 2
    return total


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
@given(pair=pairs(1, 12))
def test_matches_high_precision_definition(name, pair):
    h, q = pair
    got = float(divergence(h, q, name))
    ref = _mp_reference(name, h, q)
    if ref == mpmath.inf:
        assert got == math.inf
    else:
        # float64 sums of <= 12 terms: a few ulps of the largest term, plus the clip at 0
        assert got == pytest.approx(float(ref), rel=1e-12, abs=1e-14)


def test_zero_conventions_never_nan():
    h = np.array([0.5, 0.5, 0.0])
    q = np.array([0.0, 0.5, 0.5])
    assert divergence(h, q, "kl") == math.inf  # h > 0 where q = 0
    assert divergence(h, q, "reverse_kl") == math.inf  # q > 0 where h = 0
    assert divergence(h, q, "chi2") == math.inf
    assert divergence(h, q, "neyman_chi2") == math.inf
    for finite in ("hellinger", "tv", "js"):
        val = divergence(h, q, finite)
        assert np.isfinite(val) and val > 0
    assert divergence(h, q, "tv") == pytest.approx(0.5)
    # 0 log 0 = 0 exactly: identical rows with zeros give exactly 0
    r = np.array([0.0, 1.0, 0.0])
    for name in DIVERGENCES:
        assert divergence(r, r, name) == 0.0


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
@given(s=st.floats(0, 1, exclude_max=True), g=st.floats(0, 1))
def test_two_point_equals_full_divergence_of_theorem2_target(name, s, g):
    """Two-point form = D(h || q) for h_n = g, h_i = q_i (1-g)/(1-s) (Theorem 2's target).

    s < 1: at s = 1 the other tokens have no mass to rescale (convention 4)."""
    q = np.array([s, 0.3 * (1 - s), 0.7 * (1 - s), 0.0])
    c = (1 - g) / (1 - s)
    h = np.array([g, c * q[1], c * q[2], 0.0])
    d = get_divergence(name)
    full = float(d.unchecked(h, q))
    tp = float(d.two_point(np.array(g), np.array(s)))
    if math.isinf(full) or math.isinf(tp):
        assert full == tp
    else:
        assert tp == pytest.approx(full, rel=1e-9, abs=1e-14)  # two ways of summing 3 terms


def test_general_f_divergence_reproduces_kl():
    my_kl = f_divergence(lambda t: t * np.log(t), name="my_kl", f_at_zero=0.0, f_second_at_one=1.0)
    rng = np.random.default_rng(0)
    h, q = rng.dirichlet(np.ones(7), 5), rng.dirichlet(np.ones(7), 5)
    q[:, 0] = 0
    q /= q.sum(-1, keepdims=True)
    h[1, 0] = 0
    h /= h.sum(-1, keepdims=True)
    assert_close(my_kl.unchecked(h, q)[1:2], divergence(h[1:2], q[1:2], "kl"))
    assert np.isinf(my_kl.unchecked(h, q)[0])


def test_unknown_divergence_is_a_valueerror():
    with pytest.raises(ValueError, match="divergence"):
        divergence([1.0], [1.0], "wasserstein")
