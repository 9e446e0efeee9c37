r"""Bracketed scalar searches shared by the solvers: bisections, a golden section, Brent's root.

The scalar ones are plain float64 Python loops over a callable (one value per call), for
searches whose evaluations are themselves vectorised (a taut string, a sorted prefix sum);
:func:`bisect_elementwise` runs one bisection per entry of an array (numpy or torch, the same
operations on both: no host read), for a batch of independent scalar searches. Their
tolerances:

* :func:`bisect_threshold` halves the bracket ``steps`` times (64 by default: an interval of
  length <= 1 then shrinks below float64 resolution) and stops early once the midpoint
  rounds onto an end. It returns the end on the feasible side, so the answer always
  satisfies the predicate as computed.
* :func:`golden_section` shrinks the bracket by the golden ratio per step
  (:math:`0.618^{80} \approx 2 \cdot 10^{-17}` of the interval at 80 steps) and returns the
  best of both ends, the final bracket's midpoint and the best point probed, so an optimum
  at an end (a function monotone on the bracket) is returned exactly, and one at the edge
  of an infinite region is not lost when the midpoint falls beyond that edge. ``+inf`` values (infeasible points
  of a convex function on an interval whose feasible part contains ``lo``) are allowed when
  minimising: ties between two infinite probes move the bracket towards ``lo``.
* :func:`bisect_interval` is :func:`bisect_threshold` returning both ends of the final
  bracket (the end where the predicate fails too).
* :func:`bisect_elementwise` halves every entry's bracket exactly ``steps`` times (no early
  stop but the caller's ``stop``): after k steps the bracket is ``2**-k`` of the initial one,
  down to the floats' resolution (a midpoint that rounds onto an end leaves the bracket as
  it is).
* :func:`brent_root` is :func:`scipy.optimize.brentq` (Brent's method: inverse quadratic
  interpolation safeguarded by bisection) with its tolerance stated by the caller: the
  returned x is within ``xtol + rtol * |x|`` of a sign change of ``fn``.
* :func:`illinois` refines a batch of brackets of a root of ``excess`` (regula falsi, the
  Illinois variant: the stale end's value is halved when one end moves twice in a row;
  bisection where the secant is unusable), each to a bracket of width ``1e-13 |hi|`` or a
  feasible end within ``tol`` of the root's value, in at most ``steps`` steps.

The scalar searches return a :class:`Search`: the answer (``value``), the final bracket that
holds it and how the search ended (``status``), and its evaluations; the elementwise ones return
their final brackets (arrays), one search per entry.

References
----------
J. Kiefer, "Sequential minimax search for a maximum", Proc. AMS 4 (1953) (golden section).
R. P. Brent, "Algorithms for Minimization without Derivatives", Prentice-Hall (1973), ch. 4.
M. Dowell & P. Jarratt, "A modified regula falsi method for computing the root of an
equation", BIT 11 (1971) (the Illinois method).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace

from .results import Result

__all__ = [
    "Search",
    "bisect_elementwise",
    "bisect_interval",
    "bisect_threshold",
    "brent_root",
    "golden_section",
    "illinois",
]

_GOLDEN = 0.5 * (math.sqrt(5.0) - 1.0)


@dataclass(frozen=True)
class Search(Result):
    """What a scalar search found.

    Attributes
    ----------
    value : float
        The answer: the threshold, the root or the optimum's location.
    bracket : tuple of float
        ``(lo, hi)`` holding it: the final bracket of a bisection or a golden section; for a
        root, the interval ``value -+ (xtol + rtol |value|)`` that holds a sign change.
    status : str
        ``"converged"``: the bracket reached its stated width (adjacent floats for a
        bisection, the tolerance for a root); ``"steps"``: the steps ran out first (the
        bracket is then ``2**-steps`` of the initial one for a bisection, ``0.618**steps``
        for a golden section).
    evaluations : int
        Calls of the function or predicate.
    fun : float or None
        The function's value at ``value`` (golden section and root), else None.
    """

    value: float
    bracket: tuple
    status: str
    evaluations: int
    fun: float | None = None


def bisect_threshold(holds: Callable[[float], bool], lo: float, hi: float, steps: int = 64) -> Search:
    """The smallest x in [lo, hi] where a monotone predicate holds, to ``steps`` halvings.

    ``holds`` must be False below some threshold and True above it, and True at ``hi`` (the
    caller checks); the returned ``value`` is the upper end of the final bracket, at which
    ``holds`` was True (or ``hi``).
    """
    res = bisect_interval(holds, lo, hi, steps)
    return Search(res.bracket[1], res.bracket, res.status, res.evaluations)


def bisect_interval(holds: Callable[[float], bool], lo: float, hi: float, steps: int = 64) -> Search:
    """:func:`bisect_threshold`'s search, its ``value`` the lower end of the final bracket.

    ``holds`` is False at the bracket's ``lo`` (or ``lo`` is the initial end) and True at its
    ``hi`` (or ``hi`` is the initial end); the two are at most ``2**-steps`` of the initial
    bracket apart (status ``"steps"``), or adjacent floats (``"converged"``: the midpoint
    rounded onto an end).
    """
    status, evaluations = "steps", 0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            status = "converged"
            break
        evaluations += 1
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return Search(lo, (lo, hi), status, evaluations)


def bisect_elementwise(xp, lower, lo, hi, steps: int, stop=None):
    """One bisection per entry: ``steps`` halvings of the brackets ``[lo, hi]`` (arrays).

    Each step probes ``mid = 0.5 * (lo + hi)`` and moves ``lo`` to ``mid`` where
    ``lower(mid)`` is True, ``hi`` to ``mid`` elsewhere (a NaN test counts as False). So an
    end where ``lower`` holds stays on that side: for a nondecreasing ``fn``, ``lower =
    lambda x: fn(x) <= budget`` keeps ``lo`` feasible and brackets the largest feasible x.
    ``stop(lo, hi)``, if given, is asked after every step and ends the search when True (a
    host read: numpy callers only).

    Parameters
    ----------
    xp : array namespace
        numpy or torch (``where`` is the only operation used besides ``lower``).
    lower : callable
        Array of probes -> boolean array of their shape.
    lo, hi : array
        The brackets' ends, broadcastable together.
    steps : int
        Halvings.

    Returns
    -------
    lo, hi : array
        The final brackets.
    """
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = lower(mid)
        lo = xp.where(ok, mid, lo)
        hi = xp.where(ok, hi, mid)
        if stop is not None and stop(lo, hi):
            break
    return lo, hi


def brent_root(
    fn: Callable[[float], float], lo: float, hi: float, *, xtol: float, rtol: float, maxiter: int = 100
) -> Search:
    """A root of ``fn`` in [lo, hi] by Brent's method (:func:`scipy.optimize.brentq`).

    ``fn(lo)`` and ``fn(hi)`` must differ in sign (ValueError otherwise). The returned
    ``value`` is within ``xtol + rtol * |value|`` of a sign change of ``fn`` as computed
    (``rtol`` at least 4 float64 epsilons, scipy's floor; the ``bracket``), or is a point where
    ``fn`` is exactly 0; RuntimeError after ``maxiter`` iterations (Brent's bisection fallback
    bounds them by about the square of the bisection count where ``fn`` is noisy near its
    root).
    """
    from scipy.optimize import brentq

    x, info = brentq(fn, lo, hi, xtol=xtol, rtol=rtol, maxiter=maxiter, full_output=True)
    x = float(x)
    width = xtol + rtol * abs(x)
    status = "converged" if info.converged else "steps"
    return Search(x, (max(lo, x - width), min(hi, x + width)), status, int(info.function_calls))


def golden_section(
    fn: Callable[[float], float], lo: float, hi: float, steps: int = 80, *, maximize: bool = False
) -> Search:
    """The optimum of a unimodal function on [lo, hi] by golden-section search.

    Returns
    -------
    Search
        ``value`` the best of ``lo``, ``hi``, the final bracket's midpoint and the best point
        probed (the first of them on a tie), ``fun`` the function there, ``bracket`` the final
        bracket (``0.618**steps`` of the initial one; status ``"steps"``: the search always
        runs its steps).
    """
    sign = -1.0 if maximize else 1.0
    evaluations = 0

    def g(x):
        nonlocal evaluations
        evaluations += 1
        return sign * fn(x)

    a, b = lo, hi
    c1, c2 = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    g1, g2 = g(c1), g(c2)
    seen_x, seen_g = (c1, g1) if g1 <= g2 else (c2, g2)  # the best probe so far
    for _ in range(steps):
        if g1 <= g2:  # the minimum lies in [a, c2] (ties, infinite ones included, towards lo)
            b, c2, g2 = c2, c1, g1
            c1 = b - _GOLDEN * (b - a)
            g1 = g(c1)
            if g1 < seen_g:
                seen_x, seen_g = c1, g1
        else:
            a, c1, g1 = c1, c2, g2
            c2 = a + _GOLDEN * (b - a)
            g2 = g(c2)
            if g2 < seen_g:
                seen_x, seen_g = c2, g2
    best_x, best_g = lo, g(lo)
    # ties: lo, then hi, then the midpoint; the best probe where the optimum sits at the edge
    # of an infinite region (the final bracket's midpoint can fall beyond it)
    for x, gx in ((hi, None), (0.5 * (a + b), None), (seen_x, seen_g)):
        gx = g(x) if gx is None else gx
        if gx < best_g:
            best_x, best_g = x, gx
    return Search(best_x, (a, b), "steps", evaluations, sign * best_g)


def illinois(excess, lo, hi, steps: int = 60, tol: float = 1e-15):
    """Refine brackets ``excess(lo) <= 0 < excess(hi)`` (arrays, numpy or torch; one search per
    entry) by the Illinois variant of regula falsi, with a bisection step wherever the secant
    is unusable (an infinite end).

    Returns ``(lo, hi)``, the feasible end first. Each bracket stops once its width is within
    ``1e-13 |hi|`` or its feasible end is within ``tol`` of the target,
    ``excess(lo) >= -tol``, lane by lane (a lane's result does not depend on the others
    refined with it); numpy stops when every lane has, a device array runs all ``steps``
    (no host read).
    """
    xp = array_namespace(lo)
    host = isinstance(lo, np.ndarray)
    f_lo = excess(lo)
    f_hi = excess(hi)
    side = xp.zeros_like(lo)  # +1: lo moved last, -1: hi moved last
    for _ in range(steps):
        width = hi - lo
        run = ~((width <= 1e-13 * xp.abs(hi)) | (f_lo >= -tol))
        if host and not np.any(run):  # (a device runs every step: no host read)
            break
        ok = xp.isfinite(f_hi) & xp.isfinite(f_lo) & (f_hi > f_lo)
        den = xp.where(ok, f_hi - f_lo, xp.ones_like(lo))
        x = xp.where(ok, lo - f_lo * (width / den), 0.5 * (lo + hi))
        # keep strictly inside the bracket (a secant at an end makes no progress)
        x = xp.minimum(xp.maximum(x, lo + 1e-3 * width), hi - 1e-3 * width)
        x = xp.where(width > 0, x, lo)
        fx = excess(x)
        up, down = run & (fx <= 0), run & ~(fx <= 0)  # converged lanes stay as they are
        lo, f_lo = xp.where(up, x, lo), xp.where(up, fx, f_lo)
        hi, f_hi = xp.where(down, x, hi), xp.where(down, fx, f_hi)
        # Illinois: halve the stale end's value when the same end moved twice in a row
        f_hi = xp.where(up & (side == 1), 0.5 * f_hi, f_hi)
        f_lo = xp.where(down & (side == -1), 0.5 * f_lo, f_lo)
        side = xp.where(up, xp.ones_like(lo), xp.where(down, -xp.ones_like(lo), side))
    return lo, hi
