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


_FAKE_RUN = """import json, os, pathlib, sys
here = pathlib.Path(__file__).resolve().parents[1]
ratio = float((here / "ratio.txt").read_text())
with open(os.environ["ORDER_LOG"], "a") as f:
    f.write(f"{ratio} {here}\\n")
out = sys.argv[sys.argv.index("-o") + 1]
goals = [{"goal": "x fused / read pass", "ratio": ratio, "target": "<= 3", "flag": ""},
         {"goal": "y / read pass", "ratio": 1.0, "target": "<= 3", "flag": "loaded" if ratio > 2 else ""}]
pathlib.Path(out).write_text(json.dumps({"goals": goals}))
"""


def test_commits_run_interleaved_in_temporary_worktrees(tmp_path, monkeypatch):
    """Two commits of a small repository whose benchmarks/run.py reports a ratio: the rounds
    alternate the commits (before first, then after first), every round in a worktree of its
    commit, the worktrees are gone afterwards and the main tree untouched; a row flagged in
    any round is no verdict."""
    import subprocess

    cmp = _load()
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "run.py").write_text(_FAKE_RUN)

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    shas = []
    for ratio in ("1.5", "3.0"):
        (repo / "ratio.txt").write_text(ratio)
        git("add", ".")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", ratio)
        shas.append(git("rev-parse", "HEAD").strip())
    monkeypatch.setenv("ORDER_LOG", str(tmp_path / "order.log"))
    # the runs' own load (measured around each) reads as idle here: the rows' flags decide
    windows, _ = cmp._load_tools()
    monkeypatch.setattr(cmp, "_load_tools", lambda: (windows, lambda record: ""))
    seen = []  # the record after each run (what --json-out keeps if the comparison stops)
    record = cmp.run_commits(
        shas[0],
        shas[1],
        3,
        ["--sections", "samplers"],
        1,
        repo=repo,
        on_run=lambda r: seen.append([len(r["runs"][s]) for s in shas]),
    )
    assert seen == [[1, 0], [1, 1], [1, 2], [2, 2], [3, 2], [3, 3]]
    order = [line.split() for line in (tmp_path / "order.log").read_text().splitlines()]
    assert [r for r, _ in order] == ["1.5", "3.0", "3.0", "1.5", "1.5", "3.0"]
    trees = {r: {t for rr, t in order if rr == r} for r, _ in order}
    assert all(len(t) == 1 and not t & {str(repo)} for t in trees.values())  # one worktree each
    assert not any(pathlib.Path(next(iter(t))).exists() for t in trees.values())  # removed
    assert git("worktree", "list").count("\n") == 1  # only the main tree
    assert (repo / "ratio.txt").read_text() == "3.0" and not git("status", "--porcelain")
    assert [len(record["runs"][s]) for s in shas] == [3, 3]
    text, worse = cmp.compare_rounds(record, slack=1.25)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| 1.5, 1.5, 1.5 | 1.5 | 3, 3, 3 | 3 | 2.00 |" in rows["x fused / read pass"]
    # y is flagged in the after commit's runs: marked per round, no verdict
    assert "1*, 1*, 1*" in rows["y / read pass"] and rows["y / read pass"].endswith("| loaded |")
    assert worse == 1 and rows["x fused / read pass"].endswith("| worse |")
    # a run measured under load marks every row of it
    record["runs"][shas[0]][1]["run_flag"] = "other processes used 2 cores"
    text, worse = cmp.compare_rounds(record, slack=1.25)
    assert worse == 0 and "| 1.5, 1.5*, 1.5 | 1.5 |" in text and "(loaded: other processes" in text
