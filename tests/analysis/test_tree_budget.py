"""The tree-budget calibrations say how their knob's search ended (TreeBudgetResult.status)."""

import warnings

import pytest

from cactus_theory.analysis.tree_budget import tree_constant_budget, tree_sequence_budget
from cactus_theory.simulate._trees import synthetic_tree


@pytest.fixture(scope="module")
def tree():
    return synthetic_tree("dirichlet", (2, 2), vocab_size=5, rng=1, drafting="top_k", concentration=0.7)


@pytest.mark.parametrize("calibrate", [tree_sequence_budget, tree_constant_budget])
def test_status_of_a_binding_and_a_slack_budget(tree, calibrate):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        met = calibrate(tree, 0.05)
        slack = calibrate(tree, 1e9)  # more than any knob value spends
    # a binding budget is met from below within the calibration's relative tolerance (1e-6)
    assert met.status == "calibrated" and 0.05 * (1 - 1e-6) <= met.spend <= 0.05
    assert slack.status == "range-end" and slack.spend < 1e9
