"""``cactus-theory benchmark``, the lab's command (benchmarks/command.py, plugged into the
command line by pyproject.toml's entry point): the quick run end to end through ``main([...])``
with ``--json`` parsed back, and bad flags exiting 2 with one line. Timings are not asserted."""

import pytest
from cli_run import run, run_json
from rule_configs import FUSED_SHAPE, QUICK_GROUP
from rule_configs import QUICK_RULES as FUSED_QUICK_RULES


@pytest.mark.xdist_group(QUICK_GROUP)
def test_benchmark_json(capsys):
    """The quick run through the command line: every goal with its check, and the samplers'
    rows checked against the full plan on the same inputs (each accept path the quick rules
    take, fused and eager, and the recovery weights; the token cascade's other branch; the
    entry validation, eager and fused). Its timings are not asserted. One sampler thread, the
    fused tests' own, at their shape: in the test run the quick rules' kernels are those of
    samplers/test_fused.py (the same xdist group, one compile for both)."""
    from benchmarks.run import QUICK_RULES, QUICK_SAMPLER_SHAPE

    # the fused tests' configurations of this xdist group (rule_configs) are the benchmark's
    assert QUICK_SAMPLER_SHAPE == FUSED_SHAPE and QUICK_RULES == FUSED_QUICK_RULES
    data = run_json(
        capsys, "benchmark", "--repeats", "1", "--quick", "--threads", "1", "--sections", "samplers"
    )
    assert data["quick"] is True and data["repeats"] == 1
    assert data["environment"]["sampler_threads"] == 1
    goals = data["goals"]
    assert goals and all(isinstance(g["passed"], bool) and g["check"] for g in goals)
    shape = "[{},{},{}]".format(*QUICK_SAMPLER_SHAPE)
    samplers = [g for g in goals if g["goal"].startswith("sampler ")]
    assert samplers and all(shape in g["goal"] for g in samplers)
    checks = [
        g
        for g in samplers
        if "read pass" in g["goal"] and "validation" not in g["goal"] and "fused, " not in g["goal"]
    ]
    assert len(checks) == 2 * len(QUICK_RULES)  # each rule fused (the goal) and eager
    assert {g["goal"].split()[1] for g in checks} == set(QUICK_RULES)
    for g in checks:
        assert g["check"].startswith("ok") and "recovery" in g["check"], g
    # at the smoke shape the speed targets are the full run's: the rows pass on their checks
    assert sorted(g["target"] for g in checks) == ["<= 3 (full run)"] * 5 + ["reported"] * 5
    assert all(g["passed"] for g in checks)
    # the token cascade's other branch (its full masked sum), reported and checked
    other = [g for g in samplers if "fused, " in g["goal"]]
    assert [g["goal"].split(" [")[0] for g in other] == ["sampler cascade-token-v3 fused, alpha 0.999"]
    assert other[0]["check"].startswith("ok") and other[0]["target"] == "reported"
    vals = [g for g in samplers if "validation" in g["goal"]]
    assert len(vals) == 2  # eager and fused
    assert all(v["check"].startswith("ok") and v["target"] == "reported" for v in vals)
    ratio = [g for g in samplers if g["goal"].startswith("sampler exact-kl / taylor")]
    assert len(ratio) == 2 and all(g["target"] == "<= 1.5 (full run)" for g in ratio)
    assert all(g["check"].startswith("ok") for g in goals), [g for g in goals if "FAILED" in g["check"]]
    assert not [g for g in goals if not g["goal"].startswith("sampler ")]  # the one section asked for


def test_benchmark_json_other_sections(capsys):
    """The quick run's other sections (no compiled kernel: on any worker): each present, every
    check passed (the spike, the emitted distributions, torch against numpy, the frontier
    against cvxpy, the chunked analysis)."""
    from benchmarks.run import SECTIONS

    others = [s for s in SECTIONS if s != "samplers"]
    data = run_json(capsys, "benchmark", "--repeats", "1", "--quick", "--sections", ",".join(others))
    goals = data["goals"]
    assert goals and not [g for g in goals if g["goal"].startswith("sampler ")]
    assert all(isinstance(g["passed"], bool) and g["check"] for g in goals)
    assert all(g["check"].startswith("ok") for g in goals), [g for g in goals if "FAILED" in g["check"]]
    for word in ("spike", "emitted", "analysis", "frontier", "scale"):
        assert any(word in g["goal"] for g in goals), (word, [g["goal"] for g in goals])


@pytest.mark.parametrize(
    "argv,name",
    [
        (["--repeats", "0"], "repeats"),
        (["--threads", "0"], "threads"),
        (["--sections", "samplers,nope"], "sections"),
    ],
)
def test_bad_flags_exit_2_with_one_line(argv, name, capsys):
    status, out, err = run(capsys, "benchmark", *argv)
    assert status == 2 and out == ""
    assert len(err) == 1, err
    assert name in err[0] and "error" in err[0]
