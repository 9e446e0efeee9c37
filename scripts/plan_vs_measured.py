"""Predicted against measured: the plan's tokens per verifier call and speedup beside real decoding.

For each configuration (drafter, draft length m, rule and knob) the toolkit's own decoding loop
(``cactus-theory decode``: SmolLM2-135M-Instruct verifying, CPU) runs on a few GSM8K prompts
interleaved with verifier-only decoding, several times. In every repeat the cost model of each
drafter is measured first (:meth:`cactus_theory.planning.CostModel.measure`: the verifier over
1..m+1 tokens, the drafter per token, medians of interleaved repeats), so the load of the shared
machine touches prediction and measurement alike; the load average is recorded.

Predicted, per configuration: ``ct.plan`` on the decoding records of the first repeat (the rows
and drafts of every round; the expected tokens per call given the drafts, with its 95 %
bootstrap interval over the prompts) and, in each repeat, the speedup from that repeat's cost
model. Measured: tokens per call (emitted tokens over verifier calls) and the wall-time speedup
over verifier-only decoding of each repeat (median, min and max). The JSON goes to
``benchmarks/plan_vs_measured/plan_vs_measured_cpu.json``; ``--docs`` renders the table into
``docs/planning.md`` between its markers.

    .venv/bin/python scripts/plan_vs_measured.py --repeats 3 --docs
    .venv/bin/python scripts/plan_vs_measured.py --docs-only     # the table from the JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "plan_vs_measured" / "plan_vs_measured_cpu.json"
DOCS = ROOT / "docs" / "planning.md"
BEGIN = "<!-- BEGIN plan-vs-measured (scripts/plan_vs_measured.py) -->"
END = "<!-- END plan-vs-measured -->"
VLLM_E2E = ROOT / "benchmarks" / "vllm_e2e_cpu.json"
VLLM_OUT = ROOT / "benchmarks" / "plan_vs_measured" / "plan_vs_vllm_cpu.json"
VLLM_BEGIN = "<!-- BEGIN plan-vs-vllm (scripts/plan_vs_measured.py) -->"
VLLM_END = "<!-- END plan-vs-vllm -->"

#: (drafter, m, rule, knobs) of the measured configurations.
CONFIGS = (
    ("distilled", 1, "sps", {}),
    ("distilled", 2, "sps", {}),
    ("distilled", 3, "cactus-taylor", {"delta": 0.75}),
    ("early-exit:15", 2, "sps", {}),
)


def _spread(values) -> dict:
    v = [float(x) for x in values]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}


def measure(args) -> dict:
    from cactus_theory.logits._bench import BenchConfig, run_benchmark
    from cactus_theory.logits._drafters import make_drafter
    from cactus_theory.logits._models import load_smollm2
    from cactus_theory.logits._prompts import load_prompts
    from cactus_theory.logits._torch import torch
    from cactus_theory.planning import CostModel, plan
    from cactus_theory.planning._measure import machine_load

    prompts = load_prompts("gsm8k", "eval")[: args.prompts]
    configs = [BenchConfig(d, m, rule, dict(k)) for d, m, rule, k in CONFIGS]
    m_max = max(c.m for c in configs)
    drafters = list(dict.fromkeys(c.drafter for c in configs))
    runs, costs, loads = [], [], []
    records = Path(tempfile.mkdtemp(prefix="plan-vs-measured-"))
    torch.set_num_threads(args.threads)
    lm = load_smollm2()
    models = {d: (lm, make_drafter(d, lm)[0]) for d in drafters}
    for r in range(args.repeats):
        loads.append(machine_load())
        costs.append(
            {
                d: CostModel.measure(m_max, drafter=d, repeats=args.cost_repeats, models=models[d])
                for d in drafters
            }
        )
        out = run_benchmark(
            prompts,
            configs,
            args.tokens,
            seed=0,
            threads=args.threads,
            out_dir=records if r == 0 else None,
            progress=False,
        )
        runs.append(out)
        print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    loads.append(machine_load())
    rows = []
    for c in configs:
        first = runs[0]["configs"][c.label]
        p0 = plan(
            first["records"],
            rules=[c.rule],
            knobs={c.rule: c.knobs},
            cost=costs[0][c.drafter],
            m_max=c.m,
            bootstrap=2000,
            seed=0,
        )
        row0 = p0.table[0]
        predicted_speedups = []
        for r in range(args.repeats):
            predicted_speedups.append(costs[r][c.drafter].speedup(row0["tokens_per_call"][c.m - 1], c.m))
        measured_speedups = [run["configs"][c.label]["speedup"] for run in runs]
        rows.append(
            {
                "config": c.label,
                "drafter": c.drafter,
                "m": c.m,
                "rule": c.rule,
                "knobs": c.knobs,
                "rounds": first.get("rounds"),
                "predicted_tokens_per_call": {
                    "value": row0["tokens_per_call"][c.m - 1],
                    "low": row0["tokens_per_call_low"][c.m - 1],
                    "high": row0["tokens_per_call_high"][c.m - 1],
                },
                "measured_tokens_per_call": first["tokens_per_call"],
                "predicted_speedup": _spread(predicted_speedups),
                "measured_speedup": _spread(measured_speedups),
                "cost_ratio": _spread([costs[r][c.drafter].cost_ratio for r in range(args.repeats)]),
                "verify_ratio": _spread(
                    [
                        costs[r][c.drafter].verify(c.m + 1) / costs[r][c.drafter].verify(1)
                        for r in range(args.repeats)
                    ]
                ),
            }
        )
    return {
        "what": "plan's prediction against the toolkit's decoding loop (CPU), interleaved repeats",
        "verifier": "SmolLM2-135M-Instruct",
        "prompts": [p.id for p in prompts],
        "max_new_tokens": args.tokens,
        "repeats": args.repeats,
        "cost_repeats": args.cost_repeats,
        "threads": runs[0]["settings"]["threads"],
        "verifier_ms_per_token": _spread([run["verifier"]["ms_per_token"] for run in runs]),
        "load": loads,
        "costs": [{d: m.to_dict() for d, m in c.items()} for c in costs],
        "rows": rows,
    }


def _inside(x, lo, hi) -> bool:
    return lo <= x <= hi


def verdicts(data) -> list:
    """Per row: whether the measured tokens per call lie in the predicted interval, and the
    predicted speedup (median) in the measured [min, max]."""
    out = []
    for r in data["rows"]:
        t, s = r["predicted_tokens_per_call"], r["measured_speedup"]
        out.append(
            {
                "config": r["config"],
                "tokens_inside": _inside(r["measured_tokens_per_call"], t["low"], t["high"]),
                "speedup_inside": _inside(r["predicted_speedup"]["median"], s["min"], s["max"]),
            }
        )
    return out


def _label(row) -> str:
    """A configuration's name for a Markdown cell (no ``|``)."""
    knobs = ", ".join(f"{k} = {v:g}" for k, v in row["knobs"].items())
    return f"{row['drafter']}, m = {row['m']}, {row['rule']}" + (f" ({knobs})" if knobs else "")


def render(data) -> str:
    load = data["load"]
    lines = [
        f"{len(data['prompts'])} GSM8K prompts, at most {data['max_new_tokens']} new tokens, "
        f"{data['threads']} torch thread(s), {data['repeats']} interleaved repeats "
        f"(cost model measured in each, {data['cost_repeats']} timing repeats); "
        f"load average (1 min) {min(x['load_1m'] for x in load):.1f}-{max(x['load_1m'] for x in load):.1f} "
        f"on {load[0]['cpus']} CPUs; verifier alone "
        f"{data['verifier_ms_per_token']['median']:.0f} ms per token (median).",
        "",
        "| configuration | rounds | tokens / call, predicted [95 % interval] | measured | "
        "speedup, predicted median [min, max] | measured median [min, max] | inside |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, v in zip(data["rows"], verdicts(data)):
        t, ps, ms = r["predicted_tokens_per_call"], r["predicted_speedup"], r["measured_speedup"]
        inside = (
            ("tokens yes" if v["tokens_inside"] else "tokens no")
            + ", "
            + ("speedup yes" if v["speedup_inside"] else "speedup no")
        )
        lines.append(
            f"| {_label(r)} | {r['rounds']} | {t['value']:.2f} [{t['low']:.2f}, {t['high']:.2f}] | "
            f"{r['measured_tokens_per_call']:.2f} | {ps['median']:.2f}x [{ps['min']:.2f}, {ps['max']:.2f}] | "
            f"{ms['median']:.2f}x [{ms['min']:.2f}, {ms['max']:.2f}] | {inside} |"
        )
    return "\n".join(lines)


def write_docs(data, begin=BEGIN, end=END, rendered=None) -> None:
    from cactus_theory._io import atomic_write_text

    text = DOCS.read_text()
    a, b = text.index(begin) + len(begin), text.index(end)
    atomic_write_text(
        str(DOCS), text[:a] + "\n" + (render(data) if rendered is None else rendered) + "\n" + text[b:]
    )


def _vllm_rule(config: str):
    """(rule, knobs) of a configuration of benchmarks/vllm_e2e_cpu.json."""
    if config == "SpS":
        return "sps", {}
    return "cactus-taylor", {"delta": float(config.split("delta=")[1])}


def measure_vllm(args) -> dict:
    """ct.plan on a recording of vLLM's pair (the verifier and its 20-layer early exit, the same
    prompts and temperature) against vLLM's end-to-end record; the cost model measured here."""
    from cactus_theory.planning import CostModel, plan
    from cactus_theory.planning._measure import machine_load

    e2e = json.loads(VLLM_E2E.read_text())
    m = int(e2e["num_speculative_tokens"])
    load = [machine_load()]
    cost = CostModel.measure(m, drafter="early-exit:20", repeats=args.cost_repeats)
    load.append(machine_load())
    rows = []
    for r in e2e["rows"]:
        if r["accepted_length"] is None:
            continue
        rule, knobs = _vllm_rule(r["config"])
        res = plan(
            args.vllm_dump, rules=[rule], knobs={rule: knobs}, cost=cost, m_max=m, bootstrap=2000, seed=0
        )
        row = res.table[0]
        rows.append(
            {
                "config": r["config"],
                "rule": rule,
                "knobs": knobs,
                "predicted_tokens_per_call": {
                    "value": row["tokens_per_call"][m - 1],
                    "low": row["tokens_per_call_low"][m - 1],
                    "high": row["tokens_per_call_high"][m - 1],
                },
                "measured_tokens_per_call": r["accepted_length"],
                "predicted_speedup": row["speedup"][m - 1],
                "measured_speedup": r["ratio_to_verifier_alone"],
            }
        )
    return {
        "what": "plan on a recording of vLLM's model pair against vLLM's CPU end-to-end record",
        "recording": Path(args.vllm_dump).name,
        "e2e": str(VLLM_E2E.relative_to(ROOT)),
        "num_speculative_tokens": m,
        "cost": cost.to_dict(),
        "load": load,
        "rows": rows,
    }


def render_vllm(data) -> str:
    lines = [
        f"Recording {data['recording']} (the verifier and its 20-layer early exit, the same 4 prompts, "
        f"temperature {0.6:g}, no top-k or top-p); vLLM's numbers from {data['e2e']}; "
        f"{data['num_speculative_tokens']} drafts per round; cost model measured with the toolkit's loop "
        f"(drafter {data['cost']['draft_cost'] / data['cost']['verify_costs'][0]:.2f} of a verifier step per token).",
        "",
        "| configuration | tokens / call, predicted [95 % interval] | vLLM measured, median [min, max] | "
        "speedup, predicted | vLLM measured, median [min, max] |",
        "|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        t, mt, ms = r["predicted_tokens_per_call"], r["measured_tokens_per_call"], r["measured_speedup"]
        lines.append(
            f"| {r['config']} | {t['value']:.2f} [{t['low']:.2f}, {t['high']:.2f}] | "
            f"{mt['median']:.2f} [{mt['min']:.2f}, {mt['max']:.2f}] | {r['predicted_speedup']:.2f}x | "
            f"{ms['median']:.2f}x [{ms['min']:.2f}, {ms['max']:.2f}] |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cost-repeats", type=int, default=7)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--docs", action="store_true", help="also render the table into docs/planning.md")
    ap.add_argument("--docs-only", action="store_true", help="render the table from the recorded JSON")
    ap.add_argument(
        "--vllm-dump", default=None, help="a recording of vLLM's pair: predict vLLM's end-to-end record"
    )
    args = ap.parse_args(argv)
    from cactus_theory._io import atomic_write_text

    if args.docs_only:
        write_docs(json.loads(Path(args.out).read_text()))
        if VLLM_OUT.exists():
            write_docs(None, VLLM_BEGIN, VLLM_END, render_vllm(json.loads(VLLM_OUT.read_text())))
        return 0
    if args.vllm_dump:
        data = measure_vllm(args)
        atomic_write_text(str(VLLM_OUT), json.dumps(data, indent=1) + "\n")
        if args.docs:
            write_docs(None, VLLM_BEGIN, VLLM_END, render_vllm(data))
        print(render_vllm(data))
        return 0
    data = measure(args)
    atomic_write_text(args.out, json.dumps(data, indent=1) + "\n")
    if args.docs:
        write_docs(data)
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
