"""The front door's result types (``results/_front.py``), built by hand with known numbers:
their table rows, one-line summaries, row look-up and strict JSON (non-finite numbers as the
strings "nan", "inf", "-inf"; fields kept internal are not exported)."""

import json
import math

import numpy as np
import pytest

from cactus_theory.results import CalibrationResult, ChainResult, FrontierResult, RuleTable


def _strict(result):
    """to_dict() through a JSON parser that refuses NaN and Infinity."""

    def refuse(name):
        raise AssertionError(f"non-JSON constant {name}")

    return json.loads(json.dumps(result.to_dict(), allow_nan=False), parse_constant=refuse)


def _frontier():
    return FrontierResult(
        divergence="kl",
        eps=np.array([0.0, 0.25, 0.5]),
        acceptance=np.array([0.5, 0.75, 1.0]),
        emitted_divergence=np.array([0.0, 0.25, 0.375]),
        sps_acceptance=0.5,
        saturation_eps=math.inf,
        n_positions=2,
        per_position_acceptance=np.array([[0.5, 0.75, 1.0], [0.5, 0.75, 1.0]]),
    )


def test_frontier_rows_summary_and_json():
    res = _frontier()
    assert res.rows() == [
        {"divergence": "kl", "eps": 0.0, "acceptance": 0.5, "emitted_divergence": 0.0},
        {"divergence": "kl", "eps": 0.25, "acceptance": 0.75, "emitted_divergence": 0.25},
        {"divergence": "kl", "eps": 0.5, "acceptance": 1.0, "emitted_divergence": 0.375},
    ]
    assert repr(res) == (
        "FrontierResult(kl, 3 eps in [0, 0.5], 2 position(s): acceptance 0.5 .. 1, SpS 0.5, "
        "saturates at eps=inf)"
    )
    d = _strict(res)
    assert d["saturation_eps"] == "inf" and d["eps"] == [0.0, 0.25, 0.5]
    assert res.status == "ok" and res.message == ""


def _calibration(**kw):
    fields = dict(
        rule="cactus-taylor",
        divergence="kl",
        eps=0.125,
        delta=np.array([0.5, 2.0, 4.0]),
        emitted_divergence=np.array([0.125, 0.0625, 0.0]),
        acceptance=np.array([0.75, 0.5, 1.0]),
        saturated=np.array([False, True, True]),
        n_positions=3,
    )
    return CalibrationResult(**{**fields, **kw})


def test_calibration_rows_and_each_summary_form():
    per_position = _calibration()
    rows = per_position.rows()
    assert [r["position"] for r in rows] == [0, 1, 2]
    assert rows[1] == {
        "position": 1,
        "rule": "cactus-taylor",
        "divergence": "kl",
        "eps": 0.125,
        "delta": 2.0,
        "emitted_divergence": 0.0625,
        "acceptance": 0.5,
        "saturated": True,
    }
    assert repr(per_position) == (
        "CalibrationResult(cactus-taylor, kl, eps=0.125: 3 positions: median delta=2, "
        "mean emitted=0.0625, mean acceptance=0.75, 2 saturated)"
    )
    assert _strict(per_position)["delta"] == [0.5, 2.0, 4.0]
    one = _calibration(delta=0.5, emitted_divergence=0.125, acceptance=0.75, saturated=False, n_positions=1)
    assert (
        repr(one)
        == "CalibrationResult(cactus-taylor, kl, eps=0.125: delta=0.5, emitted=0.125, acceptance=0.75)"
    )
    corpus = _calibration(
        delta=4.0,
        emitted_divergence=0.0625,
        acceptance=0.875,
        saturated=True,
        per="corpus",
        status="saturated",
    )
    assert repr(corpus) == (
        "CalibrationResult(cactus-taylor, kl, eps=0.125: one delta for 3 positions: delta=4, "
        "mean emitted=0.0625, mean acceptance=0.875, saturated)"
    )
    assert corpus.status == "saturated" and _strict(corpus)["status"] == "saturated"


def _rule_table():
    return RuleTable(
        table=(
            {"rule": "sps", "knobs": {}, "acceptance": 0.5, "emitted_kl": 0.0},
            {"rule": "cactus-taylor", "knobs": {"delta": 0.75}, "acceptance": 0.625, "emitted_kl": math.inf},
        ),
        delta=0.75,
        n_positions=4,
    )


def test_rule_table_rows_lookup_and_summary():
    t = _rule_table()
    assert t.rows() == [
        {"rule": "sps", "knobs": "", "acceptance": 0.5, "emitted_kl": 0.0},
        {"rule": "cactus-taylor", "knobs": "delta=0.75", "acceptance": 0.625, "emitted_kl": math.inf},
    ]
    row = t.row("cactus-taylor")
    assert row == t.table[1] and row is not t.table[1]  # a copy: the table stays as it was
    with pytest.raises(ValueError, match="^rule: 'nope' is not in the table"):
        t.row("nope")
    assert repr(t) == "RuleTable(2 rules, 4 position(s), delta=0.75: highest acceptance cactus-taylor 0.625)"
    assert _strict(t)["table"][1]["emitted_kl"] == "inf"


def test_chain_rows_summary_and_its_dynamic_programme_kept_internal():
    metrics = {
        "al_paper": 1.5,
        "tokens_per_call": 2.5,
        "prefix_acceptance_rate": 0.75,
        "rejected_per_token": 0.2,
    }
    res = ChainResult(
        rule="sps",
        m=2,
        length=10,
        metrics=metrics,
        pos_marginal=[0.75, 0.5],
        pos_conditional=[0.75, 2 / 3],
        hist=[0.25, 0.25, 0.5],
        sequence_kl_upper=0.0,
        chain=object(),
    )
    assert res.rows() == [{"rule": "sps", "m": 2, "metric": k, "value": v} for k, v in metrics.items()]
    assert (
        repr(res)
        == "ChainResult(sps, m=2, T=10: AL=1.5, tokens/call=2.5, prefix acceptance=0.75, sequence KL <= 0)"
    )
    assert "chain" not in _strict(res)
