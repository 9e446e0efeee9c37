"""The decoding benchmark: speculative decoding against verifier-only decoding on the same prompts,
interleaved per prompt, repeated, and the shipped measurement (:data:`DECODE_DIR`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._decode import (
    expected_accepted,
    records_to_dump,
    resolve_sampler,
    speculative_decode,
    verifier_decode,
    verifier_nll,
)
from ._runner import SamplingParams
from ._torch import torch


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
    from tqdm.auto import tqdm

    from ._drafters import make_drafter
    from ._models import load_smollm2

    if threads:
        torch.set_num_threads(threads)
    lm = load_smollm2()
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
        _run_prompt(
            lm,
            drafters,
            samplers,
            configs,
            pr,
            i,
            base,
            per,
            bar,
            max_new_tokens,
            seed,
            sampling,
            max_prompt_tokens,
        )
    bar.close()
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
            "gsm8k": _gsm8k(prompts, base["outputs"]),
        },
        "configs": {},
    }
    for c in configs:
        out["configs"][c.label] = _config_summary(
            c, per[c.label], prompts, sec_per_tok, lm.name, sampling, out_dir
        )
    return out


def _run_prompt(
    lm, drafters, samplers, configs, pr, i, base, per, bar, max_new_tokens, seed, sampling, max_prompt_tokens
):
    """One prompt of :func:`run_benchmark`: verifier-only decoding, then every configuration, each
    seeded by ``(seed, i)``; the totals accumulate in ``base`` and ``per``."""
    from ._prompts import chat_ids

    tok = lm.tokenizer
    eos = tok.eos_token_id
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
            d["expected"].extend(expected_accepted(r.rounds, c.rule if c.rule != "sps" else None).tolist())
            d["results"].append(r)
        bar.update()


def _gsm8k(prompts, outputs):
    """GSM8K accuracy (strict and flexible extraction) of ``outputs``, or None when a prompt has no
    gold answer."""
    from ._prompts import extract_gsm8k_answer

    golds = [p.answer for p in prompts]
    if not all(golds):
        return None
    ok_s = sum(extract_gsm8k_answer(o, strict=True) == g for o, g in zip(outputs, golds))
    ok_f = sum(extract_gsm8k_answer(o) == g for o, g in zip(outputs, golds))
    return {"strict": ok_s / len(golds), "flexible": ok_f / len(golds), "n": len(golds)}


def _config_summary(c, d, prompts, sec_per_tok, verifier_name, sampling, out_dir) -> dict:
    """One configuration's row of :func:`run_benchmark` from its totals ``d``; its records are
    written to ``out_dir`` when given."""
    res = {
        "al": d["accepted"] / max(d["calls"], 1),
        "tokens_per_call": d["tokens"] / max(d["calls"], 1),
        "ms_per_token": 1000 * d["wall_s"] / max(d["tokens"], 1),
        "speedup": sec_per_tok / (d["wall_s"] / max(d["tokens"], 1)),
        "nll_per_token": d["nll"] / max(d["tokens"], 1),
        "gsm8k": _gsm8k(prompts, d["outputs"]),
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
        meta = {
            "verifier": verifier_name,
            "drafter": c.drafter,
            "m": c.m,
            "rule": c.rule,
            "knobs": c.knobs,
            "transforms": sampling.as_dict(),
        }
        records_to_dump(d["results"], prompts, path, meta)
        res["records"] = str(path)
    return res


DECODE_DIR = Path(__file__).resolve().parents[1] / "data" / "real" / "decode"
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
    import shutil
    import tempfile

    from .._tables import to_json
    from ._format import atomic_write_bytes
    from ._prompts import load_prompts

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
    atomic_write_bytes(out_dir / "results.json", to_json(res, indent=1).encode())
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def shipped_decode_records() -> list:
    """The committed decoding records (compact dumps of drafted positions, see
    :func:`records_to_dump`)."""
    return sorted(DECODE_DIR.glob("*.npz"))
