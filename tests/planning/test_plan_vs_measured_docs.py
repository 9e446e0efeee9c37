"""The predicted-vs-measured record (scripts/plan_vs_measured.py) and its table in docs/planning.md.

Reads the committed JSON and the page (no decoding: the measurement is the script's), well under
a second.
"""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "plan_vs_measured", ROOT / "scripts" / "plan_vs_measured.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_the_record_rendered():
    mod = _script()
    data = json.loads(mod.OUT.read_text())
    text = mod.DOCS.read_text()
    block = text[text.index(mod.BEGIN) + len(mod.BEGIN) : text.index(mod.END)].strip()
    assert block == mod.render(data)
    assert len(data["rows"]) >= 4
    # the cheap distilled drafter and a rule other than SpS are among the measured configurations
    assert any(r["drafter"] == "distilled" for r in data["rows"]) and any(
        r["rule"] != "sps" for r in data["rows"]
    )
    # the load of the shared machine is recorded beside the measurement, before every repeat and after
    assert len(data["load"]) == data["repeats"] + 1


def test_the_pages_comparisons_hold():
    # the page: tokens per call inside the predicted interval in every row, and every speedup
    # outside its measured range lies below it (the per-call overheads the model leaves out)
    mod = _script()
    data = json.loads(mod.OUT.read_text())
    assert "every row" in mod.DOCS.read_text() and "lies below" in mod.DOCS.read_text()
    for row, verdict in zip(data["rows"], mod.verdicts(data)):
        assert verdict["tokens_inside"], row["config"]
        if not verdict["speedup_inside"]:
            assert row["predicted_speedup"]["median"] < row["measured_speedup"]["min"], row["config"]


def test_vllm_table_is_the_record_rendered_and_the_pages_comparisons_hold():
    mod = _script()
    data = json.loads(mod.VLLM_OUT.read_text())
    text = mod.DOCS.read_text()
    block = text[text.index(mod.VLLM_BEGIN) + len(mod.VLLM_BEGIN) : text.index(mod.VLLM_END)].strip()
    assert block == mod.render_vllm(data)
    assert len(data["rows"]) >= 4
    # the page: vLLM's tokens per call inside the predicted interval in every row; the predicted
    # speedup below vLLM's median in every row
    for r in data["rows"]:
        t = r["predicted_tokens_per_call"]
        assert t["low"] <= r["measured_tokens_per_call"]["median"] <= t["high"], r["config"]
        assert r["predicted_speedup"] < r["measured_speedup"]["median"], r["config"]
