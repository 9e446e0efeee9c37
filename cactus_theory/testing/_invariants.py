r"""The exact checks of the sampler-law check: they never fail a correct sampler.

* ``layout``: every output row is (accepted drafts, one token, then -1);
* ``bonus``: the bonus token handed in is emitted untouched after k acceptances (when the
  sampler does not draw its own);
* ``greedy``: greedy rows (vLLM V1: temperature 0 in a mixed batch; otherwise one-hot verifier
  rows) are verified by argmax;
* ``seeded``: a row with its own ``torch.Generator`` is reproduced under another global seed;
* ``zero-uniform``: with every acceptance uniform exactly 0, no token of exact probability 0 is
  emitted (a sampler that takes ``uniform_samples``);
* ``placeholder``: a placeholder draft id -1 with a zero drafter row is never accepted (a
  sampler that declares ``takes_placeholder_drafts``).

Each side batch draws from its own numpy generator (``[seed, case, tag]``) and calls the
sampler under its own torch seed.

References
----------
vLLM 0.7.3 ``spec_decode_base_sampler.py::_create_output`` (the output layout).
"""

from __future__ import annotations

import numpy as np

from ..analysis import acceptance_probabilities
from ._block import _is_block, block_greedy_on_one_hot
from ._draws import PLACEHOLDER, _call, _draw
from ._exact import exact_law
from ._results import _exact, _record
from ._torch import torch

#: Rows in the greedy and seeded side batches (per case / in all).
GREEDY_ROWS = 64
SEEDED_ROWS = 16
#: Rows per case in the side batch of zero uniforms.
ZERO_UNIFORM_ROWS = 256
#: Rows per case in the side batch of placeholder drafts.
PLACEHOLDER_ROWS = 256


def _side_draws(rng: np.random.Generator, q: np.ndarray, p: np.ndarray, rows: int):
    """``rows`` drafts (one per position, from p) and bonus ids (from q's bonus row)."""
    k = p.shape[0]
    drafts = np.stack([_draw(rng, p[i], rows) for i in range(k)], axis=1)
    return drafts, _draw(rng, q[k], rows)[:, None]


def _layout_violations(out: np.ndarray, drafts: np.ndarray, bonus: np.ndarray, v: int):
    """Rows whose output is not (accepted drafts, one token, -1 ...), and rows whose bonus
    position does not hold the bonus token."""
    _b, k1 = out.shape
    k = k1 - 1
    present = out != PLACEHOLDER
    bad = ~present[:, 0] | ((out < PLACEHOLDER) | (out >= v)).any(1)
    bad |= (present[:, 1:] & ~present[:, :-1]).any(1)  # a token after a -1
    go_on = present[:, 1:]  # position i accepted
    bad |= (go_on & (out[:, :k] != drafts)).any(1)  # accepted but not the draft
    bonus_bad = present[:, k] & (out[:, k] != bonus[:, 0])
    return bad, bonus_bad


def _example(rows: np.ndarray, out, drafts, bonus) -> str:
    r = int(np.flatnonzero(rows)[0])
    return (
        f"{int(rows.sum())} rows, e.g. row {r}: output {out[r].tolist()}, drafts "
        f"{drafts[r].tolist()}, bonus {int(bonus[r, 0])}"
    )


def _layout(outputs, bonus_mode) -> list[dict]:
    """The layout of the main draws' output, and the bonus token when it is handed in."""
    bad_all = bonus_all = 0
    first_bad = first_bonus = ""
    for c, (out, drafts, bonus, vmax) in enumerate(outputs):
        bad, bonus_bad = _layout_violations(out, drafts, bonus, vmax)
        if bad.any() and not first_bad:
            first_bad = f"case {c}: " + _example(bad, out, drafts, bonus)
        if bonus_bad.any() and not first_bonus:
            first_bonus = f"case {c}: " + _example(bonus_bad, out, drafts, bonus)
        bad_all += int(bad.sum())
        bonus_all += int(bonus_bad.sum())
    n = sum(o[0].shape[0] for o in outputs)
    raw = [_exact("layout", bad_all == 0, n, first_bad or "every row: accepted drafts, one token, then -1")]
    if bonus_mode == "given":
        detail = first_bonus or "the bonus token emitted untouched after k acceptances"
        raw.append(_exact("bonus", bonus_all == 0, n, detail))
    return raw


def _invariants(adapter, rule, cases, laws, outputs, seed, device, skipped, bonus_mode) -> list[dict]:
    """The exact checks: layout, bonus token, greedy rows, seeded rows, zero uniforms."""
    raw = _layout(outputs, bonus_mode)
    raw += _greedy(adapter, rule, cases, seed, device, skipped)
    raw += _seeded(adapter, cases, seed, device, skipped)
    raw += _zero_uniform(adapter, cases, laws, seed, device, skipped)
    return raw


def _side_check(name: str, batches, passed_detail: str) -> list[dict]:
    """One exact check over per-case side batches: ``batches`` yields per case (case, failing
    rows [N] bool, N, what failed, output, drafts); the detail is the first failing case's."""
    bad_all, first, n = 0, "", 0
    for c, rows, size, what, out, drafts in batches:
        if rows.any() and not first:
            r = int(np.flatnonzero(rows)[0])
            first = f"case {c}: {what}, e.g. row {r}: output {out[r].tolist()}, drafts {drafts[r].tolist()}"
        bad_all += int(rows.sum())
        n += size
    return [_exact(name, bad_all == 0, n, first or passed_detail)]


def _zero_uniform(adapter, cases, laws, seed, device, skipped) -> list[dict]:
    """Rows whose acceptance uniforms are all exactly 0: no token of exact probability 0."""
    if not adapter.supports_uniforms:
        skipped.append(f"zero-uniform: the {adapter.name} sampler draws its own uniforms")
        return []

    def batches():
        for c, ((q, p), law) in enumerate(zip(cases, laws)):
            k, v = p.shape
            drafts, bonus = _side_draws(np.random.default_rng([seed, c, 3]), q, p, ZERO_UNIFORM_ROWS)
            torch_seed = seed * 1_000_003 + 15485863 + c
            zeros = np.zeros((ZERO_UNIFORM_ROWS, k + 1))
            out = _call(adapter, q, bonus, p, drafts, device, torch_seed, uniforms=zeros)
            probs = np.concatenate([law.emitted, q[k : k + 1]])
            impossible = (out != PLACEHOLDER) & (np.take_along_axis(probs.T, np.clip(out, 0, v - 1), 0) <= 0)
            rows = impossible.any(1)
            what = f"{int(rows.sum())} of {ZERO_UNIFORM_ROWS} rows with u = 0 emit a token of exact probability 0"
            yield c, rows, ZERO_UNIFORM_ROWS, what, out, drafts

    return _side_check(
        "zero-uniform", batches(), "uniforms exactly 0: no token of exact probability 0 emitted"
    )


def _greedy_expected(argmax: np.ndarray, drafts: np.ndarray, bonus: np.ndarray) -> np.ndarray:
    b, k = drafts.shape
    out = np.full((b, k + 1), PLACEHOLDER, dtype=np.int64)
    match = drafts == argmax[None, :k]
    length = np.where(match.all(1), k, np.argmin(match, axis=1))
    for r in range(b):
        L = int(length[r])
        out[r, :L] = drafts[r, :L]
        out[r, L] = bonus[r, 0] if L == k else argmax[L]
    return out


def _is_greedy_on_one_hot(rule, q_one_hot, p, argmax) -> bool:
    """The rule's law on one-hot verifier rows is greedy verification (emits the argmax, accepts
    exactly the argmax where the drafter proposes)."""
    if _is_block(rule):
        return block_greedy_on_one_hot(q_one_hot, p)
    k, v = p.shape
    law = exact_law(rule, q_one_hot, p)
    a = np.asarray(acceptance_probabilities(rule, q_one_hot[:k], p)).reshape(k, v)
    want_a = (np.arange(v)[None, :] == argmax[:k, None]).astype(float)
    return bool(
        np.allclose(law.emitted, np.eye(v)[argmax[:k]], atol=1e-12)
        and np.allclose(np.where(p > 0, a, want_a), want_a, atol=1e-12)
    )


def _greedy_case(adapter, rule, q, p, c, seed, device, skipped) -> list[dict]:
    k, v = p.shape
    top = np.sort(q, axis=-1)
    if v > 1 and np.any(top[:, -1] == top[:, -2]):
        skipped.append(f"greedy case {c}: a verifier row has a tied maximum")
        return []
    argmax = q.argmax(-1)
    rng = np.random.default_rng([seed, c, 1])
    drafts = np.stack([_draw(rng, p[i], 2 * GREEDY_ROWS) for i in range(k)], axis=1)
    if adapter.supports_greedy_flag:
        qg = q
        bonus = _draw(rng, q[k], 2 * GREEDY_ROWS)[:, None]
        bonus[:GREEDY_ROWS, 0] = argmax[k]
        greedy = torch.zeros(2 * GREEDY_ROWS, dtype=torch.bool)
        greedy[:GREEDY_ROWS] = True
        how = "rows flagged greedy (temperature 0) in a mixed batch"
    else:
        qg = np.eye(v)[argmax]
        if not _is_greedy_on_one_hot(rule, qg, p, argmax):
            skipped.append(
                f"greedy case {c}: the rule's law on one-hot verifier rows is not greedy verification"
            )
            return []
        bonus = np.full((2 * GREEDY_ROWS, 1), argmax[k])
        greedy = None
        how = "one-hot verifier rows (temperature 0)"
    out = _call(adapter, qg, bonus, p, drafts, device, seed * 1_000_003 + 7919 + c, greedy=greedy)
    want = _greedy_expected(argmax, drafts[:GREEDY_ROWS], bonus[:GREEDY_ROWS])
    bad = (out[:GREEDY_ROWS] != want).any(1)
    detail = f"{how}: verified greedily"
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        detail = (
            f"{how}: {int(bad.sum())} of {GREEDY_ROWS} rows differ from greedy "
            f"verification, e.g. row {r}: output {out[r].tolist()}, greedy "
            f"{want[r].tolist()} (drafts {drafts[r].tolist()})"
        )
    return [_record("greedy", "exact", float(not bad.any()), GREEDY_ROWS, detail, case=c)]


def _greedy(adapter, rule, cases, seed, device, skipped) -> list[dict]:
    raw = []
    for c, (q, p) in enumerate(cases):
        raw += _greedy_case(adapter, rule, q, p, c, seed, device, skipped)
    return raw


def _placeholder(adapter, cases, seed, device) -> list[dict]:
    """Rows whose last draft is the placeholder id -1 (a request that drafted k - 1 tokens) with
    a zero drafter row: it is never accepted, so its position holds a real token and no bonus
    token follows."""

    def batches():
        for c, (q, p) in enumerate(cases):
            k, v = p.shape
            drafts, bonus = _side_draws(np.random.default_rng([seed, c, 4]), q, p, PLACEHOLDER_ROWS)
            drafts[:, k - 1] = PLACEHOLDER
            p0 = p.copy()
            p0[k - 1] = 0.0
            out = _call(adapter, q, bonus, p0, drafts, device, seed * 1_000_003 + 32452843 + c)
            at, after = out[:, k - 1], out[:, k]
            reached = (at != PLACEHOLDER) | (after != PLACEHOLDER)  # something at or after the placeholder
            rows = reached & ((at < 0) | (at >= v) | (after != PLACEHOLDER))
            what = f"{int(rows.sum())} of {int(reached.sum())} rows that reach the placeholder draft -1 accept it"
            yield c, rows, PLACEHOLDER_ROWS, what, out, drafts

    return _side_check(
        "placeholder", batches(), "a placeholder draft -1 (zero drafter row) is never accepted"
    )


def _seeded(adapter, cases, seed, device, skipped) -> list[dict]:
    if not adapter.supports_seeds:
        skipped.append(f"seeded: the {adapter.name} sampler takes no per-row generators")
        return []
    q, p = cases[0]
    drafts, bonus = _side_draws(np.random.default_rng([seed, 0, 2]), q, p, SEEDED_ROWS)
    rows = list(range(0, SEEDED_ROWS, 2))

    def gens():
        # on the rows' device: a CUDA sampler rejects a CPU generator
        return {r: torch.Generator(device=device).manual_seed(seed * 131 + r) for r in rows}

    outs = [
        _call(adapter, q, bonus, p, drafts, device, seed * 1_000_003 + 104729 + t, seeded_seqs=gens())
        for t in range(2)
    ]
    same = (outs[0][rows] == outs[1][rows]).all(1)
    detail = (
        f"rows {rows} seeded, the others not; two calls under different global seeds: seeded rows identical"
    )
    if not same.all():
        r = rows[int(np.flatnonzero(~same)[0])]
        detail = (
            f"seeded row {r} gave {outs[0][r].tolist()} then {outs[1][r].tolist()} with the "
            f"same generator seed"
        )
    return [_exact("seeded", same.all(), SEEDED_ROWS, detail, case=0)]
