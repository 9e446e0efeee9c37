r"""Closed forms of the spike solvers: Corollary 5's Taylor point and the Lambert W function.

Corollary 5 replaces the two-point KL of Theorem 2 by its second-order expansion
:math:`(\gamma-s)^2 / (2 s (1-s))`, giving :math:`\gamma = \min(1, s + \sqrt{2\delta s(1-s)})`;
for a general f the expansion is :math:`f''(1)(\gamma-s)^2/(2s(1-s))`. Lambert's W starts the
exact KL root (:mod:`cactus_theory.solvers._spike_kl`).

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Corollary 5.
D. Winitzki, "Uniform approximations for transcendental functions", ICCSA 2003 (W's start).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .._validation import spike_arguments
from ..divergences import get_divergence


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
