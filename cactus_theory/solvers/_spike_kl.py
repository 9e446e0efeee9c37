r"""The exact KL spike root's iteration: a Lambert-W start and Halley steps.

The two-point KL :math:`g(x) = x \log(x/s) + (1-x)\log((1-x)/(1-s))` has
:math:`g'' = 1/(x(1-x))`, so Halley's cubic step is cheap; above 1/2 it is taken in
:math:`\log(1-x)`. The start is the root of a lower bound of g through Lambert W
(:func:`_kl_start`). :func:`_forms` picks this form for the KL and Newton's
(:mod:`cactus_theory.solvers._spike_forms`) for the other smooth divergences.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 2.
"""

from __future__ import annotations

import math

import numpy as np

from ..divergences import _KL_RATIO_FLOOR, DIVERGENCES, _kl_log_ratios
from ._spike_closed import lambert_w
from ._spike_forms import _derivative, _Form, _generic_form


def _kl_interior(x, s, c=None):
    """The two-point KL and its slope for 1e-280 <= s < 1, s <= x < 1 (numpy).

    The same operations as :func:`cactus_theory.divergences.kl_two_point` on that domain
    (bit for bit; tested), without its masks for zeros and ones. ``c = 1 - s`` may be
    passed precomputed. Returns g(x), g'(x) and 1 - x.
    """
    c = 1.0 - s if c is None else c
    dx = x - s
    a = np.log1p(dx / s)
    b = np.log1p(-dx / c)  # (s - x)/(1 - s): negation is exact
    one_x = 1.0 - x
    up = np.flatnonzero(dx > 0.5 * c)
    if up.size:
        b[up] = np.log(one_x[up] / c[up])
    return x * a + one_x * b, a - b, one_x


def _kl_at_one(s):
    """``kl_two_point(1, s)`` bit for bit (numpy): ``log1p((1 - s)/s)`` = log(1/s) for
    s >= 1e-280, the generic form below."""
    shape, s = np.shape(s), np.atleast_1d(s)
    normal = s >= _KL_RATIO_FLOOR
    if bool(np.all(normal)):
        return np.log1p((1.0 - s) / s).reshape(shape)
    out = np.log1p((1.0 - s) / np.where(normal, s, 1.0))
    out[~normal] = DIVERGENCES["kl"].two_point(np.ones_like(s[~normal]), s[~normal])
    return out.reshape(shape)


def _kl_start(xp, s, delta):
    r"""A starting point for the KL root: within a few 1e-6 of it (numpy) where it is small.

    Since :math:`(1-x)\log\frac{1-x}{1-s} \ge s - x`, the two-point KL is at least
    :math:`G_L(x) = x\log(x/s) - x + s`, whose root is
    :math:`x_L = (\delta - s)/W((\delta - s)/(e s))` (Lambert W): an upper bound of the root,
    sharp when it is small (relative error about :math:`x/(2\log(x/s))`: 8e-3 at the
    benchmark's rows). It is used where :math:`\delta > (1 + e) s`; elsewhere the root is
    near s and the Taylor point (Corollary 5) is the better start. Kept inside (s, 1).

    numpy sharpens it without an exponential (float64 ``exp`` has no SIMD loop here, ``log``
    has): W by one Halley step on :math:`w + \log(w/z) = 0` from Winitzki's point
    (:func:`_lambert_w_log_step`, 1e-2 to about 1e-6), then one Newton step on
    :math:`G_L + (x - s)^2/2`, the two-point KL to second order in x and s:
    :math:`x_L - (x_L - s)^2/(2(W + 1))`, since :math:`G_L'(x_L) = \log(x_L/s) = W + 1`. The
    result is within a few 1e-6 of the root at the benchmark's rows, so that one Halley step
    on the exact form lands within an ulp or two (:func:`_certified_numpy`). The step keeps
    the point above s: :math:`W \ge W(1)` gives :math:`x_L/s = e^{W+1} \ge 4.8`, and the
    factor is at least 0.68 where :math:`x_L < 1`. The torch path (a fixed Halley count)
    keeps :math:`x_L`.
    """
    z = (delta - s) / (math.e * s)
    far = z > 1.0
    if isinstance(s, np.ndarray):
        zf = np.maximum(z, 1.0)
        w = _lambert_w_log_step(zf, lambert_w(np, zf, steps=0))
        x = (delta - s) / w
        x = np.where(x < 1.0, x - (x - s) ** 2 / (2.0 * (w + 1.0)), 0.5 * (1.0 + s))
        near = np.flatnonzero(~far)
        if near.size:
            sn = s[near]
            xn = sn + np.sqrt(2.0 * delta[near] * sn * (1.0 - sn))
            x[near] = np.where(xn < 1.0, xn, 0.5 * (1.0 + sn))
        high = np.flatnonzero(x > 0.5)
        if high.size:
            x[high] = _kl_better_start(np, s[high], delta[high], x[high])
        return x
    x_l = (delta - s) / lambert_w(xp, xp.where(far, z, xp.ones_like(z)), steps=0)
    x = xp.where(far, x_l, s + xp.sqrt(2.0 * delta * s * (1.0 - s)))
    x = xp.where(x < 1.0, x, 0.5 * (1.0 + s))
    return xp.where(x > 0.5, _kl_better_start(xp, s, delta, x), x)


def _lambert_w_log_step(z, w):
    r"""One Halley step for :math:`W(z)`, z >= 1, on :math:`f(w) = w + \log(w/z)` (numpy):
    :math:`f' = (w+1)/w`, :math:`f'' = -1/w^2`, so
    :math:`w - f w / ((w + 1) + f/(2(w + 1)))`. One logarithm, no exponential."""
    f = w + np.log(w / z)
    w1 = w + 1.0
    return w - f * w / (w1 + f / (2.0 * w1))


def _kl_better_start(xp, s, delta, x):
    """Of x and :func:`_kl_start_near_one`, the point with the shorter Newton step."""
    y = _kl_start_near_one(xp, s, delta)
    out = []
    for pt in (x, y):
        a, b = _kl_log_ratios(xp, pt, s)
        out.append(xp.abs((pt * a + (1.0 - pt) * b - delta) / (a - b)))
    return xp.where(out[1] < out[0], y, x)


def _kl_start_near_one(xp, s, delta):
    r"""A start for KL roots above 1/2: with v = 1 - x, :math:`L = -\log s`,
    :math:`g(1 - v) \approx L - v(K - \log v)`, :math:`K = L + 1 + \log(1 - s)`, so
    :math:`v = (L - \delta)/(K - \log v)`, solved by three fixed-point steps from
    :math:`v = (L - \delta)/K`; kept in (s, 1)."""
    big_l = -xp.log(s)
    k = big_l + 1.0 + xp.log1p(-s)
    r = xp.clip(big_l - delta, 1e-300, None)
    v = r / k
    for _ in range(3):
        v = r / xp.clip(k - xp.log(v), 1e-3, None)
    x = 1.0 - v
    return xp.where((x > s) & (x < 1.0), x, 0.5 * (1.0 + s))


def _kl_halley(xp, s, delta, x, g, slope, one_x):
    r"""One Halley step on :math:`g(x) = \delta` from x, given g(x), g'(x) and 1 - x.

    For x <= 1/2 the step is taken in x (:math:`g'' = 1/(x(1-x))` for the KL); above, in
    :math:`u = \log(1 - x)`, where the slope :math:`g'(x) \to \infty` as x -> 1 no longer
    slows it (:math:`dg/du = -g'(x)(1-x)`, :math:`d^2g/du^2 = (1-x)(1/x - g'(x))`); the new
    point is then :math:`1 - (1-x)e^{-\Delta u} < 1`. Kept strictly inside (s, 1) (halfway to
    the violated end otherwise).
    """
    f = g - delta
    step = f / slope
    new = x - step / (1.0 - 0.5 * step / (slope * x * one_x))
    if isinstance(x, np.ndarray):
        high = np.flatnonzero(x > 0.5)
        if high.size:
            new[high] = _halley_in_log_complement(np, f[high], slope[high], x[high], one_x[high])
    else:
        new = xp.where(x > 0.5, _halley_in_log_complement(xp, f, slope, x, one_x), new)
    inside = (new > s) & (new < 1.0)  # NaN fails too
    if isinstance(new, np.ndarray) and bool(np.all(inside)):
        return new
    return xp.where(inside, new, xp.where(new >= 1.0, 0.5 * (x + 1.0), 0.5 * (x + s)))


def _halley_in_log_complement(xp, f, slope, x, one_x):
    r"""The Halley step of :func:`_kl_halley` taken in :math:`u = \log(1 - x)`."""
    f1 = -slope * one_x
    f2 = one_x * (1.0 / x - slope)
    du = (f / f1) / (1.0 - 0.5 * f * f2 / (f1 * f1))
    return 1.0 - one_x * xp.exp(-du)


def _kl_evaluate(xp, x, s):
    """g, g' and 1 - x for the two-point KL: :func:`_kl_interior` (numpy; 1e-280 <= s < 1)
    or :func:`cactus_theory.divergences._kl_log_ratios` (torch; 0 < s < 1): both the floats
    of ``kl_two_point`` on their domain."""
    if isinstance(x, np.ndarray):
        return _kl_interior(x, s)
    a, b = _kl_log_ratios(xp, x, s)
    one_x = 1.0 - x
    return x * a + one_x * b, a - b, one_x


#: The KL's iteration: Halley from the Lambert-W start. Halley is cubic: a last step below
#: 5e-6 of x - s leaves an error of order 1e-16 of it (an ulp or two: the walk finishes);
#: the torch count converges to 1e-7 relative from the start over q_n in [1e-38, 1), delta
#: in [1e-8, 300] (tested).
_KL_FORM = _Form(_kl_evaluate, lambda x, s: _kl_interior(x, s)[0], _kl_halley, _kl_start, 5e-6, 6, 6)


def _forms(d):
    """The iteration of divergence ``d`` (which has a derivative): the KL's own, else Newton."""
    return _KL_FORM if d is DIVERGENCES["kl"] else _generic_form(d, _derivative(d))
