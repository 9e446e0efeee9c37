r"""The vectorised spike root on numpy float64 arrays: the certified iteration per entry.

Every entry's root depends on its own (q_n, delta) only: the iteration of its form
(:func:`cactus_theory.solvers._spike_kl._forms`) runs on the entries not yet converged, a
certificate :math:`g(\gamma) \le \delta < g(\gamma^+)` checks each, and the few that fail
walk or bisect on the floats' bit patterns. Large arrays are solved in chunks on threads.

Why a solver of its own rather than :func:`cactus_theory._search.bisect_elementwise` (which
:func:`_bisect` is, for ``method="bisect"`` and the divergences without a derivative): the
certified iteration is about 20x faster than the 64-step bisection on the benchmark's row
(``spike: bisection / Newton``, V = 151,936), and its bisection on bit patterns
(:func:`_bisect_floats`) closes any bracket in [0, 1] to adjacent floats in 64 halvings,
which midpoints of values do not when the ends differ in magnitude (the certificate needs
adjacent floats).
"""

from __future__ import annotations

import numpy as np

from .._search import bisect_elementwise
from .._threads import in_chunks
from ..divergences import _KL_RATIO_FLOOR, DIVERGENCES
from ._spike_forms import _derivative, _generic_form
from ._spike_kl import _KL_FORM, _forms, _kl_at_one

#: Arrays of at least twice this many entries are solved in chunks on threads
#: (:func:`cactus_theory._threads.in_chunks`, each chunk at least this long).
PARALLEL_MIN = 16384


#: ... and no chunk longer than this: the iteration's float64 temporaries of one chunk
#: (256 KiB each) stay in a core's L2 cache; whole halves of a 151,936-entry row do not
#: (20.4 against 16.5 ms, alternated calls in one process).
ROOT_BLOCK = 32768


def _exact_numpy(q_n, delta, d, method="newton", iterations=64, split: bool = True):
    """:func:`exact_spike` on float64 numpy arrays of one shape, already validated (the
    public function's numpy body; the CPU tensors' root and the capped root call it).

    Every entry's root depends on its own (q_n, delta) only, so a large array is solved in
    contiguous chunks of at most :data:`ROOT_BLOCK` entries on threads
    (:func:`~cactus_theory._threads.in_chunks`; numpy's ufuncs release the GIL): the same
    floats as one call."""
    if split and q_n.size >= 2 * PARALLEL_MIN:
        flat_q, flat_d = q_n.reshape(-1), np.broadcast_to(delta, q_n.shape).reshape(-1)
        out = np.empty(flat_q.shape)

        def solve(lo, hi):
            out[lo:hi] = _exact_numpy(flat_q[lo:hi], flat_d[lo:hi], d, method, iterations, split=False)

        in_chunks(solve, flat_q.size, PARALLEL_MIN, ROOT_BLOCK)
        return out.reshape(q_n.shape)
    newton = method == "newton" and _derivative(d) is not None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_one = _kl_at_one(q_n) if d is DIVERGENCES["kl"] else d.two_point(np.ones_like(q_n), q_n)
        # solve only the entries whose root is not known in advance (capped at 1, delta = 0,
        # or q_n = 0 under a divergence that charges +inf off supp(q)).
        active = (at_one > delta) & (delta > 0) & ((q_n > 0) | d.finite_off_support)
        if newton and bool(np.all(active)):
            return _root_numpy(d, q_n.ravel(), delta.ravel()).reshape(q_n.shape)
        gamma = np.where(at_one <= delta, 1.0, q_n)
        if np.any(active):
            s, dl = q_n[active], delta[active]
            gamma[active] = _root_numpy(d, s, dl) if newton else _bisect(np, d, s, dl, iterations)[0]
        return gamma


#: Floats walked from the last iterate to the sign change before the bisection fallback.
_WALK = 4


def _next_up(x):
    """``nextafter(x, +inf)`` for positive finite float64 x (the bit pattern plus one; 6x
    cheaper than ``np.nextafter``)."""
    return (x.view(np.int64) + 1).view(np.float64)


def _root_numpy(d, s, delta):
    r"""The certified root (:func:`exact_spike`) of float64 entries with a root strictly
    inside (s, 1), delta > 0 (numpy).

    The KL's iteration (:data:`_KL_FORM`) runs on 1e-280 <= s < 1, where its closed form
    divides by s without overflow; smaller s, and every other divergence, take Newton on
    ``d.two_point`` (:func:`_generic_form`).
    """
    form = _forms(d)
    if form is not _KL_FORM:
        return _certified_numpy(form, s, delta)
    ok = s >= _KL_RATIO_FLOOR
    if bool(np.all(ok)):
        return _certified_numpy(form, s, delta)
    out = np.empty_like(s)
    out[ok] = _certified_numpy(form, s[ok], delta[ok])
    out[~ok] = _certified_numpy(_generic_form(d, _derivative(d)), s[~ok], delta[~ok])
    return out


def _certified_numpy(form, s, delta):
    r"""One step of ``form`` on all entries from its start, more (up to ``form.more_steps``)
    on those whose last step exceeded ``form.tol`` of x - s, then the certificate:
    :math:`g(\gamma) \le \delta < g(\gamma^+)` with :math:`\gamma^+` the next float and g
    as ``form.value`` computes it. Entries a few floats off walk to the sign change (up to
    :data:`_WALK` floats); the rest (a noisy g where :math:`\delta \ll s`, roots near 1) are
    bisected (:func:`_bisect_floats`) from the bracket the tests found.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = form.start(np, s, delta)
        x, moved = form.step(np, s, delta, x, *form.evaluate(np, x, s)), x
        idx = np.flatnonzero(np.abs(x - moved) > form.tol * (x - s))
        for _ in range(form.more_steps):
            if idx.size == 0:
                break
            x_i, s_i, d_i = x[idx], s[idx], delta[idx]
            new = form.step(np, s_i, d_i, x_i, *form.evaluate(np, x_i, s_i))
            x[idx] = new
            idx = idx[np.abs(new - x_i) > form.tol * (new - s_i)]
        up = _next_up(x)
        feas_x = form.value(x, s) <= delta
        feas_up = form.value(up, s) <= delta
        bad = np.flatnonzero(~feas_x | feas_up)
        if bad.size == 0:
            return x
        out = x.copy()
        # a few floats off: walk down from an infeasible x, up from a feasible x+, one float
        # at a time
        down = ~feas_x[bad]
        cur = np.where(down, x[bad], up[bad])  # tested: infeasible (down) / feasible (up)
        s_b, d_b = s[bad], delta[bad]
        for _ in range(_WALK):
            # the neighbouring float: the bit pattern -1 (down) or +1 (up), for 0 < cur < 1
            cand = (cur.view(np.int64) + np.where(down, -1, 1)).view(np.float64)
            feas = form.value(cand, s_b) <= d_b
            done = feas == down  # down: cand feasible; up: cand infeasible
            out[bad[done]] = np.where(down, cand, cur)[done]
            keep = ~done
            bad, down, cur, s_b, d_b = bad[keep], down[keep], cand[keep], s_b[keep], d_b[keep]
            if bad.size == 0:
                return out
        # the rest: bisection between q_n (feasible) or the last feasible float and the
        # last infeasible one or 1 (the root is below 1)
        lo = np.where(down, s_b, cur)
        hi = np.where(down, cur, 1.0)
        out[bad] = _bisect_floats(form.value, s_b, d_b, lo, hi)
    return out


def _bisect_floats(value, s, delta, lo, hi):
    """Bisection of the floats between ``lo`` (feasible: ``value(lo, s) <= delta``) and
    ``hi`` (infeasible) until they are adjacent; returns lo (numpy float64, 0 <= lo < hi).

    It halves the count of floats between the two (the midpoint of their bit patterns, which
    order non-negative floats as their values), so at most 64 halvings close any bracket in
    [0, 1], however far apart in magnitude its ends are."""
    lo_b = np.ascontiguousarray(lo, dtype=np.float64).view(np.int64).copy()
    hi_b = np.ascontiguousarray(hi, dtype=np.float64).view(np.int64).copy()
    out = lo_b.copy()
    idx = np.arange(lo_b.size)
    for _ in range(64):
        open_ = hi_b - lo_b > 1
        if not bool(np.all(open_)):
            out[idx[~open_]] = lo_b[~open_]
            idx, s, delta, lo_b, hi_b = (a[open_] for a in (idx, s, delta, lo_b, hi_b))
        if idx.size == 0:
            break
        mid_b = lo_b + (hi_b - lo_b) // 2
        feas = value(mid_b.view(np.float64), s) <= delta
        lo_b, hi_b = np.where(feas, mid_b, lo_b), np.where(feas, hi_b, mid_b)
    out[idx] = lo_b
    return out.view(np.float64)


def _bisect(xp, d, q_n, delta, iterations):
    """The bracket [q_n, 1] after ``iterations`` halvings
    (:func:`cactus_theory._search.bisect_elementwise`); lo feasible."""
    return bisect_elementwise(
        xp, lambda mid: d.two_point(mid, q_n) <= delta, q_n, xp.ones_like(q_n), iterations
    )
