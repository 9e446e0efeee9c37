r"""Figures only real recordings have: acceptance by prompt category, per drafter.

The shipped SmolLM2-135M-Instruct recordings (:mod:`cactus_theory.logits`) label every
position with its prompt's category (13 Spec-Bench categories, GSM8K, IFEval). The other
figures take real rows as data (:func:`cactus_theory.figures._data.real_data`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
SpS acceptance per position :math:`\sum_x \min(p_x, q_x)`; Cactus's
:math:`\sum_n p_n \min(1, \gamma_n/p_n)` (Hao & Mou, ICLR 2026, arXiv 2604.04987, Theorem 1,
Corollary 5).
"""

from __future__ import annotations

import numpy as np

from ..analysis.one_step import acceptance_rate
from ..rules import get_rule
from ._data import real_dump
from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, new_axes, styled

__all__ = ["acceptance_by_category", "figure_acceptance_by_category"]

#: Shipped drafters and their display names.
_DRAFTER_LABELS = {
    "requant-4": "4-bit re-quantized",
    "requant-3": "3-bit re-quantized",
    "early-exit-25": "early exit, layer 25/30",
    "distilled": "distilled (3.55 M)",
}


def acceptance_by_category(dump, rule="sps", **knobs):
    """Mean acceptance per prompt category of a dump: ``{category: mean}`` (sorted by name)."""
    q, p, rq, rp = dump.pairs()
    a = acceptance_rate(get_rule(rule, **knobs), q, p, raw_target_probs=rq, raw_draft_probs=rp)
    cats = dump.categories()
    return {c: float(a[cats == c].mean()) for c in sorted(set(cats))}


@styled
def figure_acceptance_by_category(dumps=None, *, rule="sps", knobs=None, ax=None):
    r"""Grouped bars: mean acceptance per prompt category, one bar per drafter.

    Parameters
    ----------
    dumps : dict of str to Dump, optional
        Label to loaded dump (default: the four shipped SmolLM2 pairs).
    rule : str
        The rule whose acceptance is drawn (default SpS: :math:`\sum\min(p, q)`).
    knobs : dict, optional
        Its knobs.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    if dumps is None:
        dumps = {_DRAFTER_LABELS[k]: real_dump(k) for k in _DRAFTER_LABELS}
    accs = {label: acceptance_by_category(d, rule, **(knobs or {})) for label, d in dumps.items()}
    cats = sorted(set().union(*[set(a) for a in accs.values()]))
    fig, ax = new_axes(ax, DOUBLE_COLUMN, 2.4)
    width = 0.8 / max(1, len(accs))
    x = np.arange(len(cats))
    for k, (label, a) in enumerate(accs.items()):
        ax.bar(
            x + (k - (len(accs) - 1) / 2) * width,
            [a.get(c, np.nan) for c in cats],
            width,
            color=PALETTE[1 + k % (len(PALETTE) - 1)],
            label=label,
        )
    ax.set_xticks(x, [c.replace("_", " ") for c in cats], rotation=35, ha="right")
    ax.set(
        xlabel="prompt category",
        ylabel=f"mean acceptance ({rule})",
        ylim=(0, 1),
        xlim=(-0.6, len(cats) - 0.4),
    )
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper center", ncol=len(accs), bbox_to_anchor=(0.5, 1.16), borderaxespad=0)
    record_rules(ax, [rule], {rule: f"mean acceptance ({rule})"})
    return fig
