"""Batched incremental decoding with a KV cache, and the sampling transforms.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``); a processed distribution is
what the sampler sees after temperature, top-k and top-p, a raw one is the temperature-1 softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..distributions import _process_sorted_logits, _top_candidates
from ._torch import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling transforms (the paper's code defaults: temperature 0.6, top-p 0.95, top-k 20).

    The processed distribution of logits ``z`` is, in this order (vLLM's and transformers'):
    ``s = z / T``; keep the ``top_k`` largest ``s`` (ties: lower token id first); among them keep
    the smallest prefix, in decreasing order, whose probability ``softmax(s)`` restricted to the
    top-k set reaches ``top_p`` (the first token always kept); renormalize. ``top_k <= 0`` or
    ``top_p >= 1`` disables that step. ``temperature == 0`` means greedy (a one-hot).
    """

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}


def raw_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """float64 ``log softmax(z)`` along the last axis (the raw, temperature-1 distribution)."""
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def processed_sparse(logits: torch.Tensor, sp: SamplingParams, support_cap: int = 256):
    """Processed distribution as a sparse top list.

    Parameters
    ----------
    logits : Tensor [..., V]
    sp : SamplingParams
    support_cap : int
        When ``top_k`` is disabled, the support is searched among the ``support_cap`` largest
        logits (top-p mass beyond them is cut; stated in the dump metadata).

    The toolkit's one transform (:func:`cactus_theory.distributions._sampling_transform`: its
    order and tie rule, equal logits by increasing token id) on the ``K`` first candidates.

    Returns
    -------
    ids : LongTensor [..., K]
        Candidate ids in decreasing logit order, ties by increasing id (K = top_k or support_cap).
    probs : DoubleTensor [..., K]
        Processed probabilities on ``ids`` (zeros outside the kept support); rows sum to 1 in
        float64.
    """
    k = sp.top_k if sp.top_k and sp.top_k > 0 else support_cap
    ids, vals = _top_candidates(logits, k)
    return ids, _process_sorted_logits(vals, temperature=sp.temperature, top_p=sp.top_p)


def processed_dense(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """Processed distribution on the full vocabulary, float64 [..., V]."""
    ids, pr = processed_sparse(logits, sp)
    out = torch.zeros(logits.shape, dtype=torch.float64, device=logits.device)
    out.scatter_(-1, ids, pr)
    return out


def _cache_kwarg(model) -> str:
    """transformers >= 5.2x names the cache argument ``cache``; older ones ``past_key_values``."""
    import inspect

    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class BatchRunner:
    """Incremental batched forward passes of a Hugging Face causal LM with a KV cache.

    Prompts of different lengths are left-padded; ``attention_mask`` and ``position_ids`` keep
    every row equal to its unpadded forward pass (up to float32 rounding of the kernels).
    """

    def __init__(self, model, pad_id: int = 0, hidden_states: bool = False):
        self.model = model
        self.pad_id = pad_id
        self.hidden_states = hidden_states
        self.device = next(model.parameters()).device
        self.cache = None

    def _forward(self, ids, pos):
        from transformers import DynamicCache

        if self.cache is None:
            self.cache = DynamicCache()
        kw = {_cache_kwarg(self.model): self.cache}
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=pos,
            use_cache=True,
            output_hidden_states=self.hidden_states,
            **kw,
        )
        return out

    @torch.no_grad()
    def prefill(self, seqs):
        """Run the prompts; returns the model output (logits ``[B, L, V]``)."""
        B, L = len(seqs), max(len(s) for s in seqs)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, L - len(s) :] = torch.as_tensor(s, dtype=torch.long)
            mask[i, L - len(s) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = None
        self.mask = mask
        self.next_pos = pos[:, -1] + 1
        return self._forward(ids, pos)

    @torch.no_grad()
    def step(self, tokens):
        """Feed ``tokens`` ``[B]`` or ``[B, n]``; returns the output for those positions."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
        if tokens.dim() == 1:
            tokens = tokens[:, None]
        B, n = tokens.shape
        self.mask = torch.cat([self.mask, torch.ones((B, n), dtype=self.mask.dtype, device=self.device)], 1)
        pos = self.next_pos[:, None] + torch.arange(n, device=self.device)
        self.next_pos = self.next_pos + n
        return self._forward(tokens, pos)

    def crop(self, keep: int) -> None:
        """Keep the first ``keep`` cached positions (batch size 1 use: rejected drafts)."""
        drop = self.mask.shape[1] - keep
        if drop <= 0:
            return
        self.cache.crop(-drop)  # negative: remove that many (works in transformers 4.x and 5.x)
        self.mask = self.mask[:, :keep]
        self.next_pos = self.next_pos - drop

    @property
    def length(self) -> int:
        return 0 if self.cache is None else int(self.mask.shape[1])


def sample_from(probs: np.ndarray | torch.Tensor, ids, generator: torch.Generator):
    """Sample one id per row of a sparse ``(ids, probs)`` distribution."""
    probs = torch.as_tensor(probs, dtype=torch.float64)
    j = torch.multinomial(probs, 1, generator=generator)
    return torch.gather(torch.as_tensor(ids), -1, j)[..., 0]


__all__ = [
    "BatchRunner",
    "SamplingParams",
    "processed_dense",
    "processed_sparse",
    "raw_log_probs",
    "sample_from",
]
