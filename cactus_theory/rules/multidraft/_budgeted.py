r"""Lossy multi-draft verifiers: the budgeted optimum, its multiplier form, and Cactus per draft set.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k i.i.d. drafts at a node,
S the drawn draft set, o the emitted law, :math:`\delta` a per-node budget, :math:`\lambda` a
multiplier.

``optimal-budget``
    At each node, the optimal lossless k-draft verifier (``optimal``) run against the target
    :math:`o^* = \arg\max \{\alpha^*(o) : D(o\|q) \le \delta\}`
    (:func:`cactus_theory.solvers._multidraft.multidraft_target`). It emits :math:`o^*` and
    accepts with probability :math:`F_k(\delta)`, the largest acceptance of *any* k-draft
    verifier emitting within :math:`\delta` of q: it attains the multi-draft frontier.
``optimal-multiplier``
    The same verifier against :math:`o^*(\lambda) = \arg\max \alpha^*(o) - \lambda D(o\|q)`
    (:func:`cactus_theory.solvers._multidraft.multidraft_multiplier_target`): one multiplier
    for every node of a tree, as ``sequence-budget-kl`` does for a chain; calibrating
    :math:`\lambda` to a total spend is :func:`cactus_theory.analysis.tree_budget.tree_sequence_budget`.
``cactus-rrs``
    Cactus's per-draft target lifted to draft sets: given the drawn set S, the target
    :math:`h^{(S)}` maximises :math:`h(S)` under :math:`D(h\|q) \le \delta`, which by
    convexity keeps q's shape inside S and outside it, so
    :math:`h^{(S)}(S) = \gamma` with :math:`\gamma` Theorem 2's two-point root at
    :math:`s = q(S)` (:func:`cactus_theory.solvers._spike.exact_spike`),
    :math:`h^{(S)}_x = \gamma q_x / s` on S and :math:`(1-\gamma) q_x/(1-s)` off it; the k
    drafts are then verified against :math:`h^{(S)}` by recursive rejection sampling. As with
    single-draft Cactus, what it emits is not :math:`h^{(S)}`: its emitted law (a mixture over
    the draws, computed exactly by the family's enumeration) can lie further than
    :math:`\delta` from q (at k = 1 it is single-draft Cactus's, Theorem 3), so it is compared
    with the others at its true emitted divergence.

All three are lossless at their defaults (:math:`\delta = 0`, :math:`\lambda = \infty`) and
standard speculative sampling at k = 1 and :math:`\delta = 0`. They verify i.i.d. drafts (the
theory of :mod:`cactus_theory.solvers._multidraft`); the first two also top-k children, whose
draft set S is deterministic, so :math:`\alpha^*(o) = o(S)` and the optimum is Theorem 2 on
the set (:func:`draft_set_target`; the multiplier form maximises
:math:`\gamma - \lambda D_2(\gamma, q(S))` over the set's mass :math:`\gamma`), where
``cactus-rrs`` would coincide with ``optimal-budget``.

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1-2; Sun et al., SpecTr (arXiv 2310.15141);
Miao et al., SpecInfer (arXiv 2305.09781); H. Everett, Operations Research 11 (1963).
"""

from __future__ import annotations

import math

import numpy as np

from ...divergences import DIVERGENCES, get_divergence
from ...drafts.internal import top_k_tokens
from ...solvers import exact_spike
from ...solvers.internal import multidraft_multiplier_target, multidraft_target
from ..registry import Knob
from ._optimal import MAX_SUPPORT, OptimalCoupling
from ._rrs import RecursiveRejection
from .base import NodeLaw, NodeVerifier, VerifierSpec, register_verifier

_CACHE_SIZE = 4096


class _TargetedOptimal(NodeVerifier):
    """The optimal lossless verifier run against a per-node target (subclasses give it)."""

    def __init__(self):
        self._lossless = OptimalCoupling()
        self._cache: dict = {}

    def _solve(self, q, p, k, drafting):  # pragma: no cover - subclasses implement it
        raise NotImplementedError

    def target(self, target_probs, draft_probs, k: int, drafting: str = "iid") -> np.ndarray:
        """The node's target o (cached per rows, k and drafting scheme)."""
        q = np.ascontiguousarray(target_probs, dtype=np.float64)
        p = np.ascontiguousarray(draft_probs, dtype=np.float64)
        key = (q.tobytes(), p.tobytes(), int(k), drafting)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._solve(q, p, int(k), drafting)
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        """The ``optimal`` verifier's law at the node, with q replaced by the target."""
        o = self.target(target_probs, draft_probs, len(child_tokens), drafting)
        return self._lossless.node_law(o, draft_probs, child_tokens, drafting)

    def accepted_token_law(self, target_probs, draft_probs, k: int, drafting: str) -> np.ndarray:
        """The LP's flow into each token for the target (sums to :math:`\\alpha^*(o)`)."""
        o = self.target(target_probs, draft_probs, k, drafting)
        return self._lossless.accepted_token_law(o, draft_probs, k, drafting)


class BudgetedOptimal(_TargetedOptimal):
    r"""The optimal lossless verifier against :math:`\arg\max\{\alpha^*(o): D(o\|q)\le\delta\}`.

    Symbols: q verifier, p drafter, o target, :math:`\delta` budget. Source:
    :mod:`cactus_theory.solvers._multidraft`; Sun et al. 2023 (the lossless optimum).
    """

    def __init__(self, delta: float, divergence: str):
        super().__init__()
        self.delta, self.divergence = float(delta), divergence

    def _solve(self, q, p, k, drafting):
        if self.delta == 0:
            return q.copy()
        if drafting == "top_k":  # one deterministic set S: alpha*(o) = o(S), Theorem 2 on S
            return draft_set_target(q, top_k_tokens(p, k).tolist(), self.delta, self.divergence, p)
        return multidraft_target(q, p, k, self.delta, self.divergence)


class MultiplierOptimal(_TargetedOptimal):
    r"""The optimal lossless verifier against :math:`\arg\max \alpha^*(o) - \lambda D(o\|q)`.

    Symbols: q verifier, p drafter, o target, :math:`\lambda` multiplier. Source:
    :mod:`cactus_theory.solvers._multidraft`; Everett (1963).
    """

    def __init__(self, lam: float, divergence: str):
        super().__init__()
        self.lam, self.divergence = float(lam), divergence

    def _solve(self, q, p, k, drafting):
        if drafting == "top_k":
            return _set_multiplier_target(q, top_k_tokens(p, k).tolist(), self.lam, self.divergence, p)
        return multidraft_multiplier_target(q, p, k, self.lam, self.divergence)


def draft_set_target(target_probs, draft_set, delta: float, divergence: str = "kl", draft_probs=None):
    r"""Cactus's target for a draft set: :math:`\arg\max h(S)` s.t. :math:`D(h\|q) \le \delta`.

    .. math:: h_x = \gamma\, q_x / q(S)\ (x \in S), \qquad
              h_x = (1 - \gamma)\, q_x / (1 - q(S))\ (x \notin S),

    :math:`\gamma` the two-point root at :math:`s = q(S)` (Theorem 2 with the set in place of
    the token: for fixed :math:`h(S)`, Jensen's inequality makes q's shape on S and off S
    the cheapest). Where :math:`q(S) = 0 < \gamma` (a divergence with finite
    :math:`f'(\infty)`) the mass on S follows ``draft_probs`` there (every shape costs the
    same).

    Symbols: q verifier (``target_probs``), S draft set, :math:`\delta` budget, h target.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 2.
    """
    q = np.asarray(target_probs, dtype=np.float64)
    s = _set_mass(q, draft_set)
    if delta == 0 or s >= 1.0:
        return q.copy()
    gamma = float(exact_spike(np.asarray(min(max(s, 0.0), 1.0)), float(delta), divergence))
    return _with_set_mass(q, draft_set, gamma, draft_probs)


def _set_mass(q, draft_set) -> float:
    return float(q[list(draft_set)].sum())


def _with_set_mass(q, draft_set, gamma, draft_probs=None):
    """q reshaped to mass gamma on the set (q's shape inside and outside it)."""
    inside = np.zeros(q.shape[-1], dtype=bool)
    inside[list(draft_set)] = True
    s = float(q[inside].sum())
    h = np.zeros_like(q)
    if s > 0:
        h[inside] = gamma * q[inside] / s
    else:
        w = (
            np.asarray(draft_probs, dtype=np.float64)[inside]
            if draft_probs is not None
            else np.ones(inside.sum())
        )
        h[inside] = gamma * w / w.sum() if w.sum() > 0 else gamma / inside.sum()
    if s < 1:
        h[~inside] = (1.0 - gamma) * q[~inside] / (1.0 - s)
    return h / h.sum()


def _set_multiplier_target(q, draft_set, lam, divergence, draft_probs=None):
    """argmax over gamma of gamma - lam D2(gamma, q(S)) (concave: golden section), as a target."""
    s = _set_mass(q, draft_set)
    if lam == math.inf or s >= 1.0:
        return q.copy()
    d = get_divergence(divergence)
    if d.name == "kl" and 0 < s < 1:
        # stationarity log(g/s) - log((1-g)/(1-s)) = 1/lam: the odds of the set grow by e^(1/lam)
        odds = s / (1.0 - s) * math.exp(min(1.0 / lam, 700.0)) if lam > 0 else math.inf
        gamma = 1.0 if odds == math.inf else odds / (1.0 + odds)
        return _with_set_mass(q, draft_set, gamma, draft_probs)
    top = 1.0 if d.finite_off_support or s > 0 else 0.0
    sa, sb = np.array([s]), np.array([1.0 - s])

    def value(g):
        with np.errstate(all="ignore"):
            D = float((d.term(np, np.array([g]), sa) + d.term(np, np.array([1.0 - g]), sb))[0])
        return g - lam * D if math.isfinite(D) else -math.inf

    a, b = s, top
    r = 0.5 * (math.sqrt(5.0) - 1.0)
    c1, c2 = b - r * (b - a), a + r * (b - a)
    f1, f2 = value(c1), value(c2)
    for _ in range(80):  # 0.618^80 of [s, 1]: below float64 resolution
        if f1 >= f2:
            b, c2, f2 = c2, c1, f1
            c1 = b - r * (b - a)
            f1 = value(c1)
        else:
            a, c1, f1 = c1, c2, f2
            c2 = a + r * (b - a)
            f2 = value(c2)
    gamma = max((s, 0.5 * (a + b)), key=value)
    return _with_set_mass(q, draft_set, gamma, draft_probs)


class CactusRRS(NodeVerifier):
    r"""Recursive rejection sampling of the k drafts against :math:`h^{(S)}` (module docstring).

    Symbols: q verifier, p drafter, S draft set, :math:`\delta` budget. Source: Hao & Mou,
    ICLR 2026, Theorem 2; Miao et al., SpecInfer, Algorithm 2.
    """

    def __init__(self, delta: float, divergence: str):
        self.delta, self.divergence = float(delta), divergence
        self._rrs = RecursiveRejection()

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        """RRS's law against the drawn set's target :func:`draft_set_target`."""
        h = draft_set_target(
            target_probs, {int(t) for t in child_tokens}, self.delta, self.divergence, draft_probs
        )
        return self._rrs.node_law(h, draft_probs, child_tokens, drafting)


_DIV = Knob("divergence", "kl", choices=tuple(DIVERGENCES), doc="the divergence D(o||q) budgeted")
_DELTA = Knob("delta", 0.0, 0.0, math.inf, doc="per-node budget on D(o||q) (0: lossless)")

register_verifier(
    VerifierSpec(
        name="optimal-budget",
        factory=BudgetedOptimal,
        knobs=(_DELTA, _DIV),
        drafting=("iid", "top_k"),
        structures=("multi", "tree"),
        nodewise=True,
        lossless=False,
        summary="the optimal k-draft verifier for the target argmax alpha*(o) s.t. D(o||q) <= delta: the multi-draft frontier",
        reference="this toolkit (cactus_theory.solvers); Sun et al. 2023 (arXiv 2310.15141); Hao & Mou 2026, Theorem 1",
        max_vocab=MAX_SUPPORT,
    )
)

register_verifier(
    VerifierSpec(
        name="optimal-multiplier",
        factory=MultiplierOptimal,
        knobs=(
            Knob(
                "lam",
                math.inf,
                0.0,
                math.inf,
                doc="multiplier: acceptance per unit of D(o||q) (inf: lossless)",
            ),
            _DIV,
        ),
        drafting=("iid", "top_k"),
        structures=("multi", "tree"),
        nodewise=True,
        lossless=False,
        summary="the optimal k-draft verifier for argmax alpha*(o) - lam D(o||q): one multiplier for a whole tree",
        reference="this toolkit (cactus_theory.solvers); Everett 1963; the chain rule sequence-budget-kl",
        max_vocab=MAX_SUPPORT,
    )
)

register_verifier(
    VerifierSpec(
        name="cactus-rrs",
        factory=CactusRRS,
        knobs=(_DELTA, _DIV),
        drafting=("iid",),
        structures=("multi", "tree"),
        nodewise=True,
        lossless=False,
        summary="recursive rejection sampling against Cactus's target for the drawn set, argmax h(S) s.t. D(h||q) <= delta",
        reference="Hao & Mou 2026 (arXiv 2604.04987), Theorem 2, lifted to sets; Miao et al. 2024, SpecInfer",
    )
)
