r"""Cactus's recovery weights in torch, for every spike rule
(:class:`~cactus_theory.rules.registry.SpikeRule`: Cactus-Taylor, Cactus-exact): Theorem 2's
:math:`\max(0, h^{(n)} - p)`
as one scaled copy of q with the spike written in place (no one-hot mask), the row sums
folded into the scale factors (no normalized copies).

The derived form is :func:`~cactus_theory.rules.plans.spike_residual_weights`.
"""

from __future__ import annotations

import torch

from ...conventions import EMPTY_RESIDUAL_MASS
from ...rules.registry import SpikeRule
from ...solvers.spike import spike_scale
from ._registry import RuleKernels, register_kernels

__all__: list = []


def spike_recovery_weights(
    rule, target_probs, draft_probs, token_ids, gamma_n, target_sums=None, draft_sums=None, overwrite=False
):
    r"""Recovery weights :math:`\max(0, h^{(n)} - p)` from the drafted tokens' gamma.

    :math:`h^{(n)}_i = c_n q_i`, :math:`c_n = (1-\gamma_n)/(1-q_n)`, with
    :math:`h^{(n)}_n = \gamma_n` (Theorem 2), built as one scaled copy of q with the spike
    written in place; where the residual is empty, :math:`h^{(n)}` itself (convention 3).
    ``gamma_n`` has shape ``token_ids.shape``.

    With ``target_sums`` / ``draft_sums`` (shape ``token_ids.shape``), the rows are
    un-normalized and q = ``target_probs / target_sums``, p = ``draft_probs / draft_sums``.
    With ``overwrite``, ``target_probs`` and ``draft_probs`` are overwritten (the samplers
    pass copies they own); without it, elementwise with no in-place writes (what a compiled
    kernel fuses into one read).
    """
    ts = 1.0 if target_sums is None else target_sums
    q_n = torch.gather(target_probs, -1, token_ids[..., None])[..., 0] / ts
    scale = spike_scale(q_n, gamma_n) / ts
    idx = token_ids.to(torch.int64)[..., None]
    if overwrite:  # in place: one scaled copy, the spike scattered, h - p over p
        h = target_probs.mul_(scale[..., None])
        h.scatter_(-1, idx, gamma_n[..., None].to(h.dtype))
        if draft_sums is None:
            res = torch.sub(h, draft_probs, out=draft_probs)
        else:
            res = torch.addcmul(h, draft_probs, (-1.0 / draft_sums)[..., None], out=draft_probs)
        res.clamp_min_(0.0)
        empty = res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
        # an empty residual row is all zeros: 0 + h = h there, res + 0 h = res elsewhere
        return res.addcmul_(h, empty.to(res.dtype))
    col = torch.arange(target_probs.shape[-1], device=target_probs.device)
    h = torch.where(col == idx, gamma_n[..., None].to(target_probs.dtype), scale[..., None] * target_probs)
    res = (
        h - draft_probs
        if draft_sums is None
        else torch.addcmul(h, draft_probs, (-1.0 / draft_sums)[..., None])
    ).clamp_min(0.0)
    empty = res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
    return res + h * empty.to(res.dtype)


register_kernels(SpikeRule, RuleKernels(spike_recovery_weights=spike_recovery_weights))
