"""The sampler-law result (``testing/_results.py``): its report says where and by how much, an
underpowered run is not a pass, and the diagnosis names the failure's pattern.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise, Bonferroni over its tests; exact for the binomial and Bernstein
tests, asymptotic for chi-square); seeds are fixed, so a run is reproducible. The runs at the
default (full-power) size carry the marker ``full``: ``./dev test`` runs them in their own stage.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from cactus_theory.rules import get_rule
from cactus_theory.testing import (
    assert_sampler_law,
    check_sampler_law,
    dyadic,
    exact_law,
    reference_sampler,
)

DEFAULT_NUM_SAMPLES = inspect.signature(check_sampler_law).parameters["num_samples"].default
SPS = get_rule("sps")


@pytest.mark.full
def test_the_report_says_where_and_by_how_much():
    res = check_sampler_law(reference_sampler("sps", defect="swapped-ratio"), SPS, seed=1)
    text = res.report()
    assert text.startswith("sampler law of rule 'sps' through the callable interface: FAILED")
    assert "case 'generic' position 0: acceptance (binomial)" in text and "exact 0.7573" in text
    assert "token 5 emitted" in text and "its exact probability is 0" in text  # disjoint supports
    assert res.to_dict()["passed"] is False and res.min_p_value == 0.0


def test_too_few_draws_is_underpowered_not_passed_and_strict_raises():
    sampler = reference_sampler("sps")
    res = check_sampler_law(sampler, SPS, num_samples=300, seed=3)
    assert res.passed and res.outcome == "underpowered" and res.underpowered
    assert res.draws_needed is not None and res.draws_needed > 300
    text = res.report()
    assert text.splitlines()[0].split(": ")[1].startswith("UNDERPOWERED")
    assert "(underpowered)" in text and f"about {res.draws_needed} draws per case" in text
    assert "never reached (exact reach 0)" in text  # the edge case's bonus position
    with pytest.raises(AssertionError, match="UNDERPOWERED"):
        assert_sampler_law(sampler, SPS, num_samples=300, seed=3, strict=True)
    assert assert_sampler_law(sampler, SPS, num_samples=300, seed=3).passed  # not strict: no error
    again = check_sampler_law(sampler, SPS, num_samples=res.draws_needed, seed=3)
    assert again.outcome == "passed", again.report()


@pytest.mark.parametrize(
    "defect, pattern",
    [
        ("coupled-resample-uniform", "where the acceptance is exact: the recovery distribution"),
        ("topk-tie-boundary", "a token of exact probability 0 was emitted"),
        ("swapped-ratio", "the acceptance is off"),
    ],
)
def test_a_failure_names_its_pattern_and_the_case(defect, pattern):
    res = check_sampler_law(reference_sampler("sps", defect=defect), SPS, seed=2, num_samples=5000)
    text = res.report()
    assert any(pattern in d for d in res.diagnosis), res.diagnosis
    assert text.index("diagnosis:") < text.index("failed:")
    assert re.search(r"case '(generic|edge|overconfident|truncated)' position \d", text)


def _later_positions_read_position_0(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Every position verified against position 0's rows: position 0 right, later ones wrong."""
    k = draft_token_ids.shape[1]
    q = target_probs.clone()
    q[:, 1:k] = q[:, :1]
    p = draft_probs.clone()
    p[:, 1:] = p[:, :1]
    return reference_sampler("sps")(q, p, draft_token_ids, bonus_token_ids)


def test_position_0_right_and_later_wrong_points_to_indexing():
    res = check_sampler_law(_later_positions_read_position_0, SPS, seed=2, num_samples=5000, invariants=False)
    assert not any(c.position == 0 for c in res.failures if c.name in ("law", "acceptance"))
    assert any("position 0 is right and later positions are wrong" in d for d in res.diagnosis)


def _low_acceptance_case():
    """k = 3 rows where the drafter and the verifier overlap little (acceptance 0.07 at position 0)."""
    rng = np.random.default_rng(10)
    v = 16
    q = rng.dirichlet(np.full(v, 0.3), size=4)
    p = np.stack([np.roll(row, v // 2) for row in q[:3]])  # the mass moved to other tokens
    return dyadic(q), dyadic(0.98 * p + 0.02 * q[:3])


def _temperature_on_q_only(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Verifies against q at temperature 0.9 (q ** (1 / 0.9), renormalized): q only."""
    q = target_probs ** (1 / 0.9)
    return reference_sampler("sps")(
        q / q.sum(-1, keepdim=True), draft_probs, draft_token_ids, bonus_token_ids
    )


def test_low_acceptance_rows_with_a_q_only_temperature_are_not_reported_passed():
    """At acceptance ~0.08 later positions get few draws: the outcome says underpowered (or failed),
    never passed, and names the draws it would need."""
    q, p = _low_acceptance_case()
    law = exact_law("sps", q, p)
    assert law.acceptance[0] < 0.1 and law.reach[2] * DEFAULT_NUM_SAMPLES < 500
    res = check_sampler_law(_temperature_on_q_only, SPS, q, p, seed=6)
    assert res.outcome in ("underpowered", "failed"), res.report()
    late = [c for c in res.checks if c.name == "law" and c.position == 2]
    assert late[0].n < 1000 and (late[0].underpowered or not late[0].passed)
    if res.outcome == "underpowered":
        assert res.draws_needed > DEFAULT_NUM_SAMPLES
