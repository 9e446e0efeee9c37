r"""One knob of any rule set so that a corpus statistic (an emitted divergence) meets a target.

:func:`calibrate_knob` is the first-crossing inverse of the per-position calibration
(:mod:`cactus_theory.analysis.calibration`) for any rule's knob along its published range: a
scan of the mapped knob, then the bracket refined by :func:`cactus_theory._search.illinois`
until the feasible end is within ``rtol * target`` of the target (an integer knob: a
bisection on the integers, the bracket's ends being integers). The result says how the
search ended (:class:`~cactus_theory.results.KnobCalibration`'s ``status``).

Symbols: q verifier, p drafter, eps the target on the emitted divergence.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3.
"""

from __future__ import annotations

import math

import numpy as np

from .._search import illinois
from .._validation import as_budget
from ..divergences import get_divergence
from ..results import KnobCalibration
from ..rules import get_rule
from .calibration import _REFINE_STEPS
from .one_step import acceptance_rate, emitted_distribution, make_plan

#: Grid points of :func:`calibrate_knob`'s first-crossing scan (on the mapped knob u in [0, 1]).
KNOB_GRID_POINTS = 13
#: Relative tolerance of :func:`calibrate_knob`: a statistic within ``KNOB_RTOL * target``
#: below the target counts as meeting it (the refinement stops there).
KNOB_RTOL = 1e-3


def _knob_map(start, end, scale):
    """u in [0, 1] -> knob on the path from ``start`` (u = 0) to ``end`` (u = 1): linear between
    finite ends, ``tan`` towards an infinite end (``scale`` sets where u = 1/2 lands)."""
    fs, fe = math.isfinite(start), math.isfinite(end)
    if fs and fe:
        return lambda u: start + u * (end - start)
    if fs:
        sign = 1.0 if end > start else -1.0
        return lambda u: start + sign * scale * math.tan(0.5 * math.pi * u)
    if fe:
        sign = 1.0 if start > end else -1.0
        return lambda u: end + sign * scale * math.tan(0.5 * math.pi * (1.0 - u))
    sign = 1.0 if end > start else -1.0
    return lambda u: sign * scale * math.tan(math.pi * (u - 0.5))


def calibrate_knob(
    statistic,
    start,
    end,
    target,
    *,
    scale=1.0,
    integer=False,
    grid_points=KNOB_GRID_POINTS,
    rtol=KNOB_RTOL,
    steps=_REFINE_STEPS,
) -> KnobCalibration:
    r"""Monotone bisection of one knob: the knob on the path ``start -> end`` where a corpus
    statistic (an emitted divergence) first reaches ``target``.

    .. math:: x^* = \sup\{x \in [\mathrm{start}, \mathrm{end}] : s(x') \le \epsilon
              \ \ \forall x' \text{ between start and } x\}

    The path is mapped to u in [0, 1] (linear between finite ends, :math:`\tan` towards an
    infinite one); a grid of ``grid_points`` values of u is scanned for the first point above
    the target, and that bracket is refined by the Illinois regula falsi of
    :func:`cactus_theory._search.illinois` (bisection where the statistic is infinite) until the feasible end
    is within ``rtol * target`` of the target. s need not be monotone: a crossing narrower
    than the grid spacing can be missed; the achieved value is always the statistic itself.

    Parameters
    ----------
    statistic : callable
        ``statistic(x) -> float`` (NaN is read as ``+inf``).
    start, end : float
        Ends of the knob's path: ``start`` the end with the least statistic (SpS's value where
        the rule has one), ``end`` the other end of the published range (``+-inf`` allowed).
    target : float
        The target eps >= 0.
    scale : float
        Knob distance from ``start`` (or to ``end`` when ``start`` is infinite) of the path's
        midpoint u = 1/2 when an end is infinite.
    integer : bool
        An integer knob: evaluated at ``round(x)``.
    grid_points, rtol, steps
        Scan points, relative tolerance and refinement steps.

    Returns
    -------
    KnobCalibration

    Symbols: q verifier, p drafter, eps the target on the emitted divergence.
    Source: the first-crossing inverse of :func:`cactus_theory.api.calibrate_delta` (Hao & Mou, ICLR 2026,
    arXiv 2604.04987, Theorem 3, applied to any rule's knob).
    """
    target = as_budget(target, "target")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be a positive finite number, got {scale!r}")
    x_of = _knob_map(float(start), float(end), float(scale))
    cache, count = {}, [0]

    def knob(u):
        x = x_of(float(min(1.0, max(0.0, u))))
        if integer and math.isfinite(x):
            x = int(round(x))
        return x

    def sx(x):
        if x not in cache:
            count[0] += 1
            v = float(statistic(x))
            cache[x] = math.inf if math.isnan(v) else v
        return cache[x]

    def s(u):
        return sx(knob(u))

    tol = rtol * target

    def result(u_lo, u_hi, status):
        x_lo = knob(u_lo)
        nxt = (knob(u_hi), s(u_hi)) if status == "step" else (None, None)
        return KnobCalibration(x_lo, s(u_lo), status, nxt[0], nxt[1], count[0])

    if s(0.0) > target:
        return result(0.0, 0.0, "above")
    grid = np.linspace(0.0, 1.0, grid_points)
    vals = np.array([s(u) for u in grid])
    over = np.flatnonzero(vals > target)
    if over.size == 0:
        return result(1.0, 1.0, "range-end")
    k = int(over[0])
    lo, hi = grid[k - 1], grid[k]
    if integer:  # bisection on the integers between the bracket's ends ((a + b) // 2: _search's halve floats)
        a, b = knob(lo), knob(hi)
        while b - a > 1:
            mid = (a + b) // 2
            if sx(mid) <= target:
                a = mid
            else:
                b = mid
        status = "calibrated" if target - sx(a) <= tol else "step"
        nxt = (b, sx(b)) if status == "step" else (None, None)
        return KnobCalibration(a, sx(a), status, nxt[0], nxt[1], count[0])
    if target - vals[k - 1] > tol:

        def excess(u):
            return np.array([s(float(u[0])) - target])

        lo_a, hi_a = illinois(excess, np.array([lo]), np.array([hi]), steps=steps, tol=tol)
        lo, hi = float(lo_a[0]), float(hi_a[0])
    status = "calibrated" if target - s(lo) <= tol else "step"
    return result(lo, hi, status)


def corpus_delta(q, p, eps, rule, divergence):
    r"""One delta for a corpus whose mean emitted divergence over the positions,
    :math:`\frac1N\sum_t D(h_{alg,t}(\delta)\|q_t)`, meets eps (:func:`calibrate_knob` on the
    mean, delta from 0 to ``inf``), for ``rule`` ``cactus-taylor`` or ``cactus-exact``.

    Returns
    -------
    (delta, mean divergence, mean acceptance, status) : (float, float, float, str)
    """
    d = get_divergence(divergence)

    def plan(delta):
        return make_plan(get_rule(rule, delta=delta, divergence=d.name), q, p)

    def mean_divergence(delta):
        return float(np.mean(d.unchecked(emitted_distribution(plan(delta)), q)))

    cal = calibrate_knob(mean_divergence, 0.0, math.inf, eps)
    acc = float(np.mean(acceptance_rate(plan(cal.value))))
    return float(cal.value), float(cal.achieved), acc, cal.status
