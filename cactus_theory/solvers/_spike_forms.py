r"""The two-point forms the certified spike iteration runs on, and Newton's form for the
smooth divergences other than the KL.

For :math:`s = q_n` and :math:`g(x) = s f(x/s) + (1-s) f((1-x)/(1-s))` the derivative is
:math:`g'(x) = f'(x/s) - f'((1-x)/(1-s))`; :data:`_F_PRIME` holds :math:`f'` (up to a
constant, which cancels) of every built-in smooth divergence. The KL's own form (Halley from a
Lambert-W start) is :mod:`cactus_theory.solvers._spike_kl`.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..divergences import DIVERGENCES


def _fprime_kl(xp, t):
    return xp.log(t)  # f'(t) = log t + 1; the constant cancels in g'


def _fprime_reverse_kl(xp, t):
    return -1.0 / t


def _fprime_chi2(xp, t):
    return 2.0 * t


def _fprime_neyman_chi2(xp, t):
    return -1.0 / (t * t)


def _fprime_hellinger(xp, t):
    return -0.5 / xp.sqrt(t)


def _fprime_js(xp, t):
    return 0.5 * (xp.log(t) - xp.log1p(t))


#: :math:`f'(t)` up to an additive constant (which cancels in the derivative of the two-point
#: form) for every built-in smooth divergence; TV and user generators use bisection.
_F_PRIME = {
    "kl": _fprime_kl,
    "reverse_kl": _fprime_reverse_kl,
    "chi2": _fprime_chi2,
    "neyman_chi2": _fprime_neyman_chi2,
    "hellinger": _fprime_hellinger,
    "js": _fprime_js,
}


def _derivative(d):
    """:math:`f'` of a built-in divergence (``_F_PRIME``), None for TV and user generators."""
    return _F_PRIME.get(d.name) if DIVERGENCES.get(d.name) is d else None


class _Form(NamedTuple):
    """What the certified iteration needs of a two-point divergence g (numpy and torch).

    ``evaluate(xp, x, s)`` returns g(x), g'(x) and one more value ``step`` reads; ``value``
    is g alone, as :meth:`Divergence.two_point` computes it (the certificate's test);
    ``step(xp, s, delta, x, g, slope, extra)`` is the next iterate, strictly inside (s, 1);
    ``start(xp, s, delta)`` the first. A step of at most ``tol`` of x - s is the last
    (numpy); numpy takes at most ``1 + more_steps`` steps, torch ``torch_steps``.
    """

    evaluate: Callable
    value: Callable
    step: Callable
    start: Callable
    tol: float
    more_steps: int
    torch_steps: int


def _generic_form(d, fprime):
    """Newton from Corollary 5's Taylor point on ``d.two_point``, with
    :math:`g'(x) = f'(x/s) - f'((1-x)/(1-s))` (``fprime`` is f' up to a constant)."""

    def evaluate(xp, x, s):
        slope = fprime(xp, x / s) - fprime(xp, (1.0 - x) / (1.0 - s))
        return d.two_point(x, s), slope, None

    def step(xp, s, delta, x, g, slope, extra):
        return _inside(xp, s, x, x - (g - delta) / slope)

    def start(xp, s, delta):
        x0 = s + xp.sqrt(2.0 * delta * s * (1.0 - s) / d.f_second_at_one)
        return xp.where((x0 > s) & (x0 < 1.0), x0, 0.5 * (1.0 + s))  # q_n = 0 included

    # Newton is quadratic: after a step of 1e-8 of x - s the error is of order 1e-16 of it
    return _Form(evaluate, lambda x, s: d.two_point(x, s), step, start, 1e-8, 40, 12)


def _inside(xp, s, x, new):
    """``new`` where strictly inside (s, 1) (NaN is not), else halfway from x to the end it
    passed."""
    inside = (new > s) & (new < 1.0)
    return xp.where(inside, new, xp.where(new >= 1.0, 0.5 * (x + 1.0), 0.5 * (x + s)))
