r"""The samplers' random draws: the acceptance uniforms, the recovery uniform of each row, and
the recovery draw by inverse CDF (one uniform per row, a two-level search over 256-token
blocks) or by the exponential race.

Random streams: per call, the k acceptance uniforms of each row (float32, ``[B, k]``; none for
deterministic rules), then one float64 uniform per row for the recovery draw (rows with a
generator draw theirs from it, in that order; the others share one ``torch.rand`` call on the
default generator).
"""

from __future__ import annotations

import torch

from . import _fused as fused_kernels
from ._blocked import BlockWeights

__all__ = ["exponential_race", "inverse_cdf_sample"]

_TINY = torch.finfo(torch.float32).tiny


def exponential_race(probs: torch.Tensor, generators=None) -> torch.Tensor:
    r"""One categorical sample per row by the exponential race: ``argmax(probs / E)``, E ~ Exp(1).

    .. math:: \arg\max_i \frac{\pi_i}{E_i} = \arg\min_i \frac{E_i}{\pi_i}, \qquad
              \frac{E_i}{\pi_i} \sim \mathrm{Exp}(\pi_i),

    so index i wins with probability :math:`\pi_i / \sum_j \pi_j`; no ``torch.multinomial``, hence
    no host-device synchronization (vLLM's ``_multinomial`` in ``rejection_sampler.py``).
    V exponentials per row (``exponential_`` is slow on the CPU): :class:`RuleSampler` draws
    its recovery by :func:`inverse_cdf_sample` (one uniform per row) instead; this function
    is kept for callers who want vLLM's kind of stream.

    Parameters
    ----------
    probs : Tensor, shape (B, V)
        Non-negative weights (un-normalized is fine). Not modified.
    generators : sequence of (torch.Generator or None), optional
        Per-row generators (length B); rows whose entry is None share one draw from the
        default generator.

    Returns
    -------
    Tensor, shape (B,), int64
        Indices in ``[0, V)``. A zero-weight index never wins unless the whole row is zero
        (then index 0). E is clamped below at ``finfo(float32).tiny`` so that a zero weight
        never meets E = 0 (0/0 = NaN would win the argmax).
    """
    noise = torch.empty_like(probs, dtype=torch.float32)
    if generators is None or all(g is None for g in generators):
        noise.exponential_()
    else:
        plain = [i for i, g in enumerate(generators) if g is None]
        if plain:
            idx = torch.tensor(plain, device=probs.device)
            noise[idx] = torch.empty((len(plain), probs.shape[-1]), device=probs.device).exponential_()
        for i, g in enumerate(generators):
            if g is not None:
                noise[i].exponential_(generator=g)
    return torch.argmax(probs.to(torch.float32) / noise.clamp_min_(_TINY), dim=-1)


def _row_uniforms(batch: int, device, generators=None, dtype=torch.float64) -> torch.Tensor:
    """``[B, 1]`` uniforms in [0, 1): rows whose generator is None in one ``torch.rand`` call
    from the default generator, each other row one draw from its own generator."""
    if generators is None or all(g is None for g in generators):
        return torch.rand(batch, 1, dtype=dtype, device=device)
    u = torch.empty(batch, 1, dtype=dtype, device=device)
    plain = [i for i, g in enumerate(generators) if g is None]
    if plain:
        u[torch.tensor(plain, device=device)] = torch.rand(len(plain), 1, dtype=dtype, device=device)
    for i, g in enumerate(generators):
        if g is not None:
            u[i] = torch.rand(1, dtype=dtype, device=device, generator=g)
    return u


#: Block length of :func:`inverse_cdf_sample`'s two-level search.
_CDF_BLOCK = fused_kernels.CDF_BLOCK
_block_sums = fused_kernels.block_sums


def inverse_cdf_sample(
    weights: torch.Tensor,
    generators=None,
    fallback: torch.Tensor | None = None,
    *,
    block_sums: torch.Tensor | None = None,
    fallback_block_sums: torch.Tensor | None = None,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""One categorical sample per row by inverse CDF: one uniform per row, two-level search.

    The vocabulary is cut into blocks of 256 tokens (the last one shorter). With the block
    sums :math:`S_b` (float32, one read of the row), their running sums
    :math:`C_b = \sum_{b' \le b} S_{b'}` (float64) and :math:`u \sim U[0, 1)` (float64),

    .. math:: b^* = \min\{b : C_b > u\, C_{last}\}, \qquad
              j^* = \min\{j \in b^* : c_j > u\, C_{last} - C_{b^*-1}\ \text{(scaled to the block)}\},

    where :math:`c_j` is the float64 running sum inside block :math:`b^*`. Block b is drawn
    with probability :math:`S_b / \sum S` and, given the block, token j with
    :math:`w_j / \sum_{i \in b} w_i`: the law :math:`w_j / \sum_i w_i` up to the float32
    rounding of a block sum (relative error below :math:`10^{-6}`, the rounding the float32
    weights carry anyway) and float64 rounding elsewhere. A zero weight is never drawn (a
    zero block has :math:`S_b = 0`; inside a block :math:`c_j = c_{j-1}`). One uniform per row
    (no V exponentials as in :func:`exponential_race`), no ``torch.multinomial``, no
    host-device synchronization. The samplers' recovery draw.

    Parameters
    ----------
    weights : Tensor, shape (B, V), or BlockWeights
        Non-negative weights, un-normalized (float32; other float dtypes are summed in their
        own precision). Not modified. A :class:`~.blocked.BlockWeights` (the compiled
        samplers' residual recovery) brings its block sums and its values at the chosen
        block's columns: no [B, V] weights at all.
    generators : sequence of (torch.Generator or None), optional
        Per-row generators (length B): a row with a generator draws its one uniform from it;
        the rows whose entry is None share one ``torch.rand`` call on the default generator.
    fallback : Tensor, shape (B, V), optional
        Weights for the rows whose ``weights`` do not sum to a finite positive value (a
        safety net; the choice costs [B, blocks] and [B, 256] selections, no [B, V] pass).
    block_sums, fallback_block_sums : Tensor, shape (B, ceil(V / 256)), optional
        The block sums of ``weights`` (and of ``fallback``) when the caller computed them
        already (the fused samplers compute them with the weights, :mod:`.fused`); by
        default they are computed here.
    uniforms : Tensor, shape (B, 1), optional
        The rows' uniforms in [0, 1), drawn by the caller (the samplers draw them before
        their compiled part, with the same calls this function makes); by default drawn
        here from ``generators`` / the default generator.

    Returns
    -------
    Tensor, shape (B,), int64
        Indices in ``[0, V)``. Where a product ``u C`` rounds up to its total, the first index
        reaching the total is taken (a positive weight). A row summing to 0 or to a
        non-finite value (and its fallback, if given) gives an arbitrary index in range (the
        samplers mask such rows).
    """
    B, V = weights.shape
    blk = _CDF_BLOCK
    lazy = isinstance(weights, BlockWeights)
    device = weights.block_sums.device if lazy else weights.device
    # float64 where the device has it (Apple's MPS has not: float32 there)
    dtype = torch.float32 if device.type == "mps" else torch.float64
    if lazy:
        block_sums = weights.block_sums
    elif block_sums is None:
        block_sums = _block_sums(weights, blk)
    use_fb = None
    if fallback is not None:
        mass = block_sums.sum(-1, keepdim=True)
        use_fb = ~(torch.isfinite(mass) & (mass > 0))
        if fallback_block_sums is None:
            fallback_block_sums = _block_sums(fallback, blk)
        block_sums = torch.where(use_fb, fallback_block_sums, block_sums)
    cb = torch.cumsum(block_sums, dim=-1, dtype=dtype)  # [B, blocks]
    total = cb[:, -1:]
    u = _row_uniforms(B, device, generators, dtype) if uniforms is None else uniforms.to(dtype)
    zero = torch.zeros_like(total)
    # u * total < total, except when the product rounds up: cap at the float below the total
    t = torch.minimum(u * total, torch.nextafter(total, zero))
    b = torch.searchsorted(cb, t, right=True).clamp_(0, cb.shape[-1] - 1)  # [B, 1]
    below = torch.where(b > 0, torch.gather(cb, -1, (b - 1).clamp_(min=0)), zero)
    idx = b * blk + torch.arange(blk, device=device)  # [B, blk]
    inside = idx < V
    idx = idx.clamp_(max=V - 1)
    wb = weights.at(idx) if lazy else torch.gather(weights, -1, idx)
    if use_fb is not None:
        wb = torch.where(use_fb, torch.gather(fallback.to(wb.dtype), -1, idx), wb)
    wb = torch.where(inside, wb, torch.zeros((), dtype=wb.dtype, device=device))
    c = torch.cumsum(wb, dim=-1, dtype=dtype)
    # the offset inside the block, rescaled from the block sum S_b to the float64 sum c_last
    s_b = torch.gather(block_sums, -1, b).to(dtype)
    c_last = c[:, -1:]
    r = (t - below) * torch.where(s_b > 0, c_last / s_b, zero)
    r = torch.minimum(r.clamp_(min=0.0), torch.nextafter(c_last, zero))
    j = torch.searchsorted(c, r, right=True).clamp_(0, blk - 1)
    return (b * blk + j)[:, 0].clamp_(0, V - 1)


def _uniforms(seeded_seqs, batch: int, k: int, device, counts=None) -> torch.Tensor:
    """``[B, k]`` float32 uniforms in [0, 1); seeded rows drawn with their own generator.

    As vLLM's ``_create_uniform_samples``: unseeded rows in one ``torch.rand`` call, each seeded
    row with ``torch.rand(k, generator=g)``. With ``counts`` (ragged layout), a seeded row draws
    only ``counts[i]`` uniforms (vLLM V1: "requests with 0 drafts draw nothing").
    """
    if not seeded_seqs:
        return torch.rand(batch, k, device=device)
    u = torch.empty(batch, k, device=device)
    plain = [i for i in range(batch) if i not in seeded_seqs]
    if plain:
        u[torch.tensor(plain, device=device)] = torch.rand(len(plain), k, device=device)
    for i, g in seeded_seqs.items():
        n = k if counts is None else int(counts[i])
        if n:
            u[i, :n] = torch.rand(n, device=device, generator=g)
        if n < k:
            u[i, n:] = 1.0  # padding: never used
    return u
