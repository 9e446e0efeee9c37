"""ct.plan: exact tokens per call against independent computations, the speedup model, the best m,
break-even, the bootstrap against resampled corpora, the engine configuration, bad input.

Each test well under 2 s on an unloaded machine (one 48-position trajectory or the shipped
decoding records; synthetic corpora of V = 6).
"""

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.integrations.vllm._config import parse_config
from cactus_theory.logits._bench import DECODE_DIR
from cactus_theory.planning._plan import break_even_acceptance
from cactus_theory.simulate import best_verify_length, simulate_chain, synthetic_trajectory

RECORDS = DECODE_DIR / "distilled_m2_sps.npz"
COST = ct.CostModel(0.2, (1.0, 1.3, 1.6, 1.9))


@pytest.fixture(scope="module")
def dump():
    from cactus_theory.logits import load_dump, shipped_dumps

    return load_dump(shipped_dumps()[0])


def test_dump_plan_against_simulation_and_the_speedup_model(dump):
    res = ct.plan(dump, rules=["sps"], cost=COST, m_max=3, max_positions=48, bootstrap=0)
    row = res.row("sps")
    t = next(dump.trajectories())
    traj = ct.Trajectory(t.target_probs, t.draft_probs)
    for m in (1, 2, 3):
        e = row["tokens_per_call"][m - 1]
        assert e == pytest.approx(ct.exact_chain("sps", traj, m).metrics["tokens_per_call"], rel=1e-12)
        # an independent check: the chain simulated 2000 times, tokens / calls within 4 standard errors
        run = simulate_chain(ct.get_rule("sps"), traj, m, n_runs=2000, rng=np.random.default_rng(m))
        tokens, calls = run.totals().tokens, run.totals().rounds
        sim = tokens.sum() / calls.sum()
        se = np.std(tokens - sim * calls, ddof=1) / calls.mean() / np.sqrt(len(calls))
        assert abs(sim - e) < 4 * se
        assert row["speedup"][m - 1] == pytest.approx(e * 1.0 / (m * 0.2 + COST.verify(m + 1)), rel=1e-12)
        assert row["accepted_length"][m - 1] == pytest.approx(e - 1, rel=1e-12)
    assert row["best_m"] == 1 + int(np.argmax(row["speedup"]))


def test_eps_calibrates_each_rule(dump):
    res = ct.plan(dump, eps=0.05, cost=COST, m_max=2, max_positions=48, bootstrap=0)
    cactus = res.row("cactus-taylor")
    # the audit's calibration: the mean emitted KL per token meets eps (within its 0.2 % rule)
    assert cactus["status"] in ("calibrated", "within 0.2% of eps") and cactus["emitted_kl"] == pytest.approx(
        0.05, rel=2e-3
    )
    assert res.row("sps")["emitted_kl"] < 1e-12
    # relaxing buys tokens per call at every m
    assert all(c > s for c, s in zip(cactus["tokens_per_call"], res.row("sps")["tokens_per_call"]))
    # the engine configuration is the plugin's own
    cfg = cactus["engine_config"]
    parsed = parse_config(cfg["additional_config"]["cactus_theory"])
    assert parsed.rule_name == "cactus-taylor" and parsed.knobs["delta"] == pytest.approx(
        cactus["knobs"]["delta"]
    )
    assert cfg["speculative_config"]["num_speculative_tokens"] == cactus["best_m"]


def test_recorded_rounds_plan_and_best_verify_length():
    res = ct.plan(RECORDS, rules=["sps"], cost=COST, m_max=8, bootstrap=500)
    assert res.kind == "recorded rounds" and res.draft_lengths == (1, 2)  # the records drafted 2
    prof = ct.AcceptanceProfile.from_dump(RECORDS)
    row = res.row("sps")
    np.testing.assert_allclose(
        row["tokens_per_call"], [prof.tokens_per_call(1), prof.tokens_per_call(2)], rtol=1e-12
    )
    k, _ = best_verify_length(np.asarray(prof.marginal), [COST.round_cost(m) for m in (0, 1, 2)])
    assert row["best_m"] == max(int(k), 1) or int(k) == 0
    for lo, e, hi in zip(row["tokens_per_call_low"], row["tokens_per_call"], row["tokens_per_call_high"]):
        assert lo < e < hi


def test_break_even_acceptance_solves_its_equation():
    for m in (1, 2, 3):
        a = break_even_acceptance(COST, m)
        assert sum(a**i for i in range(m + 1)) == pytest.approx(
            COST.round_cost(m) / COST.verify(1), rel=1e-10
        )
        # at that constant acceptance the predicted speedup is 1
        assert COST.speedup((1 - a ** (m + 1)) / (1 - a), m) == pytest.approx(1.0, rel=1e-10)
    assert break_even_acceptance(ct.CostModel.from_numbers(0.0), 2) == 0.0
    # a round of 3 drafts costs 4.3 steps and emits at most 4 tokens: it never pays
    assert break_even_acceptance(ct.CostModel(1.1, (1.0, 1.0, 1.0, 1.0)), 3) is None


def test_bootstrap_interval_matches_the_spread_between_corpora():
    # the bootstrap over a corpus's requests estimates how tokens per call varies from corpus to
    # corpus: its interval's width against the spread of 20 independent corpora (8 requests each,
    # one generative model)
    from cactus_theory.planning._plan import _bootstrap
    from cactus_theory.simulate._exact import exact_chain

    rule = ct.get_rule("sps")
    values, widths = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        tot = [exact_chain(rule, synthetic_trajectory("dirichlet", 12, 6, rng), 2).totals for _ in range(8)]
        num = np.array([[x.tokens[0]] for x in tot])
        den = np.array([[x.rounds[0]] for x in tot])
        e, lo, hi = _bootstrap(num, den, 200, 0.95, np.random.default_rng(seed))
        values.append(e[0])
        widths.append((hi[0] - lo[0]) / (2 * 1.96))  # the interval's standard-error equivalent
    ratio = np.mean(widths) / np.std(values, ddof=1)
    # the SD of 20 values has a relative standard error of about 1/sqrt(38) = 16 %; 0.6..1.5 is
    # about three of them either side of 1 (a bootstrap of 8 requests is also ~7 % narrow)
    assert 0.6 < ratio < 1.5, ratio


def test_profile_plan_and_bad_input(tmp_path):
    prof = ct.AcceptanceProfile((0.8, 0.6, 0.45))
    res = ct.plan(prof, cost=COST)
    assert res.kind == "acceptance profile" and res.draft_lengths == (1, 2, 3)
    np.testing.assert_allclose(res.table[0]["tokens_per_call"], [1.8, 2.4, 2.85])
    with pytest.raises(ValueError, match="eps"):
        ct.plan(prof, eps=0.1, cost=COST)
    with pytest.raises(ValueError, match="cost"):
        ct.plan(RECORDS)
    with pytest.raises(ValueError, match="eps"):
        ct.plan(RECORDS, eps=-1, cost=COST)
    with pytest.raises(ValueError, match="m_max"):
        ct.plan(RECORDS, cost=COST, m_max=0)
    with pytest.raises(ValueError, match="recording"):
        ct.plan(tmp_path / "missing.npz", cost=COST)
    with pytest.raises(ValueError, match="cost"):
        ct.plan(prof, cost=ct.CostModel(0.1, (1.0, 1.0)))  # covers m <= 1 only
    with pytest.raises(ValueError, match="draft_cost"):
        ct.CostModel(-1.0, (1.0,))
    with pytest.raises(ValueError, match="verify_costs"):
        ct.CostModel(0.1, (0.0, 1.0))


def test_engine_config_refused_rule_says_why():
    from cactus_theory.planning._engine import engine_config

    # a knob the engine sets from each request is refused by the plugin's parser
    cfg, note = engine_config("scd", {"scd_temperature": 0.5}, 2)
    assert cfg is None and "refuses" in note and "scd_temperature" in note


def test_engine_config_of_a_sampler_served_rule_names_the_older_runner():
    from cactus_theory.integrations.vllm._config import parse_config
    from cactus_theory.planning._engine import engine_config

    # tas is served by the toolkit's sampler, which vLLM's newer runner refuses at start-up
    cfg, note = engine_config("tas", {}, 2)
    assert parse_config(cfg["additional_config"]["cactus_theory"]).path == "sampler"
    assert cfg["env"] == {"VLLM_USE_V2_MODEL_RUNNER": "0"} and "older model runner" in note
    # a rule vLLM's kernels realise needs no runner setting
    cfg, _ = engine_config("cactus-taylor", {"delta": 0.5}, 2)
    assert "env" not in cfg


def test_cost_model_file_round_trip(tmp_path):
    back = ct.CostModel.read(COST.write(tmp_path / "costs.json"))
    assert back.draft_cost == COST.draft_cost and back.verify_costs == COST.verify_costs
    with pytest.raises(ValueError, match="path"):
        ct.CostModel.read(tmp_path / "none.json")
