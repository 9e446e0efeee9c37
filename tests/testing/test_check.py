"""The sampler-law check (``testing/_check.py``): correct samplers pass, at the default size and
on fewer draws for every rule, over seeds with calibrated p-values; its arguments, its cases, the
bonus contract, the mixed batch, the placeholder draft and the zero uniform.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise, Bonferroni over its tests; exact for the binomial and Bernstein
tests, asymptotic for chi-square); seeds are fixed, so a run is reproducible. The runs at the
default (full-power) size carry the marker ``full``: ``./dev test`` runs them in their own stage.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from scipy import stats

import cactus_theory as ct
from cactus_theory.rules import get_rule
from cactus_theory.testing import (
    assert_sampler_law,
    callable_adapter,
    check_sampler_law,
    default_cases,
    reference_sampler,
)

DEFAULT_ALPHA = inspect.signature(check_sampler_law).parameters["alpha"].default
DEFAULT_NUM_SAMPLES = inspect.signature(check_sampler_law).parameters["num_samples"].default
DELTA = 0.05  # a Cactus budget with frequent rejections on the default cases (acceptance < 1)
CACTUS = get_rule("cactus-taylor", delta=DELTA)
SPS = get_rule("sps")


@pytest.mark.full
@pytest.mark.parametrize(
    "rule", [SPS, CACTUS, get_rule("interpolation", alpha=0.3)], ids=["sps", "cactus-taylor", "interpolation"]
)
def test_the_toolkits_samplers_pass(rule):
    res = assert_sampler_law(ct.make_sampler(rule), rule)
    assert res.interface == "vllm-v0" and res.num_samples == DEFAULT_NUM_SAMPLES
    names = {c.name for c in res.checks}
    assert {
        "law",
        "acceptance",
        "layout",
        "bonus",
        "seeded",
        "counter:num_accepted_tokens",
        "counter:num_emitted_tokens",
    } <= names
    if rule.name == "interpolation":  # h mixes in p: one-hot q rows are not verified greedily
        assert "greedy" not in names and "not greedy verification" in res.skipped[0]
    else:
        assert "greedy" in names
    assert res.outcome == "passed" and not res.underpowered
    # per case and position (4 cases of k = 3, the deep case of k = 8): law and acceptance; per
    # case the bonus law; recovery where a position rejects; the batch laws; the counter
    count = {name: sum(c.name == name for c in res.checks) for name in ("law", "acceptance", "bonus-law")}
    assert count == {"law": 4 * 3 + 8, "acceptance": 4 * 3 + 8, "bonus-law": 5}
    assert sum(c.name == "recovery" for c in res.checks) >= 8  # the deep case rejects at every position
    assert sum(c.name.startswith("batch-law:") for c in res.checks) == 5
    assert res.num_tests == 2 * (4 * 3 + 8) + 5 + 1 + sum(
        c.name == "recovery" or c.name.startswith("batch-law:") for c in res.checks
    ) and all(c.threshold == DEFAULT_ALPHA / res.num_tests for c in res.checks if c.test != "exact")


def _knobs(name):
    """Knobs with a non-trivial law on the default cases (acceptance below 1)."""
    if name.startswith("cactus"):
        return {"delta": DELTA}
    if name.startswith("cascade"):
        return {"alpha": 0.1}
    return {}


# mentored and cactus-calibrated solve a root per row (seconds per call here): left to the
# detection script; the three rules above also run at the default size (stage 'full')
FEWER_DRAWS_RULES = [n for n in ct.rule_names() if n not in ("mentored", "cactus-calibrated")]


@pytest.mark.parametrize("name", FEWER_DRAWS_RULES)
def test_every_rules_sampler_passes_on_fewer_draws(name):
    rule = get_rule(name, **_knobs(name))
    assert assert_sampler_law(ct.make_sampler(rule), rule, num_samples=5000, seed=2).passed


def test_correct_samplers_do_not_fail_over_seeds_and_their_p_values_are_calibrated():
    """At the default alpha a correct sampler passes every seed; at moderate levels the share of
    chi-square p-values below t stays within t + 4.9 sd (a one-sided binomial bound at ~5e-7
    for each of 3 levels, with the 9 positions of a seed treated as independent, which they are
    up to the shared row of drafts)."""
    pvals = []
    for seed in range(12):
        res = check_sampler_law(
            reference_sampler("sps"), SPS, seed=100 + seed, num_samples=4000, invariants=False
        )
        assert res.passed
        pvals += [c.p_value for c in res.checks if c.name == "law" and c.n > 50]
    pvals = np.array(pvals)
    for t in (0.01, 0.05, 0.2):
        bound = t + 4.9 * np.sqrt(t * (1 - t) / len(pvals))
        assert np.mean(pvals <= t) <= bound, (t, np.mean(pvals <= t))
    assert stats.kstest(pvals, "uniform").pvalue > 1e-6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_samples": 0}, "num_samples"),
        ({"alpha": 1.0}, "alpha"),
        ({"seed": -1}, "seed"),
        ({"min_expected": 0}, "min_expected"),
        ({"target_probs": np.full((2, 4), 0.25), "draft_probs": np.full((2, 4), 0.25)}, "target_probs"),
        ({"target_probs": np.full((2, 4), 0.25)}, "target_probs"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_sampler_law(reference_sampler(), "sps", **kwargs)


def test_cases_of_different_k_and_vocabularies():
    (q0, p0), (q1, p1) = default_cases()[:2]
    qs, ps = [q0[1:], q1], [p0[1:], p1]  # k = 2 on V = 12, k = 3 on V = 10
    res = assert_sampler_law(reference_sampler("sps"), SPS, qs, ps, num_samples=3000)
    laws = [(c.case, c.position) for c in res.checks if c.name == "law"]
    assert laws == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    with pytest.raises(ValueError, match="target_probs"):
        check_sampler_law(reference_sampler(), "sps", [-q0], [p0])


def test_a_sampler_output_of_the_wrong_shape_is_named():
    with pytest.raises(ValueError, match="sampler: returned shape"):
        check_sampler_law(lambda q, p, n, b: n, "sps", num_samples=10)
    with pytest.raises(TypeError, match="sampler"):
        check_sampler_law(42, "sps")
    with pytest.raises(ValueError, match="array"):
        callable_adapter(reference_sampler(), array="jax")
    with pytest.raises(ValueError, match="defect"):
        reference_sampler(defect="typo")


def _draws_own_bonus(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    own = torch.multinomial(target_probs[:, -1], 1)
    return reference_sampler("sps")(target_probs, draft_probs, draft_token_ids, own)


def test_the_bonus_contract_both_ways():
    """An undeclared own bonus draw fails the exact check (and says to declare it); declared, it
    passes and its law is tested; a declared bonus drawn from the wrong row fails the bonus law,
    also with the exact checks off."""
    kw = {"num_samples": 5000, "seed": 4}
    undeclared = check_sampler_law(_draws_own_bonus, SPS, **kw)
    assert {c.name for c in undeclared.failures} == {"bonus", "greedy"} or "bonus" in {
        c.name for c in undeclared.failures
    }
    assert any("declare it" in d for d in undeclared.diagnosis)
    declared = check_sampler_law(_draws_own_bonus, SPS, bonus="drawn", **kw)
    assert declared.passed and declared.bonus == "drawn"
    assert "bonus" not in {c.name for c in declared.checks}
    assert all(c.n > 0 for c in declared.checks if c.name == "bonus-law" and c.case != 1)
    drawn = reference_sampler("sps", bonus="drawn")
    assert drawn.draws_bonus_token and check_sampler_law(drawn, SPS, **kw).bonus == "drawn"
    wrong = reference_sampler("sps", defect="bonus-wrong-row")
    for invariants in (True, False):
        res = check_sampler_law(wrong, SPS, invariants=invariants, **kw)
        assert "bonus-law" in {c.name for c in res.failures}
        assert any("bonus row" in d for d in res.diagnosis)
    with pytest.raises(ValueError, match="bonus"):
        check_sampler_law(drawn, SPS, bonus="own", **kw)


def test_a_row_mixup_shows_only_in_a_mixed_batch_of_more_than_two_requests():
    mixup = reference_sampler("sps", defect="batch-row-mixup")
    kw = {"num_samples": 4000, "seed": 5, "invariants": False}
    assert not check_sampler_law(mixup, SPS, **kw).passed  # four cases interleaved
    assert check_sampler_law(mixup, SPS, mixed=False, **kw).passed  # one case per call
    two = default_cases()[:2]
    q2 = [c[0] for c in two]
    p2 = [c[1] for c in two]
    assert check_sampler_law(mixup, SPS, q2, p2, **kw).passed  # two requests interleaved


def test_a_placeholder_draft_is_never_accepted():
    """A sampler that declares takes_placeholder_drafts gets rows whose last draft is -1: the
    reference rejects it; the negative-index mutant reads the last vocabulary entry and accepts."""
    ok = check_sampler_law(reference_sampler("sps"), SPS, num_samples=2000)
    assert ok.passed and "placeholder" in {c.name for c in ok.checks}
    bad = check_sampler_law(reference_sampler("sps", defect="negative-index"), SPS, num_samples=2000)
    failed = {c.name for c in bad.failures}  # the side batch, and the short requests of the small batches
    assert {"placeholder", "batch-layout"} <= failed and all(
        n == "placeholder" or n.startswith("batch-") for n in failed
    ), failed
    assert any("placeholder draft id -1" in d for d in bad.diagnosis)
    assert any(
        s.startswith("placeholder") for s in check_sampler_law(_draws_own_bonus, SPS, num_samples=500).skipped
    )


def test_zero_uniforms_show_an_inclusive_comparison():
    """u = 0 has probability 2^-24 per float32 draw: only the side batch shows u <= ratio."""
    res = check_sampler_law(reference_sampler("sps", defect="inclusive-comparison"), SPS, num_samples=3000)
    assert {c.name for c in res.failures} == {"zero-uniform"}
    assert any("inclusive comparison" in d for d in res.diagnosis)
    ok = check_sampler_law(reference_sampler("sps"), SPS, num_samples=3000)
    assert ok.passed and "zero-uniform" in {c.name for c in ok.checks}
