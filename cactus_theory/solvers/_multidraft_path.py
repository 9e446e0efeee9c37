r"""The path of optimal k-draft targets (the taut string), with mass off supp(q).

The maths is stated in :mod:`cactus_theory.solvers._multidraft` (sections 2 and 3); this module
computes it. Symbols: q verifier, p drafter, k i.i.d. drafts, o target, :math:`\varphi(t) =
(1-t)^k`, Z the tokens with :math:`q = 0 < p` (drafter mass :math:`P_Z`), s the target's mass
on Z (spread proportionally to p there), c the divergence's slope :math:`f'(\infty)` (the cost
of a unit of mass where q = 0).

For one off-support mass s the constraints :math:`o(A) \le M - \varphi(p(A))` on the prefixes
of the q/p order of supp(q), with and without Z, read :math:`O_j \le M - \psi_s(P_j)` with
:math:`\psi_s(t) = \max(\varphi(t),\ s + \varphi(t + P_Z))` (convex and decreasing), and the
best target on supp(q) is the taut string under these ceilings from (0, 0) to (1, 1 - s)
(:class:`_Path`). :func:`solve_row` then minimises :math:`M` over s (:math:`M_{min}(s)` is
convex: the feasible set of (s, M) is convex) by golden section, each s by bisection on M.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import isotonic_regression

from .._search import brent_root, golden_section
from .._validation import as_count
from ..divergences import Divergence
from ._mentored import slope_at_infinity

#: Golden-section steps (0.618^80 ~ 2e-17 of the interval).
GOLDEN_STEPS = 80
#: Brent's relative tolerance on M (4 ulp: the smallest scipy accepts).
_RTOL = 4.0 * np.finfo(float).eps
#: Relative steps back from an off-support mass s whose target exceeds the budget by rounding.
_BACK_OFF = (0.0, 1e-12, 1e-9, 1e-6, 1e-3)


def miss_probability(mass, k):
    r""":math:`\varphi(t) = (1 - t)^k`, the probability that k i.i.d. drafts all miss a set of
    drafter mass t (convex and decreasing on [0, 1]).

    Parameters
    ----------
    mass : array_like
        Drafter mass :math:`t = p(A)` in [0, 1] (clipped there: prefix sums can overshoot 1
        by rounding).
    k : int
        Number of drafts, >= 1.

    Returns
    -------
    ndarray, float64
    """
    k = as_count(k, "k")
    t = np.clip(np.asarray(mass, dtype=np.float64), 0.0, 1.0)
    return (1.0 - t) ** k


def _lower_hull_chain(x, y):
    """Indices of the lower convex hull of points sorted by x (Andrew's monotone chain)."""
    xs, ys = x.tolist(), y.tolist()
    hull: list[int] = []
    for i in range(len(xs)):
        xi, yi = xs[i], ys[i]
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (xs[b] - xs[a]) * (yi - ys[a]) - (ys[b] - ys[a]) * (xi - xs[a]) <= 0:
                hull.pop()
            else:
                break
        hull.append(i)
    return np.asarray(hull, dtype=np.intp)


def _lower_hull(x, y):
    """Indices of the lower convex hull of points sorted by x (x strictly increasing).

    The lower hull is the greatest convex minorant of the polyline, whose slopes are the
    isotonic (nondecreasing) regression of the segments' slopes weighted by their widths
    (Barlow et al. 1972): its vertices are where the pooled blocks of
    :func:`scipy.optimize.isotonic_regression` (pool adjacent violators, equal slopes pooled,
    so collinear points are dropped as by the monotone chain :func:`_lower_hull_chain`) begin,
    and the last point; then the chain's own test over those points (:func:`_pruned_chain`).
    """
    n = x.size
    if n < 3:
        return np.arange(n)
    cross = (x[1:-1] - x[:-2]) * (y[2:] - y[:-2]) - (y[1:-1] - y[:-2]) * (x[2:] - x[:-2])
    if np.all(cross > 0):  # every turn strictly convex (k = 1: every prefix)
        return np.arange(n)
    dx = np.diff(x)
    idx = np.asarray(isotonic_regression(np.diff(y) / dx, weights=dx).blocks, dtype=np.intp)
    # the pooled means round: a vertex left where three points are collinear to the last bit
    # is dropped by the monotone chain's own test on the points left
    return idx[_pruned_chain(x[idx], y[idx])]


#: Vectorised pruning passes before the monotone chain (:func:`_pruned_chain`).
_PRUNE_PASSES = 64


def _pruned_chain(x, y):
    """:func:`_lower_hull_chain`, after vectorised passes that drop every point on or above the
    chord of its two neighbours (never a hull vertex); a polyline whose turns are all strictly
    convex is returned as it is."""
    idx = np.arange(x.size)
    for _ in range(_PRUNE_PASSES):
        if idx.size < 3:
            return idx
        xa, ya, xb, yb = x[idx[:-2]], y[idx[:-2]], x[idx[1:-1]], y[idx[1:-1]]
        cross = (xb - xa) * (y[idx[2:]] - ya) - (yb - ya) * (x[idx[2:]] - xa)
        if np.all(cross > 0):
            return idx
        keep = np.ones(idx.size, dtype=bool)
        keep[1:-1] = cross > 0
        idx = idx[keep]
    return idx[_lower_hull_chain(x[idx], y[idx])]


class Row:
    """One (q, p, k) row: the q/p order, prefix sums, and the paths o(M) per off-support mass."""

    def __init__(self, q, p, k, d: Divergence):
        self.q, self.p, self.k, self.d = q, p, k, d
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.where(q > 0, np.inf, -2.0))
        key = np.where((q <= 0) & (p > 0), -1.0, key)  # q = 0 < p: last but the empty tokens
        self.order = np.argsort(-key)  # ties: any order (the path and the hull do not depend on it)
        qs, ps = q[self.order], p[self.order]
        self.n_pos = int(np.count_nonzero(qs > 0))
        self.Q = np.cumsum(qs)
        self.P = np.cumsum(ps)
        self.X = float(self.Q[self.n_pos - 1])
        off = (q <= 0) & (p > 0)
        self.zero_tokens = np.flatnonzero(off)
        self.PZ = float(np.sum(p[off]))
        self.c = slope_at_infinity(d)
        #: mass off supp(q) can pay: Z has drafter mass and a finite cost per unit
        self.has_off_support = self.PZ > 0 and math.isfinite(self.c)
        # ceiling points (Q_m, P_m) for prefixes strictly inside supp(q)
        m = np.arange(1, self.n_pos)
        self._x, self._P = self.Q[m - 1], self.P[m - 1]
        self._phi = miss_probability(self._P, k)
        self._phi_z = miss_probability(self._P + self.PZ, k) if self.has_off_support else None
        self.phi_S = float(miss_probability(self.P[self.n_pos - 1], k))  # the prefix ending supp(q)
        self.phi_Z = float(miss_probability(self.PZ, k))
        # every prefix (tail ones included), for the end of the path at s = 0
        zero = np.zeros(1)
        self._cum_q = np.concatenate([zero, self.Q])
        self._phi_all = miss_probability(np.concatenate([zero, self.P]), k)
        self._paths: dict[float, _Path] = {}

    def prefix_acceptance(self, o) -> float:
        """2 - max_m [O_m + phi(P_m)] over the prefixes of the row's q/p order: alpha*(o) for
        a target on the path at s = 0, for which that order is an o/p order (section 2 (ii))."""
        cum_o = np.concatenate([[0.0], np.cumsum(o[self.order])])
        return float(2.0 - np.max(cum_o + self._phi_all))

    def path(self, s: float) -> _Path:
        """The path o(M) for off-support mass s (cached)."""
        path = self._paths.get(s)
        if path is None:
            if len(self._paths) > 8:  # a search visits each s about once: keep few
                self._paths = {0.0: self._paths[0.0]} if 0.0 in self._paths else {}
            path = self._paths[s] = _Path(self, s)
        return path


class _Path:
    """The taut strings under the ceilings M - psi_s(P_m), from (0, 0) to (X, 1 - s)."""

    def __init__(self, row: Row, s: float):
        self.row, self.s, self.end = row, s, 1.0 - s
        X = row.X
        psi = row._phi if s == 0 else np.maximum(row._phi, s + row._phi_z)
        hx, hy = row._x, -psi
        keep = hx < X
        hx, hy = hx[keep], hy[keep]
        first = np.concatenate([[True], np.diff(hx) > 0])[: hx.size]  # Q ascends; equal Q by rounding:
        hx, hy = hx[first], hy[first]  # the first, whose y is the lowest
        h = _lower_hull(hx, hy) if hx.size else np.zeros(0, dtype=np.intp)
        self.hx, self.hy = hx[h], hy[h]
        # the string's inner segments are hull edges, whose slopes do not move with M: their
        # summed cost sum dQ f(slope) is a prefix sum, so D(o(M)) costs O(log #hull) per M
        dx = np.diff(self.hx)
        with np.errstate(all="ignore"):
            cost = dx * np.asarray(row.d.f(np.diff(self.hy) / dx), dtype=np.float64)
        self._edge_cost = np.concatenate([[0.0], np.cumsum(cost)])
        self._edge_cost_finite = bool(np.all(np.isfinite(cost)))
        psi_end = max(row.phi_S, s)  # psi_s at P(supp q): phi(P_S) or s + phi(1) = s
        if s == 0:
            self.M_lo = max(1.0, 1.0 + row.phi_S)
            self.M_hi = max(1.0, float(np.max(row._cum_q + row._phi_all)))
        else:
            # the prefixes: empty with Z (s + phi(P_Z)), all of supp(q) (1 - s + psi_end)
            self.M_lo = max(1.0, self.end + psi_end, s + row.phi_Z)
            inner = float(np.max(self.end * row._x + psi)) if psi.size else -math.inf
            self.M_hi = max(self.M_lo, 1.0, s + row.phi_Z, inner, self.end + psi_end)

    def _touching(self, M):
        """(j0, j1): the first and last hull points the string touches at M, or None where it
        is the straight line to (X, end). Along a convex chain the slope from (0, 0) falls then
        rises, and the slope to (X, end) rises then falls (each a weighted mean of the last and
        the next edge's slope), so both are binary searches: the first argmin and argmax."""
        hx, hy, X, end = self.hx, self.hy, self.row.X, self.end
        n = hx.size
        if n == 0:
            return None

        # an index search on the hull's points (not a root of a real function: _search's
        # bisections take floats)
        def first(better):  # the first j where the next point is no better
            lo, hi = 0, n - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if better(mid + 1, mid):
                    lo = mid + 1
                else:
                    hi = mid
            return lo

        def s0(j):
            return (hy[j] + M) / hx[j]

        def s1(j):
            return (end - (hy[j] + M)) / (X - hx[j])

        j0 = first(lambda a, b: s0(a) < s0(b))
        if not s0(j0) * X < end:  # the straight line to (X, end) stays under the ceiling
            return None
        j1 = first(lambda a, b: s1(a) > s1(b))
        return (j0, j1) if j1 >= j0 else None

    def knots(self, M):
        """Knots (x, y) of the taut string under the ceilings M - psi(P_m), (0, 0) to (X, end)."""
        X, end = self.row.X, self.end
        t = self._touching(M)
        if t is None:
            mid_x, mid_y = self.hx[:0], self.hy[:0]
        else:
            mid_x, mid_y = self.hx[t[0] : t[1] + 1], self.hy[t[0] : t[1] + 1] + M
        return np.concatenate([[0.0], mid_x, [X]]), np.concatenate([[0.0], mid_y, [end]])

    def divergence(self, M):
        """D(o(M) || q): sum over the string's segments of dQ f(slope) (the hull edges' part a
        prefix sum), plus c s for the mass off supp(q)."""
        X, end, f = self.row.X, self.end, self.row.d.f
        t = self._touching(M)
        with np.errstate(all="ignore"):
            if t is None:
                on = float(X * f(np.float64(end / X))) if X > 0 else 0.0
            elif self._edge_cost_finite:
                j0, j1 = t
                a, b = self.hx[j0], self.hx[j1]
                ends = np.asarray(f(np.array([(self.hy[j0] + M) / a, (end - self.hy[j1] - M) / (X - b)])))
                on = float(a * ends[0] + (self._edge_cost[j1] - self._edge_cost[j0]) + (X - b) * ends[1])
            else:  # an infinite edge cost: the sum itself (no inf - inf)
                kx, ky = self.knots(M)
                dx, dy = np.diff(kx), np.diff(ky)
                on = float(np.sum(dx * np.asarray(f(dy / dx), dtype=np.float64)))
        return on + (self.row.c * self.s if self.s > 0 else 0.0)

    def target(self, M):
        """o(M): the taut string on supp(q), and s spread proportionally to p on Z."""
        row = self.row
        kx, ky = self.knots(M)
        cum_o = np.interp(row.Q[: row.n_pos], kx, ky)
        o_sorted = np.zeros_like(row.q)
        o_sorted[: row.n_pos] = np.diff(np.concatenate([[0.0], cum_o]))
        o = np.empty_like(o_sorted)
        o[row.order] = np.clip(o_sorted, 0.0, None)
        if self.s > 0:
            z = row.zero_tokens
            o[z] = self.s * row.p[z] / row.PZ
        return o

    def least_M(self, e):
        """The smallest M of this path with D(o(M)||q) <= e (``inf`` where none is)."""
        if self.divergence(self.M_lo) <= e:
            return self.M_lo
        if self.M_hi <= self.M_lo or not self.divergence(self.M_hi) <= e:
            return math.inf
        # D(o(M)) is continuous and nonincreasing in M: Brent's root to float resolution,
        # then the end of the bracket on the budget's side
        M = brent_root(lambda M: self.divergence(M) - e, self.M_lo, self.M_hi, xtol=1e-300, rtol=_RTOL).value
        if self.divergence(M) > e:
            M = min(self.M_hi, M + 2.0 * _RTOL * M)
        return M if self.divergence(M) <= e else self.M_hi


def _exact(d, path, M):
    o = path.target(M)
    return float(d.unchecked(o, path.row.q)), o


def _on_budget(d, path, M, e):
    """The target at M and that M, moved towards the path's end M_hi where the term-by-term
    divergence exceeds e by rounding (from twice the chord's estimate, growing 4x); the target
    is None where even M_hi does not hold."""
    D, o = _exact(d, path, M)
    step = max(4.0 * np.spacing(M), 2.0 * (D - e) / max(D, 1e-300) * (path.M_hi - M))
    while D > e and M < path.M_hi:
        M = min(path.M_hi, M + step)
        step *= 4.0
        D, o = _exact(d, path, M)
    return (o if D <= e else None), M


def _solve_on_support(row, e):
    """The best target with no mass off supp(q) (the path at s = 0), and its M."""
    q, d = row.q, row.d
    path = row.path(0.0)
    if e == 0:
        return q.copy(), path.M_hi
    M = path.least_M(e)
    if not math.isfinite(M) or path.M_hi <= path.M_lo:
        return (q.copy(), path.M_hi) if not math.isfinite(M) else (_exact(d, path, M)[1], M)
    o, M = _on_budget(d, path, M, e)
    return (q.copy(), path.M_hi) if o is None else (o, M)


def solve_row(q, p, k, eps, d):
    r"""The optimal target of one row at each budget (a list of V-vectors), its acceptance
    :math:`\alpha^*` where the target lies on supp(q) (:meth:`Row.prefix_acceptance`; None for
    a target with mass off supp(q), whose o/p order is not the row's), and
    :math:`\alpha^*(q) = 2 - M_0` (the min-cut over the prefixes of the row's q/p order).

    On supp(q) (no drafter mass where q = 0, or an infinite cost there): the bisection on M of
    the path at s = 0. Otherwise the golden section over s of the least M of each path
    (:meth:`_Path.least_M`), keeping the on-support answer unless the other accepts more
    (:math:`\alpha^* = 2 - M` on every path). The target is then built once and its divergence
    recomputed term by term; where rounding puts it over the budget, M steps towards the
    path's end until it holds: every returned target satisfies D <= eps as computed.
    """
    row = Row(q, p, k, d)
    out, acc = [], []
    for e in eps:
        base, M_base = _solve_on_support(row, e)
        on_support = True
        if e > 0 and row.has_off_support:
            s_hi = min(1.0, e / row.c) if row.c > 0 else 1.0
            found = golden_section(lambda s, e=e: row.path(s).least_M(e), 0.0, s_hi, GOLDEN_STEPS)
            s, M = found.value, found.fun
            # an optimum at the edge of the feasible s (the path's end just meets the budget)
            # can exceed it term by term by rounding: s then steps back towards 0
            for back in _BACK_OFF:
                s_try = s * (1.0 - back)
                M_try = M if back == 0 else row.path(s_try).least_M(e)
                if not (s_try > 0 and M_try < M_base):
                    break
                o, M_used = _on_budget(d, row.path(s_try), M_try, e)
                if o is not None:
                    if M_used < M_base:
                        base, on_support = o, False
                    break
        out.append(base)
        acc.append(row.prefix_acceptance(base) if on_support else None)
    return out, acc, 2.0 - row.path(0.0).M_hi


def _best_on_path(path, lam):
    """max over M of (2 - M) - lam D(o(M)||q) on one path (concave in M): (M, value)."""
    if path.M_hi <= path.M_lo:
        M = path.M_lo
        return M, (2.0 - M) - lam * path.divergence(M)

    def value(M):
        return (2.0 - M) - lam * path.divergence(M) if lam > 0 else 2.0 - M

    found = golden_section(value, path.M_lo, path.M_hi, GOLDEN_STEPS, maximize=True)
    return found.value, found.fun


def multiplier_row(q, p, k, lam, d):
    """argmax over targets of alpha*(o) - lam D(o||q) for one row (off supp(q) included)."""
    row = Row(q, p, k, d)
    path0 = row.path(0.0)
    if lam == math.inf:
        return q.copy()
    if path0.M_hi <= path0.M_lo:
        best_path, best_M, best = path0, path0.M_hi, -math.inf
    else:
        best_M, best = _best_on_path(path0, lam)
        best_path = path0
    if row.has_off_support:
        s_hi = min(1.0, 1.0 / (lam * row.c)) if lam * row.c > 0 else 1.0  # value >= 0 at s = 0
        found = golden_section(
            lambda s: _best_on_path(row.path(s), lam)[1], 0.0, s_hi, GOLDEN_STEPS, maximize=True
        )
        s, v = found.value, found.fun
        if s > 0 and v > best:
            best_path = row.path(s)
            best_M, best = _best_on_path(best_path, lam)
    if best_path.s == 0 and best_M >= best_path.M_hi:
        return q.copy()
    return best_path.target(best_M)
