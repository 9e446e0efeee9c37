"""cactus_theory.testing on transformers' speculative sampling, in the main environment.

The main environment's transformers (the ``[real]`` extra) is checked through its assisted
generation's sampling step ``_speculative_sampling`` (called directly on synthetic logits, one
request at a time; it draws its own bonus token, declared to the check). Its row of the
conformance table in docs/testing.md is generated at the default size (20,000 draws per case)
by ``scripts/sampler_power.py conformance --library transformers``; here, to keep the main
stage short, the same check runs on 1,000 draws per case (a correct sampler fails it with
probability at most alpha = 1e-6) and the committed row of the installed version is read. The
full-size rerun of a transformers row is in tests/testing/test_vllm_testing_module.py (vLLM's stage,
its environment's transformers).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from cactus_theory.testing._generation import target_joint_law  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("sampler_power", ROOT / "scripts" / "sampler_power.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_transformers_speculative_sampling_on_fewer_draws_and_its_committed_row():
    sp = _script()
    row, res = sp.conformance_row("transformers", num_samples=1000)
    version = importlib.metadata.version("transformers")
    rows = json.loads(sp.CONFORMANCE_JSON.read_text())
    committed = [r for r in rows if r["library"] == "transformers" and r["version"] == version]
    assert committed and committed[0]["draws"] == 20_000, f"no full-size row for transformers {version}"
    if committed[0]["result"] == "passed":
        assert res.passed, res.report()  # no check fails at 1,000 draws either
    else:  # a defect pinned in the table is seen at 1,000 draws too
        assert set(row["failed_checks"]) == set(committed[0]["failed_checks"]), res.report()
    assert res.bonus == "drawn" and "zero-uniform" in {c.name for c in res.checks}


def test_the_zero_uniform_reproduction_of_the_docs():
    """docs/testing.md's minimal reproduction: a draft of target probability 0 accepted when the
    uniform is exactly 0 (transformers 5.19.0), rejected by the strict comparison (5.25.0)."""
    sp = _script()
    version = importlib.metadata.version("transformers")
    assert version in sp.ZERO_UNIFORM_ACCEPTS, f"transformers {version}: run the reproduction and pin it"
    assert sp.run_zero_uniform_reproduction() == sp.ZERO_UNIFORM_ACCEPTS[version]


def test_transformers_full_assisted_generation_on_few_draws_and_its_committed_row():
    """generate(assistant_model=draft, do_sample=True) on tiny random Llamas: the first tokens of
    30 generations against the target's joint law (by enumeration; a generated sequence of
    probability 0 fails outright, and at alpha = 1e-6 a lossless path fails with probability at
    most 1e-6); the committed row of the installed version is the full-size run."""
    sp = _script()
    law, joint = sp.transformers_generate_law(30, seed=1)
    assert joint.shape == (sp.GEN_VOCAB,) * sp.GEN_TOKENS and abs(joint.sum() - 1) < 1e-12
    text = (ROOT / "docs" / "testing.md").read_text()  # the page's description of the row
    assert (sp.GEN_VOCAB, sp.GEN_TOKENS) == (8, 3) and "of 8 tokens" in text and "first\n3 generated" in text
    assert law["n"] == 30 and law["passed"], law
    version = importlib.metadata.version("transformers")
    rows = json.loads(sp.CONFORMANCE_JSON.read_text())
    committed = [
        r for r in rows if r["library"] == "transformers" and r["version"] == version and "p_value" in r
    ]
    assert committed and committed[0]["draws"] >= 10_000, f"no full-path row for transformers {version}"
    assert committed[0]["result"] == "passed", committed[0]
    # what the row can see: the draft model's own joint law (a path that skipped verification)
    # is far beyond the total variation the row detects
    draft = sp.tiny_generation_models()[1]

    @torch.no_grad()
    def draft_next(ids):
        return torch.softmax(draft(torch.tensor([ids])).logits[0, -1].double(), -1).numpy()

    draft_joint = target_joint_law(draft_next, sp.GEN_PROMPT, sp.GEN_VOCAB, sp.GEN_TOKENS)
    tv = 0.5 * float(np.abs(draft_joint - joint).sum())
    assert round(tv, 2) == 0.83 and "0.83" in text and tv > 10 * committed[0]["detectable_tv"]
