"""Top-k's acceptance kernel (samplers/_kernels/topk.py): x_n >= the k-th largest entry (two
levels: block maxima, then the k best blocks) is the rule's count #{j: x_j > x_n} < k, exactly,
ties included, on rows long enough for the two-level search."""

import pytest
import torch

from cactus_theory.rules import get_rule
from cactus_theory.samplers._kernels import kernels_for
from cactus_theory.samplers._kernels.topk import KTH_BLOCK, kth_largest


@pytest.mark.parametrize("V", [60, 4 * 5 * KTH_BLOCK + 1, 6000 + KTH_BLOCK // 2])
@pytest.mark.parametrize("topk", [1, 5])
def test_accept_equals_the_count_with_ties(V, topk):
    """Integer-valued rows (many ties: at most 40 distinct values) and smooth rows; the first
    draft of every row is a token holding the row's k-th largest value (the tie the two
    forms must agree on), the others random, in every block (the short last one included)."""
    rule = get_rule("topk", topk=topk)
    accept = kernels_for(rule).accept_from_rows
    g = torch.Generator().manual_seed(V + topk)
    B, k = 6, 3
    for smooth in (False, True):
        x = (
            torch.rand(B, k, V, generator=g) ** 4
            if smooth
            else torch.randint(0, 40, (B, k, V), generator=g).float()
        )
        ids = torch.randint(0, V, (B, k), generator=g)
        kth = x.topk(topk, dim=-1).values[..., -1:]
        ids[:, 0] = (x[:, 0] == kth[:, 0]).to(torch.uint8).argmax(-1)
        ids[:, 1] = V - 1  # the last block
        x_n = torch.gather(x, -1, ids[..., None])
        count = ((x > x_n).sum(-1) < topk).to(torch.float32)
        got = accept(rule, x, x, ids, x.sum(-1), x.sum(-1))
        assert torch.equal(got, count), (smooth, got, count)
        assert torch.equal(kth_largest(x, topk), kth)
