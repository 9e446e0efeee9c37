r"""The declaration forms of a rule: :class:`Rule` (a plan), and the forms that derive the
plan and the samplers' paths from less: :class:`ElementwiseTargetRule` (an elementwise h),
:class:`SpikeRule` (Theorem 2's gamma) and :class:`DecisionRule` (an acceptance at n and one
recovery). Each states its :class:`Realisation`: what the torch consumers (the samplers, the
vLLM rows) may compute without the plan. Re-exported by :mod:`cactus_theory.rules.registry`.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, h target.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

from .plans import (
    DecisionPlan,
    SpikePlan,
    TargetPlan,
    _gather,
    _ratio_acceptance,
    _residual_distribution,
    _spike_residual_weights,
    _spike_target_at,
)

__all__: list = []


class Realisation(NamedTuple):
    r"""What a configured rule's declaration form lets the torch consumers compute without its
    plan (each None where the form states none: the consumer takes the plan's path).

    Attributes
    ----------
    spike : callable or None
        ``spike(q_n)``: :math:`\gamma` at the drafted tokens' q (a spike rule).
    from_values : callable or None
        ``from_values(q_n, p_n)``: :math:`a_n` from the drafted tokens' row-normalized
        probabilities alone.
    elementwise : callable or None
        ``elementwise(q, p)``: the target h, elementwise.
    recovery_weights : callable or None
        The form's recovery of the drafted tokens (``Rule.recovery_weights_at``'s signature);
        None: the residual of the plan's target.
    traceable_spike : bool
        ``spike`` can be traced by the compiled core (no host solver).
    lerp_weight : float or None
        ``w`` where h = (1 - w) q + w p (one fused lerp).
    """

    spike: Callable | None = None
    from_values: Callable | None = None
    elementwise: Callable | None = None
    recovery_weights: Callable | None = None
    traceable_spike: bool = False
    lerp_weight: float | None = None


class Rule:
    """Base class: a configured rule. Subclasses implement :meth:`plan`.

    ``plan(target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None)``
    returns a :mod:`~cactus_theory.rules.plans` plan; it is array-agnostic (numpy float64 in
    the analysis, torch float32 in the samplers). Raw distributions default to the processed
    ones when not given.
    """

    spec: Any  # the rule's RuleSpec (set by RuleSpec.make)
    knobs: dict

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """The rule's plan on (q, p) (array-agnostic); subclasses implement it."""
        raise NotImplementedError

    def accept_probs_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Acceptance :math:`a_n` at the drafted tokens ``token_ids`` (shape ``q.shape[:-1]``).

        The samplers' accept path. Default: ``plan(...).accept_probs_at(token_ids)``, which
        builds the whole plan (for a spike rule, gamma for every candidate token). A rule that
        can evaluate its acceptance at the drafted tokens alone is declared in a form that
        derives this method (:class:`ElementwiseTargetRule`, :class:`SpikeRule`,
        :class:`DecisionRule`; ``RuleSpec.fast_accept`` reads it); a rule file does not override
        it (``tests/rules/test_closed_protocol.py``). The result equals the default's.
        """
        plan = self.plan(
            target_probs, draft_probs, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs
        )
        return plan.accept_probs_at(token_ids)

    def recovery_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Recovery distribution :math:`r^{(n)}` for the drafted tokens ``token_ids`` (the samplers'
        recovery path, on the first rejected position of each row).

        Default: ``plan(...).recovery_at(token_ids)``. A declaration form derives it from less
        where the drafted tokens need less (Cactus: gamma at n); the result equals the
        default's.
        """
        plan = self.plan(
            target_probs, draft_probs, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs
        )
        return plan.recovery_at(token_ids)

    def recovery_weights_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Un-normalized recovery weights w with :math:`r^{(n)} = w / \sum w` (the samplers' draw).

        The samplers draw the recovered token from these weights by inverse CDF, so a rule can
        skip the normalizing division. Default: ``plan(...).recovery_weights_at(token_ids)``
        (:func:`~cactus_theory.rules.plans._residual_weights` for target and spike plans). A
        declaration form whose recovery has a cheaper form derives this method (and
        :meth:`recovery_at` with the same law). Weights must be finite and non-negative with a positive sum for valid
        input.
        """
        plan = self.plan(
            target_probs, draft_probs, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs
        )
        return plan.recovery_weights_at(token_ids)

    @property
    def realisation(self) -> Realisation:
        """What the torch consumers may compute without the plan (:class:`Realisation`); a bare
        rule states nothing: its plan is every path."""
        return Realisation()

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.knobs.items())
        return f"get_rule({self.spec.name!r}{', ' if args else ''}{args})"


class ElementwiseTargetRule(Rule):
    r"""A target rule declared by its elementwise h: :meth:`elementwise_target` ``(q, p)``, or
    ``(q, p, s)`` with a row statistic ``s`` (:meth:`row_statistic`, shape [..., 1]; top-k's
    k-th largest q).

    Derived here: the plan ``TargetPlan(q, p, h)``, the acceptance at the drafted tokens
    :math:`\min(1, h(q_n, p_n[, s])/p_n)` (from their probabilities alone when there is no
    row statistic: the samplers' fast accept path) and the recovery, the plan's residual
    (convention 3).
    """

    def elementwise_target(self, q, p, *statistic):
        """The target h at verifier entries ``q`` and drafter entries ``p`` (elementwise; with
        the row statistic ``statistic[0]`` when the rule declares one)."""
        raise NotImplementedError

    def row_statistic(self, target_probs, draft_probs):
        """The row statistic h reads (shape [..., 1]), or None (default: h reads none)."""
        return None

    def _h(self, q, p):
        s = self.row_statistic(q, p)
        return self.elementwise_target(q, p) if s is None else self.elementwise_target(q, p, s)

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``TargetPlan(h = elementwise_target(q, p[, row_statistic(q, p)]))`` (array-agnostic)."""
        return TargetPlan(target_probs, draft_probs, self._h(target_probs, draft_probs))

    def accept_probs_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r""":math:`\min(1, h(q_n, p_n[, s])/p_n)` at the drafted tokens only (the plan's formula
        at n, the same bits): h at the drafted entries, the row statistic once per row."""
        s = self.row_statistic(target_probs, draft_probs)
        q_n, p_n = _gather(target_probs, token_ids), _gather(draft_probs, token_ids)
        h_n = self.elementwise_target(q_n, p_n) if s is None else self.elementwise_target(q_n, p_n, s[..., 0])
        return _ratio_acceptance(h_n, p_n)

    def accept_probs_from_values(self, q_n, p_n):
        r""":math:`a_n = \min(1, h(q_n, p_n)/p_n)` from the drafted tokens' row-normalized
        probabilities alone (the plan's formula at n only, so the same bits): with it the
        samplers read q and p once for the row sums and then only the drafted tokens. A rule
        with a row statistic has none (:attr:`realisation`)."""
        return _ratio_acceptance(self.elementwise_target(q_n, p_n), p_n)

    @property
    def realisation(self) -> Realisation:
        """From the drafted tokens' values and the elementwise h, where h reads no row
        statistic; else the plan's (with this form's drafted-token acceptance)."""
        if type(self).row_statistic is not ElementwiseTargetRule.row_statistic:
            return Realisation()
        return Realisation(
            from_values=self.accept_probs_from_values,
            elementwise=self.elementwise_target,
            lerp_weight=self.lerp_weight,
        )

    #: ``w`` when h = (1 - w) q + w p (interpolation): consumers may compute h by one lerp.
    lerp_weight = None


class DecisionRule(Rule):
    r"""A decision-at-n rule: an acceptance from the drafted token's probabilities and a row
    statistic, and one recovery for every draft (a ``DecisionPlan``).

    A subclass states

    * :meth:`accept_at` ``(q_n, p_n, s)``: :math:`a_n`, elementwise in the drafted token's
      probabilities (read on the decision rows, :meth:`decision_rows`) and the row statistic
      ``s`` (broadcast against them);
    * :meth:`row_statistic` ``(q, p)`` on the decision rows: ``s``, shape [..., 1], a number,
      or None (default);
    * :meth:`recovery_distribution` ``(q, p, s)``: the recovery distribution on the processed rows, shape
      [..., V] (``s`` given only when ``recovery_reads_statistic``, else None);
    * :meth:`decision_rows` (default: the processed rows): the rows the acceptance reads, e.g.
      the raw ones for a rule that decides on them.

    Derived here: the plan (the acceptance of every candidate, the recovery), the acceptance
    at the drafted tokens (the statistic once per row, then [...] values) and the recovery of
    the drafted tokens, without the acceptance of every candidate.
    """

    #: The recovery reads the row statistic (else it is not computed for the recovery).
    recovery_reads_statistic = False

    def accept_at(self, q_n, p_n, statistic):
        """:math:`a_n` from the drafted tokens' probabilities and the row statistic."""
        raise NotImplementedError

    def row_statistic(self, q, p):
        """The row statistic the acceptance reads (shape [..., 1], or a number); None: none."""
        return None

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        """The recovery distribution r (shape [..., V]) on the processed rows."""
        raise NotImplementedError

    def decision_rows(self, target_probs, draft_probs, raw_target_probs, raw_draft_probs):
        """The rows ``(q, p)`` the acceptance and its statistic read (default: the processed)."""
        return target_probs, draft_probs

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``DecisionPlan``: :meth:`accept_at` of every candidate, :meth:`recovery_distribution`."""
        dq, dp = self.decision_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
        s = self.row_statistic(dq, dp)
        accept = self.accept_at(dq, dp, s)
        rec = self.recovery_distribution(
            target_probs, draft_probs, s if self.recovery_reads_statistic else None
        )
        return DecisionPlan(target_probs, draft_probs, accept, rec)

    def accept_probs_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        """:meth:`accept_at` at the drafted tokens (the plan's formula at n, the same bits)."""
        dq, dp = self.decision_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
        s = self.row_statistic(dq, dp)
        s_n = s if s is None or isinstance(s, numbers.Number) else s[..., 0]
        return self.accept_at(_gather(dq, token_ids), _gather(dp, token_ids), s_n)

    def recovery_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        """:meth:`recovery_distribution` (independent of the drafted token), shape [..., V]."""
        s = None
        if self.recovery_reads_statistic:
            dq, dp = self.decision_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
            s = self.row_statistic(dq, dp)
        return self.recovery_distribution(target_probs, draft_probs, s)

    def recovery_weights_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        """The recovery distribution itself (already normalized), as ``DecisionPlan``'s."""
        return self.recovery_at(
            target_probs,
            draft_probs,
            token_ids,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
        )

    @property
    def realisation(self) -> Realisation:
        """The plan's acceptance path (this form's, at the drafted tokens) and its recovery."""
        return Realisation(recovery_weights=self.recovery_weights_at)


class SpikeRule(Rule):
    r"""A spike rule declared by its :math:`\gamma(q_n)` alone (:meth:`spike`, elementwise).

    Theorem 2's structure: :math:`h^{(n)}_n = \gamma_n`, :math:`h^{(n)}_i = c_n q_i` with
    :math:`c_n = (1-\gamma_n)/(1-q_n)`, :math:`a_n = \min(1, \gamma_n/p_n)`. Derived here:
    the plan (``SpikePlan``), the acceptance and the recovery at the drafted tokens from
    gamma there alone; the samplers evaluate gamma once per call at the drafted tokens
    (:meth:`spike_at_tokens`) and reuse it for the recovery, so a subclass states its spike
    and nothing else. Subclasses set ``fast_accept=True`` in their :class:`RuleSpec` (this
    class overrides :meth:`Rule.accept_probs_at`).
    """

    #: False: the samplers' compiled core (``fused=True``) evaluates gamma outside its graphs
    #: (the exact root's solver reads its values on the host).
    traceable_spike = False

    def spike(self, q_n):
        """gamma for verifier probabilities ``q_n`` (any shape; array-agnostic)."""
        raise NotImplementedError

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``SpikePlan`` with gamma for every candidate token (array-agnostic)."""
        return SpikePlan(target_probs, draft_probs, self.spike(target_probs))

    def spike_at_tokens(self, q_n):
        r"""gamma at the drafted tokens' verifier probabilities ``q_n`` (a few scalars, [B, k]).

        The samplers' evaluation of the spike; equal to :meth:`spike` (a rule may refine it
        for the samplers' dtype).
        """
        return self.spike(q_n)

    def accept_probs_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Acceptance :math:`\min(1, \gamma(q_n)/p_n)` of the drafted tokens only.

        Equal to ``plan(...).accept_probs_at(token_ids)`` but evaluates gamma at the drafted
        tokens alone (shape ``token_ids.shape``) instead of the whole vocabulary: the samplers'
        accept path uses it (declared by ``RuleSpec.fast_accept``).
        """
        q_n = _gather(target_probs, token_ids)
        return _ratio_acceptance(self.spike_at_tokens(q_n), _gather(draft_probs, token_ids))

    def accept_probs_from_values(self, q_n, p_n):
        r"""Acceptance :math:`\min(1, \gamma(q_n)/p_n)` from the drafted tokens' probabilities.

        The samplers call it with row-normalized ``q_n``, ``p_n`` (shape [B, k]) gathered at
        the drafted tokens, so they never normalize the [B, k, V] inputs.
        """
        return _ratio_acceptance(self.spike_at_tokens(q_n), p_n)

    def recovery_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Recovery :math:`r^{(n)} = \mathrm{normalize}(\max(0, h^{(n)} - p))` of the drafted tokens.

        Equal to ``plan(...).recovery_at(token_ids)`` but evaluates gamma at the drafted tokens
        only (shape ``token_ids.shape``).
        """
        gamma_n = self.spike_at_tokens(_gather(target_probs, token_ids))
        return _residual_distribution(_spike_target_at(target_probs, token_ids, gamma_n), draft_probs)

    @property
    def realisation(self) -> Realisation:
        """gamma at the drafted tokens, the acceptance from their values and the recovery from
        gamma at n."""
        return Realisation(
            spike=self.spike_at_tokens,
            from_values=self.accept_probs_from_values,
            recovery_weights=self.recovery_weights_at,
            traceable_spike=self.traceable_spike,
        )

    def recovery_weights_at(
        self, target_probs, draft_probs, token_ids, *, raw_target_probs=None, raw_draft_probs=None
    ):
        r"""Un-normalized recovery weights of the drafted tokens: :math:`\max(0, h^{(n)} - p)`.

        Proportional to :meth:`recovery_at`; gamma is evaluated at the drafted tokens only
        (:func:`~.plans._spike_residual_weights`).
        """
        gamma_n = self.spike_at_tokens(_gather(target_probs, token_ids))
        return _spike_residual_weights(target_probs, draft_probs, token_ids, gamma_n)


#: The declaration forms' families (:attr:`RuleSpec.family`'s default).
_FORM_FAMILIES = {SpikeRule: "spike", ElementwiseTargetRule: "target", DecisionRule: "decision"}
