r"""What a figure drew of its input rules, and a visible note naming the ones it left out.

A figure function that takes rules (or methods) as input calls :func:`record_rules` once per
panel with the rules it was given, the label under which each drawn one appears, and the reason
each other one is not drawn (for example an infinite emitted divergence at every knob value).
:func:`record_rules` writes every left-out rule, by name, in a text artist on the panel (its
``gid`` is :data:`NOTE_GID`), so no rule disappears from a figure silently, and keeps the
record on the figure for :func:`rule_record` (the tests read it and check it against the
figure's artists).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), :math:`h_{alg}` the emitted
distribution (Hao & Mou, ICLR 2026, arXiv 2604.04987, Theorem 3).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

__all__ = ["RuleRecord", "record_rules", "rule_record"]

#: ``gid`` of the text artists that name the rules a figure left out.
NOTE_GID = "cactus-theory-rules-not-drawn"
_ATTR = "_cactus_theory_rules"


@dataclass
class RuleRecord:
    """The rules a figure was given, the label of each drawn one, the reason for each left out.

    Attributes
    ----------
    given : list of str
    drawn : dict of str to str
        Rule -> the label (legend entry or axis label) under which it appears.
    dropped : dict of str to str
        Rule -> why it is not drawn (written on the figure).
    """

    given: list = field(default_factory=list)
    drawn: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)


def record_rules(ax, given, drawn, dropped=None, *, loc=(0.02, 0.97), va: str = "top", width: int = 48):
    """Record one panel's rules on its figure and name the left-out ones in a note on ``ax``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel (the note is drawn in its axes coordinates at ``loc``, left aligned).
    given : sequence of str
        The rules this panel was given.
    drawn : dict of str to str
        Each drawn rule and its label on the figure.
    dropped : dict of str to str, optional
        Each left-out rule and the reason (one note line group per distinct reason).
    loc : (float, float)
        Position of the note in axes coordinates (its left edge; ``va`` its vertical anchor).
    va : {"top", "bottom", "center"}
    width : int
        Characters per line of the note.

    Returns
    -------
    matplotlib.text.Text or None
        The note (None when nothing was left out).

    Raises
    ------
    ValueError
        ``drawn``/``dropped`` not covering ``given`` exactly, or naming a rule twice.
    """
    dropped = dict(dropped or {})
    given = list(given)
    both = set(drawn) & set(dropped)
    if both:
        raise ValueError(f"dropped: {sorted(both)} are also drawn")
    missing = [n for n in given if n not in drawn and n not in dropped]
    if missing:
        raise ValueError(f"dropped: {missing} are neither drawn nor named as left out")
    extra = [n for n in list(drawn) + list(dropped) if n not in given]
    if extra:
        raise ValueError(f"drawn: {extra} were not given")
    fig = ax.figure
    rec = getattr(fig, _ATTR, None) or RuleRecord()
    rec.given += given
    rec.drawn.update(drawn)
    rec.dropped.update(dropped)
    setattr(fig, _ATTR, rec)
    if not dropped:
        return None
    by_reason = {}
    for name, why in dropped.items():
        by_reason.setdefault(why, []).append(name)
    lines = []
    for why, names in by_reason.items():
        lines += textwrap.wrap(f"not drawn ({why}): " + ", ".join(names), width, break_on_hyphens=False)
    return ax.text(
        *loc,
        "\n".join(lines),
        transform=ax.transAxes,
        ha="left",
        va=va,
        fontsize=8,
        gid=NOTE_GID,
        zorder=6,
        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="none", alpha=0.85),
    )


def rule_record(fig):
    """The :class:`RuleRecord` of ``fig`` (None when its function recorded no rules)."""
    return getattr(fig, _ATTR, None)
