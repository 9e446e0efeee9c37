"""The lossy multi-draft verifiers and trees under a sequence-level budget.

``optimal-budget`` attains the k-draft frontier; every verifier lies on or below the frontier
at its true emitted divergence; ``optimal-multiplier`` is Lagrangian-optimal; the tree's
reach recursion matches the family's DP and enumeration; calibrated verifiers meet a spend.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import pairs

from cactus_theory.analysis.multidraft import (
    expected_accepted_length,
    multidraft_acceptance,
    multidraft_emitted,
)
from cactus_theory.analysis.tree_budget import (
    tree_constant_budget,
    tree_sequence_budget,
    tree_spend,
)
from cactus_theory.divergences import DIVERGENCES, divergence
from cactus_theory.drafts import MultiDraft
from cactus_theory.rules.multidraft import get_verifier
from cactus_theory.rules.multidraft._budgeted import draft_set_target
from cactus_theory.rules.multidraft.base import _verifier_names
from cactus_theory.simulate._trees import synthetic_tree
from cactus_theory.solvers._multidraft import min_cut_acceptance, multidraft_frontier, multidraft_target

# The optimal verifier's node law comes from a HiGHS LP (primal feasibility tolerance 1e-7).
LP_TOL = 1e-7


def _md(seed, V=4, k=2):
    rng = np.random.default_rng(seed)
    return MultiDraft(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V)), k, "iid")


@pytest.mark.parametrize(("div", "k"), [("kl", 2), ("hellinger", 3), ("tv", 2)])
def test_optimal_budget_attains_the_frontier_and_emits_its_target(div, k):
    md = _md(0, 4, k)
    delta = 0.05
    v = get_verifier("optimal-budget", delta=delta, divergence=div)
    acc = float(multidraft_acceptance(v, md))
    emitted = multidraft_emitted(v, md)
    F = float(multidraft_frontier(md.target_probs, md.draft_probs, k, [delta], div).acceptance[0])
    assert acc == pytest.approx(F, abs=LP_TOL)
    np.testing.assert_allclose(
        emitted, multidraft_target(md.target_probs, md.draft_probs, k, delta, div), atol=LP_TOL
    )
    assert float(divergence(emitted, md.target_probs, div)) <= delta + LP_TOL


def test_every_verifier_is_on_or_below_the_frontier_at_its_emitted_divergence():
    """acceptance <= F_k(D(emitted || q)) for 5 verifiers x 3 instances (slack: the LP's tol)."""
    verifiers = [
        get_verifier("rrs"),
        get_verifier("spectr"),
        get_verifier("optimal"),
        get_verifier("cactus-rrs", delta=0.1),
        get_verifier("optimal-multiplier", lam=0.5),
    ]
    for seed in (1, 2, 3):
        md = _md(seed, 4, 2)
        for v in verifiers:
            acc = float(multidraft_acceptance(v, md))
            D = float(divergence(multidraft_emitted(v, md), md.target_probs, "kl"))
            F = float(multidraft_frontier(md.target_probs, md.draft_probs, 2, [D], "kl").acceptance[0])
            assert acc <= F + LP_TOL, (v.name, seed, acc, F)


def test_cactus_rrs_emits_beyond_its_per_set_budget_pinned():
    """Counterexample pinned: each drawn set's target is within delta of q, but the emitted
    law (as single-draft Cactus's, Theorem 3) is not: here KL = 0.17 > delta = 0.05 at k = 1."""
    md = _md(0, 5, 1)
    for S in ({0}, {1, 2}):
        h = draft_set_target(md.target_probs, S, 0.05, "kl")
        assert float(divergence(h, md.target_probs, "kl")) <= 0.05 + 1e-12  # the two-point root's rounding
    emitted = multidraft_emitted(get_verifier("cactus-rrs", delta=0.05), md)
    assert float(divergence(emitted, md.target_probs, "kl")) > 0.1


def test_multiplier_is_lagrangian_optimal():
    """alpha - lam D at the multiplier's target >= F_k(e) - lam e for every e on a grid (1e-9:
    the golden-section search on M)."""
    md = _md(4, 6, 3)
    q, p = md.target_probs, md.draft_probs
    grid = np.linspace(0.0, 0.5, 26)
    F = multidraft_frontier(q, p, 3, grid, "kl").acceptance
    for lam in (0.2, 1.0, 5.0):
        o = get_verifier("optimal-multiplier", lam=lam).target(q, p, 3)
        val = float(min_cut_acceptance(o, p, 3)) - lam * float(divergence(o, q, "kl"))
        assert val >= np.max(F - lam * grid) - 1e-9


def _tree(seed=0):
    return synthetic_tree("dirichlet", (2, 1), vocab_size=3, rng=seed, concentration=0.7)


def test_tree_spend_matches_the_family_dp_and_enumerated_node_laws():
    tree = _tree(0)
    for v in (get_verifier("optimal-budget", delta=0.05), get_verifier("cactus-rrs", delta=0.05)):
        s = tree_spend(v, tree)
        # sums of a few dozen float64 products
        assert s.expected_accepted == pytest.approx(expected_accepted_length(v, tree), abs=1e-12)
        for u in range(tree.num_nodes):
            w = int(tree.widths[u])
            if w:
                md = MultiDraft(tree.target_probs[u], tree.draft_probs[u], w, "iid")
                np.testing.assert_allclose(s.emitted[u], multidraft_emitted(v, md), atol=LP_TOL)
        assert s.spend == pytest.approx(float(s.reach @ s.node_divergence), rel=1e-15)
    assert tree_spend("optimal", tree).spend <= 1e-15  # lossless: no spend (rounding)


def test_calibration_meets_the_spend_and_one_multiplier_wins_at_fixed_reach():
    """Both calibrations spend the budget (rtol 1e-6 below it). At the multiplier's own reach
    weights r, its allocation has sum_u r_u F_u(e_u) at least that of the constant per-node
    budget delta' with the same weighted spend sum_u r_u delta' (Lagrangian sufficiency)."""
    # top-k children (no LP per node: the calibration's many tree evaluations stay cheap)
    tree = synthetic_tree("dirichlet", (2, 2), vocab_size=5, rng=1, drafting="top_k", concentration=0.7)
    B = 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = tree_sequence_budget(tree, B)
        c = tree_constant_budget(tree, B)
    for r in (m, c):
        assert B * (1 - 1e-6) <= r.spend <= B
    s = tree_spend(get_verifier("optimal-multiplier", lam=m.value), tree)
    inner = [u for u in range(tree.num_nodes) if tree.widths[u]]
    r = s.reach[inner]
    delta = s.spend / r.sum()
    from cactus_theory.drafts._laws import top_k_tokens
    from cactus_theory.solvers._spike import exact_spike

    def node_frontier(u, e):  # top-k children: one set S, F_u(e) = Theorem 2's root at q_u(S)
        S = top_k_tokens(tree.draft_probs[u], int(tree.widths[u]))
        return float(exact_spike(np.asarray(tree.target_probs[u][S].sum()), float(e), "kl"))

    mult = sum(s.reach[u] * node_frontier(u, s.node_divergence[u]) for u in inner)
    const = sum(s.reach[u] * node_frontier(u, delta) for u in inner)
    assert mult >= const - 1e-9  # the golden-section resolution of the multiplier's targets
    with pytest.raises(ValueError, match="verifier"):
        tree_constant_budget(tree, B, verifier="rrs")
    with pytest.raises(ValueError, match="budget"):
        tree_sequence_budget(tree, -1.0)


def test_top_k_children_take_theorem_2_on_the_set_and_the_kl_multiplier_closed_form():
    """Top-k children: one deterministic set S, so the budgeted acceptance is the two-point root
    gamma(q(S)) (exact_spike), and the KL multiplier's closed-form set mass beats every gamma
    on a fine grid (1e-12: rounding of the two-point KL)."""
    from cactus_theory.divergences import two_point_divergence
    from cactus_theory.drafts._laws import top_k_tokens
    from cactus_theory.solvers._spike import exact_spike

    md = _md(5, 6, 2)
    q, p = md.target_probs, md.draft_probs
    S = top_k_tokens(p, 2)
    s = float(q[S].sum())
    top = MultiDraft(q, p, 2, "top_k")
    acc = float(multidraft_acceptance(get_verifier("optimal-budget", delta=0.05), top))
    assert acc == pytest.approx(float(exact_spike(np.asarray(s), 0.05, "kl")), abs=1e-12)
    lam = 0.7
    o = get_verifier("optimal-multiplier", lam=lam).target(q, p, 2, "top_k")
    g = float(o[S].sum())
    grid = np.linspace(s, 1 - 1e-9, 20001)
    best = np.max(grid - lam * two_point_divergence(grid, np.full_like(grid, s), "kl"))
    assert g - lam * float(two_point_divergence(g, s, "kl")) >= best - 1e-12


def test_optimal_budget_reaches_the_optimum_off_supp_q():
    """p uniform on 3 tokens, q = (1/6, 0, 5/6), k = 2, TV budget 0.2: the verifier emits its
    target, which puts mass where q = 0, and accepts 0.9222 (the optimum confined to supp(q)
    is 0.8889). Slack: the LP's tolerance."""
    md = MultiDraft(np.array([1 / 6, 0.0, 5 / 6]), np.full(3, 1 / 3), 2, "iid")
    v = get_verifier("optimal-budget", delta=0.2, divergence="tv")
    assert float(multidraft_acceptance(v, md)) == pytest.approx(0.9222222222222222, abs=LP_TOL)
    emitted = multidraft_emitted(v, md)
    assert emitted[1] > 0.01 and float(divergence(emitted, md.target_probs, "tv")) <= 0.2 + LP_TOL


@settings(
    max_examples=profile_examples(1 / 15, "every multi-draft verifier and an LP per example"), deadline=None
)
@given(
    pair=pairs(2, 4),
    k=st.integers(2, 3),
    truncate=st.booleans(),
    budget_div=st.sampled_from(list(DIVERGENCES)),
)
def test_no_verifier_above_the_frontier_for_any_divergence(pair, k, truncate, budget_div):
    """Every registered multi-draft verifier of i.i.d. drafts (the budgeted ones at their
    defaults and in a drawn divergence), every divergence: acceptance <= F_k(D(emitted||q)) on
    random rows, zeros in q included (the strategy's), and top-half truncated q. F is
    evaluated a hair above D (D's ~1e-15 rounding; F is steep near 0); slack: the LP's tol."""
    q, p = pair
    if truncate:
        keep = np.argsort(-q)[: max(1, q.size // 2)]
        q = np.where(np.isin(np.arange(q.size), keep), q, 0.0)
        q = q / q.sum()
    md = MultiDraft(q, p, k, "iid")
    verifiers = [get_verifier(n) for n in _verifier_names(drafting="iid", structure="multi")]
    verifiers += [
        get_verifier("optimal-budget", delta=0.1, divergence=budget_div),
        get_verifier("optimal-multiplier", lam=0.5, divergence=budget_div),
    ]
    for v in verifiers:
        acc = float(multidraft_acceptance(v, md))
        emitted = multidraft_emitted(v, md)
        for d in DIVERGENCES:
            D = float(divergence(emitted, q, d))
            if not math.isfinite(D):
                continue
            F = float(multidraft_frontier(q, p, k, [D * (1 + 1e-9) + 1e-14], d).acceptance[0])
            assert acc <= F + LP_TOL, (v.name, d, D, acc, F)
