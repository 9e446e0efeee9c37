r"""Compiled kernels for the samplers (``fused=True``), by ``torch.compile`` (inductor).

A :class:`~cactus_theory.samplers.base.RuleSampler` built with ``fused=True`` compiles the
tensor part of a call, so that the passes over whole rows are fused into as few reads as the
formulas allow and the many small operations around them into a few kernels:

* **the core** (:func:`compiled_for` applied to
  :func:`~cactus_theory.samplers.base._verify_core`, one copy per configured rule): the row
  sums (accumulated in float64, returned in float32) and the bad-row check (:func:`stats`),
  the accept path (Cactus's gamma at the drafted tokens, or ``Rule.accept_probs_from_values``,
  or ``Rule.accept_probs_from_rows``: top-k's compare, TAS's entropy, cascades' maxima, fuzzy
  SD's divergences, in the same read as the sums where they do not need the sums first), the
  accepted prefix, the recovery weights at the first rejected position with their sums over
  256-token blocks (the rows indexed inside the formulas: no copies; for the rules with a
  row target, :mod:`.blocked`: only the block sums over the vocabulary and the formula at
  the chosen block's 256 columns), the inverse-CDF draw and the output layout. The uniforms are drawn before it, eagerly, in the eager sampler's
  order, so a seeded call gives the same tokens as the eager sampler unless a float32
  rounding difference moves a uniform across a threshold. The exact root's host solver
  runs between two graphs.
* **the entry check alone** (:func:`row_stats`), for the calls the core does not cover (raw
  distributions given, or a rule without a fast accept path: its plan or host solver runs
  eagerly).

The formulas are the eager ones (the compiled functions call the same rule methods), so the
law is unchanged; the numbers differ by float32 rounding (summation order; the row sums are
more accurate here: float64 accumulation). The first call compiles (seconds; inductor caches on
disk) and a new shape may compile once more (then dynamic shapes). Each configured rule gets
its own copy of the core, so that dynamo's per-function recompile limit is shared by the shapes
of one rule only. If compiling fails (no C++ compiler, an unsupported backend), the kernels warn
once and run eagerly from then on: the same formulas without the fusion.

On the CPU the compiled kernels run on OpenMP threads (``torch.get_num_threads()`` when they
were compiled) and open a parallel region per kernel, even a small one. When other processes
hold the cores, each region waits for a descheduled thread: a call measured 0.35 ms on an idle
2-core machine took 55 ms while a test run used both cores. Give the process the cores it uses
(``torch.set_num_threads``), or keep the eager default there.

Nothing here synchronizes with the host on CUDA (the exact root's solver on CPU tensors reads
its values, as the eager sampler does).
"""

from __future__ import annotations

import threading
import types
import warnings

import torch

__all__ = ["row_stats", "stats", "compiled_for", "block_sums", "compile_failure", "CDF_BLOCK"]

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


def stats(x):
    """Float32 row sums (float64 accumulation) and the bad-row flag: the sum not finite or
    not positive in float32, or a negative (or NaN) entry. One read of ``x`` once compiled.

    A negative entry is found as a negative sum of the negative entries (a sum of
    non-positive floats is 0 only when every term is 0: rounding never brings it back up),
    a NaN entry by the NaN sum: no NaN-propagating minimum, which costs inductor's CPU
    kernels a third of the read.
    """
    if x is None:
        return None, None
    s = x.sum(-1, dtype=torch.float64).to(torch.float32)
    neg = torch.where(x < 0, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(-1)
    return s, ~(torch.isfinite(s) & (s > 0) & (neg >= 0))


def _row_stats(a, b, c, d):
    return stats(a), stats(b), stats(c), stats(d)


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


_PER_RULE: dict = {}


def compiled_for(rule, fn, *shape_key):
    """``fn`` compiled for one configured rule and ``shape_key`` (the samplers pass the
    vocabulary size and k): a copy of its code per key, so that dynamo's recompile limit
    counts the batch sizes of one configuration only, and only the batch axis turns dynamic
    (a kernel with a symbolic vocabulary size is slower)."""
    key = (fn.__module__, fn.__qualname__, type(rule), repr(rule), *shape_key)
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
    # one copy per vocabulary size: only the leading axes turn dynamic
    v = next((x.shape[-1] for x in tensors if x is not None), 0)
    return list(compiled_for(None, _row_stats, v)(*args))[:len(tensors)]
