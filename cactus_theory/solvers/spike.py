r"""The boosted probability of the drafted token: Theorem 2's root and Corollary 5's Taylor point.

For a drafted token n with verifier probability :math:`s = q_n`, the per-draft problem

.. math:: \max_h h_n \quad \text{s.t.}\quad h \in \Delta_V,\; D_f(h \| q) \le \delta

is solved (Theorem 2) by :math:`h_n = \gamma^*`, :math:`h_i = q_i (1-\gamma^*)/(1-q_n)`, where
:math:`\gamma^*` is the largest root in :math:`[s, 1]` of the two-point equation

.. math:: s f(\gamma/s) + (1-s) f\big((1-\gamma)/(1-s)\big) = \delta,

capped at 1. Corollary 5 replaces the two-point KL by its second-order expansion
:math:`(\gamma-s)^2 / (2 s (1-s))`, giving :math:`\gamma = \min(1, s + \sqrt{2\delta s(1-s)})`;
for a general f the expansion is :math:`f''(1)(\gamma-s)^2/(2s(1-s))`.

Both functions are array-agnostic (numpy float64 in the analysis, torch float32 in the
samplers): ``q_n`` and ``delta`` broadcast together.

METHODS: ``"exact"`` (bisection on the two-point form to machine precision; always feasible:
the returned gamma satisfies the budget as evaluated in floating point) and ``"taylor"``
(Corollary 5; approximate: it can exceed the budget when gamma > 1/2, see
:mod:`cactus_theory.analysis.comparison`).

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 2 and Corollary 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from array_api_compat import array_namespace

from .._search import bisect_elementwise
from .._threads import in_chunks
from .._validation import (
    _is_torch,
    as_budget_array,
    as_count,
    as_unit_interval,
    spike_arguments,
)
from ..divergences import DIVERGENCES, KL_RATIO_FLOOR, get_divergence, kl_log_ratios

__all__ = [
    "METHODS",
    "capped_exact_spike",
    "effective_exact_spike",
    "exact_spike",
    "lambert_w",
    "spike_scale",
    "taylor_spike",
]

METHODS = ("exact", "taylor")


def _as_xp(q_n, delta):
    """Namespace and arrays for (q_n, delta); python scalars become arrays of q_n's kind."""
    xp = array_namespace(q_n)
    # a fill kernel, not asarray: copying a host scalar to a CUDA device synchronizes the host
    delta = delta if hasattr(delta, "shape") else xp.full_like(q_n, delta)
    return xp, delta


def taylor_spike(q_n, delta, divergence="kl"):
    r"""Corollary 5: :math:`\gamma = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)/f''(1)})`.

    Parameters
    ----------
    q_n : array, shape (...)
        Verifier probability of each candidate drafted token (q = verifier), in [0, 1].
    delta : float or array broadcastable to ``q_n``
        Divergence budget, >= 0. numpy / Python input is validated (ValueError naming
        ``q_n`` or ``delta`` for NaN or out-of-range values); torch tensors (the samplers'
        path) are not, to keep the samplers free of host-device synchronization.
    divergence : str
        Divergence whose second-order expansion is used; KL (the paper's choice, f''(1) = 1)
        by default. Divergences without a second derivative at 1 (TV) raise ValueError.

    Returns
    -------
    array, shape (...)
        gamma in [q_n, 1]; exactly q_n when delta = 0 or q_n in {0, 1}.

    Examples
    --------
    >>> import numpy as np
    >>> float(taylor_spike(np.array(0.35), 1.0))      # the bonus saturates at delta = 1
    1.0
    >>> round(float(taylor_spike(np.array(0.35), 0.2)), 4)
    0.6516
    """
    d = get_divergence(divergence)
    if not math.isfinite(d.f_second_at_one) or d.f_second_at_one <= 0:
        raise ValueError(f"divergence: {d.name!r} has no second-order expansion for the Taylor rule")
    q_n, delta = spike_arguments(q_n, delta)  # ValueError naming q_n / delta (numpy input)
    xp, delta = _as_xp(q_n, delta)
    # no bonus where q_n is 0 or 1, delta = inf included (inf * 0 would give NaN); the
    # official code's order of operations otherwise
    budget = xp.where((q_n > 0) & (q_n < 1), delta, xp.zeros_like(q_n))
    bonus = xp.sqrt(2.0 * budget * q_n * (1.0 - q_n) / d.f_second_at_one)
    return xp.clip(q_n + bonus, 0.0, 1.0)


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


def _kl_interior(x, s, c=None):
    """The two-point KL and its slope for 1e-280 <= s < 1, s <= x < 1 (numpy).

    The same operations as :func:`cactus_theory.divergences.kl_two_point` on that domain
    (bit for bit; tested), without its masks for zeros and ones. ``c = 1 - s`` may be
    passed precomputed. Returns g(x), g'(x) and 1 - x.
    """
    c = 1.0 - s if c is None else c
    dx = x - s
    a = np.log1p(dx / s)
    b = np.log1p(-dx / c)  # (s - x)/(1 - s): negation is exact
    one_x = 1.0 - x
    up = np.flatnonzero(dx > 0.5 * c)
    if up.size:
        b[up] = np.log(one_x[up] / c[up])
    return x * a + one_x * b, a - b, one_x


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


def exact_spike(q_n, delta, divergence="kl", *, iterations: int | None = None, method: str = "newton"):
    r"""Theorem 2: the largest :math:`\gamma \in [q_n, 1]` with two-point divergence <= delta.

    With :math:`s = q_n` and :math:`g(\gamma) = s f(\gamma/s) + (1-s) f((1-\gamma)/(1-s))`
    (convex, zero at :math:`\gamma = s`, hence increasing on :math:`[s, 1]`), the root of
    :math:`g(\gamma) = \delta` is found by one safeguarded iteration, the same on both
    backends (:func:`_root_numpy`, :func:`_root_torch`):

    * a start: for the KL (the paper's divergence) the root of a lower bound of the two-point
      KL through Lambert W, sharp for small roots (:func:`_kl_start`); Corollary 5's Taylor
      point for the other divergences;
    * Halley steps for the KL (:math:`g'' = 1/(\gamma(1-\gamma))`; in
      :math:`\log(1-\gamma)` above 1/2), Newton steps
      :math:`\gamma - (g(\gamma) - \delta)/g'(\gamma)` with
      :math:`g'(\gamma) = f'(\gamma/s) - f'((1-\gamma)/(1-s))` for the others, each kept
      strictly inside :math:`(s, 1)`;
    * a certificate: :math:`g(\gamma) \le \delta < g(\gamma^+)` for the next float
      :math:`\gamma^+`, with g as :meth:`Divergence.two_point` computes it (for the KL, the
      same floats as :func:`cactus_theory.divergences.kl_two_point`); an iterate that fails
      it walks a few floats to the sign change, and the rest are bisected between a feasible
      and an infeasible float (on the floats' bit patterns: at most 64 halvings) until the
      two are adjacent.

    So the returned gamma satisfies the budget as evaluated in floating point, and its next
    float does not. Divergences without a registered derivative (TV, user generators) use
    plain bisection (``method="bisect"``).

    Parameters
    ----------
    q_n : array, shape (...)
        Verifier probability of each candidate drafted token, in [0, 1].
    delta : float or array broadcastable to ``q_n``
        Divergence budget, >= 0 (``inf`` gives 1). numpy / Python input is validated
        (ValueError naming ``q_n`` or ``delta``); torch tensors are not (samplers' path).
    divergence : str or Divergence
        Any divergence of :mod:`cactus_theory.divergences`.
    iterations : int, optional
        Bisection steps of ``method="bisect"``; default 64 for float64 (the bracket shrinks
        below one ulp) and 32 for lower precision.
    method : {"newton", "bisect"}
        ``"newton"`` (default): the certified iteration above, for the divergences with a
        derivative (all built-in ones but TV); ``"bisect"``: bisection on [q_n, 1] in the
        input's dtype, the reference the iteration is tested against.

    Returns
    -------
    array, shape (...)
        gamma: 1 when the two-point divergence at 1 is within budget, ``q_n`` exactly when
        delta = 0, else the certified root (divergence <= delta as computed).

    Notes
    -----
    numpy iterates only the entries not yet certified and stops when all are; arrays of at
    least 2 x :data:`PARALLEL_MIN` entries are solved in chunks on up to 8 threads (the same
    floats as one call, tested). torch tensors are solved in float64 and rounded to their
    dtype by :func:`_round_to_dtype` (toward q_n, then stepped down while the two-point form
    as computed in that dtype exceeds delta); NaN entries (rows the samplers flag invalid)
    give 0. A CPU tensor's float64 root is the numpy one (its memory is the host's: no
    device to wait for); on any other device :func:`_root_torch` runs the same iteration in
    torch operations with fixed counts, so nothing reads the device. Where the two-point
    divergence is infinite for every gamma > q_n (KL with q_n = 0) the result is q_n.
    """
    if method not in ("newton", "bisect"):
        raise ValueError(f"method: expected 'newton' or 'bisect', got {method!r}")
    d = get_divergence(divergence)
    q_n, delta = spike_arguments(q_n, delta)  # ValueError naming q_n / delta (numpy input)
    if iterations is not None:
        iterations = as_count(iterations, "iterations", minimum=0)
    newton = method == "newton" and _derivative(d) is not None
    if _is_torch(q_n) and newton:
        if _host_tensor(q_n):
            return _round_to_dtype(_host_root(q_n, delta, d), q_n, delta, d, host=True)
        return device_root(q_n, delta, d)
    xp, delta = _as_xp(q_n, delta)
    q_n, delta = xp.broadcast_arrays(q_n, delta)
    if isinstance(q_n, np.ndarray):
        q_n, delta = np.array(q_n, dtype=np.float64), np.asarray(delta, dtype=np.float64)
        return _exact_numpy(q_n, delta, d, method, 64 if iterations is None else iterations)
    if iterations is None:
        iterations = 64 if "float64" in str(q_n.dtype) else 32
    one = xp.ones_like(q_n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_one = d.two_point(one, q_n)
        lo = _bisect(xp, d, q_n, delta, iterations)[0]
    gamma = xp.where(at_one <= delta, one, lo)
    return xp.where(delta == 0, q_n, gamma)


def _derivative(d):
    """:math:`f'` of a built-in divergence (``_F_PRIME``), None for TV and user generators."""
    return _F_PRIME.get(d.name) if DIVERGENCES.get(d.name) is d else None


#: The chi-square bound's share of the bonus :func:`capped_exact_spike` trusts: 0.1% below
#: the bound, far more than the rounding of the root as computed (see there).
CAP_SCREEN_SHARE = 0.999
#: ... where the bonus is at least this fraction of q_n (below it, only caps <= q_n pass).
CAP_SCREEN_MIN_BONUS = 2.0**-30


def capped_exact_spike(q_n, cap, delta, divergence="kl"):
    r""":math:`\min(\gamma_n, \mathrm{cap}_n)` for Theorem 2's root :math:`\gamma_n`
    (:func:`exact_spike`), bit for bit, solving the root only where it may lie below the cap.

    What the acceptance :math:`\min(1, \gamma_n/p_n)` and the emitted law read of the root is
    :math:`\min(\gamma_n, p_n)` (:class:`cactus_theory.rules.plans.SpikePlan`), and
    :math:`\gamma_n \ge p_n` for most tokens of real and synthetic rows, so most roots need no
    solving. For the KL (numpy), since :math:`\log y \le y - 1` the two-point KL is at most the
    two-point chi-square :math:`(x - s)^2/(s(1-s))`, so the root is at least
    :math:`x_\chi = s + \sqrt{\delta s (1-s)}` (Corollary 5's point with delta for 2 delta).
    An entry whose cap is at most s (the root is never below q_n), or at most
    :math:`s + 0.999\sqrt{\delta s(1-s)}` where that bonus is at least :math:`2^{-30} s`,
    returns the cap; the others get :func:`exact_spike`'s root on those entries alone (the
    same floats: it is elementwise; tested). Why the 0.1% suffices for the root as computed:
    :func:`exact_spike` returns the float below the first point where the two-point form as
    computed exceeds delta; that form is accurate to a relative
    :math:`\epsilon \lesssim 2^{-52}\sqrt{s/\delta}` (its terms are of size
    :math:`\sqrt{\delta s}`, their sum :math:`\delta`), at most :math:`2^{-22}` where the
    bonus is at least :math:`2^{-30} s`; and :math:`g^{-1}` is concave with
    :math:`g^{-1}(0) = s`, so the computed root is at least
    :math:`s + (1 - \epsilon)(x_\chi - s)` less an ulp. Other divergences solve every root.

    Parameters
    ----------
    q_n : array, shape (...)
        Verifier probabilities, in [0, 1].
    cap : array, shape of ``q_n``
        The caps (the drafter's probabilities p_n), in [0, 1].
    delta : float or array broadcastable to ``q_n``
        Budget, >= 0 (``inf`` gives the cap).
    divergence : str or Divergence
        Any divergence of :mod:`cactus_theory.divergences`.

    Returns
    -------
    ndarray, shape of ``q_n``
        ``np.minimum(exact_spike(q_n, delta, divergence), cap)``, float64.

    Examples
    --------
    >>> import numpy as np
    >>> q, p = np.array([1e-5, 0.2, 0.3]), np.array([1e-5, 0.9, 0.35])
    >>> g = capped_exact_spike(q, p, 0.1)
    >>> bool(np.array_equal(g, np.minimum(exact_spike(q, 0.1), p)))
    True
    """
    d = get_divergence(divergence)
    q_n, delta = spike_arguments(q_n, delta)
    cap = as_unit_interval(cap, "cap")
    q_n = np.asarray(q_n, dtype=np.float64)
    if cap.shape != q_n.shape:
        raise ValueError(f"cap: shape {cap.shape} does not match q_n's shape {q_n.shape}")
    try:
        delta = np.broadcast_to(np.asarray(delta, dtype=np.float64), q_n.shape)
    except ValueError:
        raise ValueError(
            f"delta: shape {np.shape(delta)} does not broadcast to q_n's shape {q_n.shape}"
        ) from None
    return capped_exact_unchecked(q_n, cap, delta, d)


def capped_exact_unchecked(q_n, cap, delta, d):
    """:func:`capped_exact_spike` on float64 arrays of one shape already validated (``delta``
    broadcast to it, ``d`` a resolved divergence): the exact rule's plans call it on their
    validated rows."""
    if d is not DIVERGENCES["kl"]:
        return np.minimum(_exact_numpy(q_n, np.ascontiguousarray(delta), d), cap)
    with np.errstate(invalid="ignore", over="ignore"):
        bonus = np.sqrt(delta * q_n * (1.0 - q_n))
        resolved = bonus >= CAP_SCREEN_MIN_BONUS * q_n
        below = (cap <= q_n) | (resolved & (cap <= q_n + CAP_SCREEN_SHARE * bonus))
    out = np.array(cap, dtype=np.float64)
    solve = np.flatnonzero(~below)
    if solve.size:
        flat = out.reshape(-1)
        flat[solve] = np.minimum(
            _exact_numpy(q_n.reshape(-1)[solve], delta.reshape(-1)[solve], d), cap.reshape(-1)[solve]
        )
    return out


def effective_exact_spike(q, p, delta, divergence="kl"):
    r"""What the acceptance and the emitted law read of Theorem 2's root, on whole rows.

    .. math:: e_n = \min(\gamma_n, p_n) \ (p_n > 0), \qquad e_n = [\gamma_n > 0] \ (p_n = 0),

    with :math:`\gamma_n` = :func:`exact_spike` ``(q_n, delta, divergence)``
    (:meth:`cactus_theory.rules.plans.SpikePlan.effective_spike`). For the KL on numpy rows
    it is :func:`capped_exact_spike`, which solves the root only where it may lie below
    :math:`p_n`; otherwise (torch, or another divergence) every root is solved. The same
    floats either way (tested).

    Parameters
    ----------
    q, p : array, shape [..., V]
        Verifier and drafter rows (validated by the caller).
    delta : float
        Budget, >= 0.
    divergence : str or Divergence
        Any divergence of :mod:`cactus_theory.divergences`.

    Returns
    -------
    array, shape [..., V]
        :math:`e`, of ``q``'s kind and dtype.
    """
    d = get_divergence(divergence)
    if not (isinstance(q, np.ndarray) and d is DIVERGENCES["kl"]):
        xp = array_namespace(q, p)
        g = exact_spike(q, delta, d)
        return xp.where(p > 0, xp.minimum(g, p), xp.astype(g > 0, g.dtype))
    eff = capped_exact_unchecked(q, p, np.full(q.shape, float(delta)), d)
    # where p_n = 0: gamma_n >= q_n > 0 gives 1; where q_n = 0 too, the root decides
    zero_p = p == 0
    unsure = np.flatnonzero((zero_p & (q == 0)).reshape(-1))
    eff = np.where(zero_p & (q > 0), 1.0, eff)
    if unsure.size:
        flat = eff.reshape(-1)
        flat[unsure] = exact_spike(q.reshape(-1)[unsure], delta, d) > 0
    return eff


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


def _kl_at_one(s):
    """``kl_two_point(1, s)`` bit for bit (numpy): ``log1p((1 - s)/s)`` = log(1/s) for
    s >= 1e-280, the generic form below."""
    shape, s = np.shape(s), np.atleast_1d(s)
    normal = s >= KL_RATIO_FLOOR
    if bool(np.all(normal)):
        return np.log1p((1.0 - s) / s).reshape(shape)
    out = np.log1p((1.0 - s) / np.where(normal, s, 1.0))
    out[~normal] = DIVERGENCES["kl"].two_point(np.ones_like(s[~normal]), s[~normal])
    return out.reshape(shape)


def lambert_w(xp, z, steps: int = 2):
    r"""The principal branch :math:`W_0(z)` for z >= 0 (array API; :math:`W e^W = z`).

    Winitzki's start :math:`L(1 - \log(1 + L)/(2 + L))`, :math:`L = \log(1+z)` (within 1%
    of W for every z >= 0), then ``steps`` Halley steps (cubic: 1e-2, 1e-6, below rounding).
    The KL root's numpy start takes one Halley step without an exponential
    (:func:`_lambert_w_log_step`); scipy's
    ``lambertw`` is complex-valued and 10x slower.
    """
    L = xp.log1p(z)
    w = L * (1.0 - xp.log1p(L) / (2.0 + L))
    for _ in range(steps):
        ew = xp.exp(w)
        f = w * ew - z
        w = w - f / (ew * (w + 1.0) - (w + 2.0) * f / (2.0 * w + 2.0))
    return w


def _kl_start(xp, s, delta):
    r"""A starting point for the KL root: within a few 1e-6 of it (numpy) where it is small.

    Since :math:`(1-x)\log\frac{1-x}{1-s} \ge s - x`, the two-point KL is at least
    :math:`G_L(x) = x\log(x/s) - x + s`, whose root is
    :math:`x_L = (\delta - s)/W((\delta - s)/(e s))` (Lambert W): an upper bound of the root,
    sharp when it is small (relative error about :math:`x/(2\log(x/s))`: 8e-3 at the
    benchmark's rows). It is used where :math:`\delta > (1 + e) s`; elsewhere the root is
    near s and the Taylor point (Corollary 5) is the better start. Kept inside (s, 1).

    numpy sharpens it without an exponential (float64 ``exp`` has no SIMD loop here, ``log``
    has): W by one Halley step on :math:`w + \log(w/z) = 0` from Winitzki's point
    (:func:`_lambert_w_log_step`, 1e-2 to about 1e-6), then one Newton step on
    :math:`G_L + (x - s)^2/2`, the two-point KL to second order in x and s:
    :math:`x_L - (x_L - s)^2/(2(W + 1))`, since :math:`G_L'(x_L) = \log(x_L/s) = W + 1`. The
    result is within a few 1e-6 of the root at the benchmark's rows, so that one Halley step
    on the exact form lands within an ulp or two (:func:`_certified_numpy`). The step keeps
    the point above s: :math:`W \ge W(1)` gives :math:`x_L/s = e^{W+1} \ge 4.8`, and the
    factor is at least 0.68 where :math:`x_L < 1`. The torch path (a fixed Halley count)
    keeps :math:`x_L`.
    """
    z = (delta - s) / (math.e * s)
    far = z > 1.0
    if isinstance(s, np.ndarray):
        zf = np.maximum(z, 1.0)
        w = _lambert_w_log_step(zf, lambert_w(np, zf, steps=0))
        x = (delta - s) / w
        x = np.where(x < 1.0, x - (x - s) ** 2 / (2.0 * (w + 1.0)), 0.5 * (1.0 + s))
        near = np.flatnonzero(~far)
        if near.size:
            sn = s[near]
            xn = sn + np.sqrt(2.0 * delta[near] * sn * (1.0 - sn))
            x[near] = np.where(xn < 1.0, xn, 0.5 * (1.0 + sn))
        high = np.flatnonzero(x > 0.5)
        if high.size:
            x[high] = _kl_better_start(np, s[high], delta[high], x[high])
        return x
    x_l = (delta - s) / lambert_w(xp, xp.where(far, z, xp.ones_like(z)), steps=0)
    x = xp.where(far, x_l, s + xp.sqrt(2.0 * delta * s * (1.0 - s)))
    x = xp.where(x < 1.0, x, 0.5 * (1.0 + s))
    return xp.where(x > 0.5, _kl_better_start(xp, s, delta, x), x)


def _lambert_w_log_step(z, w):
    r"""One Halley step for :math:`W(z)`, z >= 1, on :math:`f(w) = w + \log(w/z)` (numpy):
    :math:`f' = (w+1)/w`, :math:`f'' = -1/w^2`, so
    :math:`w - f w / ((w + 1) + f/(2(w + 1)))`. One logarithm, no exponential."""
    f = w + np.log(w / z)
    w1 = w + 1.0
    return w - f * w / (w1 + f / (2.0 * w1))


def _kl_better_start(xp, s, delta, x):
    """Of x and :func:`_kl_start_near_one`, the point with the shorter Newton step."""
    y = _kl_start_near_one(xp, s, delta)
    out = []
    for pt in (x, y):
        a, b = kl_log_ratios(xp, pt, s)
        out.append(xp.abs((pt * a + (1.0 - pt) * b - delta) / (a - b)))
    return xp.where(out[1] < out[0], y, x)


def _kl_start_near_one(xp, s, delta):
    r"""A start for KL roots above 1/2: with v = 1 - x, :math:`L = -\log s`,
    :math:`g(1 - v) pprox L - v(K - \log v)`, :math:`K = L + 1 + \log(1 - s)`, so
    :math:`v = (L - \delta)/(K - \log v)`, solved by three fixed-point steps from
    :math:`v = (L - \delta)/K`; kept in (s, 1)."""
    big_l = -xp.log(s)
    k = big_l + 1.0 + xp.log1p(-s)
    r = xp.clip(big_l - delta, 1e-300, None)
    v = r / k
    for _ in range(3):
        v = r / xp.clip(k - xp.log(v), 1e-3, None)
    x = 1.0 - v
    return xp.where((x > s) & (x < 1.0), x, 0.5 * (1.0 + s))


def _kl_halley(xp, s, delta, x, g, slope, one_x):
    r"""One Halley step on :math:`g(x) = \delta` from x, given g(x), g'(x) and 1 - x.

    For x <= 1/2 the step is taken in x (:math:`g'' = 1/(x(1-x))` for the KL); above, in
    :math:`u = \log(1 - x)`, where the slope :math:`g'(x) \to \infty` as x -> 1 no longer
    slows it (:math:`dg/du = -g'(x)(1-x)`, :math:`d^2g/du^2 = (1-x)(1/x - g'(x))`); the new
    point is then :math:`1 - (1-x)e^{-\Delta u} < 1`. Kept strictly inside (s, 1) (halfway to
    the violated end otherwise).
    """
    f = g - delta
    step = f / slope
    new = x - step / (1.0 - 0.5 * step / (slope * x * one_x))
    if isinstance(x, np.ndarray):
        high = np.flatnonzero(x > 0.5)
        if high.size:
            new[high] = _halley_in_log_complement(np, f[high], slope[high], x[high], one_x[high])
    else:
        new = xp.where(x > 0.5, _halley_in_log_complement(xp, f, slope, x, one_x), new)
    inside = (new > s) & (new < 1.0)  # NaN fails too
    if isinstance(new, np.ndarray) and bool(np.all(inside)):
        return new
    return xp.where(inside, new, xp.where(new >= 1.0, 0.5 * (x + 1.0), 0.5 * (x + s)))


def _halley_in_log_complement(xp, f, slope, x, one_x):
    r"""The Halley step of :func:`_kl_halley` taken in :math:`u = \log(1 - x)`."""
    f1 = -slope * one_x
    f2 = one_x * (1.0 / x - slope)
    du = (f / f1) / (1.0 - 0.5 * f * f2 / (f1 * f1))
    return 1.0 - one_x * xp.exp(-du)


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


def _kl_evaluate(xp, x, s):
    """g, g' and 1 - x for the two-point KL: :func:`_kl_interior` (numpy; 1e-280 <= s < 1)
    or :func:`cactus_theory.divergences.kl_log_ratios` (torch; 0 < s < 1): both the floats
    of ``kl_two_point`` on their domain."""
    if isinstance(x, np.ndarray):
        return _kl_interior(x, s)
    a, b = kl_log_ratios(xp, x, s)
    one_x = 1.0 - x
    return x * a + one_x * b, a - b, one_x


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


#: The KL's iteration: Halley from the Lambert-W start. Halley is cubic: a last step below
#: 5e-6 of x - s leaves an error of order 1e-16 of it (an ulp or two: the walk finishes);
#: the torch count converges to 1e-7 relative from the start over q_n in [1e-38, 1), delta
#: in [1e-8, 300] (tested).
_KL_FORM = _Form(_kl_evaluate, lambda x, s: _kl_interior(x, s)[0], _kl_halley, _kl_start, 5e-6, 6, 6)
#: Floats walked from the last iterate to the sign change before the bisection fallback.
_WALK = 4


def _forms(d):
    """The iteration of divergence ``d`` (which has a derivative): the KL's own, else Newton."""
    return _KL_FORM if d is DIVERGENCES["kl"] else _generic_form(d, _derivative(d))


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
    ok = s >= KL_RATIO_FLOOR
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


def _host_tensor(t) -> bool:
    """True for a CPU tensor (its values can be read without a device synchronization)."""
    return t.device.type == "cpu"


def _host_root(q_n, delta, d):
    """The float64 root of a CPU tensor's entries by the numpy solver (:func:`_root_numpy`),
    as a float64 CPU tensor; NaN entries (rows the samplers flag invalid) are solved as 0."""
    import torch

    if isinstance(delta, torch.Tensor) or np.ndim(delta):
        d_in = delta.detach().to(torch.float64).numpy() if isinstance(delta, torch.Tensor) else delta
        d64 = np.broadcast_to(as_budget_array(d_in), tuple(q_n.shape))
    else:
        d64 = np.full(tuple(q_n.shape), as_budget_array(delta)[()])
    q = np.clip(np.nan_to_num(q_n.detach().to(torch.float64).numpy(), nan=0.0), 0.0, 1.0)
    return torch.from_numpy(_exact_numpy(q, np.ascontiguousarray(d64), d))


def device_root(q_n, delta, d):
    r""":func:`exact_spike`'s root of a torch tensor off the CPU (``d`` a resolved divergence
    with a derivative): :func:`_root_torch`'s float64 root rounded to ``q_n``'s dtype by
    :func:`_round_to_dtype`. Fixed operation counts and no data-dependent control flow, so
    it traces into one graph (the samplers' compiled kernel of the root,
    :mod:`cactus_theory.samplers._kernels.cactus`, compiles this function)."""
    return _round_to_dtype(_root_torch(q_n, delta, d), q_n, delta, d)


def has_device_root(d) -> bool:
    """True when divergence ``d`` (resolved) is solved by :func:`device_root` off the CPU
    (a built-in divergence with a derivative; TV and user generators bisect instead)."""
    return _derivative(d) is not None


def _root_torch(q_n, delta, d):
    r"""The certified iteration of :func:`exact_spike` in torch operations on ``q_n``'s
    device, in float64, with fixed counts (nothing reads the device).

    The form's start and ``torch_steps`` steps (Halley for the KL, Newton otherwise), each
    iterate tested against the budget to keep a bracket [lo, hi] (g(lo) <= delta < g(hi) as
    computed) and replaced by the bracket's midpoint where it leaves it; then hi less 1, 4
    and 32 ulps and lo plus one are tested (the pull-back: the iteration ends within an ulp
    or two of the root or within g's rounding noise), and float64 input bisects the floats
    between lo and hi 64 times (adjacent after at most 64; lower precision stops at the
    pull-back, far below its own ulp; :func:`_round_to_dtype` finishes it). Returns lo, the
    feasible end (float64); entries with a root known in advance (1, q_n) get it.
    """
    import torch

    s = torch.nan_to_num(q_n.detach(), nan=0.0).clamp(0.0, 1.0).to(torch.float64)
    dl = (
        delta.detach().to(torch.float64)
        if isinstance(delta, torch.Tensor)
        else torch.full_like(s, float(delta))
    )
    s, dl = torch.broadcast_tensors(s, dl)
    form = _forms(d)
    one = torch.ones_like(s)
    at_one = d.two_point(one, s)
    solve = (at_one > dl) & (dl > 0) & ((s > 0) | d.finite_off_support)
    s_, d_ = torch.where(solve, s, 0.25), torch.where(solve, dl, 0.1)  # safe stand-ins
    lo, hi = s_, one
    x = form.start(torch, s_, d_)
    for k in range(form.torch_steps + 1):
        g, slope, extra = form.evaluate(torch, x, s_)
        lo, hi = _update_bracket(torch, g <= d_, x, lo, hi)
        if k == form.torch_steps:
            break
        x = form.step(torch, s_, d_, x, g, slope, extra)
        x = torch.where((x > lo) & (x < hi), x, 0.5 * (lo + hi))
    # the pull-back, evaluated at once
    lo_b, hi_b = lo.view(torch.int64), hi.view(torch.int64)
    cands = torch.stack([hi_b - 32, hi_b - 4, hi_b - 1, lo_b + 1]).view(torch.float64)
    feas = form.evaluate(torch, cands, s_[None])[0] <= d_[None]
    for i in range(cands.shape[0]):
        lo, hi = _update_bracket(torch, feas[i], cands[i], lo, hi)
    if q_n.dtype == torch.float64:
        lo = _bisect_floats_torch(d.two_point, s_, d_, lo, hi)
    return torch.where(solve, lo, torch.where((at_one <= dl) & (dl > 0), one, s))


def _update_bracket(xp, feasible, x, lo, hi):
    """lo <- x where x is feasible and inside (lo, hi), hi <- x where infeasible and inside."""
    inside = (x > lo) & (x < hi)
    return xp.where(feasible & inside, x, lo), xp.where(~feasible & inside, x, hi)


#: Floats of the input dtype :func:`_round_to_dtype` steps down from the rounded root.
_DTYPE_WALK = 3


def _round_to_dtype(root, q_n, delta, d, host: bool = False):
    r"""The float64 root ``root`` as a root in ``q_n``'s dtype, feasible as computed there.

    Rounded toward q_n (never above the float64 root: within budget in exact arithmetic),
    then stepped down by up to :data:`_DTYPE_WALK` floats while the two-point form as
    computed by torch in the input dtype exceeds delta (the steps evaluated together, the
    first within budget kept; a Python delta compares in the input dtype, as a tensor of it
    would). Where none is within budget (a form noisier than that in a low precision), the
    floats between q_n (always feasible) and the last step are bisected
    (:func:`_bisect_floats_torch`): on every entry with a fixed count off the CPU, on those
    entries alone with ``host`` (CPU memory: reading it waits for no device). NaN entries of
    q_n give 0.

    With ``host``, float32 and float64 round and step in numpy on the tensors' memory (its
    rounding and ``nextafter`` are torch's bit for bit, at a quarter of torch's
    per-operation overhead on a [B, k] call) and call torch for the form alone.
    """
    import torch

    native = host and q_n.dtype in (torch.float32, torch.float64)
    q = q_n.detach().numpy() if native else q_n.detach()
    xp = array_namespace(q)
    q = xp.clip(xp.where(xp.isnan(q), xp.zeros_like(q), q), 0.0, 1.0)
    root = root.numpy() if native else root
    g = xp.astype(root, q.dtype)
    g = xp.maximum(xp.where(xp.astype(g, root.dtype) > root, xp.nextafter(g, q), g), q)
    steps = [g]
    for _ in range(_DTYPE_WALK):
        steps.append(xp.nextafter(steps[-1], q))
    cands = xp.stack(steps)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = ~(d.two_point(torch.as_tensor(cands), torch.as_tensor(q)) > delta)
    ok = ok.numpy() if native else ok  # a NaN form passes, as a step would
    g = cands[-1]
    for i in range(_DTYPE_WALK - 1, -1, -1):  # the first candidate within budget
        g = xp.where(ok[i], cands[i], g)
    bad = ~xp.any(ok, axis=0)
    if host and not bool(xp.any(bad)):
        return torch.as_tensor(g)
    q, g, last, bad = (torch.as_tensor(a) for a in xp.broadcast_arrays(q, g, cands[-1], bad))
    dl = delta.expand_as(q) if isinstance(delta, torch.Tensor) else torch.full_like(q, float(delta))
    if not host:
        return torch.where(bad, _bisect_floats_torch(d.two_point, q, dl, q, last), g)
    g = g.clone()
    g[bad] = _bisect_floats_torch(d.two_point, q[bad], dl[bad], q[bad], last[bad])
    return g


#: The signed integers whose bit patterns order the non-negative floats of each dtype.
_INT_VIEW = {"float64": "int64", "float32": "int32", "float16": "int16", "bfloat16": "int16"}


def _bisect_floats_torch(value, s, delta, lo, hi):
    """:func:`_bisect_floats` in torch with a fixed count: the number of bits of lo's dtype
    (enough to close any bracket in [0, 1]), on every entry; returns lo."""
    import torch

    ints = getattr(torch, _INT_VIEW[str(lo.dtype).removeprefix("torch.")])
    for _ in range(torch.finfo(lo.dtype).bits):
        lo_b, hi_b = lo.view(ints), hi.view(ints)
        mid = (lo_b + torch.div(hi_b - lo_b, 2, rounding_mode="floor")).view(lo.dtype)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ok = value(mid, s) <= delta
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    return lo


def _bisect(xp, d, q_n, delta, iterations):
    """The bracket [q_n, 1] after ``iterations`` halvings
    (:func:`cactus_theory._search.bisect_elementwise`); lo feasible."""
    return bisect_elementwise(
        xp, lambda mid: d.two_point(mid, q_n) <= delta, q_n, xp.ones_like(q_n), iterations
    )


def spike_scale(q_n, gamma):
    r"""Theorem 2's rescale factor :math:`c_n = (1-\gamma_n)/(1-q_n)`, 0 where ``q_n = 1``.

    The other tokens of the per-draft target are :math:`h^{(n)}_i = c_n q_i` (convention 4 of
    :mod:`cactus_theory.conventions` for ``q_n = 1``).
    """
    if not _is_torch(q_n):  # numpy / Python input: validated (torch: the samplers' path)
        q_n, gamma = as_unit_interval(q_n, "q_n"), as_unit_interval(gamma, "gamma")
    return spike_scale_unchecked(q_n, gamma)


def spike_scale_unchecked(q_n, gamma):
    r""":func:`spike_scale` without the input checks, for callers whose q_n and gamma already
    passed them (the exact analysis: validated q, gamma from a spike solver)."""
    xp = array_namespace(q_n, gamma)
    full = q_n >= 1.0
    denom = xp.where(full, xp.ones_like(q_n), 1.0 - q_n)
    return xp.where(full, xp.zeros_like(q_n), (1.0 - gamma) / denom)
