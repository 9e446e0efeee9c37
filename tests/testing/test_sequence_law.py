"""cactus_theory.testing: whole requests with sampling state against their exact sequence law.

False-failure probability: each check a correct generator is expected to pass runs at
alpha = 1e-6 (the whole check) with a fixed seed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from cactus_theory.testing import check_sequence_law
from cactus_theory.testing._sequence import (
    DEFAULT_ALPHA,
    DEFAULT_NUM_REQUESTS,
    SequenceCase,
    default_sequence_cases,
    table_models,
)
from cactus_theory.testing._sequence_reference import SEQUENCE_DEFECTS, ReferenceGenerator
from cactus_theory.testing._sequence_state import SequenceParams, process_logits

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "testing.md"


def _direct(case: SequenceCase, seq) -> float:
    """P(seq) by the stated conventions, written out token by token in plain Python."""
    p, v = case.params, case.vocab
    prob, out = 1.0, []
    for tok in seq:
        ended = v in out or bool(out and out[-1] in p.stop_token_ids)
        ended = ended or (p.max_tokens is not None and len(out) >= p.max_tokens)
        if ended:
            prob *= float(tok == v)
            out.append(v)
            continue
        hist = list(case.prompt) + out
        x = [float(a) for a in case.target.table[hist[-2], hist[-1]]]
        for t in range(v):
            x[t] += p.logit_bias.get(t, 0.0)
            if len(out) < p.min_tokens and t in p.stop_token_ids:
                x[t] = -math.inf
            if t in hist:
                x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
            x[t] -= p.frequency_penalty * out.count(t) + p.presence_penalty * (t in out)
        z = [0.0 if a == -math.inf else math.exp(a / p.temperature) for a in x] + [0.0]
        prob *= z[tok] / sum(z)
        out.append(tok)
    return prob


def test_the_processing_follows_the_stated_conventions_on_a_worked_row():
    """Bias, the minimum length's mask, the repetition penalty over prompt and output (HF/vLLM:
    divide a positive logit, multiply a negative one), OpenAI's frequency and presence over the
    output only, then the temperature; by hand:
    token 0: 2 -> /2 = 1 -> 1 - 0.25*2 - 0.5 = 0; token 1 (prompt): -1 -> -2; token 2: 0.5 ->
    0.25 -> 0.25 - 0.25 - 0.5 = -0.5; token 3: a stop token before min_tokens: -inf;
    token 4: 1 - 0.5 (bias) = 0.5, never seen."""
    params = SequenceParams(
        temperature=0.5,
        repetition_penalty=2.0,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={4: -0.5},
        min_tokens=3,
        stop_token_ids=(3,),
    )
    mask = np.array([[False, True, False, False, False]])
    counts = np.array([[2, 0, 1, 0, 0]])
    got = process_logits(np.array([[2.0, -1.0, 0.5, 0.0, 1.0]]), mask, counts, np.array([2]), params)[0]
    x = np.array([0.0, -2.0, -0.5, -np.inf, 0.5]) / 0.5
    want = np.exp(x) / np.exp(x).sum()
    assert np.allclose(got, want, rtol=1e-14, atol=0), (got, want)  # float64 round-off only
    later = process_logits(np.array([[2.0, -1.0, 0.5, 0.0, 1.0]]), mask, counts, np.array([3]), params)[0]
    assert later[3] > 0 and got[3] == 0.0  # the mask lifts at min_tokens generated tokens


def test_the_repetition_penalty_is_transformers_own():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (3, 7))
    ids = [[1, 2, 2], [0, 6, 5], [3, 3, 3]]
    hf = transformers.RepetitionPenaltyLogitsProcessor(1.7)(torch.tensor(ids), torch.tensor(logits))
    mask = np.zeros((3, 7), bool)
    for i, row in enumerate(ids):
        mask[i, row] = True  # HF penalises every id of the input (prompt and output alike)
    ours = process_logits(
        logits, mask, np.zeros((3, 7)), np.zeros(3), SequenceParams(repetition_penalty=1.7, temperature=1.0)
    )
    want = torch.softmax(hf, dim=-1).numpy()
    assert np.allclose(ours, want, atol=1e-12), (ours, want)  # float64 both sides


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed here (its CPU build is in .venv-vllm: run this file there)",
)
def test_the_penalties_are_vllms_own():
    """vLLM's ``apply_penalties`` (repetition over prompt and output, OpenAI's frequency and
    presence over the output), then a softmax, against the stated conventions."""
    torch = pytest.importorskip("torch")
    from vllm.model_executor.layers.utils import apply_penalties

    v, prompts, outs = 7, [[1, 2], [0, 6], [3, 3], [5, 4]], [[2, 2, 4], [6], [], [0, 1, 0, 0]]
    logits = np.random.default_rng(0).normal(0, 2, (4, v))

    def pad(rows, width):  # vLLM pads with the vocabulary size
        return torch.tensor([r + [v] * (width - len(r)) for r in rows])

    full = [torch.full((4,), x) for x in (0.4, 0.3, 1.7)]
    x = apply_penalties(torch.tensor(logits, dtype=torch.float32), pad(prompts, 2), pad(outs, 4), *full)
    mask = np.zeros((4, v), bool)
    counts = np.zeros((4, v))
    for i in range(4):
        mask[i, prompts[i]] = True
        np.add.at(counts[i], outs[i], 1)
    params = SequenceParams(repetition_penalty=1.7, presence_penalty=0.4, frequency_penalty=0.3)
    ours = process_logits(logits, mask, counts, np.array([len(o) for o in outs]), params)
    want = torch.softmax(x.double(), dim=-1).numpy()
    assert np.abs(ours - want).max() < 1e-6, (ours, want)  # vLLM computes in float32


@pytest.mark.parametrize("index", [0, 1])
def test_the_exact_law_is_the_chain_written_out(index):
    case = default_sequence_cases()[index]
    joint = case.joint_law()
    assert joint.shape == (case.vocab + 1,) * case.length and abs(joint.sum() - 1) < 1e-12
    rng = np.random.default_rng(index)
    support = np.flatnonzero(joint.ravel() > 0)
    for flat in rng.choice(support, 20, replace=False):
        seq = [int(t) for t in np.unravel_index(flat, joint.shape)]
        assert math.isclose(joint[tuple(seq)], _direct(case, seq), rel_tol=1e-12), seq  # round-off


def test_the_stop_and_budget_law_has_no_mass_where_the_request_cannot_be():
    case = default_sequence_cases()[1]
    joint, end = case.joint_law(), case.vocab
    p = case.params
    assert p.stop_token_ids == (0,) and p.min_tokens == 2 and p.max_tokens == 4 < case.length
    assert joint[0].sum() == 0 and joint[:, 0].sum() == 0  # no stop before min_tokens
    assert joint[..., :end].sum() == 0  # the fifth token is past the budget: always END
    assert joint[:, :, 0, :end].sum() == 0  # nothing after a stop
    assert 0.2 < joint[:, :, 0].sum() < 0.6  # stops early often enough that its cut shows


def _plain(case, num_requests, rng):
    """One token per step for every request, sampled from the processed target rows: no
    speculation at all; returned as token lists of each request's own length."""
    n, v, big = num_requests, case.vocab, len(case.prompt)
    hist = np.zeros((n, big + case.length), dtype=np.int64)
    hist[:, :big] = case.prompt
    mask = np.broadcast_to(np.isin(np.arange(v), case.prompt), (n, v))
    counts = np.zeros((n, v))
    live = np.ones(n, bool)
    for j in range(case.length):
        rows = process_logits(
            case.target(hist, np.full(n, big + j)), mask, counts, np.full(n, j), case.params
        )
        cdf = np.cumsum(rows, axis=1)
        tok = np.minimum((cdf < rng.random((n, 1)) * cdf[:, -1:]).sum(axis=1), v - 1)
        hist[:, big + j] = np.where(live, tok, -1)
        counts[np.arange(n), tok] += live
        ended = np.isin(tok, case.params.stop_token_ids) | (j + 1 == case.params.max_tokens)
        live &= ~ended
    return [list(r[r >= 0]) for r in hist[:, big:]]


def test_plain_sampling_passes_as_lists_of_any_length():
    """A generator with no speculation, returning token lists: about 0.5 s."""
    res = check_sequence_law(_plain, num_requests=5000, seed=2)
    assert res["passed"], res


def test_greedy_requests_are_one_sequence():
    target, draft = table_models(4, seed=3)
    params = SequenceParams(temperature=0.0, repetition_penalty=1.3, frequency_penalty=0.7)
    case = SequenceCase("greedy", target, draft, params, (0, 1), 4, 4, 2)
    assert case.joint_law().max() == 1.0
    res = check_sequence_law(ReferenceGenerator(), [case], num_requests=200)
    assert res["passed"] and res["cases"][0]["cells"] <= 1, res


def test_an_impossible_sequence_is_named_in_the_report():
    res = check_sequence_law(ReferenceGenerator("stop-not-truncated"), num_requests=5000)
    bad = res["cases"][1]
    assert not res["passed"] and bad["p_value"] == 0.0
    assert bad["detail"].startswith("sequence (") and "its exact probability is 0" in bad["detail"]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: check_sequence_law(ReferenceGenerator(), num_requests=0), "num_requests"),
        (lambda: check_sequence_law(ReferenceGenerator(), alpha=1.5), "alpha"),
        (lambda: check_sequence_law(ReferenceGenerator(), cases=[]), "cases"),
        (lambda: check_sequence_law(lambda c, n, r: np.zeros((n, 5)), num_requests=10), "sequences"),
        (lambda: check_sequence_law(lambda c, n, r: [[1]] * (n - 1), num_requests=10), "generator"),
        (lambda: SequenceParams(temperature=-1.0), "temperature"),
        (lambda: SequenceParams(repetition_penalty=0.0), "repetition_penalty"),
        (lambda: ReferenceGenerator("no-such-defect"), "defect"),
    ],
)
def test_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ----------------------------------------------------------------------------- the generated power record


def _script():
    spec = importlib.util.spec_from_file_location(
        "sequence_law_power", ROOT / "scripts" / "sequence_law_power.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_the_power_record_meets_its_goals_and_the_docs_show_it():
    """Every defect over >= 10 seeds, each caught in >= 9; >= 300 correct runs. False alarms: at
    alpha = 1e-6 per run, one or more in 300 runs has probability below 3e-4, so the record's
    count is asserted to be 0."""
    sp = _script()
    rec = json.loads(sp.RECORD.read_text())
    assert rec["num_requests"] == DEFAULT_NUM_REQUESTS and rec["alpha"] == DEFAULT_ALPHA
    assert [m["defect"] for m in rec["mutants"]] == list(SEQUENCE_DEFECTS)
    for m in rec["mutants"]:
        assert m["seeds"] >= 10 and m["caught"] >= 0.9 * m["seeds"], m
        assert (m["class"], m["source"]) == SEQUENCE_DEFECTS[m["defect"]]
    assert rec["correct"]["runs"] >= 300 and rec["correct"]["false_alarms"] == 0
    # exactness beyond one run's level: the correct runs' case p-values are uniform (a KS test
    # at level 1e-3, which an exact generator fails with probability 1e-3)
    assert rec["correct"]["case_p_values"] >= 600 and rec["correct"]["uniformity_ks_p_value"] > 1e-3
    assert [c["name"] for c in rec["cases"]] == [c.name for c in default_sequence_cases()]
    assert sp.render(check=True) == 0, "docs/testing.md: run scripts/sequence_law_power.py render"


def test_the_power_record_is_what_the_script_computes_on_a_slice():
    """The first seed of one defect and of the correct generator, rerun (about 1.2 s)."""
    sp = _script()
    rec = json.loads(sp.RECORD.read_text())
    mutant = {m["defect"]: m for m in rec["mutants"]}["penalty-last-token-per-step"]
    seed, passed = mutant["per_seed"][0]
    assert sp.run_one(("penalty-last-token-per-step", seed))["passed"] == passed
    seed, passed = rec["correct"]["per_seed"][0]
    res = check_sequence_law(ReferenceGenerator(), seed=seed)
    assert res["passed"] == passed and seed == sp.FIRST_CORRECT_SEED
    for stated, case in zip(rec["cases"], res["cases"]):
        assert stated["detectable_tv"] == case["detectable_tv"], (stated, case)


def test_the_docs_section_runs_and_states_the_conventions():
    import contextlib
    import io

    text = DOCS.read_text()
    section = text.split("## The law of whole requests: sampling state", 1)[1]
    code = section.split("<!-- example: sequence-law -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    out, ns = io.StringIO(), {"__name__": "__docs__"}
    with contextlib.redirect_stdout(out):  # two checks at the default size: about 1.5 s
        exec(compile(code, "docs/testing.md sequence-law example", "exec"), ns)
    lines = out.getvalue().splitlines()
    assert lines[0] == "True" and lines[1].startswith("False emitted frequencies vs exact law: TV "), lines
    ok = ns["ok"]  # the reference generator at the default size, seed 0: its power stated
    assert [c["name"] for c in ok["cases"]] == ["penalties", "stop-and-budget"]
    assert all(c["n"] == DEFAULT_NUM_REQUESTS and c["detectable_tv"] < 0.06 for c in ok["cases"]), ok
    for defect in SEQUENCE_DEFECTS:
        assert f"`{defect}`" in section
    cases = default_sequence_cases()
    assert "two cases, 20,000 requests each" in code and len(cases) == 2 and DEFAULT_NUM_REQUESTS == 20_000
    assert "a case's budget ends\nbefore $L$" in section
    assert any(c.params.max_tokens is not None and c.params.max_tokens < c.length for c in cases)
