r"""A batched torch sampler for any registered rule, with vLLM 0.7.3's rejection-sampler interface.

:class:`RuleSampler` is a drop-in for vLLM 0.7.3's V0 ``RejectionSampler`` /
``TypicalAcceptanceSampler`` (``vllm/model_executor/layers/rejection_sampler.py``,
``typical_acceptance_sampler.py``, ``spec_decode_base_sampler.py``): same ``forward`` signature,
same ``[B, k+1]`` output layout, same three counters. What it verifies with is any rule of
:data:`cactus_theory.rules.RULES`: it calls the rule's array-agnostic ``plan`` on float32
torch tensors, so the formulas are the ones the exact analysis uses
(:mod:`cactus_theory.analysis.one_step`), conventions included
(:mod:`cactus_theory.conventions`).

Per position i < k of row b, with q = verifier (``target_with_bonus_probs[:, :k]``),
p = drafter (``draft_probs``), n = drafted token (``draft_token_ids``):

.. math::
    \text{accepted}_{b,i} = [\,u_{b,i} < a_n\,], \quad u \sim U[0, 1), \qquad
    N_b = \max\{j : \text{accepted}_{b,0..j-1}\ \text{all true}\}

and the row emits the N accepted drafts, then one extra token: a sample of the recovery
distribution :math:`r^{(n)}` at position N if N < k, else the pre-sampled bonus token
(``bonus_token_ids``, drawn by the caller from q at position k), then ``-1``. The emitted token
at one position is distributed as :math:`h_{alg}` (paper, Theorem 3).

Deterministic rules (``RuleSpec.deterministic``: TAS, top-k, fuzzy SD) accept iff
:math:`a_n > 1/2` (their :math:`a_n` is 0 or 1) and draw no acceptance uniforms, as vLLM's
``TypicalAcceptanceSampler`` draws none.

Memory, passes and synchronization: the entry validation reads q (its k draft positions) and p
once for the float32 row sums and once for the row minimum (the negative check; a NaN or inf
makes the sum non-finite, an all-zero row sums to 0), and ``forward`` reuses those sums.
The accept path then takes the cheapest route the rule declares (:func:`_accept_path`):
Cactus evaluates gamma once at the [B, k] drafted tokens (reused by the recovery);
``Rule.accept_probs_from_values(q_n, p_n)`` (SpS, interpolation) reads only the drafted
tokens, divided by the row sums; ``Rule.accept_probs_from_rows`` (top-k: one compare pass;
TAS: the entropy, one pass with a log; cascades: row maxima and a masked sum) reads the
un-normalized rows with their sums; in the compiled core on CPU tensors a rule with
``Rule.accept_decided_from_rows`` (fuzzy SD's Jensen-Shannon: bounds with a division and
no logarithm, read with the row sums) runs its exact test only on the rows its bounds leave
undecided (:func:`_decided_by_bounds`, :func:`_accept_undecided_rows`); other rules, and any rule
given raw distributions, get float32 row-normalized copies (``[B, k, V]`` each) and
``Rule.accept_probs_at`` (their plan, or a drafted-token override declared by
``RuleSpec.fast_accept``). The recovery works on
``[B, V]`` rows only (the first rejected position of each row): un-normalized weights from
``Rule.recovery_weights_at`` (Cactus: one scaled copy of q with the spike written in place,
the row sums folded into :math:`c_n`), drawn by inverse CDF (:func:`inverse_cdf_sample`:
one uniform per row, a two-level search over float32 sums of 256-token blocks and float64
running sums). Nothing in ``forward`` reads a device value
on the host (no ``.item()``, ``nonzero``, boolean masking or ``torch.multinomial``) unless
``strict_mode`` is on (the bounds path above selects rows with ``nonzero``, on CPU tensors
only); seeded rows add host-to-device index copies only.

``fused=True`` (:mod:`.fused`): the same steps, with the tensor part of a call
(:func:`_verify_core`: row checks, accept path, accepted prefix, recovery weights and their
block sums, inverse CDF, output) compiled by ``torch.compile`` per configured rule: the row
checks read each tensor once (sum and negative check in one loop, the sum in two levels),
a rule's own row pass joins that read where its formula allows, and the recovery rows are
indexed inside the formulas (no copies). The uniforms are drawn before the compiled part in
the order above, so the stream is the eager one.

Random streams: per call, the k acceptance uniforms of each row (float32, ``[B, k]``; none for
deterministic rules), then one float64 uniform per row for the recovery draw (rows with a
generator in ``seeded_seqs`` draw theirs from it, in that order; the others share one
``torch.rand`` call on the default generator). Seeded outputs therefore differ from versions
that drew the recovery by an exponential race (V exponentials per row; :func:`exponential_race`,
kept public) and from vLLM's streams; the law is the same.

Bad values (the choice: clamp-and-flag on the device, always on): every public call first runs
:func:`validate_sampler_entry`. A token id outside ``[0, V)`` (negative included, draft or
bonus) or a probability row that is NaN/inf, negative or all zero marks its row invalid; the
ids are clamped into range so no kernel indexes out of bounds, and the row's whole output is
``-1`` (nothing emitted), counted in ``num_invalid_rows`` and flagged in
``last_invalid_rows`` (both on the device). So an out-of-range id, or a token drawn from a
NaN or all-zero row, is never emitted, and no synchronization is added (two reductions over
the probability tensors). ``strict_mode=True`` raises ValueError naming the argument instead.
A numpy array or a non-Generator in ``seeded_seqs`` raises TypeError naming the argument.

.. warning::
    Conventions differ between engines (engines.md 1.4, 1.9):

    * p_n = 0 at a drafted token: here (the core's convention 2) :math:`a_n = 1` if
      :math:`h_n > 0`, else 0. vLLM V0 computes q/0 = inf -> accept, 0/0 = NaN -> reject (the
      same decisions); vLLM V1 *rejects* whenever p_n = 0.
    * Empty recovery residual: here :math:`r = \mathrm{normalize}(h)`; vLLM V0 clamps the
      residual at ``finfo(float32).tiny`` (uniform over the vocabulary when empty); V1 and the
      official Cactus code return token 0.
    * Acceptance test: ``u < a`` with float32 uniforms (vLLM V0); V1 uses ``u <= a`` with
      float64 uniforms. The two differ on a set of measure zero.
    * The recovery is sampled only at the first rejected position of each row (``[B, V]``),
      not at all k positions as vLLM V0 does (``[B, k, V]``), and by inverse CDF rather
      than vLLM's exponential race; the emitted tokens have the same law, but the random
      streams (hence seeded outputs) are not vLLM's.
"""

from __future__ import annotations

import numbers
from typing import Dict, Optional

import torch

from ..rules import Rule, get_rule
from ..rules.plans import ratio_acceptance
from . import fused as fused_kernels
from .blocked import BlockWeights, point_mass_weights, residual_block_weights

__all__ = ["RuleSampler", "inverse_cdf_sample", "exponential_race", "validate_sampler_entry"]

_TINY = torch.finfo(torch.float32).tiny


def _as_float32_rows(x: torch.Tensor) -> torch.Tensor:
    """Cast to float32 and divide each row by its sum (convention 1; no validation, no sync).

    A row summing to 0 is left as zeros (it is invalid input; strict mode rejects it).
    """
    x = x.to(torch.float32)
    s = x.sum(dim=-1, keepdim=True)
    return x / torch.where(s > 0, s, torch.ones_like(s))


def _positive(s: torch.Tensor) -> torch.Tensor:
    """Row sums with 1 where a row sums to 0 or less (as :func:`_as_float32_rows`)."""
    return torch.where(s > 0, s, torch.ones_like(s))


def _rows_at(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``x[b, pos[b]]`` for every row b of ``x`` [B, K, V]: a new [B, V] tensor (a copy).

    ``index_select`` on the flattened rows when ``x`` is contiguous (a faster kernel than
    advanced indexing), else advanced indexing (an expanded or sliced ``x`` is not copied
    whole).
    """
    if x.is_contiguous():
        flat = torch.arange(x.shape[0], device=pos.device) * x.shape[1] + pos
        return x.view(-1, x.shape[-1]).index_select(0, flat)
    return x[torch.arange(x.shape[0], device=pos.device), pos]


def _as_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 (a cast copy for half precision; float32 as is)."""
    return x if x.dtype == torch.float32 else x.to(torch.float32)


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
        u[torch.tensor(plain, device=device)] = torch.rand(len(plain), 1, dtype=dtype,
                                                          device=device)
    for i, g in enumerate(generators):
        if g is not None:
            u[i] = torch.rand(1, dtype=dtype, device=device, generator=g)
    return u


#: Block length of :func:`inverse_cdf_sample`'s two-level search.
_CDF_BLOCK = fused_kernels.CDF_BLOCK
_block_sums = fused_kernels.block_sums


def inverse_cdf_sample(weights: torch.Tensor, generators=None,
                       fallback: Optional[torch.Tensor] = None, *,
                       block_sums: Optional[torch.Tensor] = None,
                       fallback_block_sums: Optional[torch.Tensor] = None,
                       uniforms: Optional[torch.Tensor] = None) -> torch.Tensor:
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
    cb = torch.cumsum(block_sums, dim=-1, dtype=dtype)                       # [B, blocks]
    total = cb[:, -1:]
    u = _row_uniforms(B, device, generators, dtype) if uniforms is None else uniforms.to(dtype)
    zero = torch.zeros_like(total)
    # u * total < total, except when the product rounds up: cap at the float below the total
    t = torch.minimum(u * total, torch.nextafter(total, zero))
    b = torch.searchsorted(cb, t, right=True).clamp_(0, cb.shape[-1] - 1)   # [B, 1]
    below = torch.where(b > 0, torch.gather(cb, -1, (b - 1).clamp_(min=0)), zero)
    idx = b * blk + torch.arange(blk, device=device)                         # [B, blk]
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


def _row_stats(x: torch.Tensor):
    """Float32 row sums and the bad-row flag (sum not finite or <= 0, or a negative entry).

    One read for the sums, one for the minimum (a NaN or inf anywhere makes the sum
    non-finite; only negative entries need the minimum). The half-precision inputs are cast
    first (the float32 path reads the input as is).
    """
    xf = x if x.dtype == torch.float32 else x.to(torch.float32)
    s = xf.sum(-1)
    return s, ~(torch.isfinite(s) & (s > 0) & (x.amin(-1) >= 0))


def validate_sampler_entry(target_probs, bonus_token_ids, draft_probs, draft_token_ids,
                           seeded_seqs=None, *, raw_target_probs=None, raw_draft_probs=None,
                           target_names=("target_with_bonus_probs", "draft_probs"),
                           sanitize: bool = False, return_sums: bool = False,
                           fused: bool = False, row_checks: bool = True):
    r"""Entry validation of a public sampler call: types at once, values clamped and flagged.

    Called first by :meth:`RuleSampler.forward` and :func:`~.v1.ragged_forward`. Two kinds
    of check:

    * **Types** (metadata only, no synchronization): every array argument must be a
      ``torch.Tensor`` (a numpy array raises TypeError naming the argument); ``seeded_seqs``
      must be a dict whose values are ``torch.Generator`` (TypeError naming it).
    * **Values, clamp-and-flag on the device** (no host-device synchronization, so the fast
      path stays sync-free): a token id outside ``[0, V)`` (negative included) in
      ``draft_token_ids`` or ``bonus_token_ids``, or a probability row that is not finite,
      has a negative entry or sums to 0 (in ``target_probs`` at the k draft positions (the
      bonus position's q is never read), ``draft_probs`` or the raw rows) marks its **row as
      invalid**. The ids are
      clamped into ``[0, V)`` so that no kernel ever indexes out of range, and the caller
      replaces the invalid rows' whole output by the ``-1`` placeholder
      (``RuleSampler._verify``'s ``invalid``): an invalid id, or a token drawn from a NaN or all-zero
      row, can never be emitted. ``strict_mode`` raises ValueError instead (with a sync).

    Parameters
    ----------
    target_probs, draft_probs, raw_target_probs, raw_draft_probs : Tensor
        Probability tensors with the vocabulary last; the leading axes up to the position
        axis match ``draft_token_ids``' shape (``draft_probs`` may be None).
    bonus_token_ids, draft_token_ids : Tensor
        Integer token ids; ``draft_token_ids``' first axis indexes the rows.
    seeded_seqs : dict of int to torch.Generator, optional
    target_names : (str, str)
        Names of the target and draft arguments in error messages.
    sanitize : bool
        Also return copies of the probability tensors with every invalid row replaced by the
        uniform row. Off on the fast path (a full copy costs about a quarter of a CPU
        forward); the public calls turn it on only to retry a rule that raised ValueError on
        the raw values (a rule that validates on the host, e.g. ``cactus-calibrated``).
        Array-agnostic rules compute on the invalid rows unharmed: their output is masked.
    return_sums : bool
        Also return the float32 row sums computed by the value checks, so that the sampler
        reads each probability tensor once (sums and validation in the same pass).
    fused : bool
        Compute the row sums and flags of all probability tensors with the compiled kernel
        of :func:`.fused.row_stats` (one read per tensor, two-level sums)
        instead of eager ``sum`` and ``amin`` (two reads, float32 sums).
    row_checks : bool
        Check the probability rows (default). False skips them (the sums come back None):
        the samplers' compiled core checks the rows itself, in the read its accept path
        makes (:func:`_verify_core`); ``sanitize`` always checks them.

    Returns
    -------
    draft_token_ids, bonus_token_ids : Tensor
        The ids clamped into ``[0, V)`` (the inputs are not modified).
    invalid : Tensor, bool, shape ``draft_token_ids.shape[:1]`` (or per flat token in the
        ragged layout: shape ``draft_token_ids.shape``)
        True where the row (token) carries an invalid id or probability row.
    probs : tuple of Tensor or None
        ``(target_probs, draft_probs, raw_target_probs, raw_draft_probs)``; with ``sanitize``,
        copies with each invalid probability row replaced by the uniform row (the inputs are
        never modified).
    sums : tuple of (Tensor or None)
        Only with ``return_sums``: the float32 row sums of the four probability tensors
        (``target_probs`` at its first ``draft_token_ids.shape[-1]`` positions in the V0
        layout), shape ``draft_token_ids.shape``; None where a tensor was not checked.

    Raises
    ------
    TypeError
        A numpy array or other non-tensor for a tensor argument; ``seeded_seqs`` not a dict
        of ``torch.Generator``.
    """
    t_name, d_name = target_names
    for name, t in ((t_name, target_probs), ("bonus_token_ids", bonus_token_ids),
                    (d_name, draft_probs), ("draft_token_ids", draft_token_ids),
                    ("raw_target_probs", raw_target_probs), ("raw_draft_probs", raw_draft_probs)):
        if t is None and name in (d_name, "raw_target_probs", "raw_draft_probs"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__module__}."
                            f"{type(t).__name__} (convert with torch.as_tensor)")
    if seeded_seqs is not None:
        if not isinstance(seeded_seqs, dict):
            raise TypeError(f"seeded_seqs: expected a dict of row index -> torch.Generator, "
                            f"got {type(seeded_seqs).__name__}")
        bad = [k for k, g in seeded_seqs.items() if not isinstance(g, torch.Generator)]
        if bad:
            raise TypeError(f"seeded_seqs: the values for rows {bad} are not torch.Generator "
                            f"(got {type(seeded_seqs[bad[0]]).__name__})")
    probs = (target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    if target_probs.dim() < 1 or draft_token_ids.dim() < 1:  # the shape checks name the argument
        if return_sums:
            return draft_token_ids, bonus_token_ids, None, probs, (None,) * 4
        return draft_token_ids, bonus_token_ids, None, probs
    v = target_probs.shape[-1]
    lead = draft_token_ids.dim()  # the probability tensors' axes before V align with the ids
    invalid = torch.zeros(draft_token_ids.shape, dtype=torch.bool, device=draft_token_ids.device)

    def checked(x):  # the part of x the value checks read, or None
        if x is None or x.dim() != lead + 1 or not x.is_floating_point():
            return None
        if lead == 2:  # V0 layout [B, k(+1), V]: the k draft positions
            x = x[:, :invalid.shape[1]]
        if tuple(x.shape[:-1]) != tuple(invalid.shape) or x.device != invalid.device:
            return None
        return x

    parts = [checked(x) if row_checks or sanitize else None for x in probs]
    if fused and any(x is not None for x in parts):
        stats = fused_kernels.row_stats(*parts)
    else:
        stats = [(None, None) if x is None else _row_stats(x) for x in parts]
    cleaned, sums = [], []
    for x, (s_x, b) in zip(probs, stats):
        sums.append(s_x)
        if b is not None:
            invalid |= b
            # with sanitize, a uniform row in its place (for rules that validate on the host);
            # the row's output is masked in every case
            if sanitize:
                if x.shape[:-1] != b.shape:  # V0 target: the bonus position is never read
                    b = torch.cat([b, torch.zeros_like(b[:, :1]).expand(-1, x.shape[1] - b.shape[1])], 1)
                x = x.masked_fill(b[..., None], 1.0 / x.shape[-1])
        cleaned.append(x)
    if draft_token_ids.dtype in (torch.int64, torch.int32) and v > 0:
        invalid |= (draft_token_ids < 0) | (draft_token_ids >= v)
        draft_token_ids = draft_token_ids.clamp(0, v - 1)
    if lead == 2 and invalid.dim() == 2:
        invalid = invalid.any(dim=-1)
    if (lead == 2 and bonus_token_ids.dtype in (torch.int64, torch.int32) and v > 0
            and bonus_token_ids.dim() == 2 and bonus_token_ids.shape[0] == invalid.shape[0]
            and bonus_token_ids.device == invalid.device):
        # (the ragged layout maps its bonus ids to requests itself)
        invalid = invalid | ((bonus_token_ids < 0) | (bonus_token_ids >= v)).any(dim=-1)
        bonus_token_ids = bonus_token_ids.clamp(0, v - 1)
    if return_sums:
        return draft_token_ids, bonus_token_ids, invalid, tuple(cleaned), tuple(sums)
    return draft_token_ids, bonus_token_ids, invalid, tuple(cleaned)


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


@torch.compiler.disable
def _spike_on_host(rule, q_n):
    """``rule.spike_at_tokens(q_n)`` outside any compiled graph (the exact root's numpy
    solver reads its values on the host)."""
    return rule.spike_at_tokens(q_n)


def _decided_by_bounds(rule, target, draft_probs, draft_ids, raw_target, raw_draft, sq, sp,
                       traced: bool):
    """``Rule.accept_decided_from_rows`` on the float32 rows: ``(accept, undecided, x, y)``,
    or None where the bounds path does not apply: the eager core (``traced`` False: the
    bounds' elementwise steps, unfused, cost more passes than the exact test's in-place
    ones; measured 30 against 14 read passes for fuzzy SD at [32, 8, 32000]), raw
    distributions given, a rule without bounds for its configuration, or CUDA tensors
    (there the logarithms cost little next to the reads, and selecting the undecided rows
    would synchronize with the host)."""
    hook = rule.accept_decided_from_rows
    if (not traced or hook is None or rule.accept_probs_from_rows is None
            or raw_target is not None or raw_draft is not None
            or target.device.type != "cpu"):
        return None
    x, y = _as_float32(target), _as_float32(draft_probs)
    decided = hook(x, y, draft_ids, sq, sp)
    return None if decided is None else (*decided, x, y)


@torch.compiler.disable
def _accept_undecided_rows(from_rows, accept, undecided, x, y, ids, sx, sy):
    """``accept`` (bool [B, k], decided by a rule's bounds) as float32, with the exact test
    ``from_rows`` evaluated on the rows ``undecided`` selects (gathered: [n, V] copies of
    those rows only). Outside any compiled graph: the selection's size is data-dependent."""
    out = accept.to(torch.float32)
    if bool(undecided.any()):
        idx = undecided.nonzero(as_tuple=True)
        out[idx] = from_rows(x[idx], y[idx], ids[idx], sx[idx], sy[idx])
    return out


def _accept_path(rule, target, draft_probs, draft_ids, raw_target, raw_draft, sq, sp,
                 traced: bool = False, gamma=None):
    r""":math:`a_n` at the drafted tokens, [B, k], by the cheapest path the rule declares.

    ``target`` holds the k draft positions ([B, k, V], un-normalized, any float dtype);
    ``sq``, ``sp`` are the float32 row sums ([B, k], positive). Paths, in order (the raw
    distributions, when given, always take the last):

    1. Cactus (``samples_from_spike``): gamma at the [B, k] drafted tokens, once
       (reused by the recovery), :math:`\min(1, \gamma_n/p_n)`;
    2. ``Rule.accept_probs_from_values(q_n, p_n)``: [B, k] gathers divided by the sums;
    3. ``Rule.accept_probs_from_rows``: the un-normalized rows and their sums (CPU tensors
       in the compiled core, and a rule with ``Rule.accept_decided_from_rows``: its bounds
       first, the exact test on the undecided rows only, in :func:`_verify_core` and
       ``RuleSampler._accept_path``, before this function; ``traced``,
       a rule declaring ``Rule.accept_from_row_target``: its row target built
       on the [B, k] rows, :math:`\min(1, h_n/p_n)` at the drafted entries, the target kept
       for the recovery);
    4. ``Rule.accept_probs_at`` on float32 row-normalized copies (the plan, or the rule's
       drafted-token override declared by ``RuleSpec.fast_accept``; for a spike rule without
       an override, gamma for all B*k*V candidates).

    ``traced``: inside the compiled core (:func:`_verify_core`), where the spike is
    evaluated outside the graph; ``gamma``: that spike, when the core evaluated it already
    (at its top level: one graph break instead of a break inside this frame). Returns ``a``
    and the state the recovery path needs:
    ``(gamma, q, p, raw_q, raw_p)`` (the normalized copies of path 4, else None), with the
    row target appended on path 3's traced form.
    """
    no_raw = raw_target is None and raw_draft is None
    from_values = rule.accept_probs_from_values  # declared on Rule (None: whole rows)
    from_rows = rule.accept_probs_from_rows
    spike_path = no_raw and getattr(rule, "samples_from_spike", False)
    if no_raw and (spike_path or from_values is not None):
        ids_ = draft_ids[..., None]
        q_n = torch.gather(target, -1, ids_)[..., 0].to(torch.float32) / sq
        p_n = torch.gather(draft_probs, -1, ids_)[..., 0].to(torch.float32) / sp
        if spike_path:
            host = traced and not getattr(rule, "traceable_spike", False)
            if gamma is None:
                gamma = _spike_on_host(rule, q_n) if host else rule.spike_at_tokens(q_n)
            return ratio_acceptance(gamma, p_n), (gamma, None, None, None, None)
        return from_values(q_n, p_n), (None,) * 5
    if no_raw and from_rows is not None:
        to_target = rule.recovery_target_from_rows
        if traced and to_target is not None and rule.accept_from_row_target:
            # a target rule: a_n = min(1, h_n / p_n) from its row target, built once here on
            # the [B, k] rows (their constants are indexed at the recovery positions)
            row_target = to_target(_as_float32(target), _as_float32(draft_probs), draft_ids,
                                   sq, sp)
            ids_ = draft_ids[..., None]
            x_n = torch.gather(target, -1, ids_).to(torch.float32)
            y_n = torch.gather(draft_probs, -1, ids_).to(torch.float32)
            # p_n = y_n (1 / s_p), as the row target writes p
            return (ratio_acceptance(row_target.h(x_n, y_n)[..., 0], y_n[..., 0] * (1.0 / sp)),
                    (None,) * 5 + (row_target,))
        return (from_rows(_as_float32(target), _as_float32(draft_probs), draft_ids, sq, sp),
                (None,) * 5)
    q = _as_float32_rows(target)
    p = _as_float32_rows(draft_probs)
    raw_q = None if raw_target is None else _as_float32_rows(raw_target[:, :target.shape[1]])
    raw_p = None if raw_draft is None else _as_float32_rows(raw_draft)
    return (rule.accept_probs_at(q, p, draft_ids, raw_target_probs=raw_q, raw_draft_probs=raw_p),
            (None, q, p, raw_q, raw_p))


def _recovery_path(rule, target, draft_probs, draft_ids, pos, state, sq, sp,
                   traced: bool = False):
    """Un-normalized recovery weights [B, V] at the positions ``pos`` ([B]) of each row.

    ``state`` comes from :func:`_accept_path`. Cactus: the rows scaled, the row sums folded
    into :math:`c_n` and p's factor, gamma reused. Other rules: the rows normalized (the
    [B, V] rows only, unless path 4 made copies) and ``Rule.recovery_weights_at``.

    Returns ``(weights, fallback, block sums, fallback block sums)``: ``fallback`` (q's
    rows, normalized, or un-normalized in the traced form: the draw is proportional either
    way; None for Cactus) is what :func:`inverse_cdf_sample` draws from on a row whose
    weights are not finite with a positive sum (never reached for valid input).
    Eager (default): copies of the rows scaled in place; the block sums are None (computed by
    :func:`inverse_cdf_sample`). ``traced`` (the compiled core): the rows are indexed inside
    the formulas, so the compiled kernel reads them once and returns the block sums with the
    weights, without copies; for a rule with ``Rule.recovery_target_from_rows`` the weights
    are a :class:`~.blocked.BlockWeights` (block sums and the formula at one block's
    columns: no [B, V] weights at all).
    """
    gamma, q, p, raw_q, raw_p = state[:5]
    rows = torch.arange(pos.shape[0], device=pos.device)
    n_r = draft_ids[rows, pos]
    if traced and q is None:
        # float32 rows (the compiled core casts other dtypes first; a direct call with bf16 /
        # fp16 rows: the cast fuses into the reads)
        x = target[rows, pos].to(torch.float32)
        y = draft_probs[rows, pos].to(torch.float32)
        sx, sy = sq[rows, pos], sp[rows, pos]
        point = rule.recovery_token_from_rows
        token = None if point is None else point(x, y, n_r, sx, sy)
        if token is not None:           # a point mass: its block, no weights
            return point_mass_weights(token, x.shape[-1]), None, None, None
        hook = rule.recovery_target_from_rows
        if len(state) > 5:      # the accept path's row target, at the recovery positions
            row_target = state[5].index(rows, pos)
        else:
            row_target = None if hook is None else hook(
                x, y, n_r, sx, sy, None if gamma is None else gamma[rows, pos])
        if row_target is not None:      # block sums in one read; no [B, V] weights
            return residual_block_weights(row_target, x, y, sy), None, None, None
        if gamma is not None:
            w = rule.recovery_weights_from_spike(x, y, n_r, gamma[rows, pos], sx, sy)
            return w, None, _block_sums(w), None
        w = rule.recovery_weights_at(x / sx[:, None], y / sy[:, None], n_r)
        # the fallback draws in proportion to q: q's un-normalized rows serve
        return w, x, _block_sums(w), _block_sums(x)
    if gamma is not None:
        return rule.recovery_weights_from_spike(
            _as_float32(_rows_at(target, pos)), _as_float32(_rows_at(draft_probs, pos)), n_r,
            gamma[rows, pos], sq[rows, pos], sp[rows, pos], overwrite=True), None, None, None
    if q is None:  # normalize the [B, V] recovery rows only, as _as_float32_rows would
        q_r = _as_float32(_rows_at(target, pos)).div_(sq[rows, pos][:, None])
        p_r = _as_float32(_rows_at(draft_probs, pos)).div_(sp[rows, pos][:, None])
    else:
        q_r, p_r = q[rows, pos], p[rows, pos]
    rec = rule.recovery_weights_at(q_r, p_r, n_r,
                                   raw_target_probs=None if raw_q is None else raw_q[rows, pos],
                                   raw_draft_probs=None if raw_p is None else raw_p[rows, pos])
    # Safety net beyond the conventions (never reached for valid input): a row whose
    # weights are not finite with a positive sum draws from q instead, so no sample is
    # drawn from an all-zero or NaN row (the choice is made on block sums, in
    # inverse_cdf_sample). Cactus's weights have mass max(residual mass, mass of h^(n))
    # > 0 on valid rows and need none.
    return rec, q_r, None, None


def _verify_core(rule, traced: bool, target, bonus, draft_probs, draft_ids, raw_target,
                 raw_draft, u_acc, u_rec, num_drafts, sq, sp, invalid=None):
    r"""The tensor part of one call: acceptance, accepted prefix, recovery draw, output.

    A pure function of its tensors (no counters; the uniforms come in as tensors, or as
    callables the eager core calls where the eager sampler always drew them),
    so that ``fused=True`` compiles it whole per configured rule (``traced``; the exact
    root's host solver runs between two graphs). Row sums ``sq``, ``sp`` come from the entry
    validation; where they are None they are computed here (the compiled core: with the
    bad-row flags, in the same read as the accept path's). With ``invalid`` (bool [B], the
    entry validation's flags), those rows and the rows flagged here emit only -1 and count
    nowhere.

    Returns ``(out [B, k+1], accepted [B, k], counts, invalid)``: ``counts`` (int64 [4]) holds
    the increments of ``num_accepted_tokens``, ``num_accepted_prefix_tokens``,
    ``num_emitted_tokens`` and ``num_invalid_rows``; ``invalid`` is the flags applied, or
    None when none were given.
    """
    b, k = draft_ids.shape
    device = target.device
    bad_rows = None
    if sq is None or sp is None:
        if traced:
            sq, bad_q = fused_kernels.stats(target[:, :k])
            sp, bad_p = fused_kernels.stats(draft_probs)
            bad_rows = (bad_q | bad_p).any(-1)
        else:
            sq = target[:, :k].to(torch.float32).sum(-1)
            sp = draft_probs.to(torch.float32).sum(-1)
    # a row summing to 0 is divided by 1 (it is invalid input, masked at the end)
    sq, sp = _positive(sq), _positive(sp)
    gamma = None
    if (traced and raw_target is None and raw_draft is None
            and getattr(rule, "samples_from_spike", False)
            and not getattr(rule, "traceable_spike", False)):
        # the host root here, at the core's top level: the graph breaks once (two graphs);
        # inside _accept_path the break would split both frames (four graphs)
        ids_ = draft_ids[..., None]
        gamma = _spike_on_host(
            rule, torch.gather(target[:, :k], -1, ids_)[..., 0].to(torch.float32) / sq)
    # bounds first where the rule has them, the exact test on the rows they leave undecided
    # (here, at the core's top level: the compiled core breaks once, around that test)
    decided = _decided_by_bounds(rule, target[:, :k], draft_probs, draft_ids, raw_target,
                                 raw_draft, sq, sp, traced)
    if decided is not None:
        a = _accept_undecided_rows(rule.accept_probs_from_rows, *decided, draft_ids, sq, sp)
        state = (None,) * 5
    else:
        a, state = _accept_path(rule, target[:, :k], draft_probs, draft_ids, raw_target,
                                raw_draft, sq, sp, traced, gamma)
    if callable(u_acc):       # the eager core draws its uniforms here (after the accept path)
        u_acc = u_acc()
    accepted = (a > 0.5) if rule.spec.deterministic else (u_acc < a)
    if num_drafts is not None:  # ragged layout: positions >= k_i are padding
        accepted = accepted & (torch.arange(k, device=device)[None, :] < num_drafts[:, None])
        k_row = num_drafts
    else:
        k_row = torch.full((b,), k, dtype=torch.int64, device=device)
    n_acc = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)          # N_b, [B]

    # Recovery: only at the first rejected position of each row, [B, V].
    pos = torch.minimum(n_acc, (k_row - 1).clamp_min(0))
    rec, fallback, rec_sums, fb_sums = _recovery_path(rule, target, draft_probs, draft_ids, pos,
                                                      state, sq, sp, traced)
    recovered = inverse_cdf_sample(rec, None, fallback, block_sums=rec_sums,
                                   fallback_block_sums=fb_sums,
                                   uniforms=u_rec() if callable(u_rec) else u_rec)

    # Output layout (vLLM _create_output): drafts before N, then one token, then -1.
    col = torch.arange(k + 1, device=device)[None, :]
    drafts_ext = torch.cat([draft_ids, bonus], dim=1)
    extra = torch.where(n_acc < k_row, recovered, bonus[:, 0])
    out = torch.where(col < n_acc[:, None], drafts_ext,
                      torch.where(col == n_acc[:, None], extra[:, None],
                                  torch.full_like(drafts_ext, -1)))
    n_invalid = torch.zeros((), dtype=torch.int64, device=device)
    if invalid is not None:
        if bad_rows is not None:
            invalid = invalid | bad_rows
        out = torch.where(invalid[:, None], torch.full_like(out, -1), out)
        accepted = accepted & ~invalid[:, None]
        n_acc = torch.where(invalid, torch.zeros_like(n_acc), n_acc)
        n_invalid = invalid.sum()
    counts = torch.stack([accepted.sum(), n_acc.sum(), (out != -1).sum(), n_invalid])
    return out, accepted, counts, invalid


class RuleSampler(torch.nn.Module):
    r"""Batched speculative-sampling verifier for one configured rule (vLLM 0.7.3 V0 interface).

    Parameters
    ----------
    rule : str or Rule
        A registry name (with ``**knobs``) or a configured rule (:func:`~cactus_theory.rules.get_rule`).
    strict_mode : bool
        As vLLM's: validate values (ids in range, probabilities finite and non-negative, rows
        not all zero) before sampling, at the cost of host-device synchronizations. Shapes,
        dtypes and devices are always checked (metadata only, no synchronization). Violations
        raise ValueError naming the argument (vLLM asserts).
    fused : bool
        Compile the tensor part of each call (:func:`_verify_core`: row checks and sums,
        accept path, recovery weights and their block sums, draw, output) with
        ``torch.compile`` (:mod:`.fused`): fewer reads of the [B, k, V] inputs and fewer
        kernels, two-level row sums. The same formulas, random stream and law;
        the first call compiles (seconds), and if compiling fails the kernels warn once and
        run eagerly. On a CPU whose cores other processes hold, the compiled kernels' OpenMP
        regions slow down sharply (:mod:`.fused`). Default False: eager torch, nothing
        compiled.
    **knobs
        The rule's knobs when ``rule`` is a name.

    Attributes
    ----------
    num_accepted_tokens : Tensor (0-dim int64, on the device) or None
        vLLM V0 semantics: the number of **every** True of the non-causal ``[B, k]`` accept
        matrix, i.e. positions after the first rejection of a row count when their own test
        passes (``spec_decode_base_sampler.py::_create_output``; vLLM's ``metrics.py`` calls it a
        draft/target alignment measure). It is a per-position (marginal) count, not the
        accepted-prefix length that sets the speed.
    num_accepted_prefix_tokens : Tensor (0-dim int64) or None
        Not in vLLM V0: the prefix-causal count :math:`\sum_b N_b` (what vLLM V1 calls
        ``num_accepted_tokens``, and the numerator of the paper's AL).
    num_emitted_tokens : Tensor (0-dim int64) or None
        Non-``-1`` output entries: :math:`\sum_b (N_b + 1)` (accepted drafts plus one
        recovered-or-bonus token each).
    num_draft_tokens : int
        ``B * k`` summed over calls (a Python int, as in vLLM).
    last_accepted : Tensor (B, k) bool or None
        The non-causal accept matrix of the latest call.

    Notes
    -----
    vLLM creates the device counters in ``init_gpu_tensors`` / ``init_tensors`` and crashes
    when ``forward`` runs before; here they are created on the input's device at the first
    call if needed.

    References
    ----------
    vLLM 0.7.3 ``vllm/model_executor/layers/spec_decode_base_sampler.py``,
    ``rejection_sampler.py``, ``typical_acceptance_sampler.py``; engines.md sections 1.1-1.7.
    """

    probs_dtype = torch.float32
    token_id_dtype = torch.int64
    _num_bonus_tokens = 1

    def __init__(self, rule, *, strict_mode: bool = False, fused: bool = False, **knobs):
        super().__init__()
        self.rule: Rule = get_rule(rule, **knobs)
        self.spec = self.rule.spec
        self._strict_mode = bool(strict_mode)
        if not isinstance(fused, bool):
            raise ValueError(f"fused: expected True or False, got {fused!r}")
        self.fused = fused
        self.num_accepted_tokens: Optional[torch.Tensor] = None
        self.num_accepted_prefix_tokens: Optional[torch.Tensor] = None
        self.num_emitted_tokens: Optional[torch.Tensor] = None
        self.num_draft_tokens = 0
        self.last_accepted: Optional[torch.Tensor] = None
        self.num_invalid_rows: Optional[torch.Tensor] = None
        self.last_invalid_rows: Optional[torch.Tensor] = None

    # -- counters (vLLM names) ------------------------------------------------------------
    def init_gpu_tensors(self, device) -> None:
        """Create the device counters on ``device`` (an int is a CUDA ordinal, as in vLLM)."""
        if isinstance(device, int):
            device = f"cuda:{device}"
        self.init_tensors(device)

    def init_tensors(self, device, device_type: str | None = None) -> None:
        """Create the counters on ``device`` (``device_type`` prefixes an int ordinal)."""
        if isinstance(device, int):
            device = f"{device_type or 'cuda'}:{device}"
        zero = lambda: torch.tensor(0, dtype=torch.long, device=device)  # noqa: E731
        self.num_accepted_tokens = zero()
        self.num_accepted_prefix_tokens = zero()
        self.num_emitted_tokens = zero()

    # -- validation ---------------------------------------------------------------------------
    def _check_shapes(self, target, bonus, draft_probs, draft_ids, raw_target, raw_draft):
        if target.dim() != 3:
            raise ValueError(f"target_with_bonus_probs: expected [B, k+1, V], got shape {tuple(target.shape)}")
        b, k1, v = target.shape
        k = k1 - 1
        if k < 1:
            raise ValueError("target_with_bonus_probs: needs k+1 >= 2 positions (k >= 1 drafts)")
        if draft_probs is not None and tuple(draft_probs.shape) != (b, k, v):
            raise ValueError(f"draft_probs: expected shape {(b, k, v)}, got {tuple(draft_probs.shape)}")
        if tuple(draft_ids.shape) != (b, k):
            raise ValueError(f"draft_token_ids: expected shape {(b, k)}, got {tuple(draft_ids.shape)}")
        if tuple(bonus.shape) != (b, 1):
            raise ValueError(f"bonus_token_ids: expected shape {(b, 1)}, got {tuple(bonus.shape)}")
        for name, t in (("target_with_bonus_probs", target), ("draft_probs", draft_probs),
                        ("raw_target_probs", raw_target), ("raw_draft_probs", raw_draft)):
            if t is not None and not t.is_floating_point():
                raise ValueError(f"{name}: must be a floating tensor, got {t.dtype}")
        for name, t in (("draft_token_ids", draft_ids), ("bonus_token_ids", bonus)):
            if t.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{name}: must be int64 (or int32), got {t.dtype}")
        for name, t in (("draft_probs", draft_probs), ("draft_token_ids", draft_ids),
                        ("bonus_token_ids", bonus), ("raw_target_probs", raw_target),
                        ("raw_draft_probs", raw_draft)):
            if t is not None and t.device != target.device:
                raise ValueError(f"{name}: on {t.device}, target_with_bonus_probs on {target.device}")
        if raw_target is not None and (raw_target.dim() != 3 or raw_target.shape[0] != b
                                       or raw_target.shape[1] not in (k, k + 1) or raw_target.shape[2] != v):
            raise ValueError(f"raw_target_probs: expected [B, k or k+1, V] = [{b}, {k}|{k + 1}, {v}], "
                             f"got {tuple(raw_target.shape)}")
        if raw_draft is not None and tuple(raw_draft.shape) != (b, k, v):
            raise ValueError(f"raw_draft_probs: expected shape {(b, k, v)}, got {tuple(raw_draft.shape)}")
        return b, k, v

    @staticmethod
    def _check_values(v, **tensors):
        """Strict mode: value checks (they synchronize with the host)."""
        for name, t in tensors.items():
            if t is None:
                continue
            if t.is_floating_point():
                tf = t.float()
                if not bool(torch.isfinite(tf).all()):
                    raise ValueError(f"{name}: contains NaN or infinite values")
                if bool((tf < 0).any()):
                    raise ValueError(f"{name}: contains negative probabilities")
                if t.numel() and bool((tf.sum(-1) <= 0).any()):
                    raise ValueError(f"{name}: a row sums to 0")
            elif t.numel() and bool(((t < 0) | (t >= v)).any()):
                raise ValueError(f"{name}: token id outside [0, {v})")

    # -- the sampler ---------------------------------------------------------------------------
    def forward(
        self,
        target_with_bonus_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        draft_probs: torch.Tensor,
        draft_token_ids: torch.Tensor,
        seeded_seqs: Optional[Dict[int, torch.Generator]] = None,
        *,
        raw_target_probs: Optional[torch.Tensor] = None,
        raw_draft_probs: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        r"""Verify k drafted tokens per row and return the emitted tokens.

        Parameters
        ----------
        target_with_bonus_probs : Tensor, shape (B, k+1, V)
            Processed verifier distributions q at the k draft positions plus the bonus position
            (only the first k enter; the bonus comes pre-sampled). float32; bf16/fp16 are cast
            to float32. Rows are renormalized (convention 1), not validated.
        bonus_token_ids : Tensor, shape (B, 1), int64
            Token sampled by the caller from q at position k; emitted iff all k are accepted.
        draft_probs : Tensor, shape (B, k, V)
            Drafter distributions p (read even by rules that ignore p, for the shape).
        draft_token_ids : Tensor, shape (B, k), int64
            The drafted tokens n, sampled from ``draft_probs``.
        seeded_seqs : dict of int to torch.Generator, optional
            Row index -> generator, as vLLM's: a seeded row draws its k acceptance uniforms and
            then its recovery uniform (one float64, :func:`inverse_cdf_sample`) from its own
            generator, so its output depends only on its inputs and its generator's state. Generators must live on the
            inputs' device (as vLLM's); keys outside ``[0, B)`` raise ValueError.
        raw_target_probs, raw_draft_probs : Tensor, optional
            Raw (temperature-1) distributions for rules that decide on them
            (``RuleSpec.needs_raw``), shapes (B, k or k+1, V) and (B, k, V); default: the
            processed ones.

        Returns
        -------
        Tensor, shape (B, k+1), int64
            Per row: the accepted prefix of drafts, one recovered-or-bonus token, then -1.

        Raises
        ------
        ValueError
            Wrong shapes, dtypes or devices (always); bad values (strict mode only; otherwise
            the row is flagged and emits only -1, see :func:`validate_sampler_entry`).
        TypeError
            A numpy array (or other non-tensor) for a tensor argument; ``seeded_seqs`` not a
            dict of ``torch.Generator``.
        """
        # the compiled core checks the rows itself, in the same read as its accept path
        traced = self._traced_core(raw_target_probs, raw_draft_probs)
        draft_ids, bonus, invalid, probs, sums = validate_sampler_entry(
            target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs,
            raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs, return_sums=True,
            fused=self.fused, row_checks=not traced)
        if self._strict_mode:  # raise on the original values (names the argument)
            self._check_shapes(target_with_bonus_probs, bonus_token_ids, draft_probs,
                               draft_token_ids, raw_target_probs, raw_draft_probs)
            self._check_values(target_with_bonus_probs.shape[-1],
                               target_with_bonus_probs=target_with_bonus_probs,
                               draft_probs=draft_probs, raw_target_probs=raw_target_probs,
                               raw_draft_probs=raw_draft_probs,
                               draft_token_ids=draft_token_ids, bonus_token_ids=bonus_token_ids)
        if invalid is not None and invalid.shape[:1] != draft_ids.shape[:1]:
            invalid = None          # (shapes the checks below reject)
        try:
            return self._verify(probs[0], bonus, probs[1], draft_ids, seeded_seqs, probs[2],
                                probs[3], sums=sums, invalid=invalid)
        except (ValueError, ArithmeticError, RuntimeWarning):  # (warnings raised as errors)
            if invalid is None:
                raise
            # a rule that validates on the host met an invalid row: retry on sanitized rows
            # (a valid batch raises again, unchanged)
            probs = validate_sampler_entry(
                target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids,
                seeded_seqs, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs,
                sanitize=True)
            invalid, probs = probs[2], probs[3]   # the sanitizing pass checks every row
            return self._verify(probs[0], bonus, probs[1], draft_ids, seeded_seqs, probs[2],
                                probs[3], invalid=invalid)

    def _accept_path(self, target, draft_probs, draft_ids, raw_target, raw_draft, sq, sp):
        """:math:`a_n` at the drafted tokens and the recovery's state (:func:`_accept_path`),
        by the path the call takes (the compiled core's when ``fused``; a rule's bounds and
        the exact test on the rows they leave undecided first, as :func:`_verify_core`)."""
        decided = _decided_by_bounds(self.rule, target, draft_probs, draft_ids, raw_target,
                                     raw_draft, sq, sp, self._traced_core(raw_target, raw_draft))
        if decided is not None:
            return (_accept_undecided_rows(self.rule.accept_probs_from_rows, *decided, draft_ids,
                                           sq, sp), (None,) * 5)
        return _accept_path(self.rule, target, draft_probs, draft_ids, raw_target, raw_draft,
                            sq, sp, traced=self._traced_core(raw_target, raw_draft))

    def _recovery_path(self, target, draft_probs, draft_ids, pos, state, sq, sp):
        """Recovery weights at ``pos`` and their block sums (:func:`_recovery_path`)."""
        return _recovery_path(self.rule, target, draft_probs, draft_ids, pos, state, sq, sp,
                              traced=self._traced_core(None, None))

    def _traced_core(self, raw_target, raw_draft) -> bool:
        """True when ``fused`` compiles the whole tensor part of a call (:func:`_verify_core`):
        no raw distributions, and a rule with a fast accept path (the others build plans or
        call host solvers: their rows stay eager, with the fused entry checks)."""
        rule = self.rule
        return (self.fused and raw_target is None and raw_draft is None
                and (getattr(rule, "samples_from_spike", False)
                     or rule.accept_probs_from_values is not None
                     or rule.accept_probs_from_rows is not None))

    def _verify(self, target, bonus, draft_probs, draft_ids, seeded_seqs, raw_target, raw_draft,
                num_drafts: Optional[torch.Tensor] = None, counts=None, sums=None,
                invalid: Optional[torch.Tensor] = None):
        """The call after the entry validation. ``invalid`` (bool [B], from
        :func:`validate_sampler_entry`, or per request in the ragged layout): rows whose
        output is replaced by -1 and taken out of the counters, counted in
        ``num_invalid_rows`` and flagged in ``last_invalid_rows`` (with the rows the compiled
        core flags itself); None: no masking."""
        b, k, v = self._check_shapes(target, bonus, draft_probs, draft_ids, raw_target, raw_draft)
        device = target.device
        if self.num_accepted_tokens is None:
            self.init_tensors(device)
        if self._strict_mode:
            self._check_values(v, target_with_bonus_probs=target, draft_probs=draft_probs,
                               raw_target_probs=raw_target, raw_draft_probs=raw_draft,
                               draft_token_ids=draft_ids, bonus_token_ids=bonus)
        if seeded_seqs:
            bad = [i for i in seeded_seqs
                   if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < b]
            if bad:
                raise ValueError(f"seeded_seqs: row indices {bad} outside [0, {b})")
        if b == 0:
            self.last_accepted = torch.zeros((0, k), dtype=torch.bool, device=device)
            return torch.empty((0, k + 1), dtype=self.token_id_dtype, device=device)
        draft_ids = draft_ids.to(torch.int64)
        bonus = bonus.to(torch.int64)

        # The call's random numbers, in stream order: the k acceptance uniforms of each row
        # (none for deterministic rules), then one recovery uniform per row (float64; Apple's
        # MPS has no float64: float32 there).
        # The eager core draws them where it uses them (callables), so that a rule raising on
        # the host before any draw leaves the seeded generators untouched for forward's retry.
        def u_acc():
            return None if self.spec.deterministic else _uniforms(seeded_seqs, b, k, device, counts)

        def u_rec():
            gens = [seeded_seqs.get(i) for i in range(b)] if seeded_seqs else None
            return _row_uniforms(b, device, gens,
                                 torch.float32 if device.type == "mps" else torch.float64)

        sq = None if sums is None else sums[0]
        sp = None if sums is None else sums[1]
        if self._traced_core(raw_target, raw_draft):
            u_acc, u_rec = u_acc(), u_rec()          # (the compiled core takes tensors)
            # Other float dtypes are cast to float32 before the compiled core (the eager
            # core's values): one kernel per rule and shape for every input dtype. Cast
            # inside, bf16 and fp16 rows each compiled a kernel of their own (20-90 s each,
            # as float32's).
            target, draft_probs = _as_float32(target), _as_float32(draft_probs)
            out, accepted, counts_, invalid = fused_kernels.compiled_for(
                self.rule, _verify_core, v, k)(
                self.rule, True, target, bonus, draft_probs, draft_ids, None, None, u_acc,
                u_rec, num_drafts, sq, sp, invalid)
        else:
            out, accepted, counts_, invalid = _verify_core(
                self.rule, False, target, bonus, draft_probs, draft_ids, raw_target, raw_draft,
                u_acc, u_rec, num_drafts, sq, sp, invalid)

        self.last_accepted = accepted
        # (in place: the counters stay the same tensors, without nn.Module's __setattr__)
        self.num_accepted_tokens.add_(counts_[0])
        self.num_accepted_prefix_tokens.add_(counts_[1])
        self.num_emitted_tokens.add_(counts_[2])
        self.num_draft_tokens += b * k if counts is None else int(sum(counts))
        if invalid is not None:
            if self.num_invalid_rows is None:
                self.num_invalid_rows = torch.zeros((), dtype=torch.long, device=device)
            self.num_invalid_rows.add_(counts_[3])
            self.last_invalid_rows = invalid
        return out

    def extra_repr(self) -> str:
        return f"rule={self.rule!r}, strict_mode={self._strict_mode}, fused={self.fused}"
