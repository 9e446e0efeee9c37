"""cactus_theory.testing with rules that decide on the raw (temperature-1) rows.

SCD (``rules.spec.needs_raw``) is checked on a case whose processed rows are the raw rows at
temperature 0.5, where its exact law differs from the raw = processed law (emitted L1 distance
0.14, pinned below). False failures: the passing call runs at alpha = 1e-6 (family-wise, seeded).
"""

from __future__ import annotations

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.testing import check_sampler_law, exact_law, v1_adapter

RAW_Q = np.array([[0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
RAW_P = np.array([[0.1, 0.2, 0.3, 0.4]])


def _temperature(x, t):
    y = x ** (1 / t)
    return y / y.sum(-1, keepdims=True)


Q, P = _temperature(RAW_Q, 0.5), _temperature(RAW_P, 0.5)
RULE = ct.get_rule("scd")


def test_the_raw_rows_change_the_exact_law():
    with_raw = exact_law(RULE, Q, P, raw_target_probs=RAW_Q, raw_draft_probs=RAW_P)
    same = exact_law(RULE, Q, P)
    assert RULE.spec.needs_raw
    # well above float64 rounding: the two laws are different distributions
    assert np.abs(with_raw.emitted - same.emitted).sum() > 0.1


def test_a_sampler_given_the_raw_rows_passes_and_one_that_drops_them_fails():
    sampler = ct.make_sampler(RULE)
    kw = dict(raw_target_probs=RAW_Q, raw_draft_probs=RAW_P, seed=0, invariants=False)
    assert check_sampler_law(sampler, RULE, Q, P, num_samples=4000, **kw).passed

    def drops_raw(
        target_probs, draft_probs, draft_token_ids, bonus_token_ids, raw_target_probs, raw_draft_probs
    ):
        return sampler(
            target_with_bonus_probs=target_probs,
            bonus_token_ids=bonus_token_ids,
            draft_probs=draft_probs,
            draft_token_ids=draft_token_ids,
        )

    res = check_sampler_law(drops_raw, RULE, Q, P, **kw)
    assert not res.passed and "law" in {c.name for c in res.failures}


def test_raw_rows_are_refused_where_the_interface_carries_none():
    def no_raw(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        raise AssertionError("not called")

    kw = dict(raw_target_probs=RAW_Q, raw_draft_probs=RAW_P)
    with pytest.raises(ValueError, match="raw_target_probs: the callable interface passes no raw rows"):
        check_sampler_law(no_raw, RULE, Q, P, **kw)
    with pytest.raises(ValueError, match="raw_target_probs: the vllm-v1 interface"):
        check_sampler_law(v1_adapter(no_raw), RULE, Q, P, **kw)
    with pytest.raises(ValueError, match="raw_target_probs: raw rows need explicit"):
        check_sampler_law(ct.make_sampler(RULE), RULE, **kw)
    with pytest.raises(ValueError, match="raw_draft_probs: each case needs shape"):
        check_sampler_law(ct.make_sampler(RULE), RULE, Q, P, raw_target_probs=RAW_Q, raw_draft_probs=RAW_Q)
