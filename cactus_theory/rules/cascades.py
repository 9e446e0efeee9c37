r"""Speculative cascades (Narasimhan et al., ICLR 2025): SpS against a deferral target pi.

Each rule builds one target :math:`\pi` from the drafter p and the verifier q and runs
lossless SpS against it (:math:`a_n = \min(1, \pi_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, \pi - p))`), so it emits :math:`\pi` exactly.
The deferral *tests* read the **raw** (temperature-1) distributions :math:`\tilde p, \tilde q`
(``raw_draft_probs``, ``raw_target_probs``), as the official notebook does; :math:`\pi`, the
acceptance ratio and the TV of OPT use the processed ones.

========== ======================================================================== =========
rule       :math:`\pi`                                                              SpS at
========== ======================================================================== =========
chow       p if :math:`\max\tilde p \ge 1 - \alpha`, else q (eq. 2)                 alpha=-1
diff       p if :math:`\max\tilde p \ge \max\tilde q - \alpha`, else q (eq. 5)      alpha=-1
opt        p if :math:`\max\tilde p \ge \max\tilde q - \alpha\,TV(p,q)`, else q     alpha=-inf
           (eq. 10)
token-v1   :math:`p_x 1[x\in A] + (1 - p(A)) q_x`,                                   alpha=-1
           :math:`A = \{x: \tilde p_x \ge \max\tilde q - \alpha\}` (eq. 13)
token-v2   same, :math:`A = \{x: \tilde q_x \ge \max\tilde q - \alpha\}` (eq. 14)   alpha=-1
token-v3   same, :math:`A = \{x: \tilde q_x \ge (1-\alpha)\max\tilde q\}` (eq. 15)  alpha=-1
========== ======================================================================== =========

The SpS end of each knob is its own: alpha = 0 is **not** SpS for Chow when p is one-hot
(max p = 1 >= 1), for OPT (p is picked whenever max p >= max q), or for Token-V2/V3 (A still
holds the verifier's argmax). Any alpha < 0 gives SpS for Chow and Token-V3; alpha = -1 does
for Diff, Token-V1 and Token-V2 (their tests need a probability above max q + 1 > 1).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
alpha the lenience (the paper's alpha; the notebook calls it ``lenience``).

References
----------
Narasimhan et al., "Faster Cascades via Speculative Decoding", ICLR 2025, arXiv 2405.19261,
eqs. 2, 5, 10, 13-15; official notebook google-research/google-research
``speculative_cascades/speculative_cascades_gemma.ipynb`` (demo: token-v3, lenience 0.5).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import (ARGMAX_BLOCK, RowTarget, TargetPlan, block_maxima, ratio_acceptance,
                    split_blocks)
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["Cascade", "CASCADE_RULES", "cascade_target", "masked_sum_by_blocks"]

#: rule name -> (alpha range low, high, the alpha giving SpS, equation)
CASCADE_RULES = {
    "chow": (-1.0, 1.0, -1.0, "eq. 2"),
    "diff": (-1.0, 1.0, -1.0, "eq. 5"),
    "opt": (-math.inf, math.inf, -math.inf, "eq. 10"),
    "token-v1": (-1.0, 1.0, -1.0, "eq. 13"),
    "token-v2": (-1.0, 1.0, -1.0, "eq. 14"),
    "token-v3": (-1.0, 1.0, -1.0, "eq. 15"),
}


def cascade_target(kind: str, alpha: float, target_probs, draft_probs, raw_target_probs=None,
                   raw_draft_probs=None):
    r"""The deferral target :math:`\pi` of a speculative-cascade rule (array-agnostic).

    Parameters
    ----------
    kind : {"chow", "diff", "opt", "token-v1", "token-v2", "token-v3"}
        The deferral rule (module table).
    alpha : float
        Lenience.
    target_probs, draft_probs : array, shape (..., V)
        Processed q and p (build :math:`\pi`).
    raw_target_probs, raw_draft_probs : array, shape (..., V), optional
        Raw q and p the deferral tests read (default: the processed ones).

    Returns
    -------
    array, shape (..., V)
        :math:`\pi`, a probability row.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Narasimhan et al., ICLR 2025 (arXiv 2405.19261) eqs. 2, 5, 10, 13-15; official Gemma notebook.
    """
    q, p = target_probs, draft_probs
    rq = q if raw_target_probs is None else raw_target_probs
    rp = p if raw_draft_probs is None else raw_draft_probs
    xp = array_namespace(q, p)
    max_rq = xp.max(rq, axis=-1, keepdims=True)
    max_rp = xp.max(rp, axis=-1, keepdims=True)
    if kind in ("chow", "diff", "opt"):
        if kind == "chow":
            pick = max_rp >= 1.0 - alpha
        elif kind == "diff":
            pick = max_rp >= max_rq - alpha
        else:
            tv = xp.sum(xp.clip(p - q, 0.0, None), axis=-1, keepdims=True)
            if math.isinf(alpha):
                # alpha * TV with TV = 0 is 0 * inf: the limit test is "max p ~ >= max q ~"
                # only where TV = 0 (then p = q and either choice is q) for -inf, always for +inf.
                pick = (tv <= 0) if alpha < 0 else xp.ones_like(tv, dtype=xp.bool)
            else:
                pick = max_rp >= max_rq - alpha * tv
        return xp.where(pick, p, q)
    if kind == "token-v1":
        A = rp >= max_rq - alpha
    elif kind == "token-v2":
        A = rq >= max_rq - alpha
    else:
        A = rq >= (1.0 - alpha) * max_rq
    pA = xp.where(A, p, xp.zeros_like(p))
    rest = 1.0 - xp.sum(pA, axis=-1, keepdims=True)
    return pA + xp.maximum(rest, xp.zeros_like(rest)) * q   # rest < 0 only by rounding


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
    import torch

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
    import torch

    return torch.where(pick, y * inv_sp, x * inv_sq)


def _token_set_on_p(x, y, thr, rest, inv_sq, inv_sp):
    r""":math:`\pi = p 1_A + (1 - p(A))_+ q` with :math:`A = \{y \ge thr\}` (token-v1)."""
    import torch

    return torch.where(y >= thr, y * inv_sp, 0.0) + rest * (x * inv_sq)


def _token_set_on_q(x, y, thr, rest, inv_sq, inv_sp):
    r""":math:`\pi = p 1_A + (1 - p(A))_+ q` with :math:`A = \{x \ge thr\}` (token-v2, v3)."""
    import torch

    return torch.where(x >= thr, y * inv_sp, 0.0) + rest * (x * inv_sq)


class Cascade(Rule):
    """SpS against a speculative-cascade deferral target (module table).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Narasimhan et al., ICLR 2025 (arXiv 2405.19261) eqs. 2, 5, 10, 13-15; official Gemma notebook.
    """

    #: the acceptance is min(1, pi_n / p_n) of the row target (the samplers reuse it)
    accept_from_row_target = True

    def __init__(self, kind: str, alpha: float):
        self.kind = kind
        self.alpha = alpha

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        r"""``TargetPlan(pi)``; the deferral tests read the raw distributions."""
        pi = cascade_target(self.kind, self.alpha, target_probs, draft_probs,
                            raw_target_probs, raw_draft_probs)
        return TargetPlan(target_probs, draft_probs, pi)

    def accept_probs_from_rows(self, target_rows, draft_rows, token_ids, target_sums, draft_sums):
        r"""Acceptance :math:`\min(1, \pi_n/p_n)` from un-normalized rows (q = x/s_q, p = y/s_p).

        The samplers call it when no raw distributions are given (the deferral tests then read
        the processed ones): :meth:`recovery_target_from_rows`'s :math:`\pi` at the drafted
        entries, no [B, k, V] copy.
        """
        import torch

        ids = token_ids[..., None]
        x_n = torch.gather(target_rows, -1, ids)
        y_n = torch.gather(draft_rows, -1, ids)
        pi = self.recovery_target_from_rows(target_rows, draft_rows, token_ids, target_sums,
                                            draft_sums).h
        # p_n as the row target writes p (y times 1 / s_p): pi_n = p_n bit for bit where the
        # row defers to the drafter
        p_n = y_n * (1.0 / draft_sums[..., None])
        return ratio_acceptance(pi(x_n, y_n)[..., 0], p_n[..., 0])

    def recovery_target_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                  draft_sums, gamma=None):
        r""":math:`\pi` on un-normalized rows (q = x/s_q, p = y/s_p), elementwise with per-row
        constants: the accept path's :math:`\pi_n` and the compiled samplers' recovery.

        Only what :math:`\pi` needs, per row: the row maxima (:math:`\max q = \max x / s_q`
        exactly, division being monotone), TV(p, q) for ``opt`` (one pass), and for the token
        rules :math:`p(A)` (a compare and a masked sum); the set tests compare the raw entries
        against the threshold times the row sum, equal to the plan's normalized comparison up
        to float32 rounding. Same formulas as :func:`cascade_target` otherwise (processed
        distributions: the samplers call it when no raw ones are given).
        """
        import torch

        x, y, kind, alpha = target_rows, draft_rows, self.kind, self.alpha
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


for _kind, (_lo, _hi, _sps, _eq) in CASCADE_RULES.items():
    register(RuleSpec(
        name=f"cascade-{_kind}",
        factory=(lambda k: (lambda alpha: Cascade(k, alpha)))(_kind),
        knobs=(Knob("alpha", 0.5, _lo, _hi,
                    doc="lenience (paper's alpha, notebook's 'lenience'; notebook demo 0.5)"),),
        sps_knobs={"alpha": _sps}, deterministic=False, reads_draft=True, needs_raw=True,
        family="target",
        summary=f"speculative cascade, {_kind} deferral ({_eq}); emits its target pi exactly",
        reference=f"Narasimhan et al., ICLR 2025 (arXiv 2405.19261) {_eq}; official Gemma notebook",
    ))
