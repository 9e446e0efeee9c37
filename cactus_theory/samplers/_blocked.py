r"""Recovery weights known by their block sums and a formula at one block (compiled samplers).

The samplers draw the recovered token by a two-level inverse CDF
(:func:`~cactus_theory.samplers.base.inverse_cdf_sample`): the sums of 256-token blocks, then
the weights of one block. For a rule whose recovery is the residual of an elementwise target
(convention 3),

.. math:: w = \max(0, h - p) \ \text{if}\ \textstyle\sum_i \max(0, h_i - p_i) > 0,
          \ \text{else}\ h,

the compiled core (``fused=True``) needs neither w nor h over the vocabulary: one read of
the recovery rows gives the block sums of :math:`\max(0, h - p)` and of h (and of q, the
safety net), and the chosen block's weights are the formula at its 256 columns. The rule
supplies h as an elementwise function of the un-normalized rows (x = q s_q, y = p s_p) and
per-row constants (:class:`~cactus_theory.rules.plans.RowTarget`), and optionally a
**spike**: one column per row (Cactus's drafted token n, :math:`h_n = \gamma_n`) where h
takes another value. The spike is left out of the read over the vocabulary (an index
compare there costs as much as the read) and put back in the sums of the one block that
holds it, summed again exactly from its 256 columns.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, h the
rule's target, w the recovery weights.
"""

from __future__ import annotations

import torch

from ..conventions import EMPTY_RESIDUAL_MASS
from ..rules.plans import RowTarget, _spike_row_scale
from ._fused import CDF_BLOCK, block_sums


class BlockWeights:
    """Recovery weights [B, V] known by their block sums and their values at given columns.

    Attributes
    ----------
    shape : tuple
        (B, V).
    block_sums : Tensor
        [B, ceil(V / 256)] float32.
    """

    def __init__(self, shape, block_sums, at):
        self.shape = tuple(shape)
        self.block_sums = block_sums
        self._at = at

    def at(self, idx: torch.Tensor) -> torch.Tensor:
        """The weights at columns ``idx`` ([B, m] int64, in range), [B, m] float32."""
        return self._at(idx)

    def dense(self) -> torch.Tensor:
        """All the weights, [B, V] (checks and tests; the samplers never build it)."""
        B, V = self.shape
        idx = torch.arange(V, device=self.block_sums.device).expand(B, V)
        return self._at(idx)


def residual_block_weights(
    target: RowTarget, x: torch.Tensor, y: torch.Tensor, draft_sums: torch.Tensor, blk: int = CDF_BLOCK
) -> BlockWeights:
    r"""The residual recovery weights of a :class:`RowTarget`, by blocks, with q as safety net.

    .. math:: w = \max(0, h - y/s_p)\ \text{where}\ \textstyle\sum_i \max(0, h_i - y_i/s_p)
              > 0\ (\text{else}\ h); \quad w = x\ \text{where the sum of that is not finite
              and positive}

    (the last is never reached for valid input; :func:`~.base.inverse_cdf_sample`'s
    fallback). One read of ``x`` and ``y`` for the three block sums (no [B, V] buffer once
    compiled), then the block holding the spike summed again from its 256 columns.

    Parameters
    ----------
    target : RowTarget
        The rule's h on these rows.
    x, y : Tensor, shape (B, V)
        Verifier and drafter rows, un-normalized (any float dtype; computed in float32).
    draft_sums : Tensor, shape (B,)
        Positive row sums of ``y``.

    Returns
    -------
    BlockWeights
        Proportional to the eager ``Rule.recovery_weights_at`` on the normalized rows, up to
        float32 rounding.
    """
    B, V = x.shape
    # p = y * (1 / s_p), as the rules write p (and q) in their targets: where h = p bit for
    # bit, the residual is empty (convention 3), not rounding noise
    inv_sy = 1.0 / draft_sums.to(torch.float32)[:, None]
    h = target.h
    x32, y32 = x.to(torch.float32), y.to(torch.float32)
    h_all = h(x32, y32)
    # one read once compiled: the residual's, h's and q's block sums, the spike left out
    res_b = block_sums((h_all - y32 * inv_sy).clamp_min(0.0), blk)
    h_b = block_sums(h_all, blk)
    x_b = block_sums(x32, blk)
    cols = torch.arange(blk, device=x.device)

    def exact_at(idx):  # h and the residual at columns idx, the spike included
        xc = torch.gather(x, -1, idx).to(torch.float32)
        yc = torch.gather(y, -1, idx).to(torch.float32)
        hc = h(xc, yc)
        if target.spike_ids is not None:
            hc = torch.where(idx == target.spike_ids, target.spike_values.to(hc.dtype), hc)
        return xc, hc, (hc - yc * inv_sy).clamp_min(0.0)

    if target.spike_ids is not None:
        # the spike's block, summed again from its columns (the spike's value in place)
        b_n = torch.div(target.spike_ids, blk, rounding_mode="floor")  # [B, 1]
        idx = b_n * blk + cols
        inside = idx < V
        _, hc, rc = exact_at(idx.clamp(max=V - 1))
        zero = torch.zeros((), dtype=hc.dtype, device=x.device)
        at_n = torch.arange(res_b.shape[-1], device=x.device) == b_n  # [B, blocks]
        res_b = torch.where(at_n, torch.where(inside, rc, zero).sum(-1, keepdim=True), res_b)
        h_b = torch.where(at_n, torch.where(inside, hc, zero).sum(-1, keepdim=True), h_b)
    empty = res_b.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
    sums = torch.where(empty, h_b, res_b)
    mass = sums.sum(-1, keepdim=True)
    use_q = ~(torch.isfinite(mass) & (mass > 0))
    sums = torch.where(use_q, x_b, sums)

    def at(idx):
        xc, hc, rc = exact_at(idx)
        return torch.where(use_q, xc, torch.where(empty, hc, rc))

    return BlockWeights((B, V), sums, at)


def _scaled(x, y, scale):
    """Theorem 2's target off the spike, :math:`c_n q_i` (``scale`` = :math:`c_n / s_q`)."""
    return x * scale


def spike_row_target(target_rows, token_ids, target_sums, gamma) -> RowTarget:
    r"""Theorem 2's :math:`h^{(n)}` of a spike rule on un-normalized rows, from the drafted
    tokens' :math:`\gamma_n` alone: :math:`h_i = c_n x_i / s_q` with
    :math:`c_n = (1-\gamma_n)/(1-q_n)`, and the spike :math:`h_n = \gamma_n` at the drafted
    token (:func:`~cactus_theory.rules.plans._spike_target_at` on the rows x = q s_q).

    Parameters
    ----------
    target_rows : Tensor, shape (B, V)
        Verifier rows, un-normalized (float32).
    token_ids : Tensor, shape (B,), int64
        The drafted tokens n.
    target_sums : Tensor, shape (B,)
        Positive row sums s_q.
    gamma : Tensor, shape (B,)
        :math:`\gamma_n`.
    """
    g = gamma.to(torch.float32)
    scale = _spike_row_scale(target_rows, token_ids, g, target_sums)[..., None]
    return RowTarget(_scaled, (scale,), token_ids[..., None], g[..., None])


def point_mass_weights(token_ids: torch.Tensor, vocab_size: int, blk: int = CDF_BLOCK) -> BlockWeights:
    """The weights of a point mass at ``token_ids`` ([B] int64) over ``vocab_size`` columns, by
    blocks: block sums 1 at the token's block, 0 elsewhere; the inverse CDF then draws the
    token whatever the uniform. No read of the rows (TAS's argmax recovery)."""
    ids = token_ids[:, None]
    blocks = torch.arange(-(-vocab_size // blk), device=ids.device)
    sums = (blocks == torch.div(ids, blk, rounding_mode="floor")).to(torch.float32)

    def at(idx):
        return (idx == ids).to(torch.float32)

    return BlockWeights((ids.shape[0], vocab_size), sums, at)
