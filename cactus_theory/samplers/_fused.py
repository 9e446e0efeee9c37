r"""Compiled kernels for the samplers (``fused=True``), by ``torch.compile`` (inductor).

A :class:`~cactus_theory.samplers.base.RuleSampler` built with ``fused=True`` compiles the
tensor part of a call, so that the passes over whole rows are fused into as few reads as the
formulas allow and the many small operations around them into a few kernels:

* **the core** (:func:`compiled_for` applied to
  :func:`~cactus_theory.samplers._core.verify_core`, one copy per configured rule): the row
  sums (float32 sums of 256-entry blocks, then their float64 sum) and the bad-row check
  (:func:`stats`),
  the accept path (Cactus's gamma at the drafted tokens, or an elementwise target's ``accept_probs_from_values``,
  or a rule kernel's ``accept_from_rows`` (:mod:`._kernels`): top-k's compare, TAS's
  entropy, cascades' maxima, fuzzy
  SD's divergences, in the same read as the sums where they do not need the sums first; fuzzy
  SD's Jensen-Shannon bounds on CPU, with the exact divergence of the undecided rows between
  two graphs), the
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
as accurate as torch's pairwise sums: two levels). The first call compiles (seconds; 10-30 s
per rule at V = 151,936 from a cold cache; inductor caches on disk) and a new batch size
compiles once more (then with a dynamic batch axis). Each configured rule, vocabulary size
and k gets its own copy of the core (its own name), so that dynamo's per-function recompile
limit and its memory of which sizes changed belong to that copy only: the vocabulary and k
stay static in every kernel. If compiling fails (no C++ compiler, an unsupported backend),
the kernels warn once and run eagerly from then on: the same formulas without the fusion.

On the CPU the compiled kernels run on OpenMP threads (``torch.get_num_threads()`` when they
were compiled) and open a parallel region per kernel, even a small one. When other processes
hold the cores, each region waits for a descheduled thread: a call measured 0.35 ms on an idle
2-core machine took 55 ms while a test run used both cores. Give the process the cores it uses
(``torch.set_num_threads``), or keep the eager default there.

Nothing here synchronizes with the host on CUDA (the exact root's solver on CPU tensors reads
its values, as the eager sampler does).
"""

from __future__ import annotations

import hashlib
import threading
import types
import warnings

import torch

from ._kernels.blocks import block_reduce, split_blocks

#: Block length of the two-level inverse-CDF search (the samplers' recovery draw).
CDF_BLOCK = 256

#: Block length of the entry check's two-level row sums (:func:`stats`).
SUM_BLOCK = 256

#: Inductor options of the compiled kernels for vocabularies larger than
#: :data:`SMALL_VOCAB`: never store an intermediate to save recomputing it. Inductor's
#: defaults store (realize) a pointwise buffer read by more than 4 consumers or built from
#: many reads; the recovery rows (gathered at a data-dependent position) and a target row
#: built from them are read by each block sum, the spike's block and the draw's block, so
#: they were copied into [B, V] buffers and read back: three extra passes of the rows,
#: measured 1.6-1.7 ms against 0.5 ms for the recovery kernel at [8, 4, 151936] (Cactus-
#: Taylor), and 2.3 against 2.0 ms for the main kernel. Recomputing an elementwise formula
#: costs less than a trip to memory here.
INDUCTOR_OPTIONS = {
    "realize_reads_threshold": 1 << 20,
    "realize_cpu_opcount_threshold": 1 << 20,
    "realize_cpu_acc_reads_threshold": 1 << 20,
}

#: Up to this vocabulary size the kernels compile with inductor's defaults: there a copy of
#: a row costs little, and inductor unrolls reductions over at most 8 entries into
#: expressions, which without realization nest into one another. The row sums and block
#: maxima reduce over the blocks of 256 entries, so a row of at most 8 blocks (2,048
#: entries) has such reductions. Measured compile times of the Cactus-Taylor core (B = 12,
#: k = 3) with :data:`INDUCTOR_OPTIONS`: 90 s at V = 1,504 (6 blocks), 59 s at V = 2,000
#: (8), 37 s at V = 2,049, 3,000 and 151,936; with the defaults at V = 1,505: 23 s. A token
#: cascade's core at V = 6 took 183 s with :data:`INDUCTOR_OPTIONS`, 9 s without.
SMALL_VOCAB = 8 * SUM_BLOCK

#: Inductor options of every compiled kernel: the graphs that branch with ``torch.cond``
#: (TAS's entropy, fuzzy SD's bounds, the token cascades' masked sums) may be stored in
#: inductor's on-disk FX graph cache. Inductor bypasses that cache for every higher-order
#: operator unless it is marked (keyed here by torch's version), so these cores compiled
#: afresh in every process (15-35 s per rule and shape). The branches are part of the key:
#: a graph module is hashed with its submodules' code, so two graphs that differ only in a
#: branch get different keys (tested).
CACHE_OPTIONS = {"unsafe_marked_cacheable_functions": {"torch.ops.higher_order.cond": torch.__version__}}

_failure: str | None = None
_lock = threading.Lock()


def compile_failure() -> str | None:
    """Why the fused kernels run eagerly (the first compile error), or None while they compile."""
    return _failure


def block_sums(weights: torch.Tensor, blk: int = CDF_BLOCK) -> torch.Tensor:
    """Sums of consecutive blocks of ``blk`` entries along the last axis (the last block may
    be shorter), [..., ceil(V / blk)], in the weights' dtype
    (:func:`._kernels.blocks.block_reduce`)."""
    return block_reduce(weights, "sum", blk)


def stats(x):
    r"""Float32 row sums and the bad-row flag: the sum not finite or not positive in
    float32, or a negative (or NaN) entry. One read of ``x`` once compiled.

    The sum is taken in two levels: float32 sums of blocks of :data:`SUM_BLOCK` entries
    (accumulated in float32 whatever ``x``'s dtype), then the sum of those block sums
    accumulated in float64 and rounded to float32. Each block sum has the relative error of a
    float32 sum of 256 non-negative terms (at most 255 u in any order, u = 2^-24; about
    sqrt(256 / lanes) u in practice) and the float64 level adds none, so the row sum is as
    accurate as torch's own float32 sum (pairwise; measured 0.34 float32 eps from the
    float64 sum at V = 151,936, torch's sum 0.51). A one-level sum would either accumulate
    in float32 along the whole row in each SIMD lane (inductor: tens of eps at V = 151,936)
    or convert every entry to float64 (twice the read pass's time on these CPUs: the
    conversion, not the memory, binds).

    A negative entry is found as a negative sum of the negative entries (a sum of
    non-positive floats is 0 only when every term is 0: rounding never brings it back up),
    a NaN entry by the NaN sum: no NaN-propagating minimum, which costs inductor's CPU
    kernels a third of the read.
    """
    if x is None:
        return None, None
    whole, tail = split_blocks(x, SUM_BLOCK)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    s = torch.zeros(x.shape[:-1], dtype=torch.float64, device=x.device)
    neg = torch.zeros(x.shape[:-1], dtype=torch.float32, device=x.device)
    # the whole blocks (a view: the rows are contiguous or strided, never copied), then the tail
    for part in ([] if whole is None else [whole]) + ([] if tail is None else [tail[..., None]]):
        s = s + part.sum(-1, dtype=torch.float32).sum(-1, dtype=torch.float64)
        neg = neg + torch.where(part < 0, part, zero).sum(-1, dtype=torch.float32).sum(-1)
    s = s.to(torch.float32)
    return s, ~(torch.isfinite(s) & (s > 0) & (neg >= 0))


def row_stats_core(a, b, c, d):
    """The entry check of four row sets at once (:func:`stats` of each): the function that
    :func:`row_stats` compiles."""
    return stats(a), stats(b), stats(c), stats(d)


class CompiledKernel:
    """One compiled function, with the eager function as its fallback.

    ``copy=True`` compiles a copy of the function's code object: dynamo keeps its cache (and
    its recompile limit) per code object, so each configured rule gets its own. The copy is
    named ``<name>__<tag>`` (``tag``: a digest of the caller's key): dynamo's automatic
    dynamic shapes remember which sizes changed per (file, first line, name), in the process
    and on disk (local profile-guided state in inductor's cache directory), so copies under
    one name shared that memory: a second vocabulary size anywhere made every later copy
    compile with a symbolic vocabulary and k from its first call, in every later process too
    (a main kernel of 1,450 lines that took g++ 30 s; the run time measured about the same,
    within the machine's noise). ``options``:
    inductor's options for this kernel (None: its defaults).
    """

    def __init__(self, fn, copy: bool = False, options=None, tag: str = ""):
        if copy:
            name = f"{fn.__name__}__{tag}" if tag else fn.__name__
            names = {"co_name": name}
            if hasattr(fn.__code__, "co_qualname"):  # Python >= 3.11
                names["co_qualname"] = name
            fn = types.FunctionType(
                fn.__code__.replace(**names), fn.__globals__, name, fn.__defaults__, fn.__closure__
            )
        self.eager = fn
        self.options = options
        self.compiled = None

    def __call__(self, *args):
        global _failure
        if _failure is None:
            if self.compiled is None:
                self.compiled = torch.compile(self.eager, dynamic=None, options=self.options)
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
                        warnings.warn(
                            f"cactus_theory fused samplers: torch.compile failed "
                            f"({_failure}); running the same formulas eagerly",
                            RuntimeWarning,
                            stacklevel=3,
                        )
                return out
        return self.eager(*args)


_PER_RULE: dict = {}


def _known_options(options: dict) -> dict:
    """``options`` less the settings this torch's inductor does not have (older versions lack
    some of :data:`INDUCTOR_OPTIONS`; ``torch.compile`` refuses an unknown one)."""
    from torch._inductor import config

    return {key: value for key, value in options.items() if hasattr(config, key)}


def compiled_for(rule, fn, *shape_key):
    """``fn`` compiled for one configured rule and ``shape_key`` (the samplers pass the
    vocabulary size and k): a copy of its code per key, so that dynamo's recompile limit
    counts the batch sizes of one configuration only, and only the batch axis turns dynamic
    (a kernel with a symbolic vocabulary size and k takes longer to compile). Every kernel
    compiles with :data:`CACHE_OPTIONS`; vocabularies larger than :data:`SMALL_VOCAB` also
    with :data:`INDUCTOR_OPTIONS`."""
    key = (fn.__module__, fn.__qualname__, type(rule), repr(rule), *shape_key)
    with _lock:
        k = _PER_RULE.get(key)
        if k is None:
            large = bool(shape_key) and shape_key[0] > SMALL_VOCAB
            tag = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
            k = _PER_RULE[key] = CompiledKernel(
                fn,
                copy=True,
                tag=tag,
                options=_known_options({**CACHE_OPTIONS, **(INDUCTOR_OPTIONS if large else {})}),
            )
    return k


def row_stats(*tensors):
    r"""Float32 row sums and bad-row flags of up to four probability tensors, fused.

    For each tensor x (or None): :math:`s = \sum_i x_i` in two levels (:func:`stats`), and
    ``bad = not (s finite and s > 0 and min_i x_i >= 0)``, read in one loop.

    Returns
    -------
    list of (Tensor, Tensor) or (None, None)
        ``(sums, bad)`` per argument, shapes ``x.shape[:-1]``.
    """
    args = list(tensors) + [None] * (4 - len(tensors))
    # one copy per vocabulary size: only the leading axes turn dynamic
    v = next((x.shape[-1] for x in tensors if x is not None), 0)
    return list(compiled_for(None, row_stats_core, v)(*args))[: len(tensors)]
