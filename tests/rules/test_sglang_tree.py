"""SGLang's tree verification (``sglang-tree``) against a port of sgl-kernel's decision.

The port below follows ``TreeSpeculativeSamplingTargetOnly``
(sgl-kernel ``csrc/speculative/speculative_sampling.cuh``) line by line on one request: the
``retrive_next_token`` / ``retrive_next_sibling`` walk, one coin per node, ``prob_acc``
summed over the siblings tried, ``draft_probs`` set to the target probability of each rejected
child, and the final token from ``relu(target_probs - draft_probs)`` with its own coin (no
draft row at full depth). The registered verifier's node law is compared with it coin by coin
(the same coin gives the same slot), its tree law by chi-square on drawn trees, and its exact
law by enumeration (lossless at the defaults, the chain rule at one child, DP = enumeration).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from cactus_theory.analysis.multidraft import (
    drawn_trees,
    expected_accepted_length,
    lossless_error,
    tree_outcomes,
)
from cactus_theory.analysis.one_step import analyze
from cactus_theory.drafts import DrawnTree, MultiDraft
from cactus_theory.rules import get_rule
from cactus_theory.rules.multidraft import get_verifier
from cactus_theory.simulate._trees import synthetic_tree

# The chi-square check fails falsely with probability at most this for a fresh seed (the seeds are fixed).
FALSE_FAILURE = 1e-5
# Exact laws here are sums of at most a few hundred float64 products.
EXACT_TOL = 1e-12


def _kernel(drawn, coins, final_coin, threshold_single, threshold_acc):
    """One request of ``TreeSpeculativeSamplingTargetOnly``: (accepted node ids, final token).

    ``coins[u]`` is ``uniform_samples`` at node u (the coin drawn when u becomes the last
    accepted node); nodes are the drawn tree's (``retrieve_index`` the identity).
    """
    m = drawn.num_nodes
    q = np.asarray(drawn.target_probs, dtype=np.float64)
    draft = np.zeros_like(q)  # the caller's zero draft buffer ("target only")
    next_token = np.full(m, -1)
    next_sibling = np.full(m, -1)
    for u in range(m):
        kids = drawn.children(u)
        if kids:
            next_token[u] = kids[0]
            for a, b in zip(kids, kids[1:]):
                next_sibling[a] = b
    num_speculative_tokens = int(drawn.depths.max()) + 1
    threshold_acc = max(threshold_acc, 1e-9)  # capped_threshold_acc
    prob_acc, cur, coin, last, accepted = 0.0, 0, coins[0], 0, []
    for _ in range(1, num_speculative_tokens):
        cur = next_token[cur]
        while cur != -1:
            tok = int(drawn.token_ids[cur])
            single = q[last, tok]
            prob_acc += single
            if coin <= prob_acc / threshold_acc or single >= threshold_single:
                prob_acc, coin, last = 0.0, coins[cur], int(cur)
                accepted.append(last)
                break
            draft[last, tok] = q[last, tok]
            cur = next_sibling[cur]
        if cur == -1:
            break
    p_row = draft[last] if len(accepted) != num_speculative_tokens - 1 else np.zeros_like(q[last])
    relu = np.maximum(q[last] - p_row, 0.0)
    u = final_coin * relu.sum()
    hit = np.flatnonzero((np.cumsum(relu) > u) & (relu > 0))
    return accepted, int(hit[0]) if hit.size else int(np.flatnonzero(relu > 0)[-1])


def _sequence(drawn, accepted, token):
    return tuple(int(drawn.token_ids[u]) for u in accepted) + (token,)


KNOBS = [
    {"threshold_single": 1.0, "threshold_acc": 1.0},
    {"threshold_single": 1.0, "threshold_acc": 0.5},
    {"threshold_single": 0.3, "threshold_acc": 0.7},
]


@pytest.mark.parametrize("knobs", KNOBS)
def test_node_law_is_the_kernels_decision_coin_by_coin(knobs):
    """For every coin u the kernel accepts the first slot j whose cumulative law reaches u:
    the node law's slots are the kernel's coin intervals, in order."""
    verifier = get_verifier("sglang-tree", **knobs)
    rng = np.random.default_rng(0)
    for _ in range(40):
        v, k = 6, int(rng.integers(1, 5))
        q = rng.dirichlet(np.full(v, 0.5))
        kids = [int(t) for t in rng.permutation(v)[:k]]
        law = verifier.node_law(q, np.full(v, 1 / v), kids, "without_replacement")
        cum = np.cumsum(law.accept_probs)
        rows = np.stack([q] * (k + 1))
        drawn = DrawnTree([-1] + [0] * k, [-1] + kids, rows, np.full_like(rows, 1 / v), "without_replacement")
        for u in rng.random(25):
            accepted, _ = _kernel(drawn, np.full(drawn.num_nodes, u), 0.5, **knobs)
            slot = int(np.searchsorted(cum, u, side="left"))  # first j with cum_j >= u
            assert (accepted[0] - 1 if accepted else k) == min(slot, k), (q, kids, u)
        rest = q.copy()
        rest[kids] = 0.0
        if law.reject_prob > 0:
            np.testing.assert_allclose(law.residual, rest / rest.sum(), atol=EXACT_TOL)


@pytest.mark.parametrize(
    ("drafting", "knobs"),
    [("top_k", KNOBS[2]), ("without_replacement", KNOBS[1])],
)
def test_tree_law_matches_the_kernel_port_by_chi_square(drafting, knobs):
    tree = synthetic_tree("dirichlet", (2, 1), vocab_size=4, rng=3, drafting=drafting, concentration=0.7)
    exact = tree_outcomes(get_verifier("sglang-tree", **knobs), tree).emitted
    draws = drawn_trees(tree)
    probs = np.array([d[0] for d in draws])
    rng = np.random.default_rng(4)
    n = 3000
    counts: Counter = Counter()
    for i in rng.choice(len(draws), n, p=probs / probs.sum()):
        drawn = draws[i][1]
        accepted, token = _kernel(drawn, rng.random(drawn.num_nodes), rng.random(), **knobs)
        counts[_sequence(drawn, accepted, token)] += 1
    assert set(counts) <= {s for s, v in exact.items() if v > 0}, "the port emitted a sequence of law 0"
    keys = sorted(exact)
    expected = np.array([exact[s] for s in keys]) * n
    observed = np.array([counts.get(s, 0) for s in keys], dtype=float)
    keep = expected >= 5  # pool cells below 5 expected draws (chi-square's validity)
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > FALSE_FAILURE


@pytest.mark.parametrize("drafting", ["top_k", "without_replacement"])
def test_exact_law_by_enumeration(drafting):
    """Lossless at the defaults (distinct children: an inverse-CDF draw from q); lossy and
    accepting more at t_acc < 1; the DP equals the enumeration at every knob."""
    tree = synthetic_tree("dirichlet", (2, 1), vocab_size=3, rng=5, drafting=drafting, concentration=0.7)
    assert lossless_error("sglang-tree", tree) < 1e-11  # float64 sums over every drawn tree
    lengths = []
    for knobs in KNOBS:
        verifier = get_verifier("sglang-tree", **knobs)
        enum = expected_accepted_length(verifier, tree, "enumerate")
        assert expected_accepted_length(verifier, tree, "dp") == pytest.approx(enum, abs=EXACT_TOL)
        lengths.append(enum)
    assert lossless_error(get_verifier("sglang-tree", **KNOBS[1]), tree) > 1e-3
    assert lengths[1] > lengths[0]


def test_one_child_is_the_chain_rule_at_its_knobs():
    """At one child the tree form is ``sglang-threshold`` with the same knobs, and at a
    one-hot draft the issue's worked example: q = (0.5, 0.3, 0.2), n = 1, t_acc = 0.5
    accepts 0.6 and emits (0.285714, 0.6, 0.114286)."""
    q = np.array([0.5, 0.3, 0.2])
    tree = MultiDraft(q, np.array([0.0, 1.0, 0.0]), 1, "top_k").as_tree()
    out = tree_outcomes(get_verifier("sglang-tree", threshold_acc=0.5), tree).emitted
    first = [sum(v for s, v in out.items() if s[0] == tok) for tok in range(3)]
    np.testing.assert_allclose(first, [2 / 7, 0.6, 0.8 / 7], atol=EXACT_TOL)
    rng = np.random.default_rng(6)
    for knobs in KNOBS[1:]:
        p = rng.dirichlet(np.ones(4))
        q = rng.dirichlet(np.ones(4))
        tree = MultiDraft(q, p, 1, "without_replacement").as_tree()
        res = analyze(get_rule("sglang-threshold", **knobs), q, p)
        length = expected_accepted_length(get_verifier("sglang-tree", **knobs), tree)
        assert length == pytest.approx(float(res.acceptance), abs=EXACT_TOL)


def test_the_floor_on_threshold_acc_is_the_chain_rules():
    from cactus_theory.rules import _sglang_threshold
    from cactus_theory.rules.multidraft import _sglang_tree

    assert _sglang_tree.SGLANG_MIN_THRESHOLD_ACC == _sglang_threshold.SGLANG_MIN_THRESHOLD_ACC
    assert get_verifier("sglang-tree", threshold_acc=0.0).threshold_acc == 1e-9


def test_repeated_children_are_not_declared():
    with pytest.raises(ValueError, match="drafting"):
        tree = synthetic_tree("dirichlet", (2,), vocab_size=3, rng=7, drafting="iid")
        tree_outcomes("sglang-tree", tree)
