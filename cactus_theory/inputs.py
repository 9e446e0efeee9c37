"""Load a set of (q, p) rows from a file or a shipped recording: one entry point, :func:`_load_pairs`.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), V vocabulary size (last axis),
N rows. Accepted sources:

* ``.npy``: one float array of shape ``(2, V)`` or ``(2, N, V)``: ``[0]`` is q, ``[1]`` is p;
* ``.npz``: arrays ``target_probs`` and ``draft_probs`` (or ``q`` and ``p``), each ``(V,)`` or
  ``(N, V)``; a compact dump of :mod:`cactus_theory.logits._format` is recognised and read through
  its verified loader (processed rows, zero-padded to the widest position);
* ``.json``: ``{"target_probs": [...], "draft_probs": [...]}`` (or ``"q"``/``"p"``), or a list of
  such objects, one per row;
* the name of a shipped recording: ``distilled``, ``early-exit-25``, ``requant-3``,
  ``requant-4`` (with or without the ``smollm2-135m_`` prefix; see ``cactus-theory models``).

Every row is validated (finite, non-negative, summing to 1 within the normalization tolerance of
:mod:`cactus_theory.conventions`) and returned as float64 ``(N, V)``. A bad file raises
ValueError whose message names the file and what is wrong.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from ._validation import as_prob_pair
from .rows import _KEYS  # the array names a file of pairs may use (one definition)

__all__: list[str] = []  # the command line's readers: users pass arrays, dumps or row sources

_PREFIX = "smollm2-135m_"


def _shipped_pair_names() -> list[str]:
    """Names of the shipped recordings accepted by :func:`_load_pairs` (e.g. ``"distilled"``)."""
    from .logits import shipped_dumps

    return [f.stem.replace(_PREFIX, "") for f in shipped_dumps()]


def _parse_probs(text: str, name: str) -> np.ndarray:
    """A comma-separated probability row (``"0.5,0.3,0.2"``) as float64; ValueError naming ``name``."""
    try:
        vals = [float(x) for x in str(text).replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise ValueError(
            f"{name}: expected comma-separated numbers such as 0.5,0.3,0.2, got {text!r}"
        ) from None
    if not vals:
        raise ValueError(f"{name}: empty probability row")
    return np.asarray(vals, dtype=np.float64)


def _from_mapping(obj, where: str):
    for kq, kp in _KEYS:
        if kq in obj and kp in obj:
            return obj[kq], obj[kp]
    keys = ", ".join(sorted(map(str, obj.keys()))) or "none"
    raise ValueError(
        f"{where}: expected arrays 'target_probs' and 'draft_probs' (or 'q' and 'p'); found {keys}"
    )


def _read_json(path: Path):
    where = str(path)
    try:
        obj = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    if isinstance(obj, dict):
        return _from_mapping(obj, where)
    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        qs, ps = zip(*(_from_mapping(r, f"{where}: row {i}") for i, r in enumerate(obj)))
        return list(qs), list(ps)
    raise ValueError(
        f"{where}: expected an object with 'target_probs' and 'draft_probs', or a non-empty "
        "list of such objects"
    )


def _read_npz(path: Path):
    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            dump = "__meta__" in names
            if not dump:
                return _from_mapping({k: z[k] for k in names}, where)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"{where}: not a readable .npz archive ({exc})") from None
    if dump:
        from .logits import load_dump

        q, p, _, _ = load_dump(path).pairs()  # DumpFormatError (a ValueError) names the file
        return q, p


def _read_npy(path: Path):
    where = str(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{where}: not a readable .npy array ({exc})") from None
    if arr.ndim not in (2, 3) or arr.shape[0] != 2:
        raise ValueError(
            f"{where}: expected an array of shape (2, V) or (2, N, V) holding q then p; got shape {arr.shape}"
        )
    return arr[0], arr[1]


def _load_pairs(source) -> tuple[np.ndarray, np.ndarray]:
    """Load (target_probs, draft_probs) rows from a file or a shipped recording.

    Parameters
    ----------
    source : str or Path
        A ``.npy``, ``.npz`` or ``.json`` file (layouts in the module docstring), or the name of a
        shipped recording (:func:`_shipped_pair_names`).

    Returns
    -------
    (target_probs, draft_probs) : float64 ndarray (N, V), float64 ndarray (N, V)
        q and p rows, validated and renormalized (a single row comes back as N = 1).

    Raises
    ------
    ValueError
        Naming the file (or ``source``) and what is wrong: missing file, unknown suffix, unreadable
        content, missing keys, wrong shape, or rows that are not probability distributions.
    """
    text = str(source)
    path = Path(text)
    if not path.exists():
        names = _shipped_pair_names()
        name = text[len(_PREFIX) :] if text.startswith(_PREFIX) else text
        if name in names:
            from .logits.internal import REAL_DIR

            path = REAL_DIR / f"{_PREFIX}{name}.npz"
        else:
            raise ValueError(
                f"source: {text!r} is neither an existing file nor a shipped recording "
                f"({', '.join(names) or 'none shipped'})"
            )
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, expected a .npy, .npz or .json file")
    suffix = path.suffix.lower()
    readers = {".npy": _read_npy, ".npz": _read_npz, ".json": _read_json}
    if suffix not in readers:
        raise ValueError(f"{path}: unknown file type {suffix or '(none)'!r}; expected .npy, .npz or .json")
    q, p = readers[suffix](path)
    try:
        q, p = as_prob_pair(q, p)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if q.ndim == 1:
        q, p = q[None, :], p[None, :]
    if q.ndim != 2:
        raise ValueError(f"{path}: expected rows of shape (N, V); got shape {q.shape}")
    return np.ascontiguousarray(q), np.ascontiguousarray(p)
