r"""Exact optimum against the Taylor bonus: on (q_n, delta) grids and on (q, p) families.

Per draft, Cactus's Taylor point :math:`\gamma_T = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`
(Corollary 5) approximates Theorem 2's exact root :math:`\gamma^*` of
:math:`kl(\gamma \| q_n) = \delta`. What each one costs is measured twice:

- per draft: :math:`D(h^{(n)} \| q)`, the two-point divergence at :math:`(\gamma_n, q_n)`;
- emitted: :math:`D(h_{alg} \| q)` of the distribution actually emitted (Theorem 3).

Facts this module's tests pin (the paper's Corollary 6 says nothing beyond gamma <= 1/2):

- Corollary 6 holds: :math:`\gamma_T \le 1/2 \Rightarrow kl(\gamma_T \| q_n) \le \delta`.
- For :math:`\gamma_T > 1/2` the Taylor point can exceed the budget, but never by more than
  :math:`kl(\gamma_T\|q_n) \le \log(1 + 2\delta) < 2\delta`: KL is at most
  :math:`\log(1+\chi^2)` and the Taylor point has :math:`\chi^2(h^{(n)}\|q) = 2\delta` when
  uncapped and :math:`(1-q_n)/q_n \le 2\delta` when capped at 1. The bound is attained at
  :math:`q_n = 1/(1+2\delta)`, where the Taylor point is exactly 1 (:func:`taylor_kl_bound`).
  Since :math:`\log(1+2\delta) \le \delta` iff :math:`\delta \ge \delta^\star = 1.25643...`
  (:data:`TAYLOR_WITHIN_BUDGET_FROM`), the Taylor point meets the budget for every q_n exactly
  when :math:`\delta \ge \delta^\star`; below it the worst case exceeds the budget by the factor
  :math:`\log(1+2\delta)/\delta`, which tends to 2 as delta -> 0.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
delta budget.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 2, Corollaries 5 and 6, Theorem 3.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_budget_array, as_prob_pair
from ..divergences import get_divergence
from ..results import FamilyComparison, TaylorGrid
from ..rules import get_rule
from ..solvers import exact_spike, taylor_spike
from .one_step import acceptance_rate, emitted_distribution, make_plan, per_draft_divergence

__all__ = [
    "TAYLOR_WITHIN_BUDGET_FROM",
    "taylor_vs_exact_grid",
    "taylor_kl_bound",
    "taylor_vs_exact_pairs",
]


#: The root of log(1 + 2 delta) = delta: from this budget on, Cactus-Taylor never exceeds it.
TAYLOR_WITHIN_BUDGET_FROM = 1.2564312086261697


def taylor_kl_bound(delta):
    r"""Tight bound on the per-draft KL of Cactus-Taylor: :math:`\log(1 + 2\delta)`.

    .. math:: \sup_{q_n} kl(\gamma_T(q_n, \delta) \| q_n) = \log(1 + 2\delta),
              \text{ attained at } q_n = 1/(1+2\delta).

    Parameters
    ----------
    delta : float or array
        Budget >= 0.
    """
    return np.log1p(2.0 * as_budget_array(delta))


def taylor_vs_exact_grid(q_values, deltas, divergence="kl", *, with_cvxpy: bool = False) -> TaylorGrid:
    r"""Compare Corollary 5's :math:`\gamma_T` with Theorem 2's :math:`\gamma^*` on a grid.

    Parameters
    ----------
    q_values : array_like, shape (m,)
        Verifier probabilities q_n of the drafted token, in [0, 1].
    deltas : array_like, shape (k,)
        Budgets >= 0.
    divergence : str
        Divergence of the budget (the Taylor point uses its f''(1)).
    with_cvxpy : bool
        Also solve each cell with the cvxpy oracle (slow: m * k interior-point solves).

    Returns
    -------
    TaylorGrid
    """
    qv = np.asarray(q_values, dtype=np.float64).ravel()
    if np.any(~np.isfinite(qv)) or np.any((qv < 0) | (qv > 1)):
        raise ValueError("q_values: must lie in [0, 1]")
    dv = as_budget_array(deltas, "deltas").ravel()
    Q, D = np.meshgrid(qv, dv, indexing="ij")
    gt = taylor_spike(Q, D, divergence)
    ge = exact_spike(Q, D, divergence)
    d = get_divergence(divergence)
    dt = d.two_point(gt, Q)
    ratio = np.where(D > 0, dt / np.where(D > 0, D, 1.0), 0.0)
    gc = None
    if with_cvxpy:
        from ..solvers import max_draft_probability_cvxpy

        gc = np.empty_like(Q)
        for i, qn in enumerate(qv):
            row = np.array([qn, (1 - qn) / 2, (1 - qn) / 2])
            for j, delta in enumerate(dv):
                gc[i, j] = max_draft_probability_cvxpy(row, 0, delta, divergence).value
    return TaylorGrid(d.name, qv, dv, gt, ge, gc, dt, ratio)


def taylor_vs_exact_pairs(target_probs, draft_probs, deltas, divergence="kl") -> FamilyComparison:
    r"""Per-draft and emitted divergence of Taylor and exact Cactus over a corpus of (q, p).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
        Verifier q and drafter p at N positions.
    deltas : sequence of float
        Budgets.
    divergence : str
        The budget's divergence (``cactus-exact-<divergence>`` and the Taylor point with
        that divergence's f''(1)).

    Returns
    -------
    FamilyComparison
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    q, p = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    d = get_divergence(divergence)
    tv = get_divergence("tv")
    exact_name = f"cactus-exact-{d.name.replace('_', '-')}"
    rows = []
    for delta in as_budget_array(deltas, "deltas").ravel():
        rules = [
            ("sps", get_rule("sps")),
            ("cactus-taylor", get_rule("cactus-taylor", delta=delta, divergence=d.name)),
            (exact_name, get_rule(exact_name, delta=delta)),
        ]
        for label, rule in rules:
            plan = make_plan(rule, q, p)
            per = per_draft_divergence(plan, divergence=d.name)
            drafted = p > 0
            per_mean = np.sum(np.where(drafted, p * np.where(drafted, per, 0.0), 0.0), axis=-1)
            per_max = np.max(np.where(drafted, per, 0.0), axis=-1)
            emitted = emitted_distribution(plan)
            ed = d.unchecked(emitted, q)
            ratio = ed / delta if delta > 0 else np.zeros_like(ed)
            rows.append(
                dict(
                    rule=label,
                    delta=float(delta),
                    acceptance=float(np.mean(acceptance_rate(plan))),
                    per_draft_mean=float(np.mean(per_mean)),
                    per_draft_max=float(np.max(per_max)),
                    emitted_mean=float(np.mean(ed)),
                    emitted_max=float(np.max(ed)),
                    emitted_over_delta_max=float(np.max(ratio)),
                    emitted_tv_mean=float(np.mean(tv.unchecked(emitted, q))),
                )
            )
    return FamilyComparison(rows, d.name, q.shape[0])


def _format_family_comparison(result: FamilyComparison, title: str = "") -> str:
    """Plain-text table of a :class:`FamilyComparison` (for the report)."""
    d = result.divergence
    head = (
        f"{'rule':<22}{'delta':>7}{'accept':>8}{'E_n ' + d + '(h^n||q)':>19}"
        f"{'max_n':>9}{d + '(h_alg||q)':>16}{'max':>9}{'max/delta':>10}{'TV(h_alg,q)':>13}"
    )
    lines = ([title] if title else []) + [head, "-" * len(head)]
    for r in result.rows:
        lines.append(
            f"{r['rule']:<22}{r['delta']:>7.3g}{r['acceptance']:>8.4f}{r['per_draft_mean']:>19.4f}"
            f"{r['per_draft_max']:>9.4f}{r['emitted_mean']:>16.4f}{r['emitted_max']:>9.4f}"
            f"{r['emitted_over_delta_max']:>10.3f}{r['emitted_tv_mean']:>13.4f}"
        )
    return "\n".join(lines)
