r"""The mentored solver's per-row machinery: the sorted ratios and prefix sums shared by every
budget (:class:`_Prepared`: phase 1 widens the band ``[a q, b q]`` around p, phase 2 moves
mass m off supp(q)), and the two per-lane root searches on them.

Why a root search of its own beside :func:`cactus_theory._search.bisect_elementwise` (which
:func:`_bisect` is, the reference ``method="bisect"`` and the torch path): the divergence
along phase 1 is convex and smooth in the acceptance, so the two-sided secant of
:func:`_root` converges in a handful of evaluations (typically 6-9, one host check each)
where the bisection takes 64; the single-draft frontier's benchmark row
(``frontier at V = 151936``) is timed on it.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1 and 3.
"""

from __future__ import annotations

import math

import numpy as np

from .._search import bisect_elementwise
from ..divergences import Divergence

#: Bisection steps for each phase: the log-b bracket is at most ~710 wide (the cap on r), and
#: 710 / 2**64 < 4e-17, below float64's resolution of b near 1.
_BISECTION_STEPS = 64


#: numpy >= 2.1 implements the array API itself (cumulative_sum, concat, astype, ...).
_NUMPY_IS_ARRAY_API = hasattr(np, "cumulative_sum")


#: Cap on the fast root's iterations: the bracket halves at least every second iteration, and
#: 64 halvings reach the float64 resolution of x from any bracket the solver starts.
_FAST_MAX_ITER = 2 * _BISECTION_STEPS


def _count_le(xp, arr, val, steps):
    """Number of entries of the ascending rows ``arr`` [..., N] that are <= ``val`` [..., E]."""
    N = arr.shape[-1]
    if N * math.prod(val.shape) <= 4096:
        # small problems: one broadcast comparison beats a Python-level binary search
        return xp.sum(xp.astype(arr[..., None, :] <= val[..., None], xp.int64), axis=-1)
    lo = xp.zeros(val.shape, dtype=xp.int64, device=getattr(val, "device", None))
    hi = lo + N
    cap = lo + (N - 1)
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        v = xp.take_along_axis(arr, xp.minimum(mid, cap), axis=-1)
        right = active & (v <= val)
        lo = xp.where(right, mid + 1, lo)
        hi = xp.where(active & ~right, mid, hi)
    return lo


def _is_numpy(xp) -> bool:
    return xp is np or "numpy" in xp.__name__


def _quiet(xp):
    """numpy: no warnings from lanes that are masked out (inf - inf); torch never warns."""
    import contextlib

    return np.errstate(all="ignore") if _is_numpy(xp) else contextlib.nullcontext()


def _overflow_to_inf(xp):
    """numpy: let an overflow round to +inf silently (torch never warns)."""
    import contextlib

    import numpy as np

    return np.errstate(over="ignore") if "numpy" in xp.__name__ else contextlib.nullcontext()


def _take(xp, arr, idx):
    return xp.take_along_axis(arr, idx, axis=-1)


class _Prepared:
    """Per-row sorted quantities shared by every budget (O(V log V) once)."""

    def __init__(self, xp, q, p, d: Divergence, fast: bool = False):
        self.xp = xp
        self.d = d
        V = q.shape[-1]
        self.V = V
        numpy_fast = fast and _is_numpy(xp)
        # one numpy row: the searches are np.searchsorted (the generic binary search otherwise)
        self.searchsorted = numpy_fast and q.ndim == 1
        # supp(q), numerically: a token whose ratio p/q would overflow (q below ~1e-308 p in
        # float64) is treated as outside it, where its cost q f(pi/q) is pi f'(inf) up to
        # O(q) (see _OVERFLOW_NOTE)
        big = float(xp.finfo(q.dtype).max) * 0.25
        on = (q > 0) & (p < q * big)
        self.on = on
        # every token on supp(q) (softmax rows): the masks below are identities, skipped on
        # the fast numpy path (the same values, a dozen passes over V fewer)
        allon = numpy_fast and bool(xp.all(on))
        mask = (lambda m, x, other: x) if allon else xp.where  # noqa: E731
        one = xp.ones_like(q)
        zero = xp.zeros_like(q)
        inf = math.inf if allon else xp.full_like(q, math.inf)
        r = mask(on, p / mask(on, q, one), inf)
        self.r = r
        # the order of equal ratios does not matter (module docstring): numpy's default sort
        # is several times faster than the stable one
        order = np.argsort(r, axis=-1) if numpy_fast else xp.argsort(r, axis=-1, stable=True)
        rs = _take(xp, r, order)
        qs = _take(xp, q, order)
        ons = on if allon else _take(xp, on, order)
        ps = mask(ons, _take(xp, p, order), zero)
        pad = xp.zeros(q.shape[:-1] + (1,), dtype=q.dtype, device=getattr(q, "device", None))
        cs = lambda x: xp.concat([pad, xp.cumulative_sum(x, axis=-1)], axis=-1)  # noqa: E731
        rcs = lambda x: xp.flip(cs(xp.flip(x, axis=-1)), axis=-1)  # noqa: E731
        self.Pc = cs(ps)  # sums over sorted[:k], length V+1
        qs = mask(ons, qs, zero)
        self.Qc = cs(qs)
        self.Dc = cs(qs - ps)  # sum (q - p) over sorted[:k], without cancellation
        self.Qs = rcs(qs)  # sums over sorted[k:]
        with _overflow_to_inf(xp):
            # q f(r) = term(p, q) on supp(q); f(r) can exceed the float range (Neyman
            # chi-square at a subnormal p): +inf is the correctly rounded value there
            F = mask(ons, d.term(xp, ps, qs), zero)
        # sum_{a <= r <= b} q f(r) without cancellation against the extreme terms (f(0) can
        # be inf, f(r) huge for large r): the r < 1 part as suffix sums (only tokens with
        # r >= a enter), the r >= 1 part as prefix sums (only tokens with r <= b enter)
        low = rs < 1.0
        self.FsLow = rcs(xp.where(low, F, zero))
        self.FcHigh = cs(xp.where(low, zero, F))
        # breakpoints of g(a) = sum_{r<a} (a q - p): G_k = r_k Q_{<k} - P_{<k}; +inf off supp
        self.G = mask(ons, rs * self.Qc[..., :V] - self.Pc[..., :V], inf)
        self.rs = rs
        self.K = xp.sum(xp.astype(on, xp.int64), axis=-1, keepdims=True)  # on-support count
        self.P0 = xp.sum(mask(on, zero, p), axis=-1, keepdims=True)  # p off supp(q)
        self.Pon = _take(xp, self.Pc, self.K)  # p(q > 0)
        # b's range is [1, max(1, max r)] (b >= 1 always: pi >= q where p >= q)
        self.r_max = xp.max(mask(on, r, one), axis=-1, keepdims=True)
        self.steps = max(1, math.ceil(math.log2(V + 1)) + 1)
        if fast:
            # acceptance at each breakpoint b = r_k: H_k = P_{<=k} + r_k Q_{>k} (nondecreasing:
            # H_{k+1} - H_k = (r_{k+1} - r_k) Q_{>k}); +inf off supp(q)
            self.H = mask(ons, mask(ons, rs, zero) * self.Qs[..., 1:] + self.Pc[..., 1:], inf)
            self.last = xp.maximum(self.K - 1, xp.zeros_like(self.K))  # last on-support index

    def upper_from_acceptance(self, A):
        """b with A(b) = P(r <= b) + b Q(r > b) = A, for A in [A(1), P(q > 0)] (inverse of
        the piecewise-linear acceptance of phase 1)."""
        xp = self.xp
        k = xp.minimum(self.count_le(self.H, A), self.last)
        b = (A - self.take(self.Pc, k)) / self.take(self.Qs, k)
        # within its segment [r_{k-1}, r_k] despite rounding (where Q(r > b) is tiny, A cannot
        # resolve b and A - P(r <= b) may round to 0)
        below = self.take(self.rs, xp.maximum(k - 1, xp.zeros_like(k)))
        return xp.minimum(xp.maximum(b, below), self.take(self.rs, k))

    def count_le(self, arr, val):
        """Entries of the ascending rows ``arr`` that are <= ``val`` (per row)."""
        if self.searchsorted:
            return np.searchsorted(arr, val, side="right")
        return _count_le(self.xp, arr, val, self.steps)

    def take(self, arr, idx):
        """``arr[..., idx]`` row by row (plain indexing for one numpy row)."""
        return arr[idx] if self.searchsorted else _take(self.xp, arr, idx)

    def terms(self, h1, q1, h2, q2):
        """``(q1 f(h1/q1), q2 f(h2/q2))``: one elementwise call for one numpy row."""
        xp, d = self.xp, self.d
        if self.searchsorted:
            n = h1.shape[0]
            t = d.term(xp, np.concatenate([h1, h2]), np.concatenate([q1, q2]))
            return t[:n], t[n:]
        return d.term(xp, h1, q1), d.term(xp, h2, q2)

    def lower_from_residual(self, T):
        """a with sum_{r<a} (a q - p) = T (T >= 0), and the a-group size k."""
        xp = self.xp
        if self.searchsorted:
            # one numpy row, the same arithmetic with fewer calls: k >= 1 here (G_0 = 0 <= T)
            # and the first sorted token is on supp(q) (some q_x >= 1/V has a finite ratio),
            # so Q_k > 0
            T = np.maximum(T, 0.0)
            k = np.searchsorted(self.G, T, side="right")
            pos = T > 0
            return np.where(pos, (T + self.Pc[k]) / self.Qc[k], 0.0), np.where(pos, k, 0)
        T = xp.maximum(T, xp.zeros_like(T))
        k = self.count_le(self.G, T)  # G_0 = 0 <= T, so k >= 1
        Qk, Pk = self.take(self.Qc, k), self.take(self.Pc, k)
        pos = Qk > 0
        a = xp.where(pos, (T + Pk) / xp.where(pos, Qk, xp.ones_like(Qk)), xp.zeros_like(Qk))
        a = xp.where(T > 0, a, xp.zeros_like(a))
        k = xp.where(T > 0, k, xp.zeros_like(k))
        return a, k

    def phase1(self, b):
        """(acceptance, divergence, a) at upper factor b >= 1 (m = 0)."""
        kb = self.count_le(self.rs, b)
        Qhi, Plo = self.take(self.Qs, kb), self.take(self.Pc, kb)
        A = Plo + b * Qhi
        # residual 1 - A = sum_{r<=b} (q - p) - (b - 1) Q(r > b), summed without cancellation
        a, ka = self.lower_from_residual(self.take(self.Dc, kb) - (b - 1.0) * Qhi)
        Qa = self.take(self.Qc, ka)
        # middle = FsLow[ka] + FcHigh[kb] - FcHigh[ka]; the last is 0 because a <= 1 (tokens at
        # r = 1 exactly have f(1) = 0)
        mid = self.take(self.FsLow, ka) + self.take(self.FcHigh, kb)
        t_low, t_high = self.terms(a * Qa, Qa, b * Qhi, Qhi)
        D = t_low + mid + t_high
        return A, D, a

    def phase2(self, m, slope):
        """(acceptance, divergence, a) with off-support mass m in [0, P0] (b = r_max)."""
        xp, d = self.xp, self.d
        a, ka = self.lower_from_residual(self.P0 - m)
        Qa = self.take(self.Qc, ka)
        mid = self.take(self.FsLow, ka) + self.FcHigh[..., -1:]
        D = d.term(xp, a * Qa, Qa) + mid + slope * m
        return self.Pon + m, D, a


def _bisect(xp, fn, lo, hi, budget, steps):
    """Largest x in [lo, hi] with fn(x) <= budget, for fn nondecreasing; fn(lo) <= budget
    (:func:`cactus_theory._search.bisect_elementwise`'s feasible end)."""
    return bisect_elementwise(xp, lambda mid: fn(mid) <= budget, lo, hi, steps)[0]


def _root(xp, fn, lo, hi, f_lo, f_hi, budget, scale):
    r"""Largest x in [lo, hi] with fn(x) <= budget, for fn nondecreasing (fast when convex).

    Lanes with ``f_lo <= budget < f_hi`` are solved; the others return ``lo``. Each
    iteration evaluates two points in one call: the chord of the bracket (below the root
    when fn is convex) and the secant through the two latest points above the budget,
    extended down to it (above the root when fn is convex), so both ends of the bracket
    converge superlinearly; the interpolation runs on :math:`\sqrt{fn}` against
    :math:`\sqrt{budget}` (D grows like :math:`(A - A_{SpS})^2` from the SpS point, where
    its square root is nearly linear), while feasibility is decided on fn itself. The
    safeguards make it a bracketing method whatever fn's shape: both points lie at least
    ``half_tol`` inside the bracket (once one end has converged, the next point closes
    the bracket, as in Brent's method), and an iteration that did not halve the bracket
    is followed by one that evaluates its midpoint. A lane stops once
    ``hi - lo <= 2**-52 * max(scale, |lo|, |hi|)`` (the float resolution of x near the
    root); ``lo`` always satisfies ``fn(lo) <= budget`` as computed. Returns the final
    bracket ``(lo, hi)``.
    """
    with _quiet(xp):  # inactive lanes may hold inf - inf; they are masked and returned as lo
        return _two_sided_secant(xp, fn, lo, hi, f_lo, f_hi, budget, scale)


def _two_sided_secant(xp, fn, lo, hi, f_lo, f_hi, budget, scale):
    active = (f_lo <= budget) & (f_hi > budget) & (hi > lo)
    zero = xp.zeros_like(lo)
    # interpolated values g = sqrt(f) - sqrt(budget): g <= 0 where f <= budget and g >= 0
    # where f > budget (sqrt is monotone); feasibility itself is decided on f. Inactive lanes
    # get finite dummies
    root_b = xp.sqrt(xp.where(active, budget, zero))
    g_lo = xp.where(active, xp.sqrt(xp.where(active, f_lo, zero)) - root_b, zero - 1.0)
    g_hi = xp.where(active, xp.sqrt(xp.where(active, f_hi, zero)) - root_b, zero + 1.0)
    half_tol = 2.0**-53 * xp.maximum(xp.maximum(xp.abs(lo), xp.abs(hi)), scale + zero)
    half_tol = xp.where(active, xp.maximum(half_tol, zero + 2.0**-1074), zero + 1.0)
    tol = 2.0 * half_tol
    hi2, g_hi2 = hi, g_hi  # the previous point above the budget (none yet)
    slow = active & False
    E = lo.shape[-1]
    budget2, root_b2 = xp.concat([budget, budget], axis=-1), xp.concat([root_b, root_b], axis=-1)
    zero2 = xp.concat([zero, zero], axis=-1)
    for _ in range(_FAST_MAX_ITER):
        w = hi - lo
        active = active & (w > tol)
        if not bool(xp.any(active)):
            break
        mid = lo + 0.5 * w
        xc = lo + w * (g_lo / (g_lo - g_hi))  # chord (g_lo <= 0 <= g_hi)
        xc = xp.where(xc >= lo, xc, mid)  # (0/0 when both are 0)
        xs = hi - (hi2 - hi) * (g_hi / (g_hi2 - g_hi))  # secant of the two highs
        xs = xp.where((g_hi2 > g_hi) & (xs > xc) & (xs < hi), xs, 0.5 * (xc + hi))
        xs = xp.where(slow, mid, xs)  # last step did not halve
        # both at least half_tol inside the bracket; inactive lanes evaluate lo (discarded)
        a_lo, a_hi = xp.where(active, lo + half_tol, lo), xp.where(active, hi - half_tol, lo)
        pts = xp.concat(
            [xp.minimum(xp.maximum(xc, a_lo), a_hi), xp.minimum(xp.maximum(xs, a_lo), a_hi)], axis=-1
        )
        f = fn(pts)
        feas, gp = f <= budget2, xp.sqrt(xp.maximum(f, zero2)) - root_b2
        for sl in (slice(E, 2 * E), slice(0, E)):  # the secant point first
            x, gx, ok = pts[..., sl], gp[..., sl], feas[..., sl]
            up = active & ok & (x > lo)
            down = active & ~ok & (x < hi)
            lo, g_lo = xp.where(up, x, lo), xp.where(up, gx, g_lo)
            hi2, g_hi2 = xp.where(down, hi, hi2), xp.where(down, g_hi, g_hi2)
            hi, g_hi = xp.where(down, x, hi), xp.where(down, gx, g_hi)
        slow = active & (hi - lo > 0.5 * w)
    return lo, hi
