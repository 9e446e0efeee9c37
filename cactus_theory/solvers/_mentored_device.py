r"""Mentored decoding's target on torch rows: the band found by one sort and a breakpoint search.

The same problem and clip form as :mod:`cactus_theory.solvers._mentored`
(:math:`\pi = \mathrm{clip}(p, a q, b q)` on supp(q), then a mass m off supp(q) for the
divergences with a finite slope at infinity), solved for the samplers and the vLLM plugin in
the rows' dtype and on their device, a fixed number of operations (no host read, no loop
over rows):

1. one sort of :math:`r_x = p_x/q_x` per row and its prefix sums (the quantities of the
   analysis' :class:`~cactus_theory.solvers._mentored_phases._Prepared`, built with torch's
   own calls; its searches are ``torch.searchsorted`` here instead of a Python-level binary
   search);
2. a binary search over the breakpoints :math:`b = r_k \ge 1` of the band (ceil(log2(V+1))
   steps, each one evaluation per row): D is nondecreasing in b, so the breakpoints within
   the budget are a prefix, and the last of them and the next bracket the root;
3. inside that segment b is affine in the acceptance, where D is convex (module docstring
   of :mod:`cactus_theory.solvers._mentored`), so a fixed :data:`SECANT_STEPS` of a
   two-sided secant on D (the chord point lies below the root, the secant of the two
   latest points above it beyond it, a midpoint after any iteration that did not halve the
   bracket) closes the bracket; the feasible end is kept (:math:`D \le \epsilon` as
   computed). Where D is infinite at the segment's top (f(0) = inf and a token with p = 0
   on supp(q): a reaches 0 there) the secant runs in :math:`z = -\log(hi - x)`;
4. phase 2 (m off supp(q), D convex in m): the same search over a's breakpoints
   :math:`m = p(q=0) - G_j` and the same secant.

Tolerance: the root stays bracketed and its returned end is feasible; the target differs
from the float64 analysis' by the rounding of the prefix sums in the rows' dtype and the
secant's last bracket: measured on the shipped rows (every divergence, budgets 1e-4 to 40)
<= 4.7e-6 in float32 (the float32 64-step bisection it replaces: <= 3.3e-6) and <= 1.3e-6 in
float64 (Neyman chi-square at budget 1e-4; <= 1e-14 for the others);
``tests/solvers/test_mentored_device.py`` states the bounds it tests and why.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`\pi` the target,
:math:`\epsilon` the budget. Source: Tran-Thien (2023), HF blog 'An optimal lossy variant
of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
"""

from __future__ import annotations

import math

from ..divergences import get_divergence
from ._mentored import _clipped_target, _slope, _solve_tv, mentored_target
from ._mentored_phases import _Prepared, _quiet

#: Iterations of the two-sided secant inside the final bracket (each evaluates two points).
#: The bracket at least halves every second iteration, and the secant converges
#: superlinearly on the convex divergence there: 20 iterations reach the float64 resolution
#: on the shipped rows for every divergence (12 left Neyman chi-square at small budgets
#: 3e-3 away); they cost [rows, 2] lanes, not passes over V.
SECANT_STEPS = 20


class _SortedRows(_Prepared):
    """:class:`_Prepared`'s sorted ratios and prefix sums built with torch's own calls (one
    ``sort`` returning the order, ``gather``, ``cumsum``: a few passes over V fewer than the
    array-API build, the same quantities), searched by ``torch.searchsorted`` (one call, no
    loop) and read by ``gather`` (no check for negative indices)."""

    def __init__(self, xp, q, p, d):
        import torch

        self.xp, self.d, self.V = xp, d, q.shape[-1]
        self.searchsorted = False
        big = float(torch.finfo(q.dtype).max) * 0.25  # as _Prepared: p/q must not overflow
        self.on = on = (q > 0) & (p < q * big)
        self.r = torch.where(on, p / torch.where(on, q, 1.0), math.inf)
        rs, order = torch.sort(self.r, dim=-1)
        ons = rs < math.inf  # on supp(q), in sorted order
        qs = torch.where(ons, q.gather(-1, order), 0.0)
        ps = torch.where(ons, p.gather(-1, order), 0.0)
        pad = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype, device=q.device)
        cs = lambda x: torch.cat([pad, torch.cumsum(x, -1)], -1)  # noqa: E731
        rcs = lambda x: torch.flip(cs(torch.flip(x, (-1,))), (-1,))  # noqa: E731
        self.Pc, self.Qc, self.Dc, self.Qs = cs(ps), cs(qs), cs(qs - ps), rcs(qs)
        F = torch.where(ons, d.term(xp, ps, qs), 0.0)
        low = rs < 1.0
        self.FsLow = rcs(torch.where(low, F, 0.0))
        self.FcHigh = cs(torch.where(low, 0.0, F))
        V = self.V
        self.G = torch.where(ons, rs * self.Qc[..., :V] - self.Pc[..., :V], math.inf)
        self.rs = rs
        self.K = torch.sum(ons, dim=-1, keepdim=True)
        self.P0 = torch.sum(torch.where(on, 0.0, p), dim=-1, keepdim=True)
        self.Pon = self.Pc.gather(-1, self.K)
        self.r_max = torch.amax(torch.where(on, self.r, 1.0), dim=-1, keepdim=True)

    def count_le(self, arr, val):
        import torch

        return torch.searchsorted(arr.contiguous(), val.contiguous(), right=True)

    def take(self, arr, idx):
        return arr.gather(-1, idx)


def mentored_target_device(target_probs, draft_probs, budget, divergence="kl"):
    r"""The Mentored target :math:`\pi` of torch rows, in their dtype and on their device.

    .. math:: \pi = \arg\max_{\pi\in\Delta_V} \sum_x \min(p_x, \pi_x)
              \ \text{s.t.}\ D(\pi\|q) \le \epsilon

    Parameters
    ----------
    target_probs, draft_probs : Tensor, shape (..., V)
        Verifier q and drafter p, normalized rows (float32 or float64; not validated).
    budget : float or Tensor broadcastable to the batch shape
        :math:`\epsilon \ge 0` (0: :math:`\pi = q`; inf: :math:`\pi = p`).
    divergence : str
        As in :func:`~cactus_theory.solvers._mentored.solve_mentored`.

    Returns
    -------
    Tensor, shape (..., V)
        :math:`\pi`, within the tolerance of the module docstring of the float64 solver's.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """
    import torch
    from array_api_compat import array_namespace

    d = get_divergence(divergence)
    q, p = target_probs, draft_probs
    xp = array_namespace(q, p)
    batch = q.shape[:-1]
    if isinstance(budget, torch.Tensor):
        eps = torch.broadcast_to(budget.to(dtype=q.dtype, device=q.device), batch)[..., None]
    else:  # a number filled in on the device (a host tensor would be a host-to-device copy)
        eps = torch.full(batch + (1,), float(budget), dtype=q.dtype, device=q.device)
    if d.name == "tv":
        return _solve_tv(xp, q, p, eps, True).target[..., 0, :]
    with _quiet(xp):
        prep = _SortedRows(xp, q, p, d)
        b, done1, D_end = _phase1_band(prep, eps)
        _, _, a = prep.phase1(b)
        m = torch.zeros_like(eps)
        slope = _slope(d)
        if math.isfinite(slope):
            has2 = done1 & (prep.P0 > 0)
            m2, a2 = _phase2_mass(prep, eps, slope, has2, D_end)
            m, a = torch.where(has2, m2, m), torch.where(has2, a2, a)
        return _clipped_target(xp, prep, q, p, eps, a, b, m)[..., 0, :]


def _phase1_band(prep, eps):
    """Phase 1's b per row (r_max where the whole phase fits the budget), whether it fits, and
    the divergence at its end."""
    import torch

    one = torch.ones_like(eps)
    r_max = prep.r_max * one
    D_end = prep.phase1(r_max)[1]
    done1 = D_end <= eps
    # the breakpoints b = r_k of the band (1 below 1, where D(1) = 0; +inf off supp(q), last)
    bp = torch.clamp(prep.rs, min=1.0)
    point = lambda i: bp.gather(-1, i)  # noqa: E731
    fn = lambda x: prep.phase1(x)[1]  # noqa: E731
    lo, f_lo, hi, f_hi = _last_within(point, fn, bp.shape[-1], eps, one, 0.0 * one, r_max, D_end)
    b = _solve_segment(fn, lo, hi, f_lo, f_hi, eps)
    b = torch.where(done1, r_max, b)
    b = torch.where(eps > 0, b, one)  # budget 0: pi = q exactly
    return b, done1, D_end


def _last_within(point, fn, N, eps, lo, f_lo, hi, f_hi):
    """The bracket ``[lo, hi]`` between the last of the N ascending breakpoints ``point(i)``
    (i an index tensor [..., 1]) whose fn is within ``eps`` and the next one (``lo``, ``hi``
    where there is none), by a binary search of ceil(log2(N + 1)) steps: fn is
    nondecreasing, so the breakpoints within the budget are a prefix."""
    import torch

    ilo = torch.full(lo.shape, -1, dtype=torch.int64, device=lo.device)  # before the first
    ihi = torch.full(lo.shape, N, dtype=torch.int64, device=lo.device)  # after the last
    for _ in range(max(1, math.ceil(math.log2(N + 1)))):
        mid = torch.div(ilo + ihi, 2, rounding_mode="floor")
        live = ihi - ilo > 1
        x = point(torch.clamp(mid, 0, N - 1))
        ok = torch.isfinite(x) & (fn(torch.where(torch.isfinite(x), x, lo)) <= eps)
        ilo = torch.where(live & ok, mid, ilo)
        ihi = torch.where(live & ~ok, mid, ihi)
    x_lo, x_hi = point(torch.clamp(ilo, 0, N - 1)), point(torch.clamp(ihi, 0, N - 1))
    use_lo, use_hi = (ilo >= 0) & (x_lo > lo), (ihi < N) & torch.isfinite(x_hi) & (x_hi < hi)
    lo = torch.where(use_lo, x_lo, lo)
    hi = torch.where(use_hi, x_hi, hi)
    f = fn(torch.cat([lo, hi], -1))
    E = lo.shape[-1]
    return lo, torch.where(use_lo, f[..., :E], f_lo), hi, torch.where(use_hi, f[..., E:], f_hi)


def _phase2_mass(prep, eps, slope, has2, D_end):
    """Phase 2's mass m off supp(q) (all of p(q = 0) where it fits) and its lower factor a."""
    import torch

    P0 = prep.P0 * torch.ones_like(eps)
    zero = torch.zeros_like(eps)
    D2_end = prep.phase2(P0, slope)[1]
    live = torch.where(has2, eps, -torch.ones_like(eps))  # other rows: inactive, m = 0
    # the breakpoints of a (a = r_j where the residual P0 - m is G_j, ascending in j): in
    # ascending m, m = P0 - G_{V-1-i} (off supp(q) G is +inf: m = -inf, below every bracket)
    G, V = prep.G, prep.G.shape[-1]
    point = lambda i: P0 - G.gather(-1, V - 1 - i)  # noqa: E731
    fn = lambda x: prep.phase2(x, slope)[1]  # noqa: E731
    pt = lambda i: torch.clamp(point(i), min=0.0)  # noqa: E731
    lo, f_lo, hi, f_hi = _last_within(pt, fn, V, live, zero, D_end, P0, D2_end)
    m = _solve_segment(fn, lo, hi, f_lo, f_hi, live)
    m = torch.where(D2_end <= eps, P0, m)
    return m, prep.phase2(m, slope)[2]


def _solve_segment(fn, lo, hi, f_lo, f_hi, budget):
    r"""The root of a bracket ``[lo, hi]`` (:func:`_secant_fixed`), in
    :math:`z = -\log(hi - x)` where D is infinite at ``hi``.

    D is infinite at the top where a reaches 0 there and f(0) = inf (reverse KL, Neyman
    chi-square; a token with p = 0 on supp(q)): a is affine in x and vanishes at ``hi``, so
    the root can lie within :math:`e^{-\epsilon}`-ish of ``hi``, and in z D grows like z
    (reverse KL) or :math:`e^z` (Neyman chi-square). z stops at two ulps of ``hi`` (closer,
    x rounds to ``hi``).
    """
    import torch

    steep = torch.isinf(f_hi)
    x = _secant_fixed(fn, lo, hi, f_lo, f_hi, torch.where(steep, -1.0, budget))
    fz = lambda z: fn(hi - torch.exp(-z))  # noqa: E731
    z_lo = -torch.log(hi - lo)
    tiny, res = torch.finfo(lo.dtype).tiny, torch.finfo(lo.dtype).eps
    z_hi = torch.maximum(-torch.log(torch.clamp(hi * (2.0 * res), min=tiny)), z_lo)
    f_zhi = fz(z_hi)
    z = _secant_fixed(fz, z_lo, z_hi, f_lo, f_zhi, torch.where(steep, budget, -1.0))
    z = torch.where(f_zhi <= budget, z_hi, z)  # closer to hi than the floats resolve
    return torch.where(steep, hi - torch.exp(-z), x)


def _secant_fixed(fn, lo, hi, f_lo, f_hi, budget, steps=SECANT_STEPS):
    r"""Largest x in [lo, hi] with fn(x) <= budget (fn nondecreasing, convex on the bracket),
    in exactly ``steps`` iterations: the two-sided secant of
    :func:`~cactus_theory.solvers._mentored_phases._root` without its host checks.

    Lanes with ``f_lo <= budget < f_hi`` are solved, the others return ``lo``. Each iteration
    evaluates the chord point and the secant point of the two latest points above the budget
    (on :math:`\sqrt{fn}`), both kept at least a float's resolution inside the bracket, and
    the midpoint after an iteration that did not halve the bracket; ``lo`` stays feasible.
    """
    import torch

    active = (f_lo <= budget) & (f_hi > budget) & (hi > lo)
    zero = torch.zeros_like(lo)
    # g = fn - budget, <= 0 exactly at the feasible points; dummies on inactive lanes
    g_lo = torch.where(active, f_lo - budget, zero - 1.0)
    g_hi = torch.where(active, f_hi - budget, zero + 1.0)
    res = torch.finfo(lo.dtype).eps
    half_tol = 0.5 * res * torch.maximum(lo.abs(), hi.abs())
    half_tol = torch.clamp(half_tol, min=torch.finfo(lo.dtype).tiny)
    hi2, g_hi2 = hi, g_hi
    lo2, g_lo2 = lo, g_lo
    slow = torch.zeros_like(active)
    for _ in range(steps):
        w = hi - lo
        active = active & (w > 2.0 * half_tol)
        mid = lo + 0.5 * w
        xc = lo + w * (g_lo / (g_lo - g_hi))  # chord (g_lo <= 0 <= g_hi)
        xc = torch.where(xc >= lo, xc, mid)  # (0/0 when both are 0)
        xs = hi - (hi2 - hi) * (g_hi / (g_hi2 - g_hi))  # secant of the two highs
        # none yet: the secant of the two lows, extended up (past the root when convex)
        xl = lo - (lo - lo2) * (g_lo / (g_lo - g_lo2))
        xl = torch.where((g_lo > g_lo2) & (xl > xc) & (xl < hi), xl, 0.5 * (xc + hi))
        xs = torch.where((g_hi2 > g_hi) & (xs > xc) & (xs < hi), xs, xl)
        xs = torch.where(slow, mid, xs)
        a_lo = torch.where(active, lo + half_tol, lo)
        a_hi = torch.where(active, hi - half_tol, lo)
        pts = torch.cat([torch.clamp(xc, a_lo, a_hi), torch.clamp(xs, a_lo, a_hi)], dim=-1)
        f = fn(pts)
        E = lo.shape[-1]
        budget2 = torch.cat([budget, budget], -1)
        feas, gp = f <= budget2, f - budget2
        for sl in (slice(E, 2 * E), slice(0, E)):  # the secant point first
            x, gx, ok = pts[..., sl], gp[..., sl], feas[..., sl]
            up = active & ok & (x > lo)
            down = active & ~ok & (x < hi)
            lo2, g_lo2 = torch.where(up, lo, lo2), torch.where(up, g_lo, g_lo2)
            lo, g_lo = torch.where(up, x, lo), torch.where(up, gx, g_lo)
            hi2, g_hi2 = torch.where(down, hi, hi2), torch.where(down, g_hi, g_hi2)
            hi, g_hi = torch.where(down, x, hi), torch.where(down, gx, g_hi)
        slow = active & (hi - lo > 0.5 * w)
    return lo


def mentored_target_rows(target_probs, draft_probs, budget, divergence="kl"):
    """The Mentored target of the rule's rows: :func:`mentored_target_device` for torch
    tensors (the samplers, the vLLM plugin), the float64 analysis
    (:func:`~cactus_theory.solvers._mentored.mentored_target`) for anything else.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'.
    """
    if type(target_probs).__module__.split(".")[0] == "torch":
        return mentored_target_device(target_probs, draft_probs, budget, divergence)
    return mentored_target(target_probs, draft_probs, budget, divergence)
