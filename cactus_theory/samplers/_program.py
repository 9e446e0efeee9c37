r"""A sampler's program: its accept path, recovery path and probes, chosen once when it is made.

:func:`build_program` reads the rule's declaration (its form's ``Rule.realisation``: a spike,
an elementwise target, a recovery of its own, or nothing but the plan; its spec) and its
registered kernels (:mod:`._kernels`) once and returns a frozen
:class:`Program` of bound callables. A call (:func:`._core.verify_core`) runs them without
looking at the rule again; what it still chooses depends on the call's inputs by necessity:
raw distributions given (the plan path on row-normalized copies), CPU tensors (the bounds path
selects rows on the host) and what a kernel returns for the values (the exact root's compiled
kernel on tensors off the CPU).

The paths, in the order they are preferred (the raw distributions, when given, take the last):

1. a spike (``Realisation.spike``, a :class:`~cactus_theory.rules.registry.SpikeRule`): gamma
   at the [B, k] drafted tokens, once, :math:`\min(1, \gamma_n/p_n)`; the recovery reuses gamma;
2. ``Realisation.from_values(q_n, p_n)`` (an elementwise target without a row statistic):
   [B, k] gathers divided by the row sums;
3. the rule's kernel ``accept_from_rows`` on the un-normalized rows and their sums (in the
   compiled core, a kernel with ``accept_from_row_target`` builds its row target once on the
   [B, k] rows and the recovery indexes it; one with ``accept_decided_from_rows`` decides by
   bounds first on CPU tensors);
4. ``Rule.accept_probs_at`` on float32 row-normalized copies (the plan, or its declaration
   form's drafted-token acceptance).

Symbols: q verifier, p drafter, n drafted token, h target.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..rules.plans import RowTarget, SpikePlan, TargetPlan, _ratio_acceptance, _spike_residual_weights
from . import _fused as fused_kernels
from ._blocked import point_mass_weights, residual_block_weights, spike_row_target
from ._kernels import RuleKernels
from ._kernels.residual import residual_weights_

__all__ = ["AcceptState", "Program", "build_program", "as_float32", "rows_at", "float32_rows"]

_block_sums = fused_kernels.block_sums


def as_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 (a cast copy for half precision; float32 as is)."""
    return x if x.dtype == torch.float32 else x.to(torch.float32)


def float32_rows(x: torch.Tensor) -> torch.Tensor:
    """Cast to float32 and divide each row by its sum (convention 1; no validation, no sync).

    A row summing to 0 is left as zeros (it is invalid input; strict mode rejects it).
    """
    x = x.to(torch.float32)
    s = x.sum(dim=-1, keepdim=True)
    return x / torch.where(s > 0, s, torch.ones_like(s))


def rows_at(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``x[b, pos[b]]`` for every row b of ``x`` [B, K, V]: a new [B, V] tensor (a copy).

    ``index_select`` on the flattened rows when ``x`` is contiguous (a faster kernel than
    advanced indexing), else advanced indexing (an expanded or sliced ``x`` is not copied
    whole). The branch is on the input's layout.
    """
    if x.is_contiguous():
        flat = torch.arange(x.shape[0], device=pos.device) * x.shape[1] + pos
        return x.view(-1, x.shape[-1]).index_select(0, flat)
    return x[torch.arange(x.shape[0], device=pos.device), pos]


class AcceptState(NamedTuple):
    r"""What the accept path hands the recovery path.

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


@dataclass(frozen=True)
class Program:
    """One sampler's steps, bound when it is made (:func:`build_program`).

    Attributes
    ----------
    traced : bool
        The compiled core's program (``fused=True``) or the eager one.
    accept : callable
        ``accept(target, draft, ids, sq, sp, gamma) -> (a, AcceptState)`` without raw
        distributions; ``target`` [B, k, V] un-normalized, ``sq``, ``sp`` [B, k] positive sums.
    accept_raw : callable
        ``accept_raw(target, draft, ids, raw_target, raw_draft) -> (a, AcceptState)``: the
        plan path on row-normalized copies (the raw distributions given).
    pre_spike : callable
        ``pre_spike(target, ids, sq) -> gamma or None``: the compiled core's host root, at
        its top level (the graph breaks once); None elsewhere.
    decide : callable
        ``decide(target, draft, ids, sq, sp) -> (accept, undecided, x, y) or None``: a
        kernel's bounds (compiled core, CPU tensors), None where they do not apply.
    exact_rows : callable or None
        The exact test the bounds leave to the undecided rows.
    recover : callable
        ``recover(target, draft, ids, pos, state, sq, sp) -> (weights, fallback, block sums,
        fallback block sums)`` at the positions ``pos`` ([B]) of each row.
    recover_raw : callable
        The recovery after :attr:`accept_raw`.
    accepted : callable
        ``accepted(a, u) -> bool [B, k]``: ``a > 1/2`` for a deterministic rule, ``u < a``.
    draws_acceptance : bool
        The rule draws acceptance uniforms (not deterministic).
    """

    traced: bool
    accept: Callable
    accept_raw: Callable
    pre_spike: Callable
    decide: Callable
    exact_rows: Callable | None
    recover: Callable
    recover_raw: Callable
    accepted: Callable
    draws_acceptance: bool


# -- accept paths -------------------------------------------------------------------------------
def _at_tokens(target, draft, ids, sq, sp):
    """Row-normalized q_n, p_n at the drafted tokens, [B, k] float32."""
    ids_ = ids[..., None]
    q_n = torch.gather(target, -1, ids_)[..., 0].to(torch.float32) / sq
    p_n = torch.gather(draft, -1, ids_)[..., 0].to(torch.float32) / sp
    return q_n, p_n


def _gamma_at_tokens(rule, own, kernels: RuleKernels) -> Callable:
    """gamma at the drafted tokens: the rule's kernel when it returns a value for these
    tensors (the exact root's compiled kernel off the CPU), else the declaration's ``own``
    (``Realisation.spike``)."""
    hook = kernels.spike_at_tokens
    if hook is None:
        return own
    hook = functools.partial(hook, rule)

    def spike(q_n):
        gamma = hook(q_n)
        return own(q_n) if gamma is None else gamma  # (None: these tensors' values)

    return spike


def _accept_spike(spike):
    def accept(target, draft, ids, sq, sp, gamma=None):
        q_n, p_n = _at_tokens(target, draft, ids, sq, sp)
        g = spike(q_n)
        return _ratio_acceptance(g, p_n), AcceptState(gamma=g)

    return accept


def _accept_given_spike(target, draft, ids, sq, sp, gamma=None):
    """The compiled core's spike path: gamma from :attr:`Program.pre_spike`."""
    _, p_n = _at_tokens(target, draft, ids, sq, sp)
    return _ratio_acceptance(gamma, p_n), AcceptState(gamma=gamma)


def _accept_values(from_values):
    def accept(target, draft, ids, sq, sp, gamma=None):
        return from_values(*_at_tokens(target, draft, ids, sq, sp)), AcceptState()

    return accept


def _accept_rows(from_rows):
    def accept(target, draft, ids, sq, sp, gamma=None):
        return from_rows(as_float32(target), as_float32(draft), ids, sq, sp), AcceptState()

    return accept


def _accept_row_target(to_target):
    """a_n = min(1, h_n / p_n) from the rule's row target, built once on the [B, k] rows
    (their constants are indexed at the recovery positions)."""

    def accept(target, draft, ids, sq, sp, gamma=None):
        rows = to_target(as_float32(target), as_float32(draft), ids, sq, sp)
        ids_ = ids[..., None]
        x_n = torch.gather(target, -1, ids_).to(torch.float32)
        y_n = torch.gather(draft, -1, ids_).to(torch.float32)
        # p_n = y_n (1 / s_p), as the row target writes p
        a = _ratio_acceptance(rows.h(x_n, y_n)[..., 0], y_n[..., 0] * (1.0 / sp))
        return a, AcceptState(row_target=rows)

    return accept


def _accept_plan(accept_probs_at):
    def accept(target, draft, ids, raw_target=None, raw_draft=None):
        q, p = float32_rows(target), float32_rows(draft)
        raw_q = None if raw_target is None else float32_rows(raw_target[:, : target.shape[1]])
        raw_p = None if raw_draft is None else float32_rows(raw_draft)
        a = accept_probs_at(q, p, ids, raw_target_probs=raw_q, raw_draft_probs=raw_p)
        return a, AcceptState(q=q, p=p, raw_q=raw_q, raw_p=raw_p)

    return accept


def _no_spike(target, ids, sq):
    return None


def _host_spike(spike):
    @torch.compiler.disable
    def pre_spike(target, ids, sq):
        """gamma outside any compiled graph (the exact root's numpy solver reads its values on
        the host; its device kernel is a compiled graph of its own)."""
        q_n = torch.gather(target, -1, ids[..., None])[..., 0].to(torch.float32) / sq
        return spike(q_n)

    return pre_spike


def _no_bounds(target, draft, ids, sq, sp):
    return None


def _bounds(hook):
    def decide(target, draft, ids, sq, sp):
        """The bounds on CPU tensors only (on CUDA the logarithms cost little next to the
        reads, and selecting the undecided rows would synchronize with the host)."""
        if target.device.type != "cpu":
            return None
        x, y = as_float32(target), as_float32(draft)
        decided = hook(x, y, ids, sq, sp)
        return None if decided is None else (*decided, x, y)

    return decide


# -- recovery paths -------------------------------------------------------------------------------
def _residual_of_plan(plan, ids):
    """A plan's recovery weights, the residual computed in place for target and spike plans."""
    if isinstance(plan, TargetPlan):  # (the plan object's type: what the rule returned)
        return residual_weights_(plan.target, plan.draft_probs)
    if isinstance(plan, SpikePlan):
        return residual_weights_(plan.target_at(ids), plan.draft_probs)
    return plan.recovery_weights_at(ids)


def _weights_fn(rule, at, kernels: RuleKernels, declined) -> Callable:
    """Recovery weights on normalized rows ``(q, p, ids, raw_q, raw_p)``: the rule's kernel
    (used without raw distributions), the residual of the plan's target in place when the
    declaration states no recovery of its own (``Realisation.recovery_weights`` None), else
    that recovery ``at``."""
    if at is None:
        plan = rule.plan

        def own(q, p, ids, raw_q=None, raw_p=None):
            return _residual_of_plan(plan(q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p), ids)

    else:

        def own(q, p, ids, raw_q=None, raw_p=None):
            return at(q, p, ids, raw_target_probs=raw_q, raw_draft_probs=raw_p)

    hook = kernels.recovery_weights
    if hook is None or "recovery_weights" in declined:
        return own
    hook = functools.partial(hook, rule)

    def weights(q, p, ids, raw_q=None, raw_p=None):
        if raw_q is None and raw_p is None:  # (the call's inputs)
            return hook(q, p, ids)
        return own(q, p, ids, raw_q, raw_p)

    return weights


def _gathered(target, draft, ids, pos, sq, sp):
    rows = torch.arange(pos.shape[0], device=pos.device)
    return rows, ids[rows, pos], sq[rows, pos], sp[rows, pos]


def _recover_spike(spike_weights):
    r"""A spike rule's :math:`\max(0, h^{(n)} - p)` from gamma on copies of the recovery rows
    (its kernel in place, else the derived form)."""

    def recover(target, draft, ids, pos, state, sq, sp):
        rows, n_r, sx, sy = _gathered(target, draft, ids, pos, sq, sp)
        x, y = as_float32(rows_at(target, pos)), as_float32(rows_at(draft, pos))
        return spike_weights(x, y, n_r, state.gamma[rows, pos], sx, sy), None, None, None

    return recover


def _recover_rows(weights):
    """Normalize the [B, V] recovery rows only and take the rule's weights; the fallback (a
    row whose weights are not finite with a positive sum draws from q: never reached for
    valid input) is q's row."""

    def recover(target, draft, ids, pos, state, sq, sp):
        rows, n_r, sx, sy = _gathered(target, draft, ids, pos, sq, sp)
        q_r = as_float32(rows_at(target, pos)).div_(sx[:, None])
        p_r = as_float32(rows_at(draft, pos)).div_(sy[:, None])
        return weights(q_r, p_r, n_r), q_r, None, None

    return recover


def _recover_plan_rows(weights):
    """After the plan path: its normalized copies (and raw ones) at the recovery positions."""

    def recover(target, draft, ids, pos, state, sq=None, sp=None):
        rows = torch.arange(pos.shape[0], device=pos.device)
        q_r, p_r = state.q[rows, pos], state.p[rows, pos]
        raw_q = None if state.raw_q is None else state.raw_q[rows, pos]
        raw_p = None if state.raw_p is None else state.raw_p[rows, pos]
        return weights(q_r, p_r, ids[rows, pos], raw_q, raw_p), q_r, None, None

    return recover


def _traced_rows(target, draft, ids, pos, sq, sp):
    """float32 recovery rows indexed inside the formulas (the compiled core casts other
    dtypes first; a direct call with bf16 / fp16 rows: the cast fuses into the reads)."""
    rows, n_r, sx, sy = _gathered(target, draft, ids, pos, sq, sp)
    return rows, target[rows, pos].to(torch.float32), draft[rows, pos].to(torch.float32), n_r, sx, sy


def _recover_point(token_fn):
    def recover(target, draft, ids, pos, state, sq, sp):
        _, x, y, n_r, sx, sy = _traced_rows(target, draft, ids, pos, sq, sp)
        return point_mass_weights(token_fn(x, y, n_r, sx, sy), x.shape[-1]), None, None, None

    return recover


def _recover_target(target_of):
    """Block sums of the residual of a row target in one read (no [B, V] weights):
    ``target_of(state, rows, pos, x, y, n_r, sx, sy)`` gives the target at the recovery rows."""

    def recover(target, draft, ids, pos, state, sq, sp):
        rows, x, y, n_r, sx, sy = _traced_rows(target, draft, ids, pos, sq, sp)
        return (
            residual_block_weights(target_of(state, rows, pos, x, y, n_r, sx, sy), x, y, sy),
            None,
            None,
            None,
        )

    return recover


def _recover_traced_weights(weights):
    def recover(target, draft, ids, pos, state, sq, sp):
        _, x, y, n_r, sx, sy = _traced_rows(target, draft, ids, pos, sq, sp)
        w = weights(x / sx[:, None], y / sy[:, None], n_r)
        # the fallback draws in proportion to q: q's un-normalized rows serve
        return w, x, _block_sums(w), _block_sums(x)

    return recover


def _spike_target(state, rows, pos, x, y, n_r, sx, sy):
    return spike_row_target(x, n_r, sx, state.gamma[rows, pos])


def _indexed_target(state, rows, pos, x, y, n_r, sx, sy):
    return state.row_target.index(rows, pos)


def _elementwise_target(h):
    def target_of(state, rows, pos, x, y, n_r, sx, sy):
        def fn(xx, yy, inv_sq, inv_sp):
            return h(xx * inv_sq, yy * inv_sp)

        return RowTarget(fn, (1.0 / sx[..., None], 1.0 / sy[..., None]))

    return target_of


def _kernel_target(to_target):
    def target_of(state, rows, pos, x, y, n_r, sx, sy):
        return to_target(x, y, n_r, sx, sy)

    return target_of


def _accept_by_threshold(a, u):
    return a > 0.5


def _accept_by_uniform(a, u):
    return u < a


# -- assembly ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Parts:
    """The declaration's capabilities, read once."""

    spike: Any  # gamma at the drafted tokens, or None (not a spike rule)
    from_values: Any
    from_rows: Any
    to_target: Any
    row_target_accept: bool
    decided: Any
    token: Any
    weights: Callable
    spike_weights: Any
    elementwise: Any
    traceable_spike: bool


def _parts(rule, kernels: RuleKernels) -> _Parts:
    declined = frozenset(kernels.declines(rule))

    def bound(name):
        hook = getattr(kernels, name)
        return None if hook is None or name in declined else functools.partial(hook, rule)

    # what the rule's declaration form realises without the plan (no dispatch on its type)
    real = rule.realisation
    spike_weights = bound("spike_recovery_weights")
    return _Parts(
        spike=None if real.spike is None else _gamma_at_tokens(rule, real.spike, kernels),
        from_values=real.from_values,
        from_rows=bound("accept_from_rows"),
        to_target=bound("recovery_target_from_rows"),
        row_target_accept=kernels.accept_from_row_target,
        decided=bound("accept_decided_from_rows"),
        token=bound("recovery_token_from_rows"),
        weights=_weights_fn(rule, real.recovery_weights, kernels, declined),
        spike_weights=_spike_residual_weights if spike_weights is None else spike_weights,
        elementwise=real.elementwise,
        traceable_spike=real.traceable_spike,
    )


def compiles_whole(rule, kernels: RuleKernels) -> bool:
    """True when ``fused=True`` compiles the whole tensor part of a call: a rule whose
    acceptance reads no plan (a spike, an acceptance from the drafted tokens' values, or a
    kernel on the rows; the others build plans or call host solvers: their rows stay eager,
    with the fused entry checks)."""
    parts = _parts(rule, kernels)
    return parts.spike is not None or parts.from_values is not None or parts.from_rows is not None


def _eager_paths(rule, parts: _Parts):
    if parts.spike is not None:
        return _accept_spike(parts.spike), _recover_spike(parts.spike_weights)
    if parts.from_values is not None:
        return _accept_values(parts.from_values), _recover_rows(parts.weights)
    if parts.from_rows is not None:
        return _accept_rows(parts.from_rows), _recover_rows(parts.weights)
    plan = _accept_plan(rule.accept_probs_at)
    return (lambda t, d, i, sq, sp, gamma=None: plan(t, d, i)), _recover_plan_rows(parts.weights)


def _traced_paths(rule, parts: _Parts):
    """The compiled core's accept and recovery paths (a rule :func:`compiles_whole`)."""
    if parts.spike is not None:
        traceable = parts.traceable_spike
        accept = _accept_spike(parts.spike) if traceable else _accept_given_spike
        pre = _no_spike if traceable else _host_spike(parts.spike)
        target_of = _spike_target
    elif parts.from_values is not None:
        accept, pre = _accept_values(parts.from_values), _no_spike
        target_of = None if parts.elementwise is None else _elementwise_target(parts.elementwise)
        if parts.to_target is not None:
            target_of = _kernel_target(parts.to_target)
    else:
        accept, pre = _accept_rows(parts.from_rows), _no_spike
        target_of = None if parts.to_target is None else _kernel_target(parts.to_target)
        if parts.to_target is not None and parts.row_target_accept:
            accept, target_of = _accept_row_target(parts.to_target), _indexed_target
    if parts.token is not None:
        recover = _recover_point(parts.token)
    elif target_of is not None:
        recover = _recover_target(target_of)
    else:
        recover = _recover_traced_weights(parts.weights)
    return accept, pre, recover


def build_program(rule, kernels: RuleKernels, traced: bool) -> Program:
    """Assemble a sampler's :class:`Program` from the rule's declaration and its kernels.

    ``traced``: the compiled core's program (only for a rule :func:`compiles_whole`).
    """
    parts = _parts(rule, kernels)
    if traced:
        accept, pre, recover = _traced_paths(rule, parts)
    else:
        (accept, recover), pre = _eager_paths(rule, parts), _no_spike
    decide = _no_bounds
    if traced and parts.decided is not None and parts.from_rows is not None:
        decide = _bounds(parts.decided)
    deterministic = rule.spec.deterministic
    return Program(
        traced=traced,
        accept=accept,
        accept_raw=_accept_plan(rule.accept_probs_at),
        pre_spike=pre,
        decide=decide,
        exact_rows=parts.from_rows,
        recover=recover,
        recover_raw=_recover_plan_rows(parts.weights),
        accepted=_accept_by_threshold if deterministic else _accept_by_uniform,
        draws_acceptance=not deterministic,
    )
