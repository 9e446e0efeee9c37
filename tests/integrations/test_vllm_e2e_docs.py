"""docs/vllm.md's end-to-end table is the one scripts/vllm_e2e.py renders from the recorded JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("vllm_e2e", ROOT / "scripts" / "vllm_e2e.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_generated_from_the_recorded_benchmark(tmp_path):
    e2e = _script()
    result = json.loads((ROOT / "benchmarks" / "vllm_e2e_cpu.json").read_text())
    page = (ROOT / "docs" / "vllm.md").read_text()
    block = page.split(e2e.BEGIN)[1].split(e2e.END)[0]
    assert block.strip() == e2e.render(result)
    assert (ROOT / "benchmarks" / "vllm_e2e_cpu.md").read_text().strip().endswith(e2e.render(result))
    # the prose's comparison: every speculative configuration slower than the verifier alone
    assert "every speculative configuration is slower" in " ".join(page.split())
    spec = [r for r in result["rows"] if r["accepted_length"] is not None]
    assert spec and all(r["ratio_to_verifier_alone"]["median"] < 1 for r in spec)
    # update_docs rewrites only the block (on a copy)
    copy = tmp_path / "vllm.md"
    copy.write_text(page.replace(block, "\nstale\n"))
    e2e.update_docs(result, copy)
    assert copy.read_text() == page
