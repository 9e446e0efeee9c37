r"""Fused passes for the samplers, compiled by ``torch.compile`` (inductor): ``fused=True``.

A :class:`~cactus_theory.samplers.base.RuleSampler` built with ``fused=True`` runs the three
parts of a call that read whole rows through compiled kernels, so that each reads its rows once
instead of once per eager torch operation:

* **entry validation** (:func:`row_stats`): the row sums (accumulated in float64, returned in
  float32) and the negative-entry check of every probability tensor, in one loop per tensor
  (eager torch reads each tensor twice: ``sum`` and ``amin``);
* **row-reading accept paths** (:func:`accept_from_rows`): ``Rule.accept_probs_from_rows`` of
  top-k, TAS, cascades and fuzzy SD (compare, entropy, maxima, divergences) fused into as few
  passes as their formulas allow (a statistic that needs the row sum first needs a second pass);
* **recovery** (:func:`recovery_from_spike`, :func:`recovery_from_rows`): the rows at the first
  rejected position are gathered, scaled, turned into the rule's recovery weights and summed
  by 256-token blocks (what :func:`~cactus_theory.samplers.base.inverse_cdf_sample` searches)
  in one kernel, without the eager path's row copies.

The formulas are the eager ones (the compiled functions call the same rule methods), so the
law is unchanged; the numbers differ by float32 rounding (summation order; the row sums are
more accurate here: float64 accumulation). The first call of each kernel compiles it (seconds;
inductor caches on disk) and a new shape may compile once more (then dynamic shapes). Each
configured rule gets its own copy of the kernels, so that dynamo's per-function recompile
limit is shared by the shapes of one rule only. If compiling fails (no C++ compiler, an
unsupported backend), the kernel warns once and runs eagerly from then on: the same formulas
without the fusion.

Nothing here synchronizes with the host, on the CPU or on CUDA.
"""

from __future__ import annotations

import threading
import types
import warnings

import torch

__all__ = ["row_stats", "accept_from_rows", "recovery_from_spike", "recovery_from_rows",
           "block_sums", "compile_failure", "CDF_BLOCK"]

#: Block length of the two-level inverse-CDF search (the samplers' recovery draw).
CDF_BLOCK = 256

_failure: str | None = None
_lock = threading.Lock()


def compile_failure() -> str | None:
    """Why the fused kernels run eagerly (the first compile error), or None while they compile."""
    return _failure


def block_sums(weights: torch.Tensor, blk: int = CDF_BLOCK) -> torch.Tensor:
    """Sums of consecutive blocks of ``blk`` entries along the last axis (the last block may
    be shorter), [B, ceil(V / blk)], in the weights' dtype."""
    B, V = weights.shape
    nb = V // blk
    parts = [] if nb == 0 else [weights[:, :nb * blk].reshape(B, nb, blk).sum(-1)]
    if nb * blk < V:
        parts.append(weights[:, nb * blk:].sum(-1, keepdim=True))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _stats(x):
    """Float32 row sums (float64 accumulation) and the bad-row flag: the sum not finite or
    not positive in float32, or a negative (or NaN) entry."""
    if x is None:
        return None, None
    s = x.sum(-1, dtype=torch.float64).to(torch.float32)
    return s, ~(torch.isfinite(s) & (s > 0) & (x.amin(-1) >= 0))


def _row_stats(a, b, c, d):
    return _stats(a), _stats(b), _stats(c), _stats(d)


def _accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    return rule.accept_probs_from_rows(target_rows, draft_rows, token_ids, target_sums, draft_sums)


def _gather_rows(target, draft, token_ids, pos, target_sums, draft_sums):
    rows = torch.arange(pos.shape[0], device=pos.device)
    return (target[rows, pos].to(torch.float32), draft[rows, pos].to(torch.float32),
            token_ids[rows, pos], target_sums[rows, pos], draft_sums[rows, pos])


def _recovery_from_spike(rule, target, draft, token_ids, pos, gamma, target_sums, draft_sums):
    x, y, n, sx, sy = _gather_rows(target, draft, token_ids, pos, target_sums, draft_sums)
    rows = torch.arange(pos.shape[0], device=pos.device)
    w = rule.recovery_weights_from_spike(x, y, n, gamma[rows, pos], sx, sy)
    return w, block_sums(w)


def _recovery_from_rows(rule, target, draft, token_ids, pos, target_sums, draft_sums):
    x, y, n, sx, sy = _gather_rows(target, draft, token_ids, pos, target_sums, draft_sums)
    q_r, p_r = x / sx[:, None], y / sy[:, None]
    w = rule.recovery_weights_at(q_r, p_r, n)
    return w, q_r, block_sums(w), block_sums(q_r)


class _Kernel:
    """One compiled function, with the eager function as its fallback.

    ``copy=True`` compiles a copy of the function's code object: dynamo keeps its cache (and
    its recompile limit) per code object, so each configured rule gets its own.
    """

    def __init__(self, fn, copy: bool = False):
        if copy:
            fn = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                                    fn.__defaults__, fn.__closure__)
        self.eager = fn
        self.compiled = None

    def __call__(self, *args):
        global _failure
        if _failure is None:
            if self.compiled is None:
                self.compiled = torch.compile(self.eager, dynamic=None)
            try:
                with warnings.catch_warnings():
                    # dynamo's tracing notes (array-API helpers it steps over), not the user's
                    warnings.simplefilter("ignore")
                    return self.compiled(*args)
            except Exception as exc:  # noqa: BLE001 - a real error raises again just below
                out = self.eager(*args)
                with _lock:
                    if _failure is None:
                        _failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        warnings.warn(f"cactus_theory fused samplers: torch.compile failed "
                                      f"({_failure}); running the same formulas eagerly",
                                      RuntimeWarning, stacklevel=3)
                return out
        return self.eager(*args)


_ROW_STATS = _Kernel(_row_stats)
_PER_RULE: dict = {}


def _rule_kernel(rule, fn):
    key = (fn.__name__, type(rule), repr(rule))
    with _lock:
        k = _PER_RULE.get(key)
        if k is None:
            k = _PER_RULE[key] = _Kernel(fn, copy=True)
    return k


def row_stats(*tensors):
    r"""Float32 row sums and bad-row flags of up to four probability tensors, fused.

    For each tensor x (or None): :math:`s = \sum_i x_i` accumulated in float64 and rounded to
    float32, and ``bad = not (s finite and s > 0 and min_i x_i >= 0)``, read in one loop.

    Returns
    -------
    list of (Tensor, Tensor) or (None, None)
        ``(sums, bad)`` per argument, shapes ``x.shape[:-1]``.
    """
    args = list(tensors) + [None] * (4 - len(tensors))
    return list(_ROW_STATS(*args))[:len(tensors)]


def accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    """``rule.accept_probs_from_rows(...)`` compiled (one copy per configured rule)."""
    return _rule_kernel(rule, _accept_from_rows)(rule, target_rows, draft_rows, token_ids,
                                                 target_sums, draft_sums)


def recovery_from_spike(rule, target, draft, token_ids, pos, gamma, target_sums, draft_sums):
    r"""Cactus's recovery weights at position ``pos[b]`` of each row, and their block sums.

    ``rule.recovery_weights_from_spike`` on the gathered rows (un-normalized, with their sums)
    and gamma at the drafted tokens, then :func:`block_sums`: [B, V] weights and
    [B, ceil(V / 256)] block sums from one read of the 2B rows.
    """
    return _rule_kernel(rule, _recovery_from_spike)(rule, target, draft, token_ids, pos, gamma,
                                                    target_sums, draft_sums)


def recovery_from_rows(rule, target, draft, token_ids, pos, target_sums, draft_sums):
    r"""Any rule's recovery weights at position ``pos[b]`` of each row, normalized rows in.

    Returns ``(weights, q rows, weight block sums, q block sums)``: q's normalized rows are
    :func:`~cactus_theory.samplers.base.inverse_cdf_sample`'s fallback.
    """
    return _rule_kernel(rule, _recovery_from_rows)(rule, target, draft, token_ids, pos,
                                                   target_sums, draft_sums)
