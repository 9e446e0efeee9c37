r"""Hypothesis strategies: (q, p) probability rows and draft batches in the engines' layouts.

Rows (:func:`pairs`, float64, each row sums to 1) come in the kinds a rejection sampler meets
(:data:`PAIR_KINDS`):

- ``"dirichlet"``: q, p i.i.d. Dirichlet(c), c drawn in [0.05, 2] (small c: peaked rows);
- ``"noisy_copy"``: :math:`p \propto \exp(\log q + \sigma \xi)`: a drafter that is a noisy copy of the verifier
  (:func:`cactus_theory.distributions.synthetic_pairs`);
- ``"truncated"``: a noisy-copy pair through temperature, top-k and top-p, in vLLM's order
  (:func:`cactus_theory.distributions.truncate`): zeros in both rows;
- ``"near_zero_q"``: verifier mass :math:`10^{-12}`..:math:`10^{-6}` on tokens the drafter proposes often;
- ``"one_hot_p"``: the drafter is a point mass (n-gram and greedy drafters);
- ``"disjoint"``: q and p on disjoint supports (acceptance 0 for lossless rules);
- ``"half"``: rows rounded to the float16 or bfloat16 grid (multiples of :math:`2^{-10}` or
  :math:`2^{-7}`) and summing to 1 exactly in both (half-precision engines);
- ``"large_vocab"``: a noisy-copy pair on :math:`V \in [2^{12}, 2^{15}]`.

The bulk of each row comes from a numpy generator seeded by Hypothesis, so an example is
reproducible and the drawn parameters (kind, V, concentration, temperature, ...) shrink.
``exact_float32=True`` rounds every row to multiples of :math:`2^{-20}`
(:func:`~cactus_theory.testing.dyadic`): a float32 sampler then sees exactly the rows the
float64 analysis does.

Batches (:func:`draft_batches`) give a :class:`DraftBatch`: per request, k drafts
:math:`n_i \sim p_i` and a bonus token drawn from the bonus row, with three views:
:meth:`DraftBatch.v0` (vLLM 0.7's ``[B, k+1, V]``), :meth:`DraftBatch.v1` (vLLM V1's flat
layout with ``cu_num_draft_tokens``) and :meth:`DraftBatch.padded` (the newer runner's:
flat logits rows with each request's bonus row, padded ``[B, K, V]`` draft rows, and
``draft_sampled`` where row i's draft is entry i + 1).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from .. import distributions
from ._cases import dyadic
from ._torch import torch

__all__ = ["PAIR_KINDS", "DraftBatch", "draft_batches", "pairs"]

PAIR_KINDS = (
    "dirichlet",
    "noisy_copy",
    "truncated",
    "near_zero_q",
    "one_hot_p",
    "disjoint",
    "half",
    "large_vocab",
)

_seeds = st.integers(0, 2**32 - 1)


def _normalize(x):
    return x / x.sum(-1, keepdims=True)


def _noisy_copy(rng, v, sigma):
    q = _normalize(np.exp(rng.standard_normal(v) * 2.0))
    p = _normalize(np.exp(np.log(q) + sigma * rng.standard_normal(v)))
    return q, p


@st.composite
def _pair_of_kind(draw, kind: str, min_vocab: int = 2, max_vocab: int = 64, *, exact_float32: bool = False):
    """One (q, p) pair of the given kind (:data:`PAIR_KINDS`); float64 rows summing to 1.

    Parameters
    ----------
    kind : str
        One of :data:`PAIR_KINDS`.
    min_vocab, max_vocab : int
        The vocabulary size range (``"large_vocab"`` ignores it; ``"disjoint"`` needs
        V >= 2).
    exact_float32 : bool
        Round both rows to multiples of :math:`2^{-20}` (exact in float32).
    """
    if kind not in PAIR_KINDS:
        raise ValueError(f"kind: expected one of {PAIR_KINDS}, got {kind!r}")
    if not 1 <= min_vocab <= max_vocab:
        raise ValueError(f"min_vocab: expected 1 <= min_vocab <= max_vocab, got {min_vocab}, {max_vocab}")
    lo = max(min_vocab, 2) if kind in ("disjoint", "near_zero_q") else min_vocab
    if lo > max_vocab:
        raise ValueError(f"max_vocab: kind {kind!r} needs a vocabulary of at least {lo}")
    v = draw(st.integers(2**12, 2**15)) if kind == "large_vocab" else draw(st.integers(lo, max_vocab))
    rng = np.random.default_rng(draw(_seeds))
    if kind == "dirichlet":
        c = draw(st.floats(0.05, 2.0))
        q, p = rng.dirichlet(np.full(v, c)), rng.dirichlet(np.full(v, c))
        q, p = np.maximum(q, 0), np.maximum(p, 0)
        if not (q.sum() > 0 and p.sum() > 0):  # Dirichlet underflow at tiny c
            q, p = np.full(v, 1.0 / v), np.full(v, 1.0 / v)
    elif kind in ("noisy_copy", "large_vocab"):
        q, p = _noisy_copy(rng, v, draw(st.floats(0.0, 2.0)))
    elif kind == "truncated":
        q, p = _noisy_copy(rng, v, draw(st.floats(0.1, 1.5)))
        knobs = {
            "temperature": draw(st.floats(0.3, 1.5)),
            "top_k": draw(st.none() | st.integers(1, v)),
            "top_p": draw(st.none() | st.floats(0.5, 1.0)),
        }
        q = distributions.truncate(q[None], **knobs)[0]
        p = distributions.truncate(p[None], **knobs)[0]
    elif kind == "near_zero_q":
        q, p = _noisy_copy(rng, v, 0.5)
        m = draw(st.integers(1, max(1, v // 2)))
        tiny = rng.choice(v, size=m, replace=False)
        keep = np.setdiff1d(np.arange(v), tiny)
        q[tiny] = 10.0 ** draw(st.floats(-12, -6))
        q[keep] *= (1 - q[tiny].sum()) / q[keep].sum()
        p[tiny] = np.maximum(p[tiny], 0.5 / m)
        p = _normalize(p)
    elif kind == "one_hot_p":
        q = _normalize(np.exp(rng.standard_normal(v) * 2.0))
        p = np.eye(v)[draw(st.integers(0, v - 1))]
    elif kind == "disjoint":
        cut = draw(st.integers(1, v - 1))
        perm = rng.permutation(v)
        q, p = np.zeros(v), np.zeros(v)
        q[perm[:cut]] = rng.dirichlet(np.ones(cut))
        p[perm[cut:]] = rng.dirichlet(np.ones(v - cut))
    else:  # half: the float16 grid (multiples of 2^-10) or bfloat16's (2^-7), sums exactly 1
        bits = draw(st.sampled_from([10, 7]))
        q, p = _noisy_copy(rng, v, draw(st.floats(0.0, 1.5)))
        rows = []
        for x in (q, p):
            if v > 2**bits:  # the grid holds at most 2^bits positive entries
                x = np.where(x >= np.sort(x)[-(2**bits)], x, 0.0)
            rows.append(dyadic(x, bits=bits))
        q, p = rows
    q, p = _normalize(np.asarray(q, dtype=np.float64)), _normalize(np.asarray(p, dtype=np.float64))
    if exact_float32:
        q, p = dyadic(q), dyadic(p)
    return q, p


def pairs(
    min_vocab: int = 2, max_vocab: int = 64, *, kinds: Sequence[str] = PAIR_KINDS, exact_float32: bool = False
):
    """A (q, p) pair of float64 rows, of a kind drawn from ``kinds`` (:data:`PAIR_KINDS`).

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(pairs(max_vocab=16))
    ... def test_rows_sum_to_one(qp):
    ...     assert abs(qp[0].sum() - 1) < 1e-12 and abs(qp[1].sum() - 1) < 1e-12
    >>> test_rows_sum_to_one()
    """
    kinds = tuple(kinds)
    if not kinds or any(k not in PAIR_KINDS for k in kinds):
        raise ValueError(f"kinds: expected a non-empty subset of {PAIR_KINDS}, got {kinds}")
    return st.sampled_from(kinds).flatmap(
        lambda kind: _pair_of_kind(kind, min_vocab, max_vocab, exact_float32=exact_float32)
    )


@dataclass(frozen=True)
class DraftBatch:
    """One verification batch: per request, k_i draft rows, a bonus row, drafts and a bonus id.

    Attributes
    ----------
    target_probs : list of ndarray, shape (k_i + 1, V)
        Verifier rows q at each draft position, then the bonus row.
    draft_probs : list of ndarray, shape (k_i, V)
    draft_token_ids : list of ndarray, shape (k_i,)
        :math:`n_{ij} \\sim p_{ij}`.
    bonus_token_ids : ndarray, shape (B,)
        Drawn from each request's bonus row.
    """

    target_probs: list[np.ndarray]
    draft_probs: list[np.ndarray]
    draft_token_ids: list[np.ndarray]
    bonus_token_ids: np.ndarray

    @property
    def num_draft_tokens(self) -> list[int]:
        return [len(n) for n in self.draft_token_ids]

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs[0].shape[-1])

    def v0(self) -> dict:
        """vLLM 0.7's layout (all k_i equal): ``target_with_bonus_probs [B, k+1, V]``,
        ``bonus_token_ids [B, 1]``, ``draft_probs [B, k, V]``, ``draft_token_ids [B, k]``
        (float32 / int64 torch tensors)."""
        if len(set(self.num_draft_tokens)) != 1:
            raise ValueError(
                f"num_draft_tokens: the V0 layout needs equal k per request, got {self.num_draft_tokens}"
            )
        return {
            "target_with_bonus_probs": torch.tensor(np.stack(self.target_probs), dtype=torch.float32),
            "bonus_token_ids": torch.tensor(self.bonus_token_ids[:, None], dtype=torch.int64),
            "draft_probs": torch.tensor(np.stack(self.draft_probs), dtype=torch.float32),
            "draft_token_ids": torch.tensor(np.stack(self.draft_token_ids), dtype=torch.int64),
        }

    def v1(self) -> dict:
        """vLLM V1's flat layout: ``draft_token_ids [T]`` int32, ``num_draft_tokens`` list,
        ``cu_num_draft_tokens [B]`` int32 (inclusive cumulative sums), ``max_spec_len``,
        ``draft_probs`` and ``target_probs [T, V]`` float32 (the draft rows only; V1
        samples the bonus token outside), ``target_logits = log q``, ``bonus_token_ids
        [B, 1]``; :math:`T = \\sum_i k_i`."""
        v = self.vocab_size
        counts = self.num_draft_tokens
        flat_q = np.concatenate([q[:-1] for q in self.target_probs]).reshape(-1, v)
        flat_p = np.concatenate(self.draft_probs).reshape(-1, v) if sum(counts) else np.zeros((0, v))
        ids = np.concatenate(self.draft_token_ids).astype(np.int64) if sum(counts) else np.zeros(0, np.int64)
        target = torch.tensor(flat_q, dtype=torch.float32)
        return {
            "draft_token_ids": torch.tensor(ids, dtype=torch.int32),
            "num_draft_tokens": list(counts),
            "cu_num_draft_tokens": torch.tensor(np.cumsum(counts), dtype=torch.int32),
            "max_spec_len": max(counts, default=0),
            "draft_probs": torch.tensor(flat_p, dtype=torch.float32),
            "target_probs": target,
            "target_logits": torch.log(target),
            "bonus_token_ids": torch.tensor(self.bonus_token_ids[:, None], dtype=torch.int64),
        }

    def padded(self) -> dict:
        """The newer runner's layout: ``target_probs [L, V]`` with each request's k_i draft
        rows then its bonus row (:math:`L = \\sum_i (k_i + 1)`), ``cu_num_logits [B + 1]``
        int32, ``draft_probs [B, K, V]`` padded with zero rows past k_i
        (:math:`K = \\max_i k_i`), and ``draft_sampled [L]`` int64 where logits row i's
        draft is ``draft_sampled[i + 1]`` (each request's first entry is the last emitted
        token, 0 here)."""
        v = self.vocab_size
        counts = self.num_draft_tokens
        kmax = max(counts, default=0)
        target = np.concatenate(self.target_probs).reshape(-1, v)
        padded = np.zeros((len(counts), kmax, v))
        sampled = []
        for r, (p, n) in enumerate(zip(self.draft_probs, self.draft_token_ids)):
            padded[r, : len(n)] = p
            sampled += [0] + [int(x) for x in n]
        return {
            "target_probs": torch.tensor(target, dtype=torch.float32),
            "cu_num_logits": torch.tensor(
                np.concatenate([[0], np.cumsum(np.add(counts, 1))]), dtype=torch.int32
            ),
            "draft_probs": torch.tensor(padded, dtype=torch.float32),
            "draft_sampled": torch.tensor(sampled, dtype=torch.int64),
            "num_draft_tokens": list(counts),
        }


@st.composite
def draft_batches(
    draw,
    min_requests: int = 1,
    max_requests: int = 4,
    max_drafts: int = 4,
    min_vocab: int = 2,
    max_vocab: int = 32,
    *,
    ragged: bool = True,
    kinds: Sequence[str] = tuple(k for k in PAIR_KINDS if k != "large_vocab"),
    exact_float32: bool = False,
):
    """A :class:`DraftBatch` of rows drawn by :func:`pairs` (one vocabulary for the batch).

    Parameters
    ----------
    min_requests, max_requests : int
        The batch size range.
    max_drafts : int
        k_i in [0, max_drafts] (``ragged``: per request, and 0 is allowed) or [1, max_drafts]
        (not ragged: one k for the batch).
    min_vocab, max_vocab : int
    ragged : bool
        Per-request k_i (the V0 view then refuses the batch unless they happen to agree).
    kinds, exact_float32
        As :func:`pairs`.
    """
    b = draw(st.integers(min_requests, max_requests))
    v = draw(st.integers(max(min_vocab, 2), max(max_vocab, 2)))
    k_all = draw(st.integers(1, max_drafts))
    ks = [draw(st.integers(0, max_drafts)) for _ in range(b)] if ragged else [k_all] * b
    rng = np.random.default_rng(draw(_seeds))
    qs, ps, ns, bonus = [], [], [], []
    for k in ks:
        rows = [draw(pairs(v, v, kinds=kinds, exact_float32=exact_float32)) for _ in range(k + 1)]
        q = np.stack([r[0] for r in rows])
        p = np.stack([r[1] for r in rows[:k]]) if k else np.zeros((0, v))
        qs.append(q)
        ps.append(p)
        ns.append(np.array([rng.choice(v, p=row) for row in p], dtype=np.int64))
        bonus.append(int(rng.choice(v, p=q[k])))
    return DraftBatch(qs, ps, ns, np.array(bonus, dtype=np.int64))
