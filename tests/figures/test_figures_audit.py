"""The audit's figure (``figures/audit.py``): every rule named (drawn, or dropped with a note
saying why), the bars carrying the audit table's numbers, and a readable layout."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")

import matplotlib.pyplot as plt  # noqa: E402

import cactus_theory as ct  # noqa: E402
from cactus_theory.figures import figure_audit  # noqa: E402
from cactus_theory.figures._data import synthetic_data  # noqa: E402
from cactus_theory.figures._layout import layout_problems  # noqa: E402
from cactus_theory.figures._notes import NOTE_GID, rule_record  # noqa: E402


def _rows(n=60, V=8, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(V, 0.7), size=n)
    p = 0.6 * q + 0.4 * rng.dirichlet(np.full(V, 0.7), size=n)
    return q, p


def _layout(fig):
    try:
        return layout_problems(fig)
    finally:
        plt.close(fig)


def test_audit_figure_names_every_rule():
    q, p = _rows(20)
    res = ct.audit(q, p, eps=0.05, rules=["cactus-taylor", "topk", "sps"], eos_token_id=1, draft_lengths=(1,))
    fig = figure_audit(res)
    try:
        fig.canvas.draw()
        rec = rule_record(fig)
        assert set(rec.given) == {"cactus-taylor", "topk", "sps"} == set(rec.drawn) | set(rec.dropped)
        for ax in fig.axes:
            leg = ax.get_legend()
            assert leg is None or len(leg.get_texts()) <= 8
        notes = " ".join(t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == NOTE_GID)
        for rule in rec.dropped:
            assert rule in notes
    finally:
        plt.close(fig)


@pytest.mark.parametrize("eos", [None, 0])
def test_audit_figure_layout_is_readable(eos):
    d = synthetic_data(40, 16)
    res = ct.audit(d.target_probs, d.draft_probs, eps=0.05, draft_lengths=(2,), eos_token_id=eos)
    assert _layout(figure_audit(res)) == []


def _notes(axis):
    return " ".join(t.get_text() for t in axis.texts if t.get_gid() == NOTE_GID)


def test_the_bars_are_the_audit_tables_numbers_in_its_order():
    """Each panel's bars are the table's acceptance and length ratio, rule by rule from the top
    (the figure draws float(v): equal exactly); without an EOS column the right panel draws
    nothing and says why for every rule."""
    q, p = _rows(30)
    rules = ["cactus-taylor", "topk", "sps"]
    for eos in (1, None):
        res = ct.audit(q, p, eps=0.05, rules=rules, eos_token_id=eos, draft_lengths=(1,))
        fig = figure_audit(res)
        try:
            left, right = fig.axes[:2]
            by_rule = {r["rule"]: r for r in res.table}
            names = [t.get_text() for t in left.get_yticklabels()]
            assert names == [r["rule"] for r in res.table]
            for axis, key in ((left, "acceptance"), (right, "length_ratio")):
                bars = sorted(axis.patches, key=lambda b: -b.get_y())  # top first
                values = [by_rule[n].get(key) for n in names]
                want = [float(v) for v in values if v is not None and np.isfinite(v)]
                assert [b.get_width() for b in bars] == want, (eos, key)
            if eos is None:
                assert len(right.patches) == 0
                assert "not drawn (no EOS column): every rule" in " ".join(_notes(right).split())
            else:
                assert _notes(right) == ""
        finally:
            plt.close(fig)
