r"""Top-k acceptance, as the official Cactus repository runs it.

The "relaxed target" is the **un-normalized** indicator of the verifier's top-k set

.. math:: h_x = 1[q_x \ge q_{(k)}], \qquad q_{(k)} = \text{k-th largest entry of } q,

run through the SpS skeleton: :math:`a_n = \min(1, h_n/p_n)` (1 inside the set, 0 outside:
acceptance is deterministic) and recovery :math:`\mathrm{normalize}(\max(0, h - p)) =
\mathrm{normalize}((1 - p_x)\, 1[x \in T_k])`. Ties at the threshold are accepted, so the set
can hold more than k tokens. q's values inside the set are ignored, so the emitted
distribution is not controlled: KL(q || h_alg) is infinite whenever q has mass outside the set.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
k = ``topk``.

References
----------
Hao & Mou, Cactus official code github.com/MANGA-UOFA/Cactus ``cactus/topk.py``
(``TopKRejectionSampler``, ``spec.py --topk``, default 5).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import RowTarget, TargetPlan, block_maxima, gather, residual_weights
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["TopKAcceptance", "topk_indicator"]


def topk_indicator(target_probs, topk: int):
    r"""The indicator :math:`1[q_x \ge q_{(k)}]` (float, same dtype as q; array-agnostic).

    Parameters
    ----------
    target_probs : array, shape (..., V)
        Verifier q.
    topk : int
        k >= 1; values above V use k = V.

    .. warning::
       When k exceeds the number of tokens with q > 0 (truncated q), :math:`q_{(k)} = 0` and
       the set includes every token, zeros of q too; this is what the official code's
       ``q >= kth value`` test does. ``torch.topk`` in the official code fails for k > V; we
       use k = V.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """
    xp = array_namespace(target_probs)
    V = target_probs.shape[-1]
    k = min(int(topk), V)
    kth = xp.sort(target_probs, axis=-1)[..., V - k:V - k + 1]
    return xp.astype(target_probs >= kth, target_probs.dtype)


class TopKAcceptance(Rule):
    """Top-k acceptance: accept n iff n is in the verifier's top-k (ties included).

    Source: Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/topk.py.
    """

    def __init__(self, topk: int):
        self.topk = int(topk)

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``TargetPlan`` whose target is the un-normalized top-k indicator."""
        return TargetPlan(target_probs, draft_probs, topk_indicator(target_probs, self.topk))

    def accept_probs_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                        raw_draft_probs=None):
        r"""Acceptance at the drafted tokens by counting, without sorting the vocabulary.

        .. math:: q_n \ge q_{(k)} \iff \#\{j : q_j > q_n\} < k,

        one compare pass over q (no sort, no [..., V] indicator). Equal to
        ``plan(...).accept_probs_at(token_ids)`` (the same comparisons; ties at the
        threshold accepted on both sides). The samplers' accept path (``fast_accept``).
        """
        xp = array_namespace(target_probs)
        q_n = gather(target_probs, token_ids)
        above = xp.sum(xp.astype(target_probs > q_n[..., None], xp.int32), axis=-1)
        return xp.astype(above < self.topk, target_probs.dtype)

    def accept_probs_from_rows(self, target_rows, draft_rows, token_ids, target_sums, draft_sums):
        r"""The same count on un-normalized rows (scaling a row keeps its order).

        The samplers call it with the raw rows and their sums; dividing a row by its positive
        sum keeps every strict order except between entries that round to the same float32
        quotient (a tie the normalized comparison would accept).
        """
        import torch

        q_n = torch.gather(target_rows, -1, token_ids[..., None])
        # #{j: x_j > x_n} as the sum of sign(max(x_j - x_n, 0)) in float32 arithmetic (a
        # difference of two floats is 0 only when they are equal, so each term is the
        # comparison's 0/1; float ops vectorize better than a boolean reduction). Exact: the
        # count is an integer below 2^24.
        above = (target_rows - q_n).clamp_min_(0.0).sign_().sum(-1)
        return (above < self.topk).to(torch.float32)

    def recovery_weights_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                            raw_draft_probs=None):
        r"""Recovery weights :math:`\max(0, 1[q_x \ge q_{(k)}] - p_x)` (the plan's, un-normalized).

        torch rows: the k-th largest entry by ``torch.topk`` (k values per row) instead of a
        sort of the vocabulary; other arrays: the plan's.
        """
        if not hasattr(target_probs, "topk"):
            return super().recovery_weights_at(target_probs, draft_probs, token_ids)
        kth = kth_largest(target_probs, min(self.topk, target_probs.shape[-1]))
        return residual_weights((target_probs >= kth).to(target_probs.dtype), draft_probs)

    def recovery_target_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                  draft_sums, gamma=None):
        r""":math:`h = 1[x \ge x_{(k)}]` on un-normalized rows (scaling keeps the order; the
        compiled samplers' recovery): the k-th largest entry by :func:`kth_largest`, one read."""
        kth = kth_largest(target_rows, min(self.topk, target_rows.shape[-1]))
        return RowTarget(_indicator, (kth,))


def _indicator(x, y, kth):
    r""":math:`1[x \ge x_{(k)}]` in float32."""
    import torch

    return (x >= kth).to(torch.float32)


#: Block length of :func:`kth_largest`'s two-level search.
_KTH_BLOCK = 256


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
    import torch

    V = x.shape[-1]
    blk = _KTH_BLOCK
    if 4 * k * blk > V:
        return x.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    lead = x.shape[:-1]
    maxima = block_maxima(x, blk)
    blocks = maxima.topk(k, dim=-1, sorted=False).indices                  # [..., k]
    idx = (blocks[..., None] * blk + torch.arange(blk, device=x.device)).reshape(*lead, k * blk)
    cand = torch.gather(x, -1, idx.clamp(max=V - 1))
    cand = torch.where(idx < V, cand, torch.full_like(cand, -math.inf))  # past the last entry
    return cand.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)


register(RuleSpec(
    name="topk", factory=TopKAcceptance,
    knobs=(Knob("topk", 5, 1, math.inf, integer=True,
                doc="k: accept drafted tokens in the verifier's top-k (Cactus spec.py default 5)"),),
    sps_knobs=None,
    sps_note="no k gives SpS: acceptance is 0/1 and the recovery ignores q's values",
    deterministic=True, reads_draft=True, needs_raw=False, family="target", fast_accept=True,
    summary="top-k acceptance: accept iff q_n >= k-th largest q; recover normalize(1[top-k] - p)",
    reference="Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/topk.py",
))
