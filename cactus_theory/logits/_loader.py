"""Loader of real-distribution dumps: (q, p) trajectories for every analysis and the simulator.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). See
:mod:`cactus_theory.logits._format` for the on-disk layout and the errors it introduces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..distributions import _sampling_transform
from ..simulate import Trajectory  # the toolkit's one trajectory type (re-exported)
from ._format import (
    COMPACT_REQUIRED,
    FULL_REQUIRED,
    FULL_VOCAB_FORMAT,
    PAD_ID,
    TAIL_ID,
    DumpFormatError,
    read_arrays,
    validate_compact,
)

REAL_DIR = Path(__file__).resolve().parents[1] / "data" / "real"
FULL_VOCAB_PATH = REAL_DIR / "full_vocab" / "smollm2-135m_full-vocab.npz"
GEMMA_FULL_VOCAB_PATH = REAL_DIR / "full_vocab" / "gemma-3-270m_full-vocab.npz"
FULL_VOCAB_SAMPLES = {"smollm2": FULL_VOCAB_PATH, "gemma3": GEMMA_FULL_VOCAB_PATH}


class Pairs(NamedTuple):
    """All positions of a dump stacked (padded to a common width); unpacks as four arrays."""

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray


def _renorm(a: np.ndarray) -> np.ndarray:
    s = a.sum(-1, keepdims=True)
    return np.divide(a, s, out=np.zeros_like(a), where=s > 0)


class Dump:
    """A loaded compact dump (see :func:`load_dump`).

    Attributes
    ----------
    path : Path
    meta : dict
        Models, tokenizer, transforms, prompts, seed, versions, checksum.
    n_positions, n_trajectories : int
    """

    def __init__(self, path, arrays: dict, meta: dict):
        self.path = Path(path)
        self.meta = meta
        self._a = arrays
        self.n_positions = int(len(arrays["token_ids"]))
        self.n_trajectories = int(len(arrays["traj_offsets"]) - 1)

    def __repr__(self) -> str:
        return (
            f"Dump({self.path.name}: {self.meta.get('verifier')} / {self.meta.get('drafter')}, "
            f"{self.n_trajectories} trajectories, {self.n_positions} positions)"
        )

    @property
    def name(self) -> str:
        return self.meta.get("name", self.path.stem)

    def _block(self, lo: int, hi: int, width: int | None = None):
        a = self._a
        ro = a["row_offsets"]
        widths = np.diff(ro[lo : hi + 1])
        W = int(widths.max()) if width is None else width
        T = hi - lo
        rows = np.repeat(np.arange(T), widths)
        within = np.arange(ro[lo], ro[hi]) - np.repeat(ro[lo:hi], widths)
        sl = slice(ro[lo], ro[hi])
        cols = np.full((T, W), PAD_ID, dtype=np.int64)
        cols[rows, within] = a["columns"][sl]
        out = []
        for k in ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs"):
            m = np.zeros((T, W), dtype=np.float64)
            m[rows, within] = a[k][sl]
            # processed rows are stored exactly in float64 (kept bit for bit); raw rows were
            # rounded to float32 and are renormalized in float64
            out.append(_renorm(m) if k.startswith("raw_") else m)
        return cols, out

    def trajectories(self) -> Iterator[Trajectory]:
        """Yield one :class:`Trajectory` per prompt, in file order."""
        a = self._a
        to, po = a["traj_offsets"], a["prompt_offsets"]
        extras_names = [k for k in a if k.startswith("x_")]
        for i, info in enumerate(self.meta["trajectories"]):
            lo, hi = int(to[i]), int(to[i + 1])
            if hi == lo:
                continue
            cols, (q, p, rq, rp) = self._block(lo, hi)
            yield Trajectory(
                target_probs=q,
                draft_probs=p,
                raw_target_probs=rq,
                raw_draft_probs=rp,
                columns=cols,
                token_ids=a["token_ids"][lo:hi].astype(np.int64),
                prompt_id=info["prompt_id"],
                category=info["category"],
                prompt_token_ids=a["prompt_token_ids"][po[i] : po[i + 1]].astype(np.int64),
                extras={k[2:]: a[k][lo:hi] for k in extras_names},
            )

    def pairs(self) -> Pairs:
        """``(target_probs, draft_probs, raw_target_probs, raw_draft_probs)`` stacked over all
        positions, each float64 [N, W] padded with zero columns to the widest position."""
        if self.n_positions == 0:
            z = np.zeros((0, 1))
            return Pairs(z, z, z, z)
        _, (q, p, rq, rp) = self._block(0, self.n_positions)
        return Pairs(q, p, rq, rp)

    def columns(self) -> np.ndarray:
        """int64 [N, W] column ids matching :meth:`pairs` (-1 padding, -2 tail)."""
        cols, _ = self._block(0, self.n_positions)
        return cols

    def categories(self) -> np.ndarray:
        """Category of each position, [N] object array (aligned with :meth:`pairs`)."""
        to = self._a["traj_offsets"]
        cats = [t["category"] for t in self.meta["trajectories"]]
        return np.repeat(np.array(cats, dtype=object), np.diff(to))

    def acceptance(self) -> np.ndarray:
        """Per-position SpS acceptance ``sum_x min(p_x, q_x)`` of the processed distributions [N]."""
        q, p, _, _ = self.pairs()
        return np.minimum(q, p).sum(-1)


def load_dump(path) -> Dump:
    """Load and verify a compact dump.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Dump

    Raises
    ------
    DumpFormatError (a ValueError)
        If the file is missing, truncated, corrupted or inconsistent; the message names the file.
    """
    arrays, meta = read_arrays(path, COMPACT_REQUIRED)
    validate_compact(path, arrays, meta)
    return Dump(path, arrays, meta)


def shipped_dumps() -> list[Path]:
    """The committed real-distribution samples (``cactus_theory/data/real/*.npz``), sorted."""
    return sorted(REAL_DIR.glob("*.npz"))


def load_full_vocab(path=None):
    """Load a full-vocabulary sample.

    Returns
    -------
    (target_probs, draft_probs, meta) : float64 [T, V], float64 [T, V], dict
        Raw (temperature-1) distributions, renormalized in float64 (error stated in
        :mod:`cactus_theory.logits._format`).
    """
    path = Path(path) if path is not None else FULL_VOCAB_PATH
    arrays, meta = read_arrays(path, FULL_REQUIRED)
    if meta.get("format") != FULL_VOCAB_FORMAT:
        raise DumpFormatError(f"{path}: format {meta.get('format')!r}, expected {FULL_VOCAB_FORMAT!r}")
    if arrays["logp16_q"].shape != arrays["logp16_p"].shape:
        raise DumpFormatError(f"{path}: logp16_q and logp16_p differ in shape")
    q = _renorm(np.exp(arrays["logp16_q"].astype(np.float64)))
    p = _renorm(np.exp(arrays["logp16_p"].astype(np.float64)))
    return q, p, meta


def load_full_vocab_sample(which: str = "smollm2", path=None):
    """``(target_probs [T, V], draft_probs [T, V])`` of a shipped full-vocabulary sample (raw,
    temperature 1). Apply :func:`apply_transforms` for processed versions.

    Parameters
    ----------
    which : {"smollm2", "gemma3"}
        ``"smollm2"``: 24 positions, V = 49,152, SmolLM2-135M-Instruct (q) and its 4-bit
        re-quantized copy (p). ``"gemma3"``: 4 positions, V = 262,144, Gemma-3-270M base (q) and
        its 4-bit re-quantized copy (p) (no other model shares Gemma's tokenizer here).
    path : optional
        Any other full-vocabulary file.
    """
    if path is None:
        if which not in FULL_VOCAB_SAMPLES:
            raise ValueError(f"which: {which!r}; use one of {sorted(FULL_VOCAB_SAMPLES)}")
        path = FULL_VOCAB_SAMPLES[which]
    q, p, _ = load_full_vocab(path)
    return q, p


def apply_transforms(probs: np.ndarray, temperature=0.6, top_p=0.95, top_k=20) -> np.ndarray:
    """Sampling transforms on full-vocabulary raw probabilities (float64 [..., V]); the toolkit's
    one transform (:func:`cactus_theory.distributions._sampling_transform`, ties by lower token
    id) with :class:`cactus_theory.logits._runner.SamplingParams`' conventions (``top_k <= 0`` or
    ``top_p >= 1`` disables that step; ``temperature == 0`` is greedy)."""
    q = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logp = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)), -np.inf)
    return _sampling_transform(logp, temperature=temperature, top_k=top_k, top_p=top_p)


__all__ = [
    "Dump",
    "FULL_VOCAB_PATH",
    "GEMMA_FULL_VOCAB_PATH",
    "Pairs",
    "REAL_DIR",
    "TAIL_ID",
    "Trajectory",
    "apply_transforms",
    "load_dump",
    "load_full_vocab",
    "load_full_vocab_sample",
    "shipped_dumps",
]
