"""Compare two benchmark runs row by row, or two commits in interleaved runs.

    python scripts/compare_benchmarks.py BEFORE.json AFTER.json [--slack 1.25] [-o OUT.md]
    python scripts/compare_benchmarks.py --commits BEFORE AFTER [--rounds 3]
        [--sections samplers] [--repeats 5] [--threads 2] [--json-out OUT.json] [-o OUT.md]

For every goal present in both runs (matched by name): both values, and the change in the
goal's own direction: after / before for a goal whose target reads ``<=`` (lower is better)
and for the reported rows, before / after for ``>=`` (higher is better). A goal row whose
change exceeds ``--slack`` is marked ``worse``; goals in one run only are listed apart. The
table is Markdown, written atomically with ``-o``.

``--commits`` checks each commit out in a temporary git worktree (the working tree is not
touched; the worktrees are removed at the end) and runs ``benchmarks/run.py --json`` of each
checkout ``--rounds`` times, alternating the commits round by round (the first commit first in
even rounds, second in odd ones), so that the machine's load falls on both alike. Each row's
value is the median of its rounds; the table gives every round. A round is marked loaded when
its benchmark flagged the row (a checkout that records the load) or when, over the whole run,
other processes kept busy more cores than the benchmark's threads left free
(``benchmarks/_load.py``, measured here around each run); the change of a row loaded in any
round is no verdict. ``--json-out`` keeps every run's rows and load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: The checkout holding this script (its ``benchmarks/_load.py`` measures the runs' load).
ROOT = Path(__file__).resolve().parents[1]


def _direction(target: str) -> str:
    t = target.strip()
    if t.startswith(">="):
        return "higher"
    return "lower"  # "<= x", absolute budgets and "reported" times: lower is better


def compare(before: dict, after: dict, slack: float = 1.25) -> tuple[str, int]:
    """(Markdown table, number of rows worse than ``slack``)."""
    b = {g["goal"]: g for g in before["goals"]}
    a = {g["goal"]: g for g in after["goals"]}
    lines = [
        f"| goal | target | before | after | change (x, worse > {slack:g}) | |",
        "|---|---|---:|---:|---:|---|",
    ]
    worse = 0
    for name in [n for n in b if n in a]:
        gb, ga = b[name], a[name]
        rb, ra = float(gb["ratio"]), float(ga["ratio"])
        higher = _direction(ga["target"]) == "higher"
        change = (rb / ra if higher else ra / rb) if rb > 0 and ra > 0 else float("nan")
        flag = "worse" if change > slack else ""
        worse += flag == "worse"
        lines.append(f"| {name} | {ga['target']} | {rb:.3g} | {ra:.3g} | {change:.2f} | {flag} |")
    only = [f"- before only: {n}" for n in b if n not in a] + [f"- after only: {n}" for n in a if n not in b]
    if only:
        lines += ["", *only]
    return "\n".join(lines), worse


def _write_atomic(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".compare-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _git(*args, cwd=ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _load_tools():
    """``benchmarks._load`` of this checkout (LoadWindows, load_flag)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks._load import LoadWindows, load_flag

    return LoadWindows, load_flag


def _run_once(tree: Path, out: Path, bench_args: list, threads: int) -> dict:
    """One ``benchmarks/run.py --json`` of the checkout ``tree``: its report, with the load
    measured around it (``run_load``, ``run_flag``)."""
    LoadWindows, load_flag = _load_tools()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "benchmarks/run.py", "--json", "-o", str(out), *bench_args]
    w = LoadWindows(threads)
    w.start()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    w.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark in {tree} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    data = json.loads(out.read_text(encoding="utf-8"))
    data["run_load"] = w.record()
    data["run_flag"] = load_flag(data["run_load"])
    return data


def run_commits(
    before: str, after: str, rounds: int, bench_args: list, threads: int, repo=ROOT, on_run=None
) -> dict:
    """Benchmark runs of two commits of ``repo`` in interleaved rounds, each in a temporary
    worktree: ``{"commits": [sha, sha], "runs": {sha: [report per round]}, ...}``.
    ``on_run(record)`` is called after every run with the record so far."""
    shas = [_git("rev-parse", "--verify", f"{c}^{{commit}}", cwd=repo) for c in (before, after)]
    tmp = Path(tempfile.mkdtemp(prefix="compare-benchmarks-"))
    trees = {}
    runs = {sha: [] for sha in shas}
    record = {"commits": shas, "rounds": rounds, "args": bench_args, "runs": runs}
    try:
        for i, sha in enumerate(shas):
            trees[sha] = tmp / f"tree{i}"
            _git("worktree", "add", "--detach", str(trees[sha]), sha, cwd=repo)
        for r in range(rounds):
            for sha in shas if r % 2 == 0 else shas[::-1]:
                out = tmp / f"{sha[:12]}-{r}.json"
                print(f"round {r + 1}/{rounds}: {sha[:12]}", file=sys.stderr, flush=True)
                runs[sha].append(_run_once(trees[sha], out, bench_args, threads))
                if on_run is not None:
                    on_run(record)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _round_values(reports: list, name: str):
    """(ratios per round, loaded per round) of goal ``name``."""
    ratios, loaded = [], []
    for rep in reports:
        g = next(g for g in rep["goals"] if g["goal"] == name)
        ratios.append(float(g["ratio"]))
        loaded.append(bool(g.get("flag") and g["target"] != "reported") or bool(rep.get("run_flag")))
    return ratios, loaded


def compare_rounds(record: dict, slack: float = 1.25) -> tuple[str, int]:
    """(Markdown table of the interleaved runs, rows worse than ``slack`` and not loaded)."""
    b_sha, a_sha = record["commits"]
    b_runs, a_runs = record["runs"][b_sha], record["runs"][a_sha]
    names = [g["goal"] for g in b_runs[0]["goals"]]
    after_names = {g["goal"] for g in a_runs[0]["goals"]}
    done = min(len(b_runs), len(a_runs))
    lines = [
        f"Interleaved runs: before {b_sha[:10]}, after {a_sha[:10]}, {done} of {record['rounds']} rounds "
        f"(`benchmarks/run.py {' '.join(record['args'])}`); * a loaded round.",
        "",
        f"| goal | target | before (rounds) | before | after (rounds) | after | change (x, worse > {slack:g}) | |",
        "|---|---|---|---:|---|---:|---:|---|",
    ]
    worse = 0
    for name in [n for n in names if n in after_names]:
        rb, lb = _round_values(b_runs, name)
        ra, la = _round_values(a_runs, name)
        target = next(g["target"] for g in a_runs[0]["goals"] if g["goal"] == name)
        mb, ma = statistics.median(rb), statistics.median(ra)
        higher = _direction(target) == "higher"
        change = (mb / ma if higher else ma / mb) if mb > 0 and ma > 0 else float("nan")
        flag = "loaded" if any(lb + la) else "worse" if change > slack else ""
        worse += flag == "worse"
        cells = [
            ", ".join(f"{v:.3g}{'*' if f else ''}" for v, f in zip(r, lf)) for r, lf in ((rb, lb), (ra, la))
        ]
        lines.append(
            f"| {name} | {target} | {cells[0]} | {mb:.3g} | {cells[1]} | {ma:.3g} | {change:.2f} | {flag} |"
        )
    loads = []
    for sha in (b_sha, a_sha):
        for r, rep in enumerate(record["runs"][sha]):
            ld = rep["run_load"]
            loads.append(
                f"- {sha[:10]} round {r + 1}: load average {ld['loadavg'][0]:.2f}, other processes "
                f"{ld['others_cores']} cores of {ld['cores']}, {ld['window_s']:.0f} s"
                + (f" (loaded: {rep['run_flag']})" if rep["run_flag"] else "")
            )
    return "\n".join(lines + ["", *loads]), worse


def _parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="BEFORE.json AFTER.json (without --commits)")
    ap.add_argument("--commits", nargs=2, metavar=("BEFORE", "AFTER"), help="two commits to run")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved runs of each commit (default 3)")
    ap.add_argument("--sections", default="samplers", help="benchmark sections (default samplers)")
    ap.add_argument("--repeats", type=int, default=5, help="the benchmark's --repeats")
    ap.add_argument("--threads", type=int, default=2, help="the benchmark's sampler threads")
    ap.add_argument("--json-out", help="write every run's rows and load here (atomically)")
    ap.add_argument("--slack", type=float, default=1.25)
    ap.add_argument("-o", "--output")
    return ap


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if not args.slack >= 1:
        ap.error("--slack: must be >= 1")
    if args.commits:
        if args.runs:
            ap.error("--commits: give either two commits or two JSON runs")
        if args.rounds < 1 or args.repeats < 1 or args.threads < 1:
            ap.error("--rounds, --repeats, --threads: must be >= 1")
        bench_args = [
            "--sections",
            args.sections,
            "--repeats",
            str(args.repeats),
            "--threads",
            str(args.threads),
        ]

        def save(record):  # after every run: a partial comparison survives an interruption
            if args.json_out:
                _write_atomic(args.json_out, json.dumps(record, indent=1) + "\n")
            if args.output and all(record["runs"].values()):
                _write_atomic(args.output, compare_rounds(record, slack=args.slack)[0] + "\n")

        try:
            record = run_commits(*args.commits, args.rounds, bench_args, args.threads, on_run=save)
        except subprocess.CalledProcessError as e:
            ap.error(f"--commits: git {' '.join(e.cmd[1:3])}: {e.stderr.strip()}")
        text, worse = compare_rounds(record, slack=args.slack)
    else:
        if len(args.runs) != 2:
            ap.error("give BEFORE.json AFTER.json, or --commits BEFORE AFTER")
        runs = []
        for name in args.runs:
            try:
                with open(name, encoding="utf-8") as f:
                    runs.append(json.load(f))
            except (OSError, ValueError) as e:
                ap.error(f"{name}: {e}")
        text, worse = compare(*runs, slack=args.slack)
    if args.output:
        _write_atomic(args.output, text + "\n")
    print(text)
    print(f"\n{worse} row(s) worse than {args.slack:g}x", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
