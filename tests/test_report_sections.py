"""The report's sections (``_report_sections.py``): each builds as data and as text, the Taylor
grid against Corollary 5's closed form and the binary KL, and the chain rows' reference."""

import json
import math

import pytest

from cactus_theory._report_sections import chain_rows, section_taylor
from cactus_theory.report import compute_report, format_report
from cactus_theory.simulate import synthetic_trajectory


def test_report_sections_build():
    text = format_report(compute_report(["taylor", "families"], seed=0))
    assert "Taylor point (Corollary 5) vs exact root" in text
    assert "kl(h_alg||q)" in text


def test_report_sections_are_data_and_text_json_agree():
    rep = compute_report(["taylor"], seed=0)
    (sec,) = rep.sections
    grid = rep.table("taylor/grid")
    assert len(grid.rows) == 8 * 5  # 8 q_n values x 5 deltas
    data = json.loads(json.dumps(rep.to_dict(), allow_nan=False))
    row = next(r for r in data["sections"][0]["tables"][0]["rows"] if r["q_n"] == 0.5 and r["delta"] == 0.5)
    # Corollary 5 at q_n = 1/2, delta = 1/2: q + sqrt(2 delta q (1-q)) = 1 (clipped at 1)
    assert row["gamma_taylor"] == 1.0
    text = format_report(rep, "text")
    assert f"{row['gamma_exact']:.3f}" in text and "Corollary 6 holds" in text


def _binary_kl(g, q):
    """KL of the spike (g at n, the rest of q scaled by (1 - g)/(1 - q)) from q."""
    out = g * math.log(g / q) if g > 0 else 0.0
    return out + ((1 - g) * math.log((1 - g) / (1 - q)) if g < 1 else 0.0)


def test_the_taylor_grid_is_corollary_5_and_its_kl():
    """Every row of taylor/grid: gamma_taylor = min(1, q + sqrt(2 delta q (1 - q))) (Corollary
    5) and budget_ratio = KL(h_taylor || q)/delta, the spike's binary KL, both computed here;
    the worst table's bound column is log(1 + 2 delta)/delta. Tolerance 1e-12 relative: a few
    float64 operations on either side."""
    sec = section_taylor()
    grid, worst = sec.tables
    assert len(grid.rows) == 40
    for r in grid.rows:
        q, d = r["q_n"], r["delta"]
        g = min(1.0, q + math.sqrt(2 * d * q * (1 - q)))
        assert r["gamma_taylor"] == pytest.approx(g, rel=1e-12, abs=1e-15)
        assert r["budget_ratio"] == pytest.approx(_binary_kl(g, q) / d, rel=1e-12, abs=1e-15)
        assert q <= r["gamma_exact"] <= 1.0
    for r in worst.rows:
        assert r["bound_ratio"] == pytest.approx(math.log1p(2 * r["delta"]) / r["delta"], rel=1e-12)
        assert r["worst_ratio"] <= r["bound_ratio"] * (1 + 1e-12)


def test_chain_rows_take_sps_as_their_reference():
    """SpS's own row: Rej 0 % (its own reference) and every sequence KL 0 (it emits q: 1e-12,
    sums of products of probabilities); a list not starting with sps is refused naming rules."""
    trajs = [synthetic_trajectory("dirichlet", 12, 5, seed, concentration=0.7) for seed in (0, 1)]
    sps, cactus = chain_rows(trajs, 3, rules=(("sps", {}), ("cactus-taylor", {"delta": 1.0})))
    assert sps["rule"] == "sps (defaults)" and cactus["rule"] == "cactus-taylor delta=1"
    assert sps["rej_percent"] == 0.0
    for key in ("kl_lower", "kl_upper", "kl_sum"):
        assert abs(sps[key]) <= 1e-12
    assert sps["tokens_per_call"] == pytest.approx(sps["al_m"] + 1, abs=1e-12)
    assert (
        cactus["al_m"] > sps["al_m"] and cactus["kl_lower"] <= cactus["kl_upper"] <= cactus["kl_sum"] + 1e-12
    )
    with pytest.raises(ValueError, match="^rules: the first rule must be sps"):
        chain_rows(trajs, 3, rules=(("cactus-taylor", {}),))
