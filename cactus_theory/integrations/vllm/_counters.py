r"""The engine's acceptance counters against the exact survival of the rows it verified.

vLLM counts, for each draft position j (0-based), the rounds that accepted that position
(``vllm:spec_decode_num_accepted_tokens_per_pos``) and the rounds drafted
(``vllm:spec_decode_num_drafts``). Given a round's rows and drafts, its drafts are accepted
independently with the rule's acceptances :math:`a_1, \dots, a_m`, so position j is accepted
with the exact survival :math:`S_j = \prod_{i \le j} a_i` and the count at j is a sum of
independent Bernoulli(:math:`S_j`) draws over the rounds. :func:`recorded_rounds` reads the
recorder's shards (:mod:`._recorder`) back into rounds; :func:`compare_counters` holds counts
against :math:`\bar S_j`, the mean over the same rounds, with Clopper-Pearson intervals
(:func:`cactus_theory.analysis.accepted_length.compare_position_counts`; vLLM's convention:
drafts only, no bonus token).

Symbols: q verifier, p drafter, n drafted token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...analysis.accepted_length import compare_position_counts
from ...logits.internal import TAIL_ID, read_arrays
from ...simulate import realised_acceptance, survival_probabilities

__all__ = ["RecordedRounds", "recorded_rounds", "compare_counters"]


@dataclass(frozen=True)
class RecordedRounds:
    """The recorded rounds, each a list of row indices in draft order (:func:`recorded_rounds`).

    Attributes
    ----------
    target_probs, draft_probs, raw_target_probs, raw_draft_probs : ndarray, shape (rows, V + 1)
        q, p and the raw rows on the vocabulary (ids ``0 .. V - 1``, V the largest recorded
        column plus one) and a last tail column (the raw mass outside the recorded columns).
    token_ids : ndarray of int, shape (rows,)
        The drafted token n of each row, as a column index.
    rounds : list of ndarray of int
        Each round's rows, position 0 first.
    num_accepted : ndarray of int, shape (len(rounds),)
        The engine's accepted drafts in each round.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray
    token_ids: np.ndarray
    rounds: list
    num_accepted: np.ndarray

    def engine_counts(self, k: int) -> np.ndarray:
        """Rounds that accepted each of the first k positions (vLLM's per-position counter)."""
        return np.array([(self.num_accepted > j).sum() for j in range(k)], dtype=np.int64)


def recorded_rounds(files) -> RecordedRounds:
    """Read recorder shards into rounds (one per recorded (process, step, request)).

    Parameters
    ----------
    files : str, Path or sequence of them
        A folder of shards (every ``shard-*.npz`` in it) or the shard files.
    """
    if isinstance(files, (str, Path)) and Path(files).is_dir():
        files = sorted(Path(files).glob("shard-*.npz"))
    elif isinstance(files, (str, Path)):
        files = [Path(files)]
    files = [Path(f) for f in files]
    if not files:
        raise ValueError("files: no recorder shards given")
    parts = [(f, *read_arrays(f)) for f in files]
    vocab = 1 + max(int(a["columns"].max()) for _, a, _ in parts)
    out = {k: [] for k in ("q", "p", "rq", "rp", "n", "key", "num")}
    for f, a, _ in parts:
        offs = a["row_offsets"]
        pid = f.stem.split("-")[1]
        for r in range(len(offs) - 1):
            cols = a["columns"][offs[r] : offs[r + 1]].astype(np.int64)
            cols = np.where(cols == TAIL_ID, vocab, cols)
            for key, name in (("q", "target_probs"), ("p", "draft_probs")):
                row = np.zeros(vocab + 1)
                row[cols] = a[name][offs[r] : offs[r + 1]]
                out[key].append(row)
            for key, name in (("rq", "raw_target_probs"), ("rp", "raw_draft_probs")):
                row = np.zeros(vocab + 1)
                row[cols] = a[name][offs[r] : offs[r + 1]].astype(np.float64)
                out[key].append(row / row.sum())  # float32 on disk: renormalised in float64
            out["n"].append(int(a["token_ids"][r]))
            out["key"].append((pid, int(a["x_step"][r]), int(a["x_slot"][r]), int(a["x_position"][r])))
            out["num"].append(int(a["x_num_accepted"][r]))
    groups: dict = {}
    for i, (pid, step, slot, pos) in enumerate(out["key"]):
        groups.setdefault((pid, step, slot), []).append((pos, i))
    rounds, num = [], []
    for members in groups.values():
        members.sort()
        if [pos for pos, _ in members] != list(range(len(members))):
            raise ValueError(f"files: a round's recorded positions are not 0..m-1: {members}")
        rounds.append(np.array([i for _, i in members]))
        num.append(out["num"][members[0][1]])
    return RecordedRounds(
        np.array(out["q"]),
        np.array(out["p"]),
        np.array(out["rq"]),
        np.array(out["rp"]),
        np.array(out["n"], dtype=np.int64),
        rounds,
        np.array(num, dtype=np.int64),
    )


def compare_counters(recorded: RecordedRounds, rule, accepted_per_pos, alpha: float = 1e-3):
    """Per-position engine counters against the exact survival of the recorded rounds.

    Parameters
    ----------
    recorded : RecordedRounds
        The rounds the counters count (all of them: the counters of the same requests).
    rule : str or Rule
        The rule the engine served (with its knobs).
    accepted_per_pos : array_like of int, shape (K,)
        The engine's accepted count at each position (K = the most drafts of a round).
    alpha : float
        Per-position level of the Clopper-Pearson intervals.

    Returns
    -------
    cactus_theory.results.PositionComparison
        Observed fractions count_j / rounds_j (rounds_j: the recorded rounds with a position j)
        against the mean exact survival over those rounds.
    """
    c = np.asarray(accepted_per_pos)
    k = c.shape[0]
    lengths = np.array([len(r) for r in recorded.rounds])
    if lengths.size == 0 or lengths.max() != k:
        raise ValueError(
            f"accepted_per_pos: {k} positions, the recorded rounds draft up to {lengths.max(initial=0)}"
        )
    total = np.zeros(k)
    for m in np.unique(lengths):
        idx = np.stack([r for r in recorded.rounds if len(r) == m])  # (rounds, m)
        a = realised_acceptance(
            rule,
            recorded.target_probs[idx],
            recorded.draft_probs[idx],
            recorded.token_ids[idx],
            raw_target_probs=recorded.raw_target_probs[idx],
            raw_draft_probs=recorded.raw_draft_probs[idx],
        )
        total[:m] += survival_probabilities(a).sum(axis=0)
    rounds = np.array([(lengths > j).sum() for j in range(k)], dtype=np.int64)
    return compare_position_counts(c, rounds, total / rounds, alpha=alpha)
