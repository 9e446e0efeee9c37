"""The ``cactus-theory`` command line: thin subcommands that call library functions.

Errors in arguments or inputs exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from ._io import atomic_write_text

__all__ = ["main", "write_atomic"]


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half-written)."""
    atomic_write_text(path, text)


def _cmd_report(args) -> int:
    from .report import build_report

    text = build_report(args.sections, seed=args.seed)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_rules(args) -> int:
    from .rules import RULES

    for name, spec in RULES.items():
        knobs = ", ".join(f"{k.name}={k.default!r}" for k in spec.knobs) or "-"
        sps = spec.sps_knobs if spec.sps_knobs is not None else f"none ({spec.sps_note})"
        print(f"{name:<26} [{spec.family}] knobs: {knobs}; SpS at: {sps}\n    {spec.summary}")
    return 0


def _cmd_benchmark(args) -> int:
    from .benchmark import run_benchmarks

    if args.repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {args.repeats}")
    sys.stdout.write(run_benchmarks(repeats=args.repeats).to_text())
    return 0


def _cmd_figures(args) -> int:
    from .plots import write_figures

    for path in write_figures(args.out, args.names, seed=args.seed):
        print(path)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cactus-theory", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="the main job: exact results on embedded defaults")
    rep.add_argument("--sections", nargs="*", default=None, help="subset of sections")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--output", "-o", default=None, help="write to this file (atomically)")
    rep.set_defaults(func=_cmd_report)
    rules = sub.add_parser("rules", help="list every registered rule with its knobs")
    rules.set_defaults(func=_cmd_rules)
    figs = sub.add_parser("figures", help="write every figure as PNG")
    figs.add_argument("--out", default="figures")
    figs.add_argument("--names", nargs="*", default=None)
    figs.add_argument("--seed", type=int, default=0)
    figs.set_defaults(func=_cmd_figures)
    bench = sub.add_parser("benchmark", help="speed goals as medians and ratios")
    bench.add_argument("--repeats", type=int, default=5)
    bench.set_defaults(func=_cmd_benchmark)
    for modname in ("cactus_theory.simulate.cli", "cactus_theory.logits.cli"):
        try:
            module = __import__(modname, fromlist=["add_parser"])
        except ImportError:
            continue
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Entry point: parse, dispatch, map ValueError to exit status 2 with one line."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        print(f"cactus-theory {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
