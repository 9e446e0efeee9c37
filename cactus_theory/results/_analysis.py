"""Result types of the analysis layer (:mod:`cactus_theory.analysis`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import Result
from ._front import CalibrationResult


@dataclass(frozen=True)
class OneStepResult(Result):
    """Exact one-step analysis of a rule on (q, p) (:func:`cactus_theory.analysis.analyze`).

    Attributes
    ----------
    rule : str
        Registry name with knobs (``repr`` of the rule).
    accept_probs : ndarray, shape (..., V), or None
        Per-draft acceptance :math:`a_n` (None where only per-row values were kept).
    acceptance : ndarray, shape (...)
        :math:`\\sum_n p_n a_n`.
    emitted : ndarray, shape (..., V), or None
        :math:`h_{alg}` (Theorem 3; None where only per-row values were kept).
    divergences : dict of str to ndarray, shape (...)
        ``D(h_alg || q)`` for each requested divergence (``+inf`` where infinite).
    """

    rule: str
    accept_probs: np.ndarray
    acceptance: np.ndarray
    emitted: np.ndarray
    divergences: dict


@dataclass(frozen=True)
class GlobalDelta(Result):
    """One delta for a corpus (:func:`cactus_theory.analysis.global_delta`).

    Attributes
    ----------
    delta : float
        First crossing of the corpus statistic of :math:`\\Gamma` with eps.
    statistic : str or float
        ``"mean"`` or a quantile level in (0, 1] (1 = the worst position).
    value : float
        The statistic at ``delta`` (<= eps).
    divergences : ndarray, shape (N,)
        :math:`\\Gamma` per position at ``delta``.
    acceptance : ndarray, shape (N,)
        Cactus's acceptance per position at ``delta``.
    status : str
        ``"calibrated"``: the statistic crosses eps at ``delta``; ``"saturated"``: it stays
        within eps up to the saturation delta (``delta`` is the scan's top: the saturation
        delta, or :data:`~cactus_theory.analysis.calibration._DELTA_CAP` where the base never
        saturates).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    delta: float
    statistic: object
    value: float
    divergences: np.ndarray
    acceptance: np.ndarray
    status: str = "calibrated"


@dataclass(frozen=True)
class MentoredComparison(Result):
    """Calibrated Cactus (per position and global) against Mentored decoding at the same eps
    (:func:`cactus_theory.analysis.compare_with_mentored`).

    Attributes
    ----------
    eps : float
    per_position : CalibrationResult
    global_ : GlobalDelta
        One delta with mean divergence (``statistic``) <= eps.
    mentored_acceptance : ndarray, shape (N,)
        Mentored decoding's (optimal) acceptance with budget eps on its emitted distribution.
    summary : dict
        Mean acceptance of the three, mean emitted divergence, and the fraction of positions
        whose emitted divergence exceeds eps (global delta).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    eps: float
    per_position: CalibrationResult
    global_: GlobalDelta
    mentored_acceptance: np.ndarray
    summary: dict


@dataclass(frozen=True)
class KnobCalibration(Result):
    r"""One knob set so that a corpus statistic meets a target
    (:func:`cactus_theory.analysis.calibrate_knob`).

    Attributes
    ----------
    value : float or int
        The knob: the last point of the path from ``start`` with ``statistic <= target``
        (first crossing).
    achieved : float
        ``statistic(value)`` (<= target, except status ``"above"``).
    status : str
        ``"calibrated"``: within ``rtol * target`` of the target; ``"step"``: the statistic
        jumps over the target (a 0/1 rule, an integer knob, or a divergence that becomes
        infinite), ``value`` is the last knob below the jump and ``next_value``/``next_achieved``
        the first above it; ``"range-end"``: the whole published range stays below the target
        (``value`` is its far end); ``"above"``: even ``start`` exceeds the target.
    next_value, next_achieved : float or None
        The first knob past the crossing and its statistic (``"step"``; None otherwise).
    evaluations : int
        Calls of ``statistic``.
    """

    value: float
    achieved: float
    status: str
    next_value: float | None
    next_achieved: float | None
    evaluations: int


@dataclass(frozen=True)
class OperatingPoints(Result):
    """A rule's operating points along a knob sweep.

    Attributes
    ----------
    rule : str
        Registry name.
    knob : str or None
        The swept knob.
    values : list
        Its values (K).
    acceptance : ndarray, shape batch + (K,)
    divergences : dict of str to ndarray, shape batch + (K,)
        :math:`D(h_{alg}\\|q)` (``inf`` where infinite).
    frontier : dict of str to ndarray, shape batch + (K,)
        :math:`F_D` at each point's true divergence.
    gap : dict of str to ndarray, shape batch + (K,)
        ``frontier - acceptance`` (>= 0 up to rounding).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """

    rule: str
    knob: str | None
    values: list
    acceptance: np.ndarray
    divergences: dict
    frontier: dict
    gap: dict


@dataclass(frozen=True)
class TaylorGrid(Result):
    """Taylor vs exact per-draft solutions on a grid (arrays of shape (len(q), len(delta))).

    Attributes
    ----------
    q_values, deltas : ndarray
        The grid axes (q_n values and budgets).
    gamma_taylor, gamma_exact : ndarray
        Corollary 5's point and Theorem 2's root.
    gamma_cvxpy : ndarray or None
        The cvxpy oracle's optimum over the whole simplex (3-token verifier
        ``(q_n, (1-q_n)/2, (1-q_n)/2)``), when requested.
    divergence_taylor : ndarray
        Two-point divergence :math:`D(h^{(n)}_T\\|q)` of the Taylor target.
    budget_ratio : ndarray
        ``divergence_taylor / delta`` (1 means exactly on budget; NaN-free: 0 where delta = 0).
    """

    divergence: str
    q_values: np.ndarray
    deltas: np.ndarray
    gamma_taylor: np.ndarray
    gamma_exact: np.ndarray
    gamma_cvxpy: np.ndarray | None
    divergence_taylor: np.ndarray
    budget_ratio: np.ndarray


@dataclass(frozen=True)
class FamilyComparison(Result):
    """Per-draft and emitted divergences of SpS, Cactus-Taylor and Cactus-exact on a corpus.

    One row per (rule, delta); every statistic is over the corpus positions (rows of q, p).

    Attributes
    ----------
    rows : list of dict
        Keys: ``rule``, ``delta``, ``acceptance`` (mean of sum_n p_n a_n),
        ``per_draft_mean`` (mean over positions of E_{n~p} D(h^(n)||q)),
        ``per_draft_max`` (max over positions and drafts with p_n > 0),
        ``emitted_mean`` and ``emitted_max`` (D(h_alg||q) over positions),
        ``emitted_over_delta_max`` (max of D(h_alg||q)/delta, 0 at delta = 0),
        ``emitted_tv_mean`` (TV(h_alg, q)).
    divergence : str
    n_positions : int
    """

    rows: list
    divergence: str
    n_positions: int


@dataclass(frozen=True)
class TreeOutcomes(Result):
    """A verifier's exact outcome law on a structure (averaged over the drawn trees).

    Attributes
    ----------
    emitted : dict
        Emitted token tuple (the accepted drafts, then the correction or bonus token) -> its
        probability.
    length_probs : ndarray, shape (D + 1,)
        :math:`P(\\text{accepted drafts} = j)`, j = 0..D (D the trie's depth).
    """

    emitted: dict
    length_probs: np.ndarray

    @property
    def expected_accepted(self) -> float:
        """:math:`E[\\text{accepted drafts}]` per verification."""
        return float(np.arange(self.length_probs.size) @ self.length_probs)

    @property
    def acceptance(self) -> float:
        """:math:`P(\\text{at least one draft accepted})`."""
        return float(1.0 - self.length_probs[0])

    def first_token_law(self, vocab_size: int) -> np.ndarray:
        """The law of the first emitted token."""
        out = np.zeros(vocab_size)
        for seq, pr in self.emitted.items():
            out[seq[0]] += pr
        return out


@dataclass(frozen=True)
class TreeSpend(Result):
    r"""Exact per-verification quantities of a node-wise verifier on a tree.

    Attributes
    ----------
    reach : ndarray, shape (N,)
        :math:`r_u`.
    emitted : ndarray, shape (N, V)
        :math:`o_u` (q at leaves).
    node_divergence : ndarray, shape (N,)
        :math:`D(o_u\|q_u)`.
    spend : float
        :math:`\sum_u r_u D(o_u\|q_u)` (KL: the block's :math:`KL(P\|Q)`).
    expected_accepted : float
        :math:`E[L] = \sum_{u \ne root} r_u`.

    Symbols: q verifier, o emitted. Source: :mod:`cactus_theory.analysis.tree_budget`.
    """

    reach: np.ndarray
    emitted: np.ndarray
    node_divergence: np.ndarray
    spend: float
    expected_accepted: float


@dataclass(frozen=True)
class TreeBudgetResult(Result):
    """A verifier calibrated to a sequence-level spend per verification.

    Attributes
    ----------
    verifier : str
    knob : str
        The calibrated knob (``lam`` or ``delta``).
    value : float
        Its value.
    spend : float
        The exact spend at that value (<= the budget; below it where the knob's range ends).
    expected_accepted : float
        :math:`E[L]` per verification at that value.
    divergence : str
    status : str
        How the knob's search ended: ``"calibrated"`` (the spend within the relative
        tolerance of the budget), ``"range-end"`` (the budget is not binding over the knob's
        range), ``"step"`` (the steps ran out short of the budget), ``"above"`` (even the
        lossless end spends more).

    Symbols: o emitted, B budget. Source: :mod:`cactus_theory.analysis.tree_budget`.
    """

    verifier: str
    knob: str
    value: float
    spend: float
    expected_accepted: float
    divergence: str
    status: str = "calibrated"
