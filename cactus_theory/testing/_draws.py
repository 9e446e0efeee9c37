r"""The draws of the sampler-law check: drafts and bonus tokens drawn, the sampler called.

Per case, ``num_samples`` drafts :math:`n_i \sim p_i` and bonus tokens :math:`\sim q_k` from
a numpy generator seeded by ``[seed, case]``; cases with the same k run interleaved in one batch
(row r holds case r mod C, the vocabularies padded with zero-probability tokens to the largest),
and the sampler is called under a torch seed with torch's global generator restored after.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

import numpy as np

from ._adapters import SamplerInputs
from ._torch import torch

#: The output's placeholder past the emitted tokens (and a placeholder draft id).
PLACEHOLDER = -1


def _draw(rng: np.random.Generator, probs: np.ndarray, size: int) -> np.ndarray:
    """``size`` i.i.d. tokens from one probability row (inverse CDF; zero-mass tokens never)."""
    cdf = np.cumsum(probs)
    idx = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    return np.minimum(idx, len(probs) - 1)


def _uniforms(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniforms on float32's grid of [0, 1): multiples of 2^-24, as torch.rand draws them."""
    return rng.integers(0, 2**24, size=shape).astype(np.float64) / 2.0**24


def _pad(x: np.ndarray, v: int) -> np.ndarray:
    return x if x.shape[-1] == v else np.concatenate([x, np.zeros((*x.shape[:-1], v - x.shape[-1]))], -1)


def _call(adapter, q, bonus, p, drafts, device, torch_seed, raw_rows=None, **kw):
    """One sampler call on ``b`` copies of the rows q (k+1, V) and p (k, V), under a torch seed."""
    b = drafts.shape[0]
    rows = None if raw_rows is None else tuple(np.broadcast_to(r, (b, *r.shape)) for r in raw_rows)
    return _call_rows(
        adapter,
        np.broadcast_to(q, (b, *q.shape)),
        bonus,
        np.broadcast_to(p, (b, *p.shape)),
        drafts,
        device,
        torch_seed,
        raw_rows=rows,
        **kw,
    )


def _call_rows(adapter, q, bonus, p, drafts, device, torch_seed, raw_rows=None, uniforms=None, **kw):
    """One sampler call on per-row q [B, k+1, V], p [B, k, V], drafts [B, k], bonus [B, 1]; a
    sampler that draws its own drafts (``adapter.draws_drafts``) writes them into ``drafts``."""

    def tensor(x, dtype=torch.float32):
        return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype, device=device)

    inputs = SamplerInputs(
        tensor(q),
        tensor(bonus, torch.int64),
        tensor(p),
        tensor(drafts, torch.int64),
        raw=None if raw_rows is None else tuple(tensor(r) for r in raw_rows),
        uniform_samples=None if uniforms is None else tensor(uniforms),
        **kw,
    )
    dev = torch.device(device)
    forked = [dev.index or 0] if dev.type == "cuda" else []  # restore the CUDA generator too
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(torch_seed)
        out = adapter(inputs)
    if adapter.draws_drafts:  # the sampler drew its own drafts into inputs.draft_token_ids
        drafts[...] = inputs.draft_token_ids.detach().cpu().numpy().reshape(drafts.shape)
    out = out.detach().cpu().numpy().astype(np.int64)
    if out.shape != (drafts.shape[0], drafts.shape[1] + 1):
        raise ValueError(
            f"sampler: returned shape {out.shape}, expected {(drafts.shape[0], drafts.shape[1] + 1)}"
        )
    return out


def _groups(cases, mixed: bool) -> list[list[int]]:
    """The batches: cases with the same k together (``mixed``), else one case each."""
    groups: dict = {}
    for c, (_q, p) in enumerate(cases):
        groups.setdefault(p.shape[0] if mixed else ("alone", c), []).append(c)
    return list(groups.values())


def _group_rows(cases, raws, members, num_samples, seed):
    """The interleaved rows of one batch: q [B, k+1, V], p [B, k, V], drafts, bonus ids, raw rows."""
    k = cases[members[0]][1].shape[0]
    vmax = max(cases[c][1].shape[1] for c in members)
    m = len(members)
    b = m * num_samples
    q_rows = np.empty((b, k + 1, vmax))
    p_rows = np.empty((b, k, vmax))
    drafts = np.empty((b, k), dtype=np.int64)
    bonus_ids = np.empty((b, 1), dtype=np.int64)
    raw_rows = None
    if any(raws[c] is not None for c in members):
        raw_rows = (np.empty((b, k + 1, vmax)), np.empty((b, k, vmax)))
    for j, c in enumerate(members):
        q, p = cases[c]
        rng = np.random.default_rng([seed, c])
        drafts[j::m] = np.stack([_draw(rng, p[i], num_samples) for i in range(k)], axis=1)
        bonus_ids[j::m, 0] = _draw(rng, q[k], num_samples)
        q_rows[j::m] = _pad(q, vmax)
        p_rows[j::m] = _pad(p, vmax)
        if raw_rows is not None:
            rq, rp = raws[c] if raws[c] is not None else (q, p)
            raw_rows[0][j::m] = _pad(rq, vmax)
            raw_rows[1][j::m] = _pad(rp, vmax)
    return q_rows, p_rows, drafts, bonus_ids, raw_rows, vmax


def _draw_cases(adapter, cases, raws, num_samples, seed, device, mixed) -> list:
    """Per case (output [N, k+1], drafts [N, k], bonus ids [N, 1], padded V) of the main draws."""
    outputs: list = [None] * len(cases)
    for g, members in enumerate(_groups(cases, mixed)):
        q_rows, p_rows, drafts, bonus_ids, raw_rows, vmax = _group_rows(
            cases, raws, members, num_samples, seed
        )
        uniforms = None
        if adapter.supports_uniforms:
            uniforms = _uniforms(np.random.default_rng([seed, 7, g]), (drafts.shape[0], drafts.shape[1] + 1))
        out = _call_rows(
            adapter,
            q_rows,
            bonus_ids,
            p_rows,
            drafts,
            device,
            seed * 1_000_003 + g,
            raw_rows=raw_rows,
            uniforms=uniforms,
        )
        m = len(members)
        for j, c in enumerate(members):
            outputs[c] = (out[j::m], drafts[j::m], bonus_ids[j::m], vmax)
    return outputs
