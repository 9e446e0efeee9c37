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

import numpy as np
from array_api_compat import array_namespace

from .._validation import _is_torch, as_count, as_unit_interval, spike_arguments
from ..divergences import DIVERGENCES, get_divergence
from ._spike_batch import _bisect, _exact_numpy
from ._spike_closed import _as_xp, taylor_spike
from ._spike_device import _host_root, _host_tensor, _round_to_dtype, device_root
from ._spike_forms import _derivative

__all__ = [
    "METHODS",
    "capped_exact_spike",
    "effective_exact_spike",
    "exact_spike",
    "spike_scale",
    "taylor_spike",
]

METHODS = ("exact", "taylor")


def exact_spike(q_n, delta, divergence="kl", *, iterations: int | None = None, method: str = "newton"):
    r"""Theorem 2: the largest :math:`\gamma \in [q_n, 1]` with two-point divergence <= delta.

    With :math:`s = q_n` and :math:`g(\gamma) = s f(\gamma/s) + (1-s) f((1-\gamma)/(1-s))`
    (convex, zero at :math:`\gamma = s`, hence increasing on :math:`[s, 1]`), the root of
    :math:`g(\gamma) = \delta` is found by one safeguarded iteration, the same on both
    backends (:func:`~cactus_theory.solvers._spike_batch._root_numpy`, :func:`~cactus_theory.solvers._spike_device._root_torch`):

    * a start: for the KL (the paper's divergence) the root of a lower bound of the two-point
      KL through Lambert W, sharp for small roots (:func:`~cactus_theory.solvers._spike_kl._kl_start`); Corollary 5's Taylor
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
    least 2 x :data:`~cactus_theory.solvers._spike_batch.PARALLEL_MIN` entries are solved in chunks on up to 8 threads (the same
    floats as one call, tested). torch tensors are solved in float64 and rounded to their
    dtype by :func:`~cactus_theory.solvers._spike_device._round_to_dtype` (toward q_n, then stepped down while the two-point form
    as computed in that dtype exceeds delta); NaN entries (rows the samplers flag invalid)
    give 0. A CPU tensor's float64 root is the numpy one (its memory is the host's: no
    device to wait for); on any other device :func:`~cactus_theory.solvers._spike_device._root_torch` runs the same iteration in
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


def has_device_root(d) -> bool:
    """True when divergence ``d`` (resolved) is solved by :func:`device_root` off the CPU
    (a built-in divergence with a derivative; TV and user generators bisect instead)."""
    return _derivative(d) is not None


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
