"""The declaration forms (``rules/_forms.py``): what each form derives from a declaration
written here (no registration), against the formulas written out in numpy: the acceptance at
the drafted tokens, the recovery, and the realisation the torch consumers read.
Symbols: q verifier, p drafter, n drafted token, h target."""

import numpy as np
from array_api_compat import array_namespace

from cactus_theory.rules import DecisionRule, ElementwiseTargetRule, Rule, SpikeRule

RNG = np.random.default_rng(12)
Q = RNG.dirichlet(np.full(7, 0.6), size=5)
P = RNG.dirichlet(np.full(7, 0.6), size=5)
N = RNG.integers(0, 7, size=5)
ROWS = np.arange(5)


class _Halfway(ElementwiseTargetRule):
    """h = (q + p) / 2, elementwise."""

    def elementwise_target(self, q, p):
        return 0.5 * (q + p)


class _Doubled(SpikeRule):
    """gamma_n = min(1, 2 q_n)."""

    traceable_spike = True

    def spike(self, q_n):
        xp = array_namespace(q_n)
        return xp.minimum(xp.ones_like(q_n), 2.0 * q_n)


class _Always(DecisionRule):
    """Accept every draft; recover from q (never used)."""

    def accept_at(self, q_n, p_n, s):
        return q_n * 0.0 + 1.0

    def recovery_distribution(self, q, p, s):
        return q


def _residual(h, p):
    """Convention 3: the recovery is (h - p)^+ normalised."""
    w = np.maximum(h - p, 0.0)
    return w / w.sum(-1, keepdims=True)


def test_an_elementwise_target_derives_the_ratio_acceptance_and_the_residual():
    """a_n = min(1, h(q_n, p_n) / p_n) and r = (h - p)^+ normalised, for h = (q + p)/2; the
    realisation reads the drafted values alone (no row statistic). 1e-15: a few float64
    operations on numbers <= 1."""
    rule = _Halfway()
    h = 0.5 * (Q + P)
    want = np.minimum(1.0, h[ROWS, N] / P[ROWS, N])
    np.testing.assert_allclose(rule.accept_probs_at(Q, P, N), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        rule.accept_probs_from_values(Q[ROWS, N], P[ROWS, N]), want, rtol=0, atol=1e-15
    )
    np.testing.assert_allclose(rule.recovery_at(Q, P, N), _residual(h, P), rtol=0, atol=1e-15)
    w = np.asarray(rule.recovery_weights_at(Q, P, N))
    np.testing.assert_allclose(w / w.sum(-1, keepdims=True), _residual(h, P), rtol=0, atol=1e-15)
    assert rule.realisation.from_values is not None and rule.realisation.elementwise is not None


def test_a_spike_derives_theorem_2s_target_at_the_drafted_token():
    """gamma_n = min(1, 2 q_n): a_n = min(1, gamma_n / p_n); the recovery is the residual of
    the per-draft target h^(n) (gamma_n at n, q_i (1 - gamma_n)/(1 - q_n) elsewhere, Theorem
    2's rescale), written out here."""
    rule = _Doubled()
    q_n, p_n = Q[ROWS, N], P[ROWS, N]
    gamma = np.minimum(1.0, 2.0 * q_n)
    np.testing.assert_allclose(
        rule.accept_probs_at(Q, P, N), np.minimum(1.0, gamma / p_n), rtol=0, atol=1e-15
    )
    h = Q * ((1.0 - gamma) / (1.0 - q_n))[:, None]
    h[ROWS, N] = gamma
    np.testing.assert_allclose(rule.recovery_at(Q, P, N), _residual(h, P), rtol=0, atol=1e-12)


def test_a_decision_derives_its_acceptance_and_recovery():
    rule = _Always()
    np.testing.assert_array_equal(rule.accept_probs_at(Q, P, N), np.ones(5))
    np.testing.assert_allclose(rule.recovery_at(Q, P, N), Q, rtol=0, atol=1e-15)


def test_every_form_agrees_with_its_own_plan():
    """The derived drafted-token paths give the plan's numbers (Rule's defaults read the
    plan): the samplers' fast paths and the analysis cannot disagree."""
    for rule in (_Halfway(), _Doubled(), _Always()):
        plan = rule.plan(Q, P)
        np.testing.assert_array_equal(rule.accept_probs_at(Q, P, N), plan.accept_probs_at(N))
        np.testing.assert_allclose(
            rule.recovery_at(Q, P, N), Rule.recovery_at(rule, Q, P, N), rtol=0, atol=1e-15
        )
