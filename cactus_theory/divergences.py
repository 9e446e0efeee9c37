r"""f-divergences D(h || q), their two-point forms, and the conventions of each.

Every divergence here is an f-divergence

.. math:: D_f(h \| q) = \sum_i q_i f(h_i / q_i),

with the perspective conventions :math:`0 f(0/0) = 0`, :math:`q f(0/q) = q f(0)` and
:math:`0 f(h/0) = h f'(\infty)`, where :math:`f'(\infty) = \lim_{t\to\infty} f(t)/t`. So mass of
h where q = 0 costs ``+inf`` for KL and chi-square (never NaN), and a finite amount for
Hellinger, total variation and Jensen-Shannon. All logarithms are natural (nats).

Symbols: q verifier (``target_probs``), h the distribution compared with it (a target, or
the emitted distribution), p drafter. The first argument is always h and the second q:
``divergence(h, q, "kl") = KL(h || q) = sum h log(h / q)``.

The elementwise terms are written once against the array API (numpy and torch share them);
the public functions take and return float64 numpy arrays and reduce over the last axis.

References
----------
Hao & Mou, "Cactus", ICLR 2026 (arXiv 2604.04987), Section 2.2 and Theorem 2 (the two-point
form); Csiszar (1967) for f-divergences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace

from ._validation import as_probs, choice

__all__ = [
    "Divergence",
    "DIVERGENCES",
    "get_divergence",
    "divergence",
    "two_point_divergence",
    "kl_two_point",
    "f_divergence",
]


def _safe(xp, x, mask):
    """``x`` where ``mask``, else 1: keeps log/divide away from 0 so no warning or NaN appears."""
    return xp.where(mask, x, xp.ones_like(x))


def _xlogy_ratio(xp, a, b):
    """``a log(a / b)`` elementwise with ``0 log(0/b) = 0`` and ``a log(a/0) = +inf`` for a > 0."""
    pos_a, pos_b = a > 0, b > 0
    sa, sb = _safe(xp, a, pos_a), _safe(xp, b, pos_b)
    val = a * (xp.log(sa) - xp.log(sb))
    val = xp.where(pos_b, val, xp.full_like(val, math.inf))
    return xp.where(pos_a, val, xp.zeros_like(val))


def _term_kl(xp, h, q):
    return _xlogy_ratio(xp, h, q)


def _term_reverse_kl(xp, h, q):
    return _xlogy_ratio(xp, q, h)


def _term_chi2(xp, h, q):
    pos_q = q > 0
    val = (h - q) ** 2 / _safe(xp, q, pos_q)
    inf = xp.where(h > 0, xp.full_like(val, math.inf), xp.zeros_like(val))
    return xp.where(pos_q, val, inf)


def _term_neyman_chi2(xp, h, q):
    return _term_chi2(xp, q, h)


def _term_hellinger(xp, h, q):
    return 0.5 * (xp.sqrt(h) - xp.sqrt(q)) ** 2


def _term_tv(xp, h, q):
    return 0.5 * xp.abs(h - q)


def _term_js(xp, h, q):
    m = 0.5 * (h + q)
    return 0.5 * _xlogy_ratio(xp, h, m) + 0.5 * _xlogy_ratio(xp, q, m)


@dataclass(frozen=True)
class Divergence:
    r"""An f-divergence with its elementwise term and the constants the solvers need.

    Attributes
    ----------
    name : str
        Registry name.
    term : callable
        ``term(xp, h, q)``: the elementwise perspective :math:`q f(h/q)` (array API).
    f : callable
        The generator :math:`f(t)` on numpy arrays, ``f(1) = 0``.
    f_second_at_one : float
        :math:`f''(1)`; the two-point divergence is
        :math:`\tfrac{f''(1)}{2}(\gamma - s)^2 / (s(1-s)) + O((\gamma-s)^3)`, which gives the
        Taylor (Corollary 5) point. ``nan`` where f is not twice differentiable (TV).
    finite_off_support : bool
        True when mass of h where q = 0 has a finite cost (:math:`f'(\infty) < \infty`).
    convention : str
        The convention in words (direction, constants, log base).
    two_point_form : callable, optional
        ``two_point_form(xp, gamma, s)``: a more accurate evaluation of the two-point form
        than the sum of the two terms (KL: :func:`kl_two_point`); default: the two terms.
    """

    name: str
    term: Callable
    f: Callable
    f_second_at_one: float
    finite_off_support: bool
    convention: str
    two_point_form: Callable | None = None

    def __call__(self, h, q, axis: int = -1):
        """``D(h || q)`` reduced over ``axis`` (float64 numpy, validated)."""
        h = as_probs(h, "h")
        q = as_probs(q, "q")
        return self.unchecked(h, q, axis=axis)

    def unchecked(self, h, q, axis: int = -1):
        """``D(h || q)`` without validation (array API: numpy or torch in, same out).

        The sum is clipped at 0: a divergence is non-negative, and rows with h = q up to
        rounding would otherwise give values like -1e-17.
        """
        xp = array_namespace(h, q)
        with np.errstate(over="ignore"):  # tiny q: a ratio overflowing to +inf is the value
            return xp.clip(xp.sum(self.term(xp, h, q), axis=axis), 0.0, None)

    def two_point(self, gamma, s):
        r"""Two-point form :math:`s f(\gamma/s) + (1-s) f((1-\gamma)/(1-s))` (array API).

        This is :math:`D(h \| q)` for the Theorem 2 target ``h_n = gamma``,
        ``h_i = q_i (1-gamma)/(1-q_n)``, with ``s = q_n``.
        """
        xp = array_namespace(gamma, s)
        if self.two_point_form is not None:
            return self.two_point_form(xp, gamma, s)
        with np.errstate(over="ignore"):  # tiny s: a ratio overflowing to +inf is the value
            return self.term(xp, gamma, s) + self.term(xp, 1 - gamma, 1 - s)


#: Below this q_n the ratio (gamma - s)/s could overflow: log(gamma) - log(s) is used instead.
_KL_RATIO_FLOOR = 1e-280


def _ratio_floor(x) -> float:
    """Below this, a ratio 1/x could overflow in x's dtype (1e8 below its largest float; the
    float64 floor is :data:`_KL_RATIO_FLOOR`; float16, whose largest float is 65504, always
    takes the difference of logarithms)."""
    name = str(x.dtype)
    if "float64" in name:
        return _KL_RATIO_FLOOR
    if "float16" in name and "bfloat16" not in name:
        return 2.0
    return 3e-31  # float32 and bfloat16: largest float 3.4e38


def _kl_log_ratios(xp, gamma, s):
    r"""The two logarithms of the two-point KL, each to a few ulps.

    Returns :math:`A = \log(\gamma/s)` and :math:`B = \log((1-\gamma)/(1-s))` for
    :math:`0 < s < 1`, :math:`0 < \gamma < 1`:

    * ``A = log1p((gamma - s)/s)`` for gamma >= s/2 (the ratio near 1), ``log(gamma/s)``
      below, and ``log(gamma) - log(s)`` where s or gamma is below :data:`_KL_RATIO_FLOOR`
      (3e-31 in float32; always in float16): the ratio could overflow or lose digits as a
      subnormal, and the value is large there;
    * ``B = log1p((s - gamma)/(1 - s))`` while that argument is >= -1/2 (log1p is well
      conditioned there), else ``log((1 - gamma)/(1 - s))``, a ratio below 1/2 whose
      logarithm is far from 0 (and ``1 - gamma`` is exact for gamma >= 1/2).

    The naive ``log(1 - gamma)`` rounds ``1 - gamma`` first: for gamma = 1e-11 it is off by
    1e-16 absolute, which moves the root of the two-point equation by 1e8 ulps.
    """
    one = xp.ones_like(s)
    floor = _ratio_floor(s)
    normal = (s >= floor) & (gamma >= floor)
    near = normal & (gamma >= 0.5 * s)
    safe_s = xp.where(normal, s, one)
    safe_g = xp.where(gamma > 0, gamma, one)
    a = xp.where(
        near,
        xp.log1p(xp.where(near, gamma - s, 0.0 * s) / safe_s),
        xp.where(normal, xp.log(safe_g / safe_s), xp.log(safe_g) - xp.log(xp.where(s > 0, s, one))),
    )
    c = 1.0 - s
    safe_c = xp.where(c > 0, c, one)
    upper = (gamma - s) > 0.5 * c
    b = xp.where(
        upper,
        xp.log(xp.where(upper & (gamma < 1), 1.0 - gamma, one) / safe_c),
        xp.log1p(xp.where(upper, 0.0 * s, s - gamma) / safe_c),
    )
    return a, b


def kl_two_point(xp, gamma, s):
    r"""The two-point KL :math:`\gamma\log(\gamma/s) + (1-\gamma)\log((1-\gamma)/(1-s))`.

    Accurate to a few ulps of each term (:func:`_kl_log_ratios`), with the conventions of
    :func:`_xlogy_ratio`: a zero weight gives 0, a positive weight on a zero reference gives
    ``+inf``. Theorem 2's equation for the boosted probability gamma of a token with
    verifier probability s (Hao & Mou, ICLR 2026).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a, b = _kl_log_ratios(xp, gamma, s)
        first = xp.where(gamma > 0, gamma * a, xp.zeros_like(a))
        first = xp.where((s > 0) | (gamma <= 0), first, xp.full_like(a, math.inf))
        second = xp.where(gamma < 1, (1.0 - gamma) * b, xp.zeros_like(b))
        second = xp.where((s < 1) | (gamma >= 1), second, xp.full_like(b, math.inf))
    return first + second


def _f_kl(t):
    t = np.asarray(t, dtype=np.float64)
    return np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0)


def _f_reverse_kl(t):
    t = np.asarray(t, dtype=np.float64)
    return np.where(t > 0, -np.log(np.where(t > 0, t, 1.0)), np.inf)


def _f_js(t):
    t = np.asarray(t, dtype=np.float64)
    return 0.5 * (_f_kl(t) - (1 + t) * np.log((1 + t) / 2))


DIVERGENCES: dict[str, Divergence] = {
    d.name: d
    for d in [
        Divergence(
            "kl",
            _term_kl,
            _f_kl,
            1.0,
            False,
            "KL(h||q) = sum h log(h/q), nats; f(t) = t log t; +inf where h > 0 = q.",
            two_point_form=kl_two_point,
        ),
        Divergence(
            "reverse_kl",
            _term_reverse_kl,
            _f_reverse_kl,
            1.0,
            True,
            "KL(q||h) = sum q log(q/h), nats; f(t) = -log t; +inf where q > 0 = h; mass of h "
            "where q = 0 is free (f'(inf) = 0).",
        ),
        Divergence(
            "chi2",
            _term_chi2,
            lambda t: (np.asarray(t, dtype=np.float64) - 1) ** 2,
            2.0,
            False,
            "Pearson chi-square sum (h-q)^2/q, no 1/2; f(t) = (t-1)^2; +inf where h > 0 = q.",
        ),
        Divergence(
            "neyman_chi2",
            _term_neyman_chi2,
            lambda t: np.where(
                np.asarray(t) > 0,
                (np.asarray(t, dtype=np.float64) - 1) ** 2 / np.where(np.asarray(t) > 0, t, 1.0),
                np.inf,
            ),
            2.0,
            True,
            "Neyman chi-square sum (h-q)^2/h, no 1/2; f(t) = (t-1)^2/t; +inf where q > 0 = h.",
        ),
        Divergence(
            "hellinger",
            _term_hellinger,
            lambda t: 0.5 * (np.sqrt(np.asarray(t, dtype=np.float64)) - 1) ** 2,
            0.25,
            True,
            "Squared Hellinger with the 1/2: (1/2) sum (sqrt h - sqrt q)^2 in [0, 1]; "
            "f(t) = (sqrt t - 1)^2 / 2.",
        ),
        Divergence(
            "tv",
            _term_tv,
            lambda t: 0.5 * np.abs(np.asarray(t, dtype=np.float64) - 1),
            math.nan,
            True,
            "Total variation (1/2) sum |h - q| in [0, 1]; f(t) = |t - 1| / 2.",
        ),
        Divergence(
            "js",
            _term_js,
            _f_js,
            0.25,
            True,
            "Jensen-Shannon (1/2) KL(h||m) + (1/2) KL(q||m), m = (h+q)/2, nats, in [0, log 2].",
        ),
    ]
}


def f_divergence(
    f: Callable,
    *,
    name: str = "f",
    f_second_at_one: float = math.nan,
    f_at_zero: float | None = None,
    slope_at_infinity: float = math.inf,
) -> Divergence:
    r"""Build a general f-divergence from a convex generator ``f`` with ``f(1) = 0``.

    Parameters
    ----------
    f : callable
        Vectorized generator on numpy float64 arrays of ratios ``t = h/q > 0``.
    name : str
        Name used in reports.
    f_second_at_one : float
        :math:`f''(1)`, needed only by the Taylor rule.
    f_at_zero : float, optional
        :math:`f(0) = \lim_{t\to 0+} f(t)`; defaults to ``f(0.0)``.
    slope_at_infinity : float
        :math:`f'(\infty) = \lim_{t\to\infty} f(t)/t`, the cost per unit of h where q = 0.

    Returns
    -------
    Divergence
        Whose term is :math:`q f(h/q)` with the perspective conventions of the module
        docstring. Numpy only (the generator is a numpy callable).
    """
    f0 = float(f(np.float64(0.0))) if f_at_zero is None else float(f_at_zero)

    def term(xp, h, q):
        h = np.asarray(h, dtype=np.float64)
        q = np.asarray(q, dtype=np.float64)
        pos_q, pos_h = q > 0, h > 0
        safe_q = np.where(pos_q, q, 1.0)
        ratio = np.where(pos_q & pos_h, h / safe_q, 1.0)
        inner = np.where(pos_h, q * np.asarray(f(ratio), dtype=np.float64), q * f0)
        off = np.where(pos_h, h * slope_at_infinity if math.isfinite(slope_at_infinity) else math.inf, 0.0)
        with np.errstate(invalid="ignore"):
            return np.where(pos_q, np.where(pos_q & pos_h, inner, q * f0), off)

    return Divergence(
        name, term, f, f_second_at_one, math.isfinite(slope_at_infinity), "user-supplied generator f"
    )


def get_divergence(name) -> Divergence:
    """Look up a divergence by name (or pass a :class:`Divergence` through).

    Raises
    ------
    ValueError
        Naming ``divergence`` and listing the valid names when ``name`` is unknown.
    """
    if isinstance(name, Divergence):
        return name
    return DIVERGENCES[choice(name, tuple(DIVERGENCES), "divergence")]


def divergence(h, q, name="kl", *, axis: int = -1) -> np.ndarray:
    r"""``D(h || q)`` for a named divergence, over the last axis.

    .. math:: D_f(h \| q) = \sum_i q_i f(h_i/q_i)

    Parameters
    ----------
    h, q : array_like, shape (..., V)
        Probability rows (validated; NaN, negative or un-normalized rows raise ValueError).
    name : str or Divergence
        One of :data:`DIVERGENCES`.

    Returns
    -------
    ndarray, shape (...)
        Finite, or ``+inf`` where the divergence is infinite (never NaN).

    Examples
    --------
    >>> float(divergence([0.5, 0.5], [0.25, 0.75], "tv"))
    0.25
    """
    return get_divergence(name)(h, q, axis=axis)


def two_point_divergence(gamma, s, name="kl") -> np.ndarray:
    r"""Two-point divergence :math:`s f(\gamma/s) + (1-s) f((1-\gamma)/(1-s))` (Theorem 2).

    ``gamma`` is the target probability of the drafted token, ``s = q_n`` its verifier
    probability; both in [0, 1] and broadcast together.
    """
    g = np.asarray(gamma, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    if np.any(~np.isfinite(g)) or np.any((g < 0) | (g > 1)):
        raise ValueError("gamma: must lie in [0, 1]")
    if np.any(~np.isfinite(s)) or np.any((s < 0) | (s > 1)):
        raise ValueError("s: must lie in [0, 1]")
    g, s = np.broadcast_arrays(g, s)
    return get_divergence(name).two_point(g, s)
