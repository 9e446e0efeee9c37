r"""The relaxed bonus-token policy: the rule applied at the bonus position too, with one more draft.

After a round's :math:`m_s \ge 1` drafts are all accepted, standard speculative decoding emits
the bonus token from the verifier, :math:`x \sim q_{s+m_s}`. The relaxed policy (the arXiv
2607.08690 vLLM overlay's ``relaxed_bonus_token_policy="relaxed_T_qp"``) runs the drafter once
more at that position, drafts :math:`n \sim p_{s+m_s}` and verifies it with the same rule:
accepted, n is emitted; rejected, the rule's recovery is. Either way the round still ends there
with :math:`N + 1` tokens, and the next round starts after it. (A round with no draft, which
only starts at the last position, keeps the verifier's bonus, as the overlay does for rows
without draft tokens.)

Chain-level consequences (teacher-forced; :mod:`.exact` for the round-start programme,
:math:`\pi_s`, :math:`b_t` the probability that t is a bonus position, :math:`\alpha_t` the
rule's acceptance at t, :math:`h_t` its one-step emitted law):

* emitted tokens and round starts are unchanged;
* the accepted drafted tokens gain the accepted bonus drafts:
  :math:`E[\text{accepted}] = \sum_s \pi_s \sum_{j \ge 1} S_j + \sum_t b'_t \alpha_t`, with
  :math:`b'_t = b_t - \pi_{T-1} [t = T-1]` the bonus probability of rounds with a draft; the
  drafts gain :math:`\sum_t b'_t`;
* every position except possibly the last emits :math:`h_t` whatever its role, so the law of
  the text is :math:`\prod_t h_t` but for the last factor,
  :math:`\pi_{T-1} q_{T-1} + (1 - \pi_{T-1}) h_{T-1}`, and the sequence KL is exactly
  :math:`\sum_{t < T-1} KL(h_t \| q_t) + KL(\text{last}\,\|\, q_{T-1})`: the per-step sum
  that :mod:`.exact` shows to be only an upper bound under the standard policy.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, m draft
length.

References
----------
The arXiv 2607.08690 vLLM overlay: ``SpeculativeConfig.relaxed_bonus_token_policy``
(``"target_p"`` standard, ``"relaxed_T_qp"`` relaxed), ``RejectionSampler.apply_relaxed_bonus``
(one conditional post-accept drafter pass, then one accept/residual step of the rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import positive_int, random_generator
from ..divergences import get_divergence
from ..rules import get_rule
from ._chain import PositionLaws, Trajectory, position_laws, trajectory_plan
from ._exact import ExactChain, exact_chain

__all__ = ["RelaxedBonusChain", "relaxed_bonus_chain", "simulate_relaxed_bonus"]


@dataclass(frozen=True)
class RelaxedBonusChain:
    r"""Exact expectations under the relaxed bonus policy (per run, teacher-forced).

    Attributes
    ----------
    standard : ExactChain
        The same rule and trajectory under the standard policy (round starts, bonus laws).
    relaxed_bonus_prob : ndarray, shape (T,)
        :math:`b'_t`: t is the bonus position of a round with a draft (the rule decides there).
    rounds, tokens, accepted, drafts, bonus_accepted : float
        Expected rounds, emitted tokens, accepted drafted tokens (bonus drafts included),
        drafted tokens (bonus drafts included) and accepted bonus drafts. Counting convention:
        the overlay's counters leave the bonus drafts out; its accepted count is
        ``accepted - bonus_accepted``, which equals ``standard``'s accepted drafts.
    emitted : ndarray, shape (T, V)
        The law emitted at each position (:math:`h_t`; the last position mixes in q).
    sequence_kl : float
        :math:`KL(P\|Q)` of the text, exact (module docstring).
    """

    standard: ExactChain
    relaxed_bonus_prob: np.ndarray
    rounds: float
    tokens: float
    accepted: float
    drafts: float
    bonus_accepted: float
    emitted: np.ndarray
    sequence_kl: float

    @property
    def accepted_length(self) -> float:
        """Accepted drafted tokens per round, the accepted bonus drafts included."""
        return self.accepted / self.rounds


def relaxed_bonus_chain(rule, trajectory: Trajectory, m: int, *, laws: PositionLaws | None = None):
    r"""Exact chain expectations of ``rule`` with the relaxed bonus policy (module docstring).

    Parameters
    ----------
    rule : str or Rule
        Any registered rule.
    trajectory : Trajectory
    m : int
        Draft length >= 1 (the bonus draft comes on top).
    laws : PositionLaws, optional
        Precomputed :func:`~cactus_theory.simulate._chain.position_laws`.

    Returns
    -------
    RelaxedBonusChain
    """
    rule = get_rule(rule)
    laws = position_laws(rule, trajectory) if laws is None else laws
    std = exact_chain(rule, trajectory, m, laws=laws)
    T = len(laws.alpha)
    b = std.bonus_prob.copy()
    last_q = float(std.round_start[T - 1])  # a round starting at T - 1 drafts nothing
    b[T - 1] -= last_q
    b = np.clip(b, 0.0, None)
    extra = float(np.dot(b, laws.alpha))
    h, q = laws.emitted, laws.target_probs
    emitted = h.copy()
    emitted[T - 1] = last_q * q[T - 1] + (1.0 - last_q) * h[T - 1]
    kl = get_divergence("kl")
    seq = float(kl.unchecked(emitted, q).sum())
    t = std.totals
    return RelaxedBonusChain(
        std,
        b,
        float(t.rounds[0]),
        float(t.tokens[0]),
        float(t.accepted[0]) + extra,
        float(t.drafts[0]) + float(b.sum()),
        extra,
        emitted,
        seq,
    )


def simulate_relaxed_bonus(rule, trajectory: Trajectory, m: int, *, n_runs: int = 1, rng=None) -> dict:
    """Round-by-round runs with the relaxed bonus policy: fresh drafts from p, the rule's own
    acceptance and recovery (its plan), one more draft at the bonus position. Per-run
    ``accepted`` (bonus drafts included), ``bonus_accepted``, ``rounds``, ``tokens``, ``drafts``
    (shape (n_runs,)) and the emitted ``text`` (n_runs, T). The oracle of
    :func:`relaxed_bonus_chain` (small V: the recoveries of every candidate are precomputed)."""
    m = positive_int(m, "m")
    n_runs = positive_int(n_runs, "n_runs")
    rng = random_generator(rng, "rng")
    plan = trajectory_plan(rule, trajectory)
    q, p = np.asarray(plan.target_probs), np.asarray(plan.draft_probs)
    T, V = q.shape
    a = np.clip(np.asarray(plan.accept_probs()), 0.0, 1.0)
    R = np.stack([np.asarray(plan.recovery_at(np.full(T, n))) for n in range(V)], axis=1)  # (T, V, V)

    def draw(row):
        c = np.cumsum(row)
        return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), V - 1)

    def step(t):
        n = draw(p[t])
        if rng.random() < a[t, n]:
            return n, True
        return draw(R[t, n]), False

    res = {k: np.zeros(n_runs) for k in ("accepted", "bonus_accepted", "rounds", "tokens", "drafts")}
    text = np.full((n_runs, T), -1, dtype=np.int64)
    for r in range(n_runs):
        s = 0
        while s < T:
            ms = min(m, T - 1 - s)
            N = 0
            while N < ms:
                x, ok = step(s + N)
                text[r, s + N] = x
                if not ok:
                    break
                N += 1
            if N == ms:
                if ms >= 1:
                    x, ok = step(s + ms)
                    text[r, s + ms] = x
                    res["bonus_accepted"][r] += ok
                    res["accepted"][r] += ok
                    res["drafts"][r] += 1
                else:
                    text[r, s] = draw(q[s])
            res["accepted"][r] += N
            res["rounds"][r] += 1
            res["tokens"][r] += N + 1
            res["drafts"][r] += ms
            s += N + 1
    res["text"] = text
    return res
