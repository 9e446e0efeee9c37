"""vLLM V1's ragged layout (``samplers/v1.py``): ragged_forward against the V0 layout, request by
request, with no draft probabilities (n-gram proposers), bad counts, and the parsed output's
statistics (engines.md sections 1.9-1.10).
"""

import numpy as np
import pytest
import torch
from sampler_batches import random_batch

from cactus_theory.samplers import (
    V1Stats,
    make_sampler,
    parse_output,
    ragged_forward,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "tas", "cascade-opt"])
def test_v1_adapter_agrees_with_v0_layout(name):
    B, k, V = 5, 3, 8
    q, bonus, p, ids = random_batch(B, k, V, seed=5)
    s = make_sampler(name)
    gens = lambda: {i: torch.Generator().manual_seed(100 + i) for i in range(B)}  # noqa: E731
    v0 = s(q, bonus, p, ids, seeded_seqs=gens())
    v1 = ragged_forward(
        s, ids.reshape(-1), [k] * B, p.reshape(-1, V), q[:, :k].reshape(-1, V), bonus, generators=gens()
    )
    assert v1.dtype == torch.int32 and torch.equal(v1.long(), v0)
    # ragged: request i with k_i drafts = V0 on that request alone with the same generator
    ks = [3, 0, 1, 2, 3]
    flat = torch.cat([ids[i, : ks[i]] for i in range(B)])
    fq = torch.cat([q[i, : ks[i]] for i in range(B)])
    fp = torch.cat([p[i, : ks[i]] for i in range(B)])
    out = ragged_forward(
        s,
        flat,
        None,
        fp,
        fq,
        bonus,
        cu_num_draft_tokens=np.cumsum(ks).tolist(),
        generators=gens(),
        max_spec_len=4,
    )
    assert out.shape == (B, 5)
    for i, ki in enumerate(ks):
        if ki == 0:
            assert out[i].tolist() == [int(bonus[i])] + [-1] * 4
            continue
        g = {0: torch.Generator().manual_seed(100 + i)}
        alone = s(
            q[i : i + 1, : ki + 1], bonus[i : i + 1], p[i : i + 1, :ki], ids[i : i + 1, :ki], seeded_seqs=g
        )
        assert out[i, : ki + 1].tolist() == alone[0].tolist()
        assert torch.all(out[i, ki + 1 :] == -1)
    stats_ = V1Stats.from_output(out, ks, V)
    parsed = parse_output(out, V)
    assert stats_.num_drafts == 4 and stats_.num_draft_tokens == sum(ks)
    assert stats_.num_accepted_tokens == sum(len(r) - 1 for r, ki in zip(parsed, ks) if ki)
    assert stats_.mean_acceptance_length == 1 + stats_.num_accepted_tokens / 4


def test_v1_no_draft_probs_is_point_mass():
    """draft_probs=None (n-gram proposers): SpS accepts with q_n, as vLLM V1 (engines.md 1.9)."""
    B, k, V = 4, 2, 6
    q, bonus, _, ids = random_batch(B, k, V, seed=6)
    s = make_sampler("sps")
    gens = lambda: {i: torch.Generator().manual_seed(i) for i in range(B)}  # noqa: E731
    a = ragged_forward(s, ids.reshape(-1), [k] * B, None, q[:, :k].reshape(-1, V), bonus, generators=gens())
    onehot = torch.nn.functional.one_hot(ids, V).float()
    b = s(q, bonus, onehot, ids, seeded_seqs=gens())
    assert torch.equal(a.long(), b)


def test_v1_bad_counts_raise():
    s = make_sampler("sps")
    q, bonus, p, ids = random_batch(2, 2, 4)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        ragged_forward(s, ids.reshape(-1), [1, 1], p.reshape(-1, 4), q[:, :2].reshape(-1, 4), bonus)
