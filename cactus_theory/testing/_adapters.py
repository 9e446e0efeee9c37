r"""Adapters: one calling convention for the rejection samplers of engines and papers.

:func:`~cactus_theory.testing.assert_sampler_law` calls every sampler through an adapter
that takes a batch in vLLM 0.7's V0 layout (:class:`SamplerInputs`) and returns the ``[B, k+1]``
int64 output (the accepted drafts, then one recovered-or-bonus token, then ``-1``):

* :func:`v0_adapter`: vLLM 0.7's sampler interface, ``RejectionSampler.forward(
  target_with_bonus_probs [B, k+1, V], bonus_token_ids [B, 1], draft_probs [B, k, V],
  draft_token_ids [B, k], seeded_seqs=None)`` (also :func:`cactus_theory.make_sampler`),
  with vLLM's counters ``num_accepted_tokens``, ``num_emitted_tokens``, ``num_draft_tokens``;
* :func:`v1_adapter`: vLLM V1's module-level ``rejection_sample(draft_token_ids,
  num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
  bonus_token_ids, sampling_metadata)`` (flat layout; ``target_logits = log q``; greedy
  requests flagged by temperature 0, seeded ones by ``sampling_metadata.generators``);
* :func:`callable_adapter`: a plain function ``fn(target_probs [B, k+1, V], draft_probs
  [B, k, V], draft_token_ids [B, k], bonus_token_ids [B, 1]) -> [B, k+1]`` on torch tensors
  or numpy arrays, with an optional ``seeded_seqs`` keyword.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
vLLM 0.7.3 ``vllm/model_executor/layers/rejection_sampler.py``; vLLM 0.32
``vllm/v1/sample/rejection_sampler.py``.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._torch import torch

#: vLLM 0.7's counters on a V0 sampler (0-dim tensors, or an int for ``num_draft_tokens``).
COUNTER_NAMES = (
    "num_accepted_tokens",
    "num_emitted_tokens",
    "num_draft_tokens",
    "num_accepted_prefix_tokens",
)


def _parameters(fn) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature
        return {}


def _probe_capabilities(adapter, fn) -> None:
    """The optional inputs ``fn`` takes, read from its parameter names (seeded generators, raw
    rows, acceptance uniforms), set on ``adapter``."""
    params = set(_parameters(fn))
    adapter.supports_seeds = "seeded_seqs" in params
    adapter.supports_raw = {"raw_target_probs", "raw_draft_probs"} <= params
    adapter.supports_uniforms = "uniform_samples" in params


def _optional_keywords(adapter, inputs, convert=None) -> dict:
    """The optional inputs the sampler takes (``_probe_capabilities``), as its keywords;
    ``convert`` maps the raw rows and the uniforms (e.g. to numpy)."""
    convert = convert or (lambda t: t)
    kwargs = {"seeded_seqs": inputs.seeded_seqs} if adapter.supports_seeds else {}
    if inputs.raw is not None:
        kwargs["raw_target_probs"], kwargs["raw_draft_probs"] = (convert(r) for r in inputs.raw)
    if inputs.uniform_samples is not None:
        kwargs["uniform_samples"] = convert(inputs.uniform_samples)
    return kwargs


@dataclass
class SamplerInputs:
    """One batch the check hands an adapter, in vLLM 0.7's V0 layout.

    Attributes
    ----------
    target_probs : Tensor, shape [B, k+1, V]
        Verifier rows; the last position is the bonus row.
    bonus_token_ids : Tensor, shape [B, 1]
        Bonus tokens drawn from the bonus row.
    draft_probs : Tensor, shape [B, k, V]
        Drafter rows.
    draft_token_ids : Tensor, shape [B, k]
        Drafted tokens, drawn from the drafter rows (-1: a placeholder draft).
    seeded_seqs : dict of int to torch.Generator, optional
        Rows with their own generator.
    greedy : Tensor of bool, shape [B], optional
        Rows flagged greedy (an adapter with ``supports_greedy_flag``).
    raw : (Tensor [B, k+1, V], Tensor [B, k, V]), optional
        The raw (temperature-1) rows.
    uniform_samples : Tensor, shape [B, k+1], optional
        The acceptance uniforms.
    """

    target_probs: torch.Tensor
    bonus_token_ids: torch.Tensor
    draft_probs: torch.Tensor
    draft_token_ids: torch.Tensor
    seeded_seqs: dict | None = None
    greedy: torch.Tensor | None = None
    raw: tuple | None = None
    uniform_samples: torch.Tensor | None = None


class SamplerAdapter:
    """A sampler seen through one calling convention (the V0 layout in, ``[B, k+1]`` out).

    Attributes
    ----------
    name : str
        The interface (``"vllm-v0"``, ``"vllm-v1"``, ``"callable"``).
    supports_seeds : bool
        Rows can be seeded with a ``torch.Generator`` each.
    supports_greedy_flag : bool
        Rows can be flagged greedy (vLLM V1: temperature 0); otherwise a greedy row is a row
        whose verifier distributions are one-hot (what temperature 0 makes of q).
    supports_raw : bool
        The sampler takes raw (temperature-1) rows, ``raw=(raw_target_probs [B, k+1, V],
        raw_draft_probs [B, k, V])``, for the rules that decide on them.
    supports_uniforms : bool
        The sampler takes its acceptance uniforms as ``uniform_samples`` ``[B, k+1]`` (float32
        in [0, 1)), as FlashInfer's chain speculative sampling did.
    draws_drafts : bool
        The sampler draws the drafts itself from the drafter rows and writes them into the
        inputs' ``draft_token_ids`` (:func:`drafting_adapter`).
    """

    name = "adapter"
    supports_seeds = False
    supports_greedy_flag = False
    supports_raw = False
    supports_uniforms = False
    draws_drafts = False

    def __call__(self, inputs: SamplerInputs) -> torch.Tensor:
        raise NotImplementedError

    def counters(self) -> dict[str, int] | None:
        """The sampler's acceptance counters now, or None when it keeps none."""
        return None


class _V0(SamplerAdapter):
    name = "vllm-v0"

    def __init__(self, sampler):
        self.sampler = sampler
        forward = getattr(sampler, "forward", sampler)
        _probe_capabilities(self, forward)

    def __call__(self, inputs):
        kwargs = {
            "target_with_bonus_probs": inputs.target_probs,
            "bonus_token_ids": inputs.bonus_token_ids,
            "draft_probs": inputs.draft_probs,
            "draft_token_ids": inputs.draft_token_ids,
            **_optional_keywords(self, inputs),
        }
        if getattr(self.sampler, "num_accepted_tokens", 0) is None and callable(
            getattr(self.sampler, "init_tensors", None)
        ):
            # vLLM creates its device counters in init_tensors and fails on a fresh sampler
            self.sampler.init_tensors(inputs.target_probs.device)
        return torch.as_tensor(self.sampler(**kwargs)).to(torch.int64)

    def counters(self):
        got = {}
        for name in COUNTER_NAMES:
            value = getattr(self.sampler, name, None)
            if value is not None:
                got[name] = int(value)
        return got or None


class _V1(SamplerAdapter):
    name = "vllm-v1"
    supports_seeds = True
    supports_greedy_flag = True

    def __init__(self, rejection_sample, sampling_metadata=None):
        self.fn = rejection_sample
        self.make_metadata = sampling_metadata or _sampling_metadata

    def __call__(self, inputs):
        target_probs, draft_probs, draft_token_ids = (
            inputs.target_probs,
            inputs.draft_probs,
            inputs.draft_token_ids,
        )
        b, k = draft_token_ids.shape
        v = target_probs.shape[-1]
        device = target_probs.device
        temperature = torch.ones(b, dtype=torch.float32, device=device)
        if inputs.greedy is not None:
            temperature = torch.where(inputs.greedy.to(device), torch.zeros_like(temperature), temperature)
        cu = (torch.arange(1, b + 1, device=device, dtype=torch.int32) * k).contiguous()
        logits = torch.log(target_probs[:, :k].to(torch.float32)).reshape(b * k, v).contiguous()
        out = self.fn(
            draft_token_ids.reshape(-1).to(torch.int32).contiguous(),
            [k] * b,
            k,
            cu,
            draft_probs.reshape(b * k, v).to(torch.float32).contiguous(),
            logits,
            inputs.bonus_token_ids.to(torch.int64).contiguous(),
            self.make_metadata(temperature, dict(inputs.seeded_seqs or {})),
        )
        return torch.as_tensor(out).to(torch.int64)


def _sampling_metadata(temperature: torch.Tensor, generators: dict[int, torch.Generator]):
    """The fields of vLLM V1's ``SamplingMetadata`` that ``rejection_sample`` reads."""
    greedy = temperature == 0
    return types.SimpleNamespace(
        temperature=temperature,
        all_greedy=bool(greedy.all()),
        all_random=bool((~greedy).all()),
        generators=generators,
        top_k=None,
        top_p=None,
    )


class _Callable(SamplerAdapter):
    name = "callable"

    def __init__(self, fn, array: str):
        if array not in ("torch", "numpy"):
            raise ValueError(f"array: expected 'torch' or 'numpy', got {array!r}")
        self.fn = fn
        self.array = array
        _probe_capabilities(self, fn)

    def __call__(self, inputs):
        args = (inputs.target_probs, inputs.draft_probs, inputs.draft_token_ids, inputs.bonus_token_ids)
        to_numpy = self.array == "numpy"
        if to_numpy:
            args = tuple(a.cpu().numpy() for a in args)
        kwargs = _optional_keywords(self, inputs, (lambda t: t.cpu().numpy()) if to_numpy else None)
        out = self.fn(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.to(torch.int64)
        return torch.as_tensor(np.asarray(out), dtype=torch.int64)


def v0_adapter(sampler) -> SamplerAdapter:
    """vLLM 0.7's V0 sampler interface (``RejectionSampler`` or :func:`cactus_theory.make_sampler`).

    Parameters
    ----------
    sampler : callable
        Called as ``sampler(target_with_bonus_probs=, bonus_token_ids=, draft_probs=,
        draft_token_ids=[, seeded_seqs=])`` (the last only when its ``forward`` takes it);
        its counters ``num_accepted_tokens`` (non-causal: every accepted position, vLLM
        0.7's ``_create_output``), ``num_emitted_tokens``, ``num_draft_tokens`` and
        ``num_accepted_prefix_tokens`` are read when present.
    """
    return _V0(sampler)


def v1_adapter(rejection_sample: Callable, *, sampling_metadata: Callable | None = None) -> SamplerAdapter:
    """vLLM V1's module-level ``rejection_sample`` (flat layout with ``cu_num_draft_tokens``).

    Parameters
    ----------
    rejection_sample : callable
        ``rejection_sample(draft_token_ids [T] int32, num_draft_tokens list, max_spec_len,
        cu_num_draft_tokens [B] int32, draft_probs [T, V], target_logits [T, V],
        bonus_token_ids [B, 1], sampling_metadata) -> [B, max_spec_len + 1]``, with
        :math:`T = \\sum_i k_i`; ``target_logits = log q`` (``-inf`` at q = 0; the function
        takes the softmax, so it sees q to float32 rounding).
    sampling_metadata : callable, optional
        ``(temperature [B], generators dict) -> metadata``; default a namespace with the
        fields ``rejection_sample`` reads (``temperature``, ``all_greedy``, ``all_random``,
        ``generators``).
    """
    return _V1(rejection_sample, sampling_metadata)


def callable_adapter(fn: Callable, *, array: str = "torch") -> SamplerAdapter:
    """A plain function ``fn(target_probs, draft_probs, draft_token_ids, bonus_token_ids)``.

    Parameters
    ----------
    fn : callable
        Takes q ``[B, k+1, V]`` (the last position is the bonus row), p ``[B, k, V]``, n
        ``[B, k]`` and the bonus ids ``[B, 1]``, and returns the ``[B, k+1]`` output; the
        keywords ``seeded_seqs`` (row -> ``torch.Generator``), ``raw_target_probs`` /
        ``raw_draft_probs`` and ``uniform_samples`` are passed when it has them. A function
        that draws its own bonus token from the bonus row declares it with an attribute
        ``draws_bonus_token = True`` (:func:`~cactus_theory.testing.check_sampler_law`'s
        bonus contract).
    array : {"torch", "numpy"}
        The arrays ``fn`` receives: float32 torch tensors, or numpy arrays (float32 probs,
        int64 ids).
    """
    return _Callable(fn, array)


class _Padded(SamplerAdapter):
    name = "padded"

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, inputs):
        target_probs, bonus_token_ids = inputs.target_probs, inputs.bonus_token_ids
        b, k1, v = target_probs.shape
        # the bonus row made one-hot at the pre-drawn bonus token: a sampler that draws its bonus
        # token from that row emits exactly it, so the bonus check stays exact
        rows = target_probs.clone()
        rows[:, -1] = 0.0
        rows[:, -1].scatter_(-1, bonus_token_ids.reshape(b, 1), 1.0)
        sampled = torch.zeros((b, k1), dtype=torch.int64, device=target_probs.device)
        sampled[:, 1:] = inputs.draft_token_ids  # each request's first entry: the last emitted token (0)
        cu = torch.arange(0, b * k1 + 1, k1, dtype=torch.int32, device=target_probs.device)
        out = self.fn(rows.reshape(b * k1, v), inputs.draft_probs, sampled.reshape(-1), cu)
        if isinstance(out, tuple):  # (sampled [B, k+1], num_sampled [B]) as the newer runner returns
            tokens, num = (torch.as_tensor(x) for x in out)
            tokens = tokens.to(torch.int64).clone()
            j = torch.arange(k1, device=tokens.device)
            tokens[j[None, :] >= num.to(tokens.device).reshape(b, 1)] = -1  # the V0 layout's placeholder
            return tokens
        return torch.as_tensor(out).to(torch.int64)


def padded_adapter(fn: Callable) -> SamplerAdapter:
    r"""The newer vLLM runner's (MRV2's) padded layout, in probabilities, for a plain callable.

    ``fn(target_probs [L, V], draft_probs [B, K, V], draft_sampled [L], cu_num_logits [B + 1])``
    where request r owns logits rows ``cu_num_logits[r]:cu_num_logits[r + 1]`` (its
    :math:`k_r` draft rows, then its bonus row; :math:`L = \sum_r (k_r + 1)`), ``draft_probs``
    is padded with zero rows past :math:`k_r`, and logits row i's drafted token is
    ``draft_sampled[i + 1]`` (each request's first entry is its last emitted token; 0 here).
    It returns ``sampled [B, K + 1]`` with -1 past the emitted tokens, or the pair
    ``(sampled, num_sampled [B])`` as MRV2's ``SamplerOutput`` holds them. The sampler draws the
    bonus token from the bonus row itself; the adapter hands it a one-hot bonus row at the
    check's pre-drawn bonus token (drawn from :math:`q_k`), so the emitted law is unchanged and
    the bonus check exact. Every request has the same k here (the check's cases); ragged
    batches are covered by :meth:`~cactus_theory.testing.strategies.DraftBatch.padded`.
    Source: vLLM ``v1/worker/gpu/spec_decode/rejection_sampler.py`` (``rejection_sample``'s
    ``target_logits``, ``draft_logits``, ``draft_sampled``, ``cu_num_logits``).
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    return _Padded(fn)


class _Drafting(SamplerAdapter):
    name = "drafting"
    draws_drafts = True

    def __init__(self, fn):
        self.fn = fn
        _probe_capabilities(self, fn)

    def __call__(self, inputs):
        got = self.fn(
            inputs.target_probs,
            inputs.draft_probs,
            inputs.bonus_token_ids,
            **_optional_keywords(self, inputs),
        )
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ValueError("sampler: a drafting sampler returns (draft_token_ids [B, k], output [B, k+1])")
        drafts, out = (torch.as_tensor(x).to(torch.int64) for x in got)
        if drafts.shape != inputs.draft_token_ids.shape:
            raise ValueError(
                f"sampler: returned drafts of shape {tuple(drafts.shape)}, expected {tuple(inputs.draft_token_ids.shape)}"
            )
        inputs.draft_token_ids = drafts.to(inputs.draft_token_ids.device)
        return out


def drafting_adapter(fn: Callable) -> SamplerAdapter:
    r"""A sampler that draws the drafts itself (engine-side drafting) and verifies them.

    ``fn(target_probs [B, k+1, V], draft_probs [B, k, V], bonus_token_ids [B, 1])`` draws each
    row's drafts :math:`n_i \sim p_i` with its own generators (``seeded_seqs``: row ->
    ``torch.Generator``, ``raw_target_probs`` / ``raw_draft_probs`` and ``uniform_samples``
    are passed when it takes them), verifies them, and returns ``(draft_token_ids [B, k],
    output [B, k+1])``. :func:`~cactus_theory.testing.check_sampler_law` then also tests the
    drafts' law (``draft-law``: each position's drafts against the drafter row) and tests the
    output against the rule's law as for handed-in drafts, so noise shared between drafting and
    verification (the acceptance uniforms, the recovery draw) shows in the output's law.
    Placeholder drafts cannot be planted in such a sampler (the ``placeholder`` check and the
    batch contracts' short requests are skipped).
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    return _Drafting(fn)


def as_adapter(sampler) -> SamplerAdapter:
    """An adapter for ``sampler``: itself if it is one, else chosen by the call signature.

    A callable with an attribute ``draws_drafts = True`` draws its own drafts
    (:func:`drafting_adapter`); one whose parameters include ``cu_num_draft_tokens`` is vLLM V1's
    ``rejection_sample``; one whose (``forward``'s) parameters include
    ``target_with_bonus_probs`` is a V0 sampler; anything else a plain callable on torch
    tensors.
    """
    if isinstance(sampler, SamplerAdapter):
        return sampler
    if not callable(sampler):
        raise TypeError(f"sampler: expected a callable or a SamplerAdapter, got {type(sampler).__name__}")
    params = _parameters(sampler)
    if getattr(sampler, "draws_drafts", False):
        return drafting_adapter(sampler)
    if "cu_num_draft_tokens" in params:
        return v1_adapter(sampler)
    if "target_with_bonus_probs" in _parameters(getattr(sampler, "forward", sampler)):
        return v0_adapter(sampler)
    return callable_adapter(sampler)


def _declares(sampler, attribute: str) -> bool:
    """The sampler, or the function an adapter wraps, has ``attribute = True``."""
    for obj in (sampler, getattr(sampler, "fn", None), getattr(sampler, "sampler", None)):
        if obj is not None and getattr(obj, attribute, False):
            return True
    return False


def _declared_bonus(sampler, bonus):
    """The bonus contract: ``bonus`` when given, else ``"drawn"`` when the sampler declares
    ``draws_bonus_token = True``, else ``"given"``."""
    if bonus is not None:
        if bonus not in ("given", "drawn"):
            raise ValueError(f"bonus: expected 'given', 'drawn' or None, got {bonus!r}")
        return bonus
    return "drawn" if _declares(sampler, "draws_bonus_token") else "given"
