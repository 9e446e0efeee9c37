r"""Cactus: constrained acceptance speculative sampling (Hao & Mou, ICLR 2026).

For each candidate drafted token n, the per-draft target raises n to :math:`\gamma_n` and
rescales the rest in proportion to q (Theorem 2):

.. math::
    h^{(n)}_n = \gamma_n, \quad h^{(n)}_i = q_i \frac{1-\gamma_n}{1-q_n}\ (i \ne n), \quad
    a_n = \min(1, \gamma_n / p_n), \quad r^{(n)} = \mathrm{normalize}(\max(0, h^{(n)} - p)).

Two ways to get :math:`\gamma_n`:

- ``cactus-taylor`` (Corollary 5, as the official code computes it):
  :math:`\gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`.
- ``cactus-exact`` (Theorem 2): the largest root in :math:`[q_n, 1]` of the two-point
  divergence :math:`= \delta`, capped at 1, for any divergence of
  :mod:`cactus_theory.divergences` (knob ``divergence``, default KL). The names
  ``cactus-exact-<divergence>`` (``cactus-exact-kl``, ``cactus-exact-reverse-kl``, ...) are
  aliases with the knob fixed.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
delta budget (``delta``). The accept test reads only q_n and p_n; the recovery reads p.

References
----------
Hao & Mou, "Cactus: Accelerating Auto-Regressive Decoding with Constrained Acceptance
Speculative Sampling", ICLR 2026, arXiv 2604.04987: Theorem 2, Corollary 5; official code
github.com/MANGA-UOFA/Cactus (``cactus.py::solve_constraint``).
"""

from __future__ import annotations

import math

from ..divergences import DIVERGENCES
from ..solvers import exact_spike, taylor_spike
from ..solvers.internal import effective_exact_spike
from .plans import SpikePlan
from .registry import Knob, RuleSpec, SpikeRule, register, register_alias

#: Divergences with a second-order expansion at h = q (usable by the Taylor rule).
SMOOTH_DIVERGENCES = tuple(n for n, d in DIVERGENCES.items() if math.isfinite(d.f_second_at_one))

_DELTA = Knob("delta", 1.0, 0.0, math.inf, doc="divergence budget per draft (0 gives SpS)")


class _CactusBase(SpikeRule):
    """Shared by both Cactus rules: gamma is an elementwise function of q_n (the budget
    ``delta`` and the ``divergence`` its knobs)."""

    def __init__(self, delta: float, divergence: str = "kl"):
        self.delta = delta
        self.divergence = divergence


class CactusTaylor(_CactusBase):
    r"""Cactus with Corollary 5's Taylor point :math:`\gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`."""

    #: gamma is a closed form in torch operations: the samplers' compiled core traces it
    #: (``fused=True``) instead of calling it between two graphs.
    traceable_spike = True

    def spike(self, q_n):
        """Corollary 5's gamma for ``q_n`` (array-agnostic)."""
        return taylor_spike(q_n, self.delta, self.divergence)


class CactusExact(_CactusBase):
    """Cactus with Theorem 2's exact gamma: two-point ``D(h^(n) || q) = delta``, capped at 1."""

    def spike(self, q_n):
        """Theorem 2's gamma for ``q_n`` (array-agnostic)."""
        return exact_spike(q_n, self.delta, self.divergence)

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        r"""``SpikePlan`` whose gamma is solved when first read (:attr:`SpikePlan.spike`).

        The acceptance and the emitted law read :math:`\min(\gamma_n, p_n)` only
        (:meth:`SpikePlan.effective_spike`), which
        :func:`~cactus_theory.solvers._spike.effective_exact_spike` gives while solving, for
        the KL on numpy rows, the root only at the tokens whose gamma may lie below p_n.
        """
        return SpikePlan(target_probs, draft_probs, spike_fn=self.spike, effective_fn=self._effective_spike)

    def _effective_spike(self, q, p):
        """:meth:`SpikePlan.effective_spike` (q, p and the knob are validated already)."""
        return effective_exact_spike(q, p, self.delta, self.divergence)


register(
    RuleSpec(
        name="cactus-taylor",
        factory=CactusTaylor,
        knobs=(
            _DELTA,
            Knob(
                "divergence",
                "kl",
                choices=SMOOTH_DIVERGENCES,
                doc="divergence whose 2nd-order expansion gives gamma (paper: KL)",
            ),
        ),
        sps_knobs={"delta": 0.0},
        summary="Cactus, Corollary 5: gamma = min(1, q_n + sqrt(2 delta q_n (1 - q_n)))",
        reference="Hao & Mou, ICLR 2026, arXiv 2604.04987, Corollary 5",
    )
)

register(
    RuleSpec(
        name="cactus-exact",
        factory=CactusExact,
        knobs=(
            _DELTA,
            Knob(
                "divergence",
                "kl",
                choices=tuple(DIVERGENCES),
                doc="divergence of the per-draft budget D(h^(n) || q) <= delta (paper: KL)",
            ),
        ),
        sps_knobs={"delta": 0.0},
        summary="Cactus, Theorem 2: largest gamma with two-point divergence = delta",
        reference="Hao & Mou, ICLR 2026, arXiv 2604.04987, Theorem 2",
    )
)

for _name in DIVERGENCES:
    register_alias(f"cactus-exact-{_name.replace('_', '-')}", "cactus-exact", divergence=_name)
