r"""Certificates of optimality for the cvxpy oracles: Lagrangian dual bounds in float64.

Both oracle problems maximize a concave objective over the simplex under an f-divergence
budget, :math:`D_f(h\|q) = \sum_{q_i>0} q_i f(h_i/q_i) + f'(\infty)\sum_{q_i=0} h_i \le \delta`.
For any multipliers :math:`\lambda > 0` (budget) and :math:`\nu` (mass), weak duality gives an
upper bound on the optimum; the gap between that bound and the value of a *feasible* point is
a certificate: the point is within ``gap`` of the maximum, whatever the solver said.

* Per-draft problem (Theorem 2), :math:`\max h_n`, objective :math:`c = e_n`:

  .. math:: g(\lambda, \nu) = \nu + \lambda\delta + \sum_{q_i > 0} \lambda q_i
            f^+\!\Big(\frac{c_i - \nu}{\lambda}\Big), \qquad
            f^+(s) = \sup_{t \ge 0}\,(s t - f(t)),

  plus, for :math:`q_i = 0`, 0 if :math:`c_i - \nu \le \lambda f'(\infty)` and
  :math:`+\infty` otherwise.
* Frontier problem (Theorem 1), :math:`\max \sum_x \min(p_x, \pi_x)`: since
  :math:`\min(\pi, p) \le w\pi + (1 - w)p` for every :math:`w \in [0, 1]`,

  .. math:: g(\lambda, \nu, w) = \nu + \lambda\epsilon + \sum_x (1 - w_x) p_x
            + \sum_{q_x > 0} \lambda q_x f^+\!\Big(\frac{w_x - \nu}{\lambda}\Big)
            \ (+\ \text{the } q_x = 0 \text{ terms with } c_x = w_x),

  and each :math:`w_x` is chosen optimally for the given :math:`(\lambda, \nu)`.

Strong duality holds (Slater: :math:`h = q` is strictly feasible for a budget > 0), so the
infimum of g is the optimum. The multipliers start from the solver's dual values and are
polished by a derivative-free minimization in float64; the bound is valid for whatever
multipliers come out, so the certificate never depends on the solver's accuracy claims.

Closed forms of :math:`f^+` (:func:`conjugate_nonneg`), with the package's generators
(:mod:`cactus_theory.divergences`): KL :math:`e^{s-1}`; reverse KL :math:`-1-\log(-s)`
(s < 0); Pearson chi-square :math:`s + s^2/4` (s >= -2) else -1; Neyman chi-square
:math:`2 - 2\sqrt{1-s}` (s <= 1: the supremum 2 at s = 1 is approached as t -> inf); squared Hellinger with the 1/2: :math:`1/(4(1/2 - s)) - 1/2`
(s < 1/2); TV :math:`\max(s, -1/2)` (s <= 1/2); Jensen-Shannon :math:`s t - f(t)` at
:math:`t = r/(2-r)`, :math:`r = e^{2s}` (s < log(2)/2); :math:`+\infty` beyond each domain.

References
----------
Boyd & Vandenberghe, Convex Optimization, 5.1-5.2 (weak duality) and 3.3 (conjugates);
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987, Theorems 1-2.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import choice

__all__ = [
    "CONJUGATE_DIVERGENCES",
    "draft_dual_bound",
    "frontier_dual_bound",
    "draft_bound",
    "frontier_bound",
    "certify_draft",
    "certify_frontier",
    "recover_draft",
    "recover_frontier",
]

#: Divergences with a closed-form conjugate here (those of the cvxpy oracle).
CONJUGATE_DIVERGENCES = ("kl", "reverse_kl", "chi2", "neyman_chi2", "hellinger", "tv", "js")

#: :math:`f'(\infty) = \lim f(t)/t`, the cost per unit of mass where q = 0.
_SLOPE_AT_INFINITY = {
    "kl": math.inf,
    "reverse_kl": 0.0,
    "chi2": math.inf,
    "neyman_chi2": 1.0,
    "hellinger": 0.5,
    "tv": 0.5,
    "js": 0.5 * math.log(2.0),
}


def conjugate_nonneg(s, divergence: str) -> np.ndarray:
    r""":math:`f^+(s) = \sup_{t \ge 0} (s t - f(t))` for the divergence's generator f (float64).

    Parameters
    ----------
    s : array_like
        Arguments.
    divergence : str
        One of :data:`CONJUGATE_DIVERGENCES`.

    Returns
    -------
    ndarray
        :math:`f^+(s)`, ``+inf`` where the supremum is unbounded.
    """
    name = choice(divergence, CONJUGATE_DIVERGENCES, "divergence")
    s = np.asarray(s, dtype=np.float64)
    inf = np.full_like(s, np.inf)
    with np.errstate(all="ignore"):
        if name == "kl":
            return np.exp(s - 1.0)
        if name == "reverse_kl":
            return np.where(s < 0, -1.0 - np.log(np.where(s < 0, -s, 1.0)), inf)
        if name == "chi2":
            return np.where(s >= -2.0, s + s * s / 4.0, -1.0)
        if name == "neyman_chi2":
            return np.where(s <= 1, 2.0 - 2.0 * np.sqrt(np.where(s <= 1, 1.0 - s, 1.0)), inf)
        if name == "hellinger":
            a = 0.5 - s
            return np.where(a > 0, 1.0 / (4.0 * np.where(a > 0, a, 1.0)) - 0.5, inf)
        if name == "tv":
            return np.where(s <= 0.5, np.maximum(s, -0.5), inf)
        # js: f(t) = (t log t - (1 + t) log((1 + t)/2)) / 2, f'(t) = log(2t/(1+t)) / 2
        ok = s < 0.5 * math.log(2.0)
        r = np.exp(2.0 * np.where(ok, s, 0.0))
        t = r / (2.0 - r)
        f = 0.5 * (
            np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0) - (1.0 + t) * np.log((1.0 + t) / 2.0)
        )
        return np.where(ok, s * t - f, inf)


def _support_terms(q, c, lam, nu, name):
    """``sum_{q>0} lam q f+((c - nu)/lam)`` plus the q = 0 terms (0 or +inf), over the last axis."""
    sup = q > 0
    with np.errstate(all="ignore"):
        val = lam * q * conjugate_nonneg((c - nu) / lam, name)
    total = np.sum(np.where(sup, val, 0.0), axis=-1)
    off = (~sup) & (c - nu > lam * _SLOPE_AT_INFINITY[name] + 1e-15 * max(1.0, abs(nu)))
    return np.where(np.any(off, axis=-1), np.inf, total)


def draft_dual_bound(q, token_id: int, delta: float, divergence: str, lam: float, nu: float) -> float:
    r"""Weak-duality upper bound :math:`g(\lambda, \nu) \ge \max\{h_n : D(h\|q) \le \delta\}`.

    Valid for every :math:`\lambda > 0` and real :math:`\nu` (module docstring); ``+inf`` where
    the Lagrangian is unbounded.
    """
    if not lam > 0 or not math.isfinite(nu):
        return math.inf
    q = np.asarray(q, dtype=np.float64)
    c = np.zeros_like(q)
    c[token_id] = 1.0
    return float(nu + lam * delta + _support_terms(q, c, lam, nu, divergence))


def _derivative(t, name):
    """:math:`f'(t)` for t >= 0 (``-inf`` at 0 where f' diverges; TV: 0, a subgradient at 1)."""
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(all="ignore"):
        if name == "kl":
            return np.where(t > 0, np.log(t) + 1.0, -np.inf)
        if name == "reverse_kl":
            return np.where(t > 0, -1.0 / t, -np.inf)
        if name == "chi2":
            return 2.0 * (t - 1.0)
        if name == "neyman_chi2":
            return np.where(t > 0, 1.0 - 1.0 / (t * t), -np.inf)
        if name == "hellinger":
            return np.where(t > 0, 0.5 * (1.0 - 1.0 / np.sqrt(t)), -np.inf)
        if name == "tv":
            return 0.5 * np.sign(t - 1.0)
        return np.where(t > 0, 0.5 * np.log(2.0 * t / (1.0 + t)), -np.inf)


def _best_w(q, p, lam, nu, name):
    r"""Per coordinate, the :math:`w \in [0, 1]` minimizing :math:`(1-w)p + \lambda q f^+((w-\nu)/\lambda)`.

    The cost is convex in w with stationary point :math:`w = \nu + \lambda f'(p/q)`
    (:math:`(f^+)' = (f')^{-1}`), so the minimizer over [0, 1] is among that point clipped,
    the ends and (TV, piecewise linear) the kinks :math:`\nu \pm \lambda/2`; the q = 0
    coordinates cost :math:`(1-w)p`, finite while :math:`w - \nu \le \lambda f'(\infty)`.
    The bound is valid for any w, so an inexact w only loosens it.
    """
    slope = _SLOPE_AT_INFINITY[name]

    def cost(w):
        c = (1.0 - w) * p
        with np.errstate(all="ignore"):
            t = np.where(q > 0, lam * q * conjugate_nonneg((w - nu) / lam, name), 0.0)
            off = (q <= 0) & (w - nu > lam * slope)
        return np.where(off, np.inf, c + t)

    with np.errstate(all="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
        stat = np.where(q > 0, nu + lam * _derivative(ratio, name), nu + lam * slope)
    cands = [np.zeros_like(q), np.ones_like(q), np.clip(np.nan_to_num(stat, nan=0.0), 0.0, 1.0)]
    if name == "tv":
        cands += [np.clip(np.full_like(q, nu - lam / 2), 0, 1), np.clip(np.full_like(q, nu + lam / 2), 0, 1)]
    cands = np.stack(cands)
    vals = np.stack([cost(w) for w in cands])
    k = np.argmin(vals, axis=0)
    return np.take_along_axis(cands, k[None], 0)[0], np.take_along_axis(vals, k[None], 0)[0]


def frontier_dual_bound(q, p, eps: float, divergence: str, lam: float, nu: float) -> float:
    r"""Weak-duality upper bound on :math:`\max\{\sum\min(p, \pi) : D(\pi\|q) \le \epsilon\}`.

    :math:`\min_w g(\lambda, \nu, w)` with w optimized per coordinate (module docstring);
    valid for every :math:`\lambda > 0`, real :math:`\nu`.
    """
    if not lam > 0 or not math.isfinite(nu):
        return math.inf
    q = np.asarray(q, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    _, vals = _best_w(q, p, lam, nu, divergence)
    return float(nu + lam * eps + np.sum(vals))


#: The wall nu = 1 - lambda * edge where the dual optimum can sit (the largest objective
#: coefficient is 1): the closed right end of f+'s domain (Neyman 1, TV 1/2), or the slope
#: f'(inf) charged off supp(q) (every divergence with a finite slope), so it is searched on too.
_WALL = {name: v for name, v in _SLOPE_AT_INFINITY.items() if math.isfinite(v)}


def _polish(bound, lam0, nu0, name):
    """Minimize ``bound(lam, nu)`` from the solver's multipliers and a few fixed starts.

    Nelder-Mead in ``(log lam, kappa)`` with ``nu = 1 - lam * edge + kappa`` (``edge`` from
    :data:`_WALL`, else 0), then bounded Brent passes along each axis and, for divergences
    with a wall, along ``kappa = 0``. Any result is a valid bound.
    """
    from scipy.optimize import minimize, minimize_scalar

    edge = _WALL.get(name, 0.0)

    def to_nu(lz, kappa):
        return 1.0 - math.exp(lz) * edge + kappa

    def obj(z):
        v = bound(math.exp(z[0]), to_nu(z[0], z[1]))
        return v if math.isfinite(v) else 1e300

    starts = []
    for lam in (lam0, 1.0, 0.1, 10.0, 1e-3):
        if lam is not None and np.isfinite(lam) and lam > 0:
            for nu in (
                nu0,
                -nu0 if nu0 is not None else None,
                0.0,
                0.5,
                1.0,
                1.0 + lam,
                2.0,
                5.0,
                1.0 - lam * edge,
            ):
                if nu is not None and np.isfinite(nu):
                    lz = math.log(lam)
                    starts.append(np.array([lz, nu - to_nu(lz, 0.0)]))
    zbest = min(starts, key=obj)
    if obj(zbest) >= 1e300:
        return math.inf, (math.nan, math.nan)
    if edge:
        r = minimize_scalar(
            lambda lz: obj(np.array([lz, 0.0])),
            bounds=(-30.0, 10.0),
            method="bounded",
            options=dict(xatol=1e-12),
        )
        if r.fun < obj(zbest):
            zbest = np.array([r.x, 0.0])
    z = zbest
    for _ in range(3):
        start_val = obj(z)
        res = minimize(
            obj, z, method="Nelder-Mead", options=dict(xatol=1e-12, fatol=1e-15, maxiter=3000, maxfev=3000)
        )
        if res.fun < obj(z):
            z = res.x
        for axis, width in ((1, 1.0), (0, 4.0), (1, 0.05), (0, 0.2)):

            def along(v, axis=axis, z=z):
                zz = z.copy()
                zz[axis] = v
                return obj(zz)

            r = minimize_scalar(
                along, bounds=(z[axis] - width, z[axis] + width), method="bounded", options=dict(xatol=1e-13)
            )
            if r.fun < obj(z):
                z = z.copy()
                z[axis] = r.x
        if not obj(z) < start_val - 1e-15:
            break
    return obj(z), (math.exp(z[0]), to_nu(z[0], z[1]))


def draft_bound(q, token_id: int, delta: float, divergence: str, lam0=None, nu0=None):
    r"""The polished per-draft dual bound: ``(bound, (lambda, nu))``, bound >= the optimum."""
    return _polish(
        lambda lam, nu: draft_dual_bound(q, token_id, delta, divergence, lam, nu), lam0, nu0, divergence
    )


def frontier_bound(q, p, eps: float, divergence: str, lam0=None, nu0=None):
    r"""The polished frontier dual bound: ``(bound, (lambda, nu))``, bound >= the optimum."""
    return _polish(lambda lam, nu: frontier_dual_bound(q, p, eps, divergence, lam, nu), lam0, nu0, divergence)


def certify_draft(q, token_id: int, delta: float, divergence: str, value: float, lam0=None, nu0=None):
    r"""Duality gap of a feasible per-draft answer: ``(gap, bound, (lambda, nu))``.

    ``gap = bound - value >= -rounding`` for a feasible ``value``; the answer is optimal within
    ``gap``.
    """
    bound, mult = draft_bound(q, token_id, delta, divergence, lam0, nu0)
    return bound - value, bound, mult


def certify_frontier(q, p, eps: float, divergence: str, value: float, lam0=None, nu0=None):
    r"""Duality gap of a feasible frontier answer: ``(gap, bound, (lambda, nu))``."""
    bound, mult = frontier_bound(q, p, eps, divergence, lam0, nu0)
    return bound - value, bound, mult


def _argmax_t(s, name):
    r""":math:`t^*(s) = \arg\max_{t \ge 0} (s t - f(t)) = (f')^{-1}(s)` (``inf`` past the domain).

    TV has no unique maximizer (f is piecewise linear): NaN, so no point is recovered.
    """
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(all="ignore"):
        if name == "kl":
            return np.exp(s - 1.0)
        if name == "reverse_kl":
            return np.where(s < 0, -1.0 / s, np.inf)
        if name == "chi2":
            return np.maximum(0.0, 1.0 + s / 2.0)
        if name == "neyman_chi2":
            # within 1e-9 of the closed edge s = 1 the maximizer is unbounded (the dual optimum
            # sits on the wall and the multipliers carry rounding): the caller fills that mass
            return np.where(s < 1 - 1e-9, 1.0 / np.sqrt(np.where(s < 1, 1.0 - s, 1.0)), np.inf)
        if name == "hellinger":
            return np.where(s < 0.5, 1.0 / (1.0 - 2.0 * s) ** 2, np.inf)
        if name == "js":
            r = np.exp(2.0 * s)
            return np.where(r < 2, r / (2.0 - r), np.inf)
        return np.full_like(s, np.nan)


def _complete(h, free, weights=None):
    """Give the mass missing from 1 to the undetermined coordinates (in proportion to
    ``weights`` when there are several; None without weights or positive weight there)."""
    if np.any(np.isnan(h)):
        return None
    k = np.flatnonzero(free)
    if len(k):
        rest = np.sum(np.where(free, 0.0, h))
        if rest > 1:
            return None
        if len(k) == 1:
            h = np.where(free, 1.0 - rest, h)
        else:
            if weights is None or not np.sum(weights[k]) > 0:
                return None
            share = np.where(free, weights, 0.0)
            h = np.where(free, (1.0 - rest) * share / share.sum(), h)
    total = h.sum()
    return h / total if total > 0 and np.isfinite(total) else None


def recover_draft(q, token_id: int, divergence: str, lam: float, nu: float):
    r"""The Lagrangian maximizer :math:`h_i = q_i t^*((c_i - \nu)/\lambda)` at given multipliers.

    A coordinate whose maximizer is unbounded (the edge of f+'s domain) or off supp(q) at
    the wall takes the mass missing from 1; the result is renormalized. At optimal
    multipliers this is the optimum (strictly convex f); the caller verifies feasibility and
    certifies it like any other point. Returns None when no point can be recovered.
    """
    q = np.asarray(q, dtype=np.float64)
    c = np.zeros_like(q)
    c[token_id] = 1.0
    t = _argmax_t((c - nu) / lam, divergence)
    sup = q > 0
    free = (sup & np.isinf(t)) | (~sup & (c - nu >= lam * _SLOPE_AT_INFINITY[divergence] - 1e-12))
    h = np.where(sup & ~free, q * np.where(np.isfinite(t), t, 0.0), 0.0)
    return _complete(h, free)


def recover_frontier(q, p, divergence: str, lam: float, nu: float):
    r"""The Lagrangian maximizer :math:`\pi_x = q_x t^*((w_x - \nu)/\lambda)` (w optimal per x).

    At a tie (:math:`w_x` interior) :math:`t^* = p_x/q_x`, so :math:`\pi_x = p_x`; off
    supp(q) the maximizer puts :math:`p_x` where :math:`w_x - \nu` reaches the wall. See
    :func:`recover_draft`.
    """
    q = np.asarray(q, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    w, _ = _best_w(q, p, lam, nu, divergence)
    t = _argmax_t((w - nu) / lam, divergence)
    sup = q > 0
    off_wall = ~sup & (p > 0) & (w - nu >= lam * _SLOPE_AT_INFINITY[divergence] - 1e-12)
    h = np.where(sup, q * np.where(np.isfinite(t), t, 0.0), 0.0)
    free = (sup & np.isinf(t)) | off_wall  # mass set by the budget: the remainder, by p
    return _complete(np.where(free, 0.0, h), free, p)
