"""``cactus-theory plan`` end to end: the commands of docs/planning.md, a recorder dump, bad input.

Each command well under 2 s on an unloaded machine (100 positions, m <= 3); ``--measure`` loads
the real model and is marked ``model``.
"""

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "planning.md"


def _doc_commands():
    block = re.search(r"## The command\n\n```\n(.*?)```", DOC.read_text(), re.S).group(1)
    return [shlex.split(line)[1:] for line in block.strip().splitlines()]


def _files(tmp_path):
    """The files the documented commands name: a profile and a timing file."""
    ct.AcceptanceProfile((0.7, 0.45, 0.3)).write(tmp_path / "profile.json")
    ct.CostModel(0.1, (1.0, 1.1, 1.2, 1.3)).write(tmp_path / "costs.json")


def test_documented_commands_run(tmp_path, capsys, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    ran = 0
    for argv in _doc_commands():
        if "--measure" in argv:
            continue  # the real model: test_measure_command below
        argv = [str(ROOT / a) if a.startswith("cactus_theory/") else a for a in argv]
        assert main(argv + ["--no-progress"]) == 0, argv
        out = capsys.readouterr().out
        if "--json" in argv:
            data = json.loads(out)
            assert data["best"]["m"] in data["draft_lengths"] and data["budget"]["eps"] == 0.05
        elif "--csv" in argv:
            assert out.splitlines()[0].startswith("rule,knob,m,accepted_length,tokens_per_call")
        else:
            assert "best:" in out and "vLLM (" in out
        ran += 1
    assert ran == 4


def test_recorder_dump_plan_and_profile(tmp_path, capsys):
    # a vLLM recorder dump (the plugin's Recorder, as in the engine): 12 rounds of 2 drafts
    from cactus_theory.integrations.vllm._counters import compare_counters, recorded_rounds
    from cactus_theory.integrations.vllm._recorder import Recorder

    rng = np.random.default_rng(0)
    rec = Recorder(tmp_path / "rows", max_bytes=10**8, rows_per_shard=8)
    B, k, V = 3, 2, 16
    for _ in range(4):
        q = rng.dirichlet(np.full(V, 0.5), size=B * k)
        p = rng.dirichlet(np.full(V, 0.5), size=B * k)
        ids = rng.integers(0, V, size=B * k)
        out = -np.ones((B, k + 1), dtype=np.int32)
        for b, a in enumerate(rng.integers(0, k + 1, size=B)):
            out[b, : a + 1] = 1
        rec.record(q, p, q, p, ids, [k] * B, out, np.ones(B * k, dtype=bool))
    rec.flush()
    folder = str(tmp_path / "rows")
    assert main(["plan", "-i", folder, "--draft-cost", "0.1", "--rules", "sps", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "recorded rounds" and data["draft_lengths"] == [1, 2]
    # the plan's exact survival is the one the counters' comparison computes (another code path)
    rounds = recorded_rounds(folder)
    cmp = compare_counters(rounds, "sps", rounds.engine_counts(2))
    np.testing.assert_allclose(
        np.array(data["table"][0]["tokens_per_call"]) - 1, np.cumsum(cmp.expected), rtol=1e-12
    )
    prof = ct.AcceptanceProfile.from_recorder(folder)
    assert prof.mean_accept_length == pytest.approx(1 + rounds.num_accepted.mean())


@pytest.mark.parametrize(
    "argv, word",
    [
        (["-i", "nope", "--draft-cost", "0.1"], "recording"),
        (["-i", "distilled"], "draft-cost"),
        (["-i", "distilled", "--draft-cost", "0.1", "--eps", "-1"], "eps"),
        (["-i", "distilled", "--draft-cost", "0.1", "--knob", "delta=1"], "knob"),
        (["-i", "distilled", "--verify-costs", "1,2"], "verify-costs"),
        (["-i", "distilled", "--draft-cost", "0.1", "--verify-costs", "1,x"], "verify-costs"),
        (["-i", "distilled", "--draft-cost", "0.1", "--figure", "x.svg"], "figure"),
        (["-i", "distilled", "--draft-cost", "0.1", "-m", "0"], "m-max"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, word, capsys):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("cactus-theory plan: error:") and word in err


def test_figure_and_profile_out(tmp_path, capsys):
    fig, prof = tmp_path / "plan.png", tmp_path / "p.json"
    argv = [
        "plan",
        "-i",
        "distilled",
        "--rules",
        "sps",
        "--draft-cost",
        "0.1",
        "-m",
        "2",
        "--positions",
        "48",
        "--bootstrap",
        "0",
        "--figure",
        str(fig),
        "--profile-out",
        str(prof),
        "--no-progress",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    back = ct.AcceptanceProfile.read(prof)
    assert back.num_speculative_tokens == 2 and back.check_identity()["passed"]


@pytest.mark.model
def test_measure_command(tmp_path, capsys):
    costs = tmp_path / "costs.json"
    argv = [
        "plan",
        "-i",
        "distilled",
        "--measure",
        "--drafter",
        "distilled",
        "-m",
        "1",
        "--rules",
        "sps",
        "--positions",
        "48",
        "--bootstrap",
        "0",
        "--measure-repeats",
        "1",
        "--cost-out",
        str(costs),
        "--no-progress",
    ]
    assert main(argv) == 0
    model = ct.CostModel.read(costs)
    assert model.unit == "seconds" and len(model.verify_costs) == 2 and model.draft_cost > 0
    assert model.load["before"]["cpus"] >= 1


SHIPPED = sorted((ROOT / "cactus_theory" / "data" / "real").glob("*.npz")) + sorted(
    (ROOT / "cactus_theory" / "data" / "real" / "decode").glob("*.npz")
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_plan_runs_on_every_shipped_recording(path, capsys):
    argv = [
        "plan",
        "-i",
        str(path),
        "--rules",
        "sps",
        "--draft-cost",
        "0.1",
        "-m",
        "2",
        "--positions",
        "48",
        "--bootstrap",
        "20",
        "--json",
        "--no-progress",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["best"]["m"] in data["draft_lengths"]
    assert all(1 <= e <= 1 + m for e, m in zip(data["table"][0]["tokens_per_call"], data["draft_lengths"]))


@pytest.mark.parametrize("sub", ["trees", "full_vocab"])
def test_recordings_without_chains_are_refused_in_one_line(sub, capsys):
    path = sorted((ROOT / "cactus_theory" / "data" / "real" / sub).glob("*.npz"))[0]
    assert main(["plan", "-i", str(path), "--draft-cost", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recording: not a dump of chain positions" in err
