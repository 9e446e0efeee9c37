"""The multi-draft verifiers' base (``rules/multidraft/base.py``): a node-wise verifier's law at
one node and its accepted-token law against recursive rejection sampling written out here, the
verifier registry's look-up and filters, and the structure checks naming their argument."""

import numpy as np
import pytest

from cactus_theory.rules.multidraft import VERIFIERS, get_verifier
from cactus_theory.rules.multidraft.base import NodeLaw, _verifier_names

Q = np.array([0.5, 0.25, 0.125, 0.125])
P = np.array([0.125, 0.125, 0.25, 0.5])


def _rrs_accepted_token_law(q, p, k):
    """A(x) for k i.i.d. drafts: round i reaches with the product of the earlier rejections,
    accepts x with min(r_i(x), p(x)), and leaves r_(i+1) = (r_i - p)^+ normalised."""
    out, r, reach = np.zeros_like(q), q.copy(), 1.0
    for _ in range(k):
        a = np.minimum(r, p)
        out += reach * a
        reach *= 1.0 - a.sum()
        w = np.maximum(r - p, 0.0)
        if w.sum() == 0:
            break
        r = w / w.sum()
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rrs_accepted_token_law_by_rounds(k):
    """Dyadic rows: equal to 1e-15. At k = 1 the law is min(p, q), SpS's."""
    got = get_verifier("rrs").accepted_token_law(Q, P, k, "iid")
    np.testing.assert_allclose(got, _rrs_accepted_token_law(Q, P, k), rtol=0, atol=1e-15)
    if k == 1:
        np.testing.assert_array_equal(got, np.minimum(P, Q))


def test_a_node_law_given_its_drafts():
    """RRS with drafts (1, 2): token 1 has q/p = 2, so the first slot is accepted surely and the
    second never reached; the residual (the law when both are rejected) sums to 1."""
    law = get_verifier("rrs").node_law(Q, P, np.array([1, 2]), "iid")
    assert law.accept_probs.tolist() == [1.0, 0.0] and law.reject_prob == 0.0
    assert law.residual.sum() == pytest.approx(1.0, abs=1e-15)
    assert NodeLaw(np.array([0.25, 0.5]), Q).reject_prob == 0.25
    assert NodeLaw(np.array([0.75, 0.5]), Q).reject_prob == 0.0  # rounding above 1 is clipped


def test_the_registry_looks_up_and_filters_by_drafting_and_structure():
    names = list(VERIFIERS)
    assert "rrs" in names and "block" in names
    for drafting in ("iid", "without_replacement", "top_k"):
        assert _verifier_names(drafting=drafting) == [n for n in names if drafting in VERIFIERS[n].drafting]
    for structure in ("multi", "chain", "tree"):
        assert _verifier_names(structure=structure) == [
            n for n in names if structure in VERIFIERS[n].structures
        ]
    with pytest.raises(ValueError, match="^verifier: unknown value 'nope'; valid: "):
        get_verifier("nope")
    with pytest.raises(ValueError, match=r"^delta: not a knob of verifier 'rrs' \(knobs: none\)$"):
        get_verifier("rrs", delta=1.0)


def test_the_structure_check_names_its_argument():
    """A verifier of chains refuses a tree with branching (and accepts a chain); one of every
    structure accepts both."""
    chains_only = [n for n in VERIFIERS if VERIFIERS[n].structures == ("chain",)]
    for name in chains_only:
        v = get_verifier(name)
        v.check_structure(True, False, "structure")
        with pytest.raises(
            ValueError, match=f"^structure: verifier '{name}' verifies chain structures only$"
        ):
            v.check_structure(False, False, "structure")
    get_verifier("rrs").check_structure(False, False, "tree")
