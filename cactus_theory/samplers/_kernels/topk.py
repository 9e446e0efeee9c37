r"""Top-k's speed paths (:class:`~cactus_theory.rules._topk.TopKAcceptance`): the k-th largest
entry of the un-normalized rows in two levels (block maxima, then the entries of the k blocks
with the largest maxima), for the acceptance and the recovery.
"""

from __future__ import annotations

import math

import torch

from ...rules.internal import TopKAcceptance
from ...rules.plans import RowTarget
from ._registry import RuleKernels, register_kernels
from .blocks import block_maxima
from .residual import residual_weights_

__all__ = ["kth_largest"]

#: Block length of :func:`kth_largest`'s two-level search.
KTH_BLOCK = 256


def accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r""":math:`\#\{j : x_j > x_n\} < k` on un-normalized rows (scaling a row keeps its order),
    as :math:`x_n \ge x_{(k)}`, the row's k-th largest entry with ties counted
    (:func:`kth_largest`).

    The two agree exactly: if :math:`x_n \ge x_{(k)}`, every entry above :math:`x_n` is above
    :math:`x_{(k)}`, and at most k - 1 are; if :math:`x_n < x_{(k)}`, the k entries at or
    above :math:`x_{(k)}` are above :math:`x_n`. :func:`kth_largest` reads the rows' block
    maxima (in the loop of the compiled samplers' row sums) and the k best blocks, not the
    whole row a second time: a drafted token's test costs a gather, not a pass. The samplers
    call it with the raw rows and their sums; dividing a row by its positive sum keeps every
    strict order except between entries that round to the same float32 quotient (a tie the
    normalized comparison would accept).
    """
    x_n = torch.gather(target_rows, -1, token_ids[..., None])
    kth = kth_largest(target_rows, min(rule.topk, target_rows.shape[-1]))
    return (x_n >= kth)[..., 0].to(torch.float32)


def recovery_weights(rule, target_probs, draft_probs, token_ids):
    r"""Recovery weights :math:`\max(0, 1[q_x \ge q_{(k)}] - p_x)` (the plan's, un-normalized),
    the k-th largest entry by :func:`kth_largest` instead of a sort of the vocabulary."""
    kth = kth_largest(target_probs, min(rule.topk, target_probs.shape[-1]))
    return residual_weights_((target_probs >= kth).to(target_probs.dtype), draft_probs)


def _indicator(x, y, kth):
    r""":math:`1[x \ge x_{(k)}]` in float32."""
    return (x >= kth).to(torch.float32)


def recovery_target_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r""":math:`h = 1[x \ge x_{(k)}]` on un-normalized rows (scaling keeps the order; the
    compiled samplers' recovery): the k-th largest entry by :func:`kth_largest`, one read."""
    kth = kth_largest(target_rows, min(rule.topk, target_rows.shape[-1]))
    return RowTarget(_indicator, (kth,))


def kth_largest(x, k: int):
    r"""The k-th largest entry of each row of a torch tensor (ties counted), shape [..., 1].

    Two levels, exact: with the maxima of 256-entry blocks, every entry at or above the
    row's k-th largest value :math:`x_{(k)}` lies in one of the k blocks with the largest
    maxima (the k-th largest block maximum :math:`T` has k entries at or above it, so
    :math:`x_{(k)} \ge T`; an entry :math:`\ge x_{(k)}` outside those blocks equals
    :math:`T = x_{(k)}`, a tie that leaves the value unchanged). So :math:`x_{(k)}` is the
    k-th largest of those k blocks' entries: one read of the row for the block maxima, then
    ``topk`` over ``ceil(V/256)`` maxima and over 256 k candidates, instead of ``topk`` over
    V entries (about 25x slower on a CPU at V = 151,936). Short rows (k blocks cover a
    quarter of them) take ``topk`` directly.
    """
    V = x.shape[-1]
    blk = KTH_BLOCK
    if 4 * k * blk > V:
        return x.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    lead = x.shape[:-1]
    maxima = block_maxima(x, blk)
    blocks = maxima.topk(k, dim=-1, sorted=False).indices  # [..., k]
    idx = (blocks[..., None] * blk + torch.arange(blk, device=x.device)).reshape(*lead, k * blk)
    cand = torch.gather(x, -1, idx.clamp(max=V - 1))
    cand = torch.where(idx < V, cand, torch.full_like(cand, -math.inf))  # past the last entry
    return cand.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)


register_kernels(
    TopKAcceptance,
    RuleKernels(
        accept_from_rows=accept_from_rows,
        recovery_weights=recovery_weights,
        recovery_target_from_rows=recovery_target_from_rows,
    ),
)
