r"""Synthetic (q, p) families and the sampling transforms (temperature, top-k, top-p).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). Every generator returns
float64 arrays of shape ``(n_pairs, V)`` whose rows sum to 1, drawn from ``rng`` (anything
:func:`numpy.random.default_rng` accepts), so a seed reproduces them exactly.

Families (``synthetic_pairs``):

``"dirichlet"``
    q, p i.i.d. Dirichlet(concentration) (small concentration: peaked rows).
``"zipf"``
    q_i proportional to rank^-s over a random permutation of the vocabulary; p the same law
    with exponent ``s * (1 + jitter)`` over a partially shuffled permutation (a drafter that
    agrees on the head, less on the tail).
``"logits"``
    Gaussian logits z with scale ``scale``; the drafter's logits are correlated with
    correlation ``rho``: z' = rho z + sqrt(1 - rho^2) scale N(0, 1); q = softmax(z / t),
    p = softmax(z' / t) (temperature-scaled random logits).
``"noisy_copy"``
    q from Gaussian logits; p = softmax(log q + noise * N(0,1)): the drafter is a noisy copy
    of the verifier (the usual small/large model relation).

Any family can be passed through :func:`truncate` (temperature, then top-k, then top-p, in
vLLM's order; the paper's setting is ``truncate(x, temperature=0.6, top_k=20, top_p=0.95)``) to get the truncated distributions real samplers hand over.
"""

from __future__ import annotations

import numpy as np

from ._validation import as_probs, choice

__all__ = [
    "FAMILIES",
    "synthetic_pairs",
    "apply_temperature",
    "apply_top_k",
    "apply_top_p",
    "truncate",
    "softmax",
]

FAMILIES = ("dirichlet", "zipf", "logits", "noisy_copy")


def softmax(logits, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in float64 (``-inf`` logits get probability 0)."""
    z = np.asarray(logits, dtype=np.float64)
    m = np.max(z, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(z - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def apply_temperature(probs, t: float) -> np.ndarray:
    r"""Temperature transform :math:`\mathrm{normalize}(q^{1/t})`; ``t > 0``.

    Zero-probability tokens stay at zero. Equivalent to softmax(logits / t).
    """
    q = as_probs(probs, "probs")
    t = float(t)
    if not t > 0 or not np.isfinite(t):
        raise ValueError(f"t: temperature must be a positive finite number, got {t}")
    with np.errstate(divide="ignore"):
        logq = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)), -np.inf)
    return softmax(logq / t)


def apply_top_k(probs, k: int) -> np.ndarray:
    """Keep the ``k`` most probable tokens of each row and renormalize (ties broken by index).

    ``k >= V`` leaves the rows unchanged.
    """
    q = as_probs(probs, "probs")
    if int(k) != k or k < 1:
        raise ValueError(f"k: must be an integer >= 1, got {k}")
    k = int(k)
    V = q.shape[-1]
    if k >= V:
        return q
    order = np.argsort(-q, axis=-1, kind="stable")
    keep = np.zeros_like(q, dtype=bool)
    np.put_along_axis(keep, order[..., :k], True, axis=-1)
    out = np.where(keep, q, 0.0)
    return out / out.sum(axis=-1, keepdims=True)


def apply_top_p(probs, p: float) -> np.ndarray:
    """Nucleus truncation: the smallest set of most probable tokens with mass >= ``p``.

    As in vLLM/transformers, a token is kept when the mass strictly before it (in
    descending order) is below ``p``; ``p = 1`` keeps every token with positive mass.
    """
    q = as_probs(probs, "probs")
    p = float(p)
    if not 0 < p <= 1:
        raise ValueError(f"p: top-p must lie in (0, 1], got {p}")
    order = np.argsort(-q, axis=-1, kind="stable")
    sorted_q = np.take_along_axis(q, order, axis=-1)
    before = np.cumsum(sorted_q, axis=-1) - sorted_q
    keep_sorted = before < p
    keep = np.zeros_like(q, dtype=bool)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    out = np.where(keep & (q > 0), q, 0.0)
    return out / out.sum(axis=-1, keepdims=True)


def truncate(probs, *, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None) -> np.ndarray:
    """Temperature, then top-k, then top-p (vLLM's order). The paper used 0.6, 20, 0.95.

    Parameters
    ----------
    probs : array_like, shape (..., V)
        Raw (temperature-1) distributions.
    temperature : float
        > 0; 1 leaves the rows unchanged.
    top_k : int, optional
        Keep the k most probable tokens.
    top_p : float, optional
        Nucleus mass in (0, 1].

    Returns
    -------
    ndarray, shape (..., V)
        The processed distributions (zeros outside the kept support).
    """
    out = apply_temperature(probs, temperature) if temperature != 1.0 else as_probs(probs, "probs")
    if top_k is not None:
        out = apply_top_k(out, top_k)
    if top_p is not None:
        out = apply_top_p(out, top_p)
    return out


def synthetic_pairs(family: str, n_pairs: int, vocab_size: int, rng=None, *,
                    concentration: float = 0.3, s: float = 1.1, jitter: float = 0.1,
                    scale: float = 3.0, noise: float = 1.0, t: float = 1.0, rho: float = 0.8):
    """Draw ``n_pairs`` verifier/drafter pairs from a synthetic family.

    Parameters
    ----------
    family : {"dirichlet", "zipf", "logits", "noisy_copy"}
        See the module docstring.
    n_pairs : int
        Number of (q, p) pairs (positions).
    vocab_size : int
        V >= 1.
    rng : int, numpy.random.Generator or None
        Seed or generator.
    concentration : float
        Dirichlet concentration (``"dirichlet"``).
    s, jitter : float
        Zipf exponent and the drafter's relative exponent change (``"zipf"``).
    scale, noise, t : float
        Logit scale, drafter noise scale (``"noisy_copy"``) and temperature.
    rho : float
        Correlation of the drafter's logits with the verifier's (``"logits"``), in [-1, 1].

    Returns
    -------
    target_probs, draft_probs : ndarray, shape (n_pairs, vocab_size)
        q (verifier) and p (drafter), float64 rows summing to 1.
    """
    choice(family, FAMILIES, "family")
    if int(n_pairs) != n_pairs or n_pairs < 1:
        raise ValueError(f"n_pairs: must be an integer >= 1, got {n_pairs}")
    if int(vocab_size) != vocab_size or vocab_size < 1:
        raise ValueError(f"vocab_size: must be an integer >= 1, got {vocab_size}")
    for name, val in (("concentration", concentration), ("scale", scale), ("t", t), ("s", s)):
        if not (np.isfinite(val) and val > 0):
            raise ValueError(f"{name}: must be a positive finite number, got {val}")
    n, V = int(n_pairs), int(vocab_size)
    rng = np.random.default_rng(rng)
    if family == "dirichlet":
        alpha = np.full(V, concentration)
        return _fix(rng.dirichlet(alpha, size=n)), _fix(rng.dirichlet(alpha, size=n))
    if family == "zipf":
        ranks = np.arange(1, V + 1, dtype=np.float64)
        q = np.empty((n, V))
        p = np.empty((n, V))
        for i in range(n):
            perm = rng.permutation(V)
            q[i, perm] = ranks ** (-s)
            perm2 = perm.copy()
            tail = np.arange(min(3, V), V)
            swap = tail[rng.random(tail.size) < 0.3]
            perm2[swap] = rng.permutation(perm2[swap])
            p[i, perm2] = ranks ** (-s * (1 + jitter * rng.standard_normal()))
        return q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)
    if not -1 <= rho <= 1:
        raise ValueError(f"rho: must lie in [-1, 1], got {rho}")
    z = scale * rng.standard_normal((n, V))
    if family == "logits":
        z2 = rho * z + np.sqrt(1 - rho ** 2) * scale * rng.standard_normal((n, V))
        return softmax(z / t), softmax(z2 / t)
    q = softmax(z / t)
    return q, softmax(np.log(q) + noise * rng.standard_normal((n, V)))


def _fix(x):
    """Dirichlet draws with tiny concentration can underflow to an all-zero row: re-seat it."""
    bad = ~(x.sum(-1) > 0)
    if np.any(bad):
        x[bad] = 0.0
        x[bad, 0] = 1.0
    return x / x.sum(-1, keepdims=True)
