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

from ..conventions import EMPTY_RESIDUAL_MASS
from .plans import RowTarget, TargetPlan, ratio_acceptance
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["Interpolation"]


def _mixture(x, y, inv_sq, inv_sp, a, b):
    r""":math:`a\, q + b\, p` (:math:`a = 1-\alpha`, :math:`b = \alpha`): q or p bit for bit at
    alpha = 0 or 1."""
    return (x * inv_sq) * a + (y * inv_sp) * b


class Interpolation(Rule):
    r"""Target :math:`h = \alpha p + (1-\alpha) q`.

    .. warning::
       The official code clamps the residual at a tiny positive value instead of 0 (so an
       all-zero residual is never divided by 0); we follow convention 3 of
       :mod:`cactus_theory.conventions` (empty residual -> normalize(h)) instead.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``TargetPlan(h = alpha p + (1 - alpha) q)`` (array-agnostic)."""
        h = self.alpha * draft_probs + (1.0 - self.alpha) * target_probs
        return TargetPlan(target_probs, draft_probs, h)

    def accept_probs_from_values(self, q_n, p_n):
        r""":math:`a_n = \min(1, h_n/p_n)`, :math:`h_n = \alpha p_n + (1-\alpha) q_n`, from the
        drafted tokens' row-normalized probabilities alone (the samplers' fast accept path;
        the plan's formula evaluated at n only, so the same bits)."""
        return ratio_acceptance(self.alpha * p_n + (1.0 - self.alpha) * q_n, p_n)

    def recovery_weights_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                            raw_draft_probs=None):
        r"""Recovery weights :math:`\max(0, q - p) \propto \max(0, h - p) = (1-\alpha)\max(0, q - p)`
        (torch, :math:`\alpha < 1`: no h built), or h where that residual is empty
        (convention 3; :math:`h = \alpha p + (1-\alpha) q` added on those rows only).
        Proportional to the plan's recovery up to float32 rounding; other arrays: the plan's.
        """
        if not hasattr(target_probs, "clamp_min_") or self.alpha >= 1.0:
            return super().recovery_weights_at(target_probs, draft_probs, token_ids)
        res = (target_probs - draft_probs).clamp_min_(0.0)
        empty = (res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS).to(res.dtype)
        # an empty row is all zeros: adding h there (and 0 h elsewhere) gives h
        return res.addcmul_(draft_probs, self.alpha * empty).addcmul_(
            target_probs, (1.0 - self.alpha) * empty)

    def recovery_target_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                  draft_sums, gamma=None):
        r""":math:`h = \alpha y/s_p + (1-\alpha) x/s_q` on un-normalized rows (the compiled
        samplers' recovery; its residual is :math:`(1-\alpha)\max(0, q - p)`)."""
        return RowTarget(_mixture, (1.0 / target_sums[..., None], 1.0 / draft_sums[..., None],
                                    1.0 - self.alpha, self.alpha))


register(RuleSpec(
    name="interpolation", factory=Interpolation,
    knobs=(Knob("alpha", 0.5, 0.0, 1.0, doc="weight of the drafter p in h (Cactus interp.py default 0.5)"),),
    sps_knobs={"alpha": 0.0}, deterministic=False, reads_draft=True, needs_raw=False,
    family="target",
    summary="interpolation: h = alpha p + (1 - alpha) q; TV(h, q) = alpha TV(p, q)",
    reference="Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/interp.py",
))
