"""Recovery weights by blocks (samplers/_blocked.py): block sums in one read, the spike's block
summed again, the formula at one block's columns.

Checked against the dense residual (``_residual_weights`` of the dense h with its spike) on
the same rows, for spikes in the first, a middle and the short last block, vocabularies
shorter than a block and multiples of it, empty residuals (h = p), the safety net (h not
finite) and compiled against eager; and the draw's law against the dense weights by
enumeration of the uniform's quantiles.
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token, h target.
"""

import pytest
import torch

from cactus_theory.rules.plans import RowTarget, _residual_weights
from cactus_theory.samplers import inverse_cdf_sample
from cactus_theory.samplers._blocked import BlockWeights, point_mass_weights, residual_block_weights
from cactus_theory.samplers._fused import block_sums as _block_sums

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(B, V, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.softmax(3.0 * torch.randn(B, V, generator=g), -1) * (0.5 + torch.rand(B, 1, generator=g))
    y = torch.softmax(3.0 * torch.randn(B, V, generator=g), -1) * (0.5 + torch.rand(B, 1, generator=g))
    return x, y


def _spike_target(x, ids, gamma):
    sx = x.sum(-1, keepdim=True)
    q_n = torch.gather(x, -1, ids) / sx
    scale = (1 - gamma) / (1 - q_n) / sx
    return RowTarget(lambda xv, yv, sc: xv * sc, (scale,), ids, gamma)


def _dense(target, x, y):
    """The dense reference: h at every column (the spike written in), then the residual."""
    h = target.h(x, y)
    if target.spike_ids is not None:
        h = h.scatter(-1, target.spike_ids, target.spike_values)
    return _residual_weights(h, y / y.sum(-1, keepdim=True))


@pytest.mark.parametrize("V", [1, 100, 256, 1000, 2048])
def test_block_weights_equal_the_dense_residual(V):
    """Block sums and values equal the dense residual's (float32, a different summation order:
    1e-6 of a row's mass), for spikes at column 0, in the middle and at the last column (the
    short last block when 256 does not divide V)."""
    B = 6
    x, y = _rows(B, V, seed=V)
    ids = torch.tensor([0, V // 2, V - 1, V // 3, 0, V - 1])[:, None]
    gamma = torch.tensor([0.9, 0.5, 0.999, 0.2, 1.0, 0.05])[:, None]
    t = _spike_target(x, ids, gamma)
    bw = residual_block_weights(t, x, y, y.sum(-1))
    dense = _dense(t, x, y)
    mass = dense.sum(-1, keepdim=True)
    torch.testing.assert_close(bw.dense() / mass, dense / mass, rtol=0, atol=1e-6)
    torch.testing.assert_close(bw.block_sums / mass, _block_sums(dense, 256) / mass, rtol=0, atol=1e-6)
    assert bw.block_sums.shape == (B, -(-V // 256))


def test_empty_residual_rows_draw_from_h():
    """Where h = p the residual is empty (convention 3): the weights are h itself, while the
    other rows keep their residual."""
    x, y = _rows(4, 700, seed=1)
    y[1] = x[1]  # p = q on row 1, bit for bit
    # SpS, h = q = x / s_q by division, as the driver divides y by s_p: bit for bit p on row 1
    s_q = x.sum(-1, keepdim=True)
    t = RowTarget(lambda xv, yv: xv / s_q)
    bw = residual_block_weights(t, x, y, y.sum(-1))
    w = bw.dense()
    q1 = x[1] / x[1].sum()
    torch.testing.assert_close(w[1], q1, rtol=0, atol=1e-7)
    assert (w[0] < q1.max()).all() and w[0].sum() < 1.0  # a residual, not h
    torch.testing.assert_close(bw.block_sums[1], _block_sums(q1[None], 256)[0], rtol=0, atol=1e-6)


def test_a_target_without_finite_mass_falls_back_to_q():
    """The safety net: a row whose h is not finite draws from q's rows (never reached by a
    rule on valid input), the other rows are untouched."""
    x, y = _rows(3, 600, seed=2)
    bad = torch.tensor([[False], [True], [False]])
    inv = 1.0 / x.sum(-1, keepdim=True)
    t = RowTarget(lambda xv, yv: torch.where(bad, float("nan"), xv * inv))
    bw = residual_block_weights(t, x, y, y.sum(-1))
    w = bw.dense()
    torch.testing.assert_close(w[1], x[1], rtol=0, atol=0)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(bw.block_sums[1], _block_sums(x[1:2], 256)[0], rtol=1e-6, atol=0)


def test_the_draw_from_block_weights_follows_the_dense_weights():
    """inverse_cdf_sample on BlockWeights and on the dense weights, at the same uniforms
    (quantiles spread over [0, 1)): the same tokens, so the same law."""
    B, V = 5, 900
    x, y = _rows(B, V, seed=3)
    ids = torch.tensor([[5], [300], [899], [256], [511]])
    gamma = torch.full((B, 1), 0.7)
    t = _spike_target(x, ids, gamma)
    bw = residual_block_weights(t, x, y, y.sum(-1))
    dense = _dense(t, x, y)
    for u in torch.linspace(0.0, 0.999, 41, dtype=torch.float64):
        uu = torch.full((B, 1), float(u), dtype=torch.float64)
        a = inverse_cdf_sample(bw, uniforms=uu)
        b = inverse_cdf_sample(dense, uniforms=uu)
        # equal unless u lands within float32 rounding of a CDF step (these quantiles do not)
        assert torch.equal(a, b), float(u)
        assert (torch.gather(dense, -1, a[:, None]) > 0).all()  # never a zero weight


def test_compiled_block_weights_equal_eager():
    """The compiled form (what fused samplers run) equals the eager one: the same sums and
    values up to float32 operation order (1e-6 of the mass)."""
    x, y = _rows(4, 1000, seed=4)
    ids = torch.tensor([[0], [999], [500], [255]])
    gamma = torch.tensor([[0.9], [0.3], [0.6], [0.99]])

    def f(x, y, ids, gamma):
        bw = residual_block_weights(_spike_target(x, ids, gamma), x, y, y.sum(-1))
        return bw.block_sums, bw.dense()

    eager = f(x, y, ids, gamma)
    compiled = torch.compile(f, dynamic=False)(x, y, ids, gamma)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert isinstance(residual_block_weights(_spike_target(x, ids, gamma), x, y, y.sum(-1)), BlockWeights)


@pytest.mark.parametrize("V", [1, 255, 256, 1000])
def test_point_mass_weights_draw_their_token_whatever_the_uniform(V):
    """A point mass by blocks (TAS's argmax recovery): the dense weights are the one-hot row,
    the block sums its block sums, and the draw returns the token at every uniform, the
    extremes included."""
    ids = torch.tensor([0, V - 1, V // 2, min(255, V - 1)])
    pm = point_mass_weights(ids, V)
    dense = torch.nn.functional.one_hot(ids, V).to(torch.float32)
    assert torch.equal(pm.dense(), dense)
    assert torch.equal(pm.block_sums, _block_sums(dense, 256))
    for u in (0.0, 0.3, 0.999999):
        uu = torch.full((4, 1), u, dtype=torch.float64)
        assert torch.equal(inverse_cdf_sample(pm, uniforms=uu), ids)
