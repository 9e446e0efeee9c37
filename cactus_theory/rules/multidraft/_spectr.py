r"""SpecTr's k-sequential selection (k-SEQ) over k i.i.d. drafts.

With a division factor :math:`\rho \in [1, k]` and
:math:`\beta(\rho) = \sum_x \min(p(x), q(x)/\rho)`, the drafts are scanned in order and
:math:`x_j` is accepted with probability :math:`\min(1, q(x_j) / (\rho\, p(x_j)))`; if none
is accepted the token is drawn from

.. math::
    r(x) = \frac{q(x) - \min(p(x), q(x)/\rho)\, \bigl(1 - (1-\beta)^k\bigr)/\beta}{(1-\beta)^k},

so that the emitted token has law q exactly. r is a distribution iff
:math:`\rho \ge f(\rho) = (1 - (1-\beta(\rho))^k)/\beta(\rho)`; the acceptance
:math:`1 - (1-\beta(\rho))^k` decreases in :math:`\rho`, so the verifier takes the smallest
such :math:`\rho` (:func:`division_factor`). At k = 1, :math:`\rho = 1`: standard speculative
sampling.

Reference: Sun et al., SpecTr: Fast Speculative Decoding via Optimal Transport, NeurIPS 2023
(arXiv 2310.15141), the k-sequential selection algorithm; baselines.md 6.2.
"""

from __future__ import annotations

import numpy as np

from .base import NodeLaw, NodeVerifier, VerifierSpec, _normalize_residual, register_verifier

_GRID = 257  # points of the scan of [1, k] for the first feasible division factor
_BISECT = 60  # bisection steps after it (interval below 2^-60 of k)


def _beta(q, p, rho):
    return np.minimum(p, q / rho).sum(-1)


def _feasible(q, p, rho, k):
    """rho >= f(rho): the residual of k-SEQ is non-negative."""
    b = _beta(q, p, rho)
    f = np.where(b > 0, (1.0 - (1.0 - b) ** k) / np.where(b > 0, b, 1.0), float(k))
    return rho >= f * (1.0 - 1e-12)


def division_factor(target_probs, draft_probs, k: int) -> float:
    r"""The smallest feasible :math:`\rho \in [1, k]` (:math:`\rho \ge f(\rho)`, module docstring).

    A scan of [1, k] on a grid of 257 points finds the first feasible point; bisection between
    it and the grid point before narrows it to :math:`2^{-60} k`, keeping the feasible end
    (so the residual is a distribution, and the rule lossless, whatever the grid misses).
    :math:`\rho = k` is always feasible (:math:`f \le k`).
    """
    q = np.asarray(target_probs, dtype=np.float64)
    p = np.asarray(draft_probs, dtype=np.float64)
    k = int(k)
    if k == 1:
        return 1.0
    grid = np.linspace(1.0, float(k), _GRID)
    ok = np.array([_feasible(q, p, r, k) for r in grid])
    first = int(np.argmax(ok)) if ok.any() else _GRID - 1
    if first == 0:
        return 1.0
    lo, hi = grid[first - 1], grid[first]
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        if _feasible(q, p, mid, k):
            hi = mid
        else:
            lo = mid
    return float(hi)


class KSequential(NodeVerifier):
    """SpecTr's k-SEQ: accept the first draft passing min(1, q/(rho p)), else the residual."""

    def __init__(self):
        self._cache: dict = {}

    def _rho_and_residual(self, q, p, k):
        key = (np.ascontiguousarray(q).tobytes(), np.ascontiguousarray(p).tobytes(), int(k))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[key] = self._solve(q, p, k)
        return self._cache[key]

    def _solve(self, q, p, k):
        rho = division_factor(q, p, k)
        m = np.minimum(p, q / rho)
        b = m.sum()
        accepted_mass = (1.0 - (1.0 - b) ** k) / b if b > 0 else 0.0
        residual = _normalize_residual(q - m * accepted_mass, q)
        return rho, residual

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        r"""Slot j accepted w.p. :math:`\prod_{i<j}(1-a_i) a_j`,
        :math:`a_j = \min(1, q(x_j)/(\rho\, p(x_j)))`; residual r (module docstring)."""
        q = np.asarray(target_probs, dtype=np.float64)
        p = np.asarray(draft_probs, dtype=np.float64)
        k = len(child_tokens)
        rho, residual = self._rho_and_residual(q, p, k)
        reach, accept = 1.0, np.zeros(k)
        for j, tok in enumerate(child_tokens):
            a = min(1.0, q[tok] / (rho * p[tok])) if p[tok] > 0 else float(q[tok] > 0)
            accept[j] = reach * a
            reach *= 1.0 - a
        return NodeLaw(accept, residual)

    def accepted_token_law(self, target_probs, draft_probs, k: int, drafting: str) -> np.ndarray:
        r""":math:`A(x) = \min(p(x), q(x)/\rho)\,(1 - (1-\beta)^k)/\beta` (closed form)."""
        q = np.asarray(target_probs, dtype=np.float64)
        p = np.asarray(draft_probs, dtype=np.float64)
        rho, _ = self._rho_and_residual(q, p, k)
        m = np.minimum(p, q / rho)
        b = m.sum()
        return m * ((1.0 - (1.0 - b) ** k) / b) if b > 0 else np.zeros_like(q)


register_verifier(
    VerifierSpec(
        name="spectr",
        factory=KSequential,
        knobs=(),
        drafting=("iid",),
        structures=("multi", "tree", "chain"),
        nodewise=True,
        lossless=True,
        summary="SpecTr's k-sequential selection with the smallest feasible division factor; emits q",
        reference="Sun et al. 2023, SpecTr (arXiv 2310.15141), k-SEQ",
    )
)
