"""Run every speed goal in one run: ``cactus-theory benchmark`` (or ``python benchmarks/run.py``,
the same options) calls :func:`run_benchmarks`; the goals are listed in :mod:`benchmarks`.

Usage: ``.venv/bin/python benchmarks/run.py --json -o run.json`` (``--help`` for the options);
``scripts/compare_benchmarks.py`` compares two such runs row by row.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's root holds the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._frontier import bench_frontier
from benchmarks._goals import (
    QUICK_RULES,
    QUICK_SAMPLER_SHAPE,
    SAMPLER_SHAPES,
    SAMPLER_THREADS,
    SECTIONS,
    VOCAB,
    BenchmarkReport,
    GoalResult,
    correlated_pair,
    environment,
    keep_freed_memory,
    start_rows,
)
from benchmarks._load import LoadWindows
from benchmarks._numpy import (
    SHORT_ROWS,
    SHORT_ROWS_QUICK,
    bench_analysis,
    bench_emitted,
    bench_row_blocks,
    bench_spike,
    floor_emitted_taylor,
)
from benchmarks._samplers import bench_samplers
from benchmarks._scale import SCALE_SIZES, SCALE_SIZES_DEFAULT, SCALE_SIZES_QUICK, bench_scale

__all__ = [
    "run_benchmarks",
    "BenchmarkReport",
    "GoalResult",
    "SECTIONS",
    "SAMPLER_THREADS",
    "QUICK_RULES",
    "QUICK_SAMPLER_SHAPE",
    "FAMILY_RULES",
    "correlated_pair",
    "floor_emitted_taylor",
]

#: Sampler rules of the default full run: one per family (``all_rules=True`` times every rule).
FAMILY_RULES = (
    "sps",
    "cactus-taylor",
    "cactus-exact",
    "interpolation",
    "topk",
    "tas",
    "cascade-token-v3",
    "fuzzy",
)


def run_benchmarks(
    repeats: int = 5,
    quick: bool = False,
    seed: int = 0,
    all_rules: bool = False,
    threads: int = SAMPLER_THREADS,
    scale: bool = False,
    sections=SECTIONS,
) -> BenchmarkReport:
    """Measure every goal (the package docstring) in one run.

    Parameters
    ----------
    repeats : int
        Timings are medians over this many calls (>= 1).
    quick : bool
        Smoke run: batch 2 for the analysis, :data:`SHORT_ROWS_QUICK` short rows for the
        row blocks, the samplers of :data:`QUICK_RULES` at
        :data:`QUICK_SAMPLER_SHAPE` only (every check still runs). Its numbers are not the
        goals' (the full run is): at that shape the samplers' rows pass or fail on their
        checks alone, their targets marked "(full run)".
    seed : int
        Seed of the synthetic q and p.
    all_rules : bool
        Time every registered rule's sampler (default: :data:`FAMILY_RULES`, one per family;
        the slowest rules, e.g. Mentored decoding's per-row root, take minutes each on a CPU).
    threads : int
        Intra-op torch threads of the sampler timings (>= 1; default 2, the goals'
        condition), restored afterwards. The fused kernels are compiled for the thread count
        they run with.
    scale : bool
        The chunked analysis' rows at every size of :data:`SCALE_SIZES` (up to 100,000 rows
        at V = 1,000 and 1,024 at V = 151,936: minutes); default :data:`SCALE_SIZES_DEFAULT`,
        quick :data:`SCALE_SIZES_QUICK`.
    sections : sequence of str
        Which parts of :data:`SECTIONS` to run (default: all), in their own order.

    Returns
    -------
    BenchmarkReport
    """
    repeats, threads = _checked(repeats, threads, sections)
    allocator = "glibc, freed memory kept (mallopt)" if keep_freed_memory() else "default"
    goals = []
    whole = LoadWindows(_default_threads())
    whole.start()
    # the rows other than the samplers' record the load since the row before them, on the
    # threads torch and numpy may use (all of them)
    start_rows(_default_threads())
    if "spike" in sections or "emitted" in sections:
        q, p = correlated_pair(VOCAB, seed=seed)
    if "spike" in sections:
        goals.append(bench_spike(q, repeats))
    if "emitted" in sections:
        goals += bench_emitted(q, p, repeats)
        goals.append(bench_row_blocks(SHORT_ROWS_QUICK if quick else SHORT_ROWS, repeats, quick, seed))
    if "analysis" in sections:
        goals += bench_analysis(2 if quick else 64, repeats, _devices())
    if "samplers" in sections:
        goals += _sampler_goals(quick, all_rules, repeats, threads)
        start_rows(_default_threads())
    if "frontier" in sections:
        goals += bench_frontier(repeats, quick)
    if "scale" in sections:
        goals += bench_scale(
            SCALE_SIZES if scale else SCALE_SIZES_QUICK if quick else SCALE_SIZES_DEFAULT,
            seed,
            quick=quick and not scale,
        )
    whole.stop()
    return BenchmarkReport(
        tuple(goals),
        repeats,
        bool(quick),
        {**environment(), "allocator": allocator, "sampler_threads": threads, "load": whole.record()},
    )


def _default_threads() -> int:
    """The intra-op threads torch uses outside the samplers' rows (its default: the cores)."""
    import torch

    return torch.get_num_threads()


def _checked(repeats, threads, sections):
    """``repeats`` and ``threads`` as integers >= 1, ``sections`` a non-empty sequence of
    :data:`SECTIONS` (ValueError naming the argument)."""
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats: must be an integer >= 1, got {repeats}")
    if isinstance(threads, bool) or int(threads) != threads or threads < 1:
        raise ValueError(f"threads: must be an integer >= 1, got {threads}")
    if isinstance(sections, str) or not sections or any(x not in SECTIONS for x in sections):
        raise ValueError(f"sections: a non-empty sequence of {', '.join(SECTIONS)}; got {sections!r}")
    return int(repeats), int(threads)


def _devices() -> list:
    """The analysis rows' torch devices: the CPU, and CUDA where available."""
    devices = ["cpu"]
    try:
        import torch

        if torch.cuda.is_available():
            devices.append("cuda")
    except ImportError:  # pragma: no cover
        pass
    return devices


def _sampler_goals(quick, all_rules, repeats, threads) -> list:
    """The sampler rows: :data:`FAMILY_RULES` (or every rule) at :data:`SAMPLER_SHAPES`; quick:
    :data:`QUICK_RULES` at :data:`QUICK_SAMPLER_SHAPE`, judged on their checks alone."""
    from cactus_theory.rules import RULES

    if quick:
        rules, shapes = QUICK_RULES, (QUICK_SAMPLER_SHAPE,)
    else:
        rules = tuple(sorted(RULES)) if all_rules else FAMILY_RULES
        shapes = SAMPLER_SHAPES
    goals = bench_samplers(rules, shapes, repeats, threads)
    if quick:
        # at the smoke shape the per-call overhead, not the reads, sets the ratios: the
        # sampler rows there judge their checks only (the goals are the full run's)
        goals = [
            g
            if g.target == "reported"
            else replace(g, target=f"{g.target} (full run)", passed=g.check.startswith("ok"))
            for g in goals
        ]
    return goals


if __name__ == "__main__":
    from cactus_theory.cli import main

    sys.exit(main(["benchmark", *sys.argv[1:]]))
