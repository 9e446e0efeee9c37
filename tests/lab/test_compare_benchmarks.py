"""scripts/compare_benchmarks.py: two benchmark runs compared row by row, in each goal's direction."""

import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location(
        "compare_benchmarks", ROOT / "scripts" / "compare_benchmarks.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _run(goals):
    return {"goals": [{"goal": g, "ratio": r, "target": t} for g, r, t in goals]}


def test_changes_follow_each_goal_direction(tmp_path, capsys):
    cmp = _load()
    before = _run([("fast / slow", 2.0, ">= 1"), ("ms", 10.0, "<= 20"), ("gone", 1.0, "reported")])
    after = _run([("fast / slow", 1.0, ">= 1"), ("ms", 11.0, "<= 20"), ("new", 1.0, "reported")])
    text, worse = cmp.compare(before, after, slack=1.25)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| 2.00 | worse |" in rows["fast / slow"]  # higher is better: before / after = 2
    assert "| 1.10 |  |" in rows["ms"]  # lower is better: after / before = 1.1, within 1.25
    assert worse == 1
    assert "- before only: gone" in text and "- after only: new" in text
    b, a, out = tmp_path / "b.json", tmp_path / "a.json", tmp_path / "t.md"
    b.write_text(json.dumps(before))
    a.write_text(json.dumps(after))
    assert cmp.main([str(b), str(a), "-o", str(out)]) == 0
    assert out.read_text().strip() == text
    assert "1 row(s) worse than 1.25x" in capsys.readouterr().err
