r"""Methods compared at equal sequence-level divergence: AL at several draft lengths.

Every method is calibrated to the same mean per-token divergence :math:`\epsilon` of what it
emits, :math:`\frac1N\sum_t KL(h_t\|q_t)` over the N positions of a corpus of teacher-forced
trajectories (with single-token steps this is the sequence-level :math:`KL(P\|Q)/N` exactly,
by the chain rule; :mod:`cactus_theory.solvers._sequence`):

=========================================  =====================================================
method                                     knob and how it is set
=========================================  =====================================================
``cactus-taylor, one delta``               one delta for the corpus whose mean emitted KL is eps
                                           (:func:`~cactus_theory.analysis.calibration.global_delta`)
``cactus-taylor, delta per position``      each position's delta meets KL(h_alg||q) <= L, one
                                           level L for the corpus (``cactus-calibrated`` at L)
``mentored-kl, one D per position``        the acceptance-optimal target with KL <= D at each
                                           step, one D for the corpus
``offline optimum, lambda per trajectory`` :func:`~cactus_theory.solvers._sequence.solve_sequence_budget`
                                           on each trajectory (T eps each; sees its future)
``sequence-budget-kl, one lambda``         one multiplier for the corpus (the pooled optimum:
                                           :math:`\sum_t` over the whole corpus <= N eps)
``sequence-budget-kl, held-out lambda +    lambda calibrated on the other half of the
account``                                  trajectories, run with the budget account
                                           (cap = budget left): <= T eps on every trajectory
=========================================  =====================================================

The per-position methods cap every position at one level (set so that the mean is eps); the
sequence-level ones spend the budget where it buys most acceptance. Every method's acceptance
is at most the pooled optimum's (Theorem 1 bounds each position by the frontier at its own
divergence, and the pooled optimum maximises the sum of frontiers within N eps). AL at draft length m is the exact
teacher-forced expectation (:func:`cactus_theory.simulate._exact.exact_chain`, bonus not
counted); with m-token drafts the bonus positions are emitted from q, so the chain's exact
upper bound :math:`\sum_t(1-b_t)KL(h_t\|q_t)` on the sequence KL is reported too.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, h_t
the emitted law at position t, :math:`\epsilon` per-token budget, :math:`\lambda` multiplier.

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._search import bisect_interval
from .._validation import as_budget
from ..analysis.calibration import _DELTA_CAP, _calibrate_rows, _saturation_delta, _spike_for, global_delta
from ..analysis.one_step import emitted_distribution
from ..rules import SpikePlan
from ..solvers import budget_account, saturation_budget, solve_mentored, solve_sequence_budget
from ..solvers.internal import LARGEST_FINITE
from ._chain import PositionLaws, Trajectory
from ._exact import exact_chain, sequence_divergence
from ._metrics import compute_metrics, pool_totals

__all__ = ["SequenceBudgetComparison", "compare_sequence_budget", "target_laws", "METHODS", "DRAFT_LENGTHS"]

#: Draft lengths of the comparison (the paper's main tables use m = 20).
DRAFT_LENGTHS = (2, 4, 8, 20)

METHODS = (
    "cactus-taylor, one delta",
    "cactus-taylor, delta per position",
    "mentored-kl, one D per position",
    "offline optimum, lambda per trajectory",
    "sequence-budget-kl, one lambda",
    "sequence-budget-kl, held-out lambda + account",
)


@dataclass(frozen=True)
class SequenceBudgetComparison:
    r"""The methods of :data:`METHODS` on one corpus at one per-token budget eps.

    Attributes
    ----------
    label : str
        What the corpus is.
    eps : float
        The per-token budget.
    draft_lengths : tuple of int
        The m of the AL columns.
    positions, trajectories : int
        N and the number of trajectories.
    methods : tuple of str
        :data:`METHODS`.
    knobs : tuple of str
        Each method's calibrated knob, in words.
    acceptance : ndarray, shape (M,)
        Mean one-step acceptance :math:`\alpha_t` over positions.
    kl_per_token : ndarray, shape (M,)
        :math:`\frac1N\sum_t KL(h_t\|q_t)` (the sequence KL per token with single-token steps).
    kl_worst_trajectory : ndarray, shape (M,)
        The largest per-token KL of one trajectory (the account keeps it <= eps).
    al : ndarray, shape (M, len(draft_lengths))
        Exact AL_m (bonus not counted), pooled over trajectories.
    kl_upper : ndarray, shape (M, len(draft_lengths))
        The chain's exact upper bound on the sequence KL per token at each m.

    Symbols: q verifier, p drafter, h_t emitted. Source: Hao & Mou, ICLR 2026, Theorem 3.
    """

    label: str
    eps: float
    draft_lengths: tuple
    positions: int
    trajectories: int
    methods: tuple
    knobs: tuple
    acceptance: np.ndarray
    kl_per_token: np.ndarray
    kl_worst_trajectory: np.ndarray
    al: np.ndarray
    kl_upper: np.ndarray

    def rows(self) -> list[dict]:
        """One dict per method: name, knob, acceptance, KL per token, AL_m and KL upper per m."""
        out = []
        for i, name in enumerate(self.methods):
            row = dict(
                method=name,
                knob=self.knobs[i],
                acceptance=float(self.acceptance[i]),
                kl_per_token=float(self.kl_per_token[i]),
                kl_worst_trajectory=float(self.kl_worst_trajectory[i]),
            )
            for j, m in enumerate(self.draft_lengths):
                row[f"al_{m}"] = float(self.al[i, j])
                row[f"kl_upper_{m}"] = float(self.kl_upper[i, j])
            out.append(row)
        return out

    def to_dict(self) -> dict:
        """JSON-ready: the corpus, eps and :meth:`rows`."""
        return dict(
            label=self.label,
            eps=self.eps,
            draft_lengths=list(self.draft_lengths),
            positions=self.positions,
            trajectories=self.trajectories,
            rows=self.rows(),
        )


def target_laws(target_probs, draft_probs, emitted) -> PositionLaws:
    r"""Per-position laws of SpS against a target o (Theorem 1): o is emitted exactly.

    :math:`\alpha_t = \sum_x\min(p_{t,x}, o_{t,x})`, accepted-and-emitted
    :math:`\min(p_t, o_t)`, rejected-and-recovered :math:`o_t - \min(p_t, o_t)`.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026, Theorem 1.
    """
    q, p, o = (np.asarray(x, dtype=np.float64) for x in (target_probs, draft_probs, emitted))
    acc = np.minimum(p, o)
    return PositionLaws(acc.sum(-1), acc, np.clip(o - acc, 0.0, None), o, q)


def _kl(h, q):
    from ..divergences import get_divergence

    return np.maximum(np.asarray(get_divergence("kl").unchecked(h, q), dtype=np.float64), 0.0)


def _level_for_mean(caps, eps):
    r"""The per-position level L with :math:`\mathrm{mean}_t \min(L, c_t) = \epsilon` (``inf``
    when even :math:`\mathrm{mean}\, c_t \le \epsilon`): bisection, the mean is continuous and
    nondecreasing in L."""
    caps = np.asarray(caps, dtype=np.float64)
    if float(np.mean(caps)) <= eps:
        return math.inf

    def over(level):  # the mean at this level exceeds eps (NaN too)
        return not float(np.mean(np.minimum(level, caps))) <= eps

    return bisect_interval(over, 0.0, float(np.max(caps)), 200).value


def _plan_laws(plan) -> PositionLaws:
    a = np.clip(np.asarray(plan.accept_probs(), dtype=np.float64), 0.0, 1.0)
    acc = plan.draft_probs * a
    h = np.asarray(emitted_distribution(plan), dtype=np.float64)
    return PositionLaws(acc.sum(-1), acc, np.clip(h - acc, 0.0, None), h, plan.target_probs)


def _split(laws: PositionLaws, bounds):
    return [
        PositionLaws(
            *(
                x[a:b]
                for x in (laws.alpha, laws.accept_joint, laws.reject_joint, laws.emitted, laws.target_probs)
            )
        )
        for a, b in zip(bounds[:-1], bounds[1:])
    ]


def _pad(trajs):
    """Trajectories on one vocabulary width (zero columns appended: no mass, no effect)."""
    W = max(t.vocab_size for t in trajs)
    pad = lambda x: np.pad(x, ((0, 0), (0, W - x.shape[1])))  # noqa: E731
    return [
        t if t.vocab_size == W else Trajectory(pad(t.target_probs), pad(t.draft_probs), label=t.label)
        for t in trajs
    ]


def compare_sequence_budget(
    trajectories, eps, draft_lengths=DRAFT_LENGTHS, label: str = ""
) -> SequenceBudgetComparison:
    r"""Calibrate every method of :data:`METHODS` to the per-token budget eps and compare them.

    Each knob is set so that the method's mean per-token emitted KL over the corpus is eps:
    Cactus's one delta by :func:`~cactus_theory.analysis.calibration.global_delta`; the
    per-position methods by the per-position level L with :math:`\mathrm{mean}_t
    \min(L, s_t) = \epsilon` (:math:`s_t` the largest divergence a position can reach: the
    frontier's saturation budget for Mentored, the emitted KL at the saturation delta for
    Cactus, whose emitted KL is nondecreasing in delta on every pair tested); the offline
    optimum on each trajectory (T eps each); one lambda on the corpus (N eps in all); the
    online rule with the lambda of the other half of the trajectories and the budget
    account (at most T eps per trajectory). The table reports the KL actually reached.

    Parameters
    ----------
    trajectories : sequence of Trajectory
        At least 2 (the held-out lambda of one half is calibrated on the other), each of
        length >= 2. Different vocabulary widths are padded with empty columns.
    eps : float
        Per-token budget > 0 on the emitted KL.
    draft_lengths : sequence of int
        Draft lengths m of the AL columns.
    label : str
        Describes the corpus.

    Returns
    -------
    SequenceBudgetComparison

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026, Theorems 1 and 3; Tran-Thien (2023).
    """
    trajs = list(trajectories)
    if len(trajs) < 2 or any(not isinstance(t, Trajectory) or t.length < 2 for t in trajs):
        raise ValueError("trajectories: need at least 2 Trajectory objects of length >= 2")
    eps = as_budget(eps, "eps")
    if eps <= 0:
        raise ValueError(f"eps: must be > 0, got {eps}")
    ms = tuple(int(m) for m in draft_lengths)
    trajs = _pad(trajs)
    Q = np.concatenate([t.target_probs for t in trajs])
    P = np.concatenate([t.draft_probs for t in trajs])
    N = Q.shape[0]
    bounds = np.concatenate([[0], np.cumsum([t.length for t in trajs])])

    laws, knobs = {}, {}
    _cactus_laws(Q, P, eps, bounds, laws, knobs)
    # Mentored, D per position meeting a common level
    m_level = _level_for_mean(saturation_budget(Q, P, "kl"), eps)
    D = m_level if math.isfinite(m_level) else LARGEST_FINITE
    laws[METHODS[2]] = _split(target_laws(Q, P, solve_mentored(Q, P, D, "kl").target), bounds)
    knobs[METHODS[2]] = f"D = {m_level:.4g} per position"
    _lambda_laws(trajs, Q, P, eps, bounds, laws, knobs)
    acc, klt, worst, al, klu = _scores(trajs, laws, ms, N)
    return SequenceBudgetComparison(
        label,
        float(eps),
        ms,
        N,
        len(trajs),
        METHODS,
        tuple(knobs[n] for n in METHODS),
        acc,
        klt,
        worst,
        al,
        klu,
    )


def _cactus_laws(Q, P, eps, bounds, laws, knobs):
    """The two Cactus-Taylor methods' laws per trajectory and knobs: one delta for the
    corpus, and a delta per position meeting a common level (filled into ``laws``, ``knobs``)."""
    # Cactus-Taylor, one delta for the corpus
    gd = global_delta(Q, P, eps, statistic="mean", base="taylor")
    laws[METHODS[0]] = _split(_plan_laws(SpikePlan(Q, P, _spike_for(Q, gd.delta))), bounds)
    knobs[METHODS[0]] = f"delta = {gd.delta:.4g}"
    # Cactus-Taylor, delta per position meeting a common level L
    sat = _saturation_delta(Q, "taylor")
    sat = np.where(np.isfinite(sat), sat, _DELTA_CAP)
    top = _kl(_plan_laws(SpikePlan(Q, P, _spike_for(Q, sat[:, None]))).emitted, Q)
    level = _level_for_mean(top, eps)
    cal = _calibrate_rows(Q, P, min(level, float(np.max(top))), base="taylor").delta
    cal = np.where(np.isfinite(cal), cal, _DELTA_CAP)
    laws[METHODS[1]] = _split(_plan_laws(SpikePlan(Q, P, _spike_for(Q, cal[:, None]))), bounds)
    knobs[METHODS[1]] = f"KL(h_alg||q) <= {level:.4g} per position"


def _lambda_laws(trajs, Q, P, eps, bounds, laws, knobs):
    """The sequence-budget methods' laws and knobs: the offline optimum per trajectory, one
    lambda for the corpus, and the online rule with the other half's lambda (filled in)."""
    # the offline optimum of each trajectory
    own = [solve_sequence_budget(t.target_probs, t.draft_probs, eps) for t in trajs]
    laws[METHODS[3]] = [target_laws(t.target_probs, t.draft_probs, o.emitted) for t, o in zip(trajs, own)]
    knobs[METHODS[3]] = f"lambda per trajectory, median {np.median([o.lam for o in own]):.4g}"
    # one lambda for the corpus (the pooled optimum)
    pooled = solve_sequence_budget(Q, P, eps)
    laws[METHODS[4]] = _split(target_laws(Q, P, pooled.emitted), bounds)
    knobs[METHODS[4]] = f"lambda = {pooled.lam:.4g}"
    # online: lambda from the other half of the trajectories, budget account per trajectory
    halves = [list(range(0, len(trajs), 2)), list(range(1, len(trajs), 2))]
    held, lams = {}, []
    for k, half in enumerate(halves):
        other = halves[1 - k]
        lam_o = solve_sequence_budget(
            Q[np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in other])],
            P[np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in other])],
            eps,
        ).lam
        lams.append(lam_o)
        held.update({i: lam_o for i in half})
    laws[METHODS[5]] = [
        target_laws(
            t.target_probs, t.draft_probs, budget_account(t.target_probs, t.draft_probs, held[i], eps)[0]
        )
        for i, t in enumerate(trajs)
    ]
    knobs[METHODS[5]] = "lambda = " + "/".join(f"{x:.4g}" for x in lams) + " (other half), cap = budget left"


def _scores(trajs, laws, ms, N):
    """Per method: acceptance, emitted KL per token, the worst trajectory's KL per token, and
    per draft length AL_m and the sequence KL's upper bound per token."""
    M, K = len(METHODS), len(ms)
    acc, klt, worst = np.zeros(M), np.zeros(M), np.zeros(M)
    al, klu = np.zeros((M, K)), np.zeros((M, K))
    for i, name in enumerate(METHODS):
        ls = laws[name]
        acc[i] = sum(float(x.alpha.sum()) for x in ls) / N
        per = [float(_kl(x.emitted, x.target_probs).sum()) for x in ls]
        klt[i] = sum(per) / N
        worst[i] = max(s / x.alpha.shape[0] for s, x in zip(per, ls))
        for j, m in enumerate(ms):
            chains = [exact_chain(None, t, m, laws=x) for t, x in zip(trajs, ls)]
            al[i, j] = compute_metrics(pool_totals([c.totals for c in chains]))["al_paper"].value
            klu[i, j] = sum(sequence_divergence(c).kl_upper for c in chains) / N
    return acc, klt, worst, al, klu
