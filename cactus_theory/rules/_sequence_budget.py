r"""A sequence-level KL budget, spent online: the fixed-multiplier rule with a budget account.

Per step the rule emits the frontier point that maximises acceptance minus
:math:`\lambda` times divergence (:func:`cactus_theory.solvers._sequence.multiplier_step`),
never above the per-step cap:

.. math:: o_t = \mathrm{clip}(p_t,\ a q_t,\ a e^{1/\lambda} q_t)\ \text{on supp}(q_t)
          \ \text{if}\ KL(o_t\|q_t) \le \mathrm{cap},\ \text{else the frontier point at cap},

then runs SpS against :math:`o_t` (a TargetPlan: :math:`a_n = \min(1, o_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, o - p))`), so :math:`o_t` is emitted exactly (Theorem 1).

Guarantees (single-token steps; proofs in :mod:`cactus_theory.solvers._sequence`):

1. **Fixed multiplier, per realised trajectory.** Whatever the (q_t, p_t) along a trajectory,
   the per-step divergences :math:`e_t = KL(o_t\|q_t)` it spends are allocated optimally:
   no choice of emitted distributions with :math:`\sum_t KL(o'_t\|q_t) \le \sum_t e_t` has a
   larger total acceptance (Lagrangian sufficiency). The spend itself is set by
   :math:`\lambda` (calibrate it on other text), not bounded.
2. **Budget account, per realised sequence.** A decoding loop that passes
   ``cap`` = :math:`B_t = T\epsilon - \sum_{s<t} e_s` (the budget left; the rule reads only
   the current position) spends :math:`\sum_t KL(o_t\|q_t) \le T\epsilon` along *every*
   emitted text, hence (chain rule) :math:`KL(P\|Q) = E_P\sum_t KL(o_t\|q_t) \le T\epsilon`
   for the law P of the emitted text and the verifier's Q. With m-token drafts the bonus
   positions are emitted from q itself, so the chain code's upper bound
   :math:`\sum_t (1-b_t) KL(o_t\|q_t)` (teacher-forced) is below the same total.

Knobs: ``lam`` (:math:`\lambda \ge 0`, acceptance per nat; ``inf`` is SpS, 0 spends up to
each step's saturation budget) and ``cap`` (per-step cap, default ``inf``; the account's
budget left). Not part of the paper, nor of its peers.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, o the
emitted distribution, :math:`\epsilon` the per-token budget.

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023) (the per-step
frontier); Everett, Operations Research 11 (1963).
"""

from __future__ import annotations

import math

from ..solvers.internal import budgeted_multiplier_step
from .plans import TargetPlan
from .registry import Knob, Rule, RuleSpec, register


class SequenceBudget(Rule):
    r"""SpS against the frontier point maximising :math:`A - \lambda\,KL`, capped at ``cap``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: this toolkit; Hao & Mou, ICLR 2026, Theorem 1 (acceptance of a target).
    """

    def __init__(self, lam: float, cap: float):
        self.lam = lam
        self.cap = cap

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``TargetPlan(o)`` with o from :func:`budgeted_multiplier_step` (array-agnostic)."""
        return TargetPlan(
            target_probs, draft_probs, budgeted_multiplier_step(target_probs, draft_probs, self.lam, self.cap)
        )


register(
    RuleSpec(
        name="sequence-budget-kl",
        factory=SequenceBudget,
        knobs=(
            Knob("lam", 1.0, 0.0, math.inf, doc="multiplier: acceptance per nat of KL spent (inf gives SpS)"),
            Knob(
                "cap",
                math.inf,
                0.0,
                math.inf,
                doc="largest KL(o||q) this step (a decoding loop passes the budget left)",
            ),
        ),
        calibrated=("lam", "cap"),
        sps_knobs={"lam": math.inf},
        family="target",
        summary="sequence-level KL budget: frontier point maximising A - lam KL, capped at cap",
        reference="this toolkit (issue 10); per-step frontier of Tran-Thien 2023; Everett 1963",
    )
)
