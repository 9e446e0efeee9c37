r"""Hand-written torch speed paths of the samplers, one file per rule, registered by rule class.

A rule (:mod:`cactus_theory.rules`) declares its maths once, array-agnostic: a target h, a
spike :math:`\gamma(q_n)` or a decision (acceptance test and recovery). The samplers derive
everything from that declaration (:mod:`..base`: normalized rows and the rule's plan, or the
elementwise target and the spike on un-normalized rows). A file here adds, for one rule
class, torch code that computes the same quantities faster on the samplers' un-normalized
rows (entropy expansions, divergence bounds, blocked sums and maxima, in-place recovery
weights), and registers it with :func:`register_kernels`.

The samplers look a rule's kernels up with :func:`kernels_for` (the first registered class
in the rule's method resolution order). When none is registered, or its ``guard`` returns
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
    (:mod:`..blocked`).
``recovery_token_from_rows(rule, x, y, ids, s_q, s_p)``
    The recovered token ([B] int64) when the recovery is a point mass, or None.
``recovery_weights(rule, q, p, ids)``
    Un-normalized recovery weights on normalized torch rows, proportional to
    ``Rule.recovery_weights_at``, or None (then the rule's own).
``spike_recovery_weights(rule, x, y, ids, gamma, s_q, s_p, overwrite)``
    A spike rule's :math:`\max(0, h^{(n)} - p)` from the drafted tokens' gamma
    (:func:`~cactus_theory.rules.plans.spike_residual_weights`), in place when
    ``overwrite`` (``x`` and ``y`` are copies the sampler owns).
``accept_from_row_target``
    True when ``accept_from_rows`` is :math:`\min(1, h_n/p_n)` of
    ``recovery_target_from_rows`` (the compiled samplers then build the row target once on
    the [B, k] rows and index it at the recovery positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["RuleKernels", "KERNELS", "register_kernels", "kernels_for"]


def _always() -> bool:
    return True


@dataclass(frozen=True)
class RuleKernels:
    """The torch speed paths of one rule class (each optional; see the module docstring).

    ``guard()``: True when this torch can run them (checked at every lookup; False or an
    exception: the derived path runs instead).
    """

    accept_from_rows: Optional[Callable] = None
    accept_decided_from_rows: Optional[Callable] = None
    recovery_target_from_rows: Optional[Callable] = None
    recovery_token_from_rows: Optional[Callable] = None
    recovery_weights: Optional[Callable] = None
    spike_recovery_weights: Optional[Callable] = None
    accept_from_row_target: bool = False
    guard: Callable[[], bool] = _always


#: Rule class -> its kernels.
KERNELS: dict = {}

#: No kernels: every hook None (what :func:`kernels_for` returns for an unregistered rule).
NO_KERNELS = RuleKernels()


def register_kernels(rule_cls: type, kernels: RuleKernels) -> RuleKernels:
    """Register ``kernels`` for ``rule_cls`` (and its subclasses, unless they register their
    own)."""
    if not isinstance(kernels, RuleKernels):
        raise TypeError(f"kernels: expected RuleKernels, got {type(kernels).__name__}")
    KERNELS[rule_cls] = kernels
    return kernels


def kernels_for(rule) -> RuleKernels:
    """The kernels registered for the first class of ``type(rule).__mro__`` that has some,
    if their guard passes; else :data:`NO_KERNELS` (the derived paths)."""
    for cls in type(rule).__mro__:
        kernels = KERNELS.get(cls)
        if kernels is not None:
            try:
                ok = bool(kernels.guard())
            except Exception:  # noqa: BLE001 - a broken kernel falls back to the derived path
                ok = False
            return kernels if ok else NO_KERNELS
    return NO_KERNELS


from . import cactus, cascades, fuzzy, interpolation, tas, topk  # noqa: E402,F401  (registration)
