"""``cactus_theory.distributions``: the one sampling transform and the synthetic families.

The transform is checked against a reference written here from the module docstring's five
steps, one row at a time in plain Python (sort by decreasing logit, equal logits by increasing
token id; divide by T; keep the first k; keep a token while the mass strictly before it is below
top_p; renormalize), on rows with ties and zero probabilities, in numpy and in torch, dense and
sparse. The families are checked for what the docstring promises: shapes, rows on the simplex,
a seed that reproduces them, and one ValueError naming each bad argument.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cactus_theory.distributions import (
    FAMILIES,
    PAPER_TRUNCATION,
    _process_sorted_logits,
    _sampling_transform,
    _top_candidates,
    softmax,
    synthetic_pairs,
    truncate,
)

#: float64 sums and exponentials of at most 64 terms: a few ulps per term, far below 1e-12
ATOL = 1e-12


def _reference(row_logits, temperature=1.0, top_k=None, top_p=None):
    """The module docstring's steps 1-5 on one row, in plain Python floats."""
    V = len(row_logits)
    order = sorted(range(V), key=lambda i: (-row_logits[i], i))  # step 1: the tie rule
    out = [0.0] * V
    if temperature == 0:  # step 2, greedy: a one-hot on the first token of the order
        out[order[0]] = 1.0
        return out
    s = [z / temperature for z in row_logits]
    if top_k is not None and top_k > 0:  # step 3
        order = order[:top_k]
    order = [i for i in order if s[i] > -math.inf]
    m = s[order[0]]
    w = {i: math.exp(s[i] - m) for i in order}
    total = sum(w.values())
    if top_p is not None and top_p < 1:  # step 4: the mass strictly before a token below top_p
        kept, before = [], 0.0
        for i in order:
            if not kept or before < top_p:
                kept.append(i)
            before += w[i] / total
        order = kept
    total = sum(w[i] for i in order)  # step 5
    for i in order:
        out[i] = w[i] / total
    return out


def _rows_with_ties(seed, n=40, V=9):
    """Logits drawn from a few levels (so rows have ties), some tokens at -inf (probability 0)."""
    rng = np.random.default_rng(seed)
    z = rng.choice([-2.0, -0.5, 0.0, 0.7, 1.5], size=(n, V))
    z[rng.random((n, V)) < 0.2] = -np.inf
    z[:, rng.integers(V)] = 0.7  # at least one finite logit per row
    return z


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, None, None), (0.6, 20, 0.95), (0.6, 3, None), (1.3, None, 0.5), (0.0, None, None), (0.8, 1, 0.3)],
)
def test_the_transform_follows_the_documented_steps(temperature, top_k, top_p):
    z = _rows_with_ties(0)
    got = _sampling_transform(z, temperature=temperature, top_k=top_k, top_p=top_p)
    want = np.array([_reference(list(r), temperature, top_k, top_p) for r in z])
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=ATOL)


def test_the_tie_rule_keeps_the_lower_token_id():
    # the docstring's example: two tokens at 0.3, top-k 2 keeps the 0.4 and token 0
    got = _sampling_transform(np.log([0.3, 0.3, 0.4]), top_k=2)
    np.testing.assert_allclose(got, [0.3 / 0.7, 0.0, 0.4 / 0.7], rtol=0, atol=ATOL)
    # greedy on a tie: the first token of the order, the lower id
    np.testing.assert_array_equal(_sampling_transform(np.log([0.2, 0.4, 0.4]), temperature=0), [0, 1, 0])


def test_top_p_keeps_a_token_while_the_mass_before_it_is_below_p():
    q = np.array([0.5, 0.3, 0.2])
    # mass before the tokens: 0, 0.5, 0.8 -> p = 0.5 keeps only the first (0.5 is not < 0.5)
    np.testing.assert_array_equal(truncate(q, top_p=0.5), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(truncate(q, top_p=0.51), [0.5 / 0.8, 0.3 / 0.8, 0.0], rtol=0, atol=ATOL)
    np.testing.assert_allclose(
        truncate(q, top_p=1.0), q, rtol=0, atol=ATOL
    )  # 1 keeps every token of positive mass


def test_the_sparse_path_is_the_dense_transform():
    z = _rows_with_ties(1)
    for k, t, top_p in [(4, 0.7, 0.9), (9, 1.0, None), (2, 0.0, None)]:
        ids, values = _top_candidates(z, k)
        sparse = np.zeros_like(z)
        np.put_along_axis(sparse, ids, _process_sorted_logits(values, temperature=t, top_p=top_p), axis=-1)
        np.testing.assert_allclose(
            sparse, _sampling_transform(z, temperature=t, top_k=k, top_p=top_p), rtol=0, atol=ATOL
        )


def test_torch_gives_the_numpy_numbers_and_keeps_its_library():
    torch = pytest.importorskip("torch")
    z = _rows_with_ties(2, n=64, V=33)
    for kw in [dict(top_k=5), dict(temperature=0.6, top_k=20, top_p=0.95), dict(temperature=0.0)]:
        got = _sampling_transform(torch.from_numpy(z), **kw)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        np.testing.assert_allclose(got.numpy(), _sampling_transform(z, **kw), rtol=0, atol=ATOL)


def test_truncate_with_the_paper_setting_is_the_transform_of_log_probs():
    q, _ = synthetic_pairs("dirichlet", 30, 50, rng=3)
    got = truncate(q, **PAPER_TRUNCATION)
    with np.errstate(divide="ignore"):
        want = np.array([_reference(list(np.log(r)), 0.6, 20, 0.95) for r in q])
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert ((got > 0).sum(-1) <= 20).all()
    np.testing.assert_allclose(truncate(q), q, rtol=0, atol=ATOL)  # the identity settings


@given(st.lists(st.floats(-30, 30), min_size=1, max_size=40))
def test_softmax_is_on_the_simplex_and_shift_invariant(z):
    z = np.array(z)
    p = softmax(z)
    assert np.all(p >= 0)
    assert abs(p.sum() - 1) <= ATOL
    np.testing.assert_allclose(softmax(z + 7.0), p, rtol=0, atol=ATOL)


def test_softmax_gives_minus_infinity_zero_probability():
    np.testing.assert_allclose(softmax([0.0, -np.inf, 0.0]), [0.5, 0.0, 0.5], rtol=0, atol=ATOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_draws_rows_on_the_simplex_reproducibly(family):
    q, p = synthetic_pairs(family, 17, 12, rng=5)
    for x in (q, p):
        assert x.shape == (17, 12) and x.dtype == np.float64
        assert np.all(x >= 0)
        np.testing.assert_allclose(x.sum(-1), 1.0, rtol=0, atol=ATOL)
    q2, p2 = synthetic_pairs(family, 17, 12, rng=5)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(p, p2)
    assert not np.array_equal(synthetic_pairs(family, 17, 12, rng=6)[0], q)


def test_the_logits_family_with_rho_one_is_a_perfect_drafter():
    q, p = synthetic_pairs("logits", 8, 10, rng=0, rho=1.0)
    np.testing.assert_allclose(p, q, rtol=0, atol=ATOL)


def test_a_tiny_dirichlet_concentration_still_gives_rows_on_the_simplex():
    q, p = synthetic_pairs("dirichlet", 50, 6, rng=0, concentration=1e-300)
    np.testing.assert_allclose(q.sum(-1), 1.0, rtol=0, atol=ATOL)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(family="gauss"), "family"),
        (dict(n_pairs=0), "n_pairs"),
        (dict(n_pairs=2.5), "n_pairs"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(concentration=0.0), "concentration"),
        (dict(scale=float("nan")), "scale"),
        (dict(t=-1.0), "t"),
        (dict(s=0.0), "s"),
        (dict(family="logits", rho=1.5), "rho"),
    ],
)
def test_bad_family_arguments_name_themselves(kwargs, argument):
    call = dict(family="dirichlet", n_pairs=3, vocab_size=4, rng=0) | kwargs
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        synthetic_pairs(**call)


@pytest.mark.parametrize(
    "kwargs, argument",
    [(dict(temperature=-0.5), "temperature"), (dict(top_k=0), "top_k"), (dict(top_p=1.5), "top_p")],
)
def test_bad_truncation_arguments_name_themselves(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        truncate(np.array([0.5, 0.5]), **kwargs)
