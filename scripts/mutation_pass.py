"""Mutation pass over the core formulas: perturb one operator or constant, run the tests.

Each mutant changes one token on one line of a core module (``+`` <-> ``-``, ``*`` <-> ``/``,
``<`` <-> ``<=``, ``>`` <-> ``>=``, ``minimum`` <-> ``maximum``, ``min`` <-> ``max``, a numeric
constant c -> c + 1), in a scratch copy of the repository, and runs only the test files that
cover that module (``pytest -x``, stopping at the first failure). A mutant is *killed* when the
tests fail, *survived* when they pass, *timeout* when they run past ``--timeout``.

Usage::

    python scripts/mutation_pass.py [--per-file 20] [--seed 0] [--timeout 600] [--json out.json]
                                    [--only spike]

Core formulas covered (module -> tests): Theorem 2's root and Corollary 5's point
(``solvers/_spike.py``), the rule plans (``rules/plans.py``), the emitted distribution
(``analysis/one_step.py``), the optimal frontier (``solvers/_frontier.py``) and the chain
dynamic programme (``simulate/_exact.py``). Docstrings, comments, error messages, imports and
signatures are never mutated. With ``--per-file N`` a seeded sample of N mutants per module is
run (the full list is large; on two shared cores each survivor costs a full test-file run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Core module -> the test files that must kill its mutants.
TARGETS = {
    "cactus_theory/solvers/_spike.py": ["tests/solvers/test_cvx.py"],
    "cactus_theory/rules/plans.py": [
        "tests/analysis/test_one_step.py",
        "tests/rules/test_rule_invariants.py",
    ],
    "cactus_theory/analysis/one_step.py": ["tests/analysis/test_one_step.py"],
    "cactus_theory/solvers/_frontier.py": ["tests/analysis/test_frontier.py"],
    "cactus_theory/simulate/_exact.py": [
        "tests/simulate/test_exact.py",
        "tests/simulate/test_chain.py",
        "tests/simulate/test_simulate.py",
    ],
}

_SWAPS = [
    (r"(?<=\s)\+(?=\s)", "-"),
    (r"(?<=\s)-(?=\s)", "+"),
    (r"(?<=\s)\*(?=\s)", "/"),
    (r"(?<=\s)/(?=\s)", "*"),
    (r"(?<=\s)<=(?=\s)", "<"),
    (r"(?<=\s)<(?=\s)", "<="),
    (r"(?<=\s)>=(?=\s)", ">"),
    (r"(?<=\s)>(?=\s)", ">="),
    (r"\bminimum\b", "maximum"),
    (r"\bmaximum\b", "minimum"),
    (r"\bmin\(", "max("),
    (r"\bmax\(", "min("),
    (r"\bclamp_min\b", "clamp_max"),
]
_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*|\d+)(?![\w.])")
_SKIP = re.compile(r"^\s*(#|def |class |import |from |@|raise |return f\"|\"\"\"|r\"\"\"|[A-Z_]+\s*=)")


def _code_lines(text: str):
    """Indices of mutable lines: inside function bodies, outside docstrings and comments."""
    lines = text.splitlines()
    out, in_doc = [], False
    for i, line in enumerate(lines):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc:
            if quotes % 2 == 1:
                in_doc = False
            continue
        if quotes % 2 == 1:
            in_doc = True
            continue
        if quotes or not stripped or _SKIP.match(line) or not line.startswith("    "):
            continue
        if "ValueError" in line or 'f"' in line or "warn" in line:
            continue
        out.append(i)
    return lines, out


def mutants(path: str, root: Path = ROOT):
    """Every single-token mutant of ``root / path``: (line number, original, mutated line)."""
    lines, idx = _code_lines((root / path).read_text())
    found = []
    for i in idx:
        code = lines[i].split("#", 1)[0]
        for pattern, repl in _SWAPS:
            for m in re.finditer(pattern, code):
                new = code[: m.start()] + repl + code[m.end() :]
                found.append((i, lines[i], new + lines[i][len(code) :]))
        for m in _NUMBER.finditer(code):
            val = m.group(1)
            rep = str(float(val) + 1) if "." in val else str(int(val) + 1)
            new = code[: m.start()] + rep + code[m.end() :]
            found.append((i, lines[i], new + lines[i][len(code) :]))
    return found


def run_one(scratch: Path, path: str, line_no: int, new_line: str, tests, timeout: float):
    """Apply one mutant in ``scratch``, run its tests, restore; return (verdict, seconds)."""
    target = scratch / path
    original = target.read_text()
    lines = original.splitlines(keepends=True)
    lines[line_no] = new_line + "\n"
    target.write_text("".join(lines))
    env = dict(os.environ, MPLBACKEND="Agg", HYPOTHESIS_PROFILE="ci", PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
            cwd=scratch,
            env=env,
            capture_output=True,
            timeout=timeout,
        )
        verdict = "survived" if proc.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        verdict = "timeout"
    finally:
        target.write_text(original)
    return verdict, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-file", type=int, default=20, help="mutants sampled per module (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant run")
    ap.add_argument("--only", default="", help="run only modules whose path contains this")
    ap.add_argument("--json", default="", help="write every verdict to this file")
    args = ap.parse_args(argv)
    if args.per_file < 0:
        ap.error("--per-file: must be >= 0")
    scratch = Path(tempfile.mkdtemp(prefix="mutation_pass_"))
    try:
        shutil.copytree(ROOT / "cactus_theory", scratch / "cactus_theory")
        shutil.copytree(ROOT / "tests", scratch / "tests")
        for f in ("pyproject.toml",):
            shutil.copy(ROOT / f, scratch / f)
        if (ROOT / "notebooks").exists():
            shutil.copytree(ROOT / "notebooks", scratch / "notebooks")
        rng = random.Random(args.seed)
        results = []
        for path, tests in TARGETS.items():
            if args.only and args.only not in path:
                continue
            found = mutants(path, scratch)  # the copy under test, not the live file
            chosen = (
                found
                if args.per_file == 0 or len(found) <= args.per_file
                else sorted(rng.sample(found, args.per_file))
            )
            for line_no, old, new in chosen:
                verdict, secs = run_one(scratch, path, line_no, new, tests, args.timeout)
                rec = dict(
                    file=path,
                    line=line_no + 1,
                    original=old.strip(),
                    mutant=new.strip(),
                    verdict=verdict,
                    seconds=round(secs, 1),
                    of=len(found),
                )
                results.append(rec)
                print(f"{verdict:8s} {path}:{line_no + 1}  {new.strip()}  ({secs:.0f} s)", flush=True)
                if args.json:
                    _write(args.json, results)
        n = len(results)
        survived = [r for r in results if r["verdict"] == "survived"]
        print(f"\n{n} mutants: {n - len(survived)} killed or timed out, {len(survived)} survived")
        for r in survived:
            print(f"SURVIVED {r['file']}:{r['line']}  {r['original']}  ->  {r['mutant']}")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write(path, results):
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
