"""The Hypothesis strategies (``testing/strategies.py``): pairs of every kind and the three
layouts of a generated draft batch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import cactus_theory as ct
from cactus_theory.testing import strategies as cts


def _kind_property(kind, q, p):
    if kind == "one_hot_p":
        return np.count_nonzero(p) == 1
    if kind == "disjoint":
        return not np.any((q > 0) & (p > 0))
    if kind == "near_zero_q":  # mass <= 1e-6 on a token the drafter gives >= 1/(3V)
        return np.any((q > 0) & (q <= 1e-6 * (1 + 1e-9)) & (p >= 1 / (3 * len(q))))
    if kind == "half":  # on the float16 grid, summing to 1 in float16 as in float64
        return all(np.array_equal(x.astype(np.float16).astype(np.float64), x) for x in (q, p))
    if kind == "large_vocab":
        return len(q) >= 2**12
    return True


@pytest.mark.parametrize("kind", cts.PAIR_KINDS)
def test_pairs_of_every_kind_are_probability_rows_with_their_property(kind):
    @given(cts.pairs(2, 48, kinds=(kind,)))
    def run(qp):
        q, p = qp
        assert q.shape == p.shape and q.dtype == np.float64
        for x in (q, p):
            assert np.all(x >= 0) and abs(x.sum() - 1) < 1e-12
        assert _kind_property(kind, q, p)
        if kind == "truncated":
            assert np.count_nonzero(q) >= 1 and np.count_nonzero(p) >= 1

    run()


@given(cts.pairs(max_vocab=24, exact_float32=True))
def test_exact_float32_pairs_are_their_float32_values(qp):
    for x in qp:
        assert np.array_equal(x.astype(np.float32).astype(np.float64), x) and x.sum() == 1


@given(cts.draft_batches(max_requests=4, max_drafts=3, max_vocab=12))
def test_the_three_layouts_describe_the_same_batch(batch):
    v1 = batch.v1()
    counts = batch.num_draft_tokens
    assert v1["num_draft_tokens"] == counts and v1["cu_num_draft_tokens"].tolist() == list(np.cumsum(counts))
    start = 0
    pad = batch.padded()
    cu = pad["cu_num_logits"].tolist()
    assert cu[0] == 0 and len(cu) == len(counts) + 1
    for r, k in enumerate(counts):
        q, p, n = batch.target_probs[r], batch.draft_probs[r], batch.draft_token_ids[r]
        assert np.all(p[np.arange(k), n] > 0)  # drafts are drawn from p
        sl = slice(start, start + k)
        assert v1["draft_token_ids"][sl].tolist() == n.tolist()
        np.testing.assert_array_equal(v1["target_probs"][sl].numpy(), q[:k].astype(np.float32))
        np.testing.assert_array_equal(v1["draft_probs"][sl].numpy(), p.astype(np.float32))
        start += k
        s = cu[r]
        assert cu[r + 1] - s == k + 1
        assert pad["draft_sampled"][s + 1 : s + k + 1].tolist() == n.tolist()
        np.testing.assert_array_equal(pad["target_probs"][s : s + k + 1].numpy(), q.astype(np.float32))
        assert not pad["draft_probs"][r, k:].any()
    if len(set(counts)) == 1:
        v0 = batch.v0()
        assert v0["target_with_bonus_probs"].shape == (len(counts), counts[0] + 1, batch.vocab_size)
        assert v0["draft_token_ids"].tolist() == [n.tolist() for n in batch.draft_token_ids]
    else:
        with pytest.raises(ValueError, match="num_draft_tokens"):
            batch.v0()


@given(cts.draft_batches(max_requests=3, max_drafts=3, max_vocab=10, ragged=False, exact_float32=True))
def test_the_toolkits_sampler_verifies_every_generated_v0_batch(batch):
    """Generated batches are valid sampler input: the output keeps the V0 layout."""
    v0 = batch.v0()
    out = ct.make_sampler("sps")(**v0)
    k = v0["draft_token_ids"].shape[1]
    present = out != -1
    assert present[:, 0].all() and not (present[:, 1:] & ~present[:, :-1]).any()
    accepted = present[:, 1:]
    assert (out[:, :k][accepted] == v0["draft_token_ids"][accepted]).all()
