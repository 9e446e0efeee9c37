r"""Standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

.. math:: a_n = \min(1, q_n/p_n), \qquad r = \mathrm{normalize}(\max(0, q - p)),

which emits exactly q (paper, Theorem 1 with h = q). Symbols: q verifier
(``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

from .plans import RowTarget, TargetPlan, ratio_acceptance
from .registry import Rule, RuleSpec, register

__all__ = ["SpeculativeSampling"]


def _normalized(x, y, inv_sq):
    """q = x (1 / s_q)."""
    return x * inv_sq


class SpeculativeSampling(Rule):
    """SpS: the target is the verifier itself, ``h = q``."""

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """Return ``TargetPlan(h = q)`` (array-agnostic)."""
        return TargetPlan(target_probs, draft_probs, target_probs)

    def accept_probs_from_values(self, q_n, p_n):
        r""":math:`a_n = \min(1, q_n/p_n)` from the drafted tokens' row-normalized probabilities.

        The samplers' fast accept path (declared on :class:`~cactus_theory.rules.registry.Rule`):
        with it they read q and p once for the row sums and then only the drafted tokens
        ([B, k]), with no normalized [B, k, V] copies.
        """
        return ratio_acceptance(q_n, p_n)

    def recovery_target_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                  draft_sums, gamma=None):
        """h = q = x / s_q on un-normalized rows (the compiled samplers' recovery)."""
        return RowTarget(_normalized, (1.0 / target_sums[..., None],))


register(RuleSpec(
    name="sps", factory=SpeculativeSampling, knobs=(), sps_knobs={},
    deterministic=False, reads_draft=True, needs_raw=False, family="target",
    summary="standard speculative sampling: accept min(1, q_n/p_n), emits q exactly",
    reference="Leviathan et al. 2023 (arXiv 2211.17192); Chen et al. 2023 (arXiv 2302.01318)",
))
