"""The power of ``check_sequence_law``: whole requests with sampling state.

Writes the generated block of docs/testing.md (between ``<!-- BEGIN sequence-law-power ... -->``
and ``<!-- END sequence-law-power -->``) from the JSON record docs/records/sequence_law_power.json:

``power``
    Every defect of the reference speculative generator (penalties, stop, minimum length, budget,
    temperature) checked at the default size (``DEFAULT_NUM_REQUESTS`` requests per default
    case, ``DEFAULT_ALPHA``) over ``--seeds`` seeds, and the correct generator over ``--runs``
    seeds: detection, the cases that failed, false alarms, each case's smallest detected TV.
``render``
    Rewrites the block from the record; ``--check`` exits 1 when the block differs.

    .venv/bin/python scripts/sequence_law_power.py power --seeds 10 --runs 300 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from cactus_theory._io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "testing.md"
RECORD = ROOT / "docs" / "records" / "sequence_law_power.json"
FIRST_MUTANT_SEED = 1000
FIRST_CORRECT_SEED = 5000
BLOCK = re.compile(
    r"(<!-- BEGIN sequence-law-power \(scripts/sequence_law_power\.py\) -->\n)(?P<body>(?:.*?\n)?)"
    r"(<!-- END sequence-law-power -->)",
    re.S,
)


def run_one(job) -> dict:
    """One check of the reference generator (``defect`` or None) at the default size, ``seed``."""
    from cactus_theory.testing import check_sequence_law
    from cactus_theory.testing._sequence_reference import ReferenceGenerator

    defect, seed = job
    res = check_sequence_law(ReferenceGenerator(defect), seed=seed)
    return {
        "defect": defect,
        "seed": seed,
        "passed": res["passed"],
        "failed": [c["name"] for c in res["cases"] if not c["passed"]],
        "min_p_value": min(c["p_value"] for c in res["cases"]),
        "p_values": [c["p_value"] for c in res["cases"]],
    }


def _params(p) -> dict:
    return {
        "temperature": p.temperature,
        "repetition_penalty": p.repetition_penalty,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "logit_bias": {str(k): v for k, v in p.logit_bias.items()},
        "min_tokens": p.min_tokens,
        "stop_token_ids": list(p.stop_token_ids),
        "max_tokens": p.max_tokens,
    }


def power_record(seeds: int, runs: int, jobs: int = 1, defects=None) -> dict:
    """Detection of each defect over ``seeds`` seeds and false alarms over ``runs`` correct runs."""
    from scipy import stats

    from cactus_theory.testing import check_sequence_law
    from cactus_theory.testing._sequence import DEFAULT_ALPHA, DEFAULT_NUM_REQUESTS, default_sequence_cases
    from cactus_theory.testing._sequence_reference import SEQUENCE_DEFECTS, ReferenceGenerator

    defects = list(SEQUENCE_DEFECTS) if defects is None else list(defects)
    jobs_list = [(d, FIRST_MUTANT_SEED + s) for d in defects for s in range(seeds)]
    jobs_list += [(None, FIRST_CORRECT_SEED + s) for s in range(runs)]
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            out = pool.map(run_one, jobs_list, chunksize=4)
    else:
        out = [run_one(j) for j in jobs_list]
    base = check_sequence_law(ReferenceGenerator(), seed=FIRST_CORRECT_SEED)
    tv = {c["name"]: c["detectable_tv"] for c in base["cases"]}
    cases = [
        {
            "name": c.name,
            "vocab": c.vocab,
            "length": c.length,
            "num_drafts": c.num_drafts,
            "prompt": list(c.prompt),
            "params": _params(c.params),
            "detectable_tv": tv[c.name],
        }
        for c in default_sequence_cases()
    ]
    mutants = []
    for d in defects:
        rows = [r for r in out if r["defect"] == d]
        failed = {c["name"]: sum(c["name"] in r["failed"] for r in rows) for c in cases}
        mutants.append(
            {
                "defect": d,
                "class": SEQUENCE_DEFECTS[d][0],
                "source": SEQUENCE_DEFECTS[d][1],
                "seeds": len(rows),
                "caught": sum(not r["passed"] for r in rows),
                "failed_cases": failed,
                "per_seed": [[r["seed"], r["passed"]] for r in rows],
            }
        )
    ok = [r for r in out if r["defect"] is None]
    pvals = [p for r in ok for p in r["p_values"]]
    return {
        "num_requests": DEFAULT_NUM_REQUESTS,
        "alpha": DEFAULT_ALPHA,
        "cases": cases,
        "mutants": mutants,
        "correct": {
            "generator": "ReferenceGenerator()",
            "runs": len(ok),
            "false_alarms": sum(not r["passed"] for r in ok),
            "min_p_value": min((r["min_p_value"] for r in ok), default=None),
            # a correct generator's p-values are (asymptotically) uniform: their KS test against
            # the uniform law sees a bias far below what one run at alpha detects
            "case_p_values": len(pvals),
            "uniformity_ks_p_value": float(stats.kstest(pvals, "uniform").pvalue) if pvals else None,
            "per_seed": [[r["seed"], r["passed"]] for r in ok[:5]],
        },
    }


def _fmt_params(p: dict) -> str:
    parts = [f"T = {p['temperature']:g}"]
    names = (
        ("repetition_penalty", "repetition"),
        ("presence_penalty", "presence"),
        ("frequency_penalty", "frequency"),
    )
    parts += [
        f"{short} {p[k]:g}" for k, short in names if p[k] != (1.0 if k == "repetition_penalty" else 0.0)
    ]
    if p["logit_bias"]:
        parts.append("logit bias " + ", ".join(f"{k}: {v:+g}" for k, v in p["logit_bias"].items()))
    if p["stop_token_ids"]:
        parts.append("stop " + ", ".join(map(str, p["stop_token_ids"])))
    if p["min_tokens"]:
        parts.append(f"min_tokens {p['min_tokens']}")
    if p["max_tokens"] is not None:
        parts.append(f"max_tokens {p['max_tokens']}")
    return "; ".join(parts)


def render_block(rec: dict) -> str:
    """The generated block of docs/testing.md from the record."""
    lines = [
        f"Each generator at the default size ({rec['num_requests']:,} requests per case, alpha = "
        f"{rec['alpha']:g} for the whole check, shared by its cases), defects over seeds "
        f"{FIRST_MUTANT_SEED} onward. The cases (the law of the first L committed tokens, END "
        "after a request stopped; the smallest total variation detected with probability 0.9):",
        "",
        "| case | vocabulary | L | drafts per step | prompt | sampling parameters | smallest TV detected |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in rec["cases"]:
        lines.append(
            f"| `{c['name']}` | {c['vocab']} | {c['length']} | {c['num_drafts']} | {tuple(c['prompt'])} "
            f"| {_fmt_params(c['params'])} | {c['detectable_tv']:.3f} |"
        )
    lines += [
        "",
        "| defect | class | public report | caught | failed cases (seeds) |",
        "|---|---|---|---|---|",
    ]
    for m in rec["mutants"]:
        failed = ", ".join(f"{k} ({v})" for k, v in m["failed_cases"].items() if v)
        lines.append(
            f"| `{m['defect']}` | {m['class']} | {m['source']} | {m['caught']}/{m['seeds']} | {failed or 'none'} |"
        )
    ok = rec["correct"]
    worst = min(m["caught"] / m["seeds"] for m in rec["mutants"])
    seeds = min(m["seeds"] for m in rec["mutants"])
    lines += [
        "",
        f"The correct generator `{ok['generator']}`, seeds {FIRST_CORRECT_SEED} onward: {ok['false_alarms']} "
        f"false alarms in {ok['runs']} runs (smallest p-value {ok['min_p_value']:.2g}); its "
        f"{ok['case_p_values']} case p-values against the uniform law they follow when the "
        f"generator is exact: Kolmogorov-Smirnov p = {ok['uniformity_ks_p_value']:.2g}.",
        "",
        f"{len(rec['mutants'])} defects over {seeds} seeds each: every one caught in at least "
        f"{round(worst * seeds)} of {seeds} seeds; {ok['false_alarms']} false alarms in {ok['runs']} runs.",
    ]
    return "\n".join(lines) + "\n"


def render(check: bool = False) -> int:
    """Rewrite (or, with ``check``, compare) the block of docs/testing.md; 1 when it differs."""
    text = DOCS.read_text()
    match = BLOCK.search(text)
    if match is None:
        print("docs/testing.md: no sequence-law-power block", file=sys.stderr)
        return 1
    body = render_block(json.loads(RECORD.read_text()))
    if match.group("body") == body:
        return 0
    if check:
        print("docs/testing.md: the sequence-law-power block differs from its record", file=sys.stderr)
        return 1
    atomic_write_text(DOCS, text[: match.start("body")] + body + text[match.end("body") :])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("power")
    pw.add_argument("--seeds", type=int, default=10)
    pw.add_argument("--runs", type=int, default=300)
    pw.add_argument("--jobs", type=int, default=1)
    rd = sub.add_parser("render")
    rd.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "power":
        if args.seeds < 1 or args.runs < 1 or args.jobs < 1:
            print("power: --seeds, --runs and --jobs must be >= 1", file=sys.stderr)
            return 2
        rec = power_record(args.seeds, args.runs, args.jobs)
        atomic_write_text(RECORD, json.dumps(rec, indent=1) + "\n")
        return render()
    return render(check=args.check)


if __name__ == "__main__":
    sys.exit(main())
