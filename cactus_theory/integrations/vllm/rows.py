r"""Row substitution: the verifier rows a rule's per-draft target h replaces (torch, no vLLM).

For a rule of the form "speculative sampling against a per-draft target h" (Theorem 3's
structure: :math:`a_n = \min(1, h^{(n)}_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, h^{(n)} - p))`), replacing the verifier row q of a drafted
token n by :math:`h^{(n)}` makes any exact SpS kernel realise the rule:

.. math:: \text{logits}' = \log h^{(n)}\quad(\log 0 = -\infty),

since softmax(logits') = h (h sums to 1, checked at start-up) and the kernel accepts with
:math:`\min(1, h_n/p_n)` and recovers from :math:`\max(h - p, 0)`. Greedy rows (temperature 0)
and bonus rows are returned unchanged, so the greedy kernel and the bonus token see q.

The computation is float32 on the input's device, through the rule's array-API ``plan``
(:mod:`cactus_theory.rules.plans`): the formulas are the ones the exact analysis uses. No
boolean indexing: every row is computed and ``torch.where`` keeps the untouched ones.

Symbols: q verifier (``target_logits`` softmaxed), p drafter (``draft_probs``), n drafted token
(``draft_token_ids``), h target. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 2-3.
"""

from __future__ import annotations

from ..._extras import require
from ...rules import Rule
from ...rules.plans import SpikePlan, TargetPlan, gather, spike_target_at

torch = require("torch", "cactus_theory.integrations.vllm", extra="vllm")

__all__ = ["target_rows", "substitute_target_logits", "mrv1_substitute", "mrv2_substitute"]


def target_rows(
    rule: Rule, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_token_ids: torch.Tensor
) -> torch.Tensor:
    r"""The per-draft target :math:`h^{(n)}` of each row, float32, shape ``[num_rows, V]``.

    Parameters
    ----------
    rule : Rule
        A rule whose plan is a ``TargetPlan`` or ``SpikePlan``.
    target_probs, draft_probs : Tensor, shape (num_rows, V)
        Processed verifier q and drafter p (rows renormalized here in float32).
    draft_token_ids : Tensor, shape (num_rows,)
        The drafted token n of each row (must lie in [0, V)).
    """
    q = target_probs.to(torch.float32)
    p = draft_probs.to(torch.float32)
    q = q / q.sum(-1, keepdim=True)
    p = p / p.sum(-1, keepdim=True)
    ids = draft_token_ids.to(torch.int64)
    if hasattr(rule, "spike"):
        # Cactus with a fixed delta: gamma is an elementwise function of q_n, so evaluate it at
        # the drafted token only (Theorem 2's h^(n) without gamma for all V tokens).
        return spike_target_at(q, ids, rule.spike(gather(q, ids)))
    plan = rule.plan(q, p)
    if isinstance(plan, SpikePlan):
        return plan.target_at(ids)
    if isinstance(plan, TargetPlan):
        return plan.target
    raise ValueError(f"rule: {rule.name!r} gives a {type(plan).__name__}, not a per-draft target")


def substitute_target_logits(
    rule: Rule,
    target_logits: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    """``log h`` on the rows where ``rows`` is True, ``target_logits`` elsewhere (a new tensor).

    Parameters
    ----------
    rule : Rule
        The configured rule.
    target_logits : Tensor, shape (num_rows, V)
        Processed verifier logits (temperature, top-k/top-p applied); float32 result.
    draft_probs : Tensor, shape (num_rows, V)
        Drafter probabilities p of each row.
    draft_token_ids : Tensor, shape (num_rows,)
        Drafted token of each row; rows with a negative id (vLLM's placeholder) are left unchanged.
    rows : Tensor of bool, shape (num_rows,)
        Rows to substitute (non-greedy, non-bonus).
    """
    logits = target_logits.to(torch.float32)
    if logits.shape[0] == 0:
        return logits.clone()
    valid = rows & (draft_token_ids >= 0)
    ids = draft_token_ids.to(torch.int64).clamp(min=0)
    q = torch.softmax(logits, dim=-1)
    h = target_rows(rule, q, draft_probs, ids)
    return torch.where(valid[:, None], torch.log(h), logits)


def mrv1_substitute(
    rule: Rule,
    draft_token_ids,
    num_draft_tokens,
    draft_probs,
    target_logits,
    sampling_metadata,
    cu_num_draft_tokens=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New ``(draft_probs, target_logits)`` for MRV1's module-level ``rejection_sample``.

    MRV1 layout (``vllm/v1/sample/rejection_sampler.py``): flat rows, one per drafted token,
    request i owning ``num_draft_tokens[i]`` of them; the bonus rows are not among them.
    Greedy requests (``sampling_metadata.temperature == 0``) keep their rows. ``draft_probs``
    None (a drafter without probabilities) becomes the one-hot rows the kernel would assume.
    ``cu_num_draft_tokens`` (the kernel's device tensor of cumulative counts, request i's rows
    ending at ``cu_num_draft_tokens[i]``), when given, maps rows to requests on the device
    (row j belongs to the first request whose end exceeds j); without it the Python list
    ``num_draft_tokens`` is copied to the device (a blocking host-to-device copy).
    """
    num_rows, vocab = target_logits.shape
    device = target_logits.device
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft_token_ids.to(torch.int64).clamp(min=0), vocab).to(
            torch.float32
        )
    if sampling_metadata.all_random:
        rows = torch.ones(num_rows, dtype=torch.bool, device=device)
    else:
        random_req = sampling_metadata.temperature != 0
        if cu_num_draft_tokens is not None:
            ends = cu_num_draft_tokens.to(device=device, dtype=torch.int64)
            row_ids = torch.arange(num_rows, device=device, dtype=torch.int64)
            req = torch.searchsorted(ends, row_ids, right=True).clamp(max=ends.shape[0] - 1)
            rows = random_req[req]
        else:
            counts = torch.as_tensor(list(num_draft_tokens), device=device)
            rows = torch.repeat_interleave(random_req, counts, output_size=num_rows)
    new_logits = substitute_target_logits(rule, target_logits, draft_probs, draft_token_ids, rows)
    return draft_probs.contiguous(), new_logits.contiguous()


def mrv2_substitute(
    rule: Rule,
    target_logits,
    draft_logits,
    draft_sampled,
    cu_num_logits,
    expanded_idx_mapping,
    expanded_local_pos,
    temperature,
) -> torch.Tensor:
    """New ``target_logits`` for MRV2's ``rejection_sample`` (``rejection_sampler_utils.py``).

    MRV2 layout: request r owns logits rows ``cu_num_logits[r] : cu_num_logits[r+1]``, the last
    one the bonus row; row j verifies the token ``draft_sampled[j + 1]``; the drafter's raw
    logits of row j are ``draft_logits[expanded_idx_mapping[j], expanded_local_pos[j]]``,
    divided by the request's temperature (``temperature[expanded_idx_mapping[j]]``) as the
    kernel does; temperature 0 means greedy. ``draft_logits`` None means one-hot drafts.
    """
    num_rows, vocab = target_logits.shape
    device = target_logits.device
    if num_rows == 0:
        return target_logits
    is_bonus = torch.zeros(num_rows, dtype=torch.bool, device=device)
    # (index_fill_ takes the value as a scalar: no host tensor to copy to the device)
    is_bonus.index_fill_(0, (cu_num_logits[1:] - 1).to(torch.int64), True)
    next_tok = torch.full((num_rows,), -1, dtype=torch.int64, device=device)
    next_tok[:-1] = draft_sampled[1:num_rows].to(torch.int64)
    state = expanded_idx_mapping.to(torch.int64)
    temp = temperature.to(torch.float32)[state]
    rows = (~is_bonus) & (temp != 0)
    if draft_logits is None:
        p = torch.nn.functional.one_hot(next_tok.clamp(min=0), vocab).to(torch.float32)
    else:
        local = expanded_local_pos.to(torch.int64).clamp(max=draft_logits.shape[1] - 1)
        raw = draft_logits[state, local, :vocab].to(torch.float32)
        safe_t = torch.where(temp != 0, temp, torch.ones_like(temp))
        p = torch.softmax(raw / safe_t[:, None], dim=-1)
    return substitute_target_logits(rule, target_logits, p, next_tok, rows).contiguous()
