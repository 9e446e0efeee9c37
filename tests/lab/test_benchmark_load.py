"""The benchmark's load record and the rule that flags a loaded timing (benchmarks/_load.py)."""

import subprocess
import sys
import time

from benchmarks._goals import GoalResult, goal
from benchmarks._load import BASELINE_SPREAD, OTHERS_MARGIN, LoadWindows, load_flag
from benchmarks._samplers import _Timed


def _record(others, cores=2, threads=2, spread=None):
    rec = {"loadavg": [1.0, 1.0, 1.0], "others_cores": others, "cores": cores, "threads": threads}
    if spread is not None:
        rec["baseline_spread"] = spread
    return rec


def test_flag_rule_at_its_edges():
    # 2 cores, 2 threads: no core left free, so a quarter of a core of others flags the row
    assert load_flag(_record(OTHERS_MARGIN)) == ""
    assert "other processes used" in load_flag(_record(OTHERS_MARGIN + 0.01))
    # 16 cores, 2 threads: 14 are free for the others
    assert load_flag(_record(14 + OTHERS_MARGIN, cores=16)) == ""
    assert load_flag(_record(14 + OTHERS_MARGIN + 0.01, cores=16))
    # the baseline's spread over rounds, alone
    assert load_flag(_record(0.0, spread=BASELINE_SPREAD)) == ""
    assert "baseline" in load_flag(_record(0.0, spread=BASELINE_SPREAD + 0.01))
    assert load_flag(_record(None)) == ""  # unknown busy cores: no flag from them


def test_a_flagged_goal_row_does_not_pass():
    flagged = goal("g / read pass", "1 ms", 1.0, "<= 3", True, True, "ok", _record(1.0))
    assert flagged.flag and not flagged.passed and "others 1.00 cores" in flagged.measured
    clean = goal("g / read pass", "1 ms", 1.0, "<= 3", True, True, "ok", _record(0.0))
    assert clean.flag == "" and clean.passed
    # a reported row keeps its verdict (its time is no goal) but records the flag
    reported = goal("r", "1 ms", 1.0, "reported", True, True, "ok", _record(1.0))
    assert reported.flag and reported.passed
    assert isinstance(flagged, GoalResult) and flagged.load["others_cores"] == 1.0


def test_windows_count_another_process_busy_cores():
    """A child spinning for the whole window (not waited for while it runs: another process)
    keeps at least one core busy whatever else runs; this process sleeps."""
    w = LoadWindows(threads=1)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<0.8: pass"]
    )
    time.sleep(0.1)
    w.start()
    time.sleep(0.5)
    w.stop()
    child.wait()
    rec = w.record()
    # a work-conserving scheduler runs the spinner whenever a core is free: >= ~1 core busy
    # in a 0.5 s window, less the clock tick's granularity (10 ms in 500 ms) and the start-up
    assert rec["others_cores"] is not None and rec["others_cores"] > 0.5, rec
    assert rec["threads"] == 1 and rec["window_s"] >= 0.5


def test_timed_rounds_flag_an_inconsistent_baseline():
    """A baseline whose round medians differ 5x (2 ms, then 10 ms) is flagged; ratios use every
    round's calls."""
    state = {"round": 0}
    item = _Timed(
        lambda: None,
        lambda: time.sleep(0.002 if state["round"] == 0 else 0.010),
        lambda t, t_ref, load: goal("x / read pass", "", t / t_ref, "<= 3", True, True, "ok", load),
        1,
    )
    item.time_round(3)
    state["round"] = 1
    item.time_round(3)
    row = item.row()
    assert len(item.ref_rounds) == 2 and len(item.t_ref) == len(item.t_fn) == 6
    assert row.load["baseline_spread"] > BASELINE_SPREAD and "baseline" in row.flag and not row.passed


def test_the_speed_page_states_the_rule_as_coded():
    """docs/speed.md's numbers of the rounds and the flag rule are the code's."""
    import pathlib

    from benchmarks._goals import SAMPLER_PAIRS

    text = " ".join((pathlib.Path(__file__).resolve().parents[2] / "docs" / "speed.md").read_text().split())
    assert f"timed in {SAMPLER_PAIRS} interleaved rounds" in text
    assert OTHERS_MARGIN == 0.25 and "plus a quarter of a core" in text
    assert f"more than {BASELINE_SPREAD:g} times as long in its slowest round" in text
