r"""Teacher-forced chain simulation of speculative decoding with draft length m, for any rule.

**Teacher forced.** A trajectory is a recorded sequence of (q_t, p_t) pairs, t = 0..T-1
(q verifier = ``target_probs``, p drafter = ``draft_probs``). The simulation takes the
distributions at position t from the recording whatever tokens it emitted before, i.e. it
assumes that the distributions along the trajectory do not depend on the emitted text. Real
decoding feeds its own tokens back; results here are the teacher-forced approximation and
every table says so.

A round starting at position s drafts :math:`m_s = \min(m, T-1-s)` tokens (so that the bonus
position exists inside the trajectory; only the last rounds are shorter), at each drafted
position t a fresh draft :math:`n \sim p_t` is accepted with the rule's :math:`a_n`. With
N the accepted prefix length, the round emits the N drafts, then at position s + N either a
recovery token from :math:`r^{(n)}` (N < m_s) or the bonus token from :math:`q_{s+m_s}`
(N = m_s), and the next round starts at s + N + 1. Every round emits N + 1 tokens and the
rounds tile the trajectory exactly.

Because each position is visited by exactly one round, the (accepted?, emitted token) pair
at position t is drawn once per run from its exact joint law

.. math:: P(\text{accept}, x) = p_t(x)\, a_t(x), \qquad
          P(\text{reject}, x) = \sum_n p_t(n)(1 - a_t(n))\, r_t^{(n)}(x) = h_{alg,t}(x) - p_t(x) a_t(x)

(paper, Theorem 3), which is equivalent to drafting, testing and recovering at t. vLLM V0's
non-causal acceptance count also judges the drafts after the first rejection of a round; those
judgements use independent Bernoulli(:math:`\alpha_t`) draws, :math:`\alpha_t = \sum_n p_t(n) a_t(n)`.

References
----------
Leviathan et al. 2023 (arXiv 2211.17192); Hao & Mou, ICLR 2026, Theorem 3 (emitted law);
engines.md 1.3 (vLLM V0 counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import as_int_array, as_matching_probs, as_prob_pair, positive_int, random_generator
from ..analysis.one_step import emitted_distribution, make_plan
from ..results import Result
from ..rules import get_rule
from ._metrics import ChainTotals

__all__ = ["Trajectory", "PositionLaws", "position_laws", "ChainRun", "simulate_chain"]


@dataclass(frozen=True)
class Trajectory:
    r"""A recorded trajectory of (q_t, p_t) pairs, replayed teacher-forced.

    The toolkit's one trajectory type: synthetic trajectories
    (:func:`cactus_theory.simulate._synthetic.synthetic_trajectory`) fill the distributions,
    the real-logit dumps (:meth:`cactus_theory.logits._loader.Dump.trajectories`) also the
    columns, tokens and prompt.

    Attributes
    ----------
    target_probs : ndarray, shape (T, V)
        Processed verifier distributions q_t.
    draft_probs : ndarray, shape (T, V)
        Processed drafter distributions p_t.
    raw_target_probs, raw_draft_probs : ndarray, shape (T, V), optional
        Raw (temperature-1) distributions, for rules that decide on them. In a dump the tail
        column (id ``TAIL_ID = -2``) holds the raw mass outside the stored columns.
    label : str
        Where it came from.
    columns : int64 ndarray, shape (T, V), optional
        Vocabulary ids of the columns (a dump stores a few columns per position; ``-1``
        padding, ``-2`` the tail bucket). None: column j is token j.
    token_ids : int64 ndarray, shape (T,), optional
        The emitted token at each position.
    prompt_id, category : str
        The prompt (dumps).
    prompt_token_ids : int64 ndarray, shape (P,), optional
    extras : dict of str to ndarray, shape (T, ...)
        Optional per-position records (e.g. decoding rounds).

    Validation (:mod:`cactus_theory._validation`): probability rows (float64, each summing to
    1 within :func:`cactus_theory.conventions.normalization_tolerance`; kept as given, the
    analyses renormalize), matching shapes; ValueError naming the field.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray | None = None
    raw_draft_probs: np.ndarray | None = None
    label: str = ""
    columns: np.ndarray | None = None
    token_ids: np.ndarray | None = None
    prompt_id: str = ""
    category: str = ""
    prompt_token_ids: np.ndarray | None = None
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        # validated, kept as given (a dump's stored values stay exact); analyses renormalize
        q, p = as_prob_pair(self.target_probs, self.draft_probs, normalize=False)
        if q.ndim != 2:
            raise ValueError(f"target_probs: expected shape (T, V), got {q.shape}")
        if q.shape[0] < 1:
            raise ValueError("target_probs: the trajectory needs at least one position")
        object.__setattr__(self, "target_probs", q)
        object.__setattr__(self, "draft_probs", p)
        for name in ("raw_target_probs", "raw_draft_probs"):
            arr = getattr(self, name)
            if arr is not None:
                object.__setattr__(self, name, as_matching_probs(arr, q.shape, name, normalize=False))
        if self.columns is not None:
            object.__setattr__(self, "columns", as_int_array(self.columns, q.shape, "columns"))
        if self.token_ids is not None:
            object.__setattr__(self, "token_ids", as_int_array(self.token_ids, q.shape[:1], "token_ids"))
        if self.prompt_token_ids is not None:
            object.__setattr__(
                self, "prompt_token_ids", as_int_array(self.prompt_token_ids, None, "prompt_token_ids")
            )

    def __len__(self) -> int:
        return int(self.target_probs.shape[0])

    @property
    def length(self) -> int:
        """T, the number of positions."""
        return self.target_probs.shape[0]

    @property
    def vocab_size(self) -> int:
        """V (the number of columns)."""
        return self.target_probs.shape[1]

    @property
    def acceptance(self) -> np.ndarray:
        """Per-position SpS acceptance ``beta_t = sum_x min(p_x, q_x)`` (processed), float64 [T]."""
        return np.minimum(self.target_probs, self.draft_probs).sum(-1)


@dataclass(frozen=True)
class PositionLaws:
    r"""Exact per-position laws of one rule along a trajectory (float64).

    Attributes
    ----------
    alpha : ndarray, shape (T,)
        :math:`\alpha_t = \sum_n p_t(n) a_t(n)`, the acceptance probability of a draft at t.
    accept_joint : ndarray, shape (T, V)
        :math:`p_t(x) a_t(x)`: accepted and emitted x.
    reject_joint : ndarray, shape (T, V)
        :math:`h_{alg,t}(x) - p_t(x) a_t(x)` (clipped at 0): rejected, recovered x.
    emitted : ndarray, shape (T, V)
        :math:`h_{alg,t}` (Theorem 3).
    target_probs : ndarray, shape (T, V)
        q_t (the bonus law).
    """

    alpha: np.ndarray
    accept_joint: np.ndarray
    reject_joint: np.ndarray
    emitted: np.ndarray
    target_probs: np.ndarray


def trajectory_plan(rule, trajectory: Trajectory, **options):
    """The rule's plan (:func:`cactus_theory.analysis.one_step.make_plan`) on a trajectory's rows,
    its raw rows included (for rules that decide on them); ``options`` go to ``make_plan``."""
    return make_plan(
        get_rule(rule),
        trajectory.target_probs,
        trajectory.draft_probs,
        raw_target_probs=trajectory.raw_target_probs,
        raw_draft_probs=trajectory.raw_draft_probs,
        **options,
    )


def position_laws(
    rule, trajectory: Trajectory, *, drafting: str = "sample", draft_top_k=None
) -> PositionLaws:
    r"""The rule's exact one-step laws at every position of a trajectory.

    .. math:: \alpha_t = \sum_n p_t(n) a_t(n), \qquad
              h_{alg,t}(x) = p_t(x) a_t(x) + \sum_n p_t(n)(1 - a_t(n)) r_t^{(n)}(x)

    with q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, from
    :func:`cactus_theory.analysis.one_step.make_plan` and ``emitted_distribution`` (float64).

    Parameters
    ----------
    rule : str or Rule
        Any registered rule.
    trajectory : Trajectory
        Its raw distributions are passed to rules that decide on them.
    drafting : {"sample", "argmax", "top_k"}
        How each position's draft is drawn from its drafter row
        (:func:`cactus_theory.analysis.one_step._drafting_distribution`); the laws' p is the
        drafting law. Pass the result as ``laws`` to :func:`~.exact.exact_chain` for the
        chain under that policy.
    draft_top_k : int, optional
        k for ``drafting="top_k"``.

    Returns
    -------
    PositionLaws

    References
    ----------
    Hao & Mou, ICLR 2026, Theorem 3.
    """
    plan = trajectory_plan(rule, trajectory, drafting=drafting, draft_top_k=draft_top_k)
    a = np.clip(np.asarray(plan.accept_probs(), dtype=np.float64), 0.0, 1.0)
    p = np.asarray(plan.draft_probs, dtype=np.float64)  # rows renormalized by make_plan
    acc = p * a
    h = np.asarray(emitted_distribution(plan), dtype=np.float64)
    rej = np.clip(h - acc, 0.0, None)
    return PositionLaws(acc.sum(-1), acc, rej, h, np.asarray(plan.target_probs, dtype=np.float64))


def _sample_rows(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF sample per column: ``cdf`` (T, K) rows, ``u`` (R, T) -> indices (R, T)."""
    out = np.empty(u.shape, dtype=np.int64)
    k = cdf.shape[1]
    for t in range(cdf.shape[0]):
        out[:, t] = np.minimum(np.searchsorted(cdf[t], u[:, t] * cdf[t, -1], side="right"), k - 1)
    return out


@dataclass(frozen=True)
class ChainRun(Result):
    r"""Result of :func:`simulate_chain` (teacher-forced).

    Attributes
    ----------
    rule : str
        The configured rule (``repr``).
    m : int
        Draft length.
    length : int
        T.
    round_run, round_start, round_drafts, round_accepted, round_noncausal : ndarray, shape (rounds,)
        Per round: run index, start position s, drafts :math:`m_s`, accepted drafted tokens N,
        vLLM V0's non-causal accepted count. Emitted tokens = N + 1; rejected drafts
        = :math:`m_s - N`; the round ended with the bonus iff N = :math:`m_s`.
    tokens : ndarray, shape (n_runs, T), optional
        The emitted text of each run (when ``record_tokens``).
    bonus_position : ndarray of bool, shape (n_runs, T)
        Whether position t was emitted as a bonus token (drawn from q_t).
    """

    rule: str
    m: int
    length: int
    n_runs: int
    round_run: np.ndarray
    round_start: np.ndarray
    round_drafts: np.ndarray
    round_accepted: np.ndarray
    round_noncausal: np.ndarray
    bonus_position: np.ndarray
    tokens: np.ndarray | None = None

    @property
    def round_emitted(self) -> np.ndarray:
        """Tokens emitted per round, N + 1 (accepted drafts plus recovery or bonus)."""
        return self.round_accepted + 1

    @property
    def round_rejected(self) -> np.ndarray:
        """Drafted tokens thrown away per round, :math:`m_s - N`."""
        return self.round_drafts - self.round_accepted

    def totals(self) -> ChainTotals:
        """Per-run totals for :func:`~cactus_theory.simulate._metrics.compute_metrics`."""
        n, m = self.n_runs, longest_round(self.m, self.length)
        run = self.round_run
        add = lambda w: np.bincount(run, weights=w, minlength=n).astype(np.float64)  # noqa: E731
        i = np.arange(m)
        N, ms = self.round_accepted[:, None], self.round_drafts[:, None]
        exposure = np.zeros((n, m))
        accepted_pos = np.zeros((n, m))
        reached = np.zeros((n, m))
        np.add.at(exposure, run, (ms > i).astype(np.float64))
        np.add.at(accepted_pos, run, ((N > i) & (ms > i)).astype(np.float64))
        np.add.at(reached, run, ((N >= i) & (ms > i)).astype(np.float64))
        hist = np.zeros((n, m + 1))
        np.add.at(hist, (run, self.round_accepted), 1.0)
        return ChainTotals(
            rounds=add(np.ones(len(run))),
            tokens=add(self.round_emitted.astype(np.float64)),
            accepted=add(self.round_accepted.astype(np.float64)),
            drafts=add(self.round_drafts.astype(np.float64)),
            noncausal=add(self.round_noncausal.astype(np.float64)),
            exposure=exposure,
            accepted_pos=accepted_pos,
            reached=reached,
            hist=hist,
        )


def simulate_chain(
    rule,
    trajectory: Trajectory,
    m: int,
    *,
    n_runs: int = 1,
    rng=None,
    record_tokens: bool = True,
    progress: bool = False,
    laws: PositionLaws | None = None,
) -> ChainRun:
    r"""Simulate speculative decoding, teacher-forced, over a recorded trajectory.

    The distributions at each position come from the recording regardless of the emitted
    text (teacher forcing; see the module docstring). Per round: :math:`m_s = \min(m, T-1-s)`
    drafts, N accepted (prefix), N + 1 emitted tokens (the last one the recovery sample at the
    first rejection, or the bonus drawn from q when all :math:`m_s` are accepted),
    :math:`m_s - N` rejected drafts.

    Parameters
    ----------
    rule : str or Rule
        Any registered rule (q verifier = ``target_probs``, p drafter = ``draft_probs``).
    trajectory : Trajectory
        The recorded (q_t, p_t) pairs.
    m : int
        Draft length, >= 1.
    n_runs : int
        Independent runs over the same trajectory, >= 1.
    rng : int, numpy.random.Generator or None
        Seed or generator.
    record_tokens : bool
        Keep the emitted text (``ChainRun.tokens``).
    progress : bool
        Show a tqdm progress bar over positions.
    laws : PositionLaws, optional
        Precomputed :func:`position_laws` (saves the one-step analysis).

    Returns
    -------
    ChainRun
    """
    from tqdm.auto import tqdm

    m = _positive_int(m, "m")
    n_runs = _positive_int(n_runs, "n_runs")
    rule = get_rule(rule)
    rng = random_generator(rng, "rng")
    laws = position_laws(rule, trajectory) if laws is None else laws
    T = trajectory.length
    m_draft = m
    m = longest_round(m, T)  # no round drafts more; arrays of this size only
    # Per (run, position): accept flag and token from the exact joint law (module docstring).
    joint = np.concatenate([laws.accept_joint, laws.reject_joint], axis=1)
    idx = _sample_rows(np.cumsum(joint, axis=1), rng.random((n_runs, T)))
    V = trajectory.vocab_size
    accept = idx < V
    tok = np.where(accept, idx, idx - V)
    bonus = _sample_rows(np.cumsum(laws.target_probs, axis=1), rng.random((n_runs, T)))
    acc_pad = np.concatenate([accept, np.zeros((n_runs, m), dtype=bool)], axis=1)
    alpha_pad = np.concatenate([laws.alpha, np.zeros(m)])

    s = np.zeros(n_runs, dtype=np.int64)
    is_bonus = np.zeros((n_runs, T), dtype=bool)
    rec = {k: [] for k in ("run", "start", "drafts", "accepted", "noncausal")}
    runs = np.arange(n_runs)
    j = np.arange(m)
    with tqdm(total=T, desc=f"{rule.name} (teacher-forced)", disable=not progress, leave=False) as bar:
        done = 0
        while True:
            active = s < T
            if not active.any():
                break
            r, st = runs[active], s[active]
            ms = np.minimum(m, T - 1 - st)
            window = acc_pad[r[:, None], st[:, None] + j] & (j < ms[:, None])
            N = np.cumprod(window, axis=1).sum(axis=1)
            after = (j > N[:, None]) & (j < ms[:, None])
            extra = (rng.random((len(r), m)) < alpha_pad[st[:, None] + j]) & after
            nc = N + extra.sum(axis=1)
            full = N == ms
            is_bonus[r[full], (st + ms)[full]] = True
            for key, val in (("run", r), ("start", st), ("drafts", ms), ("accepted", N), ("noncausal", nc)):
                rec[key].append(val)
            s[active] = st + N + 1
            low = int(min(s.min(), T))
            bar.update(low - done)
            done = low
    cat = {k: np.concatenate(v).astype(np.int64) for k, v in rec.items()}
    order = np.lexsort((cat["start"], cat["run"]))
    tokens = np.where(is_bonus, bonus, tok) if record_tokens else None
    return ChainRun(
        repr(rule),
        m_draft,
        T,
        n_runs,
        cat["run"][order],
        cat["start"][order],
        cat["drafts"][order],
        cat["accepted"][order],
        cat["noncausal"][order],
        is_bonus,
        tokens,
    )


#: Kept under its old name for the modules that import it.
_positive_int = positive_int


def longest_round(m: int, length: int) -> int:
    r"""The most drafts any round of a trajectory of ``length`` positions can hold.

    A round starting at position s drafts :math:`m_s = \min(m, T - 1 - s) \le T - 1`
    tokens, so per-position totals have :math:`\min(m, \max(T - 1, 1))` entries: a draft
    length far beyond the trajectory (``m = 10**9``) allocates nothing of its size.
    """
    return min(m, max(length - 1, 1))
