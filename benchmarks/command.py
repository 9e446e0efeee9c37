"""``cactus-theory benchmark``: the speed goals as medians and ratios (the lab's command).

Declared in ``pyproject.toml`` under the entry-point group ``cactus_theory.commands``: the
command line adds its shared ``--seed`` (of the random (q, p) rows), ``-o/--output`` and
``--json``, parses, checks the output path and prints :meth:`BenchmarkReport.to_text` or
:meth:`BenchmarkReport.to_dict`; from an installed wheel (no checkout, no ``benchmarks/``) it
says so in one line, exit status 2. ``python benchmarks/run.py`` takes the same options.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

#: The command's help line.
HELP = "speed goals as medians and ratios"


def _positive_int(text: str) -> int:
    """An integer >= 1 (argparse type; its error names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def add_arguments(p) -> None:
    """The benchmark's own flags (the command line adds ``--seed``, ``-o/--output`` and ``--json``)."""
    p.add_argument("--repeats", type=_positive_int, default=5, help="timed repeats per case (medians)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (small batch, five rules at a small sampler shape): not the goals' numbers",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="intra-op torch threads of the sampler timings (default 2: the goals' condition)",
    )
    p.add_argument(
        "--all-rules",
        action="store_true",
        help="time every registered rule's sampler (default: one rule per family)",
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="the chunked analysis' rows at every size (100,000 rows at V = 1,000; "
        "1,024 at V = 151,936): minutes",
    )
    p.add_argument(
        "--sections",
        type=lambda text: tuple(x.strip() for x in text.split(",") if x.strip()),
        default=None,
        help="comma-separated parts to run, of spike, emitted, analysis, samplers, frontier, scale "
        "(default: all)",
    )


def run(args):
    """Run the benchmark with the parsed ``args``; returns its :class:`BenchmarkReport`."""
    from .run import SAMPLER_THREADS, SECTIONS, run_benchmarks

    return run_benchmarks(
        repeats=args.repeats,
        quick=args.quick,
        seed=args.seed,
        all_rules=args.all_rules,
        scale=args.scale,
        threads=SAMPLER_THREADS if args.threads is None else args.threads,
        sections=SECTIONS if args.sections is None else args.sections,
    )
