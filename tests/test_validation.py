"""``cactus_theory._validation``: the numpy core's input checks, one ValueError naming the argument.

Each validator returns its input in the documented form (float64 rows renormalized, int64 ids
broadcast, Python numbers) and refuses each documented class of bad input with a message that
starts with the argument's name. What the public functions do with them is in
``tests/test_bad_input.py``; the tolerance on a row's sum is in ``tests/test_conventions.py``.
"""

import math

import numpy as np
import pytest

from cactus_theory._validation import (
    as_budget,
    as_budget_array,
    as_count,
    as_finite_number,
    as_int_array,
    as_matching_probs,
    as_nonempty_values,
    as_prob_pair,
    as_probs,
    as_probs_or_tensor,
    as_real,
    as_temperature,
    as_token_ids,
    as_top_k,
    as_top_p,
    choice,
    one_row,
    random_generator,
    spike_arguments,
    token_id,
    token_ids_of,
)

NAN, INF = float("nan"), float("inf")


def _refused(call, name, *args, **kwargs):
    """The ValueError of ``call(*args, **kwargs)``, whose message must start with ``name:``."""
    with pytest.raises(ValueError) as exc:
        call(*args, **kwargs)
    assert str(exc.value).startswith(f"{name}:"), str(exc.value)
    return str(exc.value)


def test_probability_rows_come_back_float64_and_renormalized():
    x = np.array([[0.2, 0.3, 0.5], [0.5, 0.5, 1e-7]], dtype=np.float32)  # the second off by 1e-7
    out = as_probs(x, "q")
    assert out.dtype == np.float64 and out.shape == (2, 3)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=0, atol=4 * np.finfo(np.float64).eps)
    raw = as_probs(x, "q", normalize=False)
    np.testing.assert_array_equal(raw, x.astype(np.float64))  # the same values, not divided


@pytest.mark.parametrize(
    "x, what",
    [
        (3.0, "scalar"),
        (np.zeros((2, 0)), "vocabulary axis"),
        ([0.5, NAN, 0.5], "NaN"),
        ([0.5, INF], "NaN or infinite"),
        ([1.5, -0.5], "negative"),
        ([0.5, 0.6], "sum to 1"),
        (["a", "b"], "not a numeric array"),
    ],
)
def test_bad_probability_rows_are_named(x, what):
    assert what in _refused(as_probs, "target_probs", x, "target_probs")


def test_a_pair_broadcasts_and_names_the_mismatch():
    q, p = as_prob_pair([[0.5, 0.5], [0.2, 0.8]], [0.1, 0.9])
    assert q.shape == p.shape == (2, 2)
    np.testing.assert_array_equal(p, [[0.1, 0.9], [0.1, 0.9]])
    assert "vocabulary size 3" in _refused(as_prob_pair, "draft_probs", [0.5, 0.5], [0.2, 0.3, 0.5])
    assert "does not match" in _refused(
        as_prob_pair, "draft_probs", np.full((2, 2), 0.5), np.full((3, 2), 0.5)
    )
    _refused(as_matching_probs, "draft_probs", [0.5, 0.5], (2, 2), "draft_probs")


def test_token_ids_are_int64_in_range_and_broadcast():
    ids = as_token_ids([1.0, 2.0], 4, (3, 2))  # integral floats are accepted
    assert ids.dtype == np.int64 and ids.shape == (3, 2)
    for bad, what in (([0.5], "integers"), ([4], "out of range"), ([-1], "out of range")):
        assert what in _refused(as_token_ids, "draft_token_ids", bad, 4, (1,))
    assert "batch shape" in _refused(as_token_ids, "draft_token_ids", [0, 1, 2], 4, (2,))
    rows = np.full((2, 3), 1 / 3)
    np.testing.assert_array_equal(token_ids_of(rows, [2, 0]), [2, 0])
    _refused(token_ids_of, "token_ids", rows, [3, 0])  # numpy rows: checked, never wrapped
    sentinel = object()
    assert token_ids_of([[0.5, 0.5]], sentinel) is sentinel  # other arrays: as given


def test_one_token_id():
    assert token_id(np.int64(2), 3) == 2 and isinstance(token_id(np.int64(2), 3), int)
    for bad in (True, 1.0, "1"):
        _refused(token_id, "token", bad, 3)
    _refused(token_id, "token", 3, 3)


def test_real_numbers_and_budgets():
    assert as_real(np.float32(0.5), "x") == 0.5 and as_budget(INF) == INF
    assert "is NaN" in _refused(as_real, "x", NAN, "x")
    assert "must be a knob" in _refused(as_real, "x", True, "x", "must be a knob")
    assert as_real(" 0.5 ", "x") == 0.5  # what float() reads is a number
    _refused(as_budget, "delta", -1e-12)
    np.testing.assert_array_equal(as_budget_array([0.0, INF]), [0.0, INF])
    assert "NaN" in _refused(as_budget_array, "delta", [0.1, NAN])
    assert "min -1" in _refused(as_budget_array, "delta", [0.1, -1.0])


def test_counts_and_integer_arrays():
    assert as_count(3.0, "m") == 3 and as_count(np.int32(0), "m", minimum=0) == 0
    for bad in (True, 2.5, INF, "3", None):
        _refused(as_count, "m", bad, "m")
    assert "got 0" in _refused(as_count, "m", 0, "m")
    assert as_top_k(5) == 5
    _refused(as_top_k, "top_k", 0)
    assert as_int_array([1.0, 2.0], None, "n").dtype == np.int64
    assert as_int_array([], None, "n").shape == (0,)
    _refused(as_int_array, "n", [0.5], None, "n")
    _refused(as_int_array, "n", [[1]], None, "n")
    _refused(as_int_array, "n", [1, 2], (3,), "n")


def test_sampling_settings():
    assert as_temperature(0.6) == 0.6 and as_top_p(1) == 1.0
    for bad in (0.0, -1.0, INF, NAN, "hot"):
        _refused(as_temperature, "temperature", bad)
    for bad in (0.0, 1.01, NAN):
        _refused(as_top_p, "top_p", bad)


def test_choices_and_generators():
    assert choice("kl", ("kl", "tv"), "divergence") == "kl"
    assert "valid: kl, tv" in _refused(choice, "divergence", "js", ("kl", "tv"), "divergence")
    g = np.random.default_rng(0)
    assert random_generator(g) is g
    a, b = random_generator(7).random(3), random_generator(np.int64(7)).random(3)
    np.testing.assert_array_equal(a, b)
    for bad in ("7", -1, 1.5, True):
        _refused(random_generator, "rng", bad)


def test_one_row_and_value_lists():
    row = np.ones(3) / 3
    assert one_row(row, "q") is row
    _refused(one_row, "q", np.ones((1, 3)), "q")
    np.testing.assert_array_equal(as_nonempty_values(0.5, "eps"), [0.5])
    assert "is empty" in _refused(as_nonempty_values, "eps", [], "eps")
    assert "contains NaN" in _refused(as_nonempty_values, "eps", [NAN], "eps")
    assert ">= 0" in _refused(as_nonempty_values, "eps", [-0.1], "eps")
    np.testing.assert_array_equal(as_nonempty_values([-0.1], "x", minimum=None), [-0.1])


def test_finite_numbers_within_an_interval_and_their_slack():
    np.testing.assert_array_equal(as_finite_number([0.0, 1.0], "a", low=0, high=1), [0.0, 1.0])
    _refused(as_finite_number, "a", [1.0 + 1e-9], "a", low=0, high=1)
    # within the slack a rounding excess is clipped into the interval, not refused
    np.testing.assert_array_equal(as_finite_number([1.0 + 2e-16], "a", low=0, high=1, slack=1e-12), [1.0])
    _refused(as_finite_number, "a", [NAN], "a")


def test_spike_arguments_check_numpy_and_pass_tensors_through():
    q, d = spike_arguments(0.3, 0.5)
    assert float(q) == 0.3 and d == 0.5 and isinstance(d, float)
    q32 = np.array([0.25, 0.5], dtype=np.float32)
    q, d = spike_arguments(q32, [0.1, INF])
    assert q is q32  # the caller's float dtype is kept
    np.testing.assert_array_equal(d, [0.1, INF])
    _refused(spike_arguments, "q_n", 1.5, 0.1)
    _refused(spike_arguments, "delta", 0.5, -0.1)
    torch = pytest.importorskip("torch")
    t = torch.tensor([2.0])  # out of range, but the samplers flag tensors on the device
    assert spike_arguments(t, 0.1)[0] is t
    assert as_probs_or_tensor(t, "q") is t
    assert math.isclose(as_probs_or_tensor([0.25, 0.75], "q").sum(), 1.0)
