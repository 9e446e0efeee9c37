r"""The machine's load while a row is timed, and the rule that flags a loaded row.

Every timed row records, for the windows in which it was timed: the load averages
(``os.getloadavg``) at the end, the busy cores of **other** processes (the machine's busy CPU
time less this process's and its waited-for children's, from ``/proc/stat`` and
``/proc/self/stat``, divided by the windows' wall time), the cores and the threads the row
uses. A row is **loaded** (:func:`load_flag`) when

* other processes kept more cores busy than the row leaves free: their mean busy cores over
  its windows exceed ``cores - threads + OTHERS_MARGIN`` (:data:`OTHERS_MARGIN`, a quarter of
  a core: an idle machine's daemons use a few hundredths), or
* its baseline (the read pass a sampler row is divided by) was measured inconsistently: the
  largest of its per-round medians exceeds the smallest by more than :data:`BASELINE_SPREAD`.

A loaded row's speed is not a verdict: its ``passed`` is False and the table says
``loaded`` (the check against the slow reference still runs and is reported). Where
``/proc`` is missing (not Linux) the busy cores are unknown and only the baseline's spread
can flag a row.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

#: Busy cores of other processes allowed beyond the cores a row leaves free (see the module
#: docstring).
OTHERS_MARGIN = 0.25

#: Largest ratio of a baseline's slowest to its fastest per-round median on an unloaded
#: machine (the read pass repeats within a few per cent there; another process's burst
#: doubles it).
BASELINE_SPREAD = 1.5

#: Windows shorter than this (seconds) carry no load figure of their own (a row made from the
#: same timings as the row before it shares that row's record).
MIN_WINDOW_S = 0.05


def _cpu_ticks():
    """(busy clock ticks of the whole machine, of this process and its waited-for children),
    or None where ``/proc`` cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            vals = [int(v) for v in f.readline().split()[1:9]]
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # after the command name: field 3 (state) first; utime, stime, cutime, cstime are
        # fields 14-17
        own = sum(int(v) for v in fields[11:15])
    except (OSError, ValueError, IndexError):
        return None
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait
    return sum(vals) - vals[3] - vals[4], own


@dataclass
class LoadWindows:
    """Accumulates the windows in which one row is timed (:meth:`start`, :meth:`stop`, any
    number of times) and reports their load (:meth:`record`)."""

    threads: int
    wall: float = 0.0
    others_ticks: float = 0.0
    known: bool = True
    _t0: float | None = None
    _c0: tuple | None = None

    def start(self) -> None:
        self._t0, self._c0 = time.perf_counter(), _cpu_ticks()

    def stop(self) -> None:
        c1, t1 = _cpu_ticks(), time.perf_counter()
        if self._t0 is None:
            return
        self.wall += t1 - self._t0
        if self._c0 is None or c1 is None:
            self.known = False
        else:
            self.others_ticks += max(0, (c1[0] - self._c0[0]) - (c1[1] - self._c0[1]))
        self._t0 = self._c0 = None

    def others_cores(self) -> float | None:
        """Mean busy cores of other processes over the windows (None: unknown)."""
        if not self.known or self.wall < MIN_WINDOW_S:
            return None
        return self.others_ticks / os.sysconf("SC_CLK_TCK") / self.wall

    def record(self, baseline_rounds=()) -> dict:
        """The row's load record: ``loadavg`` (1, 5, 15 min, now), ``others_cores``,
        ``cores``, ``threads``, ``window_s``, and ``baseline_spread`` (slowest over fastest
        per-round median of the baseline, where given)."""
        others = self.others_cores()
        rec = {
            "loadavg": [round(x, 2) for x in _loadavg()],
            "others_cores": None if others is None else round(others, 3),
            "cores": os.cpu_count() or 1,
            "threads": int(self.threads),
            "window_s": round(self.wall, 3),
        }
        rounds = [float(x) for x in baseline_rounds]
        if rounds:
            rec["baseline_spread"] = round(max(rounds) / min(rounds), 3) if min(rounds) > 0 else None
        return rec


def _loadavg() -> tuple:
    try:
        return os.getloadavg()
    except OSError:  # pragma: no cover - not available on this platform
        return (float("nan"),) * 3


def load_flag(record: dict) -> str:
    """Why a row's timing is not a verdict (the module docstring's rule), or ``""``."""
    reasons = []
    others = record.get("others_cores")
    free = max(0, record["cores"] - record["threads"])
    if others is not None and others > free + OTHERS_MARGIN:
        reasons.append(
            f"other processes used {others:.2f} cores (> {free} free + {OTHERS_MARGIN:g}; "
            f"load average {record['loadavg'][0]:.2f} on {record['cores']} cores)"
        )
    spread = record.get("baseline_spread")
    if spread is not None and spread > BASELINE_SPREAD:
        reasons.append(f"baseline's round medians {spread:.2f}x apart (> {BASELINE_SPREAD:g})")
    return "; ".join(reasons)


def load_text(record: dict) -> str:
    """The load record in a few words, for the measured column."""
    others = record.get("others_cores")
    others = "?" if others is None else f"{others:.2f}"
    return f"load {record['loadavg'][0]:.1f}, others {others} cores, {record['threads']} thr"
