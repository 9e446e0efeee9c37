r"""FLy (training-free loosely speculative decoding): a window rule, exact at the chain level.

FLy decides at a drafted position from the positions after it, so it is not a one-step rule:
it has no per-position acceptance :math:`a_t(n)`, and a one-step analysis (acceptance, emitted
law, divergence of one (q, p) pair) cannot say what it accepts or emits. Whether a mismatch at
t is kept depends on the next W - 1 base tests, on where t falls in its round (mismatches in
the last W drafts of a round are never kept) and on the draft length; the law emitted at t is
a mixture whose weights depend on the neighbouring positions. This module computes it at the
chain level, teacher-forced (:mod:`.chain`): a dynamic programme over each round's state,
checked against an enumeration of every round's base tests and against a round-by-round
sampler (tests/rules/test_peer_rules.py).

The rule (FLy's official code, ``fly/models/FLy.py``, ``SPDGenerate``; our letters)
------------------------------------------------------------------------------------
A round drafts :math:`m_s` tokens :math:`n_{s+j} \sim p_{s+j}`. **Base test** at each drafted
position: ``samples`` tokens are drawn from the verifier q (two at temperature > 0, the
argmax at temperature 0, which a one-hot q reproduces) and the draft matches if one of them
equals it: :math:`B_t = 1` with probability :math:`a_t(n) = 1 - (1 - q_t(n))^{s}`; the
recovery token is the first sample, given that none matched,
:math:`r^{(n)}_x = q_x 1[x \ne n]/(1 - q_n)`. **Window**: with W = ``win_len``, a mismatch at
round offset j is kept iff :math:`j \le m_s - W - 1`, the next W - 1 base tests all match
(:math:`B_{j+1} = \dots = B_{j+W-1} = 1`) and the **entropy gate** passes: the top-3 entropy
of the raw verifier row, :math:`H_3(\tilde q_t) = -\sum_{x \in \mathrm{top3}} \tilde q_x \log
\tilde q_x`, is at least ``entropy_threshold`` (off at or below 0.01, as the code does). The
round keeps the prefix of drafts up to the first position that is neither matched nor kept,
emits there the recovery token, or the bonus token from q after a fully kept round, and the
next round starts after it. A kept mismatch emits the drafted token.

The chain-level programme
-------------------------
Within a round the base tests are independent Bernoulli(:math:`\alpha_t`),
:math:`\alpha_t = \sum_n p_t(n) a_t(n)`. Scanning the round, the state is the number c of
further matches a kept mismatch still needs (0..W-1): from c = 0 a match keeps c = 0, a
mismatch where keeping is allowed moves to c = W - 1 (the keep is pending), any other
mismatch ends the round there; from c > 0 a match lowers c (at c = 1 the pending keep and its
W - 1 matches are committed), a mismatch ends the round at the pending position (it emits the
recovery there; the positions after it are drafted again by the next round, with fresh
draws). Per round start s this is O(:math:`m_s W`); with the round-start probabilities
:math:`\pi_s` (as in :mod:`.exact`) the whole trajectory costs O(T m W). The marginal law
emitted at t is

.. math:: P_t(x) = w^{acc}_t \frac{p_t(x) a_t(x)}{\alpha_t}
          + w^{keep}_t \frac{p_t(x)(1 - a_t(x))}{1 - \alpha_t}
          + w^{rec}_t \frac{\sum_n p_t(n)(1-a_t(n)) r^{(n)}_t(x)}{1 - \alpha_t}
          + w^{bonus}_t\, q_t(x),

with the probabilities :math:`w_t` that t is emitted as a matched draft, a kept mismatch, a
recovery or a bonus token (they sum to 1). Teacher-forced, the base tests of a position are
drawn afresh by every round that drafts it.

Not modelled: FLy's n-gram drafting and tree verification, its multi-level acceleration of the
drafter, and the code's ``abla_no_window`` ablation. The drafts may come from any p (FLy drafts
greedily: a one-hot p).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, m draft
length, W window length.

References
----------
Li, Xu, Li, Yang, Xu, Yin, Li, Ngai, Barsoum, "Training-Free Loosely Speculative Decoding:
Accepting Semantically Correct Drafts Beyond Exact Match", ICLR 2026, arXiv 2511.22972; official
code github.com/AMD-AGI/FLy, ``fly/models/FLy.py`` (``_batch_verification``, ``rej_by_entropy``,
``calculate_topk_entropy``, the ``enable_fly`` window), ``fly_config/FLy_Llama3_70b.json``
(``win_len`` 6, ``entropy_thre`` 0.3, temperature 0). Upstream vLLM's
``rejection_sample_method="fly"`` was not found in the stored vLLM sources; this follows the
authors' code.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .._validation import positive_int, random_generator
from ..rules import get_rule
from ._chain import PositionLaws, Trajectory, position_laws

__all__ = [
    "FLY_WIN_LEN",
    "FLY_ENTROPY_THRESHOLD",
    "FlyChain",
    "sample_match_laws",
    "fly_gate",
    "fly_keep",
    "fly_exact_chain",
    "fly_brute_force",
    "simulate_fly",
]

#: ``win_len`` of FLy's released configuration (fly_config/FLy_Llama3_70b.json).
FLY_WIN_LEN = 6
#: ``entropy_thre`` of the same configuration (nats; at or below 0.01 the gate is off).
FLY_ENTROPY_THRESHOLD = 0.3


def _rows(x):
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum(-1, keepdims=True)


def sample_match_laws(trajectory: Trajectory, samples: int = 2) -> PositionLaws:
    r"""FLy's base test as per-position laws: match if one of ``samples`` verifier draws is n.

    .. math:: a_t(n) = 1 - (1 - q_t(n))^{s}, \qquad
              \sum_n p_t(n)(1 - a_t(n)) r^{(n)}_t(x) = q_t(x)\bigl(c_t - p_t(x)(1-q_t(x))^{s-1}\bigr),

    :math:`c_t = \sum_n p_t(n)(1-q_t(n))^{s-1}`, with the recovery the first draw given no
    match (:math:`r^{(n)} = q 1[x \ne n]/(1-q_n)`). One sample is vLLM's strict (sampler-match)
    verification; a one-hot q is greedy matching.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: FLy code ``_batch_verification`` (``sample_times=2`` at temperature > 0).
    """
    s = positive_int(samples, "samples")
    q, p = _rows(trajectory.target_probs), _rows(trajectory.draft_probs)
    a = 1.0 - (1.0 - q) ** s
    acc = p * a
    c = (p * (1.0 - q) ** (s - 1)).sum(-1, keepdims=True)
    rej = np.clip(q * (c - p * (1.0 - q) ** (s - 1)), 0.0, None)
    return PositionLaws(acc.sum(-1), acc, rej, acc + rej, q)


def fly_gate(trajectory: Trajectory, entropy_threshold: float = FLY_ENTROPY_THRESHOLD) -> np.ndarray:
    r"""Where a mismatch may be kept: :math:`H_3(\tilde q_t) \ge \theta` (bool, shape (T,)).

    :math:`H_3` is the top-3 entropy of the raw verifier row (``raw_target_probs``, else the
    processed one), :math:`-\sum_{x \in top3} \tilde q_x \log \tilde q_x` unnormalized, as FLy's
    ``calculate_topk_entropy(logits, 3)``; :math:`\theta \le 0.01` turns the gate off.

    Symbols: q verifier (``target_probs``). Source: FLy code ``rej_by_entropy``.
    """
    th = float(entropy_threshold)
    if not np.isfinite(th):
        raise ValueError(f"entropy_threshold: must be finite, got {entropy_threshold!r}")
    rq = trajectory.raw_target_probs if trajectory.raw_target_probs is not None else trajectory.target_probs
    rq = _rows(rq)
    if th <= 1e-2:
        return np.ones(rq.shape[0], dtype=bool)
    top = -np.sort(-rq, axis=-1)[:, :3]
    with np.errstate(divide="ignore", invalid="ignore"):
        h3 = -np.where(top > 0, top * np.log(np.where(top > 0, top, 1.0)), 0.0).sum(-1)
    return h3 >= th


def fly_keep(base, gate, win_len: int) -> np.ndarray:
    """FLy's window on one round, as its code writes it: kept = base | (pattern match), the last
    ``win_len`` positions never changed, then the entropy gate (bool arrays of length m_s).

    The literal port of ``SPDGenerate`` (unfold with the pattern [False, True * (W - 1)]); the
    oracle of :func:`fly_exact_chain`'s state machine.
    """
    acc = np.asarray(base, dtype=bool)
    k = acc.shape[0]
    W = int(win_len)
    if k < W:
        return acc.copy()
    pattern = np.ones(W, dtype=bool)
    pattern[0] = False
    windows = np.lib.stride_tricks.sliding_window_view(acc, W)
    matched = np.all(windows == pattern, axis=-1)
    upd = acc.copy()
    upd[: matched.shape[0]] |= matched
    upd[-W:] &= acc[-W:]
    rej_mask = ~(~np.asarray(gate, dtype=bool) & ~acc)  # the gate blocks keeps where H3 < thre
    return upd & rej_mask


@dataclass(frozen=True)
class FlyChain:
    r"""Exact expectations of FLy over one trajectory (teacher-forced; per run).

    Attributes
    ----------
    rounds, tokens, accepted, kept, drafts : float
        Expected rounds, emitted tokens, accepted drafted tokens (matched or kept), kept
        mismatches, drafted tokens.
    hist : ndarray, shape (m + 1,)
        Expected number of rounds with N accepted drafts.
    round_start : ndarray, shape (T + 1,)
        Probability that a round starts at s.
    weights : ndarray, shape (T, 4)
        :math:`w_t` for (matched draft, kept mismatch, recovery, bonus); rows sum to 1.
    emitted : ndarray, shape (T, V)
        The marginal law emitted at t (module docstring).
    laws : PositionLaws
        The base test's per-position laws.
    gate : ndarray of bool, shape (T,)
    m, win_len : int
    """

    rounds: float
    tokens: float
    accepted: float
    kept: float
    drafts: float
    hist: np.ndarray
    round_start: np.ndarray
    weights: np.ndarray
    emitted: np.ndarray
    laws: PositionLaws
    gate: np.ndarray
    m: int
    win_len: int

    @property
    def accepted_length(self) -> float:
        """Accepted drafted tokens per round (the bonus/recovery token not counted)."""
        return self.accepted / self.rounds

    @property
    def tokens_per_round(self) -> float:
        """Emitted tokens per round (accepted drafts + 1)."""
        return self.tokens / self.rounds


def _base_laws(trajectory, base, samples, laws):
    if laws is not None:
        return laws
    if base is None:
        return sample_match_laws(trajectory, samples)
    return position_laws(get_rule(base), trajectory)


def _class_laws(trajectory, laws):
    """Per-position conditional laws of the four classes, shape (T, 4, V)."""
    p = _rows(trajectory.draft_probs)
    acc, rej = laws.accept_joint, laws.reject_joint
    keep = np.clip(p - acc, 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        norm = lambda x: np.where(x.sum(-1, keepdims=True) > 0, x / x.sum(-1, keepdims=True), 0.0)  # noqa: E731
        return np.stack([norm(acc), norm(keep), norm(rej), _rows(laws.target_probs)], axis=1)


def fly_exact_chain(
    trajectory: Trajectory,
    m: int,
    *,
    win_len: int = FLY_WIN_LEN,
    entropy_threshold: float = FLY_ENTROPY_THRESHOLD,
    samples: int = 2,
    base=None,
    laws: PositionLaws | None = None,
) -> FlyChain:
    r"""FLy's exact chain-level expectations by the round-state programme (module docstring).

    Parameters
    ----------
    trajectory : Trajectory
        Recorded (q_t, p_t) pairs (raw rows, if present, feed the entropy gate).
    m : int
        Draft length >= 1.
    win_len : int
        W >= 1 (FLy's release: 6).
    entropy_threshold : float
        Top-3 entropy a kept mismatch needs (nats; FLy's release 0.3; <= 0.01: no gate).
    samples : int
        Verifier draws of the base test (FLy: 2 at temperature > 0).
    base : str or Rule, optional
        Another base test: a registered rule's acceptance and recovery instead of sample-match.
    laws : PositionLaws, optional
        Precomputed base laws.

    Returns
    -------
    FlyChain

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: FLy code (arXiv 2511.22972, github.com/AMD-AGI/FLy).
    """
    m = positive_int(m, "m")
    W = positive_int(win_len, "win_len")
    laws = _base_laws(trajectory, base, samples, laws)
    gate = fly_gate(trajectory, entropy_threshold)
    alpha = np.clip(laws.alpha, 0.0, 1.0)
    T = len(alpha)
    book = _Ledger(T, m)
    for s in range(T):
        w = book.pi[s]
        if w == 0.0:
            continue
        ms = min(m, T - 1 - s)
        book.tot["rounds"] += w
        book.tot["drafts"] += w * ms
        state = np.zeros(W)
        state[0] = w
        for j in range(ms):
            may_keep = bool(gate[s + j]) and j <= ms - W - 1
            state = _advance(book, state, alpha[s + j], may_keep, s, j)
        assert np.all(state[1:] == 0.0)  # keeps need j <= m_s - W - 1: none pending at the end
        book.close(s, ms, state[0], 3)
    emitted = np.einsum("tc,tcv->tv", book.w_cls, _class_laws(trajectory, laws))
    tot = book.tot
    return FlyChain(
        tot["rounds"],
        tot["tokens"],
        tot["accepted"],
        tot["kept"],
        tot["drafts"],
        book.hist,
        book.pi,
        book.w_cls,
        emitted,
        laws,
        gate,
        m,
        W,
    )


class _Ledger:
    """The round-state programme's running sums: the round-start law ``pi`` [T + 1], the
    class weights ``w_cls`` [T, 4] (matched, kept, recovery, bonus), the accepted-length
    histogram and the totals."""

    def __init__(self, T, m):
        self.pi = np.zeros(T + 1)
        self.pi[0] = 1.0
        self.w_cls = np.zeros((T, 4))
        self.hist = np.zeros(min(m, max(T - 1, 1)) + 1)
        self.tot = dict(rounds=0.0, tokens=0.0, accepted=0.0, kept=0.0, drafts=0.0)

    def close(self, s, N, mass, cls):
        """A round from s ending with N tokens accepted and one of class ``cls`` (2: recovery,
        3: bonus) at s + N, with probability ``mass``."""
        self.w_cls[s + N, cls] += mass
        self.pi[s + N + 1] += mass
        self.tot["accepted"] += mass * N
        self.tot["tokens"] += mass * (N + 1)
        self.hist[N] += mass


def _advance(book, state, a, may_keep, s, j):
    """The round state after draft j of the round from s (acceptance ``a`` there): state c = 0
    all matched so far, c >= 1 a kept mismatch with c matches still to come."""
    W = state.size
    t = s + j
    new = np.zeros(W)
    m0 = state[0]
    if m0 > 0.0:
        book.w_cls[t, 0] += m0 * a
        new[0] += m0 * a
        if may_keep and W == 1:
            book.w_cls[t, 1] += m0 * (1.0 - a)
            book.tot["kept"] += m0 * (1.0 - a)
            new[0] += m0 * (1.0 - a)
        elif may_keep:
            new[W - 1] += m0 * (1.0 - a)
        else:
            book.close(s, j, m0 * (1.0 - a), 2)
    for c in range(1, W):
        mc = state[c]
        if mc == 0.0:
            continue
        jf = j - (W - c)  # the pending kept mismatch
        if c == 1:  # its W - 1 matches complete: commit
            book.w_cls[s + jf, 1] += mc * a
            book.w_cls[s + jf + 1 : t + 1, 0] += mc * a
            book.tot["kept"] += mc * a
            new[0] += mc * a
        else:
            new[c - 1] += mc * a
        book.close(s, jf, mc * (1.0 - a), 2)
    return new


def fly_brute_force(
    trajectory: Trajectory,
    m: int,
    *,
    win_len: int = FLY_WIN_LEN,
    entropy_threshold: float = FLY_ENTROPY_THRESHOLD,
    samples: int = 2,
    base=None,
) -> dict:
    """The same expectations by enumerating every round's base tests (the oracle; tiny T only).

    Each round's :math:`2^{m_s}` base-test outcomes are run through :func:`fly_keep` (the
    code's window, not the state machine), forward over the round starts. Returns a dict with ``rounds``, ``tokens``,
    ``accepted``, ``kept``, ``drafts`` and ``weights`` (T, 4).
    """
    m = positive_int(m, "m")
    laws = _base_laws(trajectory, base, samples, None)
    gate = fly_gate(trajectory, entropy_threshold)
    alpha = np.clip(laws.alpha, 0.0, 1.0)
    T = len(alpha)
    if m > 12:
        raise ValueError(f"m: brute force enumerates 2^m outcomes per round, m <= 12; got {m}")
    out = dict(rounds=0.0, tokens=0.0, accepted=0.0, kept=0.0, drafts=0.0, weights=np.zeros((T, 4)))
    pi = np.zeros(T + 1)
    pi[0] = 1.0
    for s in range(T):  # forward over round starts; each round's outcomes enumerated
        prob = pi[s]
        if prob == 0.0:
            continue
        ms = min(m, T - 1 - s)
        out["rounds"] += prob
        out["drafts"] += prob * ms
        for bits in itertools.product((False, True), repeat=ms):
            b = np.array(bits, dtype=bool)
            pb = prob * float(np.prod(np.where(b, alpha[s : s + ms], 1.0 - alpha[s : s + ms])))
            if pb == 0.0:
                continue
            kept = fly_keep(b, gate[s : s + ms], win_len)
            N = int(np.argmin(kept)) if not kept.all() else ms
            out["accepted"] += pb * N
            out["tokens"] += pb * (N + 1)
            out["kept"] += pb * float((kept[:N] & ~b[:N]).sum())
            for j in range(N):
                out["weights"][s + j, 0 if b[j] else 1] += pb
            out["weights"][s + N, 2 if N < ms else 3] += pb
            pi[s + N + 1] += pb
    return out


def simulate_fly(
    trajectory: Trajectory,
    m: int,
    *,
    n_runs: int = 1,
    rng=None,
    win_len: int = FLY_WIN_LEN,
    entropy_threshold: float = FLY_ENTROPY_THRESHOLD,
    samples: int = 2,
) -> dict:
    """Round-by-round FLy runs with fresh draws (drafts from p, ``samples`` verifier draws per
    drafted position), teacher-forced: per-run ``accepted``, ``kept``, ``rounds``, ``tokens``
    (arrays of shape (n_runs,)) and the emitted ``text`` (n_runs, T)."""
    m = positive_int(m, "m")
    n_runs = positive_int(n_runs, "n_runs")
    s_draws = positive_int(samples, "samples")
    rng = random_generator(rng, "rng")
    gate = fly_gate(trajectory, entropy_threshold)
    q, p = _rows(trajectory.target_probs), _rows(trajectory.draft_probs)
    T, V = q.shape
    cq, cp = np.cumsum(q, -1), np.cumsum(p, -1)
    draw = lambda c, t: min(int(np.searchsorted(c[t], rng.random() * c[t, -1], side="right")), V - 1)  # noqa: E731
    res = {k: np.zeros(n_runs) for k in ("accepted", "kept", "rounds", "tokens")}
    text = np.full((n_runs, T), -1, dtype=np.int64)
    for r in range(n_runs):
        s = 0
        while s < T:
            ms = min(m, T - 1 - s)
            drafts = np.array([draw(cp, s + j) for j in range(ms)], dtype=np.int64)
            first = np.empty(ms, dtype=np.int64)
            base = np.zeros(ms, dtype=bool)
            for j in range(ms):
                ys = [draw(cq, s + j) for _ in range(s_draws)]
                first[j] = ys[0]
                base[j] = drafts[j] in ys
            kept = fly_keep(base, gate[s : s + ms], win_len)
            N = int(np.argmin(kept)) if not kept.all() else ms
            text[r, s : s + N] = drafts[:N]
            text[r, s + N] = first[N] if N < ms else draw(cq, s + ms)
            res["accepted"][r] += N
            res["kept"][r] += float((kept[:N] & ~base[:N]).sum())
            res["rounds"][r] += 1
            res["tokens"][r] += N + 1
            s += N + 1
    res["text"] = text
    return res
