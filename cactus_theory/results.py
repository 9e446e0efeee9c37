r"""Result types of the front door (:mod:`cactus_theory.api`): one frozen dataclass per problem.

Every result has a one-line summary ``repr``, ``to_dict()`` (plain floats, ints, bools,
strings and lists that :func:`json.dumps` accepts; NaN becomes ``None``, ``inf`` stays a
float, which :mod:`json` writes as ``Infinity``) and, for tables, ``rows()`` (a list of flat
dicts a user can hand to ``pandas.DataFrame``).

Names (one per concept, across the whole API)
---------------------------------------------
``target_probs`` (q)
    The verifier's distribution; the vocabulary is the last axis.
``draft_probs`` (p)
    The drafter's distribution.
``token`` (n)
    The drafted token.
``delta``
    The **per-draft** budget: Cactus bounds :math:`D(h^{(n)}\|q) \le \delta` for every
    drafted token n (paper, Theorem 2).
``eps``
    A target on the **emitted** distribution: :math:`D(h_{alg}\|q) \le \epsilon`, where
    :math:`h_{alg}` is what a rule actually emits (paper, Theorem 3); the frontier and the
    calibration are stated in eps.
``per_draft_divergence``
    :math:`D(h^{(n)}\|q)` of the per-draft target; ``emitted_divergence`` is
    :math:`D(h_{alg}\|q)`.
``acceptance``
    :math:`\sum_n p_n a_n` (one position) or its mean over positions; at one drafted token
    :math:`a_n = \min(1, h_n/p_n)`.

KL(h||q) = sum h log(h/q). Reference: Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987
(Theorems 1-3, Corollary 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

__all__ = [
    "SpikeSolution",
    "TaylorExactComparison",
    "FrontierResult",
    "CalibrationResult",
    "RuleTable",
    "ChainResult",
    "AuditResult",
    "OneStepResult",
    "GlobalDelta",
    "MentoredComparison",
    "KnobCalibration",
]


def _to_plain(x) -> Any:
    """``x`` as plain Python data for :func:`json.dumps` (NaN -> None; arrays -> lists)."""
    if isinstance(x, dict):
        return {str(k): _to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _to_plain(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return None if math.isnan(v) else v
    if x is None or isinstance(x, str):
        return x
    raise TypeError(f"_to_plain: cannot convert {type(x).__name__}")


def _g(x, spec: str = ".4g") -> str:
    """A number for a summary line (None for a missing value)."""
    if x is None:
        return "n/a"
    return format(float(x), spec)


class _Result:
    """Shared ``to_dict`` of the result dataclasses (fields marked ``export=False`` skipped)."""

    def to_dict(self) -> dict:
        """Every exported field as plain data (json.dumps accepts it)."""
        return {
            f.name: _to_plain(getattr(self, f.name)) for f in fields(self) if f.metadata.get("export", True)
        }


def _internal(**kw):
    """A field kept on the object but not exported by ``to_dict`` nor shown in ``repr``."""
    return field(repr=False, compare=False, metadata={"export": False}, **kw)


@dataclass(frozen=True, repr=False)
class SpikeSolution(_Result):
    r"""The per-draft problem :math:`\max_h h_n` s.t. :math:`D(h\|q) \le \delta` at one token.

    Attributes
    ----------
    method : str
        ``"exact"`` (Theorem 2's root by bisection), ``"taylor"`` (Corollary 5) or
        ``"cvxpy"`` (the convex program over the whole simplex).
    divergence : str
        D.
    token : int
        The drafted token n.
    delta : float
        The per-draft budget.
    target_prob, draft_prob : float
        :math:`q_n`, :math:`p_n`.
    gamma : float
        :math:`h_n`, the boosted probability of n.
    h : ndarray, shape (V,)
        The per-draft target (Theorem 2: :math:`h_i = q_i(1-\gamma)/(1-q_n)` off n for exact and
        Taylor; the solver's maximiser for cvxpy).
    per_draft_divergence : float
        :math:`D(h\|q)` (the two-point form at :math:`(\gamma, q_n)` for exact and Taylor; the
        full sum over the vocabulary for cvxpy).
    acceptance : float
        :math:`a_n = \min(1, \gamma/p_n)` (1 when p_n = 0 and gamma > 0).
    budget_hit : bool
        The budget binds: :math:`\gamma < 1` (with :math:`\gamma = 1` the cap binds instead).
    within_budget : bool
        ``per_draft_divergence <= delta + tol`` with ``tol = solver_info["tol"]`` (0 for exact
        and Taylor; the Taylor point can exceed the budget when gamma > 1/2).
    solver_info : dict
        How gamma was obtained (algorithm, iterations; cvxpy: solver, status, attempts).
    """

    method: str
    divergence: str
    token: int
    delta: float
    target_prob: float
    draft_prob: float
    gamma: float
    h: np.ndarray
    per_draft_divergence: float
    acceptance: float
    budget_hit: bool
    within_budget: bool
    solver_info: dict

    def __repr__(self) -> str:
        return (
            f"SpikeSolution({self.method}, {self.divergence}, n={self.token}, "
            f"delta={_g(self.delta)}: q_n={_g(self.target_prob)} -> gamma={_g(self.gamma, '.6g')}, "
            f"D(h||q)={_g(self.per_draft_divergence)}, acceptance={_g(self.acceptance)}, "
            f"{'budget binds' if self.budget_hit else 'capped at 1'}"
            f"{'' if self.within_budget else ', OVER BUDGET'})"
        )


@dataclass(frozen=True, repr=False)
class TaylorExactComparison(_Result):
    r"""Cactus with Corollary 5's Taylor point against Theorem 2's exact root, at one delta.

    Statistics over the positions (rows of q, p); SpS is the baseline.

    Attributes
    ----------
    delta : float
        Per-draft budget.
    divergence : str
        The budget's divergence.
    n_positions : int
    acceptance_sps, acceptance_taylor, acceptance_exact : float
        Mean of :math:`\sum_n p_n a_n`.
    per_draft_mean_taylor, per_draft_mean_exact : float
        Mean over positions of :math:`E_{n\sim p} D(h^{(n)}\|q)`.
    per_draft_max_taylor, per_draft_max_exact : float
        Max over positions and drafts with :math:`p_n > 0` of :math:`D(h^{(n)}\|q)`
        (exact: <= delta).
    emitted_taylor, emitted_exact : float
        Mean over positions of :math:`D(h_{alg}\|q)`.
    emitted_max_taylor, emitted_max_exact : float
        Their max over positions.
    taylor_overshoot : float
        :math:`\max(0, \text{per\_draft\_max\_taylor} - \delta)`: by how much the Taylor point
        exceeds the per-draft budget (0 when it never does).
    table : tuple of dict
        The rows of :func:`cactus_theory.analysis.comparison.taylor_vs_exact_pairs`
        (``rule`` in ``sps``, ``cactus-taylor``, ``cactus-exact-<divergence>``).
    """

    delta: float
    divergence: str
    n_positions: int
    acceptance_sps: float
    acceptance_taylor: float
    acceptance_exact: float
    per_draft_mean_taylor: float
    per_draft_mean_exact: float
    per_draft_max_taylor: float
    per_draft_max_exact: float
    emitted_taylor: float
    emitted_exact: float
    emitted_max_taylor: float
    emitted_max_exact: float
    taylor_overshoot: float
    table: tuple

    def rows(self) -> list[dict]:
        """One flat dict per rule (sps, Taylor, exact), for ``pandas.DataFrame``."""
        return [_to_plain(dict(r)) for r in self.table]

    def __repr__(self) -> str:
        return (
            f"TaylorExactComparison({self.divergence}, delta={_g(self.delta)}, "
            f"{self.n_positions} position(s): acceptance taylor={_g(self.acceptance_taylor)} "
            f"exact={_g(self.acceptance_exact)} sps={_g(self.acceptance_sps)}; per-draft max "
            f"taylor={_g(self.per_draft_max_taylor)} exact={_g(self.per_draft_max_exact)}; "
            f"emitted taylor={_g(self.emitted_taylor)} exact={_g(self.emitted_exact)}; "
            f"taylor overshoot={_g(self.taylor_overshoot)})"
        )


@dataclass(frozen=True, repr=False)
class FrontierResult(_Result):
    r"""The optimal frontier :math:`F(\epsilon)`: the best acceptance of any rule whose emitted
    distribution is within eps of q (Theorem 1; Mentored decoding attains it).

    Attributes
    ----------
    divergence : str
        D in :math:`D(h_{alg}\|q) \le \epsilon`.
    eps : ndarray, shape (E,)
        Targets on the emitted divergence.
    acceptance : ndarray, shape (E,)
        :math:`F(\epsilon)` (mean over positions for a batch).
    emitted_divergence : ndarray, shape (E,)
        :math:`D(\pi^*\|q)` of the maximiser (mean over positions; below eps once saturated).
    sps_acceptance : float
        :math:`F(0) = \sum_x \min(p_x, q_x)` (SpS), mean over positions.
    saturation_eps : float
        The least eps at which every position's frontier has saturated (max over positions).
    n_positions : int
    per_position_acceptance : ndarray, shape batch + (E,)
        :math:`F(\epsilon)` at each position.
    """

    divergence: str
    eps: np.ndarray
    acceptance: np.ndarray
    emitted_divergence: np.ndarray
    sps_acceptance: float
    saturation_eps: float
    n_positions: int
    per_position_acceptance: np.ndarray

    def rows(self) -> list[dict]:
        """One dict per eps: ``eps``, ``acceptance``, ``emitted_divergence``, ``divergence``."""
        return [
            {
                "divergence": self.divergence,
                "eps": float(e),
                "acceptance": float(a),
                "emitted_divergence": float(d),
            }
            for e, a, d in zip(self.eps, self.acceptance, self.emitted_divergence)
        ]

    def __repr__(self) -> str:
        e, a = self.eps, self.acceptance
        return (
            f"FrontierResult({self.divergence}, {len(e)} eps in [{_g(e.min())}, {_g(e.max())}], "
            f"{self.n_positions} position(s): acceptance {_g(a.min())} .. {_g(a.max())}, "
            f"SpS {_g(self.sps_acceptance)}, saturates at eps={_g(self.saturation_eps)})"
        )


@dataclass(frozen=True, repr=False)
class CalibrationResult(_Result):
    r"""Per position, the delta whose emitted divergence :math:`D(h_{alg}(\delta)\|q)` meets eps.

    Attributes
    ----------
    rule : str
        ``"cactus-taylor"`` or ``"cactus-exact"``: how gamma follows from delta.
    divergence : str
        D, of both the per-draft budget and the emitted target.
    eps : float
        The target on the emitted divergence.
    delta : float or ndarray, shape batch
        The calibrated per-draft budget (first crossing; see
        :mod:`cactus_theory.analysis.calibration`).
    emitted_divergence : float or ndarray, shape batch
        :math:`D(h_{alg}(\delta)\|q)` achieved (<= eps).
    acceptance : float or ndarray, shape batch
        Cactus's acceptance at that delta.
    saturated : bool or ndarray, shape batch
        No delta up to the saturation delta pushes the emitted divergence above eps.
    n_positions : int
    per : {"position", "corpus"}
        One delta per position, or one delta for the whole corpus whose **mean** emitted
        divergence over the positions meets eps (then ``emitted_divergence`` and
        ``acceptance`` are those means).
    status : str
        Per corpus, how the knob search ended (``calibrated``, ``step``, ``range-end``,
        ``above``: :class:`KnobCalibration`); per
        position ``"calibrated"`` (see ``saturated``).
    """

    rule: str
    divergence: str
    eps: float
    delta: Any
    emitted_divergence: Any
    acceptance: Any
    saturated: Any
    n_positions: int
    per: str = "position"
    status: str = "calibrated"

    def rows(self) -> list[dict]:
        """One dict per position: ``position``, ``delta``, ``emitted_divergence``, ..."""
        cols = [
            np.ravel(np.asarray(getattr(self, k)))
            for k in ("delta", "emitted_divergence", "acceptance", "saturated")
        ]
        return [
            _to_plain(
                {
                    "position": i,
                    "rule": self.rule,
                    "divergence": self.divergence,
                    "eps": self.eps,
                    "delta": d,
                    "emitted_divergence": e,
                    "acceptance": a,
                    "saturated": s,
                }
            )
            for i, (d, e, a, s) in enumerate(zip(*cols))
        ]

    def __repr__(self) -> str:
        if self.per == "corpus":
            body = (
                f"one delta for {self.n_positions} positions: delta={_g(self.delta)}, "
                f"mean emitted={_g(self.emitted_divergence)}, mean acceptance={_g(self.acceptance)}"
                + ("" if self.status == "calibrated" else f", {self.status}")
            )
        elif np.ndim(self.delta) == 0:
            body = (
                f"delta={_g(self.delta)}, emitted={_g(self.emitted_divergence)}, "
                f"acceptance={_g(self.acceptance)}{', saturated' if self.saturated else ''}"
            )
        else:
            body = (
                f"{self.n_positions} positions: median delta={_g(np.median(self.delta))}, "
                f"mean emitted={_g(np.mean(self.emitted_divergence))}, "
                f"mean acceptance={_g(np.mean(self.acceptance))}, "
                f"{int(np.sum(self.saturated))} saturated"
            )
        return f"CalibrationResult({self.rule}, {self.divergence}, eps={_g(self.eps)}: {body})"


@dataclass(frozen=True, repr=False)
class RuleTable(_Result):
    r"""Rules side by side on a (q, p) pair or corpus: one row per rule.

    Row keys: ``rule``, ``knobs``, ``acceptance`` (mean of :math:`\sum_n p_n a_n`),
    ``per_draft_kl_mean`` (mean over positions of :math:`E_{n\sim p} KL(h^{(n)}\|q)`; None for
    decision rules, which have no per-draft target), ``per_draft_kl_max`` (max over positions
    and drafts with :math:`p_n > 0`), ``emitted_kl``, ``emitted_reverse_kl``, ``emitted_tv``
    (:math:`KL(h_{alg}\|q)`, :math:`KL(q\|h_{alg})`, :math:`TV(h_{alg}, q)`, means), ``gap_kl``,
    ``gap_tv`` (frontier at the rule's own emitted KL / TV minus its acceptance).

    Attributes
    ----------
    table : tuple of dict
        The rows.
    delta : float or None
        The per-draft budget given to every rule with a ``delta`` knob (None: defaults).
    n_positions : int
    """

    table: tuple
    delta: Any
    n_positions: int

    def rows(self) -> list[dict]:
        """One flat dict per rule (knobs as a ``"k=v, ..."`` string), for ``pandas.DataFrame``."""
        out = []
        for r in self.table:
            r = dict(r)
            r["knobs"] = ", ".join(f"{k}={v}" for k, v in r["knobs"].items())
            out.append(_to_plain(r))
        return out

    def row(self, rule: str) -> dict:
        """The row of one rule (by the name given to :func:`cactus_theory.api.analyze_rules`)."""
        for r in self.table:
            if r["rule"] == rule:
                return dict(r)
        raise ValueError(f"rule: {rule!r} is not in the table")

    def __repr__(self) -> str:
        best = max(self.table, key=lambda r: r["acceptance"])
        return (
            f"RuleTable({len(self.table)} rules, {self.n_positions} position(s)"
            f"{'' if self.delta is None else f', delta={_g(self.delta)}'}: highest acceptance "
            f"{best['rule']} {_g(best['acceptance'])})"
        )


@dataclass(frozen=True, repr=False)
class ChainResult(_Result):
    r"""Exact expected metrics of one rule over a teacher-forced trajectory, draft length m.

    Attributes
    ----------
    rule : str
        The configured rule (``repr``).
    m : int
        Draft length.
    length : int
        Trajectory positions T.
    metrics : dict of str to float
        Every ratio metric of :mod:`cactus_theory.simulate.metrics` (``al_paper``,
        ``tokens_per_call``, ``v0_acceptance_rate``, ``prefix_acceptance_rate``,
        ``v0_system_efficiency``, ``rejected_per_token``), exact (ratios of expected totals).
    pos_marginal, pos_conditional : list of float, length m
        Per-draft-index acceptance (prefix-causal; conditional on the prefix).
    hist : list of float, length m + 1
        :math:`P(N = i)` per round.
    sequence_kl_upper : float
        Upper bound on the KL of the emitted text from the verifier's
        (:func:`cactus_theory.simulate.exact.sequence_divergence`).
    chain : ExactChain
        The underlying dynamic programme (not exported).
    """

    rule: str
    m: int
    length: int
    metrics: dict
    pos_marginal: list
    pos_conditional: list
    hist: list
    sequence_kl_upper: float
    chain: Any = _internal(default=None)

    def rows(self) -> list[dict]:
        """One dict per metric: ``metric``, ``value``."""
        return [
            {"rule": self.rule, "m": self.m, "metric": k, "value": _to_plain(v)}
            for k, v in self.metrics.items()
        ]

    def __repr__(self) -> str:
        mt = self.metrics
        return (
            f"ChainResult({self.rule}, m={self.m}, T={self.length}: "
            f"AL={_g(mt['al_paper'])}, tokens/call={_g(mt['tokens_per_call'])}, "
            f"prefix acceptance={_g(mt['prefix_acceptance_rate'])}, "
            f"sequence KL <= {_g(self.sequence_kl_upper)})"
        )


@dataclass(frozen=True)
class OneStepResult:
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
class GlobalDelta:
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
        delta, or :data:`~cactus_theory.analysis.calibration.DELTA_CAP` where the base never
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
class MentoredComparison:
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
class KnobCalibration:
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


@dataclass(frozen=True, repr=False)
class AuditResult(_Result):
    r"""Rules calibrated to one emitted divergence, side by side
    (:func:`cactus_theory.api.audit`, :func:`cactus_theory.simulate.audit.audit`).

    Each row carries its calibration's status; :func:`cactus_theory.simulate.audit.format_audit`
    prints the table and :meth:`notes`.

    Attributes
    ----------
    eps, per, divergence : float, str, str
        The target, whether it is per token or per sequence, and D.
    rows_kind : {"processed", "raw"}
        Which rows of a dump were audited.
    label : str
    n_positions, n_trajectories : int
    draft_lengths : tuple of int
        m of the ``al_<m>`` columns.
    sequence_m : int
        m of the sequence-level divergence.
    eos_token_id : int or None
    sps_acceptance : float
        Mean SpS acceptance :math:`\sum_x \min(p_x, q_x)`.
    frontier_at_eps : float or None
        The corpus-mean frontier :math:`\bar F(\epsilon)`: the best mean acceptance of any
        rule whose mean divergence over the positions is eps
        (:func:`cactus_theory.analysis.frontier.corpus_frontier`; one multiplier over all
        positions), the budget the rules are calibrated to per token. None per sequence, for
        divergences other than KL and TV, and for a row source read chunk by chunk.
    table : tuple of dict
        One row per rule: ``rule``, ``knob``, ``status`` (``calibrated``, ``within 0.2% of
        eps`` (stopped by a step of the statistic that close below eps), ``step``,
        ``range-end``, ``above``, ``reference``, ``no knob``, ``not audited``), ``acceptance``,
        ``relaxed_acceptance`` (:math:`\bar\alpha - \bar\alpha_{SpS}`), ``al_<m>``,
        ``emitted_kl``, ``emitted_tv``, ``sequence_kl_upper``/``_lower`` (per token, m =
        ``sequence_m``), ``frontier`` and ``frontier_gap`` (per position, each at the rule's
        own per-position KL: mean of :math:`F_t(KL_t) - \alpha_t`), ``corpus_frontier`` and
        ``corpus_gap`` (the corpus-mean frontier at the rule's own mean KL), ``eos_q``,
        ``eos_h``, ``eos_shift`` (means), ``length_ratio``, ``achieved``, ``note``.
    excluded : dict
        Rules left out of the default set, with the reason.
    eos_shift : dict of str to ndarray
        Per rule, :math:`h_{alg,t}(\mathrm{EOS}) - q_t(\mathrm{EOS})` per position (not
        exported by ``to_dict``).
    """

    eps: float
    per: str
    divergence: str
    rows_kind: str
    label: str
    n_positions: int
    n_trajectories: int
    draft_lengths: tuple
    sequence_m: int
    eos_token_id: int | None
    sps_acceptance: float
    frontier_at_eps: float | None
    table: tuple
    excluded: dict = field(default_factory=dict)
    eos_shift: dict = _internal(default_factory=dict)

    def rows(self) -> list[dict]:
        """The table's rows (for pandas)."""
        return [dict(r) for r in self.table]

    def row(self, rule: str) -> dict:
        """The row of ``rule`` (ValueError naming ``rule`` if absent)."""
        for r in self.table:
            if r["rule"] == rule:
                return dict(r)
        raise ValueError(f"rule: {rule!r} not in this audit ({', '.join(r['rule'] for r in self.table)})")

    def notes(self) -> list[str]:
        """One line per rule not calibrated exactly (its status and why), then the excluded."""
        out = [f"{r['rule']}: {r['status']}: {r['note']}" for r in self.table if r["status"] != "calibrated"]
        out += [f"{k}: not in the default set: {v}" for k, v in self.excluded.items()]
        return out

    def __repr__(self) -> str:
        ok = sum(r["status"] == "calibrated" for r in self.table)
        return (
            f"AuditResult({len(self.table)} rules at {self.per} {self.divergence} = {self.eps:g}, "
            f"{ok} calibrated; {self.n_positions} positions)"
        )
