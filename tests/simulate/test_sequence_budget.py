"""The comparison of calibrations at one sequence-level KL per token
(``simulate/_sequence_budget.py``): every method at equal divergence, the pooled optimum
winning, AL from the exact chain, bad input, and its figure."""

import numpy as np
import pytest

from cactus_theory._report_sections import format_sequence_budget
from cactus_theory.simulate._chain import Trajectory
from cactus_theory.simulate._sequence_budget import METHODS, compare_sequence_budget
from cactus_theory.simulate._synthetic import synthetic_trajectory


@pytest.fixture(scope="module")
def comparison():
    rng = np.random.default_rng(0)
    trajs = [synthetic_trajectory("noisy_copy", 10, 12, rng, temperature=0.6, top_k=8) for _ in range(4)]
    return compare_sequence_budget(trajs, 0.1, draft_lengths=(2, 4), label="test")


def test_comparison_is_at_equal_divergence_and_the_pooled_optimum_wins(comparison):
    r = {row["method"]: row for row in comparison.rows()}
    assert list(r) == list(METHODS)
    for name, row in r.items():
        # every calibration keeps its feasible end: <= eps up to rounding (1e-9)
        assert row["kl_per_token"] <= 0.1 + 1e-9, name
    for name in (METHODS[0], METHODS[1], METHODS[2], METHODS[4]):
        # calibrated to the mean: global delta's Illinois refinement / level bisections (1e-3)
        assert r[name]["kl_per_token"] == pytest.approx(0.1, rel=1e-3), name
    for name in (METHODS[3], METHODS[5]):
        assert r[name]["kl_worst_trajectory"] <= 0.1 + 1e-9  # T eps on every trajectory
    pooled = r[METHODS[4]]["acceptance"]
    for name, row in r.items():
        # Theorem 1 + Lagrangian sufficiency: nothing within N eps accepts more (1e-9 rounding)
        assert row["acceptance"] <= pooled + 1e-9, name
    assert r[METHODS[3]]["acceptance"] >= r[METHODS[2]]["acceptance"] - 1e-9  # per-trajectory optimum
    d = comparison.to_dict()
    assert d["positions"] == 40 and len(d["rows"]) == len(METHODS) and "al_4" in d["rows"][0]
    text = format_sequence_budget(comparison)
    assert all(m in text for m in METHODS) and "AL_4" in text


def test_comparison_al_is_exact_chain(comparison):
    # AL_m grows with m and stays below m
    al = comparison.al
    assert np.all(np.diff(al, axis=1) >= -1e-12) and np.all(al[:, 0] <= 2) and np.all(al[:, 1] <= 4)


def test_comparison_bad_input():
    t = Trajectory(np.full((3, 2), 0.5), np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="trajectories"):
        compare_sequence_budget([t], 0.1)
    with pytest.raises(ValueError, match="eps"):
        compare_sequence_budget([t, t], 0.0)


def test_figure(comparison):
    import matplotlib
    from matplotlib.figure import Figure

    from cactus_theory.figures._sequence_budget import plot_sequence_budget

    fig = plot_sequence_budget(comparison)
    assert isinstance(fig, Figure) and len(fig.axes[0].lines) == len(METHODS)
    fig2 = Figure()
    ax = fig2.add_subplot()
    assert plot_sequence_budget(comparison, ax=ax) is fig2
    assert "$" in ax.get_xlabel()
    assert matplotlib.get_backend()  # untouched: the function never calls matplotlib.use
