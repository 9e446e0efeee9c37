"""cactus_theory.testing's adapter for the newer vLLM runner's padded layout (MRV2).

A padded-layout sampler built on the toolkit's SpS sampler passes; the same sampler reading
logits row i's draft from ``draft_sampled[i]`` instead of ``draft_sampled[i + 1]`` (the layout's
off-by-one) fails. False failures: the passing call runs at alpha = 1e-6 (family-wise, seeded).
"""

from __future__ import annotations

import pytest
import torch

import cactus_theory as ct
from cactus_theory.testing import check_sampler_law, padded_adapter

SPS = ct.make_sampler("sps")


def _padded_sampler(shift: int):
    def sample(target_probs, draft_probs, draft_sampled, cu_num_logits):
        b, k, v = draft_probs.shape
        starts = cu_num_logits[:-1].long()
        rows = torch.stack([target_probs[s : s + k + 1] for s in starts.tolist()])
        ids = torch.stack([draft_sampled[s + 1 - shift : s + 1 - shift + k] for s in starts.tolist()])
        bonus = torch.multinomial(rows[:, -1], 1)  # the bonus token drawn from the bonus row
        out = SPS(
            target_with_bonus_probs=rows, bonus_token_ids=bonus, draft_probs=draft_probs, draft_token_ids=ids
        )
        num = (out != -1).sum(-1)
        return out, num

    return sample


def test_a_correct_padded_sampler_passes_with_the_exact_invariants():
    res = check_sampler_law(padded_adapter(_padded_sampler(0)), "sps", num_samples=4000, seed=0)
    assert res.passed and res.interface == "padded"
    assert {"law", "acceptance", "layout", "bonus", "greedy"} <= {c.name for c in res.checks}


def test_the_draft_sampled_off_by_one_is_caught():
    res = check_sampler_law(
        padded_adapter(_padded_sampler(1)), "sps", num_samples=4000, seed=0, invariants=False
    )
    assert not res.passed and "law" in {c.name for c in res.failures}


def test_padded_adapter_needs_a_callable():
    with pytest.raises(TypeError, match="fn: expected a callable"):
        padded_adapter(3)
