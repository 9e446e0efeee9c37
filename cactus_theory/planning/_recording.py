r"""Recordings as the planner reads them: teacher-forced dumps, recorded rounds, profiles.

Three kinds of recording carry what a plan needs:

* a teacher-forced dump (``cactus-theory dump``, the shipped ``data/real`` files): rows along
  verifier-sampled text; each rule's exact chain runs over them at every draft length;
* recorded rounds (``cactus-theory decode`` records, vLLM's recorder shards): each round's rows
  and drafts; given the drafts, round r accepts draft j with the rule's acceptance
  :math:`a_{r,j}` and its exact survival is :math:`S_{r,j} = \prod_{i \le j} a_{r,i}`;
* an acceptance profile (:class:`~._profile.AcceptanceProfile`): a survival curve alone.

Symbols: q verifier, p drafter, n drafted token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..simulate import realised_acceptance, survival_probabilities

__all__ = [
    "Rounds",
    "load_dump_or_rounds",
    "decode_rounds",
    "round_survival",
    "trajectory_totals",
    "dump_profile_fields",
    "recorder_profile_fields",
    "parse_vllm_metrics",
]


@dataclass(frozen=True)
class Rounds:
    """Recorded rounds: rows stacked, each round a list of row indices in draft order.

    Attributes
    ----------
    target_probs, draft_probs, raw_target_probs, raw_draft_probs : ndarray, shape (rows, W)
    draft_col : ndarray of int, shape (rows,)
        The column of each row's drafted token.
    rounds : list of ndarray of int
    request : ndarray of int, shape (rounds,)
        The request (trajectory) of each round.
    accepted : ndarray of int, shape (rounds,), or None
        The accepted drafts the engine recorded in each round.
    label : str
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray
    draft_col: np.ndarray
    rounds: list
    request: np.ndarray
    accepted: np.ndarray | None
    label: str = ""

    @property
    def max_drafts(self) -> int:
        return max(len(r) for r in self.rounds)


def _is_decode_records(dump) -> bool:
    return dump.meta.get("kind") == "decode_records"


def load_dump_or_rounds(recording):
    """A Dump or :class:`Rounds` from ``recording``: a loaded dump, a dump file, a shipped
    recording's name (``distilled``, ``early-exit-25``, ``requant-3``, ``requant-4``) or a
    folder of vLLM recorder shards (``shard-*.npz``)."""
    from ..logits import Dump, load_dump, shipped_dumps

    if isinstance(recording, (Dump, Rounds)):
        return recording
    if not isinstance(recording, (str, Path)):
        raise ValueError(
            f"recording: expected a dump, a path, a shipped name or a profile, got {type(recording).__name__}"
        )
    path = Path(recording)
    if path.is_dir():
        if not sorted(path.glob("shard-*.npz")):
            raise ValueError(f"recording: folder {str(path)!r} holds no recorder shards (shard-*.npz)")
        return recorder_rounds(path)
    shipped = {f.stem.replace("smollm2-135m_", ""): f for f in shipped_dumps()}
    if not path.exists() and str(recording) not in shipped:
        raise ValueError(
            f"recording: {str(recording)!r} is neither a file, a folder of shards nor a shipped recording "
            f"({', '.join(shipped)})"
        )
    try:
        return load_dump(path if path.exists() else shipped[str(recording)])
    except ValueError as exc:  # a file that is not a chain recording (e.g. a tree dump, raw rows)
        raise ValueError(f"recording: not a dump of chain positions ({exc})") from None


def decode_rounds(dump) -> Rounds:
    """The rounds of ``cactus-theory decode`` records (extras ``round``, ``draft_pos``, ``accepted_len``)."""
    qs, ps, rqs, rps, cols, rounds, request, accepted = [], [], [], [], [], [], [], []
    n = 0
    for i, t in enumerate(dump.trajectories()):
        ex = t.extras
        if not {"round", "draft_pos", "accepted_len"} <= set(ex):
            raise ValueError("recording: decoding records need the extras round, draft_pos and accepted_len")
        for r in np.unique(ex["round"]):
            idx = np.flatnonzero(ex["round"] == r)
            idx = idx[np.argsort(ex["draft_pos"][idx])]
            rounds.append(n + idx)
            request.append(i)
            accepted.append(int(ex["accepted_len"][idx[0]]))
        hit = t.columns == t.token_ids[:, None]
        if not np.all(hit.any(axis=1)):
            raise ValueError("recording: a drafted token is missing from its row's stored columns")
        cols.append(np.argmax(hit, axis=1))
        for lst, a in (
            (qs, t.target_probs),
            (ps, t.draft_probs),
            (rqs, t.raw_target_probs),
            (rps, t.raw_draft_probs),
        ):
            lst.append(a)
        n += t.length
    W = max(a.shape[1] for a in qs)
    pad = lambda xs: np.concatenate([np.pad(a, ((0, 0), (0, W - a.shape[1]))) for a in xs])  # noqa: E731
    return Rounds(
        pad(qs),
        pad(ps),
        pad(rqs),
        pad(rps),
        np.concatenate(cols),
        rounds,
        np.asarray(request),
        np.asarray(accepted),
        dump.name,
    )


def recorder_rounds(folder) -> Rounds:
    """The rounds of vLLM recorder shards (each round its own request: shards carry no request id)."""
    from ..integrations.vllm.internal import recorded_rounds

    rec = recorded_rounds(folder)
    r = len(rec.rounds)
    return Rounds(
        rec.target_probs,
        rec.draft_probs,
        rec.raw_target_probs,
        rec.raw_draft_probs,
        rec.token_ids,
        list(rec.rounds),
        np.arange(r),
        rec.num_accepted,
        f"recorder shards in {Path(folder).name}",
    )


def round_survival(rounds: Rounds, rule, knobs=None) -> np.ndarray:
    r"""Each round's exact survival :math:`S_{r,j} = \prod_{i \le j} a_{r,i}` at its recorded drafts.

    Returns an array of shape (rounds, K) (K the most drafts of a round; shorter rounds padded
    with 0).
    """
    out = np.zeros((len(rounds.rounds), rounds.max_drafts))
    lengths = np.array([len(r) for r in rounds.rounds])
    from ..rules import get_rule

    rule = get_rule(rule, **(knobs or {}))
    for m in np.unique(lengths):
        which = np.flatnonzero(lengths == m)
        idx = np.stack([rounds.rounds[i] for i in which])
        a = realised_acceptance(
            rule,
            rounds.target_probs[idx],
            rounds.draft_probs[idx],
            rounds.draft_col[idx],
            raw_target_probs=rounds.raw_target_probs[idx],
            raw_draft_probs=rounds.raw_draft_probs[idx],
        )
        out[which, :m] = survival_probabilities(a)
    return out


def _engine_histogram(accepted, k) -> dict:
    counts = np.bincount(np.asarray(accepted, dtype=np.int64), minlength=k + 1)
    return {j + 1: int(counts[j]) for j in range(k + 1)}


def _rounds_fields(rounds: Rounds, rule, knobs, source) -> dict:
    """The fields of an AcceptanceProfile of recorded rounds (exact survival; the engine's
    accepted counts as its reported histogram and mean)."""
    s = round_survival(rounds, rule, knobs)
    meta = {"rule": str(rule), "knobs": dict(knobs), "rounds": int(s.shape[0])}
    mean, hist = None, None
    if rounds.accepted is not None:
        mean = 1.0 + float(np.mean(rounds.accepted))
        hist = _engine_histogram(rounds.accepted, s.shape[1])
    return dict(
        marginal=tuple(s.mean(axis=0)),
        mean_accept_length=mean,
        histogram=hist,
        source=source,
        meta=meta,
        round_survival=s,
        round_request=rounds.request,
    )


def trajectory_totals(corpus, rule, knobs, draft_lengths):
    """Each trajectory's exact expected tokens and rounds at each draft length (teacher-forced).

    Returns ``(tokens, rounds, hist)``: arrays of shape (trajectories, len(draft_lengths)), and
    the pooled expected histogram of N at the longest draft length (shape (m_max + 1,)).
    """
    from ..rules import get_rule
    from ..simulate import exact_chain, position_laws
    from ..simulate.internal import PositionLaws

    laws = position_laws(get_rule(rule, **(knobs or {})), corpus.rows)
    n = len(corpus.bounds) - 1
    tokens, calls = np.zeros((n, len(draft_lengths))), np.zeros((n, len(draft_lengths)))
    hist = np.zeros(max(draft_lengths) + 1)
    for i, (t, a, b) in enumerate(zip(corpus.trajectories, corpus.bounds[:-1], corpus.bounds[1:])):
        part = PositionLaws(
            *(
                x[a:b]
                for x in (laws.alpha, laws.accept_joint, laws.reject_joint, laws.emitted, laws.target_probs)
            )
        )
        for j, m in enumerate(draft_lengths):
            tot = exact_chain(None, t, m, laws=part).totals
            tokens[i, j], calls[i, j] = float(tot.tokens[0]), float(tot.rounds[0])
            if m == max(draft_lengths):
                hist += tot.hist[0]
    return tokens, calls, hist


def dump_profile_fields(dump, *, rule="sps", m=None, max_positions=None, **knobs) -> dict:
    """The fields of a dump's exact AcceptanceProfile (see ``AcceptanceProfile.from_dump``)."""
    from ..logits import Dump
    from ..simulate.internal import corpus_from_dump

    dump = load_dump_or_rounds(dump)
    if not isinstance(dump, Dump):
        raise ValueError("dump: expected a dump (a file, a loaded dump or a shipped recording's name)")
    if _is_decode_records(dump):
        if m is not None and int(m) != int(dump.meta.get("m", m)):
            raise ValueError(f"m: these records drafted m = {dump.meta.get('m')} per round")
        return _rounds_fields(decode_rounds(dump), rule, knobs, f"{dump.name} (recorded rounds)")
    m = 4 if m is None else int(m)
    if m < 1:
        raise ValueError(f"m: must be >= 1, got {m}")
    corpus = corpus_from_dump(dump, max_positions=max_positions)
    tokens, calls, hist = trajectory_totals(corpus, rule, knobs, (m,))
    r = float(calls.sum())
    marginal = np.clip(hist[::-1].cumsum()[::-1][1:] / r, 0.0, 1.0)
    meta = {"rule": str(rule), "knobs": dict(knobs), "m": m, "positions": corpus.n_positions}
    return dict(
        marginal=tuple(marginal),
        mean_accept_length=float(tokens.sum() / r),
        histogram={j + 1: float(hist[j] / r) for j in range(m + 1)},
        source=f"{dump.name} (exact chain, teacher-forced)",
        meta=meta,
    )


def recorder_profile_fields(folder, *, rule="sps", **knobs) -> dict:
    """The fields of the exact AcceptanceProfile of vLLM recorder shards."""
    return _rounds_fields(recorder_rounds(folder), rule, knobs, f"recorder shards in {Path(folder).name}")


#: One sample line of Prometheus' text format: ``name{label="value",...} number``.
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')
_NAMES = {
    "vllm:spec_decode_num_accepted_tokens_per_pos": "per_pos",
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}


def parse_vllm_metrics(text: str):
    """(accepted per position, drafts, accepted tokens or None) from vLLM's ``/metrics`` text
    (counters summed over their other labels, e.g. several engines)."""
    per_pos, got = {}, {}
    for line in str(text).splitlines():
        hit = _SAMPLE.match(line.strip())
        if line.startswith("#") or hit is None:
            continue
        name = hit.group(1)
        name = name[: -len("_total")] if name.endswith("_total") else name
        key = _NAMES.get(name)
        if key is None:
            continue
        try:
            value = float(hit.group(3))
        except ValueError:
            raise ValueError(f"text: counter {name} has no number: {line.strip()!r}") from None
        if key == "per_pos":
            pos = _POSITION.search(hit.group(2) or "")
            if pos is None:
                raise ValueError(f"text: {name} without a position label: {line.strip()!r}")
            per_pos[int(pos.group(1))] = per_pos.get(int(pos.group(1)), 0) + int(value)
        else:
            got[key] = got.get(key, 0) + int(value)
    if not per_pos:
        raise ValueError("text: no vllm:spec_decode_num_accepted_tokens_per_pos counters")
    k = max(per_pos) + 1
    return [per_pos.get(j, 0) for j in range(k)], got.get("drafts", 0), got.get("accepted")
