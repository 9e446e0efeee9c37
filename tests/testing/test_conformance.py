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

import pytest

pytest.importorskip("transformers")

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
