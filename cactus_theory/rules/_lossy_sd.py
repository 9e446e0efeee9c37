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

from .plans import _ratio_acceptance, _residual_distribution
from .registry import DecisionRule, Knob, RuleSpec, register

#: No default in the source; ours.
DEFAULT_ALPHA = 0.35


class LossySpeculative(DecisionRule):
    r"""Accept n with :math:`\min(1, q_n / (c\, p_n))`, :math:`c = 1 - \alpha`; recover from
    :math:`\mathrm{normalize}(\max(0, q - p))`.

    The decision is stated once for every rule that scales SpS's coin by a factor c: its row
    statistic is c (here the constant :math:`1 - \alpha`; vllm-ascend's entropy verification,
    :mod:`cactus_theory.rules._entropy_verify`, reads it from the verifier's row).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: the arXiv 2607.08690 vLLM overlay (``mentored_dec``); Narasimhan et al. 2025.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def row_statistic(self, q, p):
        r"""The coin's factor :math:`c = 1 - \alpha` (one number for every row)."""
        return 1.0 - self.alpha

    def accept_at(self, q_n, p_n, statistic):
        r""":math:`\min(1, q_n / (c\, p_n))` (convention 1 where :math:`p_n = 0`)."""
        return _ratio_acceptance(q_n, p_n * statistic)

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        r"""SpS's residual :math:`\mathrm{normalize}(\max(0, q - p))` (convention 3)."""
        return _residual_distribution(target_probs, draft_probs)


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
