"""Completion lengths by real decoding (verifier, SpS, a rule) against the EOS-shift prediction.

Runs :func:`benchmarks.length.run_length_check` (the lab's, in the checkout) with the shipped SmolLM2 verifier and
the distilled drafter at two sampling settings (temperature 1 untruncated, and the paper's
temperature 0.6 / top-p 0.95 / top-k 20), and writes ``length_check.json`` and
``length_check.md`` into ``--out`` (each written atomically).

Usage::

    python scripts/length_check.py [--out benchmarks/length_check] [--samples 24]
        [--max-new-tokens 48] [--prompts spec_bench/164,spec_bench/165,spec_bench/325]
        [--rule cactus-taylor] [--delta 0.35] [--m 2] [--seed 0] [--threads 1]

Bad arguments exit with status 2 and one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.length import (  # noqa: E402  (after the path insert)
    LENGTH_SETTINGS,
    LengthConfig,
    run_length_check,
    write_length_check,
)


def main(argv=None) -> int:
    d = LengthConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/length_check")
    ap.add_argument("--samples", type=int, default=d.samples, help="completions per prompt and configuration")
    ap.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    ap.add_argument("--prompts", default=",".join(d.prompts), help="comma-separated shipped prompt ids")
    ap.add_argument("--rule", default=d.rule)
    ap.add_argument("--delta", type=float, default=d.delta)
    ap.add_argument("--m", type=int, default=d.m, help="draft length")
    ap.add_argument("--drafter", default=d.drafter)
    ap.add_argument("--settings", default=",".join(d.settings), help=f"of {sorted(LENGTH_SETTINGS)}")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--bootstrap", type=int, default=d.bootstrap)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    cfg = LengthConfig(
        prompts=tuple(x for x in a.prompts.split(",") if x),
        samples=a.samples,
        max_new_tokens=a.max_new_tokens,
        rule=a.rule,
        delta=a.delta,
        m=a.m,
        drafter=a.drafter,
        settings=tuple(x for x in a.settings.split(",") if x),
        seed=a.seed,
        bootstrap=a.bootstrap,
    )
    try:
        res = run_length_check(cfg, threads=a.threads, progress=None if a.quiet else print)
    except ValueError as exc:
        print(f"length_check: {exc}", file=sys.stderr)
        return 2
    j, m = write_length_check(res, a.out)
    if not a.quiet:
        print(f"wrote {j} and {m} ({res['settings']['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
