"""Result types of the front door's calls (:mod:`cactus_theory.api`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._base import Result, _g, _internal, _row_values


@dataclass(frozen=True, repr=False)
class SpikeSolution(Result):
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
class TaylorExactComparison(Result):
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
        return [_row_values(dict(r)) for r in self.table]

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
class FrontierResult(Result):
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
class CalibrationResult(Result):
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
            _row_values(
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
class RuleTable(Result):
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
            out.append(_row_values(r))
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
class ChainResult(Result):
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
        Every ratio metric of :mod:`cactus_theory.simulate._metrics` (``al_paper``,
        ``tokens_per_call``, ``v0_acceptance_rate``, ``prefix_acceptance_rate``,
        ``v0_system_efficiency``, ``rejected_per_token``), exact (ratios of expected totals).
    pos_marginal, pos_conditional : list of float, length m
        Per-draft-index acceptance (prefix-causal; conditional on the prefix).
    hist : list of float, length m + 1
        :math:`P(N = i)` per round.
    sequence_kl_upper : float
        Upper bound on the KL of the emitted text from the verifier's
        (:func:`cactus_theory.simulate._exact.sequence_divergence`).
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
            {"rule": self.rule, "m": self.m, "metric": k, "value": _row_values(v)}
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
