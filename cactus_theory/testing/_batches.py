r"""Batch contracts of the sampler-law check: each request's output, whatever the batch around it.

The main draws run every case in one large interleaved batch, so a fault tied to a batch slot
(the first or the last request), to the batch size, or to seeded requests beside unseeded ones
touches few of their rows. Here the cases of one k (when there are two or more) are drawn again
as small batches (one per :data:`DRAWS_PER_CALL` draws per case, at most :data:`BATCH_CALLS`:
200 at the default size; at least one of each size), of the sizes :data:`BATCH_SIZES` in turn,
each request of a kind drawn at random:

* ``sampled``: fresh drafts :math:`n_i \sim p_i` and bonus token, unseeded;
* ``probe`` (a sampler that takes ``seeded_seqs``): one of :data:`PROBES` seeded requests, the
  same rows, drafts, bonus token and generator seed every time it appears;
* ``greedy``: a row flagged greedy (vLLM V1: temperature 0) or, for other interfaces, one-hot
  verifier rows where the rule's law on them is greedy verification;
* ``short`` (a sampler that declares ``takes_placeholder_drafts``): a request that drafted
  j < k tokens, its last k - j drafts the placeholder -1 with zero drafter rows.

The checks:

* ``batch-law:<slot>`` for every request (``all``) and for the slots ``alone`` (a batch of
  one), ``first``, ``last`` and ``inner``: the outcome of every position the sampled and short
  requests in that slot reach
  (before a short request's placeholder): going on, with probability :math:`\alpha_i`, or
  stopping with the token j after a rejection, :math:`(1 - \alpha_i) r_i(j)` (the recovery
  law), and at the bonus position the bonus token; each against its case's and position's
  exact law, as one test of their probability integral transforms (:func:`~._stats._pit_test`:
  uniform for every law, so a few tokens of many cases and positions pool; a token of exact
  probability 0 fails outright), so unseeded rows beside seeded ones, a slot and a batch size
  are all read; its stated power is the smallest total variation of the transforms' bins it
  detects;
* ``batch-layout`` (exact): every row is (accepted drafts, one token, then -1), a short
  request's placeholder is never accepted, and a bonus token handed in is emitted untouched;
* ``batch-greedy`` (exact): greedy rows verified greedily in mixed batches;
* ``batch-seeded`` (exact): each probe's output is identical in every batch (size, slot,
  neighbours) and call (global seed) it appears in.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

import numpy as np

from ._draws import PLACEHOLDER, _call_rows, _draw, _groups, _pad
from ._invariants import _greedy_expected, _is_greedy_on_one_hot, _layout_violations
from ._results import _exact, _record
from ._stats import _pit_test
from ._torch import torch

#: Small batches per group of cases with the same k (at most; one per :data:`DRAWS_PER_CALL`
#: draws per case, at least one of each size), their sizes (in turn) and the seeded probes.
BATCH_CALLS = 200
DRAWS_PER_CALL = 100
BATCH_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
PROBES = 6
SLOTS = ("all", "alone", "first", "last", "inner")
_WEIGHTS = {"sampled": 0.5, "probe": 0.2, "greedy": 0.1, "short": 0.2}


def _greedy_cases(adapter, rule, cases, members) -> set:
    """The cases whose greedy rows can be checked (no tied maximum; without a greedy flag, the
    rule's law on one-hot verifier rows is greedy verification)."""
    ok = set()
    for c in members:
        q, p = cases[c]
        top = np.sort(q, axis=-1)
        if q.shape[-1] > 1 and np.any(top[:, -1] == top[:, -2]):
            continue
        argmax = q.argmax(-1)
        if adapter.supports_greedy_flag or _is_greedy_on_one_hot(
            rule, np.eye(q.shape[-1])[argmax], p, argmax
        ):
            ok.add(c)
    return ok


def _row(kind, c, cases, k, vmax, rng, probe, flagged):
    """One request's (q [k+1, V], p [k, V], drafts [k], bonus, drafts it holds, greedy flag)."""
    q, p = cases[c]
    q, p = _pad(q, vmax), _pad(p, vmax)
    if kind == "probe":
        return q, p, probe[1].copy(), probe[2], k, False
    drafts = np.array([_draw(rng, p[i], 1)[0] for i in range(k)], dtype=np.int64)
    bonus = int(_draw(rng, q[k], 1)[0])
    if kind == "greedy":
        argmax = q.argmax(-1)
        if not flagged:
            q = np.eye(vmax)[argmax]
        return q, p, drafts, int(argmax[k]), k, True
    if kind == "short":
        j = int(rng.integers(1, k))
        drafts[j:] = PLACEHOLDER
        p = p.copy()
        p[j:] = 0.0
        return q, p, drafts, bonus, j, False
    return q, p, drafts, bonus, k, False


def _raw_rows(built, raws, vmax, flagged):
    """The raw rows of a batch (a sampler that takes them): each request's raw rows (its
    processed ones where it has none), one-hot like its verifier rows when greedy without a
    flag, zero drafter rows at a short request's placeholders."""
    rq, rp = [], []
    for kind, c, _pid, r in built:
        q, p = (r[0], r[1]) if raws[c] is None else (_pad(raws[c][0], vmax), _pad(raws[c][1], vmax).copy())
        if kind == "greedy" and not flagged:
            q = r[0]
        if kind == "short":
            p = p.copy()
            p[r[4] :] = 0.0
        rq.append(q)
        rp.append(p)
    return np.stack(rq), np.stack(rp)


def _run_group(adapter, rule, cases, raws, members, g, seed, device, placeholders, calls):
    """The small batches of one group: per row (case, kind, slot, drafts held, drafts, bonus,
    output, probe id) as arrays."""
    k = cases[members[0]][1].shape[0]
    vmax = max(cases[c][1].shape[1] for c in members)
    rng = np.random.default_rng([seed, 13, g])
    greedy_ok = _greedy_cases(adapter, rule, cases, members)
    kinds = ["sampled"] + (["probe"] if adapter.supports_seeds else [])
    kinds += (["greedy"] if greedy_ok else []) + (["short"] if placeholders and k > 1 else [])
    weights = np.array([_WEIGHTS[x] for x in kinds])
    probes = []
    for j in range(PROBES):
        c = members[j % len(members)]
        q, p = cases[c]
        drafts = np.array([_draw(rng, p[i], 1)[0] for i in range(k)], dtype=np.int64)
        probes.append((c, drafts, int(_draw(rng, q[k], 1)[0]), seed * 7919 + 1000 * g + j))
    rows = []
    for t in range(calls):
        b = BATCH_SIZES[t % len(BATCH_SIZES)]
        built, gens = [], {}
        for s in range(b):
            kind = str(rng.choice(kinds, p=weights / weights.sum()))
            pid = int(rng.integers(PROBES)) if kind == "probe" else -1
            c = probes[pid][0] if kind == "probe" else int(rng.choice(members))
            if kind == "greedy" and c not in greedy_ok:
                kind = "sampled"
            if kind == "probe":
                gens[s] = torch.Generator(device=device).manual_seed(probes[pid][3])
            built.append(
                (kind, c, pid, _row(kind, c, cases, k, vmax, rng, probes[pid], adapter.supports_greedy_flag))
            )
        q = np.stack([x[3][0] for x in built])
        p = np.stack([x[3][1] for x in built])
        drafts = np.stack([x[3][2] for x in built])
        bonus = np.array([[x[3][3]] for x in built], dtype=np.int64)
        flags = torch.tensor([x[3][5] for x in built]) if adapter.supports_greedy_flag else None
        raw_rows = (
            _raw_rows(built, raws, vmax, adapter.supports_greedy_flag) if adapter.supports_raw else None
        )
        out = _call_rows(
            adapter,
            q,
            bonus,
            p,
            drafts,
            device,
            seed * 1_000_003 + 900_001 + 1000 * g + t,
            raw_rows=raw_rows,
            greedy=flags,
            seeded_seqs=gens or None,
        )
        for s, (kind, c, pid, r) in enumerate(built):
            slot = "alone" if b == 1 else "first" if s == 0 else "last" if s == b - 1 else "inner"
            argmax = cases[c][0].argmax(-1) if kind == "greedy" else None
            rows.append((kind, c, slot, r[4], drafts[s], int(bonus[s, 0]), out[s], pid, argmax))
    return rows, k, vmax


def _outcome_law(law, q, i, k, vmax) -> np.ndarray:
    r"""The law of position i's outcome: a token j emitted after a rejection,
    :math:`(1 - \alpha_i) r_i(j)` (ids 0..V-1), or going on, :math:`\alpha_i` (id V); the
    bonus position: the bonus row."""
    if i == k:
        return np.append(_pad(q[k], vmax), 0.0)
    reject = np.clip(law.emitted[i] - law.accepted_mass[i], 0.0, None)
    alpha = float(law.acceptance[i])
    if reject.sum() > 0:
        reject = reject / reject.sum() * (1.0 - alpha)
    return np.append(_pad(reject, vmax), alpha)


def _law_by_slot(rows, cases, laws, k, vmax, seed) -> list[dict]:
    raw = []
    for slot in SLOTS:
        mine = [r for r in rows if slot in ("all", r[2]) and r[0] in ("sampled", "short")]
        if not mine:
            continue
        parts = []
        for c in sorted({r[1] for r in mine}):
            rc = [r for r in mine if r[1] == c]
            out = np.stack([r[6] for r in rc])
            held = np.array([r[3] for r in rc])
            present = out != PLACEHOLDER
            for i in range(k + 1):
                if i < k:  # a position before the request's placeholder: stop (its token) or go on (V)
                    at = present[:, i] & (held > i)
                    outcome = np.where(present[:, i + 1], vmax, out[:, i])
                else:
                    at, outcome = present[:, i] & (held == k), out[:, i]
                parts.append((outcome[at], _outcome_law(laws[c], cases[c][0], i, k, vmax)))
        pv, det, cells, n = _pit_test(parts, np.random.default_rng([seed, 17, SLOTS.index(slot)]))
        raw.append(
            _record(
                f"batch-law:{slot}",
                "chi-square",
                pv,
                n,
                f"{len(mine)} requests: {det}",
                _cells=cells,
                _support=max(cells, 2),
                _reach=0.0,
                _no_goal=True,
            )
        )
    return raw


def _layout_check(rows, vmax, bonus_mode) -> dict:
    bad, first = 0, ""
    for r in rows:
        kind, _c, _slot, held, drafts, bonus, out = r[:7]
        if kind == "greedy":
            continue
        view = out[None, : held + 1]
        wrong, bonus_bad = _layout_violations(view, drafts[None, :held], np.array([[bonus]]), vmax)
        broken = bool(wrong[0]) or bool((out[held + 1 :] != PLACEHOLDER).any())
        broken |= bool(bonus_bad[0]) and held == len(drafts) and bonus_mode == "given"
        if broken:
            bad += 1
            first = (
                first or f"a {kind} request: output {out.tolist()}, drafts {drafts.tolist()}, bonus {bonus}"
            )
    detail = first or "every request: accepted drafts, one token, then -1; placeholders never accepted"
    return _exact("batch-layout", bad == 0, len(rows), detail)


def _greedy_check(rows) -> list[dict]:
    mine = [r for r in rows if r[0] == "greedy"]
    if not mine:
        return []
    bad = [
        r for r in mine if not np.array_equal(r[6], _greedy_expected(r[8], r[4][None], np.array([[r[5]]]))[0])
    ]
    detail = f"{len(mine)} greedy rows in mixed batches verified greedily"
    if bad:
        r = bad[0]
        detail = f"{len(bad)} of {len(mine)} greedy rows differ, e.g. output {r[6].tolist()}, drafts {r[4].tolist()}"
    return [_exact("batch-greedy", not bad, len(mine), detail)]


def _seeded_check(rows) -> list[dict]:
    mine = [r for r in rows if r[0] == "probe"]
    if not mine:
        return []
    seen: dict = {}
    bad = []
    for r in mine:
        first = seen.setdefault(r[7], r)
        if not np.array_equal(first[6], r[6]):
            bad.append((first, r))
    detail = (
        f"{len(seen)} seeded requests, {len(mine)} appearances in batches of sizes "
        f"{min(BATCH_SIZES)}-{max(BATCH_SIZES)}: each reproduced in every batch and call"
    )
    if bad:
        a, b = bad[0]
        detail = (
            f"{len(bad)} of {len(mine)} appearances differ from the request's first, e.g. "
            f"{a[6].tolist()} (slot {a[2]}) then {b[6].tolist()} (slot {b[2]})"
        )
    return [_exact("batch-seeded", not bad, len(mine), detail)]


def _batch_contracts(
    adapter, rule, cases, raws, laws, seed, device, skipped, bonus_mode, placeholders, num_samples
):
    """The batch contracts' records (module docstring) for every group of two or more cases
    with the same k."""
    groups = [m for m in _groups(cases, True) if len(m) >= 2]
    if not groups:
        skipped.append("batch contracts: no two cases with the same number of drafts")
        return []
    calls = min(BATCH_CALLS, max(len(BATCH_SIZES), -(-num_samples // DRAWS_PER_CALL)))
    raw = []
    for g, members in enumerate(groups):
        rows, k, vmax = _run_group(adapter, rule, cases, raws, members, g, seed, device, placeholders, calls)
        raw += _law_by_slot(rows, cases, laws, k, vmax, seed * 31 + g)
        raw.append(_layout_check(rows, vmax, bonus_mode))
        raw += _greedy_check(rows) + _seeded_check(rows)
    if not adapter.supports_seeds:
        skipped.append(f"batch-seeded: the {adapter.name} sampler takes no per-row generators")
    return raw
