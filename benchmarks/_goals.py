"""What every benchmark row shares: the sizes, the timers, the goal and report records, the rows.

Goals are ratios of medians taken in one run (see :mod:`benchmarks`); :func:`goal` makes one
row, whose pass/fail needs both the speed target and the check against the slow reference.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ._load import MIN_WINDOW_S, LoadWindows, load_flag, load_text

VOCAB = 151_936
DELTA = 0.1
SAMPLER_SHAPES = ((32, 8, 32_000), (8, 4, 151_936))
#: The quick run's samplers: one rule for each of the checked accept paths (from values,
#: from the spike with the host root and with the closed form, top-k's counting, a token
#: cascade's row target and its other branch), at a small shape: 7 whole 256-token blocks and a
#: short one (the test suite's fused tests use the same shape, so that its kernels are
#: compiled once for both).
QUICK_RULES = ("sps", "cactus-taylor", "cactus-exact-kl", "topk", "cascade-token-v3")
QUICK_SAMPLER_SHAPE = (16, 4, 2000)
#: Intra-op torch threads of the sampler timings (the issue's measuring condition: CPU, 2).
SAMPLER_THREADS = 2
#: The benchmark's sections, in the order they run: the exact root, the emitted
#: distributions, the analysis (numpy and torch), the samplers, the frontier, the scale rows.
SECTIONS = ("spike", "emitted", "analysis", "samplers", "frontier", "scale")

#: The samplers' rows are timed in this many interleaved rounds of ``repeats`` pairs each
#: (every row once per round; package docstring).
SAMPLER_PAIRS = 4


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, in seconds (one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def paired_median_times(fn, ref, repeats: int = 5):
    """Medians of ``fn()`` and ``ref()`` timed alternately (one warm-up call each), in seconds.

    Alternating the two puts both in the same stretch of a shared machine's load, so their
    ratio is steadier than that of two medians taken one after the other.
    """
    fn()
    ref()
    t_fn, t_ref = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ref()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        t_ref.append(t1 - t0)
        t_fn.append(t2 - t1)
    return float(np.median(t_fn)), float(np.median(t_ref))


@dataclass(frozen=True)
class GoalResult:
    """One goal: what was measured, the ratio, the target and whether it passed.

    Attributes
    ----------
    goal : str
        Short name (the goals of the :mod:`benchmarks` docstring).
    measured : str
        The timings behind the ratio, in words (medians).
    ratio : float
        The measured ratio (or the absolute value, for absolute goals).
    target : str
        The goal, e.g. ``"<= 2"``.
    passed : bool
        Ratio within target and the correctness check passed.
    check : str
        The correctness check against the slow reference and its outcome.
    load : dict
        The machine's load while the row was timed (:meth:`._load.LoadWindows.record`:
        load averages, other processes' busy cores, cores, threads, the baseline's spread
        over rounds).
    flag : str
        Why the timing is not a verdict (:func:`._load.load_flag`), or ``""``. A flagged
        goal row does not pass, whatever its ratio.
    """

    goal: str
    measured: str
    ratio: float
    target: str
    passed: bool
    check: str = ""
    load: dict = field(default_factory=dict)
    flag: str = ""


@dataclass(frozen=True)
class BenchmarkReport:
    """Every goal of one run (:func:`run_benchmarks`).

    Attributes
    ----------
    goals : tuple of GoalResult
    repeats : int
        Timings are medians over this many calls.
    quick : bool
        Reduced sizes and rule subset (a smoke run, not the goals' numbers).
    environment : dict
        numpy/torch versions, threads, CUDA device name (or None).
    """

    goals: tuple
    repeats: int
    quick: bool
    environment: dict = field(default_factory=dict)

    @property
    def all_passed(self) -> bool:
        """True when every goal passed."""
        return all(g.passed for g in self.goals)

    @property
    def loaded(self) -> tuple:
        """The goal rows timed under load (flagged: not recorded as goals)."""
        return tuple(g.goal for g in self.goals if g.flag and g.target != "reported")

    def to_dict(self) -> dict:
        """A JSON-serializable dict (floats, strings, bools, lists)."""
        return {
            "repeats": self.repeats,
            "quick": self.quick,
            "environment": dict(self.environment),
            "all_passed": self.all_passed,
            "loaded": list(self.loaded),
            "goals": [asdict(g) for g in self.goals],
        }

    def to_text(self) -> str:
        """The table: goal, measured, ratio, target, pass/fail (then the checks)."""
        head = ("goal", "measured", "ratio", "target", "pass/fail")
        rows = [(g.goal, g.measured, f"{g.ratio:.3g}", g.target, _verdict(g)) for g in self.goals]
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        env = ", ".join(f"{k}={v}" for k, v in self.environment.items())
        lines = [
            f"## cactus-theory benchmark (medians of {self.repeats}, samplers "
            f"{SAMPLER_PAIRS * self.repeats} alternated pairs; "
            f"{'quick' if self.quick else 'full'} run; {env})",
            fmt.format(*head),
            fmt.format(*("-" * w for w in widths)),
        ]
        lines += [fmt.format(*r) for r in rows]
        lines += ["", "checks against the slow reference path:"]
        lines += [f"  {g.goal}: {g.check}" for g in self.goals if g.check]
        flagged = [g for g in self.goals if g.flag]
        if flagged:
            lines += ["", "timed under load (not verdicts; rerun on an idle machine):"]
            lines += [f"  {g.goal}: {g.flag}" for g in flagged]
        return "\n".join(lines) + "\n"


def _verdict(g: GoalResult) -> str:
    """The table's last column: ``loaded`` for a flagged goal row, else pass or FAIL."""
    if g.flag and g.target != "reported":
        return "loaded"
    return "pass" if g.passed else "FAIL"


def correlated_pair(vocab_size: int, batch=(), seed: int = 0):
    """q and p: softmaxes of correlated Gumbel logits (p's are 0.8 q's + 0.6 fresh noise)."""
    rng = np.random.default_rng(seed)
    g = rng.gumbel(size=tuple(batch) + (vocab_size,))
    lp = 0.8 * g + 0.6 * rng.gumbel(size=g.shape)

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return softmax(g), softmax(lp)


_WINDOW: dict = {"windows": None, "last": {}}


def start_rows(threads: int) -> None:
    """Start the load window of the rows :func:`goal` makes next without a load record of
    their own (each such row records the load since the previous one; ``threads``: the
    threads they may use)."""
    _WINDOW["windows"] = LoadWindows(threads)
    _WINDOW["windows"].start()
    _WINDOW["last"] = {}


def _window_record() -> dict:
    """The load since the previous row (a window too short to measure: the previous row's
    record, the same timings), and a fresh window for the next row."""
    w = _WINDOW["windows"]
    if w is None:
        return {}
    w.stop()
    rec = w.record() if w.wall >= MIN_WINDOW_S or not _WINDOW["last"] else _WINDOW["last"]
    _WINDOW["last"] = rec
    start_rows(w.threads)
    _WINDOW["last"] = rec
    return rec


def goal(goal, measured, ratio, target, ok_speed, ok_check, check, load=None):
    """One row: ``passed`` needs the speed target, the check and (for a goal row) a timing
    not flagged as loaded (``load``: the row's record, else the window since the previous
    row, :func:`start_rows`)."""
    load = _window_record() if load is None else load
    flag = load_flag(load) if load else ""
    if load:
        measured = f"{measured}; {load_text(load)}"
    return GoalResult(
        goal,
        measured,
        float(ratio),
        target,
        bool(ok_speed and ok_check and not (flag and target != "reported")),
        f"{'ok' if ok_check else 'FAILED'}: {check}",
        dict(load),
        flag,
    )


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep freed memory instead of returning it to the OS.

    Every large temporary numpy frees is otherwise unmapped and its pages faulted in again
    on the next call; on virtual machines those faults cost as much as the arithmetic
    (30% of the emitted-distribution time measured here). The benchmark measures the code,
    not the page faults, so it sets the trim and mmap thresholds to 512 MiB (``mallopt``)
    for its process and says so in the environment. Returns False where there is no glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_trim_threshold, 512 << 20) and libc.mallopt(m_mmap_threshold, 512 << 20))
    except (OSError, AttributeError):
        return False


def environment():
    env = {"numpy": np.__version__}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover
        env["torch"] = None
    return env
