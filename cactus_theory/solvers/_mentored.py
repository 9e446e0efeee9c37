r"""Exact fast solver of the acceptance-maximisation problem (Mentored decoding, the frontier).

.. math:: A^*(\epsilon) = \max_{\pi \in \Delta_V} \sum_x \min(p_x, \pi_x)
          \quad\text{s.t.}\quad D_f(\pi \| q) \le \epsilon

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`\pi` the target
(Mentored decoding runs SpS against it and so emits it exactly), :math:`\epsilon` the budget
(the blog's D). The same problem is the *optimal frontier*: every single-draft rule emitting
o accepts at most :math:`\sum_x \min(p_x, o_x)` (Theorem 1), so :math:`A^*(\epsilon)` bounds
every rule whose emitted distribution is within :math:`\epsilon` of q.

Derivation (KKT; f strictly convex and differentiable on (0, inf))
-----------------------------------------------------------------
With multipliers :math:`\lambda > 0` (budget) and :math:`\mu` (sum), each coordinate with
:math:`q_x > 0` maximises :math:`\min(p_x, q_x t) - \lambda q_x f(t) - \mu q_x t` over
:math:`t = \pi_x/q_x`; its solution is :math:`t = \mathrm{clip}(r_x, a, b)` with
:math:`r_x = p_x/q_x`, :math:`f'(a) = -\mu/\lambda`, :math:`f'(b) = (1-\mu)/\lambda`, so

.. math:: \pi_x = \mathrm{clip}(p_x,\ a q_x,\ b q_x), \qquad 0 \le a \le 1 \le b
          \qquad (q_x > 0).

A coordinate with :math:`q_x = 0` costs :math:`f'(\infty)\,\pi_x` (the divergence's slope at
infinity: +inf for KL and Pearson chi-square, 0 for reverse KL, 1 for Neyman chi-square, 1/2
for Hellinger and TV, log(2)/2 for JS). Its marginal value :math:`1 - \mu - \lambda f'(\infty)
= \lambda (f'(b) - f'(\infty)) < 0` while some token is capped at :math:`b q_x`, so

* **phase 1** (:math:`1 \le b \le r_{max} = \max_{q_x>0} r_x`): no mass off supp(q); a is
  fixed by :math:`\sum_{q>0}\mathrm{clip}(p, aq, bq) = 1`, and along this path
  :math:`dD/db = Q(r > b)(f'(b) - f'(a)) \ge 0` and :math:`dA/db = Q(r>b) \ge 0`;
* **phase 2** (only if :math:`f'(\infty) < \infty` and :math:`p(q = 0) > 0`): every on-support
  token is at least p; the mass m placed off supp(q) (at most p there, proportionally to p)
  grows from 0 to :math:`p(q=0)`, a falls so that :math:`\sum_{q>0}\max(p, aq) + m = 1`, and
  :math:`dD/dm = f'(\infty) - f'(a) > 0`, :math:`A = p(q>0) + m`.

So the clip form holds for every strictly convex f on supp(q); when q has zeros, divergences
with a finite slope at infinity put mass outside supp(q) once the budget exceeds the end of
phase 1. Both phases are monotone one-parameter paths: each is a scalar root in which every
evaluation costs O(log V) after one O(V log V) sort (prefix sums over the tokens sorted by
r: a is found by a binary search over the breakpoints :math:`G_k = r_k Q_{<k} - P_{<k}` of
:math:`\sum_{r<a}(a q - p)`). ``method="bisect"`` bisects log b, then m, for a fixed
:data:`_BISECTION_STEPS` steps: the reference, and the default for torch tensors (no host
synchronisation). ``method="fast"`` (the numpy default) solves phase 1 in the acceptance A
instead: D as a function of A is the inverse of the concave frontier, so it is convex, and
it is :math:`C^1` (:math:`dD/dA = f'(b) - f'(a)`), where D(log b) has a kink at every
ratio; b follows from A by a search over the breakpoints :math:`H_k = A(r_k)`. Its root
(:func:`_root`) is a bracketing two-sided secant on :math:`\sqrt{D}` (a chord point below
the root and a secant point above it per evaluation, Brent-style end nudges, a midpoint
step after any iteration that did not halve the bracket), typically 6-9 evaluations to
the float resolution of A, keeping the feasible end, so :math:`D(\pi\|q) \le \epsilon` holds
as computed. Where one token with a tiny :math:`q_x` lies above b, A cannot resolve b (it
moves A by :math:`b q_x`), and b is then refined on log b inside the final bracket.
Phase 2 is already in acceptance units (:math:`A = p(q>0) + m`). Acceptance along phase 1
is :math:`A(b) = P(r \le b) + b\, Q(r > b)`. TV (not strictly convex) is solved in closed
form: :math:`A^* = \min(1, \sum\min(p,q) + \epsilon)`, attained by
:math:`\pi = q + \min(1, \epsilon/TV(p,q))(p - q)` (the coupling bound
:math:`a \le 1 - TV(p,q) + TV(\pi,q)` is tight there).

Everything is written once against the array API (numpy float64 for the analysis, torch for
the samplers); the fast path on numpy sorts with numpy's default (unstable) ``argsort`` and,
for one row, counts with ``searchsorted``. The order of tokens with equal r does not matter:
every prefix sum is read at a count returned by a search for ``r <= b`` (the end of a tie
group), and inside a tie group the breakpoints :math:`G_k` are equal in exact arithmetic
(:math:`G_{k+1} - G_k = (r_{k+1} - r_k) Q_{<k+1}`), where every split of the group gives
the same a = r up to rounding. The returned divergence is recomputed directly from the
returned target.

References
----------
V. Tran-Thien, "An optimal lossy variant of speculative decoding" (Hugging Face blog, 2023):
the problem (KL budget D, direction unspecified); Narasimhan et al., ICLR 2025 (arXiv
2405.19261), Table 3: the (alpha, beta) parametrisation b = 1/(1-alpha), a = 1/beta.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from .._validation import _is_torch, as_budget, as_budget_array, as_probs_or_tensor, choice
from ..divergences import Divergence, get_divergence
from ._mentored_phases import _BISECTION_STEPS, _NUMPY_IS_ARRAY_API, _bisect, _is_numpy, _Prepared, _root

#: The one place the solver departs from exact arithmetic on valid input.
_OVERFLOW_NOTE = (
    "tokens with 0 < q_x < p_x / (max_float / 4) (about 4.5e-308 p_x in float64) are "
    "treated as q_x = 0: their ratio p/q is not representable"
)

__all__ = [
    "MentoredSolution",
    "solve_mentored",
    "mentored_target",
    "max_acceptance",
    "slope_at_infinity",
    "METHODS",
]


#: Root methods of :func:`solve_mentored`: ``auto`` is ``fast`` for numpy and ``bisect`` for
#: torch (a fixed number of steps: no host synchronisation inside the samplers).
METHODS = ("auto", "fast", "bisect")


@dataclass(frozen=True)
class MentoredSolution:
    r"""Solution of :math:`\max \sum\min(p,\pi)` s.t. :math:`D(\pi\|q) \le \epsilon`.

    Shapes: ``batch`` = the leading shape of q and p, ``E`` = the budgets' trailing axis
    (absent when a scalar budget was given).

    Attributes
    ----------
    acceptance : array, shape batch (+ (E,))
        :math:`A^* = \sum_x \min(p_x, \pi_x)` (exact formula of the phase).
    lower, upper : array, shape batch (+ (E,))
        The clip band: :math:`\pi_x = \mathrm{clip}(p_x, a q_x, b q_x)` on supp(q) (TV: nan-free
        placeholders a = 0, b = inf are not used; see ``target``).
    off_support_mass : array, shape batch (+ (E,))
        Mass m of :math:`\pi` outside supp(q) (phase 2), spread proportionally to p there.
    divergence : array, shape batch (+ (E,))
        :math:`D(\pi \| q)` recomputed from the closed form of the phase (<= budget up to
        rounding).
    target : array or None, shape batch (+ (E,)) + (V,)
        :math:`\pi`, when requested.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """

    acceptance: Any
    lower: Any
    upper: Any
    off_support_mass: Any
    divergence: Any
    target: Any = None


def slope_at_infinity(divergence) -> float:
    r""":math:`f'(\infty) = \lim_{t\to\infty} f(t)/t`: the cost per unit of mass where q = 0.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """
    import numpy as np

    d = get_divergence(divergence)
    with np.errstate(all="ignore"):
        return float(d.term(np, np.array(1.0), np.array(0.0)))


@functools.lru_cache(maxsize=64)
def _slope(d: Divergence) -> float:
    """:func:`slope_at_infinity` of a resolved divergence, computed once per divergence."""
    return slope_at_infinity(d)


def solve_mentored(
    target_probs,
    draft_probs,
    budget,
    divergence="kl",
    *,
    return_target: bool = True,
    budget_axis: bool = False,
    method: str = "auto",
) -> MentoredSolution:
    r"""Solve :math:`\max_\pi \sum_x\min(p_x,\pi_x)` s.t. :math:`D(\pi\|q)\le\epsilon` exactly.

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        Verifier q and drafter p, valid probability rows (numpy arrays and lists are
        validated, ValueError naming the argument; torch tensors are used as given).
    budget : float or array
        :math:`\epsilon \ge 0`. ``inf`` admits every distribution (D = inf included), so it
        returns :math:`\pi = p` and acceptance 1; the largest acceptance within a *finite*
        divergence is reached at a finite budget (the saturation budget, e.g. the largest
        float). With ``budget_axis=False`` it broadcasts
        against the batch shape ``q.shape[:-1]``; with ``budget_axis=True`` it is a 1-D array
        of E budgets applied to every row (one sort per row, results gain a trailing E axis).
    divergence : str
        Any of :data:`cactus_theory.divergences.DIVERGENCES` (the direction: KL is
        :math:`KL(\pi\|q)`, ``reverse_kl`` is :math:`KL(q\|\pi)`).
    return_target : bool
        Also build :math:`\pi` (memory batch x E x V).
    method : {"auto", "fast", "bisect"}
        The scalar root of each phase: ``fast`` (a safeguarded two-sided secant on the
        acceptance, typically 6-9 evaluations, one host check per iteration), ``bisect``
        (the fixed 64-step bisection on log b, the reference; no host synchronisation),
        ``auto`` = ``fast`` for numpy input and ``bisect`` for torch tensors. Both keep the
        feasible end of their bracket and agree to the float resolution of the acceptance
        (~1e-15; tests/solvers/test_mentored_fast.py).

    Returns
    -------
    MentoredSolution

    Notes
    -----
    O(V log V) per row for the sort plus O(E log V) per root evaluation; no generic
    optimizer. See the module docstring for the derivation (clip form on supp(q), off-support
    mass in phase 2 for divergences with a finite slope at infinity).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """
    d = get_divergence(divergence)
    method = choice(method, METHODS, "method")
    q = as_probs_or_tensor(target_probs, "target_probs")  # numpy: validated; torch: as given
    p = as_probs_or_tensor(draft_probs, "draft_probs")
    if not _is_torch(budget):
        budget = as_budget_array(budget, "budget") if np.ndim(budget) else as_budget(budget, "budget")
    return _solve_checked(q, p, budget, d, return_target, budget_axis, method)


def _solve_checked(q, p, budget, d, return_target, budget_axis, method):
    """:func:`solve_mentored` on inputs already validated (q, p, budget, divergence, method)."""
    xp = array_namespace(q, p)
    fast = method == "fast" or (method == "auto" and not _is_torch(q))
    if fast and _is_numpy(xp) and _NUMPY_IS_ARRAY_API:
        xp = np  # the same functions without the compatibility wrappers (~1-2 us per call)
    dev = getattr(q, "device", None)
    if not hasattr(budget, "shape"):
        # a fill on q's device: asarray of a Python number is a host-to-device copy (a sync)
        budget = xp.full((), budget, dtype=q.dtype, device=dev)
    else:
        budget = xp.astype(budget, q.dtype)
    batch = q.shape[:-1]
    if budget_axis:
        eps = xp.reshape(budget, (1,) * len(batch) + (-1,))
        eps = xp.broadcast_to(eps, batch + (eps.shape[-1],))
    else:
        eps = xp.broadcast_to(budget, batch)[..., None]
    if d.name == "tv":
        sol = _solve_tv(xp, q, p, eps, return_target)
    else:
        sol = _solve_smooth(xp, q, p, eps, d, return_target, fast)
    if budget_axis:
        return sol
    squeeze = lambda x: None if x is None else x[..., 0]  # noqa: E731
    tgt = None if sol.target is None else sol.target[..., 0, :]
    return MentoredSolution(
        squeeze(sol.acceptance),
        squeeze(sol.lower),
        squeeze(sol.upper),
        squeeze(sol.off_support_mass),
        squeeze(sol.divergence),
        tgt,
    )


def _solve_tv(xp, q, p, eps, return_target):
    tv = xp.sum(xp.clip(p - q, 0.0, None), axis=-1, keepdims=True)  # [..., 1]
    pos = tv > 0
    safe_tv = xp.where(pos, tv, xp.ones_like(tv))
    lam = xp.where(pos, xp.minimum(eps, safe_tv) / safe_tv, xp.zeros_like(eps))  # [..., E]
    acc = xp.clip(1.0 - tv + eps, None, 1.0)
    acc = xp.where(pos, acc, xp.ones_like(acc))
    div = lam * tv
    tgt = None
    if return_target:
        tgt = q[..., None, :] + lam[..., None] * (p - q)[..., None, :]
        tgt = xp.clip(tgt, 0.0, None)
    zero = xp.zeros_like(acc)
    return MentoredSolution(acc, zero, zero + math.inf, zero, div, tgt)


def _solve_smooth(xp, q, p, eps, d, return_target, fast=False):
    """Phase 1's upper ratio b, then phase 2's mass m off supp(q) where f'(inf) is finite, then
    the target clip(p, a q, b q) (and m spread in proportion to p off supp(q))."""
    prep = _Prepared(xp, q, p, d, fast)
    slope = _slope(d)
    one = xp.ones_like(eps)
    b, done1, D_end = _phase1_upper(xp, prep, eps, fast)
    A, D, a = prep.phase1(b)
    m = xp.zeros_like(eps)
    if math.isfinite(slope):
        P0 = prep.P0 * one
        has2 = done1 & (P0 > 0)
        m = xp.where(has2, _phase2_mass(xp, prep, eps, slope, P0, has2, D_end, fast), m)
        A2, Dv2, a2 = prep.phase2(m, slope)
        A = xp.where(has2, A2, A)
        D = xp.where(has2, Dv2, D)
        a = xp.where(has2, a2, a)
    tgt = _clipped_target(xp, prep, q, p, eps, a, b, m) if return_target else None
    # budget +inf admits every distribution, D(pi||q) = inf included: pi = p, acceptance 1
    # (any finite budget, however large, stays within finite divergence: see saturation)
    inf_b = xp.isinf(eps)
    A = xp.where(inf_b, one, A)
    if not fast or bool(xp.any(inf_b)):  # (the check would synchronize a GPU: bisect skips it)
        D = xp.where(inf_b, d.unchecked(p, q)[..., None] * one, D)
    m = xp.where(inf_b, prep.P0 * one, m)
    return MentoredSolution(A, a, b, m, D, tgt)


def _phase1_upper(xp, prep, eps, fast):
    """Phase 1's b per budget (r_max where the whole phase is within budget, 1 at budget 0),
    whether the phase ended within budget, and its divergence at its end."""
    one = xp.ones_like(eps)
    log_rmax = xp.log(prep.r_max) * one  # [..., E]
    # at b = r_max itself, the b returned when the end of phase 1 is within budget
    # (exp(log r_max) can differ from r_max by an ulp, and D there from D(r_max) by much
    # more where a -> 0 makes D steep: reverse KL at a budget ~40)
    A_end, D_end, _ = prep.phase1(prep.r_max * one)
    done1 = D_end <= eps
    fn = lambda x: prep.phase1(xp.exp(x))[1]  # noqa: E731
    if fast:
        # the root in the acceptance A instead of log b: D(A) along phase 1 is convex and
        # C^1 (dD/dA = f'(b) - f'(a), continuous; d2D/dA2 = f''(b)/Q(r>b) + f''(a)/Q(r<a)),
        # where D(log b) has a kink at every ratio r_k; so the secant steps converge fast
        k1 = prep.count_le(prep.rs, one)
        A1 = prep.take(prep.Pc, k1) + prep.take(prep.Qs, k1)  # A(1) = sum min(p, q)
        fnA = lambda x: prep.phase1(prep.upper_from_acceptance(x))[1]  # noqa: E731
        upper = lambda x: xp.where(x > A1, prep.upper_from_acceptance(x), one)  # noqa: E731
        # D(b = 1) = D(q || q) = 0: the lower end is feasible (as the bisection assumes);
        # budget 0 returns b = 1 below, so its lanes are left out (budget -1: inactive)
        live = xp.where(eps > 0, eps, -one)
        A_lo, A_hi = _root(xp, fnA, A1, A_end, xp.zeros_like(eps), D_end, live, 1.0)
        b, b_hi = upper(A_lo), upper(A_hi)
        # where Q(r > b) is tiny, A resolves b poorly (A(b) = P(r <= b) + b Q(r > b)): there
        # the bracket's b-width exceeds 2^-30 relative, and log b is refined between the two
        # (acceptance is already right to ~1e-16; this makes b, pi and D agree with the
        # bisection reference too)
        wide = (b_hi > b * (1.0 + 2.0**-30)) & ~done1 & (eps > 0)
        if bool(xp.any(wide)):
            skip = xp.full_like(eps, math.inf)  # budget inf: lane inactive
            lo, hi = xp.log(b), xp.log(b_hi)
            logb = _root(xp, fn, lo, hi, fn(lo), fn(hi), xp.where(wide, eps, skip), 1.0)[0]
            b = xp.where(wide & (logb > lo), xp.exp(logb), b)  # (an evaluated, feasible b)
    else:
        logb = _bisect(xp, fn, xp.zeros_like(eps), log_rmax, eps, _BISECTION_STEPS)
        b = xp.exp(logb)
    b = xp.where(done1, prep.r_max * one, b)
    b = xp.where(eps > 0, b, one)  # eps = 0: exactly pi = q (the bisection stalls ~1e-8 away)
    return b, done1, D_end


def _phase2_mass(xp, prep, eps, slope, P0, has2, D_end, fast):
    """Phase 2's mass m off supp(q) per budget (P0 where the whole phase is within budget)."""
    A2_end, D2_end, _ = prep.phase2(P0, slope)
    fn2 = lambda x: prep.phase2(x, slope)[1]  # noqa: E731
    budget2 = xp.where(has2, eps, xp.full_like(eps, math.inf))
    if fast:
        zero = xp.zeros_like(eps)
        # m is resolved relative to P0 (A = P(q > 0) + m to ~1e-16)
        # m = 0 is the end of phase 1, whose divergence D_end is known
        m2 = _root(xp, fn2, zero, P0, D_end, D2_end, budget2, P0)[0]
    else:
        m2 = _bisect(xp, fn2, xp.zeros_like(eps), P0, budget2, _BISECTION_STEPS)
    return xp.where(D2_end <= eps, P0, m2)


def _clipped_target(xp, prep, q, p, eps, a, b, m):
    """The target pi [..., E, V]: clip(p, a q, b q) on supp(q), m spread in proportion to p
    off it; q at budget 0, p at budget inf."""
    q3, p3, r3 = q[..., None, :], p[..., None, :], prep.r[..., None, :]
    on = prep.on[..., None, :]
    # clip(p, a q, b q), decided on r = p/q as the bisection counted the groups (so a
    # token whose r hit the overflow cap is treated consistently)
    a3, b3 = a[..., None], b[..., None]
    # a q can underflow to 0 (a ~ 1e-16 at a subnormal q), where divergences with
    # f(0) = inf (reverse KL, Neyman chi-square) would charge q f(0) = inf: the smallest
    # normal float stands in (it moves pi by < 1e-307)
    lower = a3 * q3
    tiny = xp.full_like(lower, xp.finfo(q.dtype).smallest_normal)
    lower = xp.where((lower > 0) | (a3 == 0), lower, tiny)
    clip = xp.where(r3 > b3, b3 * q3, xp.where(r3 < a3, lower, p3))
    P0 = prep.P0[..., None]
    share = xp.where(P0 > 0, m[..., None] / xp.where(P0 > 0, P0, xp.ones_like(P0)), xp.zeros_like(P0))
    # off supp(q): m spread in proportion to p; a token only numerically off it
    # (_OVERFLOW_NOTE) keeps at least its own q_x (< 1e-307), so no f(0) = inf is charged
    tgt = xp.where(on, clip, xp.maximum(share * p3, q3))
    tgt = tgt / xp.sum(tgt, axis=-1, keepdims=True)
    tgt = xp.where(eps[..., None] > 0, tgt, q3)  # budget 0: pi = q exactly
    return xp.where(xp.isinf(eps[..., None]), p3 + 0.0 * q3, tgt)


def mentored_target(target_probs, draft_probs, budget, divergence="kl"):
    r"""The Mentored-decoding target :math:`\pi` (the maximiser; shape of q). Array-agnostic.

    .. math:: \pi = \arg\max_{\pi\in\Delta_V} \sum_x \min(p_x, \pi_x)
              \ \text{s.t.}\ D(\pi\|q) \le \epsilon

    See :func:`solve_mentored`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """
    return solve_mentored(target_probs, draft_probs, budget, divergence).target


def max_acceptance(target_probs, draft_probs, budget, divergence="kl"):
    r"""The optimal acceptance :math:`A^*(\epsilon)` (shape of the batch). See :func:`solve_mentored`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Tran-Thien (2023), HF blog 'An optimal lossy variant of speculative decoding'; Narasimhan et al., ICLR 2025, Table 3.
    """
    return solve_mentored(target_probs, draft_probs, budget, divergence, return_target=False).acceptance
