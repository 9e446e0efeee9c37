"""Whole-request checks of cactus_theory.testing: batch contracts, depth, recovery, engine drafting."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import cactus_theory as ct  # noqa: E402
from cactus_theory.testing import (  # noqa: E402
    CASEBOOK,
    check_sampler_law,
    default_cases,
    drafting_adapter,
    dyadic,
    exact_law,
    reference_sampler,
)
from cactus_theory.testing._batches import BATCH_CALLS, DRAWS_PER_CALL  # noqa: E402
from cactus_theory.testing._deep import DEEP_K, deep_case  # noqa: E402

SPS = "sps"


def _failed(res) -> set:
    return {c.name for c in res.failures}


def test_the_batch_contracts_run_small_mixed_batches_and_pass_a_correct_sampler():
    """1,600 draws per case: 10 small batches of mixed requests; every contract runs and passes."""
    res = check_sampler_law(reference_sampler(SPS), SPS, num_samples=1600, seed=2)
    names = {c.name for c in res.checks}
    assert {"batch-layout", "batch-greedy", "batch-seeded"} <= names
    assert {"batch-law:first", "batch-law:last", "batch-law:inner"} <= names
    assert res.passed, res.report()
    seeded = next(c for c in res.checks if c.name == "batch-seeded")
    assert seeded.n > 6 and "reproduced in every batch" in seeded.detail
    assert -(-20_000 // DRAWS_PER_CALL) >= BATCH_CALLS  # the default size runs every batch


@pytest.mark.parametrize(
    "defect, check, num_samples",
    [
        ("unseeded-noise-unwritten", "batch-law", 20_000),
        ("seeded-batch-dependent", "batch-seeded", 2000),
    ],
)
def test_batch_defects_pass_every_one_batch_check_and_fail_a_batch_contract(defect, check, num_samples):
    """Unseeded rows beside seeded ones with unwritten noise, and a seeded request whose noise
    depends on its batch, pass the main draws and the seeded side batch (one fixed batch, twice)
    and fail a batch contract. 20,000 draws per case (200 small batches) for the first: its
    deviation touches only recovered tokens of mixed batches."""
    four = default_cases()
    res = check_sampler_law(
        reference_sampler(SPS, defect=defect),
        SPS,
        [c[0] for c in four],
        [c[1] for c in four],
        num_samples=num_samples,
        seed=1,
    )
    failed = _failed(res)
    assert failed and all(name.startswith("batch-") for name in failed), res.report()
    assert any(name.startswith(check) for name in failed), failed
    assert any("batch contract failed" in d for d in res.diagnosis)


def test_a_first_slot_fault_fails_the_batch_contracts():
    """The first request of each batch reads the last one's rows: the main draws' one large batch
    has one such row; the small batches have one per batch."""
    res = check_sampler_law(reference_sampler(SPS, defect="first-slot-rows"), SPS, num_samples=2000, seed=1)
    assert {"batch-seeded", "batch-law:first"} <= _failed(res), res.report()


def test_the_deep_case_is_built_for_the_rule_so_every_position_rejects():
    """k = 8; the rule's acceptance at position i is (k - i) / (k + 1 - i) up to the dyadic rounding
    (2^-20 per entry moves the acceptance by less than 1e-4) where the drafter can reach it, so
    every position rejects about 1/9 of the draws."""
    q, p = deep_case(ct.get_rule(SPS))
    assert p.shape == (DEEP_K, 5) and q.shape == (DEEP_K + 1, 5) and np.array_equal(dyadic(q), q)
    law = exact_law(SPS, q, p)
    want = np.array([(DEEP_K - i) / (DEEP_K + 1 - i) for i in range(DEEP_K)])
    assert np.allclose(law.acceptance, want, atol=1e-4), law.acceptance
    assert np.allclose(law.reach * (1 - np.append(law.acceptance, 0.0)), 1 / 9, atol=1e-4)
    cases = default_cases(SPS)
    assert len(cases) == 5 and len(default_cases()) == 4
    assert np.array_equal(cases[-1][1], p)
    lossy = exact_law(
        ct.get_rule("cactus-taylor", delta=1.0), *deep_case(ct.get_rule("cactus-taylor", delta=1.0))
    )
    rejects = lossy.reach[:DEEP_K] * (1 - lossy.acceptance)
    assert rejects.min() > 0.05, rejects  # a large budget accepts more: the drafter moves further


def test_a_defect_past_position_three_is_caught_by_the_deep_case_only():
    """max-depth-row verifies positions 3.. against row 2: right for k = 3 (the four cases pass),
    wrong at every deeper position of the deep case."""
    sampler = reference_sampler(SPS, defect="max-depth-row")
    four = default_cases()
    shallow = check_sampler_law(sampler, SPS, [c[0] for c in four], [c[1] for c in four], num_samples=2000)
    assert shallow.passed, shallow.report()
    q, p = deep_case(ct.get_rule(SPS))
    deep = check_sampler_law(sampler, SPS, q, p, num_samples=4000, invariants=False)
    positions = {c.position for c in deep.failures if c.name in ("law", "recovery", "acceptance")}
    assert positions and min(positions) >= 3, deep.report()


def test_the_recovery_law_is_sps_residual_and_reports_its_rejections():
    """For SpS the token after a rejection follows max(q - p, 0) normalized (the check derives it as
    (h_alg - p a) / (1 - alpha)); the report gives each position's rejection draws."""
    q, p = default_cases()[0]
    law = exact_law(SPS, q, p)
    residual = np.clip(q[:3] - p, 0, None)
    derived = (law.emitted - law.accepted_mass) / (1 - law.acceptance[:, None])
    assert np.allclose(derived, residual / residual.sum(-1, keepdims=True), atol=1e-12)
    res = check_sampler_law(reference_sampler(SPS), SPS, q, p, num_samples=3000, invariants=False)
    rec = [c for c in res.checks if c.name == "recovery"]
    assert [c.position for c in rec] == [0, 1, 2] and all(c.passed for c in rec)
    assert f"{rec[0].n} rejections, recovery TV >= " in res.report()


@pytest.mark.parametrize("delta", [0.1, 0.5, 1.0])
def test_cactus_without_rescaling_is_caught_at_the_papers_budgets(delta):
    """The deep case built for Cactus at delta rejects at every position, so the recovery law shows
    the missing rescaling at 0.1, 0.5 and 1.0, where the default k = 3 cases rarely reject."""
    rule = ct.get_rule("cactus-taylor", delta=delta)
    q, p = deep_case(rule)
    bad = reference_sampler("cactus-taylor", delta=delta, defect="cactus-no-rescale")
    res = check_sampler_law(bad, rule, q, p, num_samples=6000, invariants=False, seed=4)
    assert "recovery" in _failed(res), res.report()
    ok = check_sampler_law(
        reference_sampler("cactus-taylor", delta=delta),
        rule,
        q,
        p,
        num_samples=6000,
        invariants=False,
        seed=4,
    )
    assert ok.passed, ok.report()


def test_engine_drafted_steps_check_the_drafts_and_the_output():
    """A sampler that draws its own drafts: the drafts' law is tested (draft-law) and the output's;
    drafting noise reused by the acceptance test and the recovery (vLLM #47386) fails the output's
    law while the drafts' law passes; drafts drawn from the wrong rows fail draft-law."""
    ok = check_sampler_law(reference_sampler(SPS, drafting=True), SPS, num_samples=2000, seed=5)
    assert ok.interface == "drafting" and ok.passed, ok.report()
    assert any(c.name == "draft-law" for c in ok.checks)
    bad = check_sampler_law(
        reference_sampler(SPS, defect="drafting-noise-reused"), SPS, num_samples=2000, seed=5
    )
    assert CASEBOOK["drafting-noise-reused"].drafting
    assert {"law", "acceptance"} <= _failed(bad) and "draft-law" not in _failed(bad), bad.report()
    inner = reference_sampler(SPS)

    def from_q(target_probs, draft_probs, bonus_token_ids):
        import torch

        drafts = torch.multinomial(target_probs[:, :-1].reshape(-1, target_probs.shape[-1]), 1)
        drafts = drafts.reshape(draft_probs.shape[:2])
        return drafts, inner(target_probs, draft_probs, drafts, bonus_token_ids)

    wrong = check_sampler_law(drafting_adapter(from_q), SPS, num_samples=2000, seed=5)
    assert "draft-law" in _failed(wrong) and any("drafts the sampler drew" in d for d in wrong.diagnosis)
    with pytest.raises(ValueError, match="drafting"):
        reference_sampler(SPS, defect="drafting-noise-reused", drafting=False)
    with pytest.raises(TypeError, match="fn"):
        drafting_adapter(3)


def test_the_docs_state_the_batches_and_depths_the_check_runs():
    """docs/testing.md's whole-request section: its numbers are the module's."""
    import re
    from pathlib import Path

    from cactus_theory.testing._batches import BATCH_SIZES, PROBES
    from cactus_theory.testing._deep import DEEP_V, DEEP_V_BLOCK

    text = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    part = text.split("## Whole requests", 1)[1].split("\n## ", 1)[0]
    sizes = re.search(r"small batches of ([\d, and]+) requests", part).group(1)
    assert tuple(int(x) for x in re.findall(r"\d+", sizes)) == BATCH_SIZES
    assert f"({BATCH_CALLS} batches\nat the default size, one per {DRAWS_PER_CALL} draws per case)" in part
    assert {"one": 1, "six": 6}[re.search(r"one of (\w+) seeded requests", part).group(1)] == PROBES
    assert f"$k = {DEEP_K}$ drafts (V = {DEEP_V}; {DEEP_V_BLOCK} for block verification)" in part
    assert f"$({DEEP_K} - i)/({DEEP_K + 1} - i)$" in part and "one draw in nine" in part
    assert "2,222 of 20,000" in part and round(20_000 / (DEEP_K + 1)) == 2222
    # the section's example runs in tests/test_readme.py (every python block of the pages)
    assert "<!-- example: whole-request -->" in part
