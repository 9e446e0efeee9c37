r"""The tensor part of one sampler call: the accept path, the accepted prefix, the recovery
weights and draw, the output layout (:func:`verify_core`, compiled whole by ``fused=True``).

Every step is a callable of the sampler's :class:`~._program.Program`, bound from the rule's
declaration and its kernels when the sampler was made; this module only runs them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from . import _fused as fused_kernels
from ._program import AcceptState, Program
from .draws import inverse_cdf_sample

__all__ = ["CoreInputs", "CoreOutput", "verify_core", "accept_undecided_rows", "core_accept"]


def _positive(s: torch.Tensor) -> torch.Tensor:
    """Row sums with 1 where a row sums to 0 or less (an invalid row, masked at the end)."""
    return torch.where(s > 0, s, torch.ones_like(s))


class CoreInputs(NamedTuple):
    """The tensors of one call's core (:func:`verify_core`), after the entry validation.

    Attributes
    ----------
    target : Tensor, shape (B, k+1, V)
        Verifier rows q, un-normalized, at the k draft positions and the bonus position.
    bonus : Tensor, shape (B, 1), int64
        The pre-sampled bonus tokens.
    draft_probs : Tensor, shape (B, k, V)
        Drafter rows p, un-normalized.
    draft_ids : Tensor, shape (B, k), int64
        The drafted tokens n (clamped into range).
    raw_target, raw_draft : Tensor or None
        Raw distributions for the rules that decide on them (``RuleSpec.needs_raw``).
    u_acc : Tensor (B, k), callable or None
        The acceptance uniforms (None for deterministic rules), or a callable drawing them
        (the eager core draws where it uses them).
    u_rec : Tensor (B, 1) or callable
        The recovery uniforms, or a callable drawing them.
    num_drafts : Tensor (B,) or None
        Drafts per row in the ragged layout (positions at or past it are padding).
    target_sums, draft_sums : Tensor (B, k) or None
        Float32 row sums from the entry validation (None: computed by the core).
    invalid : Tensor (B,) bool or None
        Rows flagged by the entry validation (their output is -1).
    """

    target: torch.Tensor
    bonus: torch.Tensor
    draft_probs: torch.Tensor
    draft_ids: torch.Tensor
    raw_target: torch.Tensor | None = None
    raw_draft: torch.Tensor | None = None
    u_acc: Any = None
    u_rec: Any = None
    num_drafts: torch.Tensor | None = None
    target_sums: torch.Tensor | None = None
    draft_sums: torch.Tensor | None = None
    invalid: torch.Tensor | None = None


class CoreOutput(NamedTuple):
    """The results of :func:`verify_core`.

    Attributes
    ----------
    out : Tensor (B, k+1) int64
        The emitted tokens (accepted drafts, one recovered-or-bonus token, then -1).
    accepted : Tensor (B, k) bool
        The non-causal accept matrix.
    counts : Tensor (4,) int64
        Increments of ``num_accepted_tokens``, ``num_accepted_prefix_tokens``,
        ``num_emitted_tokens`` and ``num_invalid_rows``.
    invalid : Tensor (B,) bool or None
        The row flags applied (None when none were given).
    """

    out: torch.Tensor
    accepted: torch.Tensor
    counts: torch.Tensor
    invalid: torch.Tensor | None


@torch.compiler.disable
def accept_undecided_rows(exact, accept, undecided, x, y, ids, sx, sy):
    """``accept`` (bool [B, k], decided by a rule's bounds) as float32, with the exact test
    ``exact`` evaluated on the rows ``undecided`` selects (gathered: [n, V] copies of those
    rows only). Outside any compiled graph: the selection's size is data-dependent."""
    out = accept.to(torch.float32)
    if bool(undecided.any()):
        idx = undecided.nonzero(as_tuple=True)
        out[idx] = exact(x[idx], y[idx], ids[idx], sx[idx], sy[idx])
    return out


def core_accept(program: Program, target, draft, ids, raw_target, raw_draft, sq, sp):
    r""":math:`a_n` at the drafted tokens [B, k] and the recovery's state, by the program's
    path: the plan path on normalized copies when raw distributions are given; else the
    kernel's bounds where they apply (the compiled core on CPU tensors; the exact test on
    the rows they leave undecided), else the program's accept path (the compiled core's host
    root first, at its top level: the graph breaks once)."""
    if raw_target is not None or raw_draft is not None:  # (the call's inputs)
        return program.accept_raw(target, draft, ids, raw_target, raw_draft)
    decided = program.decide(target, draft, ids, sq, sp)
    if decided is not None:  # (CPU tensors; None where the bounds do not apply)
        return accept_undecided_rows(program.exact_rows, *decided, ids, sq, sp), AcceptState()
    gamma = program.pre_spike(target, ids, sq)
    return program.accept(target, draft, ids, sq, sp, gamma)


def _core_sums(program: Program, inputs: CoreInputs, k: int):
    """Positive float32 row sums (from the entry validation, else here: the compiled core
    with the bad-row flags, in the same read as its accept path) and those flags."""
    sq, sp, bad_rows = inputs.target_sums, inputs.draft_sums, None
    if sq is None or sp is None:  # (the caller's: the compiled core and the ragged layout)
        if program.traced:
            sq, bad_q = fused_kernels.stats(inputs.target[:, :k])
            sp, bad_p = fused_kernels.stats(inputs.draft_probs)
            bad_rows = (bad_q | bad_p).any(-1)
        else:
            sq = inputs.target[:, :k].to(torch.float32).sum(-1)
            sp = inputs.draft_probs.to(torch.float32).sum(-1)
    return _positive(sq), _positive(sp), bad_rows


def _layout(draft_ids, bonus, n_acc, k_row, recovered):
    """vLLM's ``_create_output``: drafts before N, then one token, then -1."""
    k = draft_ids.shape[1]
    col = torch.arange(k + 1, device=draft_ids.device)[None, :]
    drafts_ext = torch.cat([draft_ids, bonus], dim=1)
    extra = torch.where(n_acc < k_row, recovered, bonus[:, 0])
    return torch.where(
        col < n_acc[:, None],
        drafts_ext,
        torch.where(col == n_acc[:, None], extra[:, None], torch.full_like(drafts_ext, -1)),
    )


def verify_core(program: Program, inputs: CoreInputs) -> CoreOutput:
    r"""The tensor part of one call: acceptance, accepted prefix, recovery draw, output.

    A pure function of its tensors (no counters; the uniforms come in as tensors, or as
    callables the eager core calls where the eager sampler always drew them), so that
    ``fused=True`` compiles it whole per configured rule (the exact root's host solver runs
    between two graphs). Row sums come from the entry validation; where they are None they
    are computed here. With ``inputs.invalid`` (bool [B], the entry validation's flags), those
    rows and the rows flagged here emit only -1 and count nowhere.
    """
    target, draft_probs, draft_ids = inputs.target, inputs.draft_probs, inputs.draft_ids
    b, k = draft_ids.shape
    device = target.device
    sq, sp, bad_rows = _core_sums(program, inputs, k)
    raw = inputs.raw_target is not None or inputs.raw_draft is not None  # (the call's inputs)
    # core_accept's steps, written here: the compiled core breaks its graph around the host
    # root and the exact test of the undecided rows, and a break in a frame it inlines would
    # split both frames (four graphs instead of two; measured slower for fuzzy SD)
    if raw:
        a, state = program.accept_raw(
            target[:, :k], draft_probs, draft_ids, inputs.raw_target, inputs.raw_draft
        )
    else:
        decided = program.decide(target[:, :k], draft_probs, draft_ids, sq, sp)
        if decided is not None:  # (CPU tensors; None where the bounds do not apply)
            a = accept_undecided_rows(program.exact_rows, *decided, draft_ids, sq, sp)
            state = AcceptState()
        else:
            gamma = program.pre_spike(target[:, :k], draft_ids, sq)
            a, state = program.accept(target[:, :k], draft_probs, draft_ids, sq, sp, gamma)
    # the eager core draws its uniforms here (callables); the compiled core takes tensors
    u_acc = inputs.u_acc() if callable(inputs.u_acc) else inputs.u_acc
    accepted = program.accepted(a, u_acc)
    if inputs.num_drafts is not None:  # ragged layout: positions >= k_i are padding
        accepted = accepted & (torch.arange(k, device=device)[None, :] < inputs.num_drafts[:, None])
        k_row = inputs.num_drafts
    else:
        k_row = torch.full((b,), k, dtype=torch.int64, device=device)
    n_acc = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)  # N_b, [B]

    # Recovery: only at the first rejected position of each row, [B, V].
    pos = torch.minimum(n_acc, (k_row - 1).clamp_min(0))
    recover = program.recover_raw if raw else program.recover
    rec, fallback, rec_sums, fb_sums = recover(target, draft_probs, draft_ids, pos, state, sq, sp)
    u_rec = inputs.u_rec() if callable(inputs.u_rec) else inputs.u_rec
    recovered = inverse_cdf_sample(
        rec, None, fallback, block_sums=rec_sums, fallback_block_sums=fb_sums, uniforms=u_rec
    )
    out = _layout(draft_ids, inputs.bonus, n_acc, k_row, recovered)
    n_invalid = torch.zeros((), dtype=torch.int64, device=device)
    invalid = inputs.invalid
    if invalid is not None:
        if bad_rows is not None:
            invalid = invalid | bad_rows
        out = torch.where(invalid[:, None], torch.full_like(out, -1), out)
        accepted = accepted & ~invalid[:, None]
        n_acc = torch.where(invalid, torch.zeros_like(n_acc), n_acc)
        n_invalid = invalid.sum()
    counts = torch.stack([accepted.sum(), n_acc.sum(), (out != -1).sum(), n_invalid])
    return CoreOutput(out, accepted, counts, invalid)
