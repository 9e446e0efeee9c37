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

import numpy as np
from array_api_compat import array_namespace

from .._validation import _is_torch, as_count, as_unit_interval, spike_arguments
from ..divergences import DIVERGENCES, get_divergence

__all__ = ["taylor_spike", "exact_spike", "spike_scale", "METHODS"]

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
    bonus = xp.sqrt(2.0 * delta * q_n * (1.0 - q_n) / d.f_second_at_one)
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


def _g_kl(x, s):
    return x * np.log(x / s) + (1.0 - x) * np.log((1.0 - x) / (1.0 - s))


def _g_reverse_kl(x, s):
    return s * np.log(s / x) + (1.0 - s) * np.log((1.0 - s) / (1.0 - x))


def _g_chi2(x, s):
    return (x - s) ** 2 / (s * (1.0 - s))


def _g_neyman_chi2(x, s):
    return (x - s) ** 2 / x + (x - s) ** 2 / (1.0 - x)


def _g_hellinger(x, s):
    return 0.5 * ((np.sqrt(x) - np.sqrt(s)) ** 2 + (np.sqrt(1.0 - x) - np.sqrt(1.0 - s)) ** 2)


def _g_js(x, s):
    m, m1 = 0.5 * (x + s), 1.0 - 0.5 * (x + s)
    return 0.5 * (x * np.log(x / m) + s * np.log(s / m) + (1.0 - x) * np.log((1.0 - x) / m1)
                  + (1.0 - s) * np.log((1.0 - s) / m1))


#: Two-point divergences on the interior 0 < q_n < 1, q_n <= gamma < 1 (numpy), where no
#: zero needs a convention: what the numpy Newton iteration evaluates.
_G_INTERIOR = {
    "kl": _g_kl,
    "reverse_kl": _g_reverse_kl,
    "chi2": _g_chi2,
    "neyman_chi2": _g_neyman_chi2,
    "hellinger": _g_hellinger,
    "js": _g_js,
}

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


def exact_spike(q_n, delta, divergence="kl", *, iterations: int | None = None,
                method: str = "newton"):
    r"""Theorem 2: the largest :math:`\gamma \in [q_n, 1]` with two-point divergence <= delta.

    With :math:`s = q_n` and :math:`g(\gamma) = s f(\gamma/s) + (1-s) f((1-\gamma)/(1-s))`
    (convex, zero at :math:`\gamma = s`, hence increasing on :math:`[s, 1]`), the root of
    :math:`g(\gamma) = \delta` is found by a safeguarded Newton iteration started from the
    Taylor point (Corollary 5) and kept inside a bracket [lo, hi] with
    :math:`g(lo) \le \delta < g(hi)` as computed:

    * a Newton step from hi, :math:`hi - (g(hi)-\delta)/g'(hi)` with
      :math:`g'(\gamma) = f'(\gamma/s) - f'((1-\gamma)/(1-s))`; by convexity it lands in
      [root, hi] (the infeasible side);
    * where the Taylor point is feasible, one Newton step from it (right of the root by
      convexity, at least 8 ulps right of it) gives the first hi;
    * a step that is not finite or not strictly inside the bracket is replaced by the
      midpoint (bisection fallback), and each evaluated point replaces lo or hi according to
      its budget test as computed;
    * once Newton's step is within rounding noise, hi minus 1, 4 and 32 ulps are tested
      (pull-back) and bisection closes what is left.

    The iteration stops when lo and hi are adjacent floats and returns lo, so the returned
    gamma always satisfies the budget as evaluated in floating point. Divergences without a
    registered derivative (TV, user generators) use plain bisection (``method="bisect"``).

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
        ``"newton"`` (default): the safeguarded Newton iteration above, for the divergences
        with a derivative (all built-in ones but TV); ``"bisect"``: bisection on [q_n, 1], the
        reference the Newton path is tested against.

    Returns
    -------
    array, shape (...)
        gamma: 1 when the two-point divergence at 1 is within budget, ``q_n`` exactly when
        delta = 0, else the feasible end of the final bracket (divergence <= delta as computed).

    Notes
    -----
    numpy iterates only the entries not yet converged and stops when all are (torch float64
    tensors on the CPU go through the same numpy code, sharing memory); other torch runs a
    fixed number of steps (no host synchronization): 12 Newton steps, the pull-back, then 64
    bisection steps of the remaining bracket in float64 (6 and 32 in lower precision), so
    the result is resolved as finely as the plain bisection's even where Newton has not
    converged (gamma very close to 1, where the slope of the two-point form blows up and the
    safeguard bisects). On torch the Newton path therefore buys accuracy, not speed; the
    samplers evaluate it at the drafted tokens only (B x k scalars). Where the two-point
    divergence is infinite for every gamma > q_n (KL with q_n = 0) the result is q_n.
    """
    if method not in ("newton", "bisect"):
        raise ValueError(f"method: expected 'newton' or 'bisect', got {method!r}")
    d = get_divergence(divergence)
    q_n, delta = spike_arguments(q_n, delta)  # ValueError naming q_n / delta (numpy input)
    if iterations is not None:
        iterations = as_count(iterations, "iterations", minimum=0)
    xp, delta = _as_xp(q_n, delta)
    q_n, delta = xp.broadcast_arrays(q_n, delta)
    if (method == "newton" and not isinstance(q_n, np.ndarray) and "float64" in str(q_n.dtype)
            and getattr(getattr(q_n, "device", None), "type", None) == "cpu"):
        # torch float64 on the CPU (the analysis): the numpy active-set solver on the same
        # memory (no copy), the same bits as numpy input
        import torch

        out = torch.from_numpy(np.asarray(
            exact_spike(q_n.numpy(), delta.numpy(), d, iterations=iterations, method=method),
            dtype=np.float64))
        # feasible as torch computes the two-point form (its pow/sqrt may round differently
        # from numpy's): step the few entries that are not down by ulps, else to q_n
        for _ in range(4):
            bad = d.two_point(out, q_n) > delta
            out = torch.where(bad, torch.nextafter(out, q_n), out)
        return torch.where(d.two_point(out, q_n) > delta, q_n, out)
    is_np = isinstance(q_n, np.ndarray)
    if is_np:
        q_n, delta = np.array(q_n, dtype=np.float64), np.asarray(delta, dtype=np.float64)
    low_precision = "float64" not in str(q_n.dtype)
    if iterations is None:
        iterations = 32 if low_precision else 64
    fprime = _F_PRIME.get(d.name) if DIVERGENCES.get(d.name) is d else None
    newton = method == "newton" and fprime is not None
    one = xp.ones_like(q_n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_one = d.two_point(one, q_n)
        if is_np:
            # numpy: solve only the entries whose root is not known in advance (capped at 1,
            # delta = 0, or q_n = 0 under a divergence that charges +inf off supp(q)).
            gamma = np.where(at_one <= delta, 1.0, q_n)
            active = (at_one > delta) & (delta > 0) & ((q_n > 0) | d.finite_off_support)
            if np.any(active):
                s, dl = q_n[active], delta[active]
                if newton:
                    gamma[active] = _newton_numpy(d, fprime, s, dl, at_one[active])
                else:
                    gamma[active] = _bisect(np, d, s, dl, iterations)[0]
            return gamma
        if newton:
            n_newton, n_bisect = (6, 32) if low_precision else (12, 64)
            gfun = d.two_point
            lo, hi, g_hi = _taylor_bracket(xp, gfun, fprime, d.f_second_at_one, q_n, delta,
                                           at_one)
            lo, hi = _newton_steps(xp, gfun, fprime, q_n, delta, lo, hi, g_hi, n_newton)[:2]
            lo, hi = _pullback(xp, gfun, q_n, delta, lo, hi)
            lo = _bisect(xp, d, q_n, delta, n_bisect, lo, hi)[0]
        else:
            lo = _bisect(xp, d, q_n, delta, iterations)[0]
    gamma = xp.where(at_one <= delta, one, lo)
    return xp.where(delta == 0, q_n, gamma)


def _newton_from(xp, fprime, s, x, g):
    r"""The Newton point :math:`x - (g(x) - \delta)/g'(x)`; ``g`` is the excess g(x) - delta."""
    slope = fprime(xp, x / s) - fprime(xp, (1.0 - x) / (1.0 - s))
    return x - g / slope


def _eps(x):
    """Machine epsilon of x's dtype (float64, else float32's: torch samplers)."""
    return 2.0 ** -52 if "float64" in str(x.dtype) else 2.0 ** -23


def _update(xp, gfun, s, delta, lo, hi, g_hi, x):
    """Replace lo or hi (and g(hi) - delta) by ``x`` by its budget test as computed (if inside)."""
    g = gfun(x, s) - delta
    feas = g <= 0
    lo = xp.where(feas & (x > lo), x, lo)
    down = ~feas & (x < hi)
    return lo, xp.where(down, x, hi), xp.where(down, g, g_hi)


def _taylor_bracket(xp, gfun, fprime, f2, s, delta, at_one):
    """The bracket [lo, hi] (g(lo) <= delta < g(hi) as computed) from Corollary 5's point.

    Starts from [s, 1] and the Taylor point x0; when x0 is feasible, one Newton step from it
    (which by convexity lands right of the root) becomes the right end when infeasible.
    Returns lo, hi and g(hi) - delta.
    """
    lo, hi = s, xp.ones_like(s)
    x0 = xp.clip(s + xp.sqrt(2.0 * delta * s * (1.0 - s) / f2), s, hi)
    g0 = gfun(x0, s) - delta
    feas = g0 <= 0
    lo, hi, g_hi = xp.where(feas, x0, lo), xp.where(feas, hi, x0), xp.where(feas, at_one - delta, g0)
    # at least a few ulps right of x0: where x0 is the root to rounding (chi-square's Taylor
    # point is exact) the Newton step alone would not leave the noise
    x1 = xp.maximum(_newton_from(xp, fprime, s, x0, g0), x0 * (1.0 + 8.0 * _eps(x0)))
    x1 = xp.where(feas & (x1 > lo) & (x1 < hi), x1, hi)
    return _update(xp, gfun, s, delta, lo, hi, g_hi, x1)


def _newton_steps(xp, gfun, fprime, s, delta, lo, hi, g_hi, steps):
    """``steps`` safeguarded Newton steps from hi (midpoint when the step leaves (lo, hi)).

    Returns lo, hi, g(hi) - delta and ``stalled``: the last Newton step was valid and moved
    hi by at most 8 ulps (g(hi) is within rounding noise of delta).
    """
    stalled = None
    for _ in range(steps):
        x = _newton_from(xp, fprime, s, hi, g_hi)
        valid = (x > lo) & (x < hi)   # NaN and inf fail the test
        eps = _eps(hi)
        # within noise: a step of at most 8 ulps, or g(hi) within 64 eps of the budget's scale
        stalled = valid & (((hi - x) <= 8.0 * eps * hi) | (g_hi <= 64.0 * eps * (delta + 1e-8)))
        x = xp.where(valid, x, 0.5 * (lo + hi))
        lo, hi, g_hi = _update(xp, gfun, s, delta, lo, hi, g_hi, x)
    return lo, hi, g_hi, stalled


#: Pull-back offsets (in units of hi's spacing) tried once Newton has converged from the right.
_PULLBACK_ULPS = (1.0, 4.0, 32.0)


def _pullback(xp, gfun, s, delta, lo, hi, step=None):
    """Test hi minus twice the last Newton ``step`` and minus a few ulps.

    Newton ends right of the root, within its last step's square (quadratic convergence) or
    within rounding noise: these points are feasible and close, so few halvings remain.
    """
    ulp = hi * _eps(hi)
    g_hi = xp.zeros_like(hi)  # not used after the pull-back
    if step is not None:
        lo, hi, g_hi = _update(xp, gfun, s, delta, lo, hi, g_hi, hi - 2.0 * step)
    for k in _PULLBACK_ULPS[::-1]:
        lo, hi, g_hi = _update(xp, gfun, s, delta, lo, hi, g_hi, hi - k * ulp)
    return lo, hi


def _finish_numpy(gfun, s, delta, lo, hi, step=None):
    """Pull-back, then bisection of the still-open brackets to adjacent floats (numpy)."""
    lo, hi = _pullback(np, gfun, s, delta, lo, hi, step)
    idx = np.flatnonzero(hi > np.nextafter(lo, np.inf))
    s, delta, lo_o, hi_o = s[idx], delta[idx], lo[idx], hi[idx]
    for _ in range(64):
        if idx.size == 0:
            break
        lo_o, hi_o, _g = _update(np, gfun, s, delta, lo_o, hi_o, hi_o, 0.5 * (lo_o + hi_o))
        lo[idx] = lo_o
        keep = hi_o > np.nextafter(lo_o, np.inf)
        idx, s, delta, lo_o, hi_o = idx[keep], s[keep], delta[keep], lo_o[keep], hi_o[keep]
    return lo


def _newton_numpy(d, fprime, s, delta, at_one, max_steps: int = 16):
    """numpy driver: Newton on the entries still moving, pull-back, bisection to adjacency.

    Where an interior closed form of the two-point divergence exists (built-in divergences,
    1e-280 < q_n < 1) the iteration uses it (no special-case masks: 3x cheaper); the result is
    then re-tested with ``d.two_point`` and the few entries that fail (one rounding apart)
    are pulled back and bisected with it, so the returned gamma is feasible as
    ``d.two_point`` computes it.
    """
    interior = _G_INTERIOR.get(d.name)
    if interior is None:
        return _newton_numpy_with(d, d.two_point, fprime, s, delta, at_one, max_steps)
    # the interior forms divide by q_n: keep ratios below ~1e280 (no overflow), else generic
    ok = (s > 1e-280) & (s < 1)
    out = np.empty_like(s)
    out[ok] = _newton_numpy_with(d, interior, fprime, s[ok], delta[ok], at_one[ok], max_steps)
    if not np.all(ok):
        out[~ok] = _newton_numpy_with(d, d.two_point, fprime, s[~ok], delta[~ok], at_one[~ok],
                                      max_steps)
    return out


def _newton_numpy_with(d, gfun, fprime, s, delta, at_one, max_steps):
    """The numpy driver of :func:`_newton_numpy` with the two-point form ``gfun``."""
    fast = gfun is not d.two_point
    s_all, delta_all = s, delta
    lo, hi, g_hi = _taylor_bracket(np, gfun, fprime, d.f_second_at_one, s, delta, at_one)
    idx = np.arange(s.shape[0])
    out_lo, out_hi, out_step = lo.copy(), hi.copy(), np.zeros_like(lo)
    for _ in range(max_steps):
        old_hi = hi
        lo, hi, g_hi, stalled = _newton_steps(np, gfun, fprime, s, delta, lo, hi, g_hi, 1)
        # done: Newton's step from hi is within rounding noise, or the bracket is within
        # 64 ulps (the pull-back and a few halvings finish both)
        moving = ~stalled & ((hi - lo) > 64.0 * np.spacing(hi))
        if not np.all(moving):
            done = ~moving
            out_lo[idx[done]], out_hi[idx[done]] = lo[done], hi[done]
            out_step[idx[done]] = old_hi[done] - hi[done]
            idx, s, delta = idx[moving], s[moving], delta[moving]
            lo, hi, g_hi = lo[moving], hi[moving], g_hi[moving]
        if idx.size == 0:
            break
    out_lo[idx], out_hi[idx] = lo, hi
    lo = _finish_numpy(gfun, s_all, delta_all, out_lo, out_hi, out_step)
    if fast:
        bad = np.flatnonzero(d.two_point(lo, s_all) > delta_all)
        if bad.size:
            # the iterate is a float away from the generic form's root: restart its bracket
            # at [q_n, lo] and finish with the generic form
            lo[bad] = _finish_numpy(d.two_point, s_all[bad], delta_all[bad], s_all[bad].copy(),
                                    lo[bad])
    return lo


def _bisect(xp, d, q_n, delta, iterations, lo=None, hi=None):
    """The bracket [lo, hi] (default [q_n, 1]) after ``iterations`` halvings; lo feasible."""
    lo = q_n if lo is None else lo
    hi = xp.ones_like(q_n) if hi is None else hi
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        ok = d.two_point(mid, q_n) <= delta
        lo = xp.where(ok, mid, lo)
        hi = xp.where(ok, hi, mid)
    return lo, hi


def spike_scale(q_n, gamma):
    r"""Theorem 2's rescale factor :math:`c_n = (1-\gamma_n)/(1-q_n)`, 0 where ``q_n = 1``.

    The other tokens of the per-draft target are :math:`h^{(n)}_i = c_n q_i` (convention 4 of
    :mod:`cactus_theory.conventions` for ``q_n = 1``).
    """
    if not _is_torch(q_n):  # numpy / Python input: validated (torch: the samplers' path)
        q_n, gamma = as_unit_interval(q_n, "q_n"), as_unit_interval(gamma, "gamma")
    xp = array_namespace(q_n, gamma)
    full = q_n >= 1.0
    denom = xp.where(full, xp.ones_like(q_n), 1.0 - q_n)
    return xp.where(full, xp.zeros_like(q_n), (1.0 - gamma) / denom)
