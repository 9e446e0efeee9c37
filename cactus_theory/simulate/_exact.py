r"""Exact expectations of the chain metrics, and the sequence-level divergence, teacher-forced.

**Teacher forced** (see :mod:`.chain`): the distributions at position t come from the recorded
trajectory whatever was emitted before. Symbols: q verifier (``target_probs``), p drafter
(``draft_probs``), n drafted token, :math:`a_t(n)` the rule's acceptance at position t,
:math:`\alpha_t = \sum_n p_t(n) a_t(n)`, :math:`h_t = h_{alg,t}` the one-step emitted law
(paper, Theorem 3), m the draft length, T the trajectory length.

Dynamic programme over where rounds start
------------------------------------------
Let :math:`\pi_s` be the probability that a round starts at position s (:math:`\pi_0 = 1`).
That round drafts :math:`m_s = \min(m, T-1-s)` tokens; acceptance events at different
positions are independent (fresh drafts and uniforms), so its accepted prefix N satisfies
:math:`P(N \ge j) = S_j = \prod_{i<j} \alpha_{s+i}` and the next round starts at s + N + 1:

.. math:: \pi_{s+j+1} \mathrel{+}= \pi_s P(N = j), \quad
          P(N = j) = S_j(1 - \alpha_{s+j})\ (j < m_s), \quad P(N = m_s) = S_{m_s}.

Expected totals: rounds :math:`E[R] = \sum_s \pi_s`, accepted :math:`\sum_s \pi_s \sum_{j\ge1}
S_j`, drafts :math:`\sum_s \pi_s m_s`, vLLM V0's non-causal count
:math:`\sum_s \pi_s \sum_{j<m_s} \alpha_{s+j}`, per-position and histogram counts likewise,
and the probability that t is a bonus position :math:`b_t = \sum_s \pi_s S_{m_s} [s + m_s = t]`.
O(T m) time. The ratio metrics of :mod:`.metrics` are then ratios of these expectations: the
limits of the simulated (pooled) values.

Sequence-level divergence (what the per-step sum is)
-----------------------------------------------------
Let P be the law of the emitted text :math:`x_{0..T-1}` and :math:`Q = \prod_t q_t` the
verifier's. Given :math:`x_{<t}`, position t is a bonus position with some probability
:math:`\beta_t(x_{<t})` (emitted from q_t), and otherwise a drafted position whose token is a
fresh :math:`h_t` sample, so :math:`P(\cdot | x_{<t}) = \beta_t q_t + (1-\beta_t) h_t`, with
:math:`E_P[\beta_t] = b_t`. The chain rule
:math:`KL(P\|Q) = \sum_t E_P\, KL(P(\cdot|x_{<t}) \| q_t)`, convexity of KL in its first
argument (upper) and Jensen over :math:`x_{<t}` (lower) give

.. math:: \sum_t KL\big(b_t q_t + (1-b_t) h_t \,\big\|\, q_t\big) \;\le\; KL(P\|Q) \;\le\;
          \sum_t (1 - b_t)\, KL(h_t \| q_t) \;\le\; \sum_t KL(h_t \| q_t).

So the sum of per-step expected divergences is an **upper bound**, not an identity: bonus
positions are emitted from q itself (the last position always is, :math:`b_{T-1} = 1`), and
where a position's role is uncertain given the text the mixture is closer to q than its
parts. For TV the same argument gives
:math:`\max_t (1-b_t) TV(h_t, q_t) \le TV(P, Q) \le \sum_t (1 - b_t) TV(h_t, q_t)`.
:func:`sequence_kl_monte_carlo` estimates :math:`KL(P\|Q)` itself (an unbiased estimate with a
standard error) by evaluating :math:`\log P(x)` with a forward algorithm over the hidden
round position; :func:`sequence_kl_brute_force` computes it exactly for tiny V and T.

References
----------
Hao & Mou, ICLR 2026, Theorem 3 (per-step emitted law); Leviathan et al. 2023 (i.i.d. model
that this DP generalizes to position-dependent acceptance).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..divergences import get_divergence
from ..rules import get_rule
from ._chain import PositionLaws, Trajectory, _positive_int, longest_round, position_laws
from ._metrics import ChainTotals, Estimate

__all__ = [
    "ExactChain",
    "exact_chain",
    "brute_force_chain",
    "SequenceDivergence",
    "sequence_divergence",
    "sequence_log_prob",
    "sequence_kl_monte_carlo",
    "sequence_kl_brute_force",
]


@dataclass(frozen=True)
class ExactChain:
    r"""Exact expectations for one rule over one trajectory (teacher-forced).

    Attributes
    ----------
    totals : ChainTotals
        Expected totals (one unit, ``exact=True``).
    round_start : ndarray, shape (T + 1,)
        :math:`\pi_s`; ``round_start[T] = 1`` (every run ends exactly at T).
    bonus_prob : ndarray, shape (T,)
        :math:`b_t`, probability that position t is emitted as a bonus token (from q_t).
    laws : PositionLaws
        The per-position one-step laws (alpha, emitted, ...).
    m : int
        Draft length.
    """

    totals: ChainTotals
    round_start: np.ndarray
    bonus_prob: np.ndarray
    laws: PositionLaws
    m: int


def _empty_totals(m: int) -> dict:
    return dict(
        rounds=0.0,
        tokens=0.0,
        accepted=0.0,
        drafts=0.0,
        noncausal=0.0,
        exposure=np.zeros(m),
        accepted_pos=np.zeros(m),
        reached=np.zeros(m),
        hist=np.zeros(m + 1),
    )


def _as_totals(acc: dict) -> ChainTotals:
    one = lambda x: np.asarray(x, dtype=np.float64).reshape(1, *np.shape(x))  # noqa: E731
    return ChainTotals(
        one(acc["rounds"]).reshape(1),
        one(acc["tokens"]).reshape(1),
        one(acc["accepted"]).reshape(1),
        one(acc["drafts"]).reshape(1),
        one(acc["noncausal"]).reshape(1),
        one(acc["exposure"]),
        one(acc["accepted_pos"]),
        one(acc["reached"]),
        one(acc["hist"]),
        exact=True,
    )


def exact_chain(
    rule,
    trajectory: Trajectory,
    m: int,
    *,
    laws: PositionLaws | None = None,
    drafting: str = "sample",
    draft_top_k=None,
) -> ExactChain:
    r"""Exact expected totals by the dynamic programme over round starts (module docstring).

    Teacher-forced: the distributions along the trajectory do not depend on the emitted text.

    Parameters
    ----------
    rule : str or Rule
        Any registered rule (q verifier, p drafter, n drafted token).
    trajectory : Trajectory
        Recorded (q_t, p_t) pairs.
    m : int
        Draft length >= 1.
    laws : PositionLaws, optional
        Precomputed per-position laws (their drafting policy is the one they were made with).
    drafting : {"sample", "argmax", "top_k"}
        How each position's draft is drawn from its drafter row (:func:`~._chain.position_laws`);
        only without ``laws``.
    draft_top_k : int, optional
        k for ``drafting="top_k"``.

    Returns
    -------
    ExactChain

    Raises
    ------
    ValueError
        Naming ``drafting`` when it (or ``draft_top_k``) is given together with ``laws``.
    """
    m = _positive_int(m, "m")
    if laws is not None and (drafting != "sample" or draft_top_k is not None):
        raise ValueError(
            "drafting: laws fix the drafting policy they were made with; pass drafting to position_laws instead"
        )
    if laws is None:
        laws = position_laws(get_rule(rule), trajectory, drafting=drafting, draft_top_k=draft_top_k)
    alpha = laws.alpha
    T = len(alpha)
    pi = np.zeros(T + 1)
    pi[0] = 1.0
    bonus = np.zeros(T)
    acc = _empty_totals(longest_round(m, T))
    for s in range(T):
        w = pi[s]
        if w == 0.0:
            continue
        ms = min(m, T - 1 - s)
        a = alpha[s : s + ms]
        S = np.concatenate([[1.0], np.cumprod(a)])  # S[j] = P(N >= j)
        PN = np.concatenate([S[:-1] * (1.0 - a), S[-1:]])  # P(N = j), j = 0..ms
        pi[s + 1 : s + ms + 2] += w * PN
        bonus[s + ms] += w * S[ms]
        acc["rounds"] += w
        acc["tokens"] += w * float(np.dot(PN, np.arange(ms + 1) + 1))
        acc["accepted"] += w * float(S[1:].sum())
        acc["drafts"] += w * ms
        acc["noncausal"] += w * float(a.sum())
        acc["exposure"][:ms] += w
        acc["accepted_pos"][:ms] += w * S[1:]
        acc["reached"][:ms] += w * S[:-1]
        acc["hist"][: ms + 1] += w * PN
    return ExactChain(_as_totals(acc), pi, bonus, laws, m)


def brute_force_chain(
    rule, trajectory: Trajectory, m: int, *, laws: PositionLaws | None = None
) -> ExactChain:
    r"""The same expectations by enumerating all :math:`2^T` accept patterns (test oracle).

    Each pattern (one accept flag per position, independent Bernoulli(:math:`\alpha_t`)) fixes
    every round; its probability weights the totals. The non-causal count of a pattern adds
    the expected :math:`\alpha` of the drafts after the first rejection of each round. T <= 16.

    Parameters
    ----------
    rule, trajectory, m, laws
        As :func:`exact_chain` (teacher-forced).

    Returns
    -------
    ExactChain
        Same fields as :func:`exact_chain`, computed independently of the DP.

    Raises
    ------
    ValueError
        Naming ``trajectory`` when T > 16.
    """
    m = _positive_int(m, "m")
    laws = position_laws(get_rule(rule), trajectory) if laws is None else laws
    alpha = laws.alpha
    T = len(alpha)
    if T > 16:
        raise ValueError(f"trajectory: brute force enumerates 2^T patterns; T = {T} > 16")
    acc = _empty_totals(longest_round(m, T))
    pi = np.zeros(T + 1)
    bonus = np.zeros(T)
    for flags in itertools.product((False, True), repeat=T):
        f = np.array(flags)
        w = float(np.prod(np.where(f, alpha, 1.0 - alpha)))
        if w == 0.0:
            continue
        s = 0
        while s < T:
            pi[s] += w
            ms = min(m, T - 1 - s)
            N = 0
            while N < ms and f[s + N]:
                N += 1
            acc["rounds"] += w
            acc["tokens"] += w * (N + 1)
            acc["accepted"] += w * N
            acc["drafts"] += w * ms
            acc["noncausal"] += w * (N + float(alpha[s + N + 1 : s + ms].sum()))
            acc["exposure"][:ms] += w
            acc["accepted_pos"][:N] += w
            acc["reached"][: min(N + 1, ms)] += w
            acc["hist"][N] += w
            if N == ms:
                bonus[s + ms] += w
            s += N + 1
        pi[T] += w
    return ExactChain(_as_totals(acc), pi, bonus, laws, m)


@dataclass(frozen=True)
class SequenceDivergence:
    r"""Bounds on the divergence of the emitted text from the verifier's (teacher-forced).

    Attributes
    ----------
    kl_lower : float
        :math:`\sum_t KL(b_t q_t + (1-b_t) h_t \| q_t)` (a lower bound on :math:`KL(P\|Q)`).
    kl_upper : float
        :math:`\sum_t (1-b_t) KL(h_t \| q_t)` (an upper bound).
    kl_per_step_sum : float
        :math:`\sum_t KL(h_t \| q_t)`: the naive sum of per-step divergences, a looser upper
        bound (not an identity).
    tv_lower, tv_upper : float
        :math:`\max_t (1-b_t) TV(h_t, q_t)` and :math:`\sum_t (1-b_t) TV(h_t, q_t)`.
    """

    kl_lower: float
    kl_upper: float
    kl_per_step_sum: float
    tv_lower: float
    tv_upper: float


def sequence_divergence(chain: ExactChain) -> SequenceDivergence:
    r"""Exact bounds on the sequence-level KL and TV of the emitted text from the verifier's.

    .. math:: \sum_t KL(b_t q_t + (1-b_t) h_t \| q_t) \le KL(P\|Q) \le
              \sum_t (1-b_t) KL(h_t \| q_t) \le \sum_t KL(h_t \| q_t)

    (derivation in the module docstring; q verifier, :math:`h_t` the one-step emitted law,
    :math:`b_t` the bonus probability of position t; teacher-forced).

    Parameters
    ----------
    chain : ExactChain
        From :func:`exact_chain`.

    Returns
    -------
    SequenceDivergence
        ``+inf`` where a per-step divergence is infinite (h puts mass outside supp(q) at a
        position that is not surely a bonus); never NaN.

    References
    ----------
    Chain rule of KL (Cover & Thomas, Thm 2.5.3); Hao & Mou, ICLR 2026, Theorem 3.
    """
    q, h, b = chain.laws.target_probs, chain.laws.emitted, chain.bonus_prob
    kl, tv = get_divergence("kl"), get_divergence("tv")
    kl_t = np.asarray(kl.unchecked(h, q), dtype=np.float64)
    tv_t = np.asarray(tv.unchecked(h, q), dtype=np.float64)
    marg = b[:, None] * q + (1.0 - b[:, None]) * h
    lower = float(np.sum(kl.unchecked(marg, q)))
    w = 1.0 - b
    # (1 - b_t) KL_t with 0 * inf = 0: a position that is surely a bonus adds nothing
    weighted = np.multiply(w, kl_t, out=np.zeros_like(kl_t), where=w > 0)
    return SequenceDivergence(
        lower, float(weighted.sum()), float(kl_t.sum()), float(np.max(w * tv_t)), float(np.sum(w * tv_t))
    )


def sequence_log_prob(laws: PositionLaws, m: int, tokens) -> np.ndarray:
    r""":math:`\log P(x)` of emitted texts under the chain, by a forward algorithm.

    The hidden state at position t is the index j of t inside its round (round start
    s = t - j, :math:`m_s = \min(m, T-1-s)`): a bonus position when :math:`j = m_s`
    (emits from q_t, next state 0), else emits x with weight :math:`p_t(x) a_t(x)` (next state
    j + 1) or with weight :math:`h_t(x) - p_t(x)a_t(x)` (next state 0). Teacher-forced.

    Parameters
    ----------
    laws : PositionLaws
        From :func:`~cactus_theory.simulate._chain.position_laws`.
    m : int
        Draft length.
    tokens : array_like of int, shape (R, T)
        Emitted texts.

    Returns
    -------
    ndarray, shape (R,)
        ``-inf`` for a text the chain cannot emit.
    """
    m = _positive_int(m, "m")
    x = np.asarray(tokens, dtype=np.int64)
    if x.ndim == 1:
        x = x[None]
    R, T = x.shape
    if T != len(laws.alpha):
        raise ValueError(f"tokens: length {T} != trajectory length {len(laws.alpha)}")
    m = longest_round(m, T)  # a round holds at most T - 1 drafts: the same states
    f = np.zeros((R, m + 1))
    f[:, 0] = 1.0
    logz = np.zeros(R)
    j = np.arange(m + 1)
    with np.errstate(divide="ignore"):
        for t in range(T):
            xt = x[:, t]
            ms = np.minimum(m, T - 1 - (t - j))  # per state j
            valid = (j <= t) & (j <= ms)
            is_b = valid & (j == ms)
            is_d = valid & (j < ms)
            q_x = laws.target_probs[t, xt][:, None]
            acc_x = laws.accept_joint[t, xt][:, None]
            rej_x = laws.reject_joint[t, xt][:, None]
            new = np.zeros_like(f)
            new[:, 0] = np.sum(f * np.where(is_b, q_x, 0.0), axis=1) + np.sum(
                f * np.where(is_d, rej_x, 0.0), axis=1
            )
            new[:, 1:] = (f * np.where(is_d, acc_x, 0.0))[:, :-1]
            z = new.sum(axis=1)
            logz += np.log(z)
            f = new / np.where(z > 0, z, 1.0)[:, None]
    return logz


def sequence_kl_monte_carlo(laws: PositionLaws, m: int, tokens) -> Estimate:
    r"""Unbiased estimate of :math:`KL(P\|Q)` from texts sampled from the chain.

    :math:`\widehat{KL} = \mathrm{mean}_r[\log P(x^{(r)}) - \sum_t \log q_t(x^{(r)}_t)]` with its
    standard error (teacher-forced; ``tokens`` from :func:`~.chain.simulate_chain`).

    Parameters
    ----------
    laws : PositionLaws
        The rule's per-position laws on the trajectory.
    m : int
        Draft length.
    tokens : array_like of int, shape (R, T)
        Texts sampled from the chain (``ChainRun.tokens``).

    Returns
    -------
    Estimate
        ``inf`` when a text has probability 0 under the verifier.
    """
    x = np.asarray(tokens, dtype=np.int64)
    lp = sequence_log_prob(laws, m, x)
    T = x.shape[1]
    with np.errstate(divide="ignore"):
        lq = np.log(laws.target_probs[np.arange(T)[None, :], x]).sum(axis=1)
    d = lp - lq
    if np.any(np.isposinf(d)):
        return Estimate(float("inf"), float("nan"))
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return Estimate(float(d.mean()), se)


def sequence_kl_brute_force(laws: PositionLaws, m: int) -> float:
    r"""Exact :math:`KL(P\|Q)` by enumerating all :math:`V^T` texts (test oracle).

    :math:`\sum_x P(x) \log(P(x)/Q(x))` with :math:`P` from :func:`sequence_log_prob` and
    :math:`Q(x) = \prod_t q_t(x_t)` (teacher-forced).

    Parameters
    ----------
    laws : PositionLaws
        Per-position laws (V and T from their shape).
    m : int
        Draft length.

    Returns
    -------
    float
        ``inf`` when P charges a text that Q does not.

    Raises
    ------
    ValueError
        Naming ``trajectory`` when :math:`V^T > 2^{16}`.
    """
    T, V = laws.target_probs.shape
    if V**T > 2**16:
        raise ValueError(f"trajectory: V^T = {V}^{T} texts is too many to enumerate")
    texts = np.array(list(itertools.product(range(V), repeat=T)), dtype=np.int64)
    lp = sequence_log_prob(laws, m, texts)
    pr = np.exp(lp)
    with np.errstate(divide="ignore"):
        lq = np.log(laws.target_probs[np.arange(T)[None, :], texts]).sum(axis=1)
    mask = pr > 0
    if np.any(mask & np.isneginf(lq)):
        return float("inf")
    return float(np.sum(pr[mask] * (lp[mask] - lq[mask])))
