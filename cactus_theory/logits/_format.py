"""On-disk format of real next-token distributions (``.npz``, version ``cactus_theory.dump/1``).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). *Processed* means after
the sampling transforms recorded in the metadata (temperature, top-k, top-p), the distributions
a speculative sampler compares; *raw* means the temperature-1 softmax of the logits.

Compact file (one verifier/drafter pair)
----------------------------------------
A zip archive written by :func:`numpy.savez_compressed` holding, for ``N`` positions grouped into
trajectories (one per prompt), a ragged column set per position (CSR layout):

``__meta__``
    uint8 JSON: format, models, tokenizer, transforms, column rule, prompts (id, category per
    trajectory), seed, library versions, and ``checksum`` (sha256 of every other array's name,
    dtype, shape and bytes, in name order).
``traj_offsets`` int64 [n_traj + 1]
    Positions ``traj_offsets[i]:traj_offsets[i+1]`` belong to trajectory ``i``.
``row_offsets`` int64 [N + 1]
    Entries ``row_offsets[t]:row_offsets[t+1]`` of the flat arrays belong to position ``t``.
``columns`` int32 [nnz]
    Vocabulary ids. The column set of a position is the union of both processed supports and the
    ``top_k_raw`` (default 64) most likely tokens of each model's raw distribution, plus one
    *tail* column with id ``TAIL_ID = -2`` holding all the remaining raw mass (processed mass 0).
``target_probs``, ``draft_probs`` float64 [nnz]
    Processed q and p on the columns: exact (the processed supports are always inside the
    columns), each row sums to 1 to float64 rounding.
``raw_target_probs``, ``raw_draft_probs`` float32 [nnz]
    Raw q and p on the columns, the tail column holding ``1 - sum`` of the others (computed in
    float64 before rounding).
``token_ids`` int32 [N]
    The token emitted at each position (sampled from processed q: the trajectories follow the
    verifier's own decoding distribution).
``prompt_offsets`` int64 [n_traj + 1], ``prompt_token_ids`` int32
    The tokenized prompt of each trajectory.
``x_<name>`` [N, ...]
    Optional per-position extras (e.g. the decoding loop's round and acceptance records).

Errors this representation introduces (stated, and tested):

* Processed distributions: none beyond float64 rounding.
* Raw distributions: each stored entry is rounded to float32 (relative error <= 2^-24 = 6e-8);
  the loader renormalizes rows in float64. Hence ``max_x`` of raw p and of raw q is exact to that
  rounding whenever the maximizer is in the columns (always: it is in the top-k of its own
  model). A divergence computed on the bucketed raw distributions (columns + one tail bucket)
  is a **lower bound** of the full-vocabulary divergence, by the data-processing inequality
  (bucketing is a deterministic map applied to both distributions). Set membership of a column
  (``x in supp``, ``x in top-k``) is exact for the stored columns.

Padding: the loader pads each trajectory to its widest position with columns ``-1`` where all
four distributions are 0; every analysis is invariant to such columns.

Full-vocabulary file (``kind = "full_vocab"``)
----------------------------------------------
``logp16_q``, ``logp16_p`` float16 [T, V]: raw log-probabilities ``log softmax(z)`` rounded to
float16; ``lse_q``, ``lse_p`` float64 [T]: the exact float64 log-normalizer ``logsumexp(z)`` of the
float32 logits (so ``z ~= logp16 + lse``). Each log-probability carries an absolute error
``<= 2^-11 |log p_x|`` (float16 has an 11-bit significand), i.e. a relative error on ``p_x`` of at
most ``2^-11 |log p_x|`` (about 5e-4 per nat of surprisal); the loader exponentiates in float64
and renormalizes. The total-variation error is therefore at most about ``2^-11 E_p[|log p|]``.

End of sequence: ``meta["tokenizer"]["eos_token_id"]`` is the tokenizer's end-of-sequence id
(a vocabulary id, matched against ``columns``); recordings made before it was written resolve it
from the tokenizer's name (:data:`KNOWN_EOS_IDS`, :func:`eos_token_id`). A trajectory that stops
before ``new_tokens`` ends with that token. At a position whose columns do not hold the id, its
processed probability is exactly 0 (the processed supports are inside the columns) and its raw
probability is inside the tail bucket.

Integrity: the archive's zip CRCs and the metadata checksum are verified on load; any failure
(truncation, corruption, missing array, inconsistent offsets) raises :class:`DumpFormatError`, a
``ValueError`` naming the file and the problem. Writes are atomic (temporary file in the target
folder, fsync, ``os.replace``), so an interrupted write leaves the previous file or nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from .._io import atomic_write_bytes  # noqa: F401  (re-exported: part of this module's API)

FORMAT = "cactus_theory.dump/1"
FULL_VOCAB_FORMAT = "cactus_theory.full_vocab/1"
TAIL_ID = -2
PAD_ID = -1

COMPACT_REQUIRED = {
    "traj_offsets": np.int64,
    "row_offsets": np.int64,
    "columns": np.int32,
    "target_probs": np.float64,
    "draft_probs": np.float64,
    "raw_target_probs": np.float32,
    "raw_draft_probs": np.float32,
    "token_ids": np.int32,
    "prompt_offsets": np.int64,
    "prompt_token_ids": np.int32,
}
#: End-of-sequence ids of the tokenizers of the shipped recordings (SmolLM2's ``<|im_end|>``),
#: for dumps whose metadata predates ``tokenizer.eos_token_id``.
KNOWN_EOS_IDS = {"SmolLM2-135M-Instruct": 2}
FULL_REQUIRED = {"logp16_q": np.float16, "logp16_p": np.float16, "lse_q": np.float64, "lse_p": np.float64}


def eos_token_id(meta: dict) -> int | None:
    """The end-of-sequence vocabulary id of a dump: ``meta["tokenizer"]["eos_token_id"]``, else
    :data:`KNOWN_EOS_IDS` by the tokenizer's name, else None (unknown)."""
    tok = meta.get("tokenizer") or {}
    if tok.get("eos_token_id") is not None:
        return int(tok["eos_token_id"])
    known = KNOWN_EOS_IDS.get(tok.get("name") or meta.get("verifier"))
    return None if known is None else int(known)


class DumpFormatError(ValueError):
    """A dump file is missing, truncated, corrupted or inconsistent (message names the file)."""


def checksum(arrays: dict) -> str:
    """sha256 over ``name, dtype, shape, bytes`` of every array, in name order (``__meta__`` excluded)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        if name == "__meta__":
            continue
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype.str).encode())
        h.update(repr(tuple(a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_arrays(path, arrays: dict, meta: dict) -> Path:
    """Write arrays plus JSON metadata (with the checksum added) atomically as a compressed npz."""
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    meta = dict(meta)
    meta["checksum"] = checksum(arrays)
    buf = io.BytesIO()
    payload = dict(arrays)
    payload["__meta__"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(buf, **payload)
    return atomic_write_bytes(path, buf.getvalue())


def read_arrays(path, required: dict | None = None) -> tuple[dict, dict]:
    """Read and verify a file written by :func:`write_arrays`.

    Returns
    -------
    (arrays, meta)

    Raises
    ------
    DumpFormatError
        Missing file, bad zip (truncated or corrupted), CRC or checksum mismatch, missing or
        mistyped arrays.
    """
    path = Path(path)
    if not path.exists():
        raise DumpFormatError(f"{path}: no such dump file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            bad = zf.testzip()
            if bad is not None:
                raise DumpFormatError(f"{path}: corrupted (CRC mismatch in member {bad})")
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except DumpFormatError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zlib_error()) as exc:
        raise DumpFormatError(
            f"{path}: truncated or corrupted dump file ({type(exc).__name__}: {exc})"
        ) from exc
    if "__meta__" not in arrays:
        raise DumpFormatError(f"{path}: no __meta__ entry (not a cactus_theory dump)")
    try:
        meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DumpFormatError(f"{path}: unreadable metadata ({exc})") from exc
    for name, dt in (required or {}).items():
        if name not in arrays:
            raise DumpFormatError(f"{path}: missing array {name!r}")
        if arrays[name].dtype != np.dtype(dt):
            raise DumpFormatError(
                f"{path}: array {name!r} has dtype {arrays[name].dtype}, expected {np.dtype(dt)}"
            )
    want = meta.get("checksum")
    got = checksum(arrays)
    if want != got:
        raise DumpFormatError(
            f"{path}: checksum mismatch (metadata {want}, data {got}): the file was modified or corrupted"
        )
    return arrays, meta


def zlib_error():
    import zlib

    return zlib.error


def validate_compact(path, arrays: dict, meta: dict) -> None:
    """Structural checks of a compact dump; raises :class:`DumpFormatError`."""
    if meta.get("format") != FORMAT:
        raise DumpFormatError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    to, ro = arrays["traj_offsets"], arrays["row_offsets"]
    nnz, N = len(arrays["columns"]), len(arrays["token_ids"])
    if len(ro) != N + 1 or ro[0] != 0 or ro[-1] != nnz or np.any(np.diff(ro) < 1):
        raise DumpFormatError(f"{path}: row_offsets inconsistent with {N} positions / {nnz} entries")
    if to[0] != 0 or to[-1] != N or np.any(np.diff(to) < 0):
        raise DumpFormatError(f"{path}: traj_offsets inconsistent with {N} positions")
    for k in ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs"):
        if len(arrays[k]) != nnz:
            raise DumpFormatError(f"{path}: {k} has {len(arrays[k])} entries, expected {nnz}")
    po = arrays["prompt_offsets"]
    if len(po) != len(to) or po[-1] != len(arrays["prompt_token_ids"]):
        raise DumpFormatError(f"{path}: prompt_offsets inconsistent")
    if len(meta.get("trajectories", [])) != len(to) - 1:
        raise DumpFormatError(
            f"{path}: metadata lists {len(meta.get('trajectories', []))} trajectories, arrays {len(to) - 1}"
        )
    validate_compact_values(path, arrays)


def validate_compact_values(path, arrays: dict) -> None:
    """Value checks of a compact dump (a valid checksum says nothing about the values).

    Every row of the four distributions must be finite, non-negative and sum to 1 within
    :func:`cactus_theory.conventions.normalization_tolerance` of its stored dtype; column ids
    must be token ids (>= 0) or ``TAIL_ID``; token ids must be >= 0. Raises
    :class:`DumpFormatError` naming the file, the array and the first bad position.
    """
    from ..conventions import normalization_tolerance

    ro = arrays["row_offsets"]
    for k in ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs"):
        a = arrays[k]
        if not np.all(np.isfinite(a)):
            raise DumpFormatError(f"{path}: {k} holds NaN or infinite values")
        if np.any(a < 0):
            raise DumpFormatError(f"{path}: {k} holds negative probabilities")
        if len(ro) > 1:
            sums = np.add.reduceat(a.astype(np.float64), ro[:-1])
            bad = np.flatnonzero(np.abs(sums - 1.0) > normalization_tolerance(a.dtype))
            if len(bad):
                raise DumpFormatError(f"{path}: {k} row {bad[0]} sums to {sums[bad[0]]:.9g}, not 1")
    cols = arrays["columns"]
    if np.any((cols < 0) & (cols != TAIL_ID)):
        raise DumpFormatError(f"{path}: columns hold negative token ids other than TAIL_ID")
    for k in ("token_ids", "prompt_token_ids"):
        if np.any(arrays[k] < 0):
            raise DumpFormatError(f"{path}: {k} holds negative token ids")


def pack_compact(
    columns,
    target_probs,
    draft_probs,
    raw_target_probs,
    raw_draft_probs,
    widths,
    token_ids,
    traj_len,
    prompt_token_ids,
    prompt_len,
) -> dict:
    """The arrays of a compact dump from per-position pieces (the layout in one place).

    Parameters
    ----------
    columns, target_probs, draft_probs, raw_target_probs, raw_draft_probs : sequence of arrays
        Per position (or already concatenated): the W_t column ids, processed q and p, raw q and
        p on those columns.
    widths : sequence of int
        W_t per position.
    token_ids : sequence of int
        The token at each position.
    traj_len, prompt_len : sequence of int
        Positions and prompt tokens per trajectory.
    prompt_token_ids : sequence of int
        All prompt tokens, trajectory after trajectory.

    Returns
    -------
    dict
        ``columns`` int32, ``target_probs``/``draft_probs`` float64, raw float32, ``token_ids``
        and ``prompt_token_ids`` int32, and the int64 ``row_offsets``, ``traj_offsets`` and
        ``prompt_offsets`` (cumulative counts starting at 0), as :func:`validate_compact` reads them.
    """

    def cat(xs, dtype):
        xs = [np.asarray(x) for x in xs] if isinstance(xs, (list, tuple)) else [np.asarray(xs)]
        return np.concatenate(xs).astype(dtype) if xs else np.zeros(0, dtype)

    def offsets(counts):
        return np.concatenate([[0], np.cumsum(np.asarray(counts, np.int64))]).astype(np.int64)

    return {
        "columns": cat(columns, np.int32),
        "target_probs": cat(target_probs, np.float64),
        "draft_probs": cat(draft_probs, np.float64),
        "raw_target_probs": cat(raw_target_probs, np.float32),
        "raw_draft_probs": cat(raw_draft_probs, np.float32),
        "token_ids": np.asarray(token_ids, np.int32),
        "prompt_token_ids": np.asarray(prompt_token_ids, np.int32),
        "row_offsets": offsets(widths),
        "traj_offsets": offsets(traj_len),
        "prompt_offsets": offsets(prompt_len),
    }


def split_positions(positions) -> tuple:
    """``(columns, target_probs, draft_probs, raw_target_probs, raw_draft_probs, widths)`` lists
    of per-position :func:`compact_columns` results (the first pieces :func:`pack_compact` takes)."""
    cols, q, p, rq, rp = (list(x) for x in zip(*positions)) if positions else ([], [], [], [], [])
    return cols, q, p, rq, rp, [len(c) for c in cols]


def compact_columns(q_ids, q_pr, p_ids, p_pr, raw_q, raw_p, top_k_raw: int = 64):
    """Column set and values of one position (numpy, float64 raw inputs on the full vocabulary).

    Parameters
    ----------
    q_ids, q_pr, p_ids, p_pr : arrays
        Sparse processed q and p (ids, probabilities; zeros allowed).
    raw_q, raw_p : float64 [V]
        Raw distributions on the full vocabulary.
    top_k_raw : int
        How many of each raw distribution's top tokens to keep as columns.

    Returns
    -------
    cols int32 [W], q, p float64 [W], rq, rp float64 [W] (last column = tail, id ``TAIL_ID``).
    """
    k = min(top_k_raw, len(raw_q))
    tq = np.argpartition(-raw_q, k - 1)[:k] if k < len(raw_q) else np.arange(len(raw_q))
    tp = np.argpartition(-raw_p, k - 1)[:k] if k < len(raw_p) else np.arange(len(raw_p))
    cols = np.union1d(np.union1d(tq, tp), np.union1d(q_ids[q_pr > 0], p_ids[p_pr > 0])).astype(np.int64)
    q = np.zeros(len(cols))
    p = np.zeros(len(cols))
    q[np.searchsorted(cols, q_ids[q_pr > 0])] = q_pr[q_pr > 0]
    p[np.searchsorted(cols, p_ids[p_pr > 0])] = p_pr[p_pr > 0]
    rq, rp = raw_q[cols], raw_p[cols]
    tail_q, tail_p = max(0.0, 1.0 - rq.sum()), max(0.0, 1.0 - rp.sum())
    return (
        np.append(cols, TAIL_ID).astype(np.int32),
        np.append(q, 0.0),
        np.append(p, 0.0),
        np.append(rq, tail_q),
        np.append(rp, tail_p),
    )


__all__ = [
    "DumpFormatError",
    "FORMAT",
    "FULL_VOCAB_FORMAT",
    "KNOWN_EOS_IDS",
    "PAD_ID",
    "TAIL_ID",
    "atomic_write_bytes",
    "checksum",
    "compact_columns",
    "eos_token_id",
    "pack_compact",
    "read_arrays",
    "validate_compact",
    "validate_compact_values",
    "write_arrays",
]
