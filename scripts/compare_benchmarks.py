"""Compare two ``cactus-theory benchmark --json`` runs row by row (before and after a change).

    python scripts/compare_benchmarks.py BEFORE.json AFTER.json [--slack 1.25] [-o OUT.md]

For every goal present in both runs (matched by name): both values, and the change in the
goal's own direction: after / before for a goal whose target reads ``<=`` (lower is better)
and for the reported rows, before / after for ``>=`` (higher is better). A goal row whose
change exceeds ``--slack`` is marked ``worse``; goals in one run only are listed apart. The
table is Markdown, written atomically with ``-o``. Both runs should come from the same machine
state (run them one after the other on a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--slack", type=float, default=1.25)
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    if not args.slack >= 1:
        ap.error("--slack: must be >= 1")
    runs = []
    for name in (args.before, args.after):
        try:
            with open(name, encoding="utf-8") as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            ap.error(f"{name}: {e}")
    text, worse = compare(*runs, slack=args.slack)
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".compare-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)
    print(text)
    print(f"\n{worse} row(s) worse than {args.slack:g}x", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
