"""The sampler adapters (``testing/_adapters.py``): vLLM V1's flat layout, the choice of adapter, a
numpy callable.

False-failure probability: every check_sampler_law call below runs at the default
alpha = 1e-6 (family-wise, Bonferroni over its tests; exact for the binomial and Bernstein
tests, asymptotic for chi-square); seeds are fixed, so a run is reproducible.
"""

from __future__ import annotations

import numpy as np
import torch

import cactus_theory as ct
from cactus_theory.rules import get_rule
from cactus_theory.samplers import ragged_forward
from cactus_theory.testing import (
    assert_sampler_law,
    callable_adapter,
    reference_sampler,
    v0_adapter,
    v1_adapter,
)
from cactus_theory.testing._adapters import as_adapter

SPS = get_rule("sps")


def _v1_rejection_sample(
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
):
    """vLLM V1's ``rejection_sample`` signature over the toolkit's ragged sampler: SpS on the
    softmax of the logits, greedy requests (temperature 0) verified against the argmax."""
    probs = torch.softmax(target_logits, -1)
    greedy = (sampling_metadata.temperature == 0).repeat_interleave(torch.tensor(num_draft_tokens))
    one_hot = torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)
    probs = torch.where(greedy[:, None], one_hot, probs)
    return ragged_forward(
        ct.make_sampler("sps"),
        draft_token_ids,
        num_draft_tokens,
        draft_probs,
        probs,
        bonus_token_ids,
        generators=sampling_metadata.generators,
        max_spec_len=max_spec_len,
    )


def test_the_v1_adapter_on_the_flat_layout():
    assert as_adapter(_v1_rejection_sample).name == "vllm-v1"
    res = assert_sampler_law(v1_adapter(_v1_rejection_sample), SPS, num_samples=8000, seed=4)
    greedy = [c for c in res.checks if c.name == "greedy"]
    assert len(greedy) == 5 and all("temperature 0" in c.detail for c in greedy)  # 4 cases of k = 3, deep


def test_adapter_choice_and_a_numpy_callable():
    assert as_adapter(ct.make_sampler("sps")).name == "vllm-v0"
    assert as_adapter(reference_sampler()).name == "callable"
    adapter = v0_adapter(ct.make_sampler("sps"))
    assert as_adapter(adapter) is adapter and adapter.supports_seeds

    def numpy_sps(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        assert isinstance(target_probs, np.ndarray)
        return reference_sampler("sps")(
            *(torch.as_tensor(a) for a in (target_probs, draft_probs, draft_token_ids, bonus_token_ids))
        ).numpy()

    assert assert_sampler_law(callable_adapter(numpy_sps, array="numpy"), SPS, num_samples=4000).passed
