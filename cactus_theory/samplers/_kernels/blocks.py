r"""Blocked row passes of the samplers' speed paths (torch): sums, maxima and the argmax of
256-entry blocks of the last axis.

The loop shape of every blocked row pass of the samplers (row sums, block sums and maxima, the
divergence bounds' moments): a compiled kernel reads passes of the same shape in one loop. Used
by the rule kernels of :mod:`cactus_theory.samplers._kernels` and by :mod:`.._fused`.
"""

from __future__ import annotations

import torch

__all__ = ["ARGMAX_BLOCK", "split_blocks", "block_reduce", "block_maxima", "two_level_sum", "first_argmax"]


#: Block length of :func:`first_argmax`'s two-level search (and the default of
#: :func:`block_maxima`).
ARGMAX_BLOCK = 256


def split_blocks(x, blk: int = ARGMAX_BLOCK):
    """The last axis of ``x`` as its whole ``blk``-entry blocks and the rest, both views.

    Returns ``(whole, tail)``: ``whole`` is ``x[..., :nb * blk]`` viewed as [..., nb, blk]
    with nb = V // blk (None when nb = 0), ``tail`` is ``x[..., nb * blk:]``, [..., V % blk]
    (None when blk divides V). The loop shape of every blocked row pass here and in the
    samplers (row sums, block sums and maxima, the divergence bounds' moments): a compiled
    kernel reads passes of the same shape in one loop.
    """
    V = x.shape[-1]
    nb = V // blk
    whole = x[..., : nb * blk].unflatten(-1, (nb, blk)) if nb else None
    tail = x[..., nb * blk :] if nb * blk < V else None
    return whole, tail


def block_reduce(x, op: str, blk: int = ARGMAX_BLOCK):
    """Sums (``op="sum"``) or maxima (``op="amax"``) of consecutive ``blk``-entry blocks of
    the last axis (the last block may be shorter), [..., ceil(V / blk)], in x's dtype: one
    vectorized read of the rows."""
    whole, tail = split_blocks(x, blk)
    parts = [] if whole is None else [getattr(whole, op)(-1)]
    if tail is not None:
        parts.append(getattr(tail, op)(-1, keepdim=True))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def block_maxima(x, blk: int = ARGMAX_BLOCK):
    """Maxima of consecutive ``blk``-entry blocks of the last axis (the last block may be
    shorter), [..., ceil(V / blk)]: :func:`block_reduce` with ``"amax"``."""
    return block_reduce(x, "amax", blk)


def two_level_sum(x, fn=None, blk: int = ARGMAX_BLOCK):
    """Row sums of ``fn(x)`` (elementwise; None: x) over the last axis, taken in two levels:
    float32 sums of consecutive ``blk``-entry blocks (the last block may be shorter), then
    their sum. The loop shape of the samplers' row sums
    (:func:`~cactus_theory.samplers._fused.stats`), so that a compiled kernel reads such a
    row pass in the same loop (``fn`` is applied to the blocked views of x: a blocked view
    of a computed tensor would be stored first); a sum of terms of one sign errs by at most
    about (blk + V / blk) float32 eps, relative."""
    fn = (lambda z: z) if fn is None else fn
    whole, tail = split_blocks(x, blk)
    total = None if whole is None else fn(whole).sum(-1).sum(-1)
    if tail is not None:
        tail_sum = fn(tail).sum(-1)
        total = tail_sum if total is None else total + tail_sum
    return total


def first_argmax(x):
    r"""``torch.argmax(x, dim=-1)`` (the lowest index of the row maximum) in two levels.

    The maxima of 256-entry blocks (one vectorized read; a NaN entry makes its block's and
    the row's maximum NaN), the first block whose maximum equals the row maximum, then the
    first entry of that block equal to it: the lowest index attaining the maximum, since
    every earlier block's maximum is below it. Rows holding a NaN (invalid input, which the
    samplers flag) give an index in range, not necessarily torch's. Compiled CPU kernels
    reduce an argmax at about a third of a maximum's speed (1.16 against 0.32 ms for [8,
    151,936] float32 rows); this costs one maximum's read plus 256 entries per row.
    """
    V = x.shape[-1]
    blk = ARGMAX_BLOCK
    if V <= 4 * blk:
        return torch.argmax(x, dim=-1)
    maxima = block_maxima(x, blk)
    top = maxima.amax(-1, keepdim=True)
    # the first block reaching the maximum (argmax of a 0/1 row: its first 1)
    block = (maxima == top).to(torch.uint8).argmax(-1, keepdim=True)
    idx = block * blk + torch.arange(blk, device=x.device)
    inside = idx < V
    cand = torch.gather(x, -1, idx.clamp(max=V - 1))
    return block[..., 0] * blk + ((cand == top) & inside).to(torch.uint8).argmax(-1)
