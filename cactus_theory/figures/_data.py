r"""The data behind the default figures, and how a figure function reads the user's data.

A figure function takes the user's (q, p) as arrays (``target_probs``, ``draft_probs``, shape
``(N, V)``, optionally the raw temperature-1 rows) or as a loaded dump
(:class:`cactus_theory.logits.Dump`, passed as ``target_probs``); with no data it uses the
defaults here, which the shipped figures are drawn from:

- synthetic: the noisy-copy family (:func:`cactus_theory.distributions.synthetic_pairs`),
  truncated with the paper's sampling setting (temperature 0.6, top-k 20, top-p 0.95);
- real: the shipped SmolLM2-135M-Instruct recordings (:func:`cactus_theory.logits.load_dump`),
  by default its pair with the distilled drafter.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..distributions import PAPER_TRUNCATION, synthetic_pairs, truncate

__all__ = [
    "FigureData",
    "synthetic_data",
    "synthetic_trajectories",
    "real_dump",
    "real_data",
    "real_trajectories",
    "dump_trajectories",
    "as_figure_data",
    "coerce_data",
    "DEFAULT_DRAFTER",
]

#: The shipped pair the real-data figures use by default.
DEFAULT_DRAFTER = "distilled"


class FigureData(NamedTuple):
    """(q, p) at N positions, with the raw rows where known (else the processed ones).

    Attributes
    ----------
    target_probs, draft_probs : ndarray, shape (N, V)
        Processed verifier q and drafter p.
    raw_target_probs, raw_draft_probs : ndarray, shape (N, V)
        Raw (temperature-1) rows, for rules that decide on them.
    label : str
        Where the rows come from (for legends and notebooks).
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray
    label: str


def synthetic_data(
    n_pairs: int = 200,
    vocab_size: int = 64,
    seed: int = 0,
    family: str = "noisy_copy",
    truncated: bool = True,
    **family_knobs,
) -> FigureData:
    """Synthetic (q, p) rows, truncated with the paper's setting unless ``truncated=False``."""
    q, p = synthetic_pairs(family, n_pairs, vocab_size, seed, **family_knobs)
    if not truncated:
        return FigureData(q, p, q, p, f"{family}, V = {vocab_size}")
    tq, tp = truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION)
    return FigureData(tq, tp, q, p, f"{family}, V = {vocab_size}, truncated")


def synthetic_trajectories(
    n: int = 4, length: int = 100, vocab_size: int = 64, seed: int = 0, family: str = "noisy_copy"
) -> list:
    """Teacher-forced synthetic trajectories (the report's chain section's recipe), truncated."""
    from ..simulate import synthetic_trajectory

    rng = np.random.default_rng(seed)
    return [synthetic_trajectory(family, length, vocab_size, rng, **PAPER_TRUNCATION) for _ in range(n)]


def real_dump(drafter: str = DEFAULT_DRAFTER):
    """The shipped dump of SmolLM2-135M-Instruct with ``drafter`` (file ``smollm2-135m_<drafter>``).

    Raises ValueError naming ``drafter`` when no such shipped file exists.
    """
    from ..logits import load_dump, shipped_dumps

    files = {f.stem.replace("smollm2-135m_", ""): f for f in shipped_dumps()}
    if drafter not in files:
        raise ValueError(f"drafter: no shipped recording {drafter!r}; available: {', '.join(sorted(files))}")
    return load_dump(files[drafter])


def _subsample(n: int, max_positions, seed: int):
    if max_positions is None or n <= max_positions:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, int(max_positions), replace=False))


def real_data(drafter: str = DEFAULT_DRAFTER, max_positions: int | None = 256, seed: int = 0) -> FigureData:
    """Processed and raw (q, p) of a shipped pair, at most ``max_positions`` positions (seeded)."""
    d = real_dump(drafter)
    return as_figure_data(d, max_positions=max_positions, seed=seed)


def real_trajectories(drafter: str = DEFAULT_DRAFTER, min_length: int = 2) -> list:
    """The shipped pair's trajectories as :class:`cactus_theory.simulate._chain.Trajectory`."""
    return dump_trajectories(real_dump(drafter), min_length)


def dump_trajectories(dump, min_length: int = 2) -> list:
    """A dump's trajectories (at least ``min_length`` positions) for the exact chain DP."""
    from ..simulate import Trajectory

    return [
        Trajectory(
            t.target_probs,
            t.draft_probs,
            t.raw_target_probs,
            t.raw_draft_probs,
            f"{t.prompt_id} ({t.category})",
        )
        for t in dump.trajectories()
        if len(t) >= min_length
    ]


def as_figure_data(
    target_probs,
    draft_probs=None,
    raw_target_probs=None,
    raw_draft_probs=None,
    *,
    max_positions: int | None = None,
    seed: int = 0,
    label: str = "",
) -> FigureData:
    """Normalize a figure's data argument: a Dump, a FigureData, or arrays (q, p[, raw q, raw p]).

    Rows are validated (ValueError naming the argument) by the analysis that uses them; here
    only shapes are checked.
    """
    from ..logits import Dump

    if isinstance(target_probs, FigureData):
        data = target_probs
    elif isinstance(target_probs, Dump):
        q, p, rq, rp = target_probs.pairs()
        data = FigureData(q, p, rq, rp, label or f"{target_probs.meta.get('drafter', target_probs.name)}")
    else:
        if draft_probs is None:
            raise ValueError("draft_probs: required with target_probs arrays")
        q = np.atleast_2d(np.asarray(target_probs, dtype=np.float64))
        p = np.atleast_2d(np.asarray(draft_probs, dtype=np.float64))
        if q.shape != p.shape:
            raise ValueError(f"draft_probs: shape {p.shape} does not match target_probs' {q.shape}")
        rq = q if raw_target_probs is None else np.atleast_2d(np.asarray(raw_target_probs, dtype=np.float64))
        rp = p if raw_draft_probs is None else np.atleast_2d(np.asarray(raw_draft_probs, dtype=np.float64))
        for name, arr in (("raw_target_probs", rq), ("raw_draft_probs", rp)):
            if arr.shape != q.shape:
                raise ValueError(f"{name}: shape {arr.shape} does not match target_probs' {q.shape}")
        data = FigureData(
            q.reshape(-1, q.shape[-1]),
            p.reshape(-1, q.shape[-1]),
            rq.reshape(-1, q.shape[-1]),
            rp.reshape(-1, q.shape[-1]),
            label,
        )
    idx = _subsample(data.target_probs.shape[0], max_positions, seed)
    if idx.size == data.target_probs.shape[0]:
        return data
    return FigureData(*(a[idx] for a in data[:4]), data.label)


def coerce_data(data, **kwargs) -> FigureData:
    """:func:`as_figure_data` of one data argument: a Dump, a FigureData or a tuple of arrays."""
    if isinstance(data, tuple) and not isinstance(data, FigureData):
        return as_figure_data(*data, **kwargs)
    return as_figure_data(data, **kwargs)
