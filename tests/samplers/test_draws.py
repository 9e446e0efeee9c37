"""``cactus_theory.samplers.draws``: the samplers' random draws.

:func:`inverse_cdf_sample` (one uniform per row, a two-level search over 256-token blocks)
against its law by chi-square (:data:`test_kernels.ALPHA`), at block edges, on point masses and
subnormal weights, with its fallback rows and per-row generators; :func:`exponential_race` on
zero weights and per-row generators (its law: ``tests/samplers/test_samplers.py``).
"""

import numpy as np
import pytest
import torch
from test_kernels import _chisquare_ok  # chi-square at test_kernels.ALPHA

from cactus_theory.samplers import exponential_race, inverse_cdf_sample

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_inverse_cdf_sample_law_and_zero_weights():
    """Index j w.p. w_j / sum w (un-normalized weights); zero weights, first and last
    included, are never drawn."""
    w = torch.tensor([0.0, 1.0, 3.0, 0.5, 0.0, 2.5, 0.0]) * 7.0
    torch.manual_seed(3)
    idx = inverse_cdf_sample(w.expand(40_000, 7))
    assert idx.dtype == torch.int64 and idx.shape == (40_000,)
    counts = np.bincount(idx.numpy(), minlength=7)
    assert _chisquare_ok(counts.astype(float), (w / w.sum()).double().numpy(), 40_000)


def test_inverse_cdf_sample_law_across_blocks():
    """V = 700: two full blocks of 256 and a tail of 188. A block of zeros, zeros inside a
    block, mass on both sides of block edges and in the tail: chi-square over the positive
    cells (n = 60,000, ALPHA); zero weights never drawn; seeded rows reproduce."""
    V = 700
    w = torch.zeros(V)
    w[256:260] = torch.tensor([1.0, 0.0, 2.0, 0.5])  # block 1 starts; block 0 is all zero
    w[500:512] = 0.25  # runs into the tail block at 512
    w[513] = 3.0
    w[V - 1] = 1.5  # the last token
    w[300] = 1e-3  # a small weight
    torch.manual_seed(4)
    n = 60_000
    idx = inverse_cdf_sample(w.expand(n, V))
    counts = np.bincount(idx.numpy(), minlength=V).astype(float)
    assert _chisquare_ok(counts, (w / w.sum()).double().numpy(), n)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    a = inverse_cdf_sample(w.expand(3, V), gens)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    assert torch.equal(a, inverse_cdf_sample(w.expand(3, V), gens))


def test_inverse_cdf_sample_point_masses_and_tiny_weights():
    rows = torch.tensor([[0.0, 0.0, 1e-30], [5.0, 0.0, 0.0], [0.0, 1e-38, 0.0], [1.0, 1e-7, 0.0]])
    wide = torch.zeros(3, 1000)
    wide[0, 999] = 1e-30  # the last token, in the tail block
    wide[1, 256] = 2.0  # the first token of a block
    wide[2, 255] = 1e-38  # the last token of a block (subnormal weight)
    torch.manual_seed(0)
    for _ in range(50):
        idx = inverse_cdf_sample(rows)
        assert idx[:3].tolist() == [2, 0, 1]
        assert idx[3] in (0, 1)
        assert inverse_cdf_sample(wide).tolist() == [999, 256, 255]


def test_inverse_cdf_sample_fallback_rows():
    """Rows whose weights sum to 0, NaN or inf draw from ``fallback`` (the samplers' safety
    net: q); the other rows ignore it."""
    V = 600
    w = torch.zeros(4, V)
    w[0, 10] = 1.0  # a valid row: always 10
    w[2, 5] = float("nan")
    w[3, 7] = float("inf")
    fb = torch.zeros(4, V)
    fb[:, 590] = 1.0  # the fallback: always 590 (in the tail block)
    torch.manual_seed(1)
    for _ in range(20):
        assert inverse_cdf_sample(w, fallback=fb).tolist() == [10, 590, 590, 590]


def test_inverse_cdf_sample_seeded_rows():
    """A row with a generator draws one float64 uniform from it: its index depends only on its
    weights and its generator, not on the other rows or the default generator."""
    w = torch.rand(5, 40, generator=torch.Generator().manual_seed(1))
    gens = lambda: [torch.Generator().manual_seed(10 + i) for i in range(5)]  # noqa: E731
    a = inverse_cdf_sample(w, gens())
    torch.manual_seed(123)
    assert torch.equal(a, inverse_cdf_sample(w, gens()))
    alone = inverse_cdf_sample(w[2:3], [torch.Generator().manual_seed(12)])
    assert alone[0] == a[2]
    mixed = inverse_cdf_sample(w, [None, None, torch.Generator().manual_seed(12), None, None])
    assert mixed[2] == a[2]
    # the uniform it used: u = the generator's first float64 draw (one block here: the index
    # is the plain inverse CDF's)
    u = torch.rand(1, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    cdf = torch.cumsum(w[2].double(), 0)
    assert int(a[2]) == int(torch.searchsorted(cdf, u * cdf[-1], right=True))


def test_exponential_race_never_draws_a_zero_weight_and_follows_its_generators():
    """A zero weight never wins (E is clamped above 0, so 0/E is 0, never NaN); a row with a
    generator draws its V exponentials from it: the same generators give the same indices,
    whatever the default generator does."""
    w = torch.tensor([[0.0, 2.0, 0.0, 1.0, 0.0]]).expand(2_000, 5)
    torch.manual_seed(5)
    idx = exponential_race(w)
    assert idx.dtype == torch.int64 and set(idx.tolist()) <= {1, 3}
    rows = torch.rand(4, 30, generator=torch.Generator().manual_seed(2))
    gens = lambda: [torch.Generator().manual_seed(20 + i) for i in range(4)]  # noqa: E731
    a = exponential_race(rows, gens())
    torch.manual_seed(99)
    assert torch.equal(a, exponential_race(rows, gens()))
    mixed = exponential_race(rows, [None, torch.Generator().manual_seed(21), None, None])
    assert mixed[1] == a[1]
