"""ct.audit and ``cactus-theory audit``: every rule calibrated to one true emitted divergence.

Checked: the calibrated rules' emitted divergence equals the target (recomputed independently
from the exact emitted law), the EOS shift against a hand computation on a 3-token example,
the knob bisection against a closed form, the dumps' EOS convention, the CLI on every shipped
dump with --json, and bad input (the figure: tests/figures/test_figures_audit.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.analysis import calibrate_knob
from cactus_theory.analysis._knob import KNOB_RTOL
from cactus_theory.analysis.one_step import emitted_distribution, make_plan
from cactus_theory.cli import main
from cactus_theory.divergences import get_divergence
from cactus_theory.inputs import _shipped_pair_names
from cactus_theory.logits import eos_token_id, load_dump, shipped_dumps
from cactus_theory.simulate._audit_corpus import corpus_from_dump
from cactus_theory.simulate.audit import format_audit

#: Positions per shipped dump in these tests (whole trajectories: one of 48 tokens or more).
POSITIONS = 40
#: Rules of the quick audits: one spike, one target, one decision, the lossless reference.
QUICK = ["cactus-taylor", "mentored", "fuzzy", "sps"]
#: Rules of the command-line runs on every dump.
CLI_RULES = ["cactus-taylor", "sps"]


def _rows(n=60, V=8, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(V, 0.7), size=n)
    p = 0.6 * q + 0.4 * rng.dirichlet(np.full(V, 0.7), size=n)
    return q, p


def test_calibrate_knob_meets_a_closed_form():
    # s(x) = x^2 on [0, inf): the root of x^2 = 0.3 is sqrt(0.3)
    cal = calibrate_knob(lambda x: x * x, 0.0, math.inf, 0.3)
    assert cal.status == "calibrated"
    assert 0.3 * (1 - KNOB_RTOL) <= cal.achieved <= 0.3
    assert cal.value == pytest.approx(math.sqrt(0.3), rel=KNOB_RTOL)  # |dx/x| = |ds/s| / 2 <= rtol
    # a decreasing path from +inf (SpS at lam = inf): s = 1/x reaches 0.25 at x = 4
    cal = calibrate_knob(
        lambda x: 0.0 if math.isinf(x) else 1.0 / x if x > 0 else math.inf, math.inf, 0.0, 0.25
    )
    assert cal.status == "calibrated" and cal.value == pytest.approx(4.0, rel=2 * KNOB_RTOL)
    # an integer step: s jumps from 0 to 1 between 2 and 3
    cal = calibrate_knob(lambda x: float(x >= 3), 1, math.inf, 0.5, integer=True)
    assert (cal.status, cal.value, cal.next_value) == ("step", 2, 3)
    assert calibrate_knob(lambda x: x, 0.0, 1.0, 2.0).status == "range-end"
    assert calibrate_knob(lambda x: x + 1.0, 0.0, 1.0, 0.5).status == "above"


def test_each_calibrated_rule_emits_the_target_exactly():
    q, p = _rows()
    eps = 0.05
    res = ct.audit(q, p, eps=eps, rules=["cactus-taylor", "cactus-exact", "mentored", "interpolation", "sps"])
    kl = get_divergence("kl")
    calibrated = [r for r in res.table if r["status"] == "calibrated"]
    assert {r["rule"] for r in calibrated} >= {"cactus-taylor", "cactus-exact", "mentored", "interpolation"}
    for r in calibrated:
        # independent recomputation: the rule at the reported knobs, its exact emitted law
        h = emitted_distribution(make_plan(ct.get_rule(r["rule"], **r["knobs"]), q, p))
        got = float(np.mean(kl(h, q)))
        # calibrate_knob stops within KNOB_RTOL * eps below the target; 1e-12 covers rounding
        assert eps * (1 - KNOB_RTOL) - 1e-12 <= got <= eps + 1e-12, r["rule"]
        assert r["emitted_kl"] == pytest.approx(got, rel=1e-9, abs=1e-15)
        assert r["relaxed_acceptance"] == pytest.approx(r["acceptance"] - res.sps_acceptance)
        assert r["frontier_gap"] >= -1e-9  # Theorem 1: no rule beats the frontier at its own KL
    assert res.row("sps")["status"] == "reference"


def test_sequence_calibration_meets_the_chain_bound():
    from cactus_theory.simulate._chain import Trajectory
    from cactus_theory.simulate._exact import exact_chain, sequence_divergence

    q, p = _rows(40)
    res = ct.audit(q, p, eps=0.04, rules=["cactus-exact"], per="sequence", sequence_m=3, draft_lengths=(3,))
    r = res.row("cactus-exact")
    assert r["status"] == "calibrated"
    chain = exact_chain(ct.get_rule("cactus-exact", **r["knobs"]), Trajectory(q, p), 3)
    upper = sequence_divergence(chain).kl_upper / q.shape[0]
    assert 0.04 * (1 - KNOB_RTOL) - 1e-12 <= upper <= 0.04 + 1e-12  # as above
    assert r["sequence_kl_upper"] == pytest.approx(upper, rel=1e-12)
    assert r["al_3"] == pytest.approx(
        ct.exact_chain(ct.get_rule("cactus-exact", **r["knobs"]), (q, p), 3).metrics["al_paper"]
    )


def test_eos_shift_on_a_hand_checked_example():
    # V = 3, EOS = token 2. Interpolation h = (1 - a) q + a p emits h exactly (target rule):
    # h(EOS) - q(EOS) = a (p_2 - q_2). Rows: q = (.5,.3,.2), p = (.2,.2,.6) and q = (.6,.3,.1),
    # p = (.3,.3,.4): shifts a * 0.4 and a * 0.3.
    q = np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])
    p = np.array([[0.2, 0.2, 0.6], [0.3, 0.3, 0.4]])
    res = ct.audit(q, p, eps=0.02, rules=["interpolation"], eos_token_id=2, draft_lengths=(1,))
    r = res.row("interpolation")
    a = r["knobs"]["alpha"]
    assert r["status"] == "calibrated" and 0 < a < 1
    np.testing.assert_allclose(res.eos_shift["interpolation"], [0.4 * a, 0.3 * a], rtol=1e-12)
    assert r["eos_q"] == pytest.approx(0.15)
    assert r["eos_shift"] == pytest.approx(0.35 * a)
    # geometric stopping: ratio = mean q(EOS) / mean h(EOS) = 0.15 / (0.15 + 0.35 a)
    assert r["length_ratio"] == pytest.approx(0.15 / (0.15 + 0.35 * a))


def test_shipped_dumps_end_trajectories_with_their_eos_id():
    for f in shipped_dumps():
        d = load_dump(f)
        eos = eos_token_id(d.meta)
        assert eos is not None
        ends = [int(t.token_ids[-1]) for t in d.trajectories() if t.length < d.meta["new_tokens"]]
        assert ends and all(e == eos for e in ends), f.name  # every early stop is an EOS


def test_audit_on_a_dump_processed_and_raw():
    d = load_dump(shipped_dumps()[0])
    c = corpus_from_dump(d, max_positions=POSITIONS, eos_token_id=eos_token_id(d.meta))
    assert c.n_positions >= POSITIONS and c.eos is not None
    res = ct.audit(d, eps=0.1, rules=QUICK, max_positions=POSITIONS, draft_lengths=(2,))
    raw = ct.audit(d, eps=0.1, rules=QUICK, max_positions=POSITIONS, draft_lengths=(2,), rows="raw")
    assert res.eos_token_id == 2 and raw.rows_kind == "raw"
    for r in res.table + raw.table:
        assert r["status"] in ("calibrated", "step", "range-end", "above", "reference"), r
    # an EOS at a column outside the processed support has processed mass 0, so the shift is 0 there
    off = ~np.any(c.eos & (c.target_probs > 0), axis=-1)
    assert np.all(res.eos_shift["sps"] == 0.0) and np.all(np.abs(res.eos_shift["mentored"][off]) == 0.0)


@pytest.mark.parametrize("name", _shipped_pair_names())
def test_cli_audit_json_on_every_shipped_dump(name, capsys):
    rc = main(
        [
            "audit",
            "--input",
            name,
            "--positions",
            str(POSITIONS),
            "--rules",
            ",".join(CLI_RULES),
            "-m",
            "2",
            "--json",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["rule"] for r in data["table"]] == CLI_RULES
    assert data["eos_token_id"] == 2 and data["n_positions"] >= POSITIONS


def test_cli_audit_markdown_figure_and_errors(tmp_path, capsys):
    fig = tmp_path / "audit.pdf"
    rc = main(
        [
            "audit",
            "-i",
            "requant-4",
            "--positions",
            "40",
            "--rules",
            "sps,cactus-taylor",
            "-m",
            "1",
            "--figure",
            str(fig),
            "--markdown",
        ]
    )
    assert rc == 0 and fig.stat().st_size > 0
    assert "| cactus-taylor |" in capsys.readouterr().out
    for argv, word in (
        (["audit", "-i", "requant-4", "--eps", "-1"], "eps"),
        (["audit", "-i", "nope"], "source"),
        (["audit", "-i", "requant-4", "--rules", "nope"], "rules"),
        (["audit", "-i", "requant-4", "--per", "sequence", "--divergence", "js"], "divergence"),
        (["audit", "-i", "requant-4", "--figure", str(tmp_path / "x.svg")], "figure"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and word in err, err


def test_audit_bad_input_names_the_argument():
    q, p = _rows(4)
    for kw, word in (
        (dict(eps=-0.1), "eps"),
        (dict(eps=math.inf), "eps"),
        (dict(per="word"), "per"),
        (dict(rules=["nope"]), "rules"),
        (dict(rules=[]), "rules"),
        (dict(draft_lengths=(0,)), "draft_lengths"),
        (dict(eos_token_id=99), "eos_token_id"),
        (dict(tune={"mentored": "divergence"}, rules=["mentored"]), "tune"),
        (dict(tune={"mentored": "D"}, knobs={"mentored": {"D": 0.1}}, rules=["mentored"]), "tune"),
        (dict(rows="raw"), "rows"),
        (dict(max_positions=3), "max_positions"),
    ):
        with pytest.raises(ValueError, match=word):
            ct.audit(q, p, **kw)
    with pytest.raises(ValueError, match="draft_probs"):
        ct.audit(q)
    with pytest.raises(ValueError, match="target_probs"):
        ct.audit("no-such-recording")
    with pytest.raises(ValueError, match="draft_probs"):
        ct.audit("distilled", p)


def test_the_audit_prints_its_table_then_one_note_per_rule_not_calibrated():
    q, p = _rows(20)
    res = ct.audit(q, p, eps=0.05, rules=["cactus-taylor", "sps"], draft_lengths=(1,))
    assert res.notes() == ["sps: reference: lossless: emits q"]  # cactus-taylor: calibrated, no note
    text, md, csv = (format_audit(res, style) for style in ("text", "markdown", "csv"))
    assert text.splitlines()[0].startswith("[20 positions, V = 8; every rule at token kl = 0.05")
    assert text.splitlines()[-1] == "sps: reference: lossless: emits q"
    assert md.endswith("\n\n- sps: reference: lossless: emits q") and "| cactus-taylor |" in md
    assert csv.splitlines()[0].startswith("rule,knob,status,acceptance") and "lossless" not in csv
    with pytest.raises(ValueError, match="style"):
        format_audit(res, "html")


def test_the_audit_states_its_counting_conventions_and_they_hold():
    """The title says acceptance and AL_m count drafts only (no bonus token); on one pair
    repeated (SpS acceptance alpha = 0.7) AL_m is alpha (1 - alpha^m) / (1 - alpha), not that + 1."""
    from cactus_theory.simulate._audit_format import COUNTING

    q, p = np.tile([0.5, 0.3, 0.2], (400, 1)), np.tile([0.2, 0.5, 0.3], (400, 1))
    res = ct.audit(q, p, eps=0.05, rules=["sps"], draft_lengths=(1, 3))
    for style in ("text", "markdown"):
        assert COUNTING in format_audit(res, style).splitlines()[0]
    assert "bonus token not counted" in COUNTING
    row, alpha = res.row("sps"), 0.7
    assert row["acceptance"] == pytest.approx(alpha, abs=1e-12)
    for m in (1, 3):
        # the trajectory's last rounds are cut short at its end: an O(m / T) shortfall (0.007 at m = 3, T = 400)
        assert row[f"al_{m}"] == pytest.approx(alpha * (1 - alpha**m) / (1 - alpha), abs=0.01)


def test_folder_of_shards_matches_the_arrays(tmp_path, capsys):
    # the chunked audit (two shards, chunks of 7 rows) against the in-memory audit of the same rows
    q, p = _rows(30)
    for i, sl in enumerate((slice(0, 13), slice(13, 30))):
        np.savez(tmp_path / f"shard-{i}.npz", target_probs=q[sl], draft_probs=p[sl])
    names = ["cactus-exact", "mentored", "sps"]
    whole = ct.audit(q, p, eps=0.05, rules=names, draft_lengths=(1,))
    parts = ct.audit(str(tmp_path), eps=0.05, rules=names, chunk_rows=7)
    assert parts.n_positions == 30 and parts.draft_lengths == ()
    for name in names:
        a, b = whole.row(name), parts.row(name)
        assert a["status"] == b["status"] and a["knob"] == b["knob"], name
        for key in ("acceptance", "relaxed_acceptance", "emitted_kl", "emitted_tv"):
            # the same rows and knob; the chunked mean sums chunk by chunk: rounding only
            assert b[key] == pytest.approx(a[key], rel=1e-12, abs=1e-15), (name, key)
        # the frontier's root search stops within ~1e-9 of the root, differently per batch
        assert b["frontier_gap"] == pytest.approx(a["frontier_gap"], abs=1e-8), name
    assert main(["audit", "-i", str(tmp_path), "--rules", "sps", "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_positions"] == 30
    # a row source is read as stored, chunk by chunk: none of the options of rows in memory
    for kw, word in (
        (dict(per="sequence"), "per"),
        (dict(rows="raw"), "rows"),
        (dict(eos_token_id=1), "eos_token_id"),
        (dict(max_positions=10), "max_positions"),
    ):
        with pytest.raises(ValueError, match=word):
            ct.audit(str(tmp_path), **kw)
    with pytest.raises(ValueError, match="draft_probs"):
        ct.audit(str(tmp_path), p)


@pytest.mark.parametrize("name", ["smollm2-135m_distilled"])
def test_no_rule_above_the_audits_frontier_on_shipped_dumps(name):
    """Every registered rule of the default audit, on 40 positions of a shipped recording at
    eps = 0.1: the printed and drawn line (the corpus-mean frontier at eps) lies on or above
    every rule whose mean KL is within eps, and each row's corpus gap and per-position gap are
    >= 0. The mean of per-position frontiers at eps (the line the audit drew before) lies
    below the best calibrated rule there: rules spend a mean budget, so that line is not
    their yardstick. Slack 1e-9: the calibrations stop within float rounding of eps."""
    from cactus_theory.solvers._frontier import frontier

    d = load_dump(next(p for p in shipped_dumps() if name in str(p)))
    res = ct.audit(d, eps=0.1, max_positions=POSITIONS, draft_lengths=(2,))
    within = [r for r in res.table if r.get("emitted_kl", math.inf) <= 0.1]
    assert len(within) >= 5 and res.frontier_at_eps is not None
    for r in within:
        assert r["acceptance"] <= res.frontier_at_eps + 1e-9, r["rule"]
    for r in res.table:
        if "acceptance" in r:
            assert r["corpus_gap"] >= -1e-9 and r["frontier_gap"] >= -1e-9, r["rule"]
    c = corpus_from_dump(d, max_positions=POSITIONS, eos_token_id=eos_token_id(d.meta))
    per_position = float(frontier(c.target_probs, c.draft_probs, [0.1]).acceptance.mean())
    assert per_position < max(r["acceptance"] for r in within) - 1e-3
