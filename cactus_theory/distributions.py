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

The sampling transform (one for the whole toolkit)
--------------------------------------------------
:func:`_sampling_transform` (dense) and :func:`_top_candidates` + :func:`_process_sorted_logits`
(sparse) are the only implementation of temperature / top-k / top-p: :func:`truncate` and the
``apply_*`` helpers here, the real-logit loader
(:func:`cactus_theory.logits._loader.apply_transforms`) and the decoding loop and dump tool
(:func:`cactus_theory.logits._runner.processed_sparse`) all call them. On logits z (or log
probabilities; a zero probability is the logit ``-inf``), in vLLM's order:

1. **order**: tokens by decreasing logit; **tie rule: equal logits are ordered by increasing
   token id** (a stable sort), for top-k, top-p and greedy alike;
2. ``s = z / T`` (``T = 0``: greedy, a one-hot on the first token of the order);
3. top-k: keep the first k tokens of the order (``top_k`` None or <= 0: all);
4. top-p: among those, keep a token while the mass of ``softmax(s)`` over the top-k set
   strictly before it is < ``top_p`` (the first token always; ``top_p`` None or >= 1: all);
5. renormalize ``softmax(s)`` over the kept tokens. Tokens of logit ``-inf`` get 0.

numpy input gives numpy float64, torch input torch float64 (on its device).
"""

from __future__ import annotations

import numpy as np

from ._validation import as_probs, as_temperature, as_top_k, as_top_p, choice, random_generator

__all__ = [
    "FAMILIES",
    "synthetic_pairs",
    "truncate",
    "softmax",
    "PAPER_TRUNCATION",
]

FAMILIES = ("dirichlet", "zipf", "logits", "noisy_copy")

#: The paper's sampling setting (code defaults): temperature 0.6, top-k 20, top-p 0.95
#: (keyword arguments of :func:`truncate`).
PAPER_TRUNCATION = dict(temperature=0.6, top_k=20, top_p=0.95)


def softmax(logits, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in float64 (``-inf`` logits get probability 0)."""
    z = np.asarray(logits, dtype=np.float64)
    m = np.max(z, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(z - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _is_torch(x) -> bool:
    return hasattr(x, "detach") and hasattr(x, "dtype") and not isinstance(x, np.ndarray)


def _top_candidates(logits, k=None):
    """The first ``k`` tokens of each row in the transform's order, and their logits.

    The order is decreasing logit, equal logits by increasing token id (the module's tie
    rule). ``k`` None (or >= V) orders the whole row.

    Parameters
    ----------
    logits : ndarray or Tensor, shape (..., V)
        Logits or log probabilities (``-inf`` for a zero probability); NaN not allowed.
    k : int, optional

    Returns
    -------
    ids : int64 array, shape (..., K)
    values : float64 array, shape (..., K)
        ``K = min(k, V)``; same library (and device) as ``logits``.
    """
    V = logits.shape[-1]
    k = V if k is None else min(int(k), V)
    if _is_torch(logits):
        import torch

        z = logits.to(torch.float64)
        if k == V:
            values, ids = torch.sort(z, dim=-1, descending=True, stable=True)
            return ids, values
        values, ids = torch.topk(z, k, dim=-1, largest=True, sorted=True)
        # torch.topk breaks ties arbitrarily: where the k-th value is tied with a token left out,
        # take the tied tokens of smallest id (a full stable sort of those rows)
        thr = values[..., -1:]
        cut = (z == thr).sum(-1) > (values == thr).sum(-1)
        if bool(cut.any()):
            sv, si = torch.sort(z[cut], dim=-1, descending=True, stable=True)
            values[cut], ids[cut] = sv[..., :k], si[..., :k]
        # within the kept set: decreasing value, then increasing id
        ids_sorted, perm = torch.sort(ids, dim=-1, stable=True)
        vals_by_id = torch.gather(values, -1, perm)
        values, perm2 = torch.sort(vals_by_id, dim=-1, descending=True, stable=True)
        return torch.gather(ids_sorted, -1, perm2), values
    z = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-z, axis=-1, kind="stable")[..., :k]
    return order.astype(np.int64), np.take_along_axis(z, order, axis=-1)


def _process_sorted_logits(values, *, temperature=1.0, top_p=None):
    """Steps 2, 4, 5 of the transform on logits already in the transform's order.

    Parameters
    ----------
    values : ndarray or Tensor, shape (..., K)
        From :func:`_top_candidates` (decreasing; the top-k cut already made).
    temperature : float
        >= 0; 0 is greedy.
    top_p : float, optional
        Nucleus mass; None or >= 1 disables it.

    Returns
    -------
    float64 array, shape (..., K)
        Probabilities on the candidates (rows sum to 1).
    """
    torch_in = _is_torch(values)
    if torch_in:
        import torch

        xp_exp, xp_cumsum = torch.exp, (lambda a: torch.cumsum(a, dim=-1))
        where, full_like = torch.where, torch.full_like
    else:
        values = np.asarray(values, dtype=np.float64)
        xp_exp, xp_cumsum = np.exp, (lambda a: np.cumsum(a, axis=-1))
        where, full_like = np.where, np.full_like
    first = full_like(values, 0.0)
    first[..., 0] = 1.0
    if temperature == 0:
        return first
    s = values / temperature
    finite = s > -np.inf

    def softmax_kept(keep):
        m = s[..., :1]  # the row maximum (first in the order)
        m = where(m > -np.inf, m, full_like(m, 0.0))
        e = where(keep, xp_exp(where(keep, s, m) - m), full_like(s, 0.0))
        return e / e.sum(-1, keepdims=True)

    pr = softmax_kept(finite)
    if top_p is not None and top_p < 1.0:
        before = xp_cumsum(pr) - pr
        keep = (before < top_p) & finite
        keep[..., 0] = True
        pr = softmax_kept(keep)
    return pr


def _sampling_transform(logits, *, temperature=1.0, top_k=None, top_p=None):
    r"""The processed distribution of ``logits`` (module docstring: order, tie rule, steps).

    Parameters
    ----------
    logits : ndarray or Tensor, shape (..., V)
        Logits or log probabilities (``-inf`` for zero probability).
    temperature : float
        >= 0 (0: greedy).
    top_k : int, optional
        None or <= 0: no top-k cut.
    top_p : float, optional
        None or >= 1: no nucleus cut.

    Returns
    -------
    float64 array, shape (..., V)
        numpy for numpy input, torch (same device) for torch input.

    Examples
    --------
    >>> import numpy as np
    >>> _sampling_transform(np.log([0.3, 0.3, 0.4]), top_k=2).round(4)   # the tie: id 0 kept
    array([0.4286, 0.    , 0.5714])
    """
    k = top_k if top_k is not None and top_k > 0 else None
    ids, values = _top_candidates(logits, k)
    pr = _process_sorted_logits(values, temperature=temperature, top_p=top_p)
    if _is_torch(logits):
        import torch

        out = torch.zeros(logits.shape, dtype=torch.float64, device=logits.device)
        return out.scatter_(-1, ids, pr)
    out = np.zeros(np.shape(logits), dtype=np.float64)
    np.put_along_axis(out, ids, pr, axis=-1)
    return out


def _log_probs(q):
    with np.errstate(divide="ignore"):
        return np.where(q > 0, np.log(np.where(q > 0, q, 1.0)), -np.inf)


def _apply_temperature(probs, t: float) -> np.ndarray:
    r"""Temperature transform :math:`\mathrm{normalize}(q^{1/t})`; ``t > 0``.

    Zero-probability tokens stay at zero. Equivalent to softmax(logits / t)
    (:func:`_sampling_transform`).
    """
    q = as_probs(probs, "probs")
    return _sampling_transform(_log_probs(q), temperature=as_temperature(t, "t"))


def _apply_top_k(probs, k: int) -> np.ndarray:
    """Keep the ``k`` most probable tokens of each row and renormalize (ties: lower token id).

    ``k >= V`` leaves the rows unchanged (:func:`_sampling_transform`'s tie rule).
    """
    q = as_probs(probs, "probs")
    k = as_top_k(k, "k")
    if k >= q.shape[-1]:
        return q
    return _sampling_transform(_log_probs(q), top_k=k)


def _apply_top_p(probs, p: float) -> np.ndarray:
    """Nucleus truncation: the smallest set of most probable tokens with mass >= ``p``.

    As in vLLM/transformers, a token is kept when the mass strictly before it (in
    descending order, ties by lower token id) is below ``p``; ``p = 1`` keeps every token with
    positive mass (:func:`_sampling_transform`).
    """
    q = as_probs(probs, "probs")
    return _sampling_transform(_log_probs(q), top_p=as_top_p(p, "p"))


def truncate(
    probs, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """Temperature, then top-k, then top-p (vLLM's order). The paper used 0.6, 20, 0.95.

    One call of :func:`_sampling_transform` on ``log(probs)`` (its order and tie rule).

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
    q = as_probs(probs, "probs")
    t = as_temperature(temperature)
    top_k = None if top_k is None else as_top_k(top_k)
    if top_k is not None and top_k >= q.shape[-1]:
        top_k = None  # keeps every token
    top_p = None if top_p is None else as_top_p(top_p)
    if t == 1.0 and top_k is None and top_p is None:
        return q
    return _sampling_transform(_log_probs(q), temperature=t, top_k=top_k, top_p=top_p)


def synthetic_pairs(
    family: str,
    n_pairs: int,
    vocab_size: int,
    rng=None,
    *,
    concentration: float = 0.3,
    s: float = 1.1,
    jitter: float = 0.1,
    scale: float = 3.0,
    noise: float = 1.0,
    t: float = 1.0,
    rho: float = 0.8,
):
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
    rng = random_generator(rng, "rng")
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
        z2 = rho * z + np.sqrt(1 - rho**2) * scale * rng.standard_normal((n, V))
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
