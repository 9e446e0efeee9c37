"""cactus_theory.testing: the exact law behind the sampler-law check, its exact invariants, the
detectable deviation, and the generated power table.

The check itself is tested in test_check.py, the casebook in test_casebook.py, the result and
its diagnosis in test_results.py, the adapters in test_adapters.py, the strategies in
test_strategies.py and the pytest plugin in test_pytest_plugin.py.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise); seeds are fixed, so a run is reproducible.
"""

from __future__ import annotations

import inspect
import json
import pathlib
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

import cactus_theory as ct
from cactus_theory.rules import get_rule
from cactus_theory.testing import (
    CASEBOOK,
    DEFECTS,
    check_sampler_law,
    default_cases,
    default_raw_rows,
    dyadic,
    exact_law,
    reference_sampler,
)

DEFAULT_ALPHA = inspect.signature(check_sampler_law).parameters["alpha"].default
DEFAULT_NUM_SAMPLES = inspect.signature(check_sampler_law).parameters["num_samples"].default
ROOT = pathlib.Path(__file__).resolve().parents[2]
SPS = get_rule("sps")


# ----------------------------------------------------------------------------- the exact law


def test_exact_law_of_sps_is_lossless_and_accepts_sum_min():
    """SpS emits q at every position and accepts with sum_j min(p_j, q_j) (Leviathan et al.)."""
    for q, p in default_cases():
        law = exact_law("sps", q, p)
        np.testing.assert_allclose(law.emitted, q[:-1], atol=1e-12)  # float64 rounding
        np.testing.assert_allclose(law.acceptance, np.minimum(q[:-1], p).sum(-1), atol=1e-12)
        np.testing.assert_allclose(law.accepted_mass.sum(-1), law.acceptance, atol=1e-12)
        assert law.reach[0] == 1 and np.allclose(law.reach[1:], np.cumprod(law.acceptance))
        assert law.expected_emitted == pytest.approx(1 + law.expected_accepted_prefix)


def test_default_cases_are_exact_in_float32_and_have_no_ties():
    cases = default_cases()
    assert [p.shape for _, p in cases] == [(3, 12), (3, 10), (3, 8), (3, 10)]
    for q, p in cases:
        for x in (q, p):
            assert np.array_equal(x.astype(np.float32).astype(np.float64), x)
            assert np.all(x.astype(np.float32).sum(-1, dtype=np.float32) == 1)
        assert not np.any((q[:-1] == p) & (p > 0))
        assert len({tuple(r) for r in q}) == len(q)  # a different verifier row at every position
    edge_q, edge_p = cases[1]
    assert np.count_nonzero(edge_p[0]) == 1 and edge_q[0, 2] == 0.5
    assert not np.any((edge_q[2] > 0) & (edge_p[2] > 0))
    assert exact_law("sps", edge_q, edge_p).acceptance[2] == 0
    # truncated: processed rows are the raw rows' top 3 (q) and top 4 (p), the raw q rows tie at
    # the top-3 boundary (the lower index kept), and the drafter proposes tokens of q = 0
    tq, tp = cases[3]
    rq, rp = default_raw_rows()[3]
    assert [r is None for r in default_raw_rows()] == [True, True, True, False]
    for i in range(3):
        kept = np.flatnonzero(tq[i])
        assert len(kept) == 3 and len(np.flatnonzero(tp[i])) == 4
        third = np.sort(rq[i])[-3]
        assert np.count_nonzero(rq[i] == third) == 2 and np.all(rq[i, kept] >= third)
        # the default cases are dyadic (multiples of 2^-20): one rounding step per entry
        np.testing.assert_allclose(tq[i, kept], rq[i, kept] / rq[i, kept].sum(), atol=2**-20)
        assert tp[i][tq[i] == 0].sum() > 0.4


@given(st.integers(1, 40).flatmap(lambda v: st.lists(st.floats(0, 1), min_size=v, max_size=v)))
def test_dyadic_rows_sum_to_one_and_keep_the_support(w):
    x = np.asarray(w)
    if not x.sum() > 0:
        x = np.ones_like(x)
    d = dyadic(x)
    assert d.sum() == 1.0 and np.all((d > 0) == (x > 0))
    assert np.all(d * 2**20 == np.round(d * 2**20))
    assert np.abs(d - x / x.sum()).max() <= len(x) * 2.0**-20


# ----------------------------------------------------------------------------- the exact invariants


class _Wrapped(torch.nn.Module):
    """A V0 sampler around the toolkit's, with one planted bug in its output or counters."""

    def __init__(self, bug):
        super().__init__()
        self.inner = ct.make_sampler("sps")
        self.bug = bug
        self.num_accepted_tokens = self.num_emitted_tokens = None
        self.num_draft_tokens = 0

    def init_tensors(self, device):
        self.num_accepted_tokens = torch.zeros((), dtype=torch.long)
        self.num_emitted_tokens = torch.zeros((), dtype=torch.long)

    def forward(
        self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs=None
    ):
        if self.bug == "seeds ignored":
            seeded_seqs = None
        out = self.inner(
            target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs=seeded_seqs
        ).clone()
        k = draft_token_ids.shape[1]
        if self.bug == "bonus changed":
            v = target_with_bonus_probs.shape[-1]
            out[:, k] = torch.where(out[:, k] >= 0, (out[:, k] + 1) % v, out[:, k])
        present = out != -1
        causal = present[:, 1:].sum()
        self.num_accepted_tokens += causal if self.bug == "causal counter" else self.inner.last_accepted.sum()
        self.num_emitted_tokens += present.sum()
        self.num_draft_tokens += draft_token_ids.numel()
        return out


@pytest.mark.parametrize(
    "bug, checks",
    [
        # greedy rows emit the bonus token too; the batch contracts see both in small batches
        ("bonus changed", ["bonus", "greedy", "batch-layout", "batch-greedy"]),
        ("seeds ignored", ["seeded", "batch-seeded"]),
        ("causal counter", ["counter:num_accepted_tokens"]),
        (None, []),
    ],
)
def test_the_invariants_catch_what_they_check(bug, checks):
    res = check_sampler_law(_Wrapped(bug), SPS, num_samples=4000, seed=5)
    assert {c.name for c in res.failures if c.test == "exact" or c.name.startswith("counter")} == set(checks)
    assert res.passed == (bug is None)


def test_layout_and_greedy_violations_are_exact_failures():
    def emits_after_placeholder(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        out = reference_sampler("sps")(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
        out[:, -1] = bonus_token_ids[:, 0]  # the bonus token written in every row
        return out

    res = check_sampler_law(emits_after_placeholder, SPS, num_samples=2000, seed=2)
    failed = {c.name for c in res.failures}
    assert {"layout", "greedy"} <= failed and "bonus" not in failed


# ----------------------------------------------------------------------------- the detectable deviation


def test_the_detectable_deviation_is_detected_at_the_stated_power():
    """Oracle: simulated chi-square tests. At n draws, a law at total variation t* (the stated
    detectable deviation) in the direction that minimises chi-square (d_j = +-c h_j) is
    detected in at least 0.9 of 4,000 simulated tests, to 4.3 standard errors of a binomial at
    0.9 (sd 0.0047; the bound is also asymptotic in n, hence the margin)."""
    from cactus_theory.testing._stats import detectable_tv, draws_needed, noncentrality

    rng = np.random.default_rng(3)
    h = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    n, level = 3000, 1e-6
    t = detectable_tv(n, len(h) - 1, level)
    sign = np.array([1, 1, -1, -1, 1.0])
    d = sign * h
    d -= h * d.sum()  # sum zero, |d_j| close to proportional to h_j
    g = h + d * t / (0.5 * np.abs(d).sum())
    assert 0.5 * np.abs(g - h).sum() == pytest.approx(t)
    counts = rng.multinomial(n, g, size=4000)
    stat = ((counts - n * h) ** 2 / (n * h)).sum(1)
    rate = np.mean(stat > stats.chi2.isf(level, len(h) - 1))
    assert rate >= 0.9 - 0.02, (t, rate)
    # draws_needed inverts detectable_tv rounded up to a whole draw (abs 1; 1e-6 relative: the
    # noncentrality root both solve)
    assert draws_needed(t, len(h) - 1, level) == pytest.approx(n, rel=1e-6, abs=1)
    assert noncentrality(4, level, 0.9) > noncentrality(4, 1e-2, 0.9)


# ----------------------------------------------------------------------------- the generated power table


def _power_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sampler_power", ROOT / "scripts" / "sampler_power.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_the_power_table_is_generated_and_meets_its_goals():
    """The committed record covers every mutant over >= 10 seeds (each caught in >= 9/10), Cactus
    without rescaling also at the paper's budgets 0.1, 0.5 and 1, and >= 300 runs of correct
    samplers (>= 50 each); the page's block is its rendering. False alarms: at alpha = 1e-6 per
    run, one or more in 300 runs has probability below 3e-4, so the record's count is asserted to
    be 0."""
    sp = _power_script()
    rec = json.loads(sp.POWER_JSON.read_text())
    assert rec["num_samples"] == DEFAULT_NUM_SAMPLES and rec["alpha"] == DEFAULT_ALPHA
    rows = [(m["defect"], m["delta"]) for m in rec["mutants"]]
    assert [d for d, _ in rows[: len(DEFECTS)]] == list(DEFECTS)
    assert rows[len(DEFECTS) :] == list(sp.RULE_AWARE) and {0.1, 0.5, 1.0} <= {d for _, d in sp.RULE_AWARE}
    for m in rec["mutants"]:
        assert m["seeds"] == len(m["per_seed"]) >= 10 and m["caught"] >= 0.9 * m["seeds"], m
        assert m["source"] == CASEBOOK[m["defect"]].source
    assert [c["sampler"] for c in rec["correct"]][0] == "reference('sps')"
    assert all(c["runs"] == len(c["per_seed"]) >= 50 for c in rec["correct"])
    assert sum(c["runs"] for c in rec["correct"]) >= 300
    assert sum(c["false_alarms"] for c in rec["correct"]) == 0
    assert sp.render(check=True) == 0, "docs/testing.md: run scripts/sampler_power.py render"


def test_the_power_table_is_what_the_script_computes_on_a_slice():
    """One seed of two mutants and of one correct sampler, rerun: the same outcomes as recorded."""
    sp = _power_script()
    rec = json.loads(sp.POWER_JSON.read_text())
    mutants = {m["defect"]: m for m in rec["mutants"]}
    for defect in ("coupled-resample-uniform", "first-slot-rows"):
        seed, outcome = mutants[defect]["per_seed"][0]
        assert sp.run_one(("reference", CASEBOOK[defect].rule, defect, seed, sp.DELTA))["outcome"] == outcome
    first = rec["correct"][0]
    assert first["sampler"] == "reference('sps')"
    seed, outcome = first["per_seed"][0]
    assert sp.run_one(("reference", "sps", None, seed, sp.DELTA))["outcome"] == outcome
