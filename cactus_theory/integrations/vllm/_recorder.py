r"""Recording the rows the engine verified, as shards of compact dumps, while it serves.

Each verification step hands the recorder, for every non-greedy drafted row, the processed
verifier row q (the engine's processed logits, before the rule's substitution), the drafter's
row p, the raw rows (:mod:`._rows`), the drafted token, and the round's outcome (how many of
the request's drafts were accepted). Rows are buffered on the host; every ``rows_per_shard``
rows become one shard ``shard-<pid>-<n>.npz`` in the compact dump format
(:mod:`cactus_theory.logits._format`, ``cactus_theory.dump/1``), written atomically (temporary
file in the folder, fsync, rename: :func:`cactus_theory.logits._format.write_arrays`), so a
process killed at any point (SIGKILL included) leaves whole shards and at most one ``.tmp``
file, which the shard loader ignores and the next recorder in that folder removes. The
folder then loads as a row source (:class:`cactus_theory.rows._ShardRows`) for ``analyze`` and
``audit``.

Per row (position) the shard holds q, p, raw q and raw p on the row's columns (the processed
supports and each raw row's ``top_k_raw`` largest tokens, plus a tail column:
:func:`~cactus_theory.logits._format.compact_columns`; vLLM's drafter does not truncate, so p's
support, hence the row, is the whole vocabulary), ``token_ids`` = the drafted token n, and the
extras ``x_accepted`` (1 accepted, 0 rejected, -1 not reached: after the round's first
rejection), ``x_num_accepted`` (the round's accepted drafts), ``x_step`` (the recorder's step
counter), ``x_slot`` (the request's index in the step's batch) and ``x_position`` (the draft's
index in its round). One trajectory per (step, request).

Disk use is bounded: a shard that would take the folder's shards past ``max_bytes`` is not
written, and recording stops (logged once).

Symbols: q verifier, p drafter, n drafted token.
"""

from __future__ import annotations

import io
import json
import logging
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from ..._io import atomic_write_bytes
from ...logits.internal import FORMAT, checksum, compact_columns, pack_compact
from ._config import RECORD_KEY

__all__ = ["Recorder", "RECORD_KEY", "recorder_from_config", "flush_all"]

logger = logging.getLogger("vllm.cactus_theory")

_LIVE: weakref.WeakSet = weakref.WeakSet()  # the recorders of this process (flush_all)


class Recorder:
    """Buffer verified rows and write them as atomic shards (module docstring).

    Parameters
    ----------
    folder : str or Path
        Where the shards go (created if needed).
    max_bytes : int
        Bound on the bytes of this folder's shards (> 0).
    rows_per_shard : int
        Rows per shard (>= 1).
    top_k_raw : int
        Raw columns kept per model and row (:func:`~cactus_theory.logits._format.compact_columns`).
    meta : dict, optional
        Extra metadata stored in every shard (e.g. the verifier's and drafter's names, the rule).
    """

    def __init__(self, folder, *, max_bytes: int, rows_per_shard: int = 256, top_k_raw: int = 64, meta=None):
        if not (isinstance(max_bytes, int) and max_bytes > 0):
            raise ValueError(f"max_bytes: must be a positive integer, got {max_bytes!r}")
        if not (isinstance(rows_per_shard, int) and rows_per_shard >= 1):
            raise ValueError(f"rows_per_shard: must be an integer >= 1, got {rows_per_shard!r}")
        if not (isinstance(top_k_raw, int) and top_k_raw >= 1):
            raise ValueError(f"top_k_raw: must be an integer >= 1, got {top_k_raw!r}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in self.folder.glob(".shard-*.tmp"):  # left by a process killed mid-write
            stale.unlink(missing_ok=True)
        self.max_bytes = max_bytes
        self.rows_per_shard = rows_per_shard
        self.top_k_raw = top_k_raw
        self.meta = dict(meta or {})
        self._buffer_lock = threading.Lock()
        self._buffered: list = []
        self._trajs: list = []  # (length, info) of each (step, request)
        self._step = 0
        self.stopped = False
        existing = sorted(self.folder.glob(f"shard-{os.getpid()}-*.npz"))
        self._next = 1 + max((int(f.stem.split("-")[2]) for f in existing), default=-1)
        self.shards_written = 0

    @classmethod
    def from_config(cls, settings, meta=None):
        """A recorder from the configuration's ``record`` mapping (``folder``, ``max_bytes``, ...)."""
        if not isinstance(settings, dict) or "folder" not in settings or "max_bytes" not in settings:
            raise ValueError(f"{RECORD_KEY}: expected a mapping with 'folder' and 'max_bytes'")
        known = {"folder", "max_bytes", "rows_per_shard", "top_k_raw"}
        extra = set(settings) - known
        if extra:
            raise ValueError(f"{RECORD_KEY}: unknown settings {sorted(extra)} (known: {sorted(known)})")
        return cls(**settings, meta=meta)

    def _used_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.folder.glob("shard-*.npz"))

    def record(self, q, p, raw_q, raw_p, draft_token_ids, num_draft_tokens, output_token_ids, rows):
        """Buffer one step's rows (torch or numpy; moved to the host here).

        Parameters
        ----------
        q, p, raw_q, raw_p : array, shape (num_rows, V)
            Processed verifier and drafter rows, raw rows (probabilities).
        draft_token_ids : array of int, shape (num_rows,)
        num_draft_tokens : sequence of int, one per request (flat rows request after request)
        output_token_ids : array of int, shape (num_requests, max_spec_len + 1)
            The step's output: accepted drafts, then the recovered or bonus token, -1 padding.
        rows : array of bool, shape (num_rows,)
            The rows to record (non-greedy rows).
        """
        if self.stopped:
            return

        def host(x):
            return (
                x.detach().to("cpu").double().numpy() if hasattr(x, "detach") else np.asarray(x, np.float64)
            )

        def host_int(x):
            return x.detach().to("cpu").numpy() if hasattr(x, "detach") else np.asarray(x)

        q, p, raw_q, raw_p = host(q), host(p), host(raw_q), host(raw_p)
        ids = host_int(draft_token_ids).astype(np.int64)
        out = host_int(output_token_ids)
        keep = host_int(rows).astype(bool)
        with self._buffer_lock:
            step = self._step
            self._step += 1
            start = 0
            for slot, k in enumerate(list(num_draft_tokens)):
                k = int(k)
                # the output holds the accepted drafts, then one recovered or bonus token
                n_acc = max(int(np.sum(out[slot] != -1)) - 1, 0)
                taken = 0
                for j in range(k):
                    r = start + j
                    if not keep[r] or ids[r] < 0:
                        continue
                    qi = np.flatnonzero(q[r] > 0)
                    pi = np.flatnonzero(p[r] > 0)
                    cols = compact_columns(qi, q[r][qi], pi, p[r][pi], raw_q[r], raw_p[r], self.top_k_raw)
                    accepted = 1 if j < n_acc else (0 if j == n_acc else -1)
                    self._buffered.append((cols, int(ids[r]), accepted, n_acc, step, slot, j))
                    taken += 1
                if taken:
                    self._trajs.append((taken, {"id": f"step{step}-slot{slot}", "category": "engine"}))
                start += k
            if len(self._buffered) >= self.rows_per_shard:
                self._flush_locked()

    def flush(self):
        """Write the buffered rows as one shard (if any)."""
        with self._buffer_lock:
            self._flush_locked()

    def _flush_locked(self):
        if not self._buffered or self.stopped:
            return
        rows, trajs = self._buffered, self._trajs
        self._buffered, self._trajs = [], []
        arrays = pack_compact(
            [r[0][0] for r in rows],
            [r[0][1] for r in rows],
            [r[0][2] for r in rows],
            [r[0][3] for r in rows],
            [r[0][4] for r in rows],
            [len(r[0][0]) for r in rows],
            [r[1] for r in rows],
            [t[0] for t in trajs],
            [],
            [0] * len(trajs),
        )
        for name, col in (("accepted", 2), ("num_accepted", 3), ("step", 4), ("slot", 5), ("position", 6)):
            arrays[f"x_{name}"] = np.asarray([r[col] for r in rows], np.int64)
        meta = {
            "format": FORMAT,
            "kind": "engine",
            "engine": "vllm",
            "trajectories": [t[1] for t in trajs],
            "top_k_raw": self.top_k_raw,
            **self.meta,
        }
        meta["checksum"] = checksum(arrays)
        payload = dict(arrays)
        payload["__meta__"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez_compressed(buf, **payload)  # as write_arrays does, sized before it is written
        data = buf.getvalue()
        path = self.folder / f"shard-{os.getpid()}-{self._next:06d}.npz"
        if self._used_bytes() + len(data) > self.max_bytes:
            self.stopped = True
            logger.warning(
                "cactus_theory: recording stopped: %s would exceed max_bytes = %d", path, self.max_bytes
            )
            return
        atomic_write_bytes(path, data)
        self._next += 1
        self.shards_written += 1


def recorder_from_config(settings, meta=None):
    """The recorder of a configuration's ``record`` settings, or None without them."""
    if not settings:
        return None
    rec = Recorder.from_config(dict(settings), meta=meta)
    _LIVE.add(rec)
    import atexit

    atexit.register(rec.flush)
    return rec


def flush_all() -> int:
    """Flush every recorder of this process (an engine running in it); the shards written so far."""
    for rec in list(_LIVE):
        rec.flush()
    return sum(rec.shards_written for rec in list(_LIVE))
