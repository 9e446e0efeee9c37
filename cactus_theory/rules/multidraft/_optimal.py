r"""The optimal lossless k-draft verifier: the LP coupling of the draft-set law with q.

At a node, the draft set S (the distinct drafted tokens) has law P (i.i.d., without
replacement or top-k: :func:`~cactus_theory.drafts.draft_set_law`). The verifier solves
the linear programme of :mod:`cactus_theory.solvers._draft_coupling` once per node rows
(cached) and, given the drawn S, accepts the first child slot holding token x with
probability :math:`\pi(S, x)/P(S)`; otherwise it emits a token from
:math:`\mathrm{normalize}(q - A)`, :math:`A(x) = \sum_S \pi(S, x)` (independent of S). The
emitted law is q and the acceptance is the optimum over lossless verifiers of this draft-set
law, :math:`\min_A [q(V\setminus A) + P(S \cap A \ne \emptyset)]` (max-flow/min-cut).
At k = 1 the LP's optimum :math:`\pi(\{x\}, x) = \min(p(x), q(x))` is forced, so the verifier
is standard speculative sampling.

Limit: the LP has one variable per (set, token) pair, :math:`\sum_{j \le k} j \binom{n}{j}`
for i.i.d. drafts over a support of n tokens (:data:`MAX_SUPPORT` caps n); top-k drafts have
one set and need no LP.

References: Sun et al., SpecTr (arXiv 2310.15141), the optimal transport with membership
cost; Hu et al. (arXiv 2502.18779), the optimal acceptance rate of a draft sampling scheme.
"""

from __future__ import annotations

import numpy as np

from ...drafts.internal import draft_set_law
from ...solvers.internal import SetCoupling, optimal_set_coupling
from .base import NodeLaw, NodeVerifier, VerifierSpec, _normalize_residual, register_verifier

#: Largest drafter support the LP is built for.
MAX_SUPPORT = 64
_CACHE_SIZE = 4096


class OptimalCoupling(NodeVerifier):
    """The LP-optimal lossless verifier of the node's draft-set law."""

    def __init__(self):
        self._cache: dict = {}

    def coupling(self, target_probs, draft_probs, k: int, drafting: str):
        """The node's :class:`~cactus_theory.solvers._draft_coupling.SetCoupling` (cached per rows)."""
        q = np.ascontiguousarray(target_probs, dtype=np.float64)
        p = np.ascontiguousarray(draft_probs, dtype=np.float64)
        key = (q.tobytes(), p.tobytes(), int(k), drafting)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        support = int(np.count_nonzero(p > 0))
        if drafting != "top_k" and support > MAX_SUPPORT:
            raise ValueError(
                f"draft_probs: the optimal verifier's LP is built for supports up to {MAX_SUPPORT} "
                f"tokens, got {support}"
            )
        sets, probs = draft_set_law(p, k, drafting)
        if drafting == "top_k":
            toks = sets[0]
            acc = np.zeros_like(q)
            acc[list(toks)] = q[list(toks)]
            sol = SetCoupling(sets, probs, [q[list(toks)]], acc, float(acc.sum()))
        else:
            sol = optimal_set_coupling(q, sets, probs)
        index = {s: i for i, s in enumerate(sol.sets)}
        residual = _normalize_residual(q - sol.accepted, q)
        entry = (sol, index, residual)
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = entry
        return entry

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        r"""Slot j (the first holding token x) accepted w.p. :math:`\pi(S, x)/P(S)`."""
        sol, index, residual = self.coupling(target_probs, draft_probs, len(child_tokens), drafting)
        s = tuple(sorted(set(int(t) for t in child_tokens)))
        i = index[s]
        mass = dict(zip(s, sol.accept_mass[i]))
        accept = np.zeros(len(child_tokens))
        seen = set()
        for j, tok in enumerate(child_tokens):
            if tok not in seen and sol.set_probs[i] > 0:
                accept[j] = mass[int(tok)] / sol.set_probs[i]
            seen.add(tok)
        total = accept.sum()
        if total > 1.0:  # rounding of pi / P(S): at most one part in 1e15
            accept /= total
        return NodeLaw(accept, residual)

    def accepted_token_law(self, target_probs, draft_probs, k: int, drafting: str) -> np.ndarray:
        r""":math:`A(x) = \sum_S \pi(S, x)` (the LP's flow into each token)."""
        sol, _, _ = self.coupling(target_probs, draft_probs, k, drafting)
        return sol.accepted.copy()


register_verifier(
    VerifierSpec(
        name="optimal",
        factory=OptimalCoupling,
        knobs=(),
        drafting=("iid", "without_replacement", "top_k"),
        structures=("multi", "tree", "chain"),
        nodewise=True,
        lossless=True,
        summary="the LP-optimal lossless verifier of the node's draft-set law (max-flow/min-cut value); emits q",
        reference="Sun et al. 2023, SpecTr (arXiv 2310.15141), section 3; Hu et al. 2025 (arXiv 2502.18779)",
        max_vocab=MAX_SUPPORT,
    )
)
