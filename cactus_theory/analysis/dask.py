r"""The row-wise analyses over Dask collections, on a ``dask.distributed`` cluster or any
Dask scheduler.

The same per-chunk computation as :mod:`cactus_theory.analysis.scaled`, run as Dask tasks:

* rows as ``dask.array`` (q and p of shape (N, V), or (..., V)): one task per block of rows
  (the vocabulary axis is made one chunk; p takes q's row chunks);
* a folder of shards (a :class:`~cactus_theory.rows.ShardRows`, or any row source with
  parts): a ``dask.bag`` of the shards, each read by the worker that analyses it, chunk by
  chunk within the memory bound (so the workers need the files: a shared file system on a
  multi-node cluster).

Each task returns its rows' per-row values; they are gathered in row order and the corpus
statistics (means, maxima, exact quantiles, the global delta's scan and refinement) are taken
over all of them exactly as in memory, so the numbers are those of the in-memory call bit for
bit, whatever the chunking and the number of workers. Multi-pass analyses
(:func:`optimal_frontier` without ``eps``, :func:`global_delta`) compute the collection once
per pass: ``persist()`` it first where it fits in the cluster's memory.

The scheduler is Dask's current one: a ``dask.distributed.Client`` made before the call
(a ``LocalCluster`` on this machine, or the address of a cluster's scheduler) runs the tasks
on its workers.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), N rows, V the
vocabulary size.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1-3, Corollary 5.
"""

from __future__ import annotations

import numpy as np

from . import chunked, scaled
from .chunked import ArrayRows, RowChunk, RowSource, rows_per_chunk

__all__ = [
    "DaskRunner",
    "analyze",
    "analyze_rules",
    "calibrate_delta",
    "emitted_distribution",
    "global_delta",
    "optimal_frontier",
]


def _block_result(kernel, start, q, p, rq, rp, args):
    """One block of a Dask array: the kernel's result as a one-item list."""
    return [chunked.with_file(kernel, RowChunk(start, q, p, rq, rp), *args)]


def _part_result(part, kernel, rows_for, args):
    """One shard, read and analysed chunk by chunk on the worker: the kernel's results."""
    return chunked.LocalRunner(part, rows_for).map(kernel, *args)


class DaskRunner:
    """Runs a per-chunk kernel as Dask tasks (one per block of rows, or one per shard) and
    returns the results in row order (the interface of
    :class:`~cactus_theory.analysis.chunked.LocalRunner`).

    Parameters
    ----------
    source : RowSource
        :class:`~cactus_theory.analysis.chunked.ArrayRows` of Dask arrays, or a source with
        parts (shards).
    rows_for : callable
        V -> rows per chunk within a shard (:func:`~cactus_theory.analysis.chunked.rows_per_chunk`).
    """

    def __init__(self, source: RowSource, rows_for):
        self.source, self.rows_for = source, rows_for
        self.n_rows = source.n_rows

    def _tasks(self, kernel, args):
        import dask

        src = self.source
        if isinstance(src, ArrayRows):
            arrays = [a for a in src._flat]
            q = arrays[0].rechunk({1: -1})
            arrays = [None if a is None else a.rechunk((q.chunks[0], -1)) for a in arrays]
            blocks = [None if a is None else a.to_delayed().ravel() for a in arrays]
            starts = np.concatenate([[0], np.cumsum(q.chunks[0])[:-1]]).astype(int)
            return [
                dask.delayed(_block_result)(
                    kernel, int(starts[i]), *(None if b is None else b[i] for b in blocks), args
                )
                for i in range(len(blocks[0]))
            ]
        import dask.bag as db

        bag = db.from_sequence(src.parts(), npartitions=len(src.parts()))
        return bag.map(_part_result, kernel, rows_for=self.rows_for, args=args).to_delayed()

    def map(self, kernel, *args) -> list:
        """``[kernel(chunk, *args) for chunk in source]`` computed by Dask, in row order."""
        import dask

        out = []
        for res in dask.compute(*self._tasks(kernel, args)):
            if isinstance(self.source, ArrayRows):
                out.extend(res)  # a block: [its result]
            else:
                for shard in res:  # a bag partition: [results of each shard]
                    out.extend(shard)
        return out


def _source(target_probs, draft_probs, raw_target_probs=None, raw_draft_probs=None):
    if isinstance(target_probs, RowSource):
        if draft_probs is not None:
            raise ValueError(
                "draft_probs: give either a row source alone, or target_probs and draft_probs Dask arrays"
            )
        return target_probs
    if not chunked.is_dask(target_probs):
        raise ValueError("target_probs: expected a dask.array (with draft_probs) or a row source of shards")
    import dask.array as da

    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs Dask array")
    arrays = [
        None if a is None else da.asarray(a)
        for a in (target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    ]
    return ArrayRows(*arrays)


def _runner(source, kind, chunk_rows, max_memory):
    return DaskRunner(source, rows_per_chunk(kind, chunk_rows=chunk_rows, max_memory=max_memory))


def analyze(
    rule,
    target_probs,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    divergences=None,
    per_token=False,
    chunk_rows=None,
    max_memory=None,
):
    r"""Acceptance and the emitted distribution's divergences from q (Theorem 3) of every row
    of a Dask collection (see :func:`cactus_theory.analysis.scaled.analyze`).

    ``per_token=True`` gathers the (N, V) arrays ``accept_probs`` and ``emitted`` on the
    client (for the emitted rows as a Dask array, see :func:`emitted_distribution`).

    Symbols: q verifier, p drafter. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3.
    """
    source = _source(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    return scaled.analyze(
        rule,
        source,
        divergences=divergences,
        per_token=per_token,
        runner=_runner(source, "analyze", chunk_rows, max_memory),
    )


def _emitted_block(q, p, rule, method):
    from .one_step import emitted_distribution as _emitted

    return _emitted(rule, q, p, method=method)


def emitted_distribution(rule, target_probs, draft_probs, *, method="fast"):
    r""":math:`h_{alg}` (Theorem 3) of every row of Dask arrays q, p (..., V), as a lazy Dask
    array with q's row chunks (the vocabulary axis one chunk).

    Symbols: q verifier, p drafter. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3.
    """
    import dask.array as da

    from ..rules import get_rule

    rule = get_rule(rule)
    if not chunked.is_dask(target_probs):
        raise ValueError("target_probs: expected a dask.array")
    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs Dask array")
    q = da.asarray(target_probs)
    q = q.rechunk({q.ndim - 1: -1})
    p = da.asarray(draft_probs)
    if p.shape != q.shape:
        raise ValueError(f"draft_probs: shape {p.shape} does not match target_probs' shape {q.shape}")
    p = p.rechunk(q.chunks)
    return da.map_blocks(_emitted_block, q, p, rule, method, dtype=np.float64)


def analyze_rules(
    target_probs, draft_probs=None, rules=None, *, delta=None, knobs=None, chunk_rows=None, max_memory=None
):
    r"""Rules side by side over a Dask collection (see :func:`cactus_theory.api.analyze_rules`).

    Symbols: q verifier, p drafter, delta per-draft budget. Source: Hao & Mou, ICLR 2026
    (arXiv 2604.04987), Theorems 1 and 3.
    """
    source = _source(target_probs, draft_probs)
    return scaled.analyze_rules(
        source, None, rules, delta=delta, knobs=knobs, runner=_runner(source, "rules", chunk_rows, max_memory)
    )


def optimal_frontier(
    target_probs, draft_probs=None, *, eps=None, divergence="kl", chunk_rows=None, max_memory=None
):
    r""":math:`F(\epsilon)` (Theorem 1) averaged over a Dask collection (see
    :func:`cactus_theory.api.optimal_frontier`).

    Symbols: q verifier, p drafter, eps target on the emitted divergence. Source: Hao & Mou,
    ICLR 2026 (arXiv 2604.04987), Theorem 1.
    """
    source = _source(target_probs, draft_probs)
    return scaled.optimal_frontier(
        source,
        None,
        eps=eps,
        divergence=divergence,
        runner=_runner(source, "frontier", chunk_rows, max_memory),
    )


def calibrate_delta(
    target_probs,
    draft_probs=None,
    eps=0.0,
    *,
    rule="cactus-taylor",
    divergence="kl",
    chunk_rows=None,
    max_memory=None,
):
    r"""Per position of a Dask collection, the delta whose emitted divergence meets eps (see
    :func:`cactus_theory.api.calibrate_delta`).

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    source = _source(target_probs, draft_probs)
    return scaled.calibrate_delta(
        source,
        None,
        eps,
        rule=rule,
        divergence=divergence,
        runner=_runner(source, "calibrate", chunk_rows, max_memory),
    )


def global_delta(
    target_probs,
    draft_probs=None,
    eps=0.0,
    *,
    statistic="mean",
    base="taylor",
    divergence="kl",
    measure=None,
    chunk_rows=None,
    max_memory=None,
):
    r"""One delta for a corpus held as a Dask collection (see
    :func:`cactus_theory.analysis.scaled.global_delta`: one Dask computation per pass).

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    source = _source(target_probs, draft_probs)
    return scaled.global_delta(
        source,
        None,
        eps,
        statistic=statistic,
        base=base,
        divergence=divergence,
        measure=measure,
        runner=_runner(source, "calibrate", chunk_rows, max_memory),
    )
