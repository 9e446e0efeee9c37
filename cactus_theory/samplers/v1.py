r"""A thin adapter for vLLM V1's ragged layout (``vllm/v1/sample/rejection_sampler.py``).

vLLM V1 (2025 versions, engines.md 1.9(b)) flattens the drafts of a batch: ``draft_token_ids``
is 1-D of length :math:`\sum_i k_i`, request i owns the slice
``cu_num_draft_tokens[i-1] : cu_num_draft_tokens[i]`` (``k_i`` may differ between requests and
may be 0), ``draft_probs`` and the verifier's ``target_probs`` are ``[num_tokens, V]`` and the
output is ``[B, max_spec_len + 1]`` int32 padded with ``PLACEHOLDER_TOKEN_ID = -1``.
:func:`ragged_forward` pads to the V0 layout and runs :class:`~.base.RuleSampler`'s core, so a
rule behaves identically in both layouts; :func:`parse_output` and :class:`V1Stats` reproduce
V1's output parsing and its prefix-causal counters (``vllm/v1/spec_decode/metrics.py``).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

.. warning::
    V1's own kernel rejects whenever p_n = 0 and accepts iff ``u <= q_n / p_n`` with float64
    uniforms; this adapter keeps the core's conventions (p_n = 0: accept iff h_n > 0;
    ``u < a`` in float32). ``draft_probs=None`` (n-gram / no-draft-probs proposers) is
    handled as V1 does: p is the point mass at the drafted token, so SpS accepts with q_n and
    recovers from q with n removed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .base import RuleSampler, validate_sampler_entry

__all__ = ["ragged_forward", "parse_output", "V1Stats", "PLACEHOLDER_TOKEN_ID"]

PLACEHOLDER_TOKEN_ID = -1


def _counts(num_draft_tokens, cu_num_draft_tokens, n_tokens: int) -> list[int]:
    if num_draft_tokens is None and cu_num_draft_tokens is None:
        raise ValueError("num_draft_tokens: give num_draft_tokens or cu_num_draft_tokens")
    if num_draft_tokens is None:
        cu = [
            int(c)
            for c in (
                cu_num_draft_tokens.tolist() if torch.is_tensor(cu_num_draft_tokens) else cu_num_draft_tokens
            )
        ]
        counts = [c - p for p, c in zip([0] + cu[:-1], cu)]
    else:
        counts = [int(c) for c in num_draft_tokens]
    if any(c < 0 for c in counts):
        raise ValueError("num_draft_tokens: counts must be >= 0 (cumulative counts non-decreasing)")
    if sum(counts) != n_tokens:
        raise ValueError(f"num_draft_tokens: counts sum to {sum(counts)}, draft_token_ids has {n_tokens}")
    return counts


def ragged_forward(
    sampler: RuleSampler,
    draft_token_ids: torch.Tensor,
    num_draft_tokens: Sequence[int] | None,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    *,
    cu_num_draft_tokens=None,
    generators: dict[int, torch.Generator] | None = None,
    max_spec_len: int | None = None,
    raw_target_probs: torch.Tensor | None = None,
    raw_draft_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Verify a ragged batch (vLLM V1 layout) with a :class:`RuleSampler`.

    Parameters
    ----------
    sampler : RuleSampler
        The rule's sampler (its V0 counters are updated too, counting only real drafts).
    draft_token_ids : Tensor, shape (num_tokens,), int
        Flat drafted tokens n, request by request.
    num_draft_tokens : sequence of int, or None
        ``k_i`` per request (host list, as in V1's ``SpecDecodeMetadata``); or give
        ``cu_num_draft_tokens`` (cumulative sums) instead.
    draft_probs : Tensor, shape (num_tokens, V), or None
        Drafter p at each flat position; None means point masses at the drafted tokens.
    target_probs : Tensor, shape (num_tokens, V)
        Processed verifier q at each flat position (V1 computes it from logits inside its
        sampler; pass the probabilities).
    bonus_token_ids : Tensor, shape (B, 1)
        Bonus token per request, sampled by the caller from q after the last draft.
    generators : dict of int to torch.Generator, optional
        Request index -> generator (V1's ``sampling_metadata.generators``). A seeded request
        draws exactly ``k_i`` acceptance uniforms (none when ``k_i = 0``), then its recovery
        noise, so it reproduces a V0 call on that request alone with the same generator.
    max_spec_len : int, optional
        Output width minus one; default ``max(k_i)``.
    raw_target_probs, raw_draft_probs : Tensor, shape (num_tokens, V), optional
        Raw distributions for rules that decide on them.

    Returns
    -------
    Tensor, shape (B, max_spec_len + 1), int32
        Per request: accepted drafts, then the recovered token (first rejection) or the bonus
        token (all ``k_i`` accepted; for ``k_i = 0`` just the bonus), then -1. A request with
        a token id outside ``[0, V)`` or a NaN / negative / all-zero probability row emits
        only -1 and is flagged in ``sampler.last_invalid_rows``
        (:func:`~.base.validate_sampler_entry`, called first).

    Raises
    ------
    TypeError
        A numpy array for a tensor argument, or ``generators`` not a dict of torch.Generator.
    """
    if (
        torch.is_tensor(target_probs)
        and torch.is_tensor(draft_token_ids)
        and torch.is_tensor(bonus_token_ids)
    ):
        sampler._strict(  # strict mode's value checks (a no-op otherwise)
            target_probs.shape[-1],
            target_probs=target_probs,
            draft_probs=draft_probs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            draft_token_ids=draft_token_ids,
            bonus_token_ids=bonus_token_ids,
        )
    entry = dict(
        raw_target_probs=raw_target_probs,
        raw_draft_probs=raw_draft_probs,
        target_names=("target_probs", "draft_probs"),
    )
    originals = (target_probs, bonus_token_ids, draft_probs, draft_token_ids, generators)
    draft_token_ids, bonus_token_ids, invalid_tok, probs = validate_sampler_entry(*originals, **entry)
    body = functools.partial(
        _ragged,
        sampler,
        draft_token_ids,
        num_draft_tokens,
        bonus_token_ids,
        invalid_tok,
        cu_num_draft_tokens=cu_num_draft_tokens,
        generators=generators,
        max_spec_len=max_spec_len,
    )
    try:
        return body(probs)
    except (ValueError, ArithmeticError, RuntimeWarning):  # (warnings raised as errors)
        if invalid_tok is None or not bool(invalid_tok.any()):
            raise
        # a rule that validates on the host met an invalid row: retry on sanitized rows
        return body(validate_sampler_entry(*originals, **entry, sanitize=True)[3])


def _ragged_shapes(
    draft_token_ids, num_draft_tokens, bonus_token_ids, probs, cu_num_draft_tokens, max_spec_len
):
    """The ragged call's shape checks: ``(counts, B, V, kmax, width)``."""
    target_probs, draft_probs, raw_target_probs, raw_draft_probs = probs
    if draft_token_ids.dim() != 1:
        raise ValueError(f"draft_token_ids: expected 1-D, got shape {tuple(draft_token_ids.shape)}")
    if bonus_token_ids.dim() != 2 or bonus_token_ids.shape[1] != 1:
        raise ValueError(f"bonus_token_ids: expected [B, 1], got {tuple(bonus_token_ids.shape)}")
    n_tok = draft_token_ids.shape[0]
    counts = _counts(num_draft_tokens, cu_num_draft_tokens, n_tok)
    b = bonus_token_ids.shape[0]
    if len(counts) != b:
        raise ValueError(f"num_draft_tokens: {len(counts)} requests, bonus_token_ids has {b}")
    if target_probs.dim() != 2 or target_probs.shape[0] != n_tok:
        raise ValueError(f"target_probs: expected [{n_tok}, V], got {tuple(target_probs.shape)}")
    v = target_probs.shape[1]
    for name, t in (
        ("draft_probs", draft_probs),
        ("raw_target_probs", raw_target_probs),
        ("raw_draft_probs", raw_draft_probs),
    ):
        if t is not None and tuple(t.shape) != (n_tok, v):
            raise ValueError(f"{name}: expected shape {(n_tok, v)}, got {tuple(t.shape)}")
    kmax = max(counts, default=0)
    width = kmax if max_spec_len is None else int(max_spec_len)
    if width < kmax:
        raise ValueError(f"max_spec_len: {width} < the longest draft ({kmax})")
    return counts, b, v, kmax, width


def _padded(draft_token_ids, probs, counts, kmax: int):
    """The V0 layout ``[B, kmax(+1), V]`` of the flat rows: ``(q, p, ids, raw_q, raw_p)``,
    padded past ``k_i`` with a uniform row (a dummy at flat index ``num_tokens``)."""
    target_probs, draft_probs, raw_target_probs, raw_draft_probs = probs
    n_tok, v = target_probs.shape
    device = target_probs.device
    starts = [0]
    for c in counts[:-1]:
        starts.append(starts[-1] + c)
    index = [[starts[i] + j if j < counts[i] else n_tok for j in range(kmax)] for i in range(len(counts))]
    index = torch.tensor(index, dtype=torch.int64, device=device)
    uniform = torch.full((1, v), 1.0 / v, dtype=target_probs.dtype, device=device)

    def pad(x):
        return None if x is None else torch.cat([x, uniform.to(x.dtype)], dim=0)[index]  # [B, kmax, V]

    zero = torch.zeros(1, dtype=torch.int64, device=device)
    ids = torch.cat([draft_token_ids.to(torch.int64), zero])[index]
    if draft_probs is None:
        p = torch.zeros((len(counts), kmax, v), dtype=torch.float32, device=device)
        p.scatter_(-1, ids[..., None], 1.0)
    else:
        p = pad(draft_probs)
    q = pad(target_probs)
    q = torch.cat([q, q[:, -1:]], dim=1)  # unused bonus slot
    return q, p, ids, pad(raw_target_probs), pad(raw_draft_probs)


def _ragged(
    sampler,
    draft_token_ids,
    num_draft_tokens,
    bonus_token_ids,
    invalid_tok,
    probs,
    cu_num_draft_tokens,
    generators,
    max_spec_len,
):
    """The body of :func:`ragged_forward` after its entry validation."""
    counts, b, v, kmax, width = _ragged_shapes(
        draft_token_ids, num_draft_tokens, bonus_token_ids, probs, cu_num_draft_tokens, max_spec_len
    )
    device = probs[0].device
    out = torch.full((b, width + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
    if b == 0:
        return out
    # Invalid rows (entry validation): a request with an invalid id or probability row.
    req_of_tok = torch.repeat_interleave(
        torch.arange(b, device=device), torch.tensor(counts, dtype=torch.int64, device=device)
    )
    invalid = torch.zeros(b, dtype=torch.bool, device=device)
    if invalid_tok is not None and invalid_tok.shape == req_of_tok.shape:
        invalid = invalid.index_put((req_of_tok,), invalid_tok, accumulate=True)
    invalid = invalid | ((bonus_token_ids < 0) | (bonus_token_ids >= v)).any(dim=-1)
    bonus_token_ids = bonus_token_ids.clamp(0, v - 1)
    if kmax == 0:
        out[:, 0] = bonus_token_ids[:, 0].to(torch.int32)
        return torch.where(invalid[:, None], torch.full_like(out, PLACEHOLDER_TOKEN_ID), out)
    q, p, ids, raw_q, raw_p = _padded(draft_token_ids, probs, counts, kmax)
    k_row = torch.tensor(counts, dtype=torch.int64, device=device)
    res = sampler._verify(
        q,
        bonus_token_ids.to(torch.int64),
        p,
        ids,
        generators,
        raw_q,
        raw_p,
        num_drafts=k_row,
        counts=counts,
        invalid=invalid,
    )
    out[:, : kmax + 1] = res.to(torch.int32)
    return out


def parse_output(output: torch.Tensor, vocab_size: int) -> list[list[int]]:
    """vLLM V1's ``RejectionSampler.parse_output``: per request, the emitted token ids.

    Parameters
    ----------
    output : Tensor, shape (B, max_spec_len + 1)
        From :func:`ragged_forward` (or a V0 ``[B, k+1]`` output).
    vocab_size : int
        V; ids outside ``[0, V)`` (the -1 placeholder) are dropped, as V1 does.

    Returns
    -------
    list of list of int
        Accepted drafts n followed by the recovered-or-bonus token, per request.

    References
    ----------
    ``vllm/v1/sample/rejection_sampler.py`` (engines.md 1.9).
    """
    rows = output.tolist()
    return [[t for t in row if 0 <= t < vocab_size] for row in rows]


@dataclass
class V1Stats:
    """vLLM V1's ``SpecDecodingStats`` for one step (prefix-causal counts).

    Attributes
    ----------
    num_drafts : int
        Requests that drafted at least one token.
    num_draft_tokens : int
        :math:`\\sum_i k_i`.
    num_accepted_tokens : int
        :math:`\\sum_i N_i` (prefix-causal, ``len(output_i) - 1``), unlike V0's non-causal count.
    num_accepted_tokens_per_pos : list of int
        Position j counted when :math:`N_i > j`.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: list[int]

    @classmethod
    def from_output(cls, output: torch.Tensor, num_draft_tokens: Sequence[int], vocab_size: int):
        """Fill the counters from a :func:`ragged_forward` output (as V1's scheduler does)."""
        parsed = parse_output(output, vocab_size)
        k = max(num_draft_tokens, default=0)
        per_pos = [0] * k
        acc = drafts = 0
        for row, ki in zip(parsed, num_draft_tokens):
            if ki == 0:
                continue
            drafts += 1
            n = len(row) - 1
            acc += n
            for j in range(n):
                per_pos[j] += 1
        return cls(drafts, int(sum(num_draft_tokens)), acc, per_pos)

    @property
    def mean_acceptance_length(self) -> float:
        """V1's logged "Mean acceptance length" ``1 + accepted / drafts`` (counts the bonus)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")
