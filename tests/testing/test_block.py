"""Block verification in cactus_theory.testing: its exact law, its reference sampler, its mutants.

False-failure probability: the check_sampler_law calls on correct samplers run at the default
alpha = 1e-6 (family-wise), three calls here; seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cactus_theory.testing import CASEBOOK, check_sampler_law, default_cases, exact_law, reference_sampler
from cactus_theory.testing._block import MAX_SEQUENCES, block_law
from cactus_theory.testing._cases import BLOCK_CASE_NAME, block_case

TOL = 1e-12  # float64 sums over at most a few thousand draft sequences


def _rows(rng, k, v, concentration=0.5):
    q = rng.dirichlet(np.full(v, concentration), size=k + 1)
    p = rng.dirichlet(np.full(v, concentration), size=k)
    q[q < 0.04] = 0.0  # zeros in both rows: drafts of verifier probability 0, unreachable tokens
    p[p < 0.04] = 0.0
    return q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)


def _simulate(q, p, size, rng):
    """Algorithm 2 of Sun et al. transcribed loop by loop (1-based as in the paper), one step
    per draw: an oracle independent of block_law's vectorized enumeration."""
    k, v = p.shape
    out = np.full((size, k + 1), -1)
    for r in range(size):
        x = [rng.choice(v, p=p[i]) for i in range(k)]
        eta = rng.random(k)
        big_p, tau = [1.0], 0
        for i in range(1, k + 1):
            big_p.append(min(big_p[i - 1] * q[i - 1, x[i - 1]] / p[i - 1, x[i - 1]], 1.0))
            if i < k:
                z = np.maximum(big_p[i] * q[i] - p[i], 0).sum()
                h = z / (z + 1 - big_p[i]) if z + 1 - big_p[i] > 0 else 1.0
            else:
                h = big_p[k]
            if eta[i - 1] < h:
                tau = i
        out[r, :tau] = x[:tau]
        if tau == k:
            out[r, k] = rng.choice(v, p=q[k])
        else:
            res = np.maximum(big_p[tau] * q[tau] - p[tau], 0)
            out[r, tau] = rng.choice(v, p=res / res.sum())
    return out


def test_block_law_is_lossless_and_keeps_at_least_token_wise_drafts():
    """Theorem 1 (each reached position emits its verifier row) and Theorem 2 (expected kept
    drafts at least token-wise verification's) on random rows with zeros; one draft is
    token-wise verification exactly."""
    rng = np.random.default_rng(46)
    for _ in range(40):
        k, v = int(rng.integers(1, 5)), int(rng.integers(2, 6))
        q, p = _rows(rng, k, v)
        law, sps = exact_law("block", q, p), exact_law("sps", q, p)
        reached = law.reach[:k] > 0
        assert np.abs(law.emitted - q[:k])[reached].max(initial=0.0) < TOL
        assert law.expected_accepted_prefix >= sps.expected_accepted_prefix - TOL
        assert np.allclose(law.reach, np.concatenate([[1.0], np.cumprod(law.acceptance)]), atol=TOL)
        if k == 1:
            assert np.allclose(law.acceptance, sps.acceptance, atol=TOL)


def test_block_law_is_the_multidraft_block_verifiers():
    """Against the library's other implementation, ``rules/multidraft/_block.py`` on a
    teacher-forced chain (its emitted sequences by enumeration of the drawn trees): each
    position's joint law of reach and token, on the cases of the check and random rows."""
    from cactus_theory.analysis.multidraft import tree_outcomes
    from cactus_theory.drafts import DraftChain

    rng = np.random.default_rng(9)
    cases = [block_case(), default_cases()[1]] + [_rows(rng, 3, 4) for _ in range(4)]
    for q, p in cases:
        k, v = p.shape
        law = exact_law("block", q, p)
        joint = np.zeros((k + 1, v))
        for seq, mass in tree_outcomes("block", DraftChain(q, p)).emitted.items():
            for i, x in enumerate(seq):
                joint[i, x] += mass
        assert np.allclose(joint.sum(1), law.reach, atol=TOL)
        assert np.allclose(joint[:k], law.emitted * law.reach[:k, None], atol=TOL)


def test_block_law_matches_the_algorithm_run_draw_by_draw():
    """The enumeration's reach probabilities against Algorithm 2 run 4,000 times: each count
    within 5 binomial standard deviations (a false failure below 1e-5 over the four counts), and
    each reached position's tokens by a chi-square test at 1e-6."""
    q, p = block_case()
    law = block_law(q, p)
    size = 4000
    out = _simulate(q, p, size, np.random.default_rng(7))
    counts = (out != -1).sum(0)
    sd = np.sqrt(size * law["reach"] * (1 - law["reach"]))
    assert np.all(np.abs(counts - size * law["reach"]) <= 5 * sd + 1e-9), (counts, size * law["reach"])
    for i in range(3):  # each reached position's tokens against the enumerated law (chi-square)
        tokens = out[out[:, i] != -1, i]
        expected = law["emitted"][i] * len(tokens)
        observed = np.bincount(tokens, minlength=q.shape[1])
        assert stats.chisquare(observed[expected > 0], expected[expected > 0]).pvalue > 1e-6


def test_the_block_case_shows_what_its_docstring_states():
    q, p = block_case()
    ratio = q[0, 0] / p[0, 0]
    assert abs(ratio - 2 / 9) < 1e-5  # dyadic rows: 2/9 to 2^-20
    block, token = np.maximum(ratio * q[1] - p[1], 0), np.maximum(q[1] - p[1], 0)
    assert round(0.5 * np.abs(block / block.sum() - token / token.sum()).sum(), 2) == 0.41
    assert round(exact_law("block", q, p).reach[2] / exact_law("sps", q, p).reach[2], 1) == 2.8


@pytest.mark.parametrize(
    "defect, diagnosis",
    [
        ("block-tokenwise-residual", "block verification: the law is off only after kept drafts"),
        ("block-onehot-fallback", "block verification: the acceptance is off and the law is right"),
    ],
)
def test_block_mutants_are_diagnosed(defect, diagnosis):
    res = check_sampler_law(reference_sampler("block", defect=defect), "block", seed=2, num_samples=5000)
    assert res.outcome == "failed" and res.diagnosis[0].startswith(diagnosis), res.diagnosis
    assert not any("indexing" in d for d in res.diagnosis)


def test_block_arguments_are_checked():
    with pytest.raises(ValueError, match="defect"):
        reference_sampler("sps", defect="block-tokenwise-residual")
    with pytest.raises(ValueError, match="defect"):
        reference_sampler("block", defect="swapped-ratio")
    v = 40  # 40**4 draft sequences > MAX_SEQUENCES
    assert v**4 > MAX_SEQUENCES
    with pytest.raises(ValueError, match="draft_probs"):
        exact_law("block", np.full((5, v), 1 / v), np.full((4, v), 1 / v))


@pytest.mark.full  # the reference at the default size: its own stage of ./dev test
def test_the_docs_block_example_runs_and_the_reference_passes_with_every_exact_check():
    import contextlib
    import io
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    code = text.split("<!-- example: block -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    out, ns = io.StringIO(), {"__name__": "__docs__"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/testing.md block example", "exec"), ns)
    lines = out.getvalue().splitlines()
    assert lines[0] == "passed"
    assert lines[1].startswith("failed block verification: the law is off only after kept drafts")
    assert "(up to two million)" in text and MAX_SEQUENCES == 2_000_000
    assert "Three defects of the casebook are block verification's" in text
    assert sum(d.rule == "block" for d in CASEBOOK.values()) == 3
    ok = ns["ok"]  # the block reference at the default size, seed 0, every exact check
    assert ok.passed and ok.rule == "block", ok.report()
    assert not ok.skipped[1:]  # only the counters are skipped: greedy, seeded, zero-uniform, placeholder ran
    assert {c.case_name for c in ok.checks if c.case is not None} >= {BLOCK_CASE_NAME, "generic"}


@pytest.mark.sampler_law("block", num_samples=3000)
def test_the_pytest_plugin_checks_block_verification(sampler_law):
    res = sampler_law(reference_sampler("block"))
    assert res.passed and res.rule == "block" and res.num_samples == 3000
