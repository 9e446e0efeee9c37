"""cactus_theory.testing._generation: generated token sequences against their exact joint law.

False-failure probability: each passing check runs at alpha = 1e-6 with a fixed seed.
"""

from __future__ import annotations

import numpy as np
import pytest

from cactus_theory.testing._generation import sequence_law, target_joint_law


def _next(ids):
    """A made-up autoregressive law on 3 tokens: the next token's law depends on the last id."""
    rows = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.3, 0.0, 0.7]])
    return rows[ids[-1] % 3]


def _draws(joint, size, rng):
    idx = rng.choice(joint.size, size=size, p=joint.ravel())
    return np.stack(np.unravel_index(idx, joint.shape), axis=1)


def test_the_joint_law_is_the_product_of_the_next_token_laws():
    joint = target_joint_law(_next, [0], 3, 2)
    assert joint.shape == (3, 3) and abs(joint.sum() - 1) < 1e-15
    assert joint[2, 1] == 0.0 and abs(joint[1, 2] - 0.3 * 0.8) < 1e-15


def test_sequences_pass_their_own_law_and_fail_a_perturbed_one():
    rng = np.random.default_rng(3)
    joint = target_joint_law(_next, [0], 3, 3)
    seqs = _draws(joint, 4000, rng)
    ok = sequence_law(seqs, joint)
    assert ok["passed"] and ok["n"] == 4000 and ok["detectable_tv"] < 0.1, ok
    off = target_joint_law(lambda ids: _next(ids) * [1.0, 1.0, 0.8] + [0.0, 0.0, 0.0], [0], 3, 3)
    bad = sequence_law(_draws(off, 4000, rng), joint)  # a TV of 0.065 in the joint law
    assert not bad["passed"], bad


def test_a_sequence_of_probability_zero_fails_outright():
    joint = target_joint_law(_next, [0], 3, 2)
    res = sequence_law(np.array([[0, 0]] * 50 + [[2, 1]]), joint)  # (2, 1) has probability 0
    assert not res["passed"] and res["p_value"] == 0.0 and "exact probability is 0" in res["detail"]


@pytest.mark.parametrize("seqs", [np.zeros((4, 3), int), np.full((4, 2), 5)])
def test_bad_sequences_raise_value_error_naming_them(seqs):
    with pytest.raises(ValueError, match="sequences"):
        sequence_law(seqs, target_joint_law(_next, [0], 3, 2))
