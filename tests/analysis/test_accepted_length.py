"""Accepted-length curves: conventions, shape flags, engine counters against the exact survival."""

from __future__ import annotations

import numpy as np
import pytest

from cactus_theory.analysis.accepted_length import (
    check_accepted_length_curve,
    compare_position_counts,
    convert_accepted_length,
    curve_from_survival,
    survival_from_curve,
)
from cactus_theory.simulate._survival import survival_probabilities


def test_conventions_differ_by_the_extra_token():
    a = np.array([0.5, 1.25, 1.5])  # dyadic: adding and removing 1 is exact
    bonus = convert_accepted_length(a, "drafts", "bonus")
    np.testing.assert_array_equal(bonus, a + 1.0)
    np.testing.assert_array_equal(convert_accepted_length(bonus, "bonus", "drafts"), a)
    np.testing.assert_array_equal(convert_accepted_length(a, "drafts", "drafts"), a)


@pytest.mark.parametrize("a", [0.0, 0.3, 0.8, 1.0])
def test_iid_chain_closed_form(a):
    """i.i.d. acceptance a: S_j = a^j and A_k = a (1 - a^k) / (1 - a) (a geometric sum), in both
    conventions; the curve passes every check."""
    K = 6
    s = survival_probabilities(np.full(K, a))
    k = np.arange(1, K + 1)
    closed = k.astype(float) if a == 1.0 else a * (1 - a**k) / (1 - a)
    # float64 cumulative sum against the closed form: a few ulps of numbers <= 6
    np.testing.assert_allclose(curve_from_survival(s, "drafts"), closed, rtol=0, atol=1e-12)
    np.testing.assert_allclose(curve_from_survival(s, "bonus"), 1 + closed, rtol=0, atol=1e-12)
    np.testing.assert_allclose(survival_from_curve(1 + closed, "bonus"), a**k, rtol=0, atol=1e-12)
    assert check_accepted_length_curve(1 + closed, "bonus").ok
    assert check_accepted_length_curve(a**k, kind="survival").ok


def test_exact_survival_of_random_chains_passes():
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = survival_probabilities(rng.uniform(size=8))
        assert check_accepted_length_curve(curve_from_survival(s, "bonus"), "bonus").ok
        assert check_accepted_length_curve(s, kind="survival").ok


def test_flags_name_the_draft_counts():
    # bonus-counted lengths 1.5, 2.3, 2.2, 3.6: increments 0.5, 0.8 (rises), -0.1 (falls), 1.4 (> 1)
    chk = check_accepted_length_curve([1.5, 2.3, 2.2, 3.6], "bonus")
    assert not chk.ok
    assert chk.rising_increments == (2, 4) and chk.negative_increments == (3,) and chk.above_one == (4,)
    assert chk.summary() == ("falls at k = 3; increment rises at k = 2, 4; increment above 1 at k = 4")
    # the same numbers read as drafts-only: the first increment is 1.5 > 1
    assert check_accepted_length_curve([1.5, 2.3, 2.2, 3.6], "drafts").above_one == (1, 4)
    # a survival curve that rises at position 3
    assert check_accepted_length_curve([0.8, 0.5, 0.6], kind="survival").rising_increments == (3,)
    # noise within atol is not flagged, beyond it is
    assert check_accepted_length_curve([0.8, 0.5, 0.51], kind="survival", atol=0.02).ok
    assert not check_accepted_length_curve([0.8, 0.5, 0.53], kind="survival", atol=0.02).ok


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: convert_accepted_length([1.0], "tokens", "bonus"), "source"),
        (lambda: convert_accepted_length([1.0], "bonus", "x"), "target"),
        (lambda: check_accepted_length_curve([]), "values"),
        (lambda: check_accepted_length_curve([1.0, np.nan]), "values"),
        (lambda: check_accepted_length_curve([1.0], kind="rate"), "kind"),
        (lambda: check_accepted_length_curve([1.0], atol=-1), "atol"),
        (lambda: compare_position_counts([1.5], 10, [0.5]), "accepted_counts"),
        (lambda: compare_position_counts([11], 10, [0.5]), "rounds"),
        (lambda: compare_position_counts([5], 10, [1.5]), "expected_survival"),
        (lambda: compare_position_counts([5], 10, [0.5], alpha=0), "alpha"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_counters_against_the_exact_survival():
    """Counts drawn from the exact chain fall within their intervals; counts of another chain
    (acceptance 0.1 lower at every position) are flagged at every position."""
    rng = np.random.default_rng(3)
    rounds, K = 20_000, 4
    a = rng.uniform(0.4, 0.9, size=(rounds, K))
    accepted = (rng.uniform(size=(rounds, K)) < a).astype(int)
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)  # accepted prefix of each round
    counts = np.array([(n_acc >= j).sum() for j in range(1, K + 1)])
    exact = survival_probabilities(a).mean(axis=0)
    # level 1e-3 per position: a correct engine fails one of 4 positions with probability < 4e-3
    # (seeded, so this run is reproducible)
    cmp = compare_position_counts(counts, rounds, exact, alpha=1e-3)
    assert cmp.ok, (cmp.observed, cmp.expected)
    assert np.all(cmp.low <= cmp.observed) and np.all(cmp.observed <= cmp.high)
    worse = survival_probabilities(a - 0.1).mean(axis=0)
    assert compare_position_counts(counts, rounds, worse).outside == (1, 2, 3, 4)
    # the observed curve, bonus counted, passes the shape checks within its noise
    observed_curve = curve_from_survival(cmp.observed, "bonus")
    assert check_accepted_length_curve(observed_curve, "bonus", atol=0.01).ok
