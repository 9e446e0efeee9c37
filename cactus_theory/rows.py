r"""Rows of (q, p) read chunk by chunk: in-memory arrays, a file, or a folder of shards.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), V vocabulary size (last
axis), N rows. A :class:`RowSource` yields :class:`RowChunk` blocks of consecutive rows in a
fixed order; every row-wise analysis (:func:`cactus_theory.analysis.analyze`,
:func:`cactus_theory.api.analyze_rules`, ...) takes them, chunk by chunk in this process or
shard by shard as Dask tasks (``runner="dask"``), so a corpus larger than memory is analysed
with the memory of one chunk.

Sources (:func:`as_row_source`):

* arrays ``(target_probs, draft_probs)`` of shape ``(..., V)`` (numpy or torch; the batch axes
  are flattened to rows), with optional raw (temperature-1) arrays;
* a ``.npy`` file holding ``(2, N, V)`` (``[0]`` q, ``[1]`` p): memory-mapped, so only the rows
  of the current chunk are read;
* a ``.npz`` file with arrays ``target_probs`` and ``draft_probs`` (or ``q`` and ``p``);
* a compact dump (:mod:`cactus_theory.logits._format`, ``cactus_theory.dump/1``): processed and
  raw rows, each shard padded to its widest position (padding columns are zero in all four
  distributions, and every analysis is invariant to them);
* a full-vocabulary dump (``cactus_theory.full_vocab/1``): raw rows, exponentiated in float64
  and renormalized chunk by chunk (the error of the float16 storage is stated in
  :mod:`cactus_theory.logits._format`);
* a folder of such files (shards), taken in name order. Shards are pieces of one recording:
  a folder whose dumps come from different recordings (another verifier, drafter or sampling
  transform, as ``cactus-theory dump`` writes one file per drafter) is refused with the list
  of its recordings (ValueError naming ``source``); analyse each file apart instead
  (``cactus-theory analyze --per-file``, :func:`recordings`).

Laziness: a folder holds one shard in memory at a time. A ``.npy`` shard is read row block by
row block (memory map); a compressed ``.npz`` or dump shard is read whole when its turn comes
(its checksum covers every array), and its float64 rows are made chunk by chunk. Rows are
validated chunk by chunk as :func:`cactus_theory._validation.as_prob_pair` does (finite,
non-negative, rows summing to 1 within the normalization tolerance), with the same ValueError
naming the argument, prefixed by the file.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .analysis.internal import ArrayRows, RowChunk, RowSource

__all__ = [
    "RowSource",
    "as_row_source",
    "recordings",
]

#: File types a folder of shards may hold (others are ignored).
_SHARD_SUFFIXES = (".npy", ".npz")
_KEYS = (("target_probs", "draft_probs"), ("q", "p"))
#: The metadata of a dump that names its recording: files that differ in any of them are
#: different recordings (different q or p), never shards of one.
_RECORDING_KEYS = ("verifier", "drafter", "drafter_spec", "transforms", "kind")


def _dump_meta(path: Path) -> dict | None:
    """A dump's metadata (its small ``__meta__`` member only), or None for plain arrays."""
    import json

    if path.suffix.lower() != ".npz":
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if "__meta__" not in z.files:
                return None
            return json.loads(z["__meta__"].tobytes().decode())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npz archive ({exc})") from None


def _shard_files(folder) -> list[Path]:
    """The ``.npy``/``.npz`` files of a folder, in name order (ValueError naming ``source``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"source: {str(folder)!r} is not a folder")
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in _SHARD_SUFFIXES)
    if not files:
        raise ValueError(f"source: {folder}: no .npy or .npz shards in this folder")
    return files


def recordings(files) -> dict:
    """Group files by recording: ``{description: [files]}``, in the files' order.

    A dump's recording is its :data:`_RECORDING_KEYS` metadata; the description names the keys
    in which the groups differ (e.g. ``"drafter SmolLM2-135M-Instruct/distilled"``). Files
    without metadata (plain arrays) are one group, ``"(q, p) arrays"``.
    """
    metas = {}
    for f in map(Path, files):
        meta = _dump_meta(f)
        key = None if meta is None else tuple(repr(meta.get(k)) for k in _RECORDING_KEYS)
        metas.setdefault(key, (meta, []))[1].append(f)
    dumps = [m for m, _ in metas.values() if m is not None]
    varying = [k for k in _RECORDING_KEYS if len({repr(m.get(k)) for m in dumps}) > 1]
    out = {}
    for meta, fs in metas.values():
        if meta is None:
            text = "(q, p) arrays"
        else:
            text = ", ".join(f"{k} {meta.get(k)}" for k in varying) or "one recording"
        out[text] = fs
    return out


def _npy_rows(path: Path):
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
    if arr.ndim == 2 and arr.shape[0] == 2:
        arr = arr[:, None, :]
    if arr.ndim != 3 or arr.shape[0] != 2:
        raise ValueError(
            f"{path}: expected an array of shape (2, V) or (2, N, V) holding q then p; got shape {arr.shape}"
        )
    return arr


def _npz_kind(path: Path) -> str:
    """``"dump"``, ``"full_vocab"`` or ``"arrays"`` from the archive's member names."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = {n.removesuffix(".npy") for n in zf.namelist()}
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path}: not a readable .npz archive ({exc})") from None
    if "__meta__" in names:
        return "full_vocab" if "logp16_q" in names else "dump"
    return "arrays"


def _npz_rows_count(path: Path, kind: str) -> tuple[int, int | None]:
    """(rows, V or None) from one small member (no float rows read)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if kind == "dump":
                return int(z["token_ids"].shape[0]), None
            if kind == "full_vocab":
                return int(z["lse_q"].shape[0]), None
            for kq, _ in _KEYS:
                if kq in z.files:
                    a = z[kq]
                    return (1 if a.ndim == 1 else int(np.prod(a.shape[:-1]))), int(a.shape[-1])
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not a readable .npz archive ({exc})") from None
    keys = ", ".join(sorted(np.load(path, allow_pickle=False).files)) or "none"
    raise ValueError(
        f"{path}: expected arrays 'target_probs' and 'draft_probs' (or 'q' and 'p'); found {keys}"
    )


class _FileRows(RowSource):
    """The rows of one file (``.npy``, ``.npz`` arrays, compact or full-vocabulary dump).

    Parameters
    ----------
    path : str or Path
    """

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"source: {str(path)!r} is not an existing file")
        suffix = self.path.suffix.lower()
        if suffix not in _SHARD_SUFFIXES:
            raise ValueError(f"{self.path}: unknown file type {suffix or '(none)'!r}; expected .npy or .npz")
        self.kind = "npy" if suffix == ".npy" else _npz_kind(self.path)
        if self.kind == "npy":
            arr = _npy_rows(self.path)
            self._n, self._V = int(arr.shape[1]), int(arr.shape[2])
        else:
            self._n, self._V = _npz_rows_count(self.path, self.kind)

    def __repr__(self) -> str:
        return f"_FileRows({str(self.path)!r}, kind={self.kind!r}, n_rows={self._n})"

    @property
    def n_rows(self) -> int:
        return self._n

    def widths(self):
        if self._V is None:
            self._V = self._width()
        return [(self._n, self._V)]

    def _width(self) -> int:
        with np.load(self.path, allow_pickle=False) as z:
            if self.kind == "full_vocab":
                return int(z["logp16_q"].shape[-1])
            ro = z["row_offsets"]
            return int(np.diff(ro).max()) if ro.size > 1 else 1

    def chunks(self, rows_for_width):
        where = str(self.path)
        if self.kind == "npy":
            arr = _npy_rows(self.path)
            n, V = arr.shape[1], arr.shape[2]
            step = rows_for_width(V)
            for a in range(0, n, step):
                b = min(n, a + step)
                yield RowChunk(a, np.array(arr[0, a:b]), np.array(arr[1, a:b]), where=where)
            return
        if self.kind == "arrays":
            with np.load(self.path, allow_pickle=False) as z:
                pair = next(((kq, kp) for kq, kp in _KEYS if kq in z.files and kp in z.files), None)
                if pair is None:
                    raise ValueError(
                        f"{where}: expected arrays 'target_probs' and 'draft_probs' "
                        f"(or 'q' and 'p'); found {', '.join(sorted(z.files))}"
                    )
                q, p = z[pair[0]], z[pair[1]]
            if q.shape != p.shape:
                raise ValueError(
                    f"{where}: draft_probs: shape {p.shape} does not match target_probs' shape {q.shape}"
                )
            yield from (
                RowChunk(c.start, c.target_probs, c.draft_probs, where=where)
                for c in ArrayRows(q, p).chunks(rows_for_width)
            )
            return
        if self.kind == "full_vocab":
            from .logits import DumpFormatError
            from .logits.internal import FULL_REQUIRED, FULL_VOCAB_FORMAT, _renorm, read_arrays

            arrays, meta = read_arrays(self.path, FULL_REQUIRED)
            if meta.get("format") != FULL_VOCAB_FORMAT:
                raise DumpFormatError(
                    f"{where}: format {meta.get('format')!r}, expected {FULL_VOCAB_FORMAT!r}"
                )
            lq, lp = arrays["logp16_q"], arrays["logp16_p"]
            if lq.shape != lp.shape:
                raise DumpFormatError(f"{where}: logp16_q and logp16_p differ in shape")
            n, V = lq.shape
            step = rows_for_width(V)
            for a in range(0, n, step):
                b = min(n, a + step)
                # the loader's own conversion (load_full_vocab), on these rows only
                q = _renorm(np.exp(lq[a:b].astype(np.float64)))
                p = _renorm(np.exp(lp[a:b].astype(np.float64)))
                yield RowChunk(a, q, p, q, p, where=where)
            return
        from .logits import load_dump

        dump = load_dump(self.path)
        n = dump.n_positions
        W = self.widths()[0][1]
        step = rows_for_width(W)
        for a in range(0, n, step):
            b = min(n, a + step)
            _, (q, p, rq, rp) = dump._block(a, b, width=W)
            yield RowChunk(a, q, p, rq, rp, where=where)


class _ShardRows(RowSource):
    """A folder of shards (``.npy``/``.npz`` files of :class:`_FileRows`), in name order.

    Parameters
    ----------
    folder : str or Path
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        files = _shard_files(self.folder)
        groups = recordings(files)
        if len(groups) > 1:
            listed = "; ".join(f"{', '.join(f.name for f in fs)}: {what}" for what, fs in groups.items())
            raise ValueError(
                f"source: {self.folder} holds {len(groups)} different recordings, not shards of one "
                f"({listed}); give one file, or analyse each file apart (--per-file)"
            )
        self.shards = [_FileRows(f) for f in files]

    def __repr__(self) -> str:
        return f"_ShardRows({str(self.folder)!r}, {len(self.shards)} shards, n_rows={self.n_rows})"

    @property
    def n_rows(self) -> int:
        return sum(s.n_rows for s in self.shards)

    def widths(self):
        return [w for s in self.shards for w in s.widths()]

    def parts(self):
        return list(self.shards)

    def chunks(self, rows_for_width):
        offset = 0
        for s in self.shards:
            for c in s.chunks(rows_for_width):
                yield RowChunk(
                    offset + c.start,
                    c.target_probs,
                    c.draft_probs,
                    c.raw_target_probs,
                    c.raw_draft_probs,
                    c.where,
                )
                del c  # a chunk is a view: it would keep its shard alive
            offset += s.n_rows


def as_row_source(target_probs, draft_probs=None, raw_target_probs=None, raw_draft_probs=None) -> RowSource:
    """A :class:`RowSource` from a source, a path (file or folder) or arrays.

    Parameters
    ----------
    target_probs : RowSource, str, Path or array_like
        A source as is; a path to a file or folder of shards; or q, shape (..., V).
    draft_probs : array_like, optional
        p, with array q (not allowed with a source or a path).
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw rows, with arrays only.
    """
    is_path = isinstance(target_probs, (str, Path))
    if isinstance(target_probs, RowSource) or is_path:
        if draft_probs is not None or raw_target_probs is not None or raw_draft_probs is not None:
            raise ValueError(
                "draft_probs: give either a row source (or a path) alone, or "
                "target_probs and draft_probs arrays"
            )
        if isinstance(target_probs, RowSource):
            return target_probs
        path = Path(target_probs)
        if path.is_dir():
            return _ShardRows(path)
        if not path.exists():
            raise ValueError(f"source: {str(target_probs)!r} is neither an existing file nor a folder")
        return _FileRows(path)
    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs array")
    return ArrayRows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
