"""The plugin's row substitution (``integrations/vllm/_rows.py``), without vLLM: the older runner's
rows are log h with greedy rows untouched, a truncated drafter row is reported once, the newer
runner's rows follow its layout, and SCD reads the raw rows at the request's temperature.
The oracle is the toolkit's own plan in float64 (``_exact_h``).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from vllm_processed import processed_row, softmax

from cactus_theory.integrations.vllm import _rows as plugin_rows
from cactus_theory.integrations.vllm._rows import mrv1_substitute, mrv2_substitute
from cactus_theory.rules import get_rule


def _exact_h(rule, q, p, n, **raw):
    """The per-draft target in float64 through the toolkit's own plan (the oracle)."""
    plan = rule.plan(q, p, **raw)
    return plan.target_at(np.asarray(n)) if hasattr(plan, "target_at") else plan.target


def test_mrv1_rows_are_log_h_and_greedy_rows_untouched():
    rule = get_rule("cactus-taylor", delta=0.3)
    rng = np.random.default_rng(1)
    q = rng.dirichlet(np.ones(6), size=5)
    p = rng.dirichlet(np.ones(6), size=5)
    n = np.array([0, 3, 5, 1, 2])
    logits = torch.tensor(np.log(q) + 1.7, dtype=torch.float32)  # a shift: logits, not log-probs
    meta = types.SimpleNamespace(all_random=False, temperature=torch.tensor([1.0, 0.0, 0.7]))
    _, new = mrv1_substitute(
        rule, torch.tensor(n), [2, 2, 1], torch.tensor(p, dtype=torch.float32), logits, meta
    )
    assert torch.equal(new[2:4], logits[2:4])  # request 1 is greedy: rows 2, 3 unchanged
    for i in (0, 1, 4):
        h = _exact_h(rule, q[i], p[i], n[i])
        # float32 softmax/log round-off on probabilities >= 1e-3
        np.testing.assert_allclose(torch.softmax(new[i], -1).numpy(), h, rtol=1e-5, atol=1e-6)


def test_truncated_drafter_rows_are_reported_once(monkeypatch, caplog):
    """The older runner rebuilds the drafter's raw row from p (right only when the drafter
    truncates nothing): a rule reading raw rows warns once when a substituted p has zeros (a
    top-k drafter) or is one-hot (no drafter probabilities); full rows and greedy rows do not
    warn, nor does a rule that reads no raw rows."""
    monkeypatch.setattr(plugin_rows, "_RAW_WARNED", set())
    rng = np.random.default_rng(3)
    V = 8
    q = torch.tensor(rng.dirichlet(np.ones(V), size=3), dtype=torch.float32)
    full = torch.tensor(rng.dirichlet(np.ones(V), size=3), dtype=torch.float32)
    top2 = full * (full >= full.topk(2, dim=-1).values[:, 1:]).float()
    top2 = top2 / top2.sum(-1, keepdim=True)
    n = torch.tensor([0, 3, 5])
    greedy_first = types.SimpleNamespace(all_random=False, temperature=torch.tensor([0.0, 0.7]))
    truncated_greedy = torch.cat([top2[:1], full[1:]])  # only the greedy request's row truncated
    meta = types.SimpleNamespace(all_random=True, temperature=torch.tensor([1.0, 0.7]))

    def warnings_after(rule, p, m=meta):
        caplog.clear()
        with caplog.at_level("WARNING", logger="vllm.cactus_theory"):
            mrv1_substitute(rule, n, [1, 2], p, torch.log(q), m, raw_target_logits=torch.log(q))
        return [r for r in caplog.records if "raw row" in r.getMessage()]

    opt = get_rule("cascade-opt", alpha=0.05)
    assert warnings_after(opt, full) == []
    assert warnings_after(opt, truncated_greedy, greedy_first) == []
    assert warnings_after(get_rule("cascade-opt", alpha=0.05, gate="processed"), top2) == []
    first = warnings_after(opt, top2)
    assert len(first) == 1 and "'cascade-opt'" in first[0].getMessage()
    assert warnings_after(opt, top2) == []  # once
    assert len(warnings_after(get_rule("scd"), None)) == 1  # one-hot p: no drafter row at all


def test_mrv2_rows_follow_its_layout():
    """Row j verifies draft_sampled[j+1] against the drafter's logits at [state, local]/T."""
    rule = get_rule("interpolation", alpha=0.4)
    rng = np.random.default_rng(2)
    V, k = 6, 2
    q = rng.dirichlet(np.ones(V), size=5)  # request 0: rows 0,1 + bonus 2; request 1: row 3 + bonus 4
    draft_logits = torch.tensor(rng.normal(size=(4, k, V)), dtype=torch.float32)  # [max_reqs, k, V]
    draft_sampled = torch.tensor([9, 4, 1, 7, 2], dtype=torch.int64)  # token after each row's input
    cu = torch.tensor([0, 3, 5])
    state = torch.tensor([2, 2, 2, 0, 0])
    local = torch.tensor([0, 1, 2, 0, 1])
    for temps, random_rows in (([0.8, 9, 0.5, 9], [0, 1, 3]), ([0.0, 9, 0.5, 9], [0, 1])):
        temperature = torch.tensor(temps)
        logits = torch.tensor(np.log(q), dtype=torch.float32)
        new = mrv2_substitute(rule, logits, draft_logits, draft_sampled, cu, state, local, temperature)
        for j in range(5):
            if j not in random_rows:
                assert torch.equal(new[j], logits[j]), j  # bonus and greedy rows keep q
                continue
            t = temps[int(state[j])]
            p = torch.softmax(draft_logits[state[j], local[j]].double() / t, -1).numpy()
            h = _exact_h(rule, q[j], p, int(draft_sampled[j + 1]))
            # the substituted row is float32 logits: its softmax is h to float32 rounding (eps 1.2e-7
            # relative per entry through log and softmax; 1e-5 relative, 1e-6 absolute for tiny entries)
            np.testing.assert_allclose(torch.softmax(new[j], -1).numpy(), h, rtol=1e-5, atol=1e-6)


def test_mrv2_raw_rows_and_request_temperature():
    """MRV2: SCD reads the raw verifier logits and softmax(draft_logits) (the drafter's raw row),
    with the request's temperature, on the processed rows the kernel gets."""
    rule = get_rule("scd", scd_beta=0.5)
    rng = np.random.default_rng(6)
    V, k = 10, 2
    raw_logits = torch.tensor(2 * rng.standard_normal((5, V)), dtype=torch.float32)
    draft_logits = torch.tensor(2 * rng.standard_normal((2, k, V)), dtype=torch.float32)
    draft_sampled = torch.tensor([9, 4, 1, 7, 2], dtype=torch.int64)
    cu = torch.tensor([0, 3, 5])
    state = torch.tensor([1, 1, 1, 0, 0])
    local = torch.tensor([0, 1, 2, 0, 1])
    temperature = torch.tensor([0.8, 0.6])
    processed = []
    for j in range(5):
        T = float(temperature[state[j]])
        processed.append(processed_row(raw_logits[j].double().numpy(), T, 6, 0.9))
    processed = np.array(processed)
    with np.errstate(divide="ignore"):  # log 0 = -inf: the truncated tokens
        tl = torch.tensor(np.log(processed), dtype=torch.float32)
    new = mrv2_substitute(rule, tl, draft_logits, draft_sampled, cu, state, local, temperature, raw_logits)
    for j in (0, 1, 3):
        T = float(temperature[state[j]])
        z_a = draft_logits[state[j], local[j]].double().numpy()
        h = _exact_h(
            get_rule("scd", scd_beta=0.5, scd_temperature=T),
            processed[j],
            softmax(z_a / T),
            int(draft_sampled[j + 1]),
            raw_target_probs=softmax(raw_logits[j].double().numpy()),
            raw_draft_probs=softmax(z_a),
        )
        # float32 against float64 (see the MRV1 test)
        np.testing.assert_allclose(torch.softmax(new[j].double(), -1).numpy(), h, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="raw"):
        mrv2_substitute(rule, tl, draft_logits, draft_sampled, cu, state, local, temperature)
