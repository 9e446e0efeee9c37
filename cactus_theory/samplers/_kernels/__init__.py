r"""Hand-written torch speed paths of the samplers, one file per rule, registered by rule class.

A rule (:mod:`cactus_theory.rules`) declares its maths once, array-agnostic: a target h, a
spike :math:`\gamma(q_n)` or a decision (acceptance test and recovery). The samplers derive
everything from that declaration (:mod:`..base`: normalized rows and the rule's plan, or the
elementwise target and the spike on un-normalized rows). A file here adds, for one rule
class, torch code that computes the same quantities faster on the samplers' un-normalized
rows (entropy expansions, divergence bounds, blocked sums and maxima, in-place recovery
weights), and registers it with :func:`register_kernels`.

A sampler looks its rule's kernels up with :func:`kernels_for` (the first registered class
in the rule's method resolution order) and binds them into its program when it is made
(:mod:`.._program`); ``declines(rule)`` names the hooks that do not apply to a configuration. When none is registered, or its ``guard`` returns
False or raises (a torch version without a feature the kernel uses), the derived path runs
instead: the same law, as the tests check by removing and breaking each entry.

Every hook takes the configured rule first; the rows are un-normalized ([..., V]) with
positive float32 row sums, q = ``x / s_q`` and p = ``y / s_p``:

``accept_from_rows(rule, x, y, ids, s_q, s_p)``
    :math:`a_n` at the drafted tokens ``ids`` ([B, k]); equal to ``Rule.accept_probs_at``
    on the normalized rows up to float32 rounding of the normalization.
``accept_decided_from_rows(rule, x, y, ids, s_q, s_p)``
    ``(accept, undecided)`` (bool [B, k]) from rigorous bounds on a deterministic rule's
    statistic, or None; where ``undecided`` is False, ``accept`` equals the exact test. The
    CPU samplers run ``accept_from_rows`` on the undecided rows only.
``recovery_target_from_rows(rule, x, y, ids, s_q, s_p)``
    The rule's target h on these rows as a :class:`~cactus_theory.rules.plans.RowTarget`
    (elementwise with per-row constants), or None: the compiled samplers' blocked recovery
    (:mod:`.._blocked`).
``recovery_token_from_rows(rule, x, y, ids, s_q, s_p)``
    The recovered token ([B] int64) when the recovery is a point mass, or None.
``recovery_weights(rule, q, p, ids)``
    Un-normalized recovery weights on normalized torch rows, proportional to
    ``Rule.recovery_weights_at``, or None (then the rule's own).
``spike_recovery_weights(rule, x, y, ids, gamma, s_q, s_p)``
    A spike rule's :math:`\max(0, h^{(n)} - p)` from the drafted tokens' gamma
    (:func:`~cactus_theory.rules.plans._spike_residual_weights`), in place (``x`` and ``y``
    are copies the sampler owns).
``spike_at_tokens(rule, q_n)``
    A spike rule's :math:`\gamma_n` at the drafted tokens' verifier probabilities ``q_n``
    ([B, k]), equal to ``rule.spike_at_tokens(q_n)``, or None (then the rule's own).
``node_step(verifier, q, p, child_tokens, drafting, generator)``
    A node-wise multi-draft verifier's step at one node for R rows in torch: ``(slot,
    residual)``, the accepted child's slot (-1: none) and the residual rows (the tree
    sampler's RRS and k-SEQ, :mod:`..multidraft`); without it the verifier's exact node law
    runs on the host.
``accept_from_row_target``
    True when ``accept_from_rows`` is :math:`\min(1, h_n/p_n)` of
    ``recovery_target_from_rows`` (the compiled samplers then build the row target once on
    the [B, k] rows and index it at the recovery positions).
"""

from __future__ import annotations

from . import cactus, cascades, fuzzy, tas, topk  # noqa: F401  (registration)
from ._registry import KERNELS, NO_KERNELS, RuleKernels, kernels_for, register_kernels

__all__ = ["RuleKernels", "KERNELS", "NO_KERNELS", "register_kernels", "kernels_for"]
