r"""Each rule's operating points as its knob sweeps, and their gap to the optimal frontier.

An operating point of a rule on (q, p) is (true divergence of what it emits, acceptance):

.. math:: \big(D(h_{alg}\|q),\ \alpha = \textstyle\sum_n p_n a_n\big),

with :math:`h_{alg}` the exact emitted distribution (Theorem 3). The optimal frontier
:math:`F_D(\epsilon)` (:mod:`cactus_theory.solvers._frontier`) bounds every operating point:
:math:`\alpha \le F_D(D(h_{alg}\|q))`. The *gap* at equal true divergence is
:math:`F_D(D(h_{alg}\|q)) - \alpha \ge 0`: the acceptance a rule leaves on the table compared
with the best rule emitting something equally far from q. Where :math:`D(h_{alg}\|q) = +\infty`
(e.g. KL(q||h) of top-k, whose emitted support is the top-k set) the divergence is reported
as ``inf`` and the gap is taken against :math:`F_D(\infty)` (every finite budget qualifies):
never NaN.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import as_budget, as_count, as_finite_number, as_prob_pair, choice
from ..divergences import get_divergence
from ..results import OperatingPoints
from ..rules import RULES, get_rule
from ..solvers import solve_mentored, solve_sequence_budget
from .one_step import emitted_distribution, make_plan

__all__ = [
    "default_sweep",
    "operating_points",
    "all_operating_points",
    "gap_to_frontier",
    "corpus_frontier",
]

#: Divergences for which :func:`corpus_frontier` is exact.
_CORPUS_FRONTIER_DIVERGENCES = ("kl", "tv")

_FRONTIER_DIVERGENCES = ("kl", "reverse_kl", "tv")


def _sweep_values(knob, n_points: int) -> list:
    """``n_points`` values of a numeric knob inside its range (an open end is not a value)."""
    lo, hi = knob.low, knob.high
    if knob.integer:
        start = max(1, math.floor(lo) + 1 if knob.low_open else math.ceil(lo))
        return list(range(start, start + n_points))
    if math.isfinite(lo) and math.isfinite(hi):
        grid = np.linspace(lo, hi, n_points + knob.low_open + knob.high_open)
        return list(grid[int(knob.low_open) : len(grid) - int(knob.high_open)])
    if math.isfinite(lo):
        head = [] if knob.low_open else [lo]
        return head + list(lo + np.geomspace(1e-3, 10.0, n_points - len(head)))
    ends = ([] if knob.low_open else [-math.inf]), ([] if knob.high_open else [math.inf])
    return ends[0] + list(np.linspace(-3.0, 3.0, n_points - len(ends[0]) - len(ends[1]))) + ends[1]


def default_sweep(rule: str, n_points: int = 13):
    """The knob a rule's sweep moves and its values (from the SpS end, where it has one).

    Returns
    -------
    knob : str or None
        The first knob of the rule's ``RuleSpec.calibrated`` that the name leaves free (None
        for rules without one, e.g. SpS; an alias's preset knobs are fixed).
    values : list
        ``n_points`` values inside its range: linear on a finite range, ``[lo] + lo + geomspace``
        on ``[lo, inf)``, consecutive integers from the lowest allowed (at least 1) for an
        integer knob, and ``-inf``, a linear grid and ``inf`` on the whole line; an open end
        of the range is left out (the grid then takes one more inner point).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    if rule not in RULES:
        get_rule(rule)  # raises the ValueError naming ``rule``
    n_points = as_count(n_points, "n_points", minimum=2)
    knob = RULES[rule].calibrated_knob()  # the declaration's (an alias's preset knobs are fixed)
    return (None, []) if knob is None else (knob.name, _sweep_values(knob, n_points))


def gap_to_frontier(target_probs, draft_probs, acceptance, divergence_value, divergence="kl"):
    r""":math:`F_D(D) - \alpha` per row: the frontier at the rule's true divergence minus its
    acceptance (``D = inf`` uses :math:`F_D(\infty)`).

    Parameters
    ----------
    target_probs, draft_probs : ndarray, shape batch + (V,)
        Validated q and p.
    acceptance, divergence_value : ndarray, shape batch (+ (K,))
        The operating points (K points per row, optional).

    Returns
    -------
    frontier, gap : ndarray, same shape as ``acceptance``

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    # slack: a computed acceptance (a sum over tokens) may exceed 1 by float64 rounding
    acc = as_finite_number(acceptance, "acceptance", low=0.0, high=1.0, slack=1e-12)
    D = as_finite_number(divergence_value, "divergence_value", low=0.0, high=math.inf)
    extra = acc.ndim - (q.ndim - 1)
    qb, pb = q, p
    for _ in range(extra):
        qb, pb = qb[..., None, :], pb[..., None, :]
    qb = np.broadcast_to(qb, acc.shape + (q.shape[-1],))
    pb = np.broadcast_to(pb, qb.shape)
    F = np.asarray(solve_mentored(qb, pb, D, divergence, return_target=False).acceptance)
    return F, F - acc


def operating_points(
    rule,
    target_probs,
    draft_probs,
    *,
    knob=None,
    values=None,
    divergences=_FRONTIER_DIVERGENCES,
    raw_target_probs=None,
    raw_draft_probs=None,
    fixed_knobs=None,
) -> OperatingPoints:
    r"""Sweep a rule's knob and return its operating points and gaps to the frontier.

    Parameters
    ----------
    rule : str
        Registry name.
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p.
    knob, values : str and sequence, optional
        The knob and its values (default :func:`default_sweep`).
    divergences : sequence of str
        Divergences of the emitted distribution reported, each with its own frontier.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw distributions for rules that decide on them.
    fixed_knobs : dict, optional
        Other knobs held fixed.

    Returns
    -------
    OperatingPoints

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    if rule not in RULES:
        get_rule(rule)  # raises the ValueError naming ``rule``
    q, p = as_prob_pair(target_probs, draft_probs)
    if knob is None:
        knob, dflt = default_sweep(rule)
        values = dflt if values is None else values
    values = list(values) if values is not None else []
    if knob and not values:
        raise ValueError(f"values: empty list of {knob!r} values; give at least one")
    fixed = dict(fixed_knobs or {})
    settings = [dict(fixed, **{knob: v}) for v in values] if knob else [fixed]
    accs, divs = [], {d: [] for d in divergences}
    for kn in settings:
        plan = make_plan(
            get_rule(rule, **kn), q, p, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs
        )
        h = emitted_distribution(plan)
        accs.append(np.sum(plan.draft_probs * np.clip(plan.accept_probs(), 0, 1), axis=-1))
        for d in divergences:
            divs[d].append(get_divergence(d).unchecked(h, plan.target_probs))
    acc = np.stack(accs, axis=-1)
    divs = {d: np.stack(v, axis=-1) for d, v in divs.items()}
    front, gap = {}, {}
    for d in divergences:
        front[d], gap[d] = gap_to_frontier(q, p, acc, divs[d], d)
    return OperatingPoints(rule, knob, values if knob else [None], acc, divs, front, gap)


def all_operating_points(
    target_probs,
    draft_probs,
    *,
    rules=None,
    divergences=_FRONTIER_DIVERGENCES,
    raw_target_probs=None,
    raw_draft_probs=None,
) -> dict:
    r""":func:`operating_points` of every registered rule along its :func:`default_sweep`.

    Rules without a numeric knob (SpS) give one point. Returns ``{rule name: OperatingPoints}``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Tran-Thien (2023).
    """
    names = list(RULES) if rules is None else list(rules)
    if not names:
        raise ValueError("rules: empty list; give at least one rule name (or None for all)")
    return {
        name: operating_points(
            name,
            target_probs,
            draft_probs,
            divergences=divergences,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
        )
        for name in names
    }


def corpus_frontier(target_probs, draft_probs, eps, divergence="kl") -> float:
    r"""The best mean acceptance over a corpus of positions whose **mean** divergence is eps.

    .. math:: \bar F(\epsilon) = \max_{o_1..o_T} \frac1T \sum_t \sum_x \min(p_{t,x}, o_{t,x})
              \quad\text{s.t.}\quad \frac1T\sum_t D(o_t\|q_t) \le \epsilon

    This is the yardstick for rules calibrated to a corpus-mean budget: any rule whose
    positions emit :math:`h_t` with :math:`\frac1T\sum_t D(h_t\|q_t) \le \epsilon` accepts at
    most :math:`\bar F(\epsilon)` on average (its :math:`h_t` are feasible, Theorem 1 per
    position). It is at least the mean of the per-position frontiers :math:`F_t(\epsilon)`
    (every position held to eps is one feasible allocation), and usually more: one multiplier
    over all positions spends the budget where it buys the most acceptance.

    KL: :func:`cactus_theory.solvers._sequence.solve_sequence_budget` over all positions as one
    sequence (exact; one multiplier). TV: each position's frontier is
    :math:`\min(1, \alpha_t + e)` (slope 1 until it saturates), so
    :math:`\bar F(\epsilon) = \min(1, \bar\alpha_{SpS} + \epsilon)`.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (..., V)
        The corpus's q_t and p_t (every leading axis is a position).
    eps : float
        The mean budget, >= 0.
    divergence : {"kl", "tv"}

    Returns
    -------
    float

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 1; H. Everett, Operations
    Research 11 (1963).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    eps = as_budget(eps, "eps")
    name = choice(get_divergence(divergence).name, _CORPUS_FRONTIER_DIVERGENCES, "divergence")
    V = q.shape[-1]
    q, p = q.reshape(-1, V), p.reshape(-1, V)
    if name == "tv":
        return float(min(1.0, float(np.minimum(p, q).sum(-1).mean()) + eps))
    return float(solve_sequence_budget(q, p, eps).acceptance.mean())
