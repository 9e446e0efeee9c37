"""A rule written in one place and registered is enrolled in every consumer: one of each form.

Each rule below is its declaration alone (a target h(q, p), a spike gamma(q_n), a decision at
n: an acceptance from q_n, p_n and a row statistic and one recovery, and a bare plan: an
acceptance test and a recovery), array-agnostic, with its RuleSpec. Registered, it runs through
the invariant battery (tests/rules/test_rule_invariants.py's checks, called with its name), the
float64 analysis (emitted law), the eager and the compiled samplers (their law against the
analysis) and the vLLM row substitution, with no other code written for it. It has no torch
kernel of its own: the samplers take the paths derived from the declaration.
"""

import math

import numpy as np
import pytest
import test_rule_invariants as invariants
import torch
from array_api_compat import array_namespace
from test_kernels import _chisquare_ok, _emitted_counts, _pair

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.integrations.vllm._rows import target_rows
from cactus_theory.rules import RULES, get_rule
from cactus_theory.rules.plans import DecisionPlan, TargetPlan
from cactus_theory.rules.registry import (
    DecisionRule,
    ElementwiseTargetRule,
    Knob,
    Rule,
    RuleSpec,
    SpikeRule,
    register,
)
from cactus_theory.samplers import make_sampler
from cactus_theory.samplers._kernels import KERNELS, NO_KERNELS


class Blend(ElementwiseTargetRule):
    """Target form: h = (1 - w) q + w p."""

    def __init__(self, w):
        self.w = w

    def elementwise_target(self, q, p):
        return q * (1.0 - self.w) + p * self.w


class SqrtBonus(SpikeRule):
    r"""Spike form: :math:`\gamma_n = \min(1, q_n + c\sqrt{q_n(1 - q_n)})`."""

    traceable_spike = True

    def __init__(self, c):
        self.c = c

    def spike(self, q_n):
        xp = array_namespace(q_n)
        return xp.minimum(xp.ones_like(q_n), q_n + self.c * xp.sqrt(q_n * (1.0 - q_n)))


class RelativeThreshold(Rule):
    """Decision form: accept n iff q_n >= t max q; on rejection sample q."""

    def __init__(self, t):
        self.t = t

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        xp = array_namespace(target_probs, draft_probs)
        q = target_probs
        accept = xp.astype(q >= self.t * xp.max(q, axis=-1, keepdims=True), q.dtype)
        return DecisionPlan(target_probs, draft_probs, accept, q)


class RelativeThresholdAtN(DecisionRule):
    """Decision-at-n form: the same rule as :class:`RelativeThreshold`, stated as an acceptance
    at n (``q_n >= s``) with its row statistic s = t max q and its recovery q."""

    def __init__(self, t):
        self.t = t

    def row_statistic(self, q, p):
        xp = array_namespace(q)
        return self.t * xp.max(q, axis=-1, keepdims=True)

    def accept_at(self, q_n, p_n, statistic):
        xp = array_namespace(q_n)
        return xp.astype(q_n >= statistic, q_n.dtype)

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        return target_probs


SPECS = [
    RuleSpec(
        name="test-blend",
        factory=Blend,
        knobs=(Knob("w", 0.3, 0.0, 1.0, doc="weight of p"),),
        sps_knobs={"w": 0.0},
        deterministic=False,
        reads_draft=True,
        needs_raw=False,
        family="target",
        summary="test: h = (1 - w) q + w p",
        reference="this test",
    ),
    RuleSpec(
        name="test-sqrt-bonus",
        factory=SqrtBonus,
        knobs=(Knob("c", 0.5, 0.0, math.inf, doc="bonus scale"),),
        sps_knobs={"c": 0.0},
        deterministic=False,
        reads_draft=True,
        needs_raw=False,
        family="spike",
        fast_accept=True,
        summary="test: gamma = min(1, q_n + c sqrt(q_n (1 - q_n)))",
        reference="this test",
    ),
    RuleSpec(
        name="test-threshold",
        factory=RelativeThreshold,
        knobs=(Knob("t", 0.5, 0.0, 1.0, doc="fraction of max q"),),
        sps_knobs=None,
        sps_note="0/1 acceptance",
        deterministic=True,
        reads_draft=False,
        needs_raw=False,
        family="decision",
        summary="test: accept iff q_n >= t max q; else sample q",
        reference="this test",
    ),
    RuleSpec(
        name="test-threshold-at-n",
        factory=RelativeThresholdAtN,
        knobs=(Knob("t", 0.5, 0.0, 1.0, doc="fraction of max q"),),
        sps_note="0/1 acceptance",
        deterministic=True,
        reads_draft=False,
        summary="test: accept iff q_n >= t max q; else sample q (decision at n)",
        reference="this test",
    ),
]
NAMES = [s.name for s in SPECS]


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The four rules in the registry for this module's tests only."""
    for spec in SPECS:
        register(spec)
    yield
    for spec in SPECS:
        dict.__delitem__(RULES, spec.name)


@pytest.mark.parametrize("name", NAMES)
def test_the_invariant_battery(name):
    """The battery's checks, with the rule's name: valid probabilities, frontier dominance,
    torch plans against numpy, the SpS knobs giving SpS, p unread where declared so (the
    analysis against sampling: the sampler law test below)."""
    invariants.test_valid_probabilities(name)
    invariants.test_frontier_dominance(name)
    invariants.test_torch_plan_matches_numpy(name)
    if RULES[name].sps_knobs is not None:
        invariants.test_sps_knobs_give_sps(name)
    if not RULES[name].reads_draft:
        invariants.test_rules_that_do_not_read_p_ignore_it(name)


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
@pytest.mark.parametrize("name", NAMES)
def test_the_samplers_emit_the_analysis_law(name, fused):
    """One position, un-normalized float32 rows: the sampler's emitted token follows h_alg of
    the float64 analysis (chi-square, n = 20,000, ALPHA of test_kernels). No torch
    kernel is registered for these rules (the spike rule finds the kernel of every spike
    rule, Theorem 2's in-place weights)."""
    q, p = _pair(9)
    N = 20_000
    rule = get_rule(name)
    s = make_sampler(rule, fused=fused)
    assert s.kernels is (KERNELS[SpikeRule] if isinstance(rule, SpikeRule) else NO_KERNELS)
    h = emitted_distribution(rule, q, p)
    counts = _emitted_counts(s, q, p, N)
    assert _chisquare_ok(counts, h, N), f"{name}: {counts} vs {N * h}"


@pytest.mark.parametrize("name", ["test-blend", "test-sqrt-bonus"])
def test_the_vllm_rows_are_the_per_draft_target(name):
    """The vLLM row substitution of a target or spike rule: its per-draft target h^(n), the
    plan's (float32: 1e-6)."""
    q, p = _pair(4, V=30)
    rule = get_rule(name)
    qt = torch.tensor(np.stack([q, p]), dtype=torch.float32)
    pt = torch.tensor(np.stack([p, q]), dtype=torch.float32)
    ids = torch.tensor([3, 17])
    h = target_rows(rule, qt, pt, ids)
    plan = rule.plan(np.stack([q, p]), np.stack([p, q]))
    ref = plan.target if isinstance(plan, TargetPlan) else plan.target_at(ids.numpy())
    torch.testing.assert_close(h, torch.tensor(ref, dtype=torch.float32), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_the_analysis_the_simulator_and_the_rule_table(name):
    """The front door's analysis (acceptance = sum_n p_n a_n of the plan), the report's rule
    table (default: every registered rule) and the chain simulator against the exact chain
    (mean accepted length per round within 4 standard errors: a 6e-5 false-failure rate)."""
    import cactus_theory as ct
    from cactus_theory.analysis.rule_table import rule_table
    from cactus_theory.simulate import compute_metrics, exact_chain, simulate_chain, synthetic_trajectory

    q, p = _pair(5, V=12)
    rule = get_rule(name)
    a = np.asarray(rule.plan(q, p).accept_probs())
    result = ct.analyze(name, q, p)
    assert result.acceptance == pytest.approx(float(np.dot(p, a)), rel=1e-12, abs=1e-15)
    rows = {r["rule"]: r for r in rule_table(q, p)}
    assert rows[name]["acceptance"] == pytest.approx(result.acceptance, rel=1e-12, abs=1e-15)

    traj = synthetic_trajectory("dirichlet", 12, 10, 3)
    exact = compute_metrics(exact_chain(name, traj, 3).totals)["al_paper"]
    sim = compute_metrics(simulate_chain(name, traj, 3, n_runs=400, rng=7).totals())["al_paper"]
    assert abs(sim.value - exact.value) <= 4 * sim.se, (sim, exact)


def test_the_decision_at_n_form_is_the_plan_it_derives():
    """The decision-at-n declaration gives the bare plan's rule bit for bit: its plan, the
    acceptance at the drafted tokens and the recovery (the family and the drafted-token path
    come from the form)."""
    rng = np.random.default_rng(3)
    q, p = rng.dirichlet(np.ones(9), size=4), rng.dirichlet(np.ones(9), size=4)
    n = rng.integers(0, 9, size=4)
    bare, form = get_rule("test-threshold"), get_rule("test-threshold-at-n")
    assert RULES["test-threshold-at-n"].family == "decision" and RULES["test-threshold-at-n"].fast_accept
    np.testing.assert_array_equal(form.plan(q, p).accept, bare.plan(q, p).accept)
    np.testing.assert_array_equal(form.accept_probs_at(q, p, n), bare.plan(q, p).accept_probs_at(n))
    np.testing.assert_array_equal(form.recovery_weights_at(q, p, n), bare.plan(q, p).recovery_weights_at(n))
