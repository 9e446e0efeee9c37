"""Acceptance profiles: NVIDIA's file round trip, the identity, the curve check, vLLM's counters.

Each test runs in well under a second (rows of a few rounds; the shipped decoding records).
"""

import json

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.logits._bench import DECODE_DIR
from cactus_theory.planning._recording import decode_rounds, load_dump_or_rounds

RECORDS = DECODE_DIR / "distilled_m2_sps.npz"


def _rows(rng, rounds=40, k=4):
    a = rng.uniform(0.2, 0.95, size=(rounds, k))
    return np.cumprod(a, axis=1)


def test_nvidia_file_round_trips_and_passes_the_identity(tmp_path):
    rng = np.random.default_rng(0)
    prof = ct.AcceptanceProfile.from_survival(_rows(rng))
    path = prof.write(tmp_path / "speculation_profile.json")
    data = json.loads(path.read_text())
    # the schema's fields as NVIDIA Model Optimizer's specdec_bench writes them (schema 1.0)
    for key in (
        "schema_version",
        "num_speculative_tokens",
        "conditional_accept_rates",
        "marginal_accept_rates",
        "mean_accept_length",
        "acceptance_length_histogram",
        "validation",
    ):
        assert key in data
    assert data["schema_version"] == "1.0" and data["num_speculative_tokens"] == 4
    back = ct.AcceptanceProfile.read(path)
    # the file stores 6 decimals: the round trip is exact to 5e-7 per rate
    np.testing.assert_allclose(back.marginal, prof.marginal, atol=5e-7)
    np.testing.assert_allclose(back.conditional, prof.conditional, atol=5e-6)
    assert back.check_identity()["passed"] and data["validation"]["mean_consistency"]["passed"]
    # marginal = product of conditionals, in the file too
    np.testing.assert_allclose(
        np.cumprod(data["conditional_accept_rates"]), data["marginal_accept_rates"], atol=2e-6
    )


def test_published_profile_passes_and_a_truncated_one_fails_the_identity():
    # NVIDIA Model Optimizer #2247's MiniMax-M2.7-DFlash measurement: AL 2.925 from these marginals
    ok = ct.AcceptanceProfile.read(
        {"marginal_accept_rates": [0.816, 0.634, 0.475], "mean_accept_length": 2.925}
    )
    assert ok.check_identity()["passed"] and ok.check_identity()["abs_delta"] < 1e-9
    # the same run with its vector cut after 2 positions: implied 2.45 against 2.925
    cut = ct.AcceptanceProfile.read({"marginal_accept_rates": [0.816, 0.634], "mean_accept_length": 2.925})
    res = cut.check_identity()
    assert not res["passed"] and res["abs_delta"] == pytest.approx(0.475)


def test_curve_check_allows_rising_conditionals_and_flags_a_rising_survival():
    # conditional rates rising with depth, 0.71 to 0.89 (vLLM #52992's table)
    cond = np.array([0.71, 0.78, 0.84, 0.89])
    rising = ct.AcceptanceProfile(tuple(np.cumprod(cond)))
    assert rising.check_curve() == {"passed": True, "violations": [], "conditional_trend": "rising"}
    falling = ct.AcceptanceProfile(tuple(np.cumprod(cond[::-1])))
    assert falling.check_curve()["conditional_trend"] == "falling"
    # a survival that rises cannot be built, and a file holding one is refused naming the field
    with pytest.raises(ValueError, match="marginal"):
        ct.AcceptanceProfile((0.5, 0.6))
    with pytest.raises(ValueError, match="marginal"):
        ct.AcceptanceProfile.read({"marginal_accept_rates": [0.5, 0.6]})


def test_vllm_metrics_counters():
    text = "\n".join(
        [
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 200.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 230.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 120.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 70.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 40.0',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 999.0',
        ]
    )
    prof = ct.AcceptanceProfile.from_vllm_metrics(text)
    assert prof.marginal == (0.6, 0.35, 0.2)
    assert prof.mean_accept_length == pytest.approx(1 + 230 / 200)
    # accepted tokens = sum of the per-position counts, so the identity is exact
    assert prof.check_identity()["abs_delta"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="text"):
        ct.AcceptanceProfile.from_vllm_metrics("vllm:spec_decode_num_drafts_total 3")


def test_decoding_records_profile_is_the_runs_expected_accepted_length(tmp_path):
    # the decoding loop computed the expected AL of its rounds itself (logits._decode.expected_accepted,
    # results.json); the profile's survival of the same records sums to it
    shipped = json.loads((DECODE_DIR / "results.json").read_text())["main"]["configs"]["distilled|m=2|sps"]
    prof = ct.AcceptanceProfile.from_dump(RECORDS)
    assert sum(prof.marginal) == pytest.approx(shipped["expected_al"], rel=1e-9)
    # the engine's own counts (its accepted lengths) are the reported histogram
    rounds = decode_rounds(load_dump_or_rounds(RECORDS))
    assert sum(prof.histogram.values()) == len(rounds.rounds) == shipped["rounds"]
    back = ct.AcceptanceProfile.read(prof.write(tmp_path / "p.json"))
    # the file stores 6 decimals: the round trip is exact to 5e-7 per rate
    np.testing.assert_allclose(back.marginal, prof.marginal, atol=5e-7)
    # measured against exact over 86 rounds: |1.686 - 1.702| = 0.016, within NVIDIA's 0.02
    assert back.check_identity()["passed"]


def test_teacher_forced_profile_matches_the_exact_chain():
    from cactus_theory.logits import load_dump, shipped_dumps

    dump = load_dump(shipped_dumps()[0])
    prof = ct.AcceptanceProfile.from_dump(dump, m=3, max_positions=48)
    t = next(dump.trajectories())
    res = ct.exact_chain("sps", ct.Trajectory(t.target_probs, t.draft_probs), 3)
    assert prof.implied_mean_accept_length == pytest.approx(res.metrics["tokens_per_call"], rel=1e-12)
    assert prof.check_identity()["abs_delta"] < 1e-12
    # the histogram P(N + 1 = l) is the chain's hist
    np.testing.assert_allclose([prof.histogram[j + 1] for j in range(4)], res.hist, rtol=1e-12)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="survival"):
        ct.AcceptanceProfile.from_survival([[0.5, 1.2]])
    with pytest.raises(ValueError, match="requests"):
        ct.AcceptanceProfile.from_survival([[0.5, 0.2]], requests=[0, 1])
    with pytest.raises(ValueError, match="path"):
        ct.AcceptanceProfile.read({"mean_accept_length": 2.0})
    with pytest.raises(ValueError, match="k"):
        ct.AcceptanceProfile((0.5,)).tokens_per_call(2)
