r"""Interpolation (static ensemble) of drafter and verifier.

.. math:: h = \alpha p + (1 - \alpha) q, \qquad a_n = \min(1, \alpha + (1-\alpha) q_n / p_n),
          \qquad r = \mathrm{normalize}(\max(0, h - p)) = \mathrm{normalize}(\max(0, q - p)),

which emits h exactly (Theorem 1 with target h), accepts
:math:`\alpha + (1-\alpha)\sum_x \min(p_x, q_x)` and has :math:`TV(h, q) = \alpha\, TV(p, q)`.
``alpha = 0`` is SpS, ``alpha = 1`` emits the drafter.

Per issue 3, HF transformers' ``assistant_ensemble_weight`` w is this rule with
w = 1 - alpha (not re-checked against the transformers source here); our knob is the Cactus
code's alpha, the weight of the drafter p.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Cactus official code github.com/MANGA-UOFA/Cactus ``cactus/interp.py``
(``InterpRejectionSampler``, default alpha 0.5, passed as ``--delta`` in ``spec.py``).
"""

from __future__ import annotations

from .registry import ElementwiseTargetRule, Knob, RuleSpec, register


class Interpolation(ElementwiseTargetRule):
    r"""Target :math:`h = \alpha p + (1-\alpha) q`.

    .. warning::
       The official code clamps the residual at a tiny positive value instead of 0 (so an
       all-zero residual is never divided by 0); we follow convention 3 of
       :mod:`cactus_theory.conventions` (empty residual -> normalize(h)) instead.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def elementwise_target(self, q, p):
        r""":math:`h = (1-\alpha) q + \alpha p` (elementwise): q or p bit for bit at alpha = 0
        or 1. The plan, the acceptance :math:`\min(1, h_n/p_n)` and the samplers' row target
        derive from it."""
        return q * (1.0 - self.alpha) + p * self.alpha

    @property
    def lerp_weight(self) -> float:
        """alpha: h = (1 - alpha) q + alpha p is one lerp (the vLLM rows' fused pass)."""
        return self.alpha


register(
    RuleSpec(
        name="interpolation",
        factory=Interpolation,
        knobs=(
            Knob("alpha", 0.5, 0.0, 1.0, doc="weight of the drafter p in h (Cactus interp.py default 0.5)"),
        ),
        sps_knobs={"alpha": 0.0},
        summary="interpolation: h = alpha p + (1 - alpha) q; TV(h, q) = alpha TV(p, q)",
        reference="Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/interp.py",
    )
)
