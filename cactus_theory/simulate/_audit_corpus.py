r"""The rows an audit runs on (:class:`AuditCorpus`): from recorded trajectories or from arrays.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``); a trajectory is replayed
teacher-forced (:class:`cactus_theory.simulate._chain.Trajectory`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .._validation import as_prob_pair, choice, positive_int
from ._chain import Trajectory

#: Which rows of a recording are audited.
ROWS = ("processed", "raw")


@dataclass(frozen=True)
class AuditCorpus:
    """The rows an audit runs on.

    Attributes
    ----------
    target_probs, draft_probs : ndarray, shape (N, V)
        q and p as the rules act on them.
    raw_target_probs, raw_draft_probs : ndarray, shape (N, V)
        Raw rows for rules that decide on them (the same rows for ``rows="raw"``).
    bounds : ndarray of int, shape (n_traj + 1,)
        Trajectory offsets (teacher-forced chains run per trajectory).
    eos : ndarray of bool, shape (N, V), or None
        Columns holding the end-of-sequence token.
    label : str
    eos_token_id : int or None
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray
    bounds: np.ndarray
    eos: np.ndarray | None
    label: str = ""
    eos_token_id: int | None = None

    @property
    def n_positions(self) -> int:
        return int(self.target_probs.shape[0])

    @cached_property
    def rows(self) -> Trajectory:
        """Every position as one trajectory (the rules' one-step laws are per position)."""
        return Trajectory(self.target_probs, self.draft_probs, self.raw_target_probs, self.raw_draft_probs)

    @cached_property
    def trajectories(self) -> tuple[Trajectory, ...]:
        """The teacher-forced trajectories, in order (``bounds``)."""
        w = self.rows
        return tuple(
            Trajectory(w.target_probs[a:b], w.draft_probs[a:b])
            for a, b in zip(self.bounds[:-1], self.bounds[1:])
        )


def corpus_from_dump(dump, *, rows="processed", max_positions=None, eos_token_id=None) -> AuditCorpus:
    r"""An :class:`AuditCorpus` from a recording: a loaded dump (:class:`cactus_theory.logits.Dump`),
    or any object with its ``trajectories()`` (each a
    :class:`~cactus_theory.simulate._chain.Trajectory` with its ``columns``), ``name`` and
    ``meta["transforms"]``.

    ``rows="processed"``: the recorded sampling transforms (the shipped ones: temperature 0.6,
    top-k 20, top-p 0.95); ``"raw"``: the temperature-1 untruncated rows on the stored columns
    plus the tail bucket (a divergence on them is a lower bound of the full-vocabulary one, by
    data processing). ``max_positions``: whole trajectories in file order until at least that
    many positions. ``eos_token_id``: the EOS vocabulary id, whose columns give the EOS
    columns (None: none; a dump's own is :func:`cactus_theory.logits.eos_token_id` of its
    ``meta``).
    """
    rows = choice(rows, ROWS, "rows")
    if max_positions is not None:
        max_positions = positive_int(max_positions, "max_positions")
    trajs, total = [], 0
    for t in dump.trajectories():
        trajs.append(t)
        total += t.length
        if max_positions is not None and total >= max_positions:
            break
    if not trajs:
        raise ValueError("dump: no positions")
    W = max(t.vocab_size for t in trajs)

    def stack(attr, fill=0):
        return np.concatenate(
            [np.pad(getattr(t, attr), ((0, 0), (0, W - t.vocab_size)), constant_values=fill) for t in trajs]
        )

    q, p, rq, rp = (stack(a) for a in ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs"))
    if rows == "raw":
        q, p = rq, rp
    eos = None if eos_token_id is None else stack("columns", -1) == int(eos_token_id)
    bounds = np.concatenate([[0], np.cumsum([t.length for t in trajs])]).astype(np.int64)
    how = (
        "raw rows (temperature 1, untruncated)"
        if rows == "raw"
        else "processed rows ("
        + ", ".join(f"{k} {v}" for k, v in dump.meta.get("transforms", {}).items())
        + ")"
    )
    label = f"{dump.name}: {len(trajs)} trajectories, {bounds[-1]} positions, {how}"
    return AuditCorpus(q, p, rq, rp, bounds, eos, label, None if eos is None else int(eos_token_id))


def corpus_from_arrays(
    target_probs,
    draft_probs,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    eos_token_id=None,
    trajectory_lengths=None,
    label="",
) -> AuditCorpus:
    r"""An :class:`AuditCorpus` from (q, p) rows, shape (N, V) (one row: N = 1).

    ``eos_token_id``: the column of the end-of-sequence token (None: no EOS columns);
    ``trajectory_lengths``: how the rows split into teacher-forced trajectories (default: one
    trajectory of all rows, in order).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim == 1:
        q, p = q[None], p[None]
    if q.ndim != 2:
        raise ValueError(f"target_probs: expected rows of shape (N, V), got {q.shape}")
    rq = (
        q
        if raw_target_probs is None
        else as_prob_pair(raw_target_probs, q, target_name="raw_target_probs")[0]
    )
    rp = p if raw_draft_probs is None else as_prob_pair(raw_draft_probs, p, target_name="raw_draft_probs")[0]
    if rq.shape != q.shape or rp.shape != q.shape:
        raise ValueError(f"raw_target_probs: expected shape {q.shape}")
    N, V = q.shape
    eos = None
    if eos_token_id is not None:
        if isinstance(eos_token_id, bool) or not isinstance(eos_token_id, (int, np.integer)):
            raise ValueError(f"eos_token_id: expected a column index, got {eos_token_id!r}")
        if not 0 <= int(eos_token_id) < V:
            raise ValueError(f"eos_token_id: {eos_token_id} outside [0, {V})")
        eos = np.zeros((N, V), dtype=bool)
        eos[:, int(eos_token_id)] = True
    if trajectory_lengths is None:
        lengths = [N]
    else:
        lengths = [positive_int(x, "trajectory_lengths") for x in trajectory_lengths]
        if sum(lengths) != N:
            raise ValueError(f"trajectory_lengths: sum to {sum(lengths)}, expected {N} (the rows)")
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return AuditCorpus(
        q,
        p,
        rq,
        rp,
        bounds,
        eos,
        label or f"{N} positions, V = {V}",
        None if eos is None else int(eos_token_id),
    )
