"""Draft structures (``cactus_theory.drafts``, mostly its token trees, ``drafts/_trees.py``):
validation naming the argument, draws against their enumerated laws, the draft-set law against
brute force, and the synthetic generators (``simulate/_trees.py``). The tree-shaped dump:
``tests/logits/test_tree_dump.py``."""

from __future__ import annotations

from collections import Counter
from itertools import product

import numpy as np
import pytest
from scipy import stats

from cactus_theory.analysis.multidraft import drawn_trees
from cactus_theory.drafts import DraftChain, DrawnTree, MultiDraft, TokenTree, drafting_law
from cactus_theory.drafts._laws import draft_set_law
from cactus_theory.simulate._trees import synthetic_chain, synthetic_multidraft, synthetic_tree

Q = np.array([0.5, 0.3, 0.2, 0.0])
P = np.array([0.4, 0.4, 0.1, 0.1])


def test_multidraft_validation_names_the_argument():
    with pytest.raises(ValueError, match="^k:"):
        MultiDraft(Q, P, 0)
    with pytest.raises(ValueError, match="^k:"):
        MultiDraft(Q, np.array([0.5, 0.5, 0.0, 0.0]), 3, "without_replacement")
    with pytest.raises(ValueError, match="^draft_probs:"):
        MultiDraft(Q, P[:3] / P[:3].sum(), 2)
    with pytest.raises(ValueError, match="^drafting:"):
        MultiDraft(Q, P, 2, "beam")
    with pytest.raises(ValueError, match="^target_probs:"):
        MultiDraft(Q * 2, P, 2)


def _star(tokens, widths0=2, drafting="iid"):
    n = 1 + len(tokens)
    return dict(
        parents=[-1] + [0] * len(tokens),
        token_ids=[-1] + list(tokens),
        target_probs=np.tile(Q, (n, 1)),
        draft_probs=np.tile(P, (n, 1)),
        widths=[widths0] + [0] * len(tokens),
        drafting=drafting,
    )


def test_token_tree_validation_names_the_argument():
    TokenTree(**_star([0, 1, 2, 3]))  # complete: every token of p's support is a child
    with pytest.raises(ValueError, match="^token_ids:.*no child"):
        TokenTree(**_star([0, 1, 2]))
    with pytest.raises(ValueError, match="^token_ids:.*two children"):
        TokenTree(**_star([0, 1, 2, 3, 3]))
    with pytest.raises(ValueError, match="^token_ids:.*never produce"):
        TokenTree(**_star([0, 1, 2], drafting="top_k"))  # top-2 of p: tokens 0 and 1 (ties: lower id)
    bad = _star([0, 1, 2, 3])
    bad["parents"] = [-1, 0, 0, 5, 0]
    with pytest.raises(ValueError, match="^parents:"):
        TokenTree(**bad)
    bad = _star([0, 1, 2, 3])
    bad["widths"] = [-1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="^widths:"):
        TokenTree(**bad)
    bad = _star([0, 1, 2, 3], widths0=5, drafting="without_replacement")
    with pytest.raises(ValueError, match="^widths:"):
        TokenTree(**bad)
    top = _star([0, 1], drafting="top_k")
    top["widths"] = [2, 0, 0]
    TokenTree(**top)


def test_top_k_children_are_the_most_likely_tokens():
    tree = TokenTree(**{**_star([0, 1], drafting="top_k"), "widths": [2, 0, 0]})
    ((prob, drawn),) = drawn_trees(tree)
    assert prob == 1.0 and list(drawn.token_ids[1:]) == [0, 1]
    np.testing.assert_array_equal(drafting_law(P, [0], "top_k"), [0, 1, 0, 0])


def test_drawn_tree_and_chain_validation():
    q = np.tile(Q, (3, 1))
    p = np.tile(P, (3, 1))
    DrawnTree([-1, 0, 1], [-1, 0, 1], q, p)
    with pytest.raises(ValueError, match="^parents:.*preorder"):
        DrawnTree([-1, 0, 0, 1], [-1, 0, 1, 2], np.tile(Q, (4, 1)), np.tile(P, (4, 1)))
    with pytest.raises(ValueError, match="^token_ids:.*probability 0"):
        DrawnTree([-1, 0, 1], [-1, 0, 3], q, np.tile(np.array([0.5, 0.5, 0, 0]), (3, 1)))
    with pytest.raises(ValueError, match="^token_ids:.*repeats"):
        DrawnTree([-1, 0, 0], [-1, 1, 1], q, p, "without_replacement")
    with pytest.raises(ValueError, match="^draft_probs:"):
        DraftChain(q, p)
    with pytest.raises(ValueError, match="^target_probs:"):
        DraftChain(q[:1], p[:0])


@pytest.mark.parametrize("drafting", ["iid", "without_replacement"])
def test_draft_set_law_matches_brute_force(drafting):
    k = 3
    sets, probs = draft_set_law(P, k, drafting)
    brute = Counter()
    for tup in product(range(4), repeat=k):
        if drafting == "without_replacement" and len(set(tup)) < k:
            continue
        pr, used = 1.0, 0.0
        for x in tup:
            if drafting == "iid":
                pr *= P[x]
            else:
                pr *= P[x] / (1.0 - used)
                used += P[x]
        brute[tuple(sorted(set(tup)))] += pr
    got = dict(zip(sets, probs))
    assert set(got) == {s for s, v in brute.items() if v > 0}
    for s, v in brute.items():
        assert got.get(s, 0.0) == pytest.approx(v, abs=1e-15)  # a few float64 products and sums


def test_tree_draws_follow_the_enumerated_law():
    tree = synthetic_tree("dirichlet", (2, 1), vocab_size=3, rng=0, drafting="without_replacement")
    law = {tuple(d.trie_nodes.tolist()): pr for pr, d in drawn_trees(tree)}
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    rng = np.random.default_rng(1)
    n = 1000
    counts = Counter(tuple(tree.draw(rng).trie_nodes.tolist()) for _ in range(n))
    keys = sorted(law)
    obs = np.array([counts.get(k, 0) for k in keys])
    assert obs.sum() == n  # every draw is one of the enumerated trees
    exp = np.array([law[k] for k in keys]) * n
    # 6 cells, fixed seed; a fresh seed fails with probability 1e-5
    assert stats.chisquare(obs, exp).pvalue > 1e-5


def test_generators_are_seeded_and_complete():
    a = synthetic_tree("zipf", (2, 1), vocab_size=3, rng=4)
    b = synthetic_tree("zipf", (2, 1), vocab_size=3, rng=4)
    np.testing.assert_array_equal(a.target_probs, b.target_probs)
    assert a.num_nodes == 1 + 3 + 9  # complete trie: every token of p's support expanded
    tf = synthetic_tree("dirichlet", (1, 1), vocab_size=3, rng=4, context_dependent=False)
    depth = tf.depths
    for d in range(3):
        rows = tf.target_probs[depth == d]
        assert np.all(rows == rows[0])  # teacher forced: one row per depth
    md = synthetic_multidraft(
        "logits", k=3, n_positions=5, vocab_size=6, rng=2, drafting="without_replacement"
    )
    assert md.batch_shape == (5,) and md.draw(0).shape == (5, 3)
    assert all(len(set(r)) == 3 for r in md.draw(1).tolist())
    chain = synthetic_chain("noisy_copy", 3, vocab_size=5, rng=3)
    assert chain.length == 3 and chain.draw(0).shape == (3,)
