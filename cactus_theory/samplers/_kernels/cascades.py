r"""Speculative cascades' speed paths (:class:`~cactus_theory.rules._cascades.Cascade`): the
deferral target :math:`\pi` on the samplers' un-normalized rows, elementwise with per-row
constants (a :class:`~cactus_theory.rules.plans.RowTarget`), its row maxima read as maxima of
256-entry block maxima and the token rules' :math:`p(A)` as a masked sum over the few blocks
that can reach the set's threshold.
"""

from __future__ import annotations

import math

import torch

from ...rules.internal import Cascade
from ...rules.plans import RowTarget, _ratio_acceptance
from ._registry import RuleKernels, register_kernels
from .blocks import ARGMAX_BLOCK, block_maxima, split_blocks

__all__ = ["SET_BLOCKS", "masked_sum_by_blocks"]


#: Blocks a masked sum reads when they hold every block reaching its threshold
#: (:func:`masked_sum_by_blocks`).
SET_BLOCKS = 16


def masked_sum_by_blocks(z, w, thr, z_blocks, k: int = SET_BLOCKS):
    r""":math:`\sum_i w_i 1[z_i \ge thr]` over the last axis (keepdim), reading only the
    ``k`` 256-entry blocks of z with the largest maxima when they hold every block that
    reaches the threshold (a block whose maximum is below it adds nothing).

    ``z_blocks`` are z's block maxima (:func:`~.plans.block_maxima`, which the compiled
    samplers read in the loop of the row sums). If the (k+1)-th largest maximum of a whole
    block reaches ``thr`` in any row, the batch takes the full masked sum (``torch.cond``
    when compiled): the same sum over the same entries either way, in another order (float32
    rounding). The short last block is always summed. On CUDA tensors, or with fewer than
    4k blocks, the full sum (choosing would synchronize, or save nothing).
    """
    blk = ARGMAX_BLOCK
    nb = z.shape[-1] // blk

    def full():
        return torch.where(z >= thr, w, 0.0).sum(-1, keepdim=True)

    if z.device.type != "cpu" or nb < 4 * k:
        return full()
    top = z_blocks[..., :nb].topk(k + 1, dim=-1)
    covered = (top.values[..., k:] < thr).all()
    idx = top.indices[..., :k, None].expand(*z.shape[:-1], k, blk)
    (z_whole, z_tail), (w_whole, w_tail) = split_blocks(z, blk), split_blocks(w, blk)
    zs = torch.gather(z_whole, -2, idx)
    ws = torch.gather(w_whole, -2, idx)
    fast = torch.where(zs >= thr[..., None], ws, 0.0).sum((-2, -1))[..., None]
    if z_tail is not None:
        fast = fast + torch.where(z_tail >= thr, w_tail, 0.0).sum(-1, keepdim=True)
    if torch.compiler.is_compiling():
        return torch.cond(covered, lambda: fast.clone(), full)
    return fast if bool(covered) else full()


def _picked(x, y, pick, inv_sq, inv_sp):
    r""":math:`\pi` = p where the row defers to the drafter (``pick``), else q."""
    return torch.where(pick, y * inv_sp, x * inv_sq)


def _token_set_on_p(x, y, thr, rest, inv_sq, inv_sp):
    r""":math:`\pi = p 1_A + (1 - p(A))_+ q` with :math:`A = \{y \ge thr\}` (token-v1)."""
    return torch.where(y >= thr, y * inv_sp, 0.0) + rest * (x * inv_sq)


def _token_set_on_q(x, y, thr, rest, inv_sq, inv_sp):
    r""":math:`\pi = p 1_A + (1 - p(A))_+ q` with :math:`A = \{x \ge thr\}` (token-v2, v3)."""
    return torch.where(x >= thr, y * inv_sp, 0.0) + rest * (x * inv_sq)


def accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r"""Acceptance :math:`\min(1, \pi_n/p_n)` from un-normalized rows (q = x/s_q, p = y/s_p).

    The samplers call it when no raw distributions are given (the deferral tests then read
    the processed ones): :func:`recovery_target_from_rows`'s :math:`\pi` at the drafted
    entries, no [B, k, V] copy.
    """
    ids = token_ids[..., None]
    x_n = torch.gather(target_rows, -1, ids)
    y_n = torch.gather(draft_rows, -1, ids)
    pi = recovery_target_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums).h
    # p_n as the row target writes p (y times 1 / s_p): pi_n = p_n bit for bit where the
    # row defers to the drafter
    p_n = y_n * (1.0 / draft_sums[..., None])
    return _ratio_acceptance(pi(x_n, y_n)[..., 0], p_n[..., 0])


def recovery_target_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r""":math:`\pi` on un-normalized rows (q = x/s_q, p = y/s_p), elementwise with per-row
    constants: the accept path's :math:`\pi_n` and the compiled samplers' recovery.

    Only what :math:`\pi` needs, per row: the row maxima (:math:`\max q = \max x / s_q`
    exactly, division being monotone), TV(p, q) for ``opt`` (one pass), and for the token
    rules :math:`p(A)` (a compare and a masked sum); the set tests compare the raw entries
    against the threshold times the row sum, equal to the plan's normalized comparison up
    to float32 rounding. Same formulas as :func:`cascade_target` otherwise (processed
    distributions: the samplers call it when no raw ones are given).
    """
    x, y, kind, alpha = target_rows, draft_rows, rule.kind, rule.alpha
    sq, sp = target_sums[..., None], draft_sums[..., None]
    # the row maxima as maxima of 256-entry block maxima (the same value: a maximum is
    # exact in any order), which the compiled core reads in the loop of the entry sums'
    # 256-entry blocks instead of in a pass of its own
    if kind in ("chow", "diff", "opt"):
        max_rp = block_maxima(y).amax(-1, keepdim=True) / sp
        if kind == "chow":
            pick = max_rp >= 1.0 - alpha
        else:
            max_rq = block_maxima(x).amax(-1, keepdim=True) / sq
            if kind == "diff":
                pick = max_rp >= max_rq - alpha
            else:
                tv = torch.addcmul(y / sp, x, -1.0 / sq).clamp_min_(0.0).sum(-1, keepdim=True)
                if math.isinf(alpha):
                    pick = (tv <= 0) if alpha < 0 else torch.ones_like(tv, dtype=torch.bool)
                else:
                    pick = max_rp >= max_rq - alpha * tv
        return RowTarget(_picked, (pick, 1.0 / sq, 1.0 / sp))
    x_blocks = block_maxima(x)
    max_rq = x_blocks.amax(-1, keepdim=True) / sq
    if kind == "token-v1":
        fn, thr = _token_set_on_p, (max_rq - alpha) * sp
    elif kind == "token-v2":
        fn, thr = _token_set_on_q, (max_rq - alpha) * sq
    else:
        fn, thr = _token_set_on_q, (1.0 - alpha) * max_rq * sq
    in_set, set_blocks = (y, block_maxima(y)) if fn is _token_set_on_p else (x, x_blocks)
    p_a = masked_sum_by_blocks(in_set, y, thr, set_blocks) / sp
    rest = (1.0 - p_a).clamp_min_(0.0)
    return RowTarget(fn, (thr, rest, 1.0 / sq, 1.0 / sp))


register_kernels(
    Cascade,
    RuleKernels(
        accept_from_rows=accept_from_rows,
        recovery_target_from_rows=recovery_target_from_rows,
        accept_from_row_target=True,
        guard=lambda: hasattr(torch, "cond") and hasattr(torch.compiler, "is_compiling"),
    ),
)
