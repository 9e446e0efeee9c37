r"""The one-step analysis and the emitted distribution over many rows: chunk by chunk, or as
Dask tasks.

Each position's acceptance, emitted distribution :math:`h_{alg}` (Theorem 3) and divergences
depend on its own (q, p) only: :func:`analyze_over` and :func:`emitted_over` run a per-chunk
kernel (given by :mod:`cactus_theory.analysis.one_step`, which calls them) on consecutive
chunks of rows of a :class:`~cactus_theory.analysis._runners.RowSource` and join the
per-row results in order, so the numbers are those of one call over all rows bit for bit
(tested), and the memory is that of one chunk's temporaries plus the per-row results (8 bytes
per row and statistic, plus the (N, V) arrays asked for).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), N rows, V the
vocabulary size.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3.
"""

from __future__ import annotations

import numpy as np

from ..results import OneStepResult
from ._runners import ArrayRows, Execution, LocalRunner, RowChunk, as_rows, is_dask, join_rows, runner_for


def _batch(source, run):
    """The batch shape of the joined results: array input's own, else (N,)."""
    return source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)


def _row_writer(run, rows_out):
    """``each(chunk, res)`` of :meth:`LocalRunner.map`: the chunk's (n, V) rows written into
    the (N, V) outputs (made at the first chunk), the per-row values kept."""

    def write(chunk, res):
        if not rows_out:
            for key in ("accept_probs", "emitted"):
                x = getattr(res, key)
                rows_out[key] = (
                    np.empty((run.n_rows, x.shape[-1]), dtype=x.dtype)
                    if isinstance(x, np.ndarray)
                    else x.new_empty((run.n_rows, x.shape[-1]))
                )
        for key in ("accept_probs", "emitted"):
            rows_out[key][chunk.start : chunk.start + chunk.n_rows] = getattr(res, key)
        return OneStepResult(res.rule, None, res.acceptance, None, res.divergences)

    return write


def analyze_over(
    kernel, rule, arrays, divergences, per_token, policy, *, execution: Execution
) -> OneStepResult:
    """:func:`cactus_theory.analysis.analyze` chunk by chunk: ``kernel(chunk, rule,
    divergences, per_token, *policy)`` per chunk, the rows joined in order.

    ``arrays`` is ``(target_probs, draft_probs, raw_target_probs, raw_draft_probs)`` (a row
    source in the first place, the others None); ``per_token`` None keeps the (N, V) arrays
    for in-memory rows only (not for a row source nor Dask arrays).
    """
    source = as_rows(*arrays)
    if per_token is None:
        per_token = source.in_memory and not is_dask(arrays[0])
    run = runner_for(source, "analyze", execution)
    batch = _batch(source, run)
    rows_out = {}
    # per-token rows are written as the chunks come (no second copy of the N x V outputs)
    stream = bool(per_token) and isinstance(run, LocalRunner)
    each = {"each": _row_writer(run, rows_out)} if stream else {}
    parts = run.map(kernel, rule, divergences, bool(per_token), *policy, **each)
    if not parts:
        raise ValueError("target_probs: no rows")

    def join(xs, trailing=()):
        return join_rows(list(xs)).reshape(tuple(batch) + tuple(trailing))

    acc = join(r.acceptance for r in parts)
    divs = {d: join(r.divergences[d] for r in parts) for d in divergences}
    if stream:
        V = int(rows_out["emitted"].shape[-1])
        a, h = (rows_out[k].reshape(tuple(batch) + (V,)) for k in ("accept_probs", "emitted"))
    elif per_token:
        V = int(parts[0].emitted.shape[-1])
        a = join((r.accept_probs for r in parts), (V,))
        h = join((r.emitted for r in parts), (V,))
    else:
        a = h = None
    return OneStepResult(repr(rule), a, acc, h, divs)


def emitted_over(kernel, rule, target_probs, draft_probs, raws, args, *, execution: Execution):
    """:math:`h_{alg}` of every row chunk by chunk (``kernel(chunk, rule, *args)``), joined in
    order: shape batch + (V,)."""
    source = as_rows(target_probs, draft_probs, *raws)
    run = runner_for(source, "emitted", execution)
    parts = run.map(kernel, rule, *args)
    if not parts:
        raise ValueError("target_probs: no rows")
    out = join_rows(parts)
    return out.reshape(tuple(_batch(source, run)) + (out.shape[-1],))


def _emitted_block(q, p, block, rule, method):
    """One Dask block of rows: ``block`` on it as a chunk."""
    return block(RowChunk(0, q, p), rule, method)


def emitted_on_dask(block, rule, target_probs, draft_probs, method):
    """:math:`h_{alg}` of every row of Dask arrays q, p (..., V) as a lazy Dask array with q's
    row chunks (the vocabulary axis one chunk): ``block(rows, rule, method)`` per block."""
    import dask.array as da

    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs Dask array")
    q = da.asarray(target_probs)
    q = q.rechunk({q.ndim - 1: -1})
    p = da.asarray(draft_probs)
    if p.shape != q.shape:
        raise ValueError(f"draft_probs: shape {p.shape} does not match target_probs' shape {q.shape}")
    return da.map_blocks(_emitted_block, q, p.rechunk(q.chunks), block, rule, method, dtype=np.float64)
