"""Every rule side by side (``analysis/rule_table.py``): the table on untruncated and truncated
rows, the README pair's rows by hand, the knobs argument, the text table, and bad input.
"""

import math

import numpy as np
import pytest

from cactus_theory.analysis.rule_table import _format_rule_table, rule_table
from cactus_theory.distributions import synthetic_pairs, truncate
from cactus_theory.rules import RULES


def test_rule_table_runs_untruncated_and_truncated():
    q, p = synthetic_pairs("noisy_copy", 3, 300, 0)
    for qq, pp, raw in (
        (q, p, (None, None)),
        (
            truncate(q, temperature=0.6, top_k=20, top_p=0.95),
            truncate(p, temperature=0.6, top_k=20, top_p=0.95),
            (q, p),
        ),
    ):
        rows = rule_table(qq, pp, raw_target_probs=raw[0], raw_draft_probs=raw[1])
        assert [r["rule"] for r in rows] == list(RULES)
        for r in rows:
            for k in ("acceptance", "kl", "reverse_kl", "tv", "gap_kl", "gap_tv"):
                assert not math.isnan(r[k]), (r["rule"], k)
            assert r["gap_kl"] >= -1e-9 and r["gap_tv"] >= -1e-9  # frontier dominance
        text = _format_rule_table(rows)
        assert "sps" in text and "nan" not in text


def test_readme_pair_rows_by_hand():
    """The README pair q = (.30, .35, .35), p = (.05, .80, .15): SpS accepts sum min(p, q) =
    0.55 and emits q (every divergence and gap 0); interpolation at alpha = 1/2 emits
    h = (q + p)/2 and accepts sum min(h, p) = 0.775, its divergences written out here.
    Tolerance 1e-12: sums of 3 float64 terms."""
    q, p = np.array([0.30, 0.35, 0.35]), np.array([0.05, 0.80, 0.15])
    sps, interp = rule_table(q, p, rules=["sps", "interpolation"])
    assert sps["rule"] == "sps" and sps["knobs"] == {}
    assert sps["acceptance"] == pytest.approx(0.55, abs=1e-12)
    for key in ("kl", "reverse_kl", "tv", "gap_kl", "gap_tv"):
        assert abs(sps[key]) <= 1e-12, key
    assert interp["knobs"] == {"alpha": 0.5}
    h = 0.5 * (q + p)
    assert interp["acceptance"] == pytest.approx(np.minimum(h, p).sum(), abs=1e-12)
    assert interp["kl"] == pytest.approx(np.sum(h * np.log(h / q)), abs=1e-12)
    assert interp["reverse_kl"] == pytest.approx(np.sum(q * np.log(q / h)), abs=1e-12)
    assert interp["tv"] == pytest.approx(0.5 * np.abs(h - q).sum(), abs=1e-12)


def test_knobs_set_a_rules_knobs_and_cactus_at_zero_is_sps():
    q, p = np.array([0.30, 0.35, 0.35]), np.array([0.05, 0.80, 0.15])
    (sps,) = rule_table(q, p, rules=["sps"])
    (cactus,) = rule_table(q, p, rules=["cactus-taylor"], knobs={"cactus-taylor": {"delta": 0.0}})
    assert cactus["knobs"]["delta"] == 0.0
    for key in ("acceptance", "kl", "reverse_kl", "tv"):
        assert cactus[key] == pytest.approx(sps[key], abs=1e-12), key


def test_the_text_table_prints_inf_zero_residue_and_knobs():
    rows = [
        {
            "rule": "sps",
            "knobs": {},
            "acceptance": 0.55,
            "kl": 0.0,
            "reverse_kl": 0.0,
            "tv": 0.0,
            "gap_kl": -1e-6,
            "gap_tv": 0.0,
        },
        {
            "rule": "cactus-taylor",
            "knobs": {"delta": 0.75, "divergence": "kl"},
            "acceptance": 0.7,
            "kl": math.inf,
            "reverse_kl": 0.125,
            "tv": 0.25,
            "gap_kl": 0.0,
            "gap_tv": 0.01,
        },
    ]
    text = _format_rule_table(rows, title="T").splitlines()
    assert text[0] == "T"
    assert text[1].split() == ["rule", "accept", "KL(h||q)", "KL(q||h)", "TV", "gap@KL", "gap@TV", "knobs"]
    assert text[3].split() == ["sps", "0.5500", "0.0000", "0.0000", "0.0000", "0.0000", "0.0000"]
    assert text[4].split() == [
        "cactus-taylor",
        "0.7000",
        "inf",
        "0.1250",
        "0.2500",
        "0.0000",
        "0.0100",
        "delta=0.75,",
        "divergence=kl",
    ]
    bare = _format_rule_table(rows, show_knobs=False).splitlines()
    assert "knobs" not in bare[0] and "delta" not in bare[3]


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="^target_probs: rows must sum to 1"):
        rule_table([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(ValueError, match="^rule: unknown value .nope."):
        rule_table([0.5, 0.5], [0.5, 0.5], rules=["nope"])
