"""Exact analysis of k drafts at one position and of token trees (``analysis/multidraft.py``):
recursive rejection sampling's acceptance against its rounds written out here, the drawn trees
with their probabilities, a lossy verifier's error, and the bad arguments. The verifiers'
battery (emitted law and accepted length by enumeration, k = 1 = sps) is in
tests/rules/test_multidraft_rules.py."""

import numpy as np
import pytest

from cactus_theory.analysis.multidraft import (
    drawn_trees,
    expected_accepted_length,
    lossless_error,
    multidraft_acceptance,
    multidraft_emitted,
)
from cactus_theory.drafts import MultiDraft
from cactus_theory.rules.multidraft import get_verifier

_Q = np.array([0.5, 0.25, 0.125, 0.125])
_P = np.array([0.125, 0.125, 0.25, 0.5])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rrs_acceptance_is_one_minus_the_product_of_its_rounds_misses(k):
    """Recursive rejection sampling, k i.i.d. drafts: round i accepts with sum min(r_i, p) and
    leaves the residual r_(i+1) = (r_i - p)^+ normalised (r_0 = q), so P(accept) = 1 - prod_i
    (1 - sum min(r_i, p)), written out here; it emits q. Dyadic rows: equal to 1e-15."""
    md = MultiDraft(_Q, _P, k, "iid")
    r, miss = _Q.copy(), 1.0
    for _ in range(k):
        miss *= 1.0 - np.minimum(r, _P).sum()
        r = np.maximum(r - _P, 0.0)
        r = r / r.sum()
    assert float(multidraft_acceptance("rrs", md)) == pytest.approx(1.0 - miss, abs=1e-15)
    np.testing.assert_allclose(multidraft_emitted("rrs", md), _Q, rtol=0, atol=1e-15)
    assert lossless_error("rrs", md) <= 1e-15


def test_drawn_trees_are_every_ordered_draw_with_its_probability():
    """k = 2 i.i.d. drafts of V = 4 tokens: 16 drawn trees whose probabilities are the products
    p_x p_y (as a multiset) and sum to 1."""
    trees = drawn_trees(MultiDraft(_Q, _P, 2, "iid"))
    probs = sorted(pr for pr, _ in trees)
    assert len(trees) == 16 and probs == sorted(np.outer(_P, _P).ravel().tolist())
    assert sum(probs) == pytest.approx(1.0, abs=1e-15)


def test_a_lossy_verifier_shows_its_error():
    """cactus-rrs with a budget (delta = 0.3) moves the emitted law off q: lossless_error, the
    largest gap at the boundary events (each a token's gap times a probability), is positive
    and at most the largest gap of the emitted law (1e-15: rounding); at delta = 0 it is 0."""
    md = MultiDraft(_Q, _P, 2, "iid")
    lossy = get_verifier("cactus-rrs", delta=0.3)
    err = lossless_error(lossy, md)
    gap = np.abs(multidraft_emitted(lossy, md) - _Q).max()
    assert 1e-3 < err <= gap + 1e-15
    assert multidraft_acceptance(lossy, md) > multidraft_acceptance("rrs", md)
    assert lossless_error("cactus-rrs", md) <= 1e-15


def test_bad_arguments_are_refused_naming_them():
    md = MultiDraft(_Q, _P, 2, "iid")
    with pytest.raises(ValueError, match="^method"):
        expected_accepted_length("rrs", md, method="nope")
    with pytest.raises(ValueError, match="^structure"):
        multidraft_acceptance("rrs", md.as_tree())
    with pytest.raises(ValueError, match="^structure"):
        multidraft_emitted("rrs", md.as_tree())
