r"""The static ensemble (DIVERSED; transformers' ``assistant_ensemble_weight``): interpolation.

SpS against the fixed mixture of verifier and drafter

.. math:: h = w\, q + (1 - w)\, p, \qquad a_n = \min\bigl(1,\ 1 - w + w\, q_n/p_n\bigr), \qquad
          r = \mathrm{normalize}(\max(0, h - p)) = \mathrm{normalize}(\max(0, q - p)),

with w the weight of the **verifier** (``assistant_ensemble_weight``; w = 1 is SpS).

**It is the interpolation rule** (:mod:`cactus_theory.rules._interpolation`) with
:math:`\alpha = 1 - w`. Proof: interpolation's target is
:math:`(1-\alpha) q + \alpha p`, which at :math:`\alpha = 1 - w` is the h above; both rules are
the SpS skeleton against their target (acceptance :math:`\min(1, h_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, h - p))`), so equal targets give equal acceptance at every
candidate, equal recovery and the same emitted law, h itself (Theorem 1 with target h). The
residual is :math:`\max(0, h - p) = w \max(0, q - p)`, so for w > 0 it normalizes to SpS's;
where it is empty (q = p) both fall back to h = q (convention 3; transformers falls back to the
verifier's row, the same row). DIVERSED's claim for one token follows:
:math:`\sum_x \min(p_x, h_x) = (1 - w) + w \sum_x \min(p_x, q_x) = 1 - w\,TV(p, q)`, and
:math:`TV(h, q) = (1 - w) TV(p, q)`. Tested against interpolation and against both formulas
(tests/rules/test_peer_rules.py).

This rule carries the authors' parametrisation; ``interpolation`` keeps the Cactus code's
(alpha = weight of p). Not modelled: transformers' greedy mode (drafts compared with
:math:`\arg\max h`), and DIVERSED's learned, context-dependent weight (the dynamic ensemble).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token. Note that
transformers and DIVERSED write p for the target and q for the assistant.

References
----------
Wang, Kasa et al., "DIVERSED: Relaxed Speculative Decoding via Dynamic Ensemble Verification",
AISTATS 2026, arXiv 2604.07622 (static ensemble); huggingface/transformers #45979
(``GenerationConfig.assistant_ensemble_weight``, ``_speculative_sampling``); the arXiv
2607.08690 vLLM overlay, ``relaxed_target_method="ensemble"``, ``verifier_weight``.
"""

from __future__ import annotations

from ._interpolation import Interpolation
from .registry import Knob, RuleSpec, register


class StaticEnsemble(Interpolation):
    r"""Target :math:`h = w q + (1 - w) p`: :class:`Interpolation` with :math:`\alpha = 1 - w`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: DIVERSED, AISTATS 2026 (arXiv 2604.07622); transformers ``assistant_ensemble_weight``.
    """

    def __init__(self, assistant_ensemble_weight: float):
        super().__init__(1.0 - assistant_ensemble_weight)
        self.assistant_ensemble_weight = assistant_ensemble_weight

    def elementwise_target(self, q, p):
        r""":math:`h = w q + (1 - w) p` (elementwise): q bit for bit at w = 1."""
        w = self.assistant_ensemble_weight
        return q * w + p * (1.0 - w)


register(
    RuleSpec(
        name="static-ensemble",
        factory=StaticEnsemble,
        knobs=(
            Knob(
                "assistant_ensemble_weight",
                0.5,
                0.0,
                1.0,
                doc="w: weight of the verifier q in h (transformers accepts the open (0, 1); 1 is SpS)",
            ),
        ),
        sps_knobs={"assistant_ensemble_weight": 1.0},
        summary="static ensemble: h = w q + (1 - w) p, = interpolation with alpha = 1 - w",
        reference="DIVERSED, AISTATS 2026 (arXiv 2604.07622); transformers #45979 assistant_ensemble_weight",
    )
)
