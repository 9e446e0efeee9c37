"""The plugin under load: vLLM's OpenAI server on the loopback address, many concurrent clients.

Two server runs (Cactus Taylor and interpolation), each with the recorder on, serving two tiny
random Llama models (:mod:`vllm_server`; 3 draft tokens, probabilistic drafting). In each run:

1. 64 non-greedy requests (seeded and unseeded, temperatures 1.0 and 0.7, some with top-k and
   top-p), 16 at a time. Then vLLM's ``/metrics`` counters equal what the recorder wrote for
   the same rounds (drafts and accepted tokens per position), and each position's count lies
   within its Clopper-Pearson interval of the exact survival computed from the recorded rows.
2. 40 mixed requests (greedy, seeded, unseeded), 16 at a time: every response arrives whole
   (status 200, ``finish_reason`` "length", all 24 tokens), greedy requests are reproducible
   and equal the verifier's own greedy decoding (transformers, float32), and the server is
   still healthy with nothing in its log but warnings.

Seeded non-greedy requests are not reproducible here, with or without a rule: vLLM 0.32's
draft-model proposer draws its drafts from the process's global generator
(``compute_probs_and_sample_next_token``: ``q.exponential_()`` with no per-request generator),
so a request's seed fixes its verification uniforms but not its drafts. The test pins this
(see :func:`_check_mixed`).

False failures: 3 positions x 2 runs at level 1e-5 each: below 6e-5 (and the server's
randomness is seeded, but concurrent scheduling is not: a run is not bit-reproducible).
"""

from __future__ import annotations

import importlib.util
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed here (./dev test runs this file in .venv-vllm)",
)

ALPHA = 1e-5
MAX_TOKENS = 24
RULES = [
    {"rule": "cactus-taylor", "delta": 0.5},
    {"rule": "interpolation", "alpha": 0.3},
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import vllm_server

    return vllm_server.build_models(tmp_path_factory.mktemp("models"))


def _prompts(n=8, seed=5):
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 128, size=int(rng.integers(6, 13))).tolist() for _ in range(n)]


def _run_all(server, bodies, workers):
    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        got = list(pool.map(server.complete, bodies))
    return got, time.monotonic() - t0


def _whole(resp):
    status, body = resp
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == MAX_TOKENS
    assert len(choice["token_ids"]) == MAX_TOKENS
    return tuple(choice["token_ids"])


def _greedy_reference(target, prompt):
    """The verifier's own greedy continuation (float32, transformers): what greedy speculative
    decoding must emit whatever the rule."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return tuple(out[0, len(prompt) :].tolist())


def _check_counters(server, rule_cfg, record):
    from cactus_theory.integrations.vllm._counters import compare_counters, recorded_rounds
    from cactus_theory.rules import get_rule

    prompts = _prompts(32, seed=7)
    bodies = []
    for i, prompt in enumerate(prompts):
        for seeded in (True, False):
            body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True, "return_token_ids": True}
            body["temperature"] = 1.0 if i % 2 else 0.7
            if i % 3 == 0:
                body.update(top_k=40, top_p=0.9)
            if seeded:
                body["seed"] = 100 + i
            bodies.append(body)
    responses, _ = _run_all(server, bodies, 16)
    for r in responses:
        _whole(r)
    counters = server.spec_counters()
    shards = sorted(record.glob("shard-*.npz"))  # one per step: all of this phase's rounds
    rec = recorded_rounds(shards)
    k = len(counters["per_pos"])
    # the metrics count exactly the recorded rounds: every round of these requests is recorded
    assert counters["drafts"] == len(rec.rounds)
    assert counters["draft_tokens"] == sum(len(r) for r in rec.rounds)
    np.testing.assert_array_equal(counters["per_pos"], rec.engine_counts(k))
    assert counters["accepted_tokens"] == counters["per_pos"].sum()
    knobs = {key: v for key, v in rule_cfg.items() if key not in ("rule", "record")}
    cmp = compare_counters(rec, get_rule(rule_cfg["rule"], **knobs), counters["per_pos"], alpha=ALPHA)
    assert cmp.ok, (cmp.observed, cmp.expected, cmp.low, cmp.high)
    # the check has power: on the same rows, plain speculative sampling's exact survival (what
    # the engine would count without the plugin) lies outside the intervals
    stock = compare_counters(rec, "sps", counters["per_pos"], alpha=ALPHA)
    assert not stock.ok, (stock.expected, cmp.low, cmp.high)
    # rows vLLM verified as if the draft were one-hot: its MRV1 runner drops every request's draft
    # probabilities for a step in which one request's are missing from its cache ("Missing
    # cached draft probabilities ... legacy speculative rejection"); the recorder records the p
    # the kernels used, so the counters above hold either way. Reported, not asserted (timing).
    one_hot = float(np.mean(rec.draft_probs.max(-1) == 1.0))
    return cmp, stock, one_hot


def _check_mixed(server, target):
    prompts = _prompts(8, seed=5)
    bodies, kinds = [], []
    for i, prompt in enumerate(prompts):
        base = {"prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True, "return_token_ids": True}
        for _ in range(2):
            bodies.append({**base, "temperature": 0.0})
            kinds.append(("greedy", i))
            bodies.append({**base, "temperature": 0.8, "seed": 1000 + i})
            kinds.append(("seeded", i))
        bodies.append({**base, "temperature": 0.8})
        kinds.append(("unseeded", i))
    order = np.random.default_rng(3).permutation(len(bodies))  # kinds interleaved in the queue
    responses, wall = _run_all(server, [bodies[j] for j in order], 16)
    got: dict = {}
    for j, resp in zip(order, responses):
        got.setdefault(kinds[j], []).append(_whole(resp))
    assert sum(len(v) for v in got.values()) == len(bodies)
    for i, prompt in enumerate(prompts):
        first, second = got[("greedy", i)]
        assert first == second, f"greedy request {i} not reproducible"
        assert first == _greedy_reference(target, prompt), f"greedy request {i} is not the verifier's argmax"
    # seeded requests: not reproducible in vLLM 0.32 (module docstring: the drafts ignore the
    # seed). Pinned: at temperature 0.8 on these models two runs of a request agree on all 24
    # tokens only if every draft and recovery repeats; most pairs differ.
    same = sum(got[("seeded", i)][0] == got[("seeded", i)][1] for i in range(len(prompts)))
    assert same < len(prompts), "seeded requests became reproducible: update the docstring and this check"
    status, _ = server.get("/health")
    assert status == 200 and server.proc.poll() is None
    log = server.tail(10**7)
    assert "Traceback" not in log and " ERROR " not in log, server.tail()
    return wall, same


@pytest.mark.parametrize("rule_cfg", RULES, ids=[r["rule"] for r in RULES])
def test_server_under_concurrent_load(models, rule_cfg, tmp_path):
    import vllm_server

    target, drafter = models
    record = tmp_path / "rows"
    cfg = {
        **rule_cfg,
        "record": {"folder": str(record), "max_bytes": 10**9, "rows_per_shard": 1, "top_k_raw": 128},
    }
    server = vllm_server.Server(target, drafter, cfg, tmp_path)
    try:
        cmp, stock, one_hot = _check_counters(server, cfg, record)
        wall, same = _check_mixed(server, str(target))
    finally:
        server.stop()
    print(
        f"{rule_cfg}: accepted per position {np.round(cmp.observed, 3)} exact {np.round(cmp.expected, 3)} "
        f"(SpS {np.round(stock.expected, 3)}); "
        f"rows verified with a one-hot p: {one_hot:.3f}; 40 mixed requests in {wall:.1f} s; "
        f"seeded pairs equal: {same}/8"
    )
