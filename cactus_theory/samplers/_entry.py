r"""Entry validation of the public sampler calls: argument types at once, probability rows and
token ids checked on the device (clamp-and-flag, no host synchronization), and the float32
row sums the samplers reuse.
"""

from __future__ import annotations

import torch

from . import _fused as fused_kernels


def eager_row_stats(x: torch.Tensor):
    """Float32 row sums and the bad-row flag (sum not finite or <= 0, or a negative entry).

    One read for the sums, one for the minimum (a NaN or inf anywhere makes the sum
    non-finite; only negative entries need the minimum). The half-precision inputs are cast
    first (the float32 path reads the input as is).
    """
    xf = x if x.dtype == torch.float32 else x.to(torch.float32)
    s = xf.sum(-1)
    return s, ~(torch.isfinite(s) & (s > 0) & (x.amin(-1) >= 0))


def validate_sampler_entry(
    target_probs,
    bonus_token_ids,
    draft_probs,
    draft_token_ids,
    seeded_seqs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    target_names=("target_with_bonus_probs", "draft_probs"),
    sanitize: bool = False,
    return_sums: bool = False,
    fused: bool = False,
    row_checks: bool = True,
):
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
        makes (:func:`._core.verify_core`); ``sanitize`` always checks them.

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
    _check_types(target_names, target_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs,
                 raw_target_probs, raw_draft_probs)  # fmt: skip
    if draft_token_ids.dim() == 2 and draft_token_ids.shape[-1] == 0:  # [B, k] with k = 0
        raise ValueError("draft_token_ids: shape [B, 0]: no drafted tokens; a verification needs k >= 1")
    probs = (target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    if target_probs.dim() < 1 or draft_token_ids.dim() < 1:  # the shape checks name the argument
        if return_sums:
            return draft_token_ids, bonus_token_ids, None, probs, (None,) * 4
        return draft_token_ids, bonus_token_ids, None, probs
    v = target_probs.shape[-1]
    invalid = torch.zeros(draft_token_ids.shape, dtype=torch.bool, device=draft_token_ids.device)
    cleaned, sums = _row_flags(probs, invalid, fused, row_checks or sanitize, sanitize)
    if draft_token_ids.dtype in (torch.int64, torch.int32) and v > 0:
        invalid |= (draft_token_ids < 0) | (draft_token_ids >= v)
        draft_token_ids = draft_token_ids.clamp(0, v - 1)
    if draft_token_ids.dim() == 2 and invalid.dim() == 2:
        invalid = invalid.any(dim=-1)
    if (
        draft_token_ids.dim() == 2
        and bonus_token_ids.dtype in (torch.int64, torch.int32)
        and v > 0
        and bonus_token_ids.dim() == 2
        and bonus_token_ids.shape[0] == invalid.shape[0]
        and bonus_token_ids.device == invalid.device
    ):
        # (the ragged layout maps its bonus ids to requests itself)
        invalid = invalid | ((bonus_token_ids < 0) | (bonus_token_ids >= v)).any(dim=-1)
        bonus_token_ids = bonus_token_ids.clamp(0, v - 1)
    if return_sums:
        return draft_token_ids, bonus_token_ids, invalid, tuple(cleaned), tuple(sums)
    return draft_token_ids, bonus_token_ids, invalid, tuple(cleaned)


def _check_types(target_names, target_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs,
                 raw_target_probs, raw_draft_probs):  # fmt: skip
    """TypeError naming the argument: a non-tensor array argument, or ``seeded_seqs`` not a
    dict of ``torch.Generator`` (metadata only, no synchronization)."""
    t_name, d_name = target_names
    for name, t in (
        (t_name, target_probs),
        ("bonus_token_ids", bonus_token_ids),
        (d_name, draft_probs),
        ("draft_token_ids", draft_token_ids),
        ("raw_target_probs", raw_target_probs),
        ("raw_draft_probs", raw_draft_probs),
    ):
        if t is None and name in (d_name, "raw_target_probs", "raw_draft_probs"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"{name}: expected a torch.Tensor, got {type(t).__module__}."
                f"{type(t).__name__} (convert with torch.as_tensor)"
            )
    if seeded_seqs is not None:
        if not isinstance(seeded_seqs, dict):
            raise TypeError(
                f"seeded_seqs: expected a dict of row index -> torch.Generator, "
                f"got {type(seeded_seqs).__name__}"
            )
        bad = [k for k, g in seeded_seqs.items() if not isinstance(g, torch.Generator)]
        if bad:
            raise TypeError(
                f"seeded_seqs: the values for rows {bad} are not torch.Generator "
                f"(got {type(seeded_seqs[bad[0]]).__name__})"
            )


def _row_flags(probs, invalid, fused: bool, check: bool, sanitize: bool):
    """Flag (in ``invalid``, in place) the rows of the probability tensors that are not finite,
    have a negative entry or sum to 0; return the tensors (with ``sanitize``, copies whose
    flagged rows are uniform) and their float32 row sums (None where not checked)."""
    lead = invalid.dim()  # the probability tensors' axes before V align with the ids

    def checked(x):  # the part of x the value checks read, or None
        if x is None or x.dim() != lead + 1 or not x.is_floating_point():
            return None
        if lead == 2:  # V0 layout [B, k(+1), V]: the k draft positions
            x = x[:, : invalid.shape[1]]
        if tuple(x.shape[:-1]) != tuple(invalid.shape) or x.device != invalid.device:
            return None
        return x

    parts = [checked(x) if check else None for x in probs]
    if fused and any(x is not None for x in parts):
        stats = fused_kernels.row_stats(*parts)
    else:
        stats = [(None, None) if x is None else eager_row_stats(x) for x in parts]
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
    return cleaned, sums
