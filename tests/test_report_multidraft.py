"""The report's trees section on the shipped real trees: the k-draft frontier and the tree budgets."""

from __future__ import annotations

import numpy as np

from cactus_theory.report import _TREE_BUDGET, _TREE_FRONTIER_EPS, compute_report, format_report


def test_trees_section_runs_and_states_what_is_true():
    rep = compute_report(["trees"])
    text = format_report(rep, "text")
    assert "Many drafts and trees" in text
    front = rep.table("trees/frontier").rows
    F = np.array([[r[f"F_{e:g}"] for e in _TREE_FRONTIER_EPS] for r in front])
    # k = 1 is the single-draft frontier: two exact solvers, float resolution of the acceptance
    assert front[0]["k"] == 1 and front[0]["single_draft_max_gap"] <= 1e-12
    assert np.all(np.diff(F, axis=0) >= -1e-12) and np.all(np.diff(F, axis=1) >= -1e-12)  # rounding
    rows = {r["verifier"]: r for r in rep.table("trees/budget").rows}
    assert rows["optimal"]["spend"] == 0.0 and rows["optimal"]["gain"] == 0.0
    # traversal (top-k children: one draw) and RRS without replacement are lossless and optimal
    # for a deterministic set; the family's DP and enumeration agree to 1e-12
    assert abs(rows["traversal"]["gain"]) <= 1e-12 and abs(rows["rrs-without-replacement"]["gain"]) <= 1e-12
    for name in ("optimal-budget", "optimal-multiplier"):
        assert 0 < rows[name]["spend"] <= _TREE_BUDGET * (1 + 1e-12)
        assert rows[name]["gain"] > 0
    # the chain of top-1 drafts is a subtree whose nodes accept q_u(x) <= q_u(S_u) losslessly
    chain = rows["top-1 chain: SpS"]
    assert (
        chain["spend"] == 0.0 and chain["expected_accepted"] <= rows["optimal"]["expected_accepted"] + 1e-12
    )
    assert rows["top-1 chain: Cactus (exact)"]["spend"] <= _TREE_BUDGET * (1 + 1e-12)


def test_multidraft_figures_record_their_verifiers_and_keep_legends_short():
    """Legends hold at most 8 entries; every curve given is drawn with its label (none dropped)."""
    import matplotlib

    matplotlib.use("Agg")
    from cactus_theory.figures import figure_multidraft_frontier, figure_tree_budget
    from cactus_theory.figures._notes import rule_record
    from cactus_theory.logits.tree_dump import load_tree_dump

    rng = np.random.default_rng(0)
    q, p = rng.dirichlet(np.ones(16)), rng.dirichlet(np.ones(16))
    figs = [
        figure_multidraft_frontier(q, p, ks=(1, 2, 4)),
        figure_tree_budget(load_tree_dump().trees[:2], (0.05,)),
    ]
    for fig in figs:
        fig.canvas.draw()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
        for leg in legends:
            assert len(leg.get_texts()) <= 8
        rec = rule_record(fig)
        assert rec is not None and set(rec.given) == set(rec.drawn) and not rec.dropped
        texts = " ".join(t.get_text() for leg in legends for t in leg.get_texts())
        assert all(label in texts for label in rec.drawn.values())
