r"""Lossy speculative decoding as the arXiv 2607.08690 vLLM overlay ships it (``mentored_dec``).

The overlay's method ``mentored_dec`` (one knob, ``alpha``) is not Mentored decoding's
optimal target (:mod:`cactus_theory.rules._mentored`) but lossy speculative decoding with
:math:`\beta = 1`: it accepts the drafted token n with

.. math:: a_n = \min\Bigl(1, \frac{q_n}{(1 - \alpha)\, p_n}\Bigr)

and on rejection samples from the SpS residual :math:`\mathrm{normalize}(\max(0, q - p))`.
One step emits :math:`h_{alg} = p \odot a + (1 - \sum_n p_n a_n)\, r`; :math:`\alpha = 0` is
SpS. The acceptance is that of SpS against the un-normalized target :math:`q/(1-\alpha)`, but
the recovery is SpS's residual, not :math:`\max(0, q/(1-\alpha) - p)`: the rule is a decision
rule, and no budget of ``mentored`` reproduces it.

.. warning::
   The overlay's source file was not among the stored sources; the rule is the overlay's
   decision as a side-by-side run against its code established it (acceptance
   :math:`\min(1, q/((1-\alpha)p))`, recovery from :math:`(q - p)_+`), which is Narasimhan
   et al.'s lossy speculative decoding (Table 3) at :math:`\beta = 1`. The overlay states no
   default; ``alpha = 0.35`` is ours. Where :math:`p_n = 0` the acceptance is 1 if :math:`q_n > 0` (convention 1: such
   a token is never drafted), and at :math:`\alpha = 1` (the limit, as the overlay's
   division gives it) every draft with :math:`q_n > 0` is accepted; where the residual is empty (:math:`p \ge q` everywhere, i.e.
   p = q) the recovery is q (convention 3).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\alpha` = ``alpha``.

References
----------
The vLLM 0.20 overlay of arXiv 2607.08690, ``relaxed_target_method="mentored_dec"``;
Narasimhan et al., "Faster Cascades via Speculative Decoding", ICLR 2025 (arXiv 2405.19261),
Table 3 ("lossy speculative decoding"); V. Tran-Thien, "An optimal lossy variant of
speculative decoding", Hugging Face blog (2023).
"""

from __future__ import annotations

from .plans import DecisionPlan, _gather, _ratio_acceptance, _residual_distribution
from .registry import Knob, Rule, RuleSpec, register

#: No default in the source; ours.
DEFAULT_ALPHA = 0.35


class LossySpeculative(Rule):
    r"""Accept n with :math:`\min(1, q_n / ((1-\alpha) p_n))`; recover from
    :math:`\mathrm{normalize}(\max(0, q - p))`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: the arXiv 2607.08690 vLLM overlay (``mentored_dec``); Narasimhan et al. 2025.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``DecisionPlan``: the scaled ratio acceptance, SpS's residual as the recovery."""
        q, p = target_probs, draft_probs
        accept = _ratio_acceptance(q, p * (1.0 - self.alpha))
        return DecisionPlan(q, p, accept, _residual_distribution(q, p))

    def accept_probs_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r""":math:`\min(1, q_n / ((1-\alpha) p_n))` at the drafted tokens only (the plan's
        formula at n; the samplers' accept path, ``fast_accept``)."""
        q_n, p_n = _gather(target_probs, token_ids), _gather(draft_probs, token_ids)
        return _ratio_acceptance(q_n, p_n * (1.0 - self.alpha))


register(
    RuleSpec(
        name="lossy-sd",
        factory=LossySpeculative,
        knobs=(
            Knob(
                "alpha",
                DEFAULT_ALPHA,
                0.0,
                1.0,
                doc="accept min(1, q_n / ((1 - alpha) p_n)) (the overlay's mentored_dec knob; 0 = SpS)",
            ),
        ),
        sps_knobs={"alpha": 0.0},
        family="decision",
        summary="lossy SD (beta = 1): accept min(1, q_n / ((1 - alpha) p_n)); recover from max(0, q - p)",
        reference="arXiv 2607.08690 vLLM overlay (mentored_dec); Narasimhan et al. ICLR 2025 Table 3",
    )
)
