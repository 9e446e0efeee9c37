"""Contiguous chunks of an elementwise or row-wise numpy computation on a few threads.

numpy's ufuncs and ``searchsorted`` release the GIL on numeric arrays, so a computation whose
every output entry depends on its own inputs only (the exact spike's root, a sorted search)
can run on contiguous chunks in threads and give the same floats as one call. Used for
arrays large enough that the threads' start-up (tens of microseconds) is negligible. A
row-wise computation (each output row a function of its own input rows) runs the same way on
blocks of rows (:func:`in_row_blocks`), whose temporaries then stay small.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

import numpy as np

__all__ = ["thread_count", "in_chunks", "in_row_blocks"]

_POOL: list = []
_LOCK = threading.Lock()


def thread_count() -> int:
    """The CPUs this process may run on, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def _pool(workers: int):
    """The shared pool, made again when it is too small or belongs to another process (a
    forked child inherits the pool object but none of its threads)."""
    with _LOCK:
        if not _POOL or _POOL[1] != os.getpid() or _POOL[0]._max_workers < workers:
            _POOL[:] = [concurrent.futures.ThreadPoolExecutor(workers, "cactus-chunks"), os.getpid()]
        return _POOL[0]


def in_chunks(fn, size: int, min_chunk: int, max_chunk: int | None = None) -> list:
    """``[fn(lo, hi) for each contiguous chunk of range(size)]``, in order.

    One chunk per thread (:func:`thread_count`, each at least ``min_chunk`` long), run on a
    shared pool; a single call ``[fn(0, size)]`` when one chunk is all there is. With
    ``max_chunk``, no chunk is longer than that: more chunks than threads (the pool's threads
    take them in turn; one thread runs them in order), so that a chunk's temporaries stay in
    a core's cache. ``fn`` must not itself call :func:`in_chunks` (the pool's threads would
    wait on one another), and it runs under numpy's default error state (``np.errstate`` is
    per thread: set it inside ``fn``)."""
    workers = min(thread_count(), size // max(1, min_chunk))
    chunks = max(1, workers)
    if max_chunk is not None and size > max_chunk:
        chunks = max(chunks, -(-size // max_chunk))
    if chunks <= 1:
        return [fn(0, size)]
    bounds = [size * i // chunks for i in range(chunks + 1)]
    if workers <= 1:
        return [fn(bounds[i], bounds[i + 1]) for i in range(chunks)]
    return list(_pool(workers).map(lambda i: fn(bounds[i], bounds[i + 1]), range(chunks)))


def in_row_blocks(fn, arrays, block_elements: int):
    """``fn(*arrays)`` for a row-wise ``fn``, computed on blocks of rows on threads.

    ``arrays``: numpy arrays of one shape (..., V), batch axes leading; ``fn`` maps arrays of
    shape (n, V) to one array of shape (n, V) and computes each output row from the same
    rows of its inputs only, so that the blocks give the floats of one call. Blocks hold at
    most ``block_elements`` entries (at least one row): a whole batch's temporaries of a long
    vectorized formula are arrays as large as the batch, read back from memory, and allocated
    anew (and page-faulted in) for every operation, where a block's stay in a core's cache.
    A batch of one block is one call. Each block runs under the caller's numpy error state
    (:func:`in_chunks` runs its chunks under the default state).
    """
    shape = arrays[0].shape
    V = shape[-1]
    flat = [np.reshape(a, (-1, V)) for a in arrays]
    rows = flat[0].shape[0]
    per_block = max(1, block_elements // max(1, V))
    if rows <= per_block:
        return np.reshape(fn(*flat), shape)
    out = np.empty((rows, V), dtype=np.result_type(*arrays))
    errors = np.geterr()

    def block(lo, hi):
        with np.errstate(**errors):
            out[lo:hi] = fn(*(a[lo:hi] for a in flat))

    in_chunks(block, rows, per_block, per_block)
    return out.reshape(shape)
