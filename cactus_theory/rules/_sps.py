r"""Standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

.. math:: a_n = \min(1, q_n/p_n), \qquad r = \mathrm{normalize}(\max(0, q - p)),

which emits exactly q (paper, Theorem 1 with h = q). Symbols: q verifier
(``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

from .registry import ElementwiseTargetRule, RuleSpec, register


class SpeculativeSampling(ElementwiseTargetRule):
    """SpS: the target is the verifier itself, ``h = q``."""

    def elementwise_target(self, q, p):
        r"""h = q (elementwise; the plan, the acceptance :math:`\min(1, q_n/p_n)` and the
        samplers' row target derive from it)."""
        return q


register(
    RuleSpec(
        name="sps",
        factory=SpeculativeSampling,
        sps_knobs={},
        summary="standard speculative sampling: accept min(1, q_n/p_n), emits q exactly",
        reference="Leviathan et al. 2023 (arXiv 2211.17192); Chen et al. 2023 (arXiv 2302.01318)",
    )
)
