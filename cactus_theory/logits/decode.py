r"""Real speculative decoding on CPU (or CUDA): a drafter proposes m tokens, the verifier checks
them in one forward pass and a rule of the toolkit decides, through the torch sampler interface.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), m draft length.

One round, batch size 1, both models with a KV cache:

1. the drafter samples :math:`d_1..d_m`, :math:`d_j \sim p_j` (processed distributions);
2. the verifier scores the prefix and all m drafts in one call, giving :math:`q_1..q_{m+1}`;
3. a bonus token :math:`b \sim q_{m+1}` is drawn, and the sampler (vLLM 0.7.3's interface,
   ``sampler(target_with_bonus_probs [1, m+1, V], bonus_token_ids [1, 1], draft_probs [1, m, V],
   draft_token_ids [1, m]) -> [1, m+1]`` with ``-1`` padding, built by
   ``cactus_theory.samplers.make_sampler(rule, **knobs)``) returns the accepted prefix plus one
   recovered or bonus token;
4. both caches are cropped to the accepted prefix.

Metrics (:class:`DecodeResult`):

* ``al`` -- accepted drafted tokens per verifier call (bonus **not** counted: the paper's AL_m);
* ``tokens_per_call`` -- emitted tokens per verifier call (= ``al + 1`` except at the end);
* ``speedup`` -- wall time of verifier-only decoding per token over speculative decoding's;
* ``nll`` -- the verifier's raw (temperature-1) per-token NLL of the output, by teacher forcing;
* ``expected_al`` -- :math:`\frac1R\sum_r \sum_{j=1}^m \prod_{i\le j} a_i(d_{r,i})` where
  :math:`a_i(n)` is the rule's acceptance probability of the drafted token computed from the
  recorded distributions (the expectation of the accepted length given the drafted tokens, over
  the acceptance coins): an unbiased prediction of the measured AL from the recorded (q, p).

The (q, p) pairs of every drafted position are recorded as a compact dump (see
:mod:`cactus_theory.logits.format`) with extras ``round``, ``draft_pos``, ``accepted_len``,
``emitted`` (the token the sampler emitted at that slot, or -1), so the exact expectations of the
analysis can be recomputed from the same runs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from dataclasses import dataclass, field

import numpy as np

from ._torch import torch
from .format import FORMAT, compact_columns, pack_compact, write_arrays
from .runner import BatchRunner, SamplingParams, processed_sparse


def _dense(ids, pr, V):
    out = torch.zeros(V, dtype=torch.float64)
    out[ids] = pr
    return out


@dataclass
class RoundRecord:
    """What one speculative round saw: processed q_1..q_m, p_1..p_m (sparse), drafts, outcome."""

    q_sparse: list
    p_sparse: list
    raw_q: list
    raw_p: list
    drafts: list
    accepted: int
    emitted: list


@dataclass
class DecodeResult:
    """Outcome of decoding one prompt (speculative or verifier-only)."""

    prompt_ids: list
    tokens: list
    wall_s: float
    verifier_calls: int
    drafted: int = 0
    accepted: int = 0
    rounds: list = field(default_factory=list)

    @property
    def al(self) -> float:
        return self.accepted / self.verifier_calls if self.verifier_calls else float("nan")

    @property
    def tokens_per_call(self) -> float:
        return len(self.tokens) / self.verifier_calls if self.verifier_calls else float("nan")


def _call_sampler(sampler, q, bonus, p, drafts, raw_q=None, raw_p=None):
    kw = {}
    try:
        params = inspect.signature(getattr(sampler, "forward", sampler)).parameters
    except (TypeError, ValueError):
        params = {}
    if "raw_target_probs" in params and raw_q is not None:
        kw["raw_target_probs"] = raw_q
    if "raw_draft_probs" in params and raw_p is not None:
        kw["raw_draft_probs"] = raw_p
    return sampler(
        target_with_bonus_probs=q, bonus_token_ids=bonus, draft_probs=p, draft_token_ids=drafts, **kw
    )


@torch.no_grad()
def speculative_decode(
    verifier,
    drafter,
    prompt_ids,
    sampler,
    m: int,
    max_new_tokens: int,
    sampling: SamplingParams = SamplingParams(),  # noqa: B008  (a frozen dataclass)
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    record: bool = False,
    pass_raw: bool = True,
) -> DecodeResult:
    """Speculative decoding of one prompt.

    Parameters
    ----------
    verifier, drafter : torch.nn.Module
        Hugging Face-like causal LMs (``.logits`` output) over the same vocabulary.
    prompt_ids : list of int
    sampler : callable
        vLLM 0.7.3 rejection-sampler interface (see module docstring).
    m : int
        Draft length.
    max_new_tokens : int
    sampling : SamplingParams
        Transforms applied to both models (q and p handed to the sampler are processed).
    generator : torch.Generator
        Drafting and bonus sampling; the sampler uses its own randomness.
    eos_id : int, optional
        Stop after emitting it.
    record : bool
        Keep per-round distributions (for :func:`records_to_dump` and ``expected_al``).
    pass_raw : bool
        Also give the sampler ``raw_target_probs`` / ``raw_draft_probs`` when its ``forward``
        accepts them (rules that decide on raw distributions need them).

    Returns
    -------
    DecodeResult
    """
    g = generator or torch.Generator().manual_seed(0)
    vr, dr = BatchRunner(verifier), BatchRunner(drafter)
    seq = list(prompt_ids)
    P = len(seq)
    res = DecodeResult(list(prompt_ids), [], 0.0, 0)
    t0 = time.perf_counter()
    V = None
    done = False
    while not done and len(seq) - P < max_new_tokens:
        # 1. draft m tokens
        feed = seq[dr.length :] if dr.cache is not None else seq
        out = dr.prefill([feed]) if dr.cache is None else dr.step(torch.tensor([feed]))
        drafts, p_rows, p_sp, raw_p = [], [], [], []
        for j in range(m):
            z = out.logits[0, -1]
            if V is None:
                V = z.shape[-1]
            ids, pr = processed_sparse(z[:V], sampling)
            d = int(ids[torch.multinomial(pr, 1, generator=g)])
            drafts.append(d)
            p_rows.append(_dense(ids, pr, V))
            if record or pass_raw:
                p_sp.append((ids.numpy(), pr.numpy()))
                raw_p.append(torch.softmax(z[:V].double(), -1))
            if j < m - 1:
                out = dr.step(torch.tensor([[d]]))
        # 2. verify
        vfeed = seq[vr.length :] + drafts if vr.cache is not None else seq + drafts
        before = len(seq)
        vo = vr.prefill([vfeed]) if vr.cache is None else vr.step(torch.tensor([vfeed]))
        zq = vo.logits[0, -(m + 1) :, :V]
        q_rows, q_sp = [], []
        for j in range(m + 1):
            ids, pr = processed_sparse(zq[j], sampling)
            q_rows.append(_dense(ids, pr, V))
            if record:
                q_sp.append((ids.numpy(), pr.numpy()))
        res.verifier_calls += 1
        q = torch.stack(q_rows)[None].float()
        p = torch.stack(p_rows)[None].float()
        bonus = torch.multinomial(q[0, m].double(), 1, generator=g).view(1, 1)
        raw_q = torch.softmax(zq.double(), -1) if (record or pass_raw) else None
        rq_arg = raw_q[None].float() if pass_raw else None
        rp_arg = torch.stack(raw_p)[None].float() if pass_raw else None
        o = _call_sampler(sampler, q, bonus, p, torch.tensor([drafts]), rq_arg, rp_arg)[0]
        emitted = [int(t) for t in o.tolist() if t != -1]
        n_acc = len(emitted) - 1
        res.drafted += m
        res.accepted += n_acc
        if record:
            res.rounds.append(
                RoundRecord(
                    q_sp[:m],
                    p_sp,
                    [r.numpy() for r in raw_q[:m]],
                    [r.numpy() for r in raw_p],
                    drafts,
                    n_acc,
                    emitted,
                )
            )
        for t in emitted:
            seq.append(t)
            if eos_id is not None and t == eos_id:
                done = True
                break
        # 3. crop both caches to the accepted prefix (the last emitted token is fed next round)
        vr.crop(before + n_acc)
        dr.crop(before + min(n_acc, m - 1))
    res.tokens = seq[P : P + max_new_tokens]
    res.wall_s = time.perf_counter() - t0
    return res


@torch.no_grad()
def verifier_decode(
    verifier,
    prompt_ids,
    max_new_tokens: int,
    sampling: SamplingParams = SamplingParams(),  # noqa: B008  (a frozen dataclass)
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
) -> DecodeResult:
    """Verifier-only decoding (one call per token, KV cache): the speed and quality reference."""
    g = generator or torch.Generator().manual_seed(0)
    vr = BatchRunner(verifier)
    seq = list(prompt_ids)
    P = len(seq)
    t0 = time.perf_counter()
    out = vr.prefill([seq])
    calls = 0
    while len(seq) - P < max_new_tokens:
        z = out.logits[0, -1]
        ids, pr = processed_sparse(z, sampling)
        t = int(ids[torch.multinomial(pr, 1, generator=g)])
        seq.append(t)
        calls += 1
        if eos_id is not None and t == eos_id:
            break
        if len(seq) - P >= max_new_tokens:
            break
        out = vr.step(torch.tensor([[t]]))
    return DecodeResult(list(prompt_ids), seq[P:], time.perf_counter() - t0, calls)


@torch.no_grad()
def verifier_nll(verifier, prompt_ids, tokens) -> tuple[float, int]:
    """Sum of the verifier's raw (temperature-1) NLL of ``tokens`` after ``prompt_ids`` and the count."""
    if not tokens:
        return 0.0, 0
    x = torch.tensor([list(prompt_ids) + list(tokens)])
    z = verifier(x).logits[0, len(prompt_ids) - 1 : -1].double()
    lp = torch.log_softmax(z, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return float(-lp.sum()), len(tokens)


def expected_accepted(rounds, rule=None, top_k_raw: int = 64) -> np.ndarray:
    """Per-round expectation of the accepted length given the drafted tokens.

    ``E[n_acc | d] = sum_{j=1}^m prod_{i<=j} a_i(d_i)`` with ``a_i`` the rule's acceptance
    probability (``cactus_theory.rules.get_rule(...).plan(q, p).accept_probs_at``) computed on the
    recorded compact columns; for SpS ``a_i(n) = min(1, q_i(n)/p_i(n))``.

    Parameters
    ----------
    rounds : list of RoundRecord
    rule : Rule or str or None
        None means SpS (computed directly, no registry needed).
    """
    from ..rules import get_rule

    r = get_rule(rule) if rule is not None else None
    out = []
    for rd in rounds:
        acc = []
        for j, d in enumerate(rd.drafts):
            cols, q, p, rq, rp = compact_columns(
                rd.q_sparse[j][0],
                rd.q_sparse[j][1],
                rd.p_sparse[j][0],
                rd.p_sparse[j][1],
                rd.raw_q[j],
                rd.raw_p[j],
                top_k_raw,
            )
            k = int(np.searchsorted(cols[:-1], d))
            if r is None:
                acc.append(1.0 if p[k] <= 0 else min(1.0, q[k] / p[k]))
            else:
                plan = r.plan(q[None], p[None], raw_target_probs=rq[None], raw_draft_probs=rp[None])
                acc.append(float(np.asarray(plan.accept_probs_at(np.array([k])))[0]))
        out.append(float(np.cumprod(acc).sum()))
    return np.asarray(out)


def records_to_dump(results, prompts, path, meta: dict, top_k_raw: int = 64):
    """Write the recorded rounds of several :class:`DecodeResult` as a compact dump (positions =
    drafted positions; extras ``round``, ``draft_pos``, ``accepted_len``, ``emitted``)."""
    cols, q, p, rq, rp, widths, tl, toks, pt, pl = [], [], [], [], [], [], [], [], [], []
    ex = {"round": [], "draft_pos": [], "accepted_len": [], "emitted": []}
    traj = []
    for res, pr in zip(results, prompts):
        n = 0
        for ri, rd in enumerate(res.rounds):
            for j, d in enumerate(rd.drafts):
                c, a, b, ra, rb = compact_columns(
                    rd.q_sparse[j][0],
                    rd.q_sparse[j][1],
                    rd.p_sparse[j][0],
                    rd.p_sparse[j][1],
                    rd.raw_q[j],
                    rd.raw_p[j],
                    top_k_raw,
                )
                cols.append(c)
                q.append(a)
                p.append(b)
                rq.append(ra)
                rp.append(rb)
                widths.append(len(c))
                toks.append(d)
                ex["round"].append(ri)
                ex["draft_pos"].append(j)
                ex["accepted_len"].append(rd.accepted)
                ex["emitted"].append(rd.emitted[j] if j < len(rd.emitted) else -1)
                n += 1
        tl.append(n)
        pt.extend(res.prompt_ids)
        pl.append(len(res.prompt_ids))
        traj.append({"prompt_id": pr.id, "category": pr.category, "source": pr.source, "n_positions": n})
    arrays = pack_compact(cols, q, p, rq, rp, widths, toks, tl, pt, pl)
    for k, v in ex.items():
        arrays[f"x_{k}"] = np.asarray(v, np.int32)
    m = {
        "format": FORMAT,
        "kind": "decode_records",
        "trajectories": traj,
        "token_ids": "drafted tokens (extras: round, draft_pos, accepted_len, emitted)",
        **meta,
    }
    return write_arrays(path, arrays, m)


def resolve_sampler(rule: str, **knobs):
    """``cactus_theory.samplers.make_sampler(rule, **knobs)`` (the torch samplers)."""
    from ..samplers import make_sampler

    return make_sampler(rule, **knobs)


@dataclass
class BenchConfig:
    """One speculative configuration of :func:`run_benchmark`."""

    drafter: str
    m: int
    rule: str = "sps"
    knobs: dict = field(default_factory=dict)
    record: bool = True

    @property
    def label(self) -> str:
        k = ",".join(f"{a}={b}" for a, b in self.knobs.items())
        return f"{self.drafter}|m={self.m}|{self.rule}{'(' + k + ')' if k else ''}"


def run_benchmark(
    prompts,
    configs,
    max_new_tokens: int = 192,
    seed: int = 0,
    threads: int | None = None,
    out_dir=None,
    progress: bool = True,
    sampling: SamplingParams = SamplingParams(),  # noqa: B008  (a frozen dataclass)
    max_prompt_tokens: int = 384,
) -> dict:
    """Measure speculative decoding against verifier-only decoding on the same prompts.

    The runs are *interleaved* per prompt (verifier-only, then every configuration), so that a
    shared, loaded machine slows all of them alike; wall-time speedup is the ratio of total
    seconds per emitted token. Per configuration: AL (bonus not counted), tokens per verifier
    call, speedup, the verifier's raw per-token NLL of the output, GSM8K accuracy (strict and
    flexible extraction) where the prompts are GSM8K problems, and the expected AL from the
    recorded distributions (:func:`expected_accepted`). Records are written to
    ``out_dir/<label>.npz`` when ``out_dir`` is given.

    Returns
    -------
    dict
        ``{"verifier": {...}, "configs": {label: {...}}, "settings": {...}}``.
    """
    from pathlib import Path

    from tqdm.auto import tqdm

    from .drafters import make_drafter
    from .models import load_smollm2
    from .prompts import chat_ids, extract_gsm8k_answer

    if threads:
        torch.set_num_threads(threads)
    lm = load_smollm2()
    tok = lm.tokenizer
    eos = tok.eos_token_id
    drafters = {}
    for c in configs:
        if c.drafter not in drafters:
            drafters[c.drafter] = make_drafter(c.drafter, lm)[0]
    samplers = {c.label: resolve_sampler(c.rule, **c.knobs) for c in configs}
    base = {"wall_s": 0.0, "tokens": 0, "calls": 0, "nll": 0.0, "outputs": []}
    per = {
        c.label: {
            "wall_s": 0.0,
            "tokens": 0,
            "calls": 0,
            "accepted": 0,
            "drafted": 0,
            "nll": 0.0,
            "outputs": [],
            "results": [],
            "expected": [],
        }
        for c in configs
    }
    bar = tqdm(total=len(prompts) * (1 + len(configs)), disable=not progress, desc="decode")
    for i, pr in enumerate(prompts):
        ids = chat_ids(tok, pr.text, max_prompt_tokens=max_prompt_tokens)
        g = torch.Generator().manual_seed(seed * 7919 + i)
        r = verifier_decode(lm.model, ids, max_new_tokens, sampling, g, eos)
        nll, n = verifier_nll(lm.model, ids, r.tokens)
        base["wall_s"] += r.wall_s
        base["tokens"] += len(r.tokens)
        base["calls"] += r.verifier_calls
        base["nll"] += nll
        base["outputs"].append(tok.decode(r.tokens, skip_special_tokens=True))
        bar.update()
        for c in configs:
            torch.manual_seed(seed * 7919 + i)  # the sampler's own randomness
            g = torch.Generator().manual_seed(seed * 7919 + i)
            r = speculative_decode(
                lm.model,
                drafters[c.drafter],
                ids,
                samplers[c.label],
                c.m,
                max_new_tokens,
                sampling,
                g,
                eos,
                record=c.record,
            )
            nll, n = verifier_nll(lm.model, ids, r.tokens)
            d = per[c.label]
            d["wall_s"] += r.wall_s
            d["tokens"] += len(r.tokens)
            d["calls"] += r.verifier_calls
            d["accepted"] += r.accepted
            d["drafted"] += r.drafted
            d["nll"] += nll
            d["outputs"].append(tok.decode(r.tokens, skip_special_tokens=True))
            if c.record:
                d["expected"].extend(
                    expected_accepted(r.rounds, c.rule if c.rule != "sps" else None).tolist()
                )
                d["results"].append(r)
            bar.update()
    bar.close()

    def gsm(outputs):
        golds = [p.answer for p in prompts]
        if not all(golds):
            return None
        ok_s = sum(extract_gsm8k_answer(o, strict=True) == g for o, g in zip(outputs, golds))
        ok_f = sum(extract_gsm8k_answer(o) == g for o, g in zip(outputs, golds))
        return {"strict": ok_s / len(golds), "flexible": ok_f / len(golds), "n": len(golds)}

    sec_per_tok = base["wall_s"] / max(base["tokens"], 1)
    out = {
        "settings": {
            "n_prompts": len(prompts),
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "sampling": sampling.as_dict(),
            "threads": torch.get_num_threads(),
            "prompts": [p.id for p in prompts],
        },
        "verifier": {
            "ms_per_token": 1000 * sec_per_tok,
            "tokens": base["tokens"],
            "nll_per_token": base["nll"] / max(base["tokens"], 1),
            "gsm8k": gsm(base["outputs"]),
        },
        "configs": {},
    }
    for c in configs:
        d = per[c.label]
        res = {
            "al": d["accepted"] / max(d["calls"], 1),
            "tokens_per_call": d["tokens"] / max(d["calls"], 1),
            "ms_per_token": 1000 * d["wall_s"] / max(d["tokens"], 1),
            "speedup": sec_per_tok / (d["wall_s"] / max(d["tokens"], 1)),
            "nll_per_token": d["nll"] / max(d["tokens"], 1),
            "gsm8k": gsm(d["outputs"]),
            "tokens": d["tokens"],
            "calls": d["calls"],
        }
        if d["expected"]:
            e = np.asarray(d["expected"])
            res["expected_al"] = float(e.mean())
            res["expected_al_se"] = float(e.std(ddof=1) / np.sqrt(len(e))) if len(e) > 1 else None
            res["rounds"] = int(len(e))
        if out_dir is not None and d["results"]:
            path = Path(out_dir) / (
                c.label.replace("|", "_")
                .replace(":", "-")
                .replace("=", "")
                .replace(",", "_")
                .replace("(", "_")
                .replace(")", "")
                + ".npz"
            )
            records_to_dump(
                d["results"],
                prompts,
                path,
                {
                    "verifier": lm.name,
                    "drafter": c.drafter,
                    "m": c.m,
                    "rule": c.rule,
                    "knobs": c.knobs,
                    "transforms": sampling.as_dict(),
                },
            )
            res["records"] = str(path)
        out["configs"][c.label] = res
    return out


DECODE_DIR = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "real" / "decode"
SHIPPED_RECORDS = ("distilled_m2_sps.npz", "distilled_m2_cactus-taylor_delta0.75.npz")
#: The shipped measurement's prompts: (prompt set, categories, number of prompts, new tokens).
SHIPPED_MAIN = ("gsm8k", None, 3, 48)
SHIPPED_SIDE = ("spec_bench", ("writing", "coding"), 2, 32)
#: Interleaved repeats of the shipped measurement (the speedup is their median and range).
SHIPPED_REPEATS = 3


def speedup_spread(values) -> dict:
    """Median, min, max and the list of per-repeat speedups (``values``, at least one)."""
    v = sorted(float(x) for x in values)
    if not v:
        raise ValueError("values: need at least one speedup")
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return {"median": med, "min": v[0], "max": v[-1], "runs": v}


def run_repeated(
    prompts,
    configs,
    repeats: int,
    max_new_tokens: int = 192,
    seed: int = 0,
    threads: int | None = None,
    out_dir=None,
    progress: bool = True,
) -> dict:
    """:func:`run_benchmark` ``repeats`` times (each a whole interleaved pass), merged.

    The first repeat gives every count (tokens, AL, NLL, accuracy, expected AL) and the records
    (``out_dir``); each configuration's ``speedup`` becomes the median over the repeats and
    ``speedup_spread`` holds median, min, max and the runs; the verifier's ``ms_per_token`` is
    the median too, with ``ms_per_token_runs``. A configuration whose AL differs between repeats
    (the seeded runs emitted different tokens) gets a ``note``.
    """
    import math

    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    runs = [
        run_benchmark(
            prompts, configs, max_new_tokens, seed, threads, out_dir if r == 0 else None, progress=progress
        )
        for r in range(repeats)
    ]
    res = runs[0]
    res["settings"]["repeats"] = repeats
    ms = [run["verifier"]["ms_per_token"] for run in runs]
    res["verifier"]["ms_per_token"] = speedup_spread(ms)["median"]
    res["verifier"]["ms_per_token_runs"] = ms
    for label, c in res["configs"].items():
        c["speedup_spread"] = speedup_spread([run["configs"][label]["speedup"] for run in runs])
        c["speedup"] = c["speedup_spread"]["median"]
        c["ms_per_token"] = speedup_spread([run["configs"][label]["ms_per_token"] for run in runs])["median"]
        if any(not math.isclose(run["configs"][label]["al"], c["al"]) for run in runs):
            c["note"] = "the repeats emitted different tokens (non-deterministic kernels)"
    return res


def regenerate_decode_results(
    out_dir=None, threads: int = 2, progress: bool = False, repeats: int = SHIPPED_REPEATS
) -> dict:
    """Re-run the shipped decoding measurement (3 repeats of every configuration by default).

    Main run: the first 3 GSM8K evaluation problems, 48 new tokens, distilled drafter with SpS at
    m = 1, 2, 3 and Cactus (Taylor, delta = 0.75) at m = 2, interleaved with verifier-only
    decoding. Side run: 2 Spec-Bench prompts (writing, coding), 32 tokens, early-exit-15 and
    requant-4 drafters at m = 2 (SpS). Each is repeated ``repeats`` times (:func:`run_repeated`:
    the speedup is the median and range over the repeats). Writes ``results.json`` and the
    recorded (q, p) of the two m = 2 runs (:data:`SHIPPED_RECORDS`) to ``out_dir`` (default
    ``cactus_theory/data/real/decode``).
    """
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from .format import atomic_write_bytes
    from .prompts import load_prompts

    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    out_dir = Path(out_dir) if out_dir else DECODE_DIR
    tmp = Path(tempfile.mkdtemp())
    (mset, _, mn, mtok), (sset, scat, sn, stok) = SHIPPED_MAIN, SHIPPED_SIDE
    main = run_repeated(
        load_prompts(mset, "eval")[:mn],
        [
            BenchConfig("distilled", 1),
            BenchConfig("distilled", 2),
            BenchConfig("distilled", 3),
            BenchConfig("distilled", 2, "cactus-taylor", {"delta": 0.75}),
        ],
        repeats,
        max_new_tokens=mtok,
        seed=0,
        threads=threads,
        out_dir=tmp,
        progress=progress,
    )
    side = run_repeated(
        load_prompts(sset, "eval", categories=list(scat))[:sn],
        [BenchConfig("early-exit:15", 2), BenchConfig("requant:4", 2)],
        repeats,
        max_new_tokens=stok,
        seed=0,
        threads=threads,
        out_dir=None,
        progress=progress,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_RECORDS:
        shutil.copyfile(tmp / name, out_dir / (name + ".tmp"))
        (out_dir / (name + ".tmp")).replace(out_dir / name)
    for r in (main, side):
        for c in r["configs"].values():
            c.pop("records", None)
    res = {"main": main, "side": side}
    atomic_write_bytes(out_dir / "results.json", json.dumps(res, indent=1).encode())
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def shipped_decode_records() -> list:
    """The committed decoding records (compact dumps of drafted positions, see
    :func:`records_to_dump`)."""
    return sorted(DECODE_DIR.glob("*.npz"))


# --------------------------------------------------------------------------- the decode subcommand

#: Longest draft a decoding run accepts (the KV caches and the sampler's [1, m+1, V] block grow with m).
MAX_DRAFT_LENGTH = 64


def add_decode_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory decode`` (also ``python -m cactus_theory.logits.decode``)."""
    from .._cli import add_knobs, add_output, add_seed

    p.add_argument(
        "--shipped",
        action="store_true",
        help="re-run the shipped measurement (a few CPU minutes at 3 repeats); needs --overwrite-shipped "
        "to replace cactus_theory/data/real/decode, else give --output-dir",
    )
    p.add_argument(
        "--overwrite-shipped",
        action="store_true",
        help="allow --shipped to rewrite the committed files inside the package",
    )
    p.add_argument("--output-dir", default=None, help="with --shipped: write the measurement here instead")
    p.add_argument("--drafter", default="distilled", help="early-exit:K, requant:B or distilled")
    p.add_argument(
        "-m",
        "--draft-length",
        "--m",
        dest="m",
        type=int,
        action="append",
        default=None,
        help=f"draft length m, repeatable (default: 2 and 4; at most {MAX_DRAFT_LENGTH} and max-new-tokens)",
    )
    p.add_argument("--rule", default="sps", help="a rule of cactus_theory.rules (e.g. sps, cactus-taylor)")
    add_knobs(p)
    p.add_argument("--prompts", default="gsm8k", help="gsm8k, spec_bench, ifeval, mix, or a .jsonl/.txt file")
    p.add_argument("--n-prompts", type=int, default=10, help="number of prompts (>= 1)")
    p.add_argument("--max-new-tokens", type=int, default=192, help="tokens generated per prompt")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved repeats of the whole run; the speedup is reported as median and range",
    )
    add_seed(p)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--records-dir", default=None, help="write the recorded (q, p) of every run here")
    add_output(p, output_help="also write the results (JSON) to this file (atomically)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    from .models import add_cache_dir_argument

    add_cache_dir_argument(p)
    return p


def check_decode_args(args) -> dict:
    """Validate ``decode``'s arguments before any model is loaded; return the parsed rule knobs."""
    from .._cli import parse_knobs
    from ..rules import get_rule
    from ._checks import check_drafter, check_prompts

    if args.shipped:
        if not args.overwrite_shipped and not args.output_dir:
            raise ValueError(
                "shipped: this rewrites committed files in cactus_theory/data/real/decode; "
                "add --overwrite-shipped, or --output-dir DIR to write elsewhere"
            )
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {args.threads}")
        if args.repeats < 1:
            raise ValueError(f"repeats: must be >= 1, got {args.repeats}")
        return {}
    for name in ("n_prompts", "max_new_tokens", "repeats"):
        v = getattr(args, name)
        if v < 1:
            raise ValueError(f"{name.replace('_', '-')}: must be >= 1, got {v}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"threads: must be >= 1, got {args.threads}")
    for m in args.m or []:
        if m < 1:
            raise ValueError(f"m: draft length must be >= 1, got {m}")
        if m > min(MAX_DRAFT_LENGTH, args.max_new_tokens):
            raise ValueError(
                f"m: draft length {m} exceeds its bound min({MAX_DRAFT_LENGTH}, max-new-tokens = "
                f"{args.max_new_tokens})"
            )
    knobs = parse_knobs(args.knob)
    try:
        get_rule(args.rule, **knobs)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"rule: {exc}") from None
    from .models import SMOLLM2_LAYERS

    check_drafter(args.drafter, n_layers=SMOLLM2_LAYERS)  # the verifier is SmolLM2
    check_prompts(args.prompts)
    return knobs


def _decode_text(res: dict) -> str:
    lines = [
        f"verifier-only: {res['verifier']['ms_per_token']:.1f} ms/token, "
        f"NLL/token {res['verifier']['nll_per_token']:.3f}",
        f"{'configuration':<44}{'AL':>7}{'E[AL]':>8}{'tok/call':>9}{'speedup median [min, max]':>28}",
    ]
    for label, c in res["configs"].items():
        sp = c.get("speedup_spread") or {"median": c["speedup"], "min": c["speedup"], "max": c["speedup"]}
        e = c.get("expected_al")
        lines.append(
            f"{label:<44}{c['al']:>7.3f}{'-' if e is None else format(e, '.3f'):>8}"
            f"{c['tokens_per_call']:>9.2f}"
            f"{sp['median']:>12.2f}x [{sp['min']:.2f}, {sp['max']:.2f}]"
        )
    n = res["settings"].get("repeats", 1)
    lines.append(
        f"speedup = verifier-only wall time per token / speculative's, over {n} interleaved "
        "run(s) on this machine"
    )
    return "\n".join(lines)


def run_decode(args) -> int:
    """Execute ``cactus-theory decode`` (arguments checked first; no model loaded on bad input)."""
    from .._cli import _emit, check_output_path
    from .models import apply_cache_dir, require_builtin

    knobs = check_decode_args(args)
    apply_cache_dir(args)
    require_builtin("cactus-theory decode")
    if args.shipped:
        if args.output_dir:
            check_output_path(args.output_dir, "output-dir", folder=True)
        res = regenerate_decode_results(
            out_dir=args.output_dir,
            threads=args.threads or 2,
            progress=not args.no_progress,
            repeats=args.repeats,
        )
        _emit(args, text=json.dumps(res, indent=1), data=res)
        return 0
    from .prompts import benchmark_mix, load_prompts, load_user_prompts

    if args.prompts in ("gsm8k", "spec_bench", "ifeval"):
        prompts = load_prompts(args.prompts, "eval")[: args.n_prompts]
    elif args.prompts == "mix":
        prompts = benchmark_mix(1)[: args.n_prompts]
    else:
        prompts = load_user_prompts(args.prompts)[: args.n_prompts]
    if not prompts:
        raise ValueError(f"prompts: {args.prompts!r} holds no prompt")
    configs = [BenchConfig(args.drafter, m, args.rule, knobs) for m in (args.m or [2, 4])]
    res = run_repeated(
        prompts,
        configs,
        args.repeats,
        args.max_new_tokens,
        args.seed,
        args.threads,
        args.records_dir,
        progress=not args.no_progress,
    )
    if args.output:
        from .._io import atomic_write_text

        atomic_write_text(args.output, json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(_decode_text(res))
    return 0


def decode_main(argv=None) -> int:
    """``python -m cactus_theory.logits.decode``: the ``decode`` subcommand as a module entry."""
    from .._cli import module_entry

    return module_entry(
        "decode",
        add_decode_arguments,
        run_decode,
        argv,
        description="real speculative decoding vs verifier-only decoding (real models)",
    )


__all__ = [
    "DECODE_DIR",
    "SHIPPED_REPEATS",
    "regenerate_decode_results",
    "run_repeated",
    "shipped_decode_records",
    "speedup_spread",
    "BenchConfig",
    "run_benchmark",
    "DecodeResult",
    "RoundRecord",
    "expected_accepted",
    "records_to_dump",
    "resolve_sampler",
    "speculative_decode",
    "verifier_decode",
    "verifier_nll",
]


if __name__ == "__main__":  # python -m cactus_theory.logits.decode [args]: the ``decode`` subcommand
    raise SystemExit(decode_main())
