"""The OPT cascade's gate (``cascade-opt``'s knob ``gate``) against the arXiv 2607.08690 overlay.

Port (written from the overlay's source): ``spec_cascade_opt_defer_mask`` defers to the
verifier where ``max draft_gate < max target_gate - alpha * TV(processed rows)``, its gate rows
the processed rows (``spec_cascade_opt_gate="processed"``, its default) or the softmax of the
logits before temperature and truncation (``"paper"``); ``apply_spec_cascade_opt_constraint``
emits the verifier's or the drafter's processed row. Checked on the shipped recordings at the
overlay's paper grid (``spec_casc_opt``: alpha -0.10, 0.0, 0.05), in the analysis and in the
samplers (the plan, built from the same declaration, on torch rows).
"""

from __future__ import annotations

import numpy as np
import pytest

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.logits import load_dump, shipped_dumps
from cactus_theory.rules import get_rule

#: The overlay's grid for its OPT cascade (``spec_casc_opt``'s ``spec_cascade_alpha`` values).
OVERLAY_GRID = (-0.10, 0.0, 0.05)
#: The overlay's gate names -> the knob's.
GATES = {"processed": "processed", "paper": "raw"}


def _overlay_opt(q, p, alpha, q_gate, p_gate):
    """The overlay's OPT target: q where ``max p_gate < max q_gate - alpha * TV(q, p)``, else p."""
    tv = np.clip(q - p, 0.0, None).sum(-1)
    defer = p_gate.max(-1) < q_gate.max(-1) - alpha * tv
    return np.where(defer[:, None], q, p)


@pytest.fixture(scope="module")
def shipped():
    return [load_dump(path).pairs() for path in shipped_dumps()]


def test_default_gate_is_raw_and_both_gates_are_knobs():
    assert get_rule("cascade-opt").knobs["gate"] == "raw"
    assert get_rule("cascade-opt", gate="processed").gate == "processed"
    with pytest.raises(ValueError, match="gate"):
        get_rule("cascade-opt", gate="paper")
    assert "gate" not in get_rule("cascade-diff").knobs  # the other cascades read raw rows


@pytest.mark.parametrize("alpha", OVERLAY_GRID)
def test_each_gate_is_the_overlays_on_the_shipped_rows(shipped, alpha):
    differ = 0
    for q, p, rq, rp in shipped:
        for overlay_gate, gate in GATES.items():
            q_gate, p_gate = (q, p) if overlay_gate == "processed" else (rq, rp)
            want = _overlay_opt(q, p, alpha, q_gate, p_gate)
            rule = get_rule("cascade-opt", alpha=alpha, gate=gate)
            got = emitted_distribution(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
            # the same comparison on the same float64 rows: pi is q or p exactly, and the
            # emitted law of SpS against pi is pi up to the residual's float64 sums
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        pick_raw = _overlay_opt(q, p, alpha, rq, rp)
        pick_processed = _overlay_opt(q, p, alpha, q, p)
        differ += int((np.abs(pick_raw - pick_processed).sum(-1) > 0).sum())
    # the gates give different rules on these rows: a knob that changed nothing would fail above
    assert differ > 0


def test_gates_agree_without_raw_rows(shipped):
    q, p, _, _ = shipped[0]
    a = emitted_distribution(get_rule("cascade-opt", alpha=0.05, gate="raw"), q, p)
    b = emitted_distribution(get_rule("cascade-opt", alpha=0.05, gate="processed"), q, p)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("gate", GATES.values())
def test_samplers_plan_follows_the_gate(shipped, gate):
    """The samplers' torch float32 rows through the same declaration pick what float64 picks."""
    torch = pytest.importorskip("torch")
    q, p, rq, rp = (x[:400] for x in shipped[1])
    rule = get_rule("cascade-opt", alpha=0.05, gate=gate)
    want = rule.plan(q, p, raw_target_probs=rq, raw_draft_probs=rp).target
    t = [torch.tensor(x, dtype=torch.float32) for x in (q, p, rq, rp)]
    got = rule.plan(t[0], t[1], raw_target_probs=t[2], raw_draft_probs=t[3]).target.double().numpy()
    # float32 rows of float64 ones (2^-24 relative); a test decided differently would differ by
    # a whole row (>= 1e-3 here)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
