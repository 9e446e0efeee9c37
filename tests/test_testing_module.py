"""cactus_theory.testing: the sampler-law check on real samplers, its error rates, strategies, plugin.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise, Bonferroni over its tests; exact for the binomial and Bernstein
tests, asymptotic for chi-square), so with fewer than 40 calls on correct samplers the chance
that one fails is below 4e-5; seeds are fixed, so a run is reproducible. The calibration test
runs at moderate levels, where its own bound is stated.
"""

from __future__ import annotations

import importlib.metadata
import inspect
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
    DEFAULT_ALPHA,
    DEFAULT_NUM_SAMPLES,
    DEFECTS,
    as_adapter,
    assert_sampler_law,
    callable_adapter,
    check_sampler_law,
    default_cases,
    dyadic,
    exact_law,
    reference_sampler,
    v0_adapter,
    v1_adapter,
)
from cactus_theory.testing import strategies as cts

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
    assert [p.shape for _, p in cases] == [(3, 12), (3, 10), (3, 8)]
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
    assert res.num_tests == 2 * 9 + 1 and all(
        c.threshold == DEFAULT_ALPHA / res.num_tests for c in res.checks if c.test != "exact"
    )


def _knobs(name):
    """Knobs with a non-trivial law on the default cases (acceptance below 1)."""
    if name.startswith("cactus"):
        return {"delta": DELTA}
    if name.startswith("cascade"):
        return {"alpha": 0.1}
    return {}


# mentored and cactus-calibrated solve a root per row (seconds per call here): left to the
# detection script; the three rules above run at the default size
OTHER_RULES = [
    n
    for n in ct.rule_names()
    if n not in ("sps", "cactus-taylor", "interpolation", "mentored", "cactus-calibrated")
]


@pytest.mark.parametrize("name", OTHER_RULES)
def test_every_other_rules_sampler_passes_on_fewer_draws(name):
    rule = get_rule(name, **_knobs(name))
    assert assert_sampler_law(ct.make_sampler(rule), rule, num_samples=5000, seed=2).passed


@pytest.mark.parametrize("rule", ["sps", "cactus-taylor"])
def test_the_reference_sampler_passes(rule):
    sampler = reference_sampler(rule, delta=DELTA if rule != "sps" else None)
    res = assert_sampler_law(sampler, SPS if rule == "sps" else CACTUS, seed=3)
    assert res.interface == "callable" and not res.skipped[1:]  # only the counters are skipped


# ----------------------------------------------------------------------------- broken samplers are caught


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_planted_defect_is_caught_at_the_default_size(defect):
    rule, sampler = (
        (CACTUS, reference_sampler("cactus-taylor", delta=DELTA, defect=defect))
        if defect == "cactus-no-rescale"
        else (SPS, reference_sampler("sps", defect=defect))
    )
    res = check_sampler_law(sampler, rule, seed=11, invariants=False)
    assert not res.passed
    failed = {c.name for c in res.failures}
    assert "law" in failed
    with pytest.raises(AssertionError, match=r"law \(chi-square\) p = .* < "):
        assert_sampler_law(sampler, rule, seed=11, invariants=False)


def test_the_report_says_where_and_by_how_much():
    res = check_sampler_law(reference_sampler("sps", defect="swapped-ratio"), SPS, seed=1)
    text = res.report()
    assert text.startswith("sampler law of rule 'sps' through the callable interface: FAILED")
    assert "case 0 position 0: acceptance (binomial)" in text and "exact 0.7573" in text
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
        ("bonus changed", ["bonus", "greedy"]),  # greedy rows emit the bonus token too
        ("seeds ignored", ["seeded"]),
        ("causal counter", ["counter:num_accepted_tokens"]),
        (None, []),
    ],
)
def test_the_invariants_catch_what_they_check(bug, checks):
    res = check_sampler_law(_Wrapped(bug), SPS, num_samples=4000, seed=5)
    assert sorted(
        c.name for c in res.failures if c.test == "exact" or c.name.startswith("counter")
    ) == sorted(checks)
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
    assert len(greedy) == 3 and all("temperature 0" in c.detail for c in greedy)


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
    @given(cts.pair_of_kind(kind, 2, 48))
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


def test_the_docs_state_the_defaults_and_a_real_failure_report():
    text = DOCS.read_text()
    stated = re.search(r"default `DEFAULT_ALPHA` = ([0-9.e-]+);", text).group(1)
    assert float(stated) == DEFAULT_ALPHA
    assert "cells of expected count < 5 pooled" in text
    assert inspect.signature(check_sampler_law).parameters["min_expected"].default == 5.0
    line = _docs_block("failure").strip()
    report = check_sampler_law(reference_sampler("sps", defect="recovery-from-q"), "sps").report()
    assert "  " + line in report.splitlines()


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
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="sampler_law"' in junit and "passed (" in junit
