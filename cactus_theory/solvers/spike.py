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

from .._threads import in_chunks
from .._validation import (_is_torch, as_budget_array, as_count, as_unit_interval,
                           spike_arguments)
from ..divergences import DIVERGENCES, KL_RATIO_FLOOR, get_divergence, kl_log_ratios

__all__ = ["taylor_spike", "exact_spike", "capped_exact_spike",
           "spike_scale", "lambert_w", "METHODS"]

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
    b = np.log1p(-dx / c)                     # (s - x)/(1 - s): negation is exact
    one_x = 1.0 - x
    up = np.flatnonzero(dx > 0.5 * c)
    if up.size:
        b[up] = np.log(one_x[up] / c[up])
    return x * a + one_x * b, a - b, one_x


def _kl_interior_torch(x, s):
    r"""``kl_two_point(torch, x, s)`` bit for bit where :math:`10^{-30} \le s \le x < 1`
    (float32 and float64 tensors; tested): the same operations on the same full-size
    tensors, without the masks for zeros, ones and tiny ratios, so a third of the
    operations (the host root's feasibility test on [B, k] candidates is overhead-bound)."""
    import torch

    dx = x - s
    c = 1.0 - s
    a = torch.log1p(dx / s)
    upper = dx > 0.5 * c
    b = torch.where(upper, torch.log(torch.where(upper, 1.0 - x, 1.0) / c),
                    torch.log1p(torch.where(upper, 0.0, s - x) / c))
    return x * a + (1.0 - x) * b


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
#: zero needs a convention: what the numpy Newton iteration evaluates (the KL has its own
#: path, :func:`_kl_root_numpy`, on :func:`_kl_interior`).
_G_INTERIOR = {
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

    The KL (the paper's divergence) has its own numpy path, 8x faster: a start from Lambert
    W (the root of a lower bound of the two-point KL, sharp for small roots, sharpened by
    a second-order step; the Taylor point near q_n), one Halley step
    (:math:`g'' = 1/(\gamma(1-\gamma))`; in :math:`\log(1-\gamma)` above 1/2), more for
    the entries whose last step exceeded 5e-6 of :math:`\gamma - q_n`, then a
    certificate: :math:`g(\gamma) \le \delta < g(\gamma^+)` for the next float
    :math:`\gamma^+`, as :func:`cactus_theory.divergences.kl_two_point` computes g (its
    log1p form is accurate to a few ulps where gamma is small). Entries a float or two off
    walk to the sign change; anything else goes through a bracketed Newton-bisection. The
    result is the same certified adjacency as above.

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
    numpy iterates only the entries not yet converged and stops when all are; arrays of at
    least 2 x :data:`PARALLEL_MIN` entries are solved in chunks on up to 8 threads (the
    same floats as one call, tested). torch tensors
    on the CPU (any float dtype) go through the same numpy code in float64 (sharing memory for
    float64); the root is rounded toward q_n in the input dtype, stepped down while the
    two-point form as computed in that dtype exceeds delta, and bisected in that dtype where
    three ulps do not suffice (NaN entries, rows the samplers flag invalid, give 0). KL on
    torch float32, bf16 or fp16 off the CPU computes the root in float64 with a fixed Halley
    count and the same stepping down (q_n where three ulps do not suffice). Other torch off
    the CPU runs a fixed number of steps (no host synchronization): 12 Newton steps, the pull-back, then 64
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
    if method == "newton" and _is_torch(q_n) and _host_tensor(q_n):
        return _root_on_host(q_n, delta, d)
    xp, delta = _as_xp(q_n, delta)
    q_n, delta = xp.broadcast_arrays(q_n, delta)
    is_np = isinstance(q_n, np.ndarray)
    if is_np:
        q_n, delta = np.array(q_n, dtype=np.float64), np.asarray(delta, dtype=np.float64)
    low_precision = "float64" not in str(q_n.dtype)
    if iterations is None:
        iterations = 32 if low_precision else 64
    if is_np:
        return _exact_numpy(q_n, delta, d, method, iterations)
    fprime = _F_PRIME.get(d.name) if DIVERGENCES.get(d.name) is d else None
    newton = method == "newton" and fprime is not None
    one = xp.ones_like(q_n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_one = d.two_point(one, q_n)
        if newton and low_precision and d is DIVERGENCES["kl"]:
            lo = _kl_root_torch_low_precision(q_n, delta, at_one)
        elif newton:
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


#: The chi-square bound's share of the bonus :func:`capped_exact_spike` trusts: 0.1% below
#: the bound, far more than the rounding of the root as computed (see there).
CAP_SCREEN_SHARE = 0.999
#: ... where the bonus is at least this fraction of q_n (below it, only caps <= q_n pass).
CAP_SCREEN_MIN_BONUS = 2.0 ** -30


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
        raise ValueError(f"delta: shape {np.shape(delta)} does not broadcast to q_n's shape "
                         f"{q_n.shape}") from None
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
        flat[solve] = np.minimum(_exact_numpy(q_n.reshape(-1)[solve],
                                              delta.reshape(-1)[solve], d),
                                 cap.reshape(-1)[solve])
    return out


#: Arrays of at least twice this many entries are solved in chunks on threads
#: (:func:`cactus_theory._threads.in_chunks`, each chunk at least this long).
PARALLEL_MIN = 16384
#: ... and no chunk longer than this: the iteration's float64 temporaries of one chunk
#: (256 KiB each) stay in a core's L2 cache; whole halves of a 151,936-entry row do not
#: (20.4 against 16.5 ms, alternated calls in one process).
ROOT_BLOCK = 32768


def _exact_numpy(q_n, delta, d, method="newton", iterations=64, split: bool = True):
    """:func:`exact_spike` on float64 numpy arrays of one shape, already validated (the
    public function's numpy body; the samplers' host root calls it directly).

    Every entry's root depends on its own (q_n, delta) only, so a large array is solved in
    contiguous chunks of at most :data:`ROOT_BLOCK` entries on threads
    (:func:`~cactus_theory._threads.in_chunks`; numpy's ufuncs release the GIL): the same
    floats as one call."""
    if split and q_n.size >= 2 * PARALLEL_MIN:
        flat_q, flat_d = q_n.reshape(-1), np.broadcast_to(delta, q_n.shape).reshape(-1)
        out = np.empty(flat_q.shape)

        def solve(lo, hi):
            out[lo:hi] = _exact_numpy(flat_q[lo:hi], flat_d[lo:hi], d, method, iterations,
                                      split=False)

        in_chunks(solve, flat_q.size, PARALLEL_MIN, ROOT_BLOCK)
        return out.reshape(q_n.shape)
    fprime = _F_PRIME.get(d.name) if DIVERGENCES.get(d.name) is d else None
    newton = method == "newton" and fprime is not None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_one = (_kl_at_one(q_n) if d is DIVERGENCES["kl"]
                  else d.two_point(np.ones_like(q_n), q_n))
        # solve only the entries whose root is not known in advance (capped at 1, delta = 0,
        # or q_n = 0 under a divergence that charges +inf off supp(q)).
        active = (at_one > delta) & (delta > 0) & ((q_n > 0) | d.finite_off_support)
        if newton and bool(np.all(active)):
            return _newton_numpy(d, fprime, q_n.ravel(), delta.ravel(),
                                 at_one.ravel()).reshape(q_n.shape)
        gamma = np.where(at_one <= delta, 1.0, q_n)
        if np.any(active):
            s, dl = q_n[active], delta[active]
            if newton:
                gamma[active] = _newton_numpy(d, fprime, s, dl, at_one[active])
            else:
                gamma[active] = _bisect(np, d, s, dl, iterations)[0]
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
    if d.name == "kl":        # its own path: Halley from a Lambert-W start, certified
        def solve(s_, d_, a_):
            return _kl_root_numpy(s_, d_)
    elif d.name in _G_INTERIOR:
        def solve(s_, d_, a_):
            return _newton_numpy_with(d, _G_INTERIOR[d.name], fprime, s_, d_, a_, max_steps)
    else:
        return _newton_numpy_with(d, d.two_point, fprime, s, delta, at_one, max_steps)
    # the interior forms divide by q_n: keep ratios below ~1e280 (no overflow), else generic
    ok = (s >= KL_RATIO_FLOOR) & (s < 1)
    if np.all(ok):
        return solve(s, delta, at_one)
    out = np.empty_like(s)
    out[ok] = solve(s[ok], delta[ok], at_one[ok])
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
    on the exact form lands within an ulp or two (:func:`_kl_root_numpy`). The step keeps
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
            new[high] = _halley_in_log_complement(np, f[high], slope[high], x[high],
                                                  one_x[high])
    else:
        new = xp.where(x > 0.5, _halley_in_log_complement(xp, f, slope, x, one_x), new)
    inside = (new > s) & (new < 1.0)          # NaN fails too
    if isinstance(new, np.ndarray) and bool(np.all(inside)):
        return new
    return xp.where(inside, new, xp.where(new >= 1.0, 0.5 * (x + 1.0), 0.5 * (x + s)))


def _halley_in_log_complement(xp, f, slope, x, one_x):
    r"""The Halley step of :func:`_kl_halley` taken in :math:`u = \log(1 - x)`."""
    f1 = -slope * one_x
    f2 = one_x * (1.0 / x - slope)
    du = (f / f1) / (1.0 - 0.5 * f * f2 / (f1 * f1))
    return 1.0 - one_x * xp.exp(-du)


#: A Halley step of at most this, relative to the bonus x - s, is the last: Halley is
#: cubic, so the error it leaves is of order the cube, 1e-16 of the bonus (an ulp or two:
#: the walk below finishes).
_KL_STEP_TOL = 5e-6
#: Floats walked from Halley's last iterate before the bracketed fallback.
_KL_WALK = 4
#: Extra Halley steps for the entries still moving after the first ``halley_steps``.
_KL_MORE_STEPS = 6


def _next_up(x):
    """``nextafter(x, +inf)`` for positive finite float64 x (the bit pattern plus one; 6x
    cheaper than ``np.nextafter``)."""
    return (x.view(np.int64) + 1).view(np.float64)


def _next_down(x):
    """``nextafter(x, 0)`` for positive finite float64 x."""
    return (x.view(np.int64) - 1).view(np.float64)


def _kl_root_numpy(s, delta, halley_steps: int = 1):
    r"""The exact KL root (Theorem 2) for 1e-280 <= s < 1, delta > 0, root < 1 (numpy).

    ``halley_steps`` Halley steps from :func:`_kl_start` on all entries (more, up to
    ``_KL_MORE_STEPS``, for those whose last step exceeded ``_KL_STEP_TOL`` of x - s: the
    scale of the bonus, so that roots near s, started from the Taylor point, take a second
    step), then a certificate:
    gamma is returned when :math:`g(\gamma) \le \delta < g(\gamma^+)` with :math:`\gamma^+`
    the next float, g as :func:`cactus_theory.divergences.kl_two_point` computes it (so the
    returned gamma is feasible, and the next float is not). Entries one float off move by
    one float and are tested again; the rest (a noisy g where :math:`\delta \ll s`, roots
    near 1) go through :func:`_kl_bracketed`, started from the bracket the tests found.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = 1.0 - s
        x = _kl_start(np, s, delta)
        for _ in range(halley_steps):
            x, moved = _kl_halley(np, s, delta, x, *_kl_interior(x, s, c)), x
        # Halley is cubic: a last step below 5e-6 of x - s leaves an error of order 1e-16 of
        # it; the entries still moving more (a poorer start) take more steps, on their own
        idx = np.flatnonzero(np.abs(x - moved) > _KL_STEP_TOL * (x - s))
        for _ in range(_KL_MORE_STEPS):
            if idx.size == 0:
                break
            x_i, s_i, d_i = x[idx], s[idx], delta[idx]
            new = _kl_halley(np, s_i, d_i, x_i, *_kl_interior(x_i, s_i))
            x[idx] = new
            idx = idx[np.abs(new - x_i) > _KL_STEP_TOL * (new - s_i)]
        up = _next_up(x)
        feas_x = _kl_interior(x, s, c)[0] <= delta
        feas_up = _kl_interior(up, s, c)[0] <= delta
        bad = np.flatnonzero(~feas_x | feas_up)
        if bad.size == 0:
            return x
        out = x.copy()
        # a few floats off (Halley's last step is exact to the rounding of g): walk down from
        # an infeasible x, up from a feasible x+, one float at a time
        down = ~feas_x[bad]
        cur = np.where(down, x[bad], up[bad])     # tested: infeasible (down) / feasible (up)
        s_b, d_b = s[bad], delta[bad]
        for _ in range(_KL_WALK):
            # the neighbouring float: the bit pattern -1 (down) or +1 (up), for 0 < cur < 1
            cand = (cur.view(np.int64) + np.where(down, -1, 1)).view(np.float64)
            feas = _kl_interior(cand, s_b)[0] <= d_b
            done = feas == down                    # down: cand feasible; up: cand infeasible
            out[bad[done]] = np.where(down, cand, cur)[done]
            keep = ~done
            bad, down, cur, s_b, d_b = bad[keep], down[keep], cand[keep], \
                s_b[keep], d_b[keep]
            if bad.size == 0:
                return out
        # the rest (a noisy g): bracketed Newton from the last tested float
        lo = np.where(down, s_b, cur)
        hi = np.where(down, cur, 1.0)
        out[bad] = _kl_bracketed(s_b, d_b, lo, hi, np.where(down, np.nextafter(cur, 0.0),
                                                           np.nextafter(cur, 2.0)))
    return out


#: Halley steps of the torch float32 KL path (in float64): converged to 1e-7 relative from
#: :func:`_kl_start` over q_n in [1e-38, 1), delta in [1e-8, 300] (tested).
_KL_TORCH_STEPS = 6
#: float32 ulps the torch path steps down when the rounded root is infeasible as computed.
_KL_TORCH_WALK = 3


def _host_tensor(t) -> bool:
    """True for a CPU tensor (its values can be read without a device synchronization)."""
    return t.device.type == "cpu"


def _root_on_host(q_n, delta, d, numpy_steps: bool = True):
    r"""CPU torch tensors (the samplers' drafted tokens, the analysis): the float64 numpy root.

    The root of the float64 solver (any divergence) on the same values, rounded toward q_n
    (never above the float64 root: within budget in exact arithmetic), then stepped down by
    up to ``_KL_TORCH_WALK`` ulps while the two-point form as computed in the input dtype
    (by torch) exceeds delta (the steps evaluated together), and bisected between q_n
    (always feasible) and that point in the input dtype where the form is noisier than
    that. NaN entries (rows the samplers flag invalid) are solved as 0. A CPU tensor can be
    read without synchronizing with a device, so the numpy solver's data-dependent loop is
    allowed here.

    float32 and float64 (the samplers' q_n is float32) round and step in numpy, whose
    ``nextafter`` and rounding are torch's bit for bit, and call torch once, for the form
    as computed: a [B, k] call is a few hundred microseconds of small-array overhead, and
    torch's per-operation overhead is about 4x numpy's. bf16 and fp16, which numpy lacks,
    take the same steps in torch, with the generic two-point form (as all dtypes do with
    ``numpy_steps=False``, the reference the tests compare with).
    """
    import torch

    if isinstance(delta, torch.Tensor) or np.ndim(delta):
        d_in = delta.detach().to(torch.float64).numpy() if isinstance(delta, torch.Tensor) \
            else delta
        d64 = np.broadcast_to(as_budget_array(d_in), tuple(q_n.shape))
    else:
        d64 = np.full(tuple(q_n.shape), as_budget_array(delta)[()])
    # the steps in numpy where it has the dtype (its rounding and nextafter are torch's bit
    # for bit, at a quarter of torch's per-operation overhead), else in torch
    native = numpy_steps and q_n.dtype in (torch.float32, torch.float64)
    q = q_n.detach().numpy() if native else q_n.detach()
    xp = array_namespace(q)
    q = xp.asarray(xp.clip(xp.where(xp.isnan(q), 0.0, q), 0.0, 1.0))   # NaN rows: as 0
    root = xp.asarray(_exact_numpy(np.asarray(xp.astype(q, xp.float64)), d64, d))
    g = xp.astype(root, q.dtype)
    g = xp.maximum(xp.where(xp.astype(g, xp.float64) > root, xp.nextafter(g, q), g), q)
    steps = [g]
    for _ in range(_KL_TORCH_WALK):
        steps.append(xp.nextafter(steps[-1], q))
    cands = xp.stack(steps)
    qd_t, cands_t = torch.as_tensor(q), torch.as_tensor(cands)     # numpy's memory, shared
    # the walk down, evaluated at once: g and the next _KL_TORCH_WALK floats toward q_n,
    # the first whose form as computed is within budget (one evaluation of the form instead
    # of one per step: the same result). A Python delta compares in the input dtype, as a
    # tensor of it would; a NaN form passes, as a step did. The KL's interior form (float32
    # and float64 only: float16 takes a difference of logarithms there) where every entry
    # lies in its domain, else the generic one, which numpy_steps=False always takes.
    if (native and d is DIVERGENCES["kl"] and bool(xp.all(q >= 1e-30))
            and bool(xp.all(steps[0] < 1.0))):
        form = _kl_interior_torch(cands_t, qd_t)
    else:
        form = d.two_point(cands_t, qd_t)
    ok = ~(form > delta)
    ok = xp.asarray(ok.numpy()) if native else ok
    first = xp.argmax(xp.astype(ok, xp.uint8), axis=0)
    g = torch.as_tensor(xp.take_along_axis(cands, first[None, ...], axis=0)[0])
    bad = torch.as_tensor(~xp.any(ok, axis=0))
    if not bool(bad.any()):
        return g
    # a form noisier than a few ulps in this dtype: bisect [q_n, g] on those entries
    g = torch.where(bad, cands_t[-1], g)
    delta = delta if hasattr(delta, "shape") else torch.full_like(qd_t, delta)
    steps = 64 if qd_t.dtype == torch.float64 else 32 if qd_t.dtype == torch.float32 else 16
    lo, hi = _bisect(torch, d, qd_t[bad], delta.expand_as(qd_t)[bad], steps, qd_t[bad], g[bad])
    g[bad] = lo
    return g


def _kl_root_torch_low_precision(q_n, delta, at_one):
    r"""The KL root for torch float32/bf16/fp16 off the CPU (CUDA: no host sync).

    The root is computed in float64 (:func:`_kl_start` and ``_KL_TORCH_STEPS`` Halley steps,
    a fixed count, so nothing reads the device; CPU tensors take
    :func:`_root_on_host`), rounded to the input dtype, and
    stepped down by up to ``_KL_TORCH_WALK`` ulps until the two-point KL as computed in that
    dtype is within delta; q_n (always feasible) where it still is not. So the result is
    feasible as computed, and within a few ulps of the exact root. Entries with a root of
    1, delta = 0 or q_n outside [1e-280, 1) are set by the caller.
    """
    import torch

    kl = DIVERGENCES["kl"]
    s64, d64 = q_n.to(torch.float64), delta.to(torch.float64)
    solve = (at_one > delta) & (delta > 0) & (q_n > 0) & (q_n < 1)
    s_safe = torch.where(solve, s64, torch.full_like(s64, 0.25))
    d_safe = torch.where(solve, d64, torch.full_like(d64, 0.1))
    x = _kl_start(torch, s_safe, d_safe)
    for _ in range(_KL_TORCH_STEPS):
        a, b = kl_log_ratios(torch, x, s_safe)
        x = _kl_halley(torch, s_safe, d_safe, x, x * a + (1.0 - x) * b, a - b, 1.0 - x)
    gamma = torch.where(solve, torch.maximum(x.to(q_n.dtype), q_n), q_n)
    for _ in range(_KL_TORCH_WALK):
        bad = kl.two_point(gamma, q_n) > delta
        gamma = torch.where(bad, torch.nextafter(gamma, q_n), gamma)
    return torch.where(kl.two_point(gamma, q_n) > delta, q_n, gamma)


def _kl_bracketed(s, delta, lo, hi, x=None, max_steps: int = 2000):
    r"""Safeguarded Newton on the KL root inside [lo, hi] (g(lo) <= delta < g(hi) as
    computed) until lo and hi are adjacent floats; returns lo.

    Each step evaluates one point strictly inside the bracket: the Newton point from the
    last point, pulled by two of its own steps (at least one ulp) to the other side of the
    root once Newton has converged from one side; the geometric (then arithmetic) midpoint
    when the Newton point is outside the bracket. Loops on the open brackets only.
    """
    out = lo.copy()
    idx = np.arange(s.shape[0])
    if x is None:
        x = np.where((lo > 0) & (hi > 4.0 * lo), np.sqrt(lo * hi), 0.5 * (lo + hi))
    for _ in range(max_steps):
        open_ = hi > np.nextafter(lo, 2.0)
        if not np.all(open_):
            out[idx] = lo
            idx, s, delta, lo, hi, x = (a[open_] for a in (idx, s, delta, lo, hi, x))
        if idx.size == 0:
            return out
        x = np.where((x > lo) & (x < hi), x, 0.5 * (lo + hi))
        g, slope, _ = _kl_interior(x, s)
        f = g - delta
        feas = f <= 0
        lo, hi = np.where(feas, x, lo), np.where(feas, hi, x)
        step = f / slope
        prop = x - step
        ulp = np.spacing(x)
        prop = np.where(~feas & (step <= 2.0 * ulp), x - np.maximum(2.0 * step, ulp), prop)
        prop = np.where(feas & (-step <= 2.0 * ulp), x + np.maximum(-2.0 * step, ulp), prop)
        mid = np.where((lo > 0) & (hi > 4.0 * lo), np.sqrt(lo * hi), 0.5 * (lo + hi))
        x = np.where((prop > lo) & (prop < hi), prop, mid)
    out[idx] = lo
    return out


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
    return spike_scale_unchecked(q_n, gamma)


def spike_scale_unchecked(q_n, gamma):
    r""":func:`spike_scale` without the input checks, for callers whose q_n and gamma already
    passed them (the exact analysis: validated q, gamma from a spike solver)."""
    xp = array_namespace(q_n, gamma)
    full = q_n >= 1.0
    denom = xp.where(full, xp.ones_like(q_n), 1.0 - q_n)
    return xp.where(full, xp.zeros_like(q_n), (1.0 - gamma) / denom)
