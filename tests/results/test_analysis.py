"""The analysis layer's result types (``results/_analysis.py``), built by hand with known numbers:
the tree outcome law's summaries, each type's status, and strict JSON (non-finite numbers as
the strings "nan", "inf", "-inf")."""

import dataclasses
import json
import math

import numpy as np
import pytest

from cactus_theory.results import (
    GlobalDelta,
    KnobCalibration,
    OneStepResult,
    TreeBudgetResult,
    TreeOutcomes,
)


def _strict(result):
    """to_dict() through a JSON parser that refuses NaN and Infinity."""

    def refuse(name):
        raise AssertionError(f"non-JSON constant {name}")

    return json.loads(json.dumps(result.to_dict(), allow_nan=False), parse_constant=refuse)


def test_tree_outcomes_summaries_by_hand():
    """Emitted sequences (1 accepted draft = a 2-token tuple, ...) with dyadic probabilities:
    E[accepted] = 0 * 1/2 + 1 * 1/4 + 2 * 1/4 = 3/4, P(at least one) = 1/2, and the first
    token's law sums the sequences by their first token (all exact in float64)."""
    res = TreeOutcomes(
        emitted={(0,): 0.375, (2,): 0.125, (1, 2): 0.25, (1, 0, 3): 0.125, (3, 3, 0): 0.125},
        length_probs=np.array([0.5, 0.25, 0.25]),
    )
    assert res.expected_accepted == 0.75
    assert res.acceptance == 0.5
    assert res.first_token_law(5).tolist() == [0.375, 0.375, 0.125, 0.125, 0.0]
    assert res.status == "ok" and res.message == ""
    with pytest.raises(AttributeError, match="'TreeOutcomes' object has no attribute 'nope'"):
        res.nope  # noqa: B018


def test_results_with_a_status_report_it_and_export_it():
    g = GlobalDelta(
        delta=2.0,
        statistic="mean",
        value=0.0625,
        divergences=np.array([0.0625, 0.0]),
        acceptance=np.array([0.75, 1.0]),
    )
    assert g.status == "calibrated" and _strict(g)["status"] == "calibrated"
    saturated = dataclasses.replace(g, status="saturated")
    assert _strict(saturated)["status"] == "saturated"
    k = KnobCalibration(
        value=0.5, achieved=0.25, status="step", next_value=0.75, next_achieved=math.inf, evaluations=7
    )
    assert _strict(k) == {
        "value": 0.5,
        "achieved": 0.25,
        "status": "step",
        "next_value": 0.75,
        "next_achieved": "inf",
        "evaluations": 7,
    }
    t = TreeBudgetResult(
        verifier="rrs",
        knob="lam",
        value=1.5,
        spend=0.125,
        expected_accepted=1.25,
        divergence="kl",
        status="range-end",
    )
    assert _strict(t)["status"] == "range-end" and t.message == ""


def test_one_step_result_exports_arrays_as_lists_and_infinities_as_strings():
    res = OneStepResult(
        rule="cactus-taylor(delta=0.5)",
        accept_probs=np.array([[1.0, 0.5]]),
        acceptance=np.array([0.75]),
        emitted=None,
        divergences={"kl": np.array([math.inf]), "tv": np.array([0.25])},
    )
    assert _strict(res) == {
        "rule": "cactus-taylor(delta=0.5)",
        "accept_probs": [[1.0, 0.5]],
        "acceptance": [0.75],
        "emitted": None,
        "divergences": {"kl": ["inf"], "tv": [0.25]},
    }
    assert res.status == "ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.rule = "sps"
