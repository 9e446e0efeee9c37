r"""Where the row-wise analyses run: the chunk loop in this process, or Dask tasks.

A :class:`RowSource` yields :class:`RowChunk` blocks of consecutive rows in a fixed order
(:class:`ArrayRows`: arrays in memory; :mod:`cactus_theory.rows`: files and folders of
shards); :class:`LocalRunner` runs a per-chunk kernel over them in order, and
:func:`rows_per_chunk` sizes the chunks: ``chunk_rows`` rows, or the most rows whose
temporaries fit ``max_memory`` (default :data:`DEFAULT_MAX_MEMORY`), from the measured count
of float64 arrays of V values each analysis holds at once per row (:data:`WORK_ARRAYS`).
:class:`DaskRunner` runs the same kernels as Dask tasks (one per block of a ``dask.array``,
or one per shard of a source with parts); :func:`runner_for` chooses between them from the
input (Dask arrays) or the caller's ``runner="dask"``. Either way the per-row results come
back in row order, so the corpus statistics taken over them are the in-memory ones bit for
bit.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), V the vocabulary size,
N rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

#: Default bound on an analysis' working memory beyond its input and its returned arrays.
DEFAULT_MAX_MEMORY = 256 * 2**20

#: float64 arrays of V values each analysis holds at once per row of a chunk: the tracemalloc
#: peak beyond the input (numpy, V = 1,000, chunks of 40-1,000 rows; ``cactus-exact``) over
#: ``8 V`` bytes a row, rounded up: ``analyze`` 31.5, ``analyze_rules`` 38.6 (one rule),
#: ``optimal_frontier`` 26.8, ``calibrate_delta`` and ``global_delta`` 692 (their scan
#: evaluates 24 deltas a row at once). Rows of V >= 1,024 hold fewer (about 12 for
#: ``analyze`` at V = 151,936: one row at a time).
WORK_ARRAYS = {"analyze": 34, "emitted": 34, "rules": 44, "frontier": 32, "calibrate": 768}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_memory(value, name: str = "max_memory") -> int:
    """Bytes from ``256MB``, ``"1.5 GiB"``, ``"512k"`` or a number of bytes (> 0).

    Raises
    ------
    ValueError
        Naming ``name``: an unknown unit, an unreadable string, or a value <= 0.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a size such as '256MB' or a number of bytes, got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        nbytes = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"{name}: expected a size such as '256MB', '1.5GiB' or a number of bytes, got {value!r}"
            )
        nbytes = float(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"{name}: expected a size such as '256MB' or a number of bytes, got {value!r}")
    if not math.isfinite(nbytes) or nbytes <= 0:
        raise ValueError(f"{name}: must be a positive size, got {value!r}")
    return int(nbytes)


def _chunk_count(chunk_rows) -> int | None:
    if chunk_rows is None:
        return None
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise ValueError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows: must be >= 1, got {chunk_rows}")
    return int(chunk_rows)


def rows_per_chunk(kind: str, *, chunk_rows=None, max_memory=None):
    """The chunk rule: a function ``V -> rows`` (``chunk_rows`` as given, or the most rows
    whose :data:`WORK_ARRAYS` temporaries of V float64 each fit ``max_memory``; at least 1).

    Raises ValueError naming ``chunk_rows`` (<= 0, not an integer) or ``max_memory``
    (unknown size string, <= 0), or both given.
    """
    rows = _chunk_count(chunk_rows)
    if rows is not None and max_memory is not None:
        raise ValueError("max_memory: give chunk_rows or max_memory, not both")
    budget = DEFAULT_MAX_MEMORY if max_memory is None else parse_memory(max_memory)
    per_value = 8 * WORK_ARRAYS[kind]

    def rule(V: int) -> int:
        if rows is not None:
            return rows
        return max(1, budget // (per_value * max(1, int(V))))

    return rule


def wants_chunks(target_probs, kind: str, *, chunk_rows=None, max_memory=None) -> bool:
    """True where the call must take the chunked path: a row source or a path, or arrays of
    more rows than one chunk. Validates ``chunk_rows`` and ``max_memory`` either way."""
    rule = rows_per_chunk(kind, chunk_rows=chunk_rows, max_memory=max_memory)
    if isinstance(target_probs, (RowSource, str)) or hasattr(target_probs, "__fspath__"):
        return True
    if is_dask(target_probs):
        return True
    shape = getattr(target_probs, "shape", None)
    if shape is None or len(shape) < 2:
        return False
    n = math.prod(shape[:-1])
    return n > rule(shape[-1])


def is_dask(x) -> bool:
    """True for a Dask collection (``dask.array``, ``dask.bag``, ...)."""
    return type(x).__module__.split(".")[0] == "dask"


class LocalRunner:
    """Runs a per-chunk kernel over a source in this process, chunk by chunk, in order.

    Parameters
    ----------
    source : RowSource
    rows_for : callable
        V -> rows per chunk (:func:`rows_per_chunk`).
    progress : bool
        A tqdm progress bar over chunks (on stderr).
    """

    def __init__(self, source: RowSource, rows_for, progress: bool = False, desc: str = "rows"):
        self.source, self.rows_for, self.progress, self.desc = source, rows_for, progress, desc

    @property
    def n_rows(self) -> int:
        return self.source.n_rows

    def map(self, kernel, *args, each=None) -> list:
        """``[kernel(chunk, *args) for chunk in source]``, in row order; with ``each``,
        ``each(chunk, result)`` is kept instead of ``result`` (e.g. rows written to an output
        as they come)."""
        chunks = self.source.chunks(self.rows_for)
        if self.progress:
            from tqdm.auto import tqdm

            total = sum(-(-n // self.rows_for(V)) for n, V in self.source.widths())
            chunks = tqdm(chunks, total=total, desc=self.desc, unit="chunk", leave=False)
        out = []
        for c in chunks:
            res = with_file(kernel, c, *args)
            out.append(res if each is None else each(c, res))
            del c, res  # a chunk is a view: it would keep its rows' file alive
        return out


def with_file(fn, chunk, *args):
    """Run ``fn`` on a chunk; a ValueError from a file's rows names the file."""
    try:
        return fn(chunk, *args)
    except ValueError as exc:
        if chunk.where and not str(exc).startswith(chunk.where):
            raise ValueError(f"{chunk.where}: {exc}") from None
        raise


def join_rows(parts):
    """Concatenate per-chunk arrays along the rows (numpy or torch)."""
    if not parts:
        return np.zeros((0,))
    if type(parts[0]).__module__.split(".")[0] == "torch":
        import torch

        return torch.cat(parts, dim=0)
    return np.concatenate(parts, axis=0)


#: Where a row-wise analysis runs (``runner=``): None, the input decides (Dask arrays as Dask
#: tasks, anything else chunk by chunk here); ``"local"`` here; ``"dask"`` as Dask tasks (a
#: row source's shards as a ``dask.bag``, each read by the worker that analyses it).
RUNNERS = ("local", "dask")


@dataclass(frozen=True)
class Execution:
    """Where a row-wise analysis runs: the one object the public entry points build from their
    ``chunk_rows``, ``max_memory``, ``progress`` and ``runner`` keywords and pass down.

    Attributes
    ----------
    chunk_rows : int, optional
        Rows per chunk (>= 1); or
    max_memory : int or str, optional
        The bound on a chunk's working memory (``"256MB"``; default
        :data:`DEFAULT_MAX_MEMORY`), not with ``chunk_rows``.
    progress : bool
        A progress bar over chunks.
    runner : {None, "local", "dask"}
        See :data:`RUNNERS`.

    Both bounds and the runner are checked at construction (ValueError naming the keyword).
    """

    chunk_rows: int | None = None
    max_memory: int | str | None = None
    progress: bool = False
    runner: str | None = None

    def __post_init__(self):
        rows_per_chunk("analyze", chunk_rows=self.chunk_rows, max_memory=self.max_memory)
        if self.runner is not None and self.runner not in RUNNERS:
            raise ValueError(f"runner: expected one of {RUNNERS} or None, got {self.runner!r}")

    def rows_for(self, kind: str):
        """The chunk rule of ``kind`` (:func:`rows_per_chunk`): V -> rows per chunk."""
        return rows_per_chunk(kind, chunk_rows=self.chunk_rows, max_memory=self.max_memory)

    def wants_chunks(self, target_probs, kind: str) -> bool:
        """:func:`wants_chunks` under these bounds."""
        return wants_chunks(target_probs, kind, chunk_rows=self.chunk_rows, max_memory=self.max_memory)


#: Where an analysis runs when nothing is said: in memory, or chunks of 256 MiB, here, no bar.
LOCAL = Execution()


def runner_for(source, kind, execution: Execution = LOCAL):
    """The runner of ``kind``'s chunk rule over ``source``: :class:`DaskRunner` for Dask arrays
    or ``runner="dask"``, else :class:`LocalRunner`."""
    rows_for = execution.rows_for(kind)
    on_dask = isinstance(source, ArrayRows) and is_dask(source.arrays[0])
    if execution.runner == "dask" or (execution.runner is None and on_dask):
        return DaskRunner(source, rows_for)
    return LocalRunner(source, rows_for, execution.progress, desc=kind)


def _block_result(kernel, start, q, p, rq, rp, args):
    """One block of a Dask array: the kernel's result as a one-item list."""
    return [with_file(kernel, RowChunk(start, q, p, rq, rp), *args)]


def _part_result(part, kernel, rows_for, args):
    """One shard, read and analysed chunk by chunk on the worker: the kernel's results."""
    return LocalRunner(part, rows_for).map(kernel, *args)


class DaskRunner:
    """Runs a per-chunk kernel as Dask tasks (one per block of rows, or one per shard) on Dask's
    current scheduler (a ``dask.distributed.Client`` made before the call runs them on its
    workers) and returns the results in row order (the interface of :class:`LocalRunner`).

    Parameters
    ----------
    source : RowSource
        :class:`ArrayRows` of Dask arrays (the vocabulary axis is made one chunk, p takes q's
        row chunks), or a source with parts (shards: the workers need the files, a shared file
        system on a multi-node cluster).
    rows_for : callable
        V -> rows per chunk within a shard (:func:`rows_per_chunk`).
    """

    def __init__(self, source: RowSource, rows_for):
        self.source, self.rows_for = source, rows_for
        self.n_rows = source.n_rows

    def _tasks(self, kernel, args):
        import dask

        src = self.source
        if isinstance(src, ArrayRows):
            import dask.array as da

            arrays = [None if a is None else da.asarray(a) for a in src._flat]
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

    def map(self, kernel, *args, each=None) -> list:
        """``[kernel(chunk, *args) for chunk in source]`` computed by Dask, in row order
        (``each`` is not used: the results come back together)."""
        import dask

        out = []
        for res in dask.compute(*self._tasks(kernel, args)):
            if isinstance(self.source, ArrayRows):
                out.extend(res)  # a block: [its result]
            else:
                for shard in res:  # a bag partition: [results of each shard]
                    out.extend(shard)
        return out


# --------------------------------------------------------------------------- row sources


@dataclass(frozen=True)
class RowChunk:
    """Consecutive rows ``start .. start + n - 1`` of a source.

    Attributes
    ----------
    start : int
        Index of the first row in the whole source.
    target_probs, draft_probs : ndarray or tensor, shape (n, V)
        q and p (not yet validated: the analysis validates them as it would whole arrays).
    raw_target_probs, raw_draft_probs : ndarray, tensor or None, shape (n, V)
        Raw (temperature-1) distributions where the source has them.
    where : str
        The file the rows come from (empty for arrays), for error messages.
    """

    start: int
    target_probs: object
    draft_probs: object
    raw_target_probs: object = None
    raw_draft_probs: object = None
    where: str = ""

    @property
    def n_rows(self) -> int:
        return int(self.target_probs.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])


class RowSource:
    """Rows of (q, p) read chunk by chunk (subclasses: :class:`ArrayRows`, :class:`_FileRows`,
    :class:`_ShardRows`).

    Attributes
    ----------
    n_rows : int
        Rows in the whole source (read from array shapes and file headers, not from the rows).
    """

    #: True where the rows are in memory already (the analysis may hand them over whole).
    in_memory = False

    @property
    def n_rows(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def widths(self) -> list[tuple[int, int]]:
        """``(rows, V)`` of each part (one for arrays and files, one per shard for a folder)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def chunks(self, rows_for_width) -> Iterator[RowChunk]:
        """Yield the rows in order, in chunks of ``rows_for_width(V)`` rows (V of the part)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def parts(self) -> list[RowSource]:
        """Independent parts (the shards of a folder; the source itself otherwise), for
        workers that each read their own."""
        return [self]

    def __len__(self) -> int:
        return self.n_rows


def _flat_rows(x):
    """``x`` (..., V) as (rows, V) without a copy where possible (numpy or torch)."""
    if hasattr(x, "reshape") and hasattr(x, "shape") and len(x.shape) >= 1:
        return x.reshape(-1, x.shape[-1])
    arr = np.asarray(x)
    return arr.reshape(-1, arr.shape[-1])


class ArrayRows(RowSource):
    """In-memory rows: arrays of shape (..., V), batch axes flattened in C order.

    Parameters
    ----------
    target_probs, draft_probs : array_like or tensor, shape (..., V)
    raw_target_probs, raw_draft_probs : optional, same shape
    """

    in_memory = True

    def __init__(self, target_probs, draft_probs, raw_target_probs=None, raw_draft_probs=None):
        arrays = [target_probs, draft_probs, raw_target_probs, raw_draft_probs]
        arrays = [None if a is None else (a if hasattr(a, "shape") else np.asarray(a)) for a in arrays]
        names = ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs")
        for name, a in zip(names, arrays):
            if a is not None and (len(a.shape) == 0 or a.shape[-1] == 0):
                raise ValueError(
                    f"{name}: expected an array of shape (..., V) with V >= 1, got shape {tuple(a.shape)}"
                )
        for name, a in zip(names[1:], arrays[1:]):
            if a is not None and tuple(a.shape) != tuple(arrays[0].shape):
                raise ValueError(
                    f"{name}: shape {tuple(a.shape)} does not match target_probs' "
                    f"shape {tuple(arrays[0].shape)}"
                )
        self.arrays = tuple(arrays)
        self.batch_shape = tuple(arrays[0].shape[:-1])
        self._flat = tuple(None if a is None else _flat_rows(a) for a in arrays)

    @property
    def n_rows(self) -> int:
        return int(self._flat[0].shape[0])

    def widths(self):
        return [(self.n_rows, int(self._flat[0].shape[-1]))]

    def chunks(self, rows_for_width):
        n, V = self.widths()[0]
        step = rows_for_width(V)
        for a in range(0, n, step):
            b = min(n, a + step)
            q, p, rq, rp = (None if x is None else x[a:b] for x in self._flat)
            yield RowChunk(a, q, p, rq, rp)


def as_rows(target_probs, draft_probs=None, raw_target_probs=None, raw_draft_probs=None) -> RowSource:
    """A :class:`RowSource` as is, or :class:`ArrayRows` of arrays (files and folders:
    :func:`cactus_theory.rows.as_row_source`)."""
    if isinstance(target_probs, RowSource):
        if draft_probs is not None or raw_target_probs is not None or raw_draft_probs is not None:
            raise ValueError(
                "draft_probs: give either a row source alone, or target_probs and draft_probs arrays"
            )
        return target_probs
    if isinstance(target_probs, str) or hasattr(target_probs, "__fspath__"):
        raise ValueError("target_probs: a path; read it with cactus_theory.rows.as_row_source(path)")
    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs array")
    if is_dask(target_probs):
        import dask.array as da

        arrays = (target_probs, draft_probs, raw_target_probs, raw_draft_probs)
        return ArrayRows(*(None if a is None else da.asarray(a) for a in arrays))
    return ArrayRows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
