r"""The tensor part of one sampler call: the accept path, the accepted prefix, the recovery
weights and draw, the output layout (:func:`verify_core`, compiled whole by ``fused=True``).

Each step is derived from the rule's declaration (:mod:`cactus_theory.rules`): its spike
:math:`\gamma(q_n)`, its elementwise target, or its plan on row-normalized copies; where a
rule has torch speed paths registered (:mod:`._kernels`), they take the place of the derived
step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..rules import Rule
from ..rules.plans import RowTarget, SpikePlan, TargetPlan, ratio_acceptance, spike_residual_weights
from . import fused as fused_kernels
from ._kernels import RuleKernels
from ._kernels._residual import residual_weights_
from .blocked import point_mass_weights, residual_block_weights, spike_row_target
from .draws import inverse_cdf_sample

__all__ = ["AcceptState", "CoreInputs", "CoreOutput", "accept_path", "recovery_path", "verify_core"]

_block_sums = fused_kernels.block_sums


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


class AcceptState(NamedTuple):
    r"""What the accept path hands the recovery path (:func:`accept_path`, :func:`recovery_path`).

    Attributes
    ----------
    gamma : Tensor (B, k) or None
        A spike rule's :math:`\gamma_n` at the drafted tokens (reused by the recovery).
    q, p, raw_q, raw_p : Tensor (B, k, V) or None
        The row-normalized copies the plan path made (None on the other paths).
    row_target : RowTarget or None
        The row target built on the [B, k] rows (``RuleKernels.accept_from_row_target``),
        indexed at the recovery positions by the recovery.
    """

    gamma: torch.Tensor | None = None
    q: torch.Tensor | None = None
    p: torch.Tensor | None = None
    raw_q: torch.Tensor | None = None
    raw_p: torch.Tensor | None = None
    row_target: RowTarget | None = None


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


def _spike_at_tokens(kernels: RuleKernels, rule, q_n):
    """gamma at the drafted tokens: the rule's kernel ``RuleKernels.spike_at_tokens`` when it
    has one for these values (a compiled root on the device), else ``rule.spike_at_tokens``."""
    hook = kernels.spike_at_tokens
    if hook is not None:
        gamma = hook(rule, q_n)
        if gamma is not None:
            return gamma
    return rule.spike_at_tokens(q_n)


@torch.compiler.disable
def _spike_on_host(rule, q_n, kernels: RuleKernels | None = None):
    """gamma at the drafted tokens (:func:`_spike_at_tokens`) outside any compiled graph (the
    exact root's numpy solver reads its values on the host; its device kernel is a compiled
    graph of its own)."""
    return rule.spike_at_tokens(q_n) if kernels is None else _spike_at_tokens(kernels, rule, q_n)


def uses_compiled_core(rule, kernels: RuleKernels, fused: bool, raw_target=None, raw_draft=None) -> bool:
    """True when ``fused`` compiles the whole tensor part of a call (:func:`verify_core`): no
    raw distributions, and a rule whose acceptance reads no plan (a spike, an acceptance from
    the drafted tokens' values, or a kernel on the rows; the others build plans or call host
    solvers: their rows stay eager, with the fused entry checks)."""
    return (
        fused
        and raw_target is None
        and raw_draft is None
        and (
            getattr(rule, "samples_from_spike", False)
            or rule.accept_probs_from_values is not None
            or kernels.accept_from_rows is not None
        )
    )


def decided_by_bounds(
    kernels: RuleKernels, rule, target, draft_probs, draft_ids, raw_target, raw_draft, sq, sp, traced: bool
):
    """``RuleKernels.accept_decided_from_rows`` on the float32 rows: ``(accept, undecided, x,
    y)``, or None where the bounds path does not apply: the eager core (``traced`` False: the
    bounds' elementwise steps, unfused, cost more passes than the exact test's in-place
    ones; measured 30 against 14 read passes for fuzzy SD at [32, 8, 32000]), raw
    distributions given, a rule without bounds for its configuration, or CUDA tensors
    (there the logarithms cost little next to the reads, and selecting the undecided rows
    would synchronize with the host)."""
    hook = kernels.accept_decided_from_rows
    if (
        not traced
        or hook is None
        or kernels.accept_from_rows is None
        or raw_target is not None
        or raw_draft is not None
        or target.device.type != "cpu"
    ):
        return None
    x, y = _as_float32(target), _as_float32(draft_probs)
    decided = hook(rule, x, y, draft_ids, sq, sp)
    return None if decided is None else (*decided, x, y)


@torch.compiler.disable
def accept_undecided_rows(from_rows, rule, accept, undecided, x, y, ids, sx, sy):
    """``accept`` (bool [B, k], decided by a rule's bounds) as float32, with the exact test
    ``from_rows`` evaluated on the rows ``undecided`` selects (gathered: [n, V] copies of
    those rows only). Outside any compiled graph: the selection's size is data-dependent."""
    out = accept.to(torch.float32)
    if bool(undecided.any()):
        idx = undecided.nonzero(as_tuple=True)
        out[idx] = from_rows(rule, x[idx], y[idx], ids[idx], sx[idx], sy[idx])
    return out


def elementwise_row_target(rule, target_sums, draft_sums) -> RowTarget | None:
    """The row target of a rule that declares its ``Rule.elementwise_target(q, p)``: h at
    q = ``x * (1 / s_q)``, p = ``y * (1 / s_p)`` (None for the other rules)."""
    h = rule.elementwise_target
    if h is None:
        return None

    def fn(x, y, inv_sq, inv_sp):
        return h(x * inv_sq, y * inv_sp)

    return RowTarget(fn, (1.0 / target_sums[..., None], 1.0 / draft_sums[..., None]))


def row_target(kernels: RuleKernels, rule, x, y, ids, sx, sy, gamma=None):
    """The rule's target on un-normalized rows (:class:`~cactus_theory.rules.plans.RowTarget`)
    for the compiled recovery: Theorem 2's :math:`h^{(n)}` from the spike when ``gamma`` is
    given, else the rule's kernel, else its elementwise target; None when none applies."""
    if gamma is not None:
        return spike_row_target(x, ids, sx, gamma)
    hook = kernels.recovery_target_from_rows
    if hook is not None:
        return hook(rule, x, y, ids, sx, sy)
    return elementwise_row_target(rule, sx, sy)


def accept_path(
    kernels: RuleKernels,
    rule,
    target,
    draft_probs,
    draft_ids,
    raw_target,
    raw_draft,
    sq,
    sp,
    traced: bool = False,
    gamma=None,
):
    r""":math:`a_n` at the drafted tokens, [B, k], by the cheapest path the rule declares.

    ``target`` holds the k draft positions ([B, k, V], un-normalized, any float dtype);
    ``sq``, ``sp`` are the float32 row sums ([B, k], positive). Paths, in order (the raw
    distributions, when given, always take the last):

    1. a spike rule (``samples_from_spike``): gamma at the [B, k] drafted tokens, once
       (reused by the recovery), :math:`\min(1, \gamma_n/p_n)`;
    2. ``Rule.accept_probs_from_values(q_n, p_n)``: [B, k] gathers divided by the sums;
    3. the rule's kernel ``RuleKernels.accept_from_rows``: the un-normalized rows and their
       sums (CPU tensors in the compiled core, and a kernel with ``accept_decided_from_rows``:
       its bounds first, the exact test on the undecided rows only, in :func:`verify_core`
       and ``RuleSampler.accept_probs_at_drafts``, before this function; ``traced``, a
       kernel declaring ``accept_from_row_target``: its row target built on the [B, k] rows,
       :math:`\min(1, h_n/p_n)` at the drafted entries, the target kept for the recovery);
    4. ``Rule.accept_probs_at`` on float32 row-normalized copies (the plan, or the rule's
       drafted-token override declared by ``RuleSpec.fast_accept``; for a spike rule without
       an override, gamma for all B*k*V candidates): the path derived from the declaration
       alone.

    ``traced``: inside the compiled core (:func:`verify_core`), where the spike is
    evaluated outside the graph; ``gamma``: that spike, when the core evaluated it already
    (at its top level: one graph break instead of a break inside this frame). Returns ``a``
    and the :class:`AcceptState` the recovery path needs.
    """
    no_raw = raw_target is None and raw_draft is None
    from_values = rule.accept_probs_from_values  # declared on Rule (None: whole rows)
    from_rows = kernels.accept_from_rows
    spike_path = no_raw and getattr(rule, "samples_from_spike", False)
    if no_raw and (spike_path or from_values is not None):
        ids_ = draft_ids[..., None]
        q_n = torch.gather(target, -1, ids_)[..., 0].to(torch.float32) / sq
        p_n = torch.gather(draft_probs, -1, ids_)[..., 0].to(torch.float32) / sp
        if spike_path:
            host = traced and not getattr(rule, "traceable_spike", False)
            if gamma is None:
                gamma = _spike_on_host(rule, q_n, kernels) if host else _spike_at_tokens(kernels, rule, q_n)
            return ratio_acceptance(gamma, p_n), AcceptState(gamma=gamma)
        return from_values(q_n, p_n), AcceptState()
    if no_raw and from_rows is not None:
        to_target = kernels.recovery_target_from_rows
        if traced and to_target is not None and kernels.accept_from_row_target:
            # a target rule: a_n = min(1, h_n / p_n) from its row target, built once here on
            # the [B, k] rows (their constants are indexed at the recovery positions)
            target_rows = to_target(rule, _as_float32(target), _as_float32(draft_probs), draft_ids, sq, sp)
            ids_ = draft_ids[..., None]
            x_n = torch.gather(target, -1, ids_).to(torch.float32)
            y_n = torch.gather(draft_probs, -1, ids_).to(torch.float32)
            # p_n = y_n (1 / s_p), as the row target writes p
            return (
                ratio_acceptance(target_rows.h(x_n, y_n)[..., 0], y_n[..., 0] * (1.0 / sp)),
                AcceptState(row_target=target_rows),
            )
        return (
            from_rows(rule, _as_float32(target), _as_float32(draft_probs), draft_ids, sq, sp),
            AcceptState(),
        )
    q = _as_float32_rows(target)
    p = _as_float32_rows(draft_probs)
    raw_q = None if raw_target is None else _as_float32_rows(raw_target[:, : target.shape[1]])
    raw_p = None if raw_draft is None else _as_float32_rows(raw_draft)
    return (
        rule.accept_probs_at(q, p, draft_ids, raw_target_probs=raw_q, raw_draft_probs=raw_p),
        AcceptState(q=q, p=p, raw_q=raw_q, raw_p=raw_p),
    )


def _default_recovery(rule) -> bool:
    """True when the rule's recovery is the interface's default: the residual of its plan's
    target (``Rule.recovery_weights_at`` and ``Rule.recovery_at`` not overridden)."""
    t = type(rule)
    return t.recovery_weights_at is Rule.recovery_weights_at and t.recovery_at is Rule.recovery_at


def _weights_at(kernels: RuleKernels, rule, q, p, ids, raw_q=None, raw_p=None):
    """Recovery weights on normalized rows: the rule's kernel (no raw distributions given)
    when it has one for this configuration; for a rule whose recovery is the residual of
    its plan's target (the interface's default), that residual computed in place
    (:func:`._kernels._residual.residual_weights_`); else ``Rule.recovery_weights_at``."""
    hook = kernels.recovery_weights
    if hook is not None and raw_q is None and raw_p is None:
        w = hook(rule, q, p, ids)
        if w is not None:
            return w
    if _default_recovery(rule):
        plan = rule.plan(q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p)
        if isinstance(plan, TargetPlan):
            return residual_weights_(plan.target, plan.draft_probs)
        if isinstance(plan, SpikePlan):
            return residual_weights_(plan.target_at(ids), plan.draft_probs)
        return plan.recovery_weights_at(ids)
    return rule.recovery_weights_at(q, p, ids, raw_target_probs=raw_q, raw_draft_probs=raw_p)


def _spike_weights(kernels: RuleKernels, rule, x, y, ids, gamma, sx, sy, overwrite=False):
    r"""A spike rule's :math:`\max(0, h^{(n)} - p)` from gamma: its kernel (in place when
    ``overwrite``), else the derived :func:`~cactus_theory.rules.plans.spike_residual_weights`."""
    hook = kernels.spike_recovery_weights
    if hook is not None:
        return hook(rule, x, y, ids, gamma, sx, sy, overwrite=overwrite)
    return spike_residual_weights(x, y, ids, gamma, sx, sy)


def recovery_path(
    kernels: RuleKernels,
    rule,
    target,
    draft_probs,
    draft_ids,
    pos,
    state: AcceptState,
    sq,
    sp,
    traced: bool = False,
):
    """Un-normalized recovery weights [B, V] at the positions ``pos`` ([B]) of each row.

    ``state`` comes from :func:`accept_path`. A spike rule: the rows scaled, the row sums
    folded into :math:`c_n` and p's factor, gamma reused. Other rules: the rows normalized
    (the [B, V] rows only, unless path 4 made copies) and ``Rule.recovery_weights_at`` (or
    the rule's kernel).

    Returns ``(weights, fallback, block sums, fallback block sums)``: ``fallback`` (q's
    rows, normalized, or un-normalized in the traced form: the draw is proportional either
    way; None for spike rules) is what :func:`~.draws.inverse_cdf_sample` draws from on a
    row whose weights are not finite with a positive sum (never reached for valid input).
    Eager (default): copies of the rows scaled in place; the block sums are None (computed by
    the draw). ``traced`` (the compiled core): the rows are indexed inside the formulas, so
    the compiled kernel reads them once and returns the block sums with the weights,
    without copies; for a rule with a row target (:func:`row_target`) the weights are a
    :class:`~.blocked.BlockWeights` (block sums and the formula at one block's columns: no
    [B, V] weights at all).
    """
    gamma, q, p, raw_q, raw_p = state.gamma, state.q, state.p, state.raw_q, state.raw_p
    rows = torch.arange(pos.shape[0], device=pos.device)
    n_r = draft_ids[rows, pos]
    if traced and q is None:
        # float32 rows (the compiled core casts other dtypes first; a direct call with bf16 /
        # fp16 rows: the cast fuses into the reads)
        x = target[rows, pos].to(torch.float32)
        y = draft_probs[rows, pos].to(torch.float32)
        sx, sy = sq[rows, pos], sp[rows, pos]
        point = kernels.recovery_token_from_rows
        token = None if point is None else point(rule, x, y, n_r, sx, sy)
        if token is not None:  # a point mass: its block, no weights
            return point_mass_weights(token, x.shape[-1]), None, None, None
        if state.row_target is not None:  # the accept path's, at the recovery positions
            target_r = state.row_target.index(rows, pos)
        else:
            target_r = row_target(
                kernels, rule, x, y, n_r, sx, sy, None if gamma is None else gamma[rows, pos]
            )
        if target_r is not None:  # block sums in one read; no [B, V] weights
            return residual_block_weights(target_r, x, y, sy), None, None, None
        w = _weights_at(kernels, rule, x / sx[:, None], y / sy[:, None], n_r)
        # the fallback draws in proportion to q: q's un-normalized rows serve
        return w, x, _block_sums(w), _block_sums(x)
    if gamma is not None:
        return (
            _spike_weights(
                kernels,
                rule,
                _as_float32(_rows_at(target, pos)),
                _as_float32(_rows_at(draft_probs, pos)),
                n_r,
                gamma[rows, pos],
                sq[rows, pos],
                sp[rows, pos],
                overwrite=True,
            ),
            None,
            None,
            None,
        )
    if q is None:  # normalize the [B, V] recovery rows only, as _as_float32_rows would
        q_r = _as_float32(_rows_at(target, pos)).div_(sq[rows, pos][:, None])
        p_r = _as_float32(_rows_at(draft_probs, pos)).div_(sp[rows, pos][:, None])
    else:
        q_r, p_r = q[rows, pos], p[rows, pos]
    rec = _weights_at(
        kernels,
        rule,
        q_r,
        p_r,
        n_r,
        None if raw_q is None else raw_q[rows, pos],
        None if raw_p is None else raw_p[rows, pos],
    )
    # Safety net beyond the conventions (never reached for valid input): a row whose
    # weights are not finite with a positive sum draws from q instead, so no sample is
    # drawn from an all-zero or NaN row (the choice is made on block sums, in
    # inverse_cdf_sample). Cactus's weights have mass max(residual mass, mass of h^(n))
    # > 0 on valid rows and need none.
    return rec, q_r, None, None


def verify_core(kernels: RuleKernels, rule, traced: bool, inputs: CoreInputs) -> CoreOutput:
    r"""The tensor part of one call: acceptance, accepted prefix, recovery draw, output.

    A pure function of its tensors (no counters; the uniforms come in as tensors, or as
    callables the eager core calls where the eager sampler always drew them),
    so that ``fused=True`` compiles it whole per configured rule (``traced``; the exact
    root's host solver runs between two graphs). Row sums come from the entry validation;
    where they are None they are computed here (the compiled core: with the bad-row flags,
    in the same read as the accept path's). With ``inputs.invalid`` (bool [B], the entry
    validation's flags), those rows and the rows flagged here emit only -1 and count
    nowhere.
    """
    target, bonus, draft_probs, draft_ids = (
        inputs.target,
        inputs.bonus,
        inputs.draft_probs,
        inputs.draft_ids,
    )
    raw_target, raw_draft, num_drafts = inputs.raw_target, inputs.raw_draft, inputs.num_drafts
    u_acc, u_rec, invalid = inputs.u_acc, inputs.u_rec, inputs.invalid
    sq, sp = inputs.target_sums, inputs.draft_sums
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
    if (
        traced
        and raw_target is None
        and raw_draft is None
        and getattr(rule, "samples_from_spike", False)
        and not getattr(rule, "traceable_spike", False)
    ):
        # the host root here, at the core's top level: the graph breaks once (two graphs);
        # inside accept_path the break would split both frames (four graphs)
        ids_ = draft_ids[..., None]
        gamma = _spike_on_host(
            rule, torch.gather(target[:, :k], -1, ids_)[..., 0].to(torch.float32) / sq, kernels
        )
    # bounds first where the rule has them, the exact test on the rows they leave undecided
    # (here, at the core's top level: the compiled core breaks once, around that test)
    decided = decided_by_bounds(
        kernels, rule, target[:, :k], draft_probs, draft_ids, raw_target, raw_draft, sq, sp, traced
    )
    if decided is not None:
        a = accept_undecided_rows(kernels.accept_from_rows, rule, *decided, draft_ids, sq, sp)
        state = AcceptState()
    else:
        a, state = accept_path(
            kernels, rule, target[:, :k], draft_probs, draft_ids, raw_target, raw_draft, sq, sp, traced, gamma
        )
    if callable(u_acc):  # the eager core draws its uniforms here (after the accept path)
        u_acc = u_acc()
    accepted = (a > 0.5) if rule.spec.deterministic else (u_acc < a)
    if num_drafts is not None:  # ragged layout: positions >= k_i are padding
        accepted = accepted & (torch.arange(k, device=device)[None, :] < num_drafts[:, None])
        k_row = num_drafts
    else:
        k_row = torch.full((b,), k, dtype=torch.int64, device=device)
    n_acc = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)  # N_b, [B]

    # Recovery: only at the first rejected position of each row, [B, V].
    pos = torch.minimum(n_acc, (k_row - 1).clamp_min(0))
    rec, fallback, rec_sums, fb_sums = recovery_path(
        kernels, rule, target, draft_probs, draft_ids, pos, state, sq, sp, traced
    )
    recovered = inverse_cdf_sample(
        rec,
        None,
        fallback,
        block_sums=rec_sums,
        fallback_block_sums=fb_sums,
        uniforms=u_rec() if callable(u_rec) else u_rec,
    )

    # Output layout (vLLM _create_output): drafts before N, then one token, then -1.
    col = torch.arange(k + 1, device=device)[None, :]
    drafts_ext = torch.cat([draft_ids, bonus], dim=1)
    extra = torch.where(n_acc < k_row, recovered, bonus[:, 0])
    out = torch.where(
        col < n_acc[:, None],
        drafts_ext,
        torch.where(col == n_acc[:, None], extra[:, None], torch.full_like(drafts_ext, -1)),
    )
    n_invalid = torch.zeros((), dtype=torch.int64, device=device)
    if invalid is not None:
        if bad_rows is not None:
            invalid = invalid | bad_rows
        out = torch.where(invalid[:, None], torch.full_like(out, -1), out)
        accepted = accepted & ~invalid[:, None]
        n_acc = torch.where(invalid, torch.zeros_like(n_acc), n_acc)
        n_invalid = invalid.sum()
    counts = torch.stack([accepted.sum(), n_acc.sum(), (out != -1).sum(), n_invalid])
    return CoreOutput(out, accepted, counts, invalid)
