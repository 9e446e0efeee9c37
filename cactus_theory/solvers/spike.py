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
from ..divergences import get_divergence

__all__ = ["taylor_spike", "exact_spike", "spike_scale", "METHODS"]

METHODS = ("exact", "taylor")


def _as_xp(q_n, delta):
    """Namespace and arrays for (q_n, delta); python scalars become arrays of q_n's kind."""
    xp = array_namespace(q_n)
    delta = delta if hasattr(delta, "shape") else xp.asarray(delta, dtype=q_n.dtype,
                                                              device=getattr(q_n, "device", None))
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


def exact_spike(q_n, delta, divergence="kl", *, iterations: int | None = None):
    r"""Theorem 2: the largest :math:`\gamma \in [q_n, 1]` with two-point divergence <= delta.

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
        Bisection steps; default 64 for float64 (the bracket shrinks below one ulp) and 32
        for lower precision.

    Returns
    -------
    array, shape (...)
        gamma: 1 when the two-point divergence at 1 is within budget, ``q_n`` exactly when
        delta = 0, else the bisection's feasible end (its divergence is <= delta as computed).

    Notes
    -----
    The two-point divergence is convex in gamma and zero at :math:`\gamma = q_n`, hence
    increasing on :math:`[q_n, 1]`: the root is unique and bisection converges to it. Where
    the two-point divergence is infinite for every gamma > q_n (KL with q_n = 0) the result is
    q_n.
    """
    d = get_divergence(divergence)
    q_n, delta = spike_arguments(q_n, delta)  # ValueError naming q_n / delta (numpy input)
    if iterations is not None:
        iterations = as_count(iterations, "iterations", minimum=0)
    xp, delta = _as_xp(q_n, delta)
    q_n, delta = xp.broadcast_arrays(q_n, delta)
    if isinstance(q_n, np.ndarray):
        q_n, delta = np.array(q_n, dtype=np.float64), np.asarray(delta, dtype=np.float64)
    if iterations is None:
        iterations = 64 if "float64" in str(q_n.dtype) else 32
    one = xp.ones_like(q_n)
    at_one = d.two_point(one, q_n)
    if isinstance(q_n, np.ndarray):
        # numpy: bisect only the entries whose root is not known in advance (capped at 1,
        # delta = 0, or q_n = 0 under a divergence that charges +inf off supp(q)); truncated
        # rows are mostly zeros. Same arithmetic on the rest, so the same result bit for bit.
        gamma = np.where(at_one <= delta, 1.0, q_n)
        active = (at_one > delta) & (delta > 0) & ((q_n > 0) | d.finite_off_support)
        if np.any(active):
            gamma[active] = _bisect(np, d, q_n[active], delta[active], iterations)
        return gamma
    lo = _bisect(xp, d, q_n, delta, iterations)
    gamma = xp.where(at_one <= delta, one, lo)
    return xp.where(delta == 0, q_n, gamma)


def _bisect(xp, d, q_n, delta, iterations):
    """The feasible end of the bisection bracket [q_n, 1] after ``iterations`` halvings."""
    lo, hi = q_n, xp.ones_like(q_n)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        ok = d.two_point(mid, q_n) <= delta
        lo = xp.where(ok, mid, lo)
        hi = xp.where(ok, hi, mid)
    return lo


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
