r"""Interpolation's eager recovery weights in place
(:class:`~cactus_theory.rules.interpolation.Interpolation`).

:math:`\max(0, h - p) = (1-\alpha)\max(0, q - p)`, so the weights :math:`\max(0, q - p)`
are proportional to the plan's residual without building h; h is added on the rows whose
residual is empty (convention 3) only.
"""

from __future__ import annotations

from ...conventions import EMPTY_RESIDUAL_MASS
from ...rules.interpolation import Interpolation
from ._registry import RuleKernels, register_kernels

__all__: list = []


def recovery_weights(rule, target_probs, draft_probs, token_ids):
    r"""Recovery weights :math:`\max(0, q - p) \propto \max(0, h - p)` (:math:`\alpha < 1`: no
    h built), or h where that residual is empty (:math:`h = \alpha p + (1-\alpha) q` added on
    those rows only); proportional to the plan's recovery up to float32 rounding. Declined
    for :math:`\alpha = 1` (the rule's own weights)."""
    res = (target_probs - draft_probs).clamp_min_(0.0)
    empty = (res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS).to(res.dtype)
    # an empty row is all zeros: adding h there (and 0 h elsewhere) gives h
    return res.addcmul_(draft_probs, rule.alpha * empty).addcmul_(target_probs, (1.0 - rule.alpha) * empty)


register_kernels(
    Interpolation,
    RuleKernels(
        recovery_weights=recovery_weights,
        declines=lambda rule: ("recovery_weights",) if rule.alpha >= 1.0 else (),
    ),
)
