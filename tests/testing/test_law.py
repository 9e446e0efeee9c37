"""cactus_theory.testing: the sampler-law check on real samplers, its error rates, strategies, plugin.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise, Bonferroni over its tests; exact for the binomial and Bernstein
tests, asymptotic for chi-square), so with fewer than 40 calls on correct samplers the chance
that one fails is below 4e-5; seeds are fixed, so a run is reproducible. The calibration test
runs at moderate levels, where its own bound is stated. The runs at the default (full-power)
size carry the marker ``full``: ``./dev test`` runs them in their own stage, beside the others;
the main stage keeps the checks at fewer draws.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import tomllib
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

import cactus_theory as ct
from cactus_theory.rules import get_rule
from cactus_theory.samplers import ragged_forward
from cactus_theory.testing import (
    CASEBOOK,
    DEFECTS,
    assert_sampler_law,
    callable_adapter,
    check_sampler_law,
    default_cases,
    default_raw_rows,
    dyadic,
    exact_law,
    reference_sampler,
    v0_adapter,
    v1_adapter,
)
from cactus_theory.testing import strategies as cts
from cactus_theory.testing._adapters import as_adapter

# the documented defaults, read from the signature users see
DEFAULT_ALPHA = inspect.signature(check_sampler_law).parameters["alpha"].default
DEFAULT_NUM_SAMPLES = inspect.signature(check_sampler_law).parameters["num_samples"].default

ROOT = pathlib.Path(__file__).resolve().parents[2]
DELTA = 0.05  # a Cactus budget with frequent rejections on the default cases (acceptance < 1)
CACTUS = get_rule("cactus-taylor", delta=DELTA)
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


# ----------------------------------------------------------------------------- correct samplers pass


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


@pytest.mark.full
@pytest.mark.parametrize("rule", ["sps", "cactus-taylor"])
def test_the_reference_sampler_passes(rule):
    sampler = reference_sampler(rule, delta=DELTA if rule != "sps" else None)
    res = assert_sampler_law(sampler, SPS if rule == "sps" else CACTUS, seed=3)
    assert res.interface == "callable" and not res.skipped[1:]  # only the counters are skipped


# ----------------------------------------------------------------------------- broken samplers are caught


#: Shown only by the batch contracts (small batches): tests/testing/test_batches.py.
BATCH_DEFECTS = ("unseeded-noise-unwritten", "seeded-batch-dependent", "first-slot-rows")


@pytest.mark.parametrize("defect", [d for d in DEFECTS if d not in BATCH_DEFECTS])
def test_each_planted_defect_is_caught(defect):
    """Every mutant of the casebook fails (seed 11) at 5,000 draws per case, the subtlest one,
    cactus-no-rescale, at the default 20,000 (at 5,000 its law check's p-value is 5e-8, above the
    level); the detection rates over seeds at the default size are generated into docs/testing.md
    by scripts/sampler_power.py and checked on a slice below. The exact side checks run only for
    the mutants that only they can show (u = 0 never occurs in ordinary draws; the ordinary
    draws hold no placeholder draft)."""
    entry = CASEBOOK[defect]
    rule = {"cactus-taylor": CACTUS, "block": "block"}.get(entry.rule, SPS)
    sampler = reference_sampler(
        entry.rule, delta=DELTA if entry.rule == "cactus-taylor" else None, defect=defect
    )
    n = DEFAULT_NUM_SAMPLES if defect == "cactus-no-rescale" else 5000
    exact = defect in ("inclusive-comparison", "negative-index")
    res = check_sampler_law(sampler, rule, seed=11, num_samples=n, invariants=exact)
    assert not res.passed and res.outcome == "failed" and res.diagnosis
    failed = {c.name for c in res.failures}
    # the block mutants that keep the law show in the acceptance only (lossless, fewer drafts kept)
    shown = {"acceptance"} if defect in ("block-onehot-fallback", "block-ignored") else {"law", "bonus-law"}
    assert failed & ({"zero-uniform", "placeholder"} if exact else shown), failed
    assert re.search(r"[\w.-]+/[\w.-]+ #\d+", entry.source) or entry.source.startswith("none public")


def test_the_casebook_has_its_sources():
    """At least 14 defect classes, each with one public report (repository #number)."""
    assert len(CASEBOOK) >= 14 and tuple(CASEBOOK) == DEFECTS
    public = [d for d in CASEBOOK.values() if re.search(r"[\w.-]+/[\w.-]+ #\d+", d.source)]
    assert len(public) >= 14
    assert len({d.bug_class for d in CASEBOOK.values()}) == len(CASEBOOK)


@pytest.mark.full
def test_the_report_says_where_and_by_how_much():
    res = check_sampler_law(reference_sampler("sps", defect="swapped-ratio"), SPS, seed=1)
    text = res.report()
    assert text.startswith("sampler law of rule 'sps' through the callable interface: FAILED")
    assert "case 'generic' position 0: acceptance (binomial)" in text and "exact 0.7573" in text
    assert "token 5 emitted" in text and "its exact probability is 0" in text  # disjoint supports
    assert res.to_dict()["passed"] is False and res.min_p_value == 0.0


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


# ----------------------------------------------------------------------------- adapters


def _v1_rejection_sample(
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
):
    """vLLM V1's ``rejection_sample`` signature over the toolkit's ragged sampler: SpS on the
    softmax of the logits, greedy requests (temperature 0) verified against the argmax."""
    probs = torch.softmax(target_logits, -1)
    greedy = (sampling_metadata.temperature == 0).repeat_interleave(torch.tensor(num_draft_tokens))
    one_hot = torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)
    probs = torch.where(greedy[:, None], one_hot, probs)
    return ragged_forward(
        ct.make_sampler("sps"),
        draft_token_ids,
        num_draft_tokens,
        draft_probs,
        probs,
        bonus_token_ids,
        generators=sampling_metadata.generators,
        max_spec_len=max_spec_len,
    )


def test_the_v1_adapter_on_the_flat_layout():
    assert as_adapter(_v1_rejection_sample).name == "vllm-v1"
    res = assert_sampler_law(v1_adapter(_v1_rejection_sample), SPS, num_samples=8000, seed=4)
    greedy = [c for c in res.checks if c.name == "greedy"]
    assert len(greedy) == 5 and all("temperature 0" in c.detail for c in greedy)  # 4 cases of k = 3, deep


def test_adapter_choice_and_a_numpy_callable():
    assert as_adapter(ct.make_sampler("sps")).name == "vllm-v0"
    assert as_adapter(reference_sampler()).name == "callable"
    adapter = v0_adapter(ct.make_sampler("sps"))
    assert as_adapter(adapter) is adapter and adapter.supports_seeds

    def numpy_sps(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        assert isinstance(target_probs, np.ndarray)
        return reference_sampler("sps")(
            *(torch.as_tensor(a) for a in (target_probs, draft_probs, draft_token_ids, bonus_token_ids))
        ).numpy()

    assert assert_sampler_law(callable_adapter(numpy_sps, array="numpy"), SPS, num_samples=4000).passed


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


# ----------------------------------------------------------------------------- strategies


def _kind_property(kind, q, p):
    if kind == "one_hot_p":
        return np.count_nonzero(p) == 1
    if kind == "disjoint":
        return not np.any((q > 0) & (p > 0))
    if kind == "near_zero_q":  # mass <= 1e-6 on a token the drafter gives >= 1/(3V)
        return np.any((q > 0) & (q <= 1e-6 * (1 + 1e-9)) & (p >= 1 / (3 * len(q))))
    if kind == "half":  # on the float16 grid, summing to 1 in float16 as in float64
        return all(np.array_equal(x.astype(np.float16).astype(np.float64), x) for x in (q, p))
    if kind == "large_vocab":
        return len(q) >= 2**12
    return True


@pytest.mark.parametrize("kind", cts.PAIR_KINDS)
def test_pairs_of_every_kind_are_probability_rows_with_their_property(kind):
    @given(cts.pairs(2, 48, kinds=(kind,)))
    def run(qp):
        q, p = qp
        assert q.shape == p.shape and q.dtype == np.float64
        for x in (q, p):
            assert np.all(x >= 0) and abs(x.sum() - 1) < 1e-12
        assert _kind_property(kind, q, p)
        if kind == "truncated":
            assert np.count_nonzero(q) >= 1 and np.count_nonzero(p) >= 1

    run()


@given(cts.pairs(max_vocab=24, exact_float32=True))
def test_exact_float32_pairs_are_their_float32_values(qp):
    for x in qp:
        assert np.array_equal(x.astype(np.float32).astype(np.float64), x) and x.sum() == 1


@given(cts.draft_batches(max_requests=4, max_drafts=3, max_vocab=12))
def test_the_three_layouts_describe_the_same_batch(batch):
    v1 = batch.v1()
    counts = batch.num_draft_tokens
    assert v1["num_draft_tokens"] == counts and v1["cu_num_draft_tokens"].tolist() == list(np.cumsum(counts))
    start = 0
    pad = batch.padded()
    cu = pad["cu_num_logits"].tolist()
    assert cu[0] == 0 and len(cu) == len(counts) + 1
    for r, k in enumerate(counts):
        q, p, n = batch.target_probs[r], batch.draft_probs[r], batch.draft_token_ids[r]
        assert np.all(p[np.arange(k), n] > 0)  # drafts are drawn from p
        sl = slice(start, start + k)
        assert v1["draft_token_ids"][sl].tolist() == n.tolist()
        np.testing.assert_array_equal(v1["target_probs"][sl].numpy(), q[:k].astype(np.float32))
        np.testing.assert_array_equal(v1["draft_probs"][sl].numpy(), p.astype(np.float32))
        start += k
        s = cu[r]
        assert cu[r + 1] - s == k + 1
        assert pad["draft_sampled"][s + 1 : s + k + 1].tolist() == n.tolist()
        np.testing.assert_array_equal(pad["target_probs"][s : s + k + 1].numpy(), q.astype(np.float32))
        assert not pad["draft_probs"][r, k:].any()
    if len(set(counts)) == 1:
        v0 = batch.v0()
        assert v0["target_with_bonus_probs"].shape == (len(counts), counts[0] + 1, batch.vocab_size)
        assert v0["draft_token_ids"].tolist() == [n.tolist() for n in batch.draft_token_ids]
    else:
        with pytest.raises(ValueError, match="num_draft_tokens"):
            batch.v0()


@given(cts.draft_batches(max_requests=3, max_drafts=3, max_vocab=10, ragged=False, exact_float32=True))
def test_the_toolkits_sampler_verifies_every_generated_v0_batch(batch):
    """Generated batches are valid sampler input: the output keeps the V0 layout."""
    v0 = batch.v0()
    out = ct.make_sampler("sps")(**v0)
    k = v0["draft_token_ids"].shape[1]
    present = out != -1
    assert present[:, 0].all() and not (present[:, 1:] & ~present[:, :-1]).any()
    accepted = present[:, 1:]
    assert (out[:, :k][accepted] == v0["draft_token_ids"][accepted]).all()


# ----------------------------------------------------------------------------- the pytest plugin

PLUGIN_TEST = """
import pytest
import cactus_theory as ct
from cactus_theory.testing import reference_sampler


@pytest.mark.sampler_law("cactus-taylor", delta=0.05, num_samples=3000)
def test_toolkit_cactus(sampler_law):
    res = sampler_law(ct.make_sampler("cactus-taylor", delta=0.05))
    assert res.passed and res.num_samples == 3000 and res.seed == 7


@pytest.mark.sampler_law(rule="sps")
def test_broken_recovery(sampler_law):
    sampler_law(reference_sampler("sps", defect="recovery-from-q"))


def test_exact_law_fixture(exact_law):
    assert exact_law("sps", [[0.5, 0.5], [1.0, 0.0]], [[1.0, 0.0]]).acceptance.tolist() == [0.5]
"""


def _plugin_flags():
    """Load the plugin by its entry point when installed, else by its module name."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.name == "cactus_theory" for ep in eps):
        return []
    return ["-p", "no:cactus_theory", "-p", "cactus_theory.testing.pytest_plugin"]


def test_the_entry_point_is_declared():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["pytest11"] == {
        "cactus_theory": "cactus_theory.testing.pytest_plugin"
    }
    for ep in importlib.metadata.entry_points(group="pytest11"):
        if ep.name == "cactus_theory":
            assert ep.value == "cactus_theory.testing.pytest_plugin"


DOCS = ROOT / "docs" / "testing.md"


def _docs_block(label):
    """The code block after ``<!-- example: label -->`` in docs/testing.md."""
    text = DOCS.read_text()
    after = text.split(f"<!-- example: {label} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


@pytest.mark.full
def test_the_docs_state_the_defaults_and_a_real_failure_report():
    text = DOCS.read_text()
    defaults = inspect.signature(check_sampler_law).parameters
    for name in ("alpha", "power", "tv_goal"):
        stated = re.search(rf"default `{name}=([0-9.e-]+)`", text).group(1)
        assert float(stated) == defaults[name].default, name
    assert "cells of expected count < 5 pooled" in text
    assert inspect.signature(check_sampler_law).parameters["min_expected"].default == 5.0
    shown = [line for line in _docs_block("failure").splitlines() if line.strip()]
    report = check_sampler_law(reference_sampler("sps", defect="recovery-from-q"), "sps").report()
    lines = report.splitlines()
    assert all(line in lines for line in shown), (shown, report)
    assert lines.index(shown[0]) < lines.index(shown[-1])


@pytest.mark.full
def test_the_plugin_in_another_project(tmp_path):
    """The plugin's fixtures and marker in a temporary project, with the docs page's example."""
    (tmp_path / "test_other.py").write_text(PLUGIN_TEST)
    (tmp_path / "test_docs_example.py").write_text(_docs_block("plugin"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *_plugin_flags(),
            "--sampler-law-seed",
            "7",
            "--strict-markers",
            "--junitxml",
            str(tmp_path / "junit.xml"),
            "test_other.py",
            "test_docs_example.py",
        ],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "5 passed" in out and "1 failed" in out, out
    assert "test_broken_recovery" in out and "law (chi-square)" in out, out
    # pytest shows the report (diagnosis first), not the toolkit's source
    assert "diagnosis:" in out and "the recovery distribution" in out, out
    assert "result = check_sampler_law(" not in out and "result = assert_sampler_law(" not in out, out
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="sampler_law"' in junit and "passed (" in junit


# ----------------------------------------------------------------------------- power, diagnosis, bonus contract


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
