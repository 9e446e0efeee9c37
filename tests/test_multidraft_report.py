"""The report's trees section on the shipped real trees: the k-draft frontier and the tree budgets."""

from __future__ import annotations

import numpy as np

from cactus_theory.report import TREE_BUDGET, TREE_FRONTIER_EPS, compute_report, format_report


def test_trees_section_runs_and_states_what_is_true():
    rep = compute_report(["trees"])
    text = format_report(rep, "text")
    assert "Many drafts and trees" in text
    front = rep.table("trees/frontier").rows
    F = np.array([[r[f"F_{e:g}"] for e in TREE_FRONTIER_EPS] for r in front])
    # k = 1 is the single-draft frontier: two exact solvers, float resolution of the acceptance
    assert front[0]["k"] == 1 and front[0]["single_draft_max_gap"] <= 1e-12
    assert np.all(np.diff(F, axis=0) >= -1e-12) and np.all(np.diff(F, axis=1) >= -1e-12)  # rounding
    rows = {r["verifier"]: r for r in rep.table("trees/budget").rows}
    assert rows["optimal"]["spend"] == 0.0 and rows["optimal"]["gain"] == 0.0
    # traversal (top-k children: one draw) and RRS without replacement are lossless and optimal
    # for a deterministic set; the family's DP and enumeration agree to 1e-12
    assert abs(rows["traversal"]["gain"]) <= 1e-12 and abs(rows["rrs-without-replacement"]["gain"]) <= 1e-12
    for name in ("optimal-budget", "optimal-multiplier"):
        assert 0 < rows[name]["spend"] <= TREE_BUDGET * (1 + 1e-12)
        assert rows[name]["gain"] > 0
