r"""The sequence multiplier's step on torch rows: the band's clip factor by one sort, no loop.

:func:`~cactus_theory.solvers._sequence.multiplier_step` needs, per row, the root a of

.. math:: f(a) = \sum_{x:\,q_x>0} q_x\,\mathrm{clip}(r_x,\ a,\ a c) = 1,
          \qquad r_x = p_x / q_x,\ c = e^{1/\lambda},

nondecreasing and piecewise linear in a, with breakpoints at :math:`a = r_x` and
:math:`a = r_x/c`. With the :math:`r_x` sorted and the prefix sums :math:`Q_k, P_k` of q and p
in that order, :math:`f(a) = a Q_{L} + (P_{U} - P_{L}) + a c (Q_V - Q_{U})` with
:math:`L = \#\{r < a\}` and :math:`U = \#\{r \le a c\}`. A binary search over each sorted list
of breakpoints (17 steps for V = 65,536, every step a gather and a ``searchsorted`` of one
value per row) finds the last breakpoint :math:`b` with :math:`f(b) \le 1`; f is linear on the
segment after it, so

.. math:: a^* = \frac{1 - (P_U - P_L)}{Q_L + c\,(Q_V - Q_U)}\quad (L, U \text{ inside the segment}).

(L and U read inside the segment, at its midpoint). The answer is exact up to the rounding of
the sums in the rows' dtype (no bracket left to
close: the tolerance is the float32 prefix sums'); the emitted row is normalised at the end.
All on the rows' device, a fixed number of operations (no host read). Off supp(q) the row is
0, as in :func:`multiplier_step`.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o the emitted
distribution. Source: Hao & Mou, ICLR 2026, Theorem 1; Tran-Thien (2023).
"""

from __future__ import annotations

import math


def band_step_torch(q, p, lam):
    r"""The emitted row o of :func:`~cactus_theory.solvers._sequence.multiplier_step` (torch).

    Parameters
    ----------
    q, p : Tensor, shape (..., V)
        Normalized rows (float32 or float64; not validated).
    lam : float or Tensor broadcastable to the batch shape
        :math:`\lambda \in [0, \infty]`.

    Returns
    -------
    Tensor, shape (..., V)
        :math:`o = \mathrm{clip}(p, a^* q, a^* c q)` on supp(q), normalized.
    """
    import torch

    shape, V = q.shape, q.shape[-1]
    q2 = q.reshape(-1, V)
    p2 = p.reshape(-1, V)
    n = q2.shape[0]
    on = q2 > 0
    if isinstance(lam, torch.Tensor):
        lam_t = lam.to(dtype=q.dtype, device=q.device).reshape(-1, 1).expand(n, 1)
    else:  # a number filled in on the device (a host tensor would be a host-to-device copy)
        lam_t = torch.full((n, 1), float(lam), dtype=q.dtype, device=q.device)
    # band width c = e^{1/lambda}: inf at lambda = 0 (and past exp's range), 1 at lambda = inf
    expo = torch.where(lam_t > 0, 1.0 / torch.where(lam_t > 0, lam_t, 1.0), math.inf)
    c = torch.where(expo > 80.0, math.inf, torch.exp(torch.clamp(expo, max=80.0)))
    wide = torch.isinf(c)
    r = torch.where(on, p2 / torch.where(on, q2, 1.0), math.inf)  # off supp(q): last, weight 0
    rs, order = torch.sort(r, dim=-1)
    zero = torch.zeros((n, 1), dtype=q.dtype, device=q.device)
    Q = torch.cat([zero, torch.cumsum(torch.gather(q2, -1, order), -1)], -1)  # Q[k]: first k
    P = torch.cat([zero, torch.cumsum(torch.gather(torch.where(on, p2, 0.0), -1, order), -1)], -1)
    q_tot = Q[:, -1:]
    idx_last = torch.full((n, 1), V - 1, dtype=torch.int64, device=q.device)

    def parts(a, strict_low):
        """(L, U) at a (``strict_low``: L counts r < a, else r <= a, the value just above a)."""
        low = torch.searchsorted(rs, a.contiguous(), right=not strict_low)
        ac = torch.where(wide, torch.where(a > 0, math.inf, 0.0), a * torch.where(wide, 1.0, c))
        high = torch.searchsorted(rs, ac.contiguous(), right=True)
        return low, high

    def f(a):
        low, high = parts(a, True)
        upper = torch.where(wide, 0.0, torch.where(wide, 1.0, c) * (q_tot - Q.gather(-1, high)))
        return a * Q.gather(-1, low) + (P.gather(-1, high) - P.gather(-1, low)) + a * upper

    def last_below(points):
        """The largest breakpoint of the sorted ``points`` (rows) with f <= 1, or 0."""
        lo = torch.full((n, 1), -1, dtype=torch.int64, device=q.device)  # f(0) = 0 <= 1
        hi = idx_last.clone()
        for _ in range(max(1, math.ceil(math.log2(V + 1)))):
            mid = torch.div(lo + hi + 1, 2, rounding_mode="floor")
            x = points.gather(-1, mid.clamp(min=0))
            ok = torch.isfinite(x) & (f(x) <= 1.0)
            lo = torch.where(ok & (mid > lo), mid, lo)
            hi = torch.where(ok | (mid <= lo), hi, mid - 1)
        return torch.where(lo >= 0, points.gather(-1, lo.clamp(min=0)), zero)

    # the breakpoints r_x / c (0 for every finite r_x when c = inf; inf / inf kept inf)
    scaled = torch.where(torch.isfinite(rs), rs / torch.where(wide, math.inf, c), math.inf)
    b = torch.maximum(last_below(rs), last_below(scaled))
    # (L, U) inside the segment after b, at its midpoint: at b itself, b c against r_x rounds
    # either way where b = r_x / c
    nxt = torch.minimum(
        rs.gather(-1, torch.searchsorted(rs, b.contiguous(), right=True).clamp(max=V - 1)),
        scaled.gather(-1, torch.searchsorted(scaled, b.contiguous(), right=True).clamp(max=V - 1)),
    )
    nxt = torch.where(nxt > b, nxt, math.inf)
    mid = torch.where(torch.isfinite(nxt), 0.5 * (b + nxt), 2.0 * b + 1.0)
    low, high = parts(mid, True)
    upper = torch.where(wide, 0.0, torch.where(wide, 1.0, c) * (q_tot - Q.gather(-1, high)))
    slope = Q.gather(-1, low) + upper
    rest = 1.0 - (P.gather(-1, high) - P.gather(-1, low))
    a = torch.where(slope > 0, rest / torch.where(slope > 0, slope, 1.0), b)
    a = torch.maximum(a, b)
    top = torch.where(wide, math.inf, a * torch.where(wide, 1.0, c))
    o = torch.where(on, torch.minimum(torch.maximum(p2, a * q2), top * q2), 0.0)
    o = o / o.sum(-1, keepdim=True)
    return o.reshape(shape)
