r"""Rules vLLM's kernels cannot realise, verified by the toolkit's own sampler (older runner).

A rule with its own acceptance and recovery (a ``DecisionPlan``: TAS, fuzzy SD, lossy SD,
entropy-verify, SGLang's threshold, ...) or with a target that is not a distribution (top-k)
is not speculative sampling against a normalized per-draft target, so no substituted verifier
row makes vLLM's kernels emit its law. The plugin then builds the rule's sampler once
(:func:`cactus_theory.make_sampler`: the accept path, the recovery and the bounds assembled
from the declaration when the engine builds its rejection sampler) and, in the older runner's
``rejection_sample``, runs it on the step's flat rows
(:func:`cactus_theory.samplers.ragged_forward`) in place of vLLM's random-sampling kernels:

* the verifier's rows are the kernel's q (the softmax of the processed logits), the drafter's
  its p (one-hot rows for a drafter without probabilities, as vLLM assumes), the bonus token
  vLLM's own, drawn from q;
* greedy requests keep vLLM's greedy kernel (its output is kept on their rows);
* seeded requests draw from their own generators (``sampling_metadata.generators``, keyed by
  request as the sampler's);
* a rule that reads raw rows gets the raw verifier logits' softmax and the drafter's raw row
  rebuilt from p (:func:`._rows.raw_draft_from_tempered`, checked by
  :func:`._rows.check_raw_draft`).

The emitted law at each position is then the rule's :math:`h_{alg}` (Theorem 3), as the
sampler's; ``tests/integrations/test_vllm_plugin.py`` checks it through vLLM's function for
every such rule with :func:`cactus_theory.testing.check_sampler_law`.

Symbols: q verifier, p drafter, n drafted token. Source: Hao & Mou, ICLR 2026 (arXiv
2604.04987), Theorem 3.
"""

from __future__ import annotations

from ..._extras import require
from ._rows import _mrv1_inputs, needs_raw

torch = require("torch", "cactus_theory.integrations.vllm", extra="vllm")

__all__ = ["mrv1_sampler_sample"]


def mrv1_sampler_sample(
    r1,
    sampler,
    rule,
    raw_logits,
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
    *args,
    **kwargs,
):
    """MRV1's ``rejection_sample`` output ``[B, max_spec_len + 1]`` int32 with the rule's sampler.

    ``r1`` is MRV1's module (``vllm/v1/sample/rejection_sampler.py``; its greedy kernel and
    placeholder id are used); ``sampler`` the rule's :class:`~cactus_theory.samplers.RuleSampler`;
    ``raw_logits`` the step's raw verifier logits (or None for a rule that reads none); the
    other arguments are ``rejection_sample``'s (vLLM's synthetic-mode keywords are not used:
    the plugin refuses that verifier at start-up).
    """
    from ...samplers import ragged_forward

    batch_size = len(num_draft_tokens)
    num_rows, vocab = target_logits.shape
    device = target_logits.device
    out = torch.full(
        (batch_size, max_spec_len + 1), r1.PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device
    )
    is_greedy = None
    if not sampling_metadata.all_random:
        is_greedy = sampling_metadata.temperature == r1.GREEDY_TEMPERATURE
        r1._rejection_greedy_sample(
            out, cu_num_draft_tokens, draft_token_ids, target_logits.argmax(dim=-1), bonus_token_ids,
            is_greedy, max_spec_len, torch.zeros(num_rows, dtype=torch.float64, device=device), None,
        )  # fmt: skip
    target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
    draft_probs, _, _, raw_draft = _mrv1_inputs(
        rule, draft_token_ids, num_draft_tokens, draft_probs, sampling_metadata, cu_num_draft_tokens,
        num_rows, vocab, device, False,
    )  # fmt: skip
    raw = {}
    if needs_raw(rule) and raw_logits is not None:
        raw = {"raw_target_probs": torch.softmax(raw_logits.to(torch.float32), dim=-1)}
        raw["raw_draft_probs"] = draft_probs if raw_draft is None else raw_draft
    ruled = ragged_forward(
        sampler,
        draft_token_ids.to(torch.int64),
        num_draft_tokens,
        draft_probs.to(torch.float32),
        target_probs,
        bonus_token_ids.reshape(batch_size, 1).to(torch.int64),
        cu_num_draft_tokens=cu_num_draft_tokens,
        generators=dict(sampling_metadata.generators or {}),
        max_spec_len=max_spec_len,
        **raw,
    ).to(torch.int32)
    if is_greedy is None:
        return ruled
    return torch.where(is_greedy.to(device)[:, None], out, ruled)
