"""Speed goals, measured in one run and printed as medians and ratios (``cactus-theory benchmark``).

The machines are shared and noisy, so nothing here is a pass/fail test: each timing is the
median of ``repeats`` runs, and the goals are stated as ratios measured side by side.
"""

from __future__ import annotations

import time

import numpy as np

from .analysis.one_step import emitted_distribution, make_plan
from .rules import get_rule

__all__ = ["median_time", "run_benchmarks"]


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_benchmarks(repeats: int = 5, seed: int = 0) -> str:
    """Time the exact emitted distribution: fast O(V log V) path vs the dense O(V^2) oracle.

    Returns
    -------
    str
        A table: for each vocabulary size, the median times and the dense/fast ratio; then
        the full 151,936-token vocabulary (goal: well under a second) for every Cactus rule.
    """
    rng = np.random.default_rng(seed)
    lines = ["## emitted_distribution: fast path vs dense enumeration (median of "
             f"{repeats} runs)", f"{'V':>8}{'fast [ms]':>12}{'dense [ms]':>12}{'dense/fast':>12}"]
    rule = get_rule("cactus-taylor", delta=0.5)
    for V in (64, 256, 1024, 2048):
        q, p = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
        plan = make_plan(rule, q, p)
        tf = median_time(lambda: emitted_distribution(plan), repeats)
        td = median_time(lambda: emitted_distribution(plan, method="dense"), max(1, repeats // 2))
        lines.append(f"{V:>8}{tf * 1e3:>12.2f}{td * 1e3:>12.1f}{td / tf:>12.0f}")
    V = 151_936
    q, p = rng.dirichlet(np.full(V, 0.05)), rng.dirichlet(np.full(V, 0.05))
    lines.append(f"\n## full vocabulary V = {V} (goal: well under 1 s per row)")
    for name, knobs in (("sps", {}), ("cactus-taylor", {"delta": 0.5}),
                        ("cactus-exact-kl", {"delta": 0.5})):
        r = get_rule(name, **knobs)
        t = median_time(lambda: emitted_distribution(r, q, p), repeats)
        lines.append(f"{name:<20}{t * 1e3:>10.1f} ms  (incl. validation and the plan)")
    return "\n".join(lines) + "\n"
