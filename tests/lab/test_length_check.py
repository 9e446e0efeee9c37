"""The length check (benchmarks/length.py, scripts/length_check.py).

The lockstep loop decodes speculative rows one token per step (drafted slots through the
rule's k = 1 sampler, bonus slots from q). Its law is checked on two tiny random Llamas against
the exact sequence probabilities, as the real loop is in logits/test_decode.py: verifier and
SpS rows must reproduce q's sequence law, and a sampler that accepts every draft must be
caught. The shipped-model run is exercised end to end in a tiny form (marked ``model``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_decode import (  # noqa: E402  (the tiny models and the exact law of that test)
    ALPHA,
    PLAIN,
    accept_all,
    chi2_pvalue,
    exact_sequence_probs,
    tiny_llama,
)

from benchmarks.length import LengthConfig, _decode_prompt, run_length_check  # noqa: E402
from cactus_theory.rules import get_rule  # noqa: E402
from cactus_theory.samplers import make_sampler  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
V, L = 4, 3  # the tiny models' vocabulary and the generated length (as in logits/test_decode.py)
N = 800  # rows per group: every one of the 64 cells has an expected count above 5 (asserted)


@pytest.fixture(scope="module")
def lockstep():
    torch.set_num_threads(1)
    verifier, drafter = tiny_llama(1), tiny_llama(2)
    cfg = LengthConfig(samples=N, max_new_tokens=L, m=2)
    torch.manual_seed(5)  # the samplers' own randomness
    gen = torch.Generator().manual_seed(11)
    sampler = {"sps": make_sampler("sps"), "rule": accept_all}
    with torch.no_grad():
        part = _decode_prompt(verifier, drafter, [[1, 2]], None, PLAIN, cfg, sampler, get_rule("sps"), gen)
    return verifier, drafter, part


def _counts(part, group):
    rows = part["tokens"][part["groups"] == group]
    return np.bincount(np.ravel_multi_index(tuple(rows.T), (V,) * L), minlength=V**L)


def test_lockstep_verifier_and_sps_rows_follow_q(lockstep):
    verifier, drafter, part = lockstep
    _, probs = exact_sequence_probs(verifier, [1, 2])
    _, dprobs = exact_sequence_probs(drafter, [1, 2])
    assert 0.5 * np.abs(probs - dprobs).sum() > 0.25  # the pair is far apart (0.32)
    assert chi2_pvalue(_counts(part, 0), probs) > ALPHA
    assert chi2_pvalue(_counts(part, 1), probs) > ALPHA
    # every row ran to the cap (no EOS) and drafted at the slots only
    assert np.all(part["length"] == L) and np.all(part["drafted"][part["groups"] == 0] == 0)
    sps_rows = part["groups"] == 1
    assert np.all(part["accepted"][sps_rows] <= part["drafted"][sps_rows])


def test_lockstep_negative_control_is_caught(lockstep):
    verifier, _, part = lockstep
    _, probs = exact_sequence_probs(verifier, [1, 2])
    # the third group used a sampler that accepts every draft: drafted slots emit p
    assert chi2_pvalue(_counts(part, 2), probs) < ALPHA
    # accept-all drafts m = 2 tokens then a bonus: slots 1, 2 drafted, slot 3 a bonus
    assert np.all(part["drafted"][part["groups"] == 2] == 2)


def test_bad_arguments_exit_2_or_name_the_argument(capsys):
    with pytest.raises(ValueError, match="samples"):
        run_length_check(LengthConfig(samples=1))
    with pytest.raises(ValueError, match="settings"):
        run_length_check(LengthConfig(settings=("t2",)))
    with pytest.raises(ValueError, match="prompts"):
        run_length_check(LengthConfig(prompts=("spec_bench/nope",)))
    import runpy

    main = runpy.run_path(str(ROOT / "scripts" / "length_check.py"))["main"]
    assert main(["--samples", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "samples" in err


@pytest.mark.model
def test_script_end_to_end_on_the_shipped_model(tmp_path):
    from cactus_theory.logits._models import models_available

    if not models_available().get("smollm2"):
        pytest.skip("SmolLM2 not installed")
    out = tmp_path / "lc"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "length_check.py"),
            "--out",
            str(out),
            "--samples",
            "2",
            "--max-new-tokens",
            "3",
            "--prompts",
            "spec_bench/164",
            "--settings",
            "paper",
            "--bootstrap",
            "20",
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "length_check.json").read_text())
    got = res["results"]["paper"]
    for c in got["configs"].values():
        assert c["n"] == 2 and 1 <= c["mean_length"] <= 3
    assert 0 <= got["configs"]["sps"]["acceptance"] <= 1
    assert "## paper" in (out / "length_check.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["length_check.json", "length_check.md"]
