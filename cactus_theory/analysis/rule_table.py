r"""One call: every registered rule at its default knobs on a (q, p) pair or a batch.

For each rule: acceptance :math:`\sum_n p_n a_n`, the true emitted divergences
:math:`KL(h_{alg}\|q)`, :math:`KL(q\|h_{alg})`, :math:`TV(h_{alg}, q)`, and the gap to the
optimal frontier at equal true divergence (KL(h||q) and TV), see
:mod:`cactus_theory.analysis.frontier`. For a batch every column is the mean over positions
(a divergence that is infinite at some position has an infinite mean: reported as ``inf``).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`h_{alg}` the
emitted distribution (paper, Theorem 3).
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import as_prob_pair
from ..divergences import get_divergence
from ..rules import RULES, get_rule
from .frontier import gap_to_frontier
from .one_step import emitted_distribution, make_plan

__all__ = ["rule_table"]

#: (key, header) of the table's numeric columns.
_COLUMNS = (
    ("acceptance", "accept"),
    ("kl", "KL(h||q)"),
    ("reverse_kl", "KL(q||h)"),
    ("tv", "TV"),
    ("gap_kl", "gap@KL"),
    ("gap_tv", "gap@TV"),
)


def rule_table(
    target_probs, draft_probs, *, rules=None, raw_target_probs=None, raw_draft_probs=None, knobs=None
) -> list[dict]:
    r"""Every rule (default knobs) on (q, p): acceptance, emitted divergences, frontier gaps.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,) or (N, V)
        Verifier q and drafter p (one pair or N positions).
    rules : sequence of str, optional
        Registry names (default: all of :data:`cactus_theory.rules.RULES`).
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw (temperature-1) distributions for rules that decide on them (cascades, fuzzy).
    knobs : dict of str to dict, optional
        Non-default knobs per rule name.

    Returns
    -------
    list of dict
        One row per rule: ``rule``, ``knobs``, ``acceptance``, ``kl`` (KL(h_alg||q)),
        ``reverse_kl`` (KL(q||h_alg)), ``tv``, ``gap_kl`` and ``gap_tv`` (frontier at the
        rule's own KL / TV minus its acceptance), means over positions for a batch.

    Examples
    --------
    >>> rows = rule_table([0.30, 0.35, 0.35], [0.05, 0.80, 0.15], rules=["sps", "interpolation"])
    >>> [(r["rule"], round(r["acceptance"], 3), round(r["tv"], 3)) for r in rows]
    [('sps', 0.55, 0.0), ('interpolation', 0.775, 0.225)]

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    names = list(RULES) if rules is None else list(rules)
    knobs = knobs or {}
    rows = []
    for name in names:
        rule = get_rule(name, **knobs.get(name, {}))
        plan = make_plan(rule, q, p, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs)
        h = emitted_distribution(plan)
        acc = np.sum(plan.draft_probs * np.clip(plan.accept_probs(), 0, 1), axis=-1)
        row = {"rule": name, "knobs": dict(rule.knobs), "acceptance": float(np.mean(acc))}
        per = {}
        for d in ("kl", "reverse_kl", "tv"):
            per[d] = get_divergence(d).unchecked(h, plan.target_probs)
            row[d] = float(np.mean(per[d]))
        for d in ("kl", "tv"):
            _, gap = gap_to_frontier(plan.target_probs, plan.draft_probs, acc, per[d], d)
            row[f"gap_{d}"] = float(np.mean(gap))
        rows.append(row)
    return rows


def _fmt(x):
    if math.isinf(x):
        return "inf"
    if -5e-5 < x < 0:
        x = 0.0  # print rounding residue of a zero gap as 0.0000, not -0.0000
    return f"{x:.4f}"


def _format_rule_table(rows, *, title: str | None = None, show_knobs: bool = True) -> str:
    """Plain-text table of :func:`rule_table`'s rows.

    Divergences are printed with 4 decimals, ``inf`` where infinite.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    head = ["rule"] + [h for _, h in _COLUMNS] + (["knobs"] if show_knobs else [])
    body = []
    for r in rows:
        line = [r["rule"]] + [_fmt(r[k]) for k, _ in _COLUMNS]
        if show_knobs:
            line.append(", ".join(f"{k}={_knob(v)}" for k, v in r["knobs"].items()))
        body.append(line)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt_line = lambda cells: "  ".join(  # noqa: E731
        (c.ljust(w) if i in (0, len(cells) - 1) and (i == 0 or show_knobs) else c.rjust(w))
        for i, (c, w) in enumerate(zip(cells, widths))
    ).rstrip()
    out = [] if title is None else [title]
    out.append(fmt_line(head))
    out.append(fmt_line(["-" * w for w in widths]))
    out.extend(fmt_line(b) for b in body)
    return "\n".join(out)


def _knob(v):
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
