"""End to end through vLLM's OpenAI server: tokens per second and accepted length, stock and with rules.

One server per configuration, all running at once on the loopback address (vLLM's CPU build,
``.venv-vllm``; the servers and the CPU workaround of ``tests/integrations/vllm_server.py``):
the verifier alone (no speculation), then the verifier with a drafter (3 draft tokens,
probabilistic drafting) under SpS and under Cactus Taylor at each delta. Each round sends the
same batch of shipped prompts (Spec-Bench and GSM8K, chat-formatted by the server, sent
together) to every server in a shuffled order; tokens per second is the batch's completion
tokens over its wall time, and each configuration's ratio to the verifier alone is taken within
the round. Accepted length is vLLM's: 1 + accepted drafts per round (bonus counted), from the
``/metrics`` counters over the round. Medians and min-max over the rounds go to
``benchmarks/vllm_e2e_<device>.json`` and ``.md``; ``--docs`` regenerates the table in
``docs/vllm.md`` from that JSON.

    .venv-vllm/bin/python scripts/vllm_e2e.py --target .cache/models/SmolLM2-135M-Instruct \\
        --drafter .cache/models/SmolLM2-135M-exit20 --out benchmarks/ --docs
    .venv/bin/python scripts/vllm_e2e.py --docs-only      # the docs table from the recorded JSON

The drafter folder is the verifier's first 20 of 30 layers with its final norm and head (an
early-exit drafter); ``--prepare`` builds it from the verifier's folder (``cactus-theory models
--prepare`` caches SmolLM2-135M in ``.cache/models``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cactus_theory._io import atomic_write_bytes

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "vllm.md"
BEGIN = "<!-- BEGIN vllm-e2e (scripts/vllm_e2e.py) -->"
END = "<!-- END vllm-e2e -->"


def _configs(deltas):
    out = [("verifier alone", None), ("SpS", {"rule": "sps"})]
    out += [(f"Cactus delta={d:g}", {"rule": "cactus-taylor", "delta": d}) for d in deltas]
    return out


def measure(args) -> dict:
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests" / "integrations"))
    import vllm_server

    from cactus_theory.logits._prompts import benchmark_mix

    prompts = [p.text for p in benchmark_mix(1) if p.category in args.categories][: args.prompts]
    configs = _configs(args.deltas)
    work = Path(tempfile.mkdtemp(prefix="vllm_e2e_"))
    servers = []
    t0 = time.monotonic()
    try:
        for i, (_, rule) in enumerate(configs):
            (work / str(i)).mkdir()
            servers.append(
                vllm_server.Server(
                    args.target,
                    None if i == 0 else args.drafter,
                    rule,
                    work / str(i),
                    wait=False,
                    max_model_len=args.max_model_len,
                    start_timeout=900,
                    kv_cache_bytes=2**28,
                )
            )
        for s in servers:
            s.wait()
        start_s = time.monotonic() - t0
        rng = np.random.default_rng(args.seed)
        rows = {name: {"tps": [], "ratio": [], "al": []} for name, _ in configs}

        def batch(server):
            body = {"max_tokens": args.max_tokens, "ignore_eos": True, "temperature": args.temperature}
            before = server.spec_counters() if server is not servers[0] else None
            t = time.monotonic()
            with ThreadPoolExecutor(len(prompts)) as pool:
                got = list(
                    pool.map(
                        lambda p: server.chat({**body, "messages": [{"role": "user", "content": p}]}), prompts
                    )
                )
            wall = time.monotonic() - t
            tokens = 0
            for status, resp in got:
                if status != 200 or resp["usage"]["completion_tokens"] != args.max_tokens:
                    raise RuntimeError(f"a response was lost or truncated: {status} {str(resp)[:300]}")
                tokens += resp["usage"]["completion_tokens"]
            al = None
            if before is not None:
                after = server.spec_counters()
                drafts = after["drafts"] - before["drafts"]
                al = 1 + (after["accepted_tokens"] - before["accepted_tokens"]) / drafts
            return tokens / wall, al

        batch(servers[0])  # warm-up round, not recorded
        for s in servers[1:]:
            batch(s)
        for _ in range(args.repeats):
            order = rng.permutation(len(configs))
            got = {int(i): batch(servers[int(i)]) for i in order}
            base = got[0][0]
            for i, (name, _) in enumerate(configs):
                rows[name]["tps"].append(got[i][0])
                rows[name]["ratio"].append(got[i][0] / base)
                if got[i][1] is not None:
                    rows[name]["al"].append(got[i][1])
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    import torch
    import vllm

    def summary(xs):
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else None

    return {
        "what": "vLLM OpenAI server end to end: batch tokens/s and accepted length per configuration",
        "target": Path(args.target).name,
        "drafter": Path(args.drafter).name,
        "num_speculative_tokens": vllm_server.NUM_SPEC,
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "server_start_s": round(start_s, 1),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "vllm": vllm.__version__,
        "rows": [
            {
                "config": name,
                "tokens_per_s": summary(rows[name]["tps"]),
                "ratio_to_verifier_alone": summary(rows[name]["ratio"]),
                "accepted_length": summary(rows[name]["al"]),
            }
            for name, _ in configs
        ],
    }


def render(result: dict) -> str:
    """The Markdown table of a result (the benchmark's .md and the docs block)."""

    def cell(s, digits):
        if s is None:
            return "-"
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    head = (
        f"{result['target']} verified, {result['drafter']} drafting {result['num_speculative_tokens']} "
        f"tokens; {result['prompts']} shipped prompts sent together, {result['max_tokens']} tokens each "
        f"at temperature {result['temperature']:g}; medians (min-max) over {result['repeats']} "
        f"interleaved rounds; vLLM {result['vllm']} CPU build, {result['machine']}."
    )
    lines = [
        head,
        "",
        "| configuration | tokens/s | ratio to the verifier alone | accepted length |",
        "|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['config']} | {cell(r['tokens_per_s'], 1)} | {cell(r['ratio_to_verifier_alone'], 2)} "
            f"| {cell(r['accepted_length'], 2)} |"
        )
    return "\n".join(lines)


def update_docs(result: dict, page: Path = DOCS) -> None:
    text = page.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"docs: {page} must hold the markers {BEGIN!r} and {END!r} once each")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    atomic_write_bytes(page, f"{head}{BEGIN}\n{render(result)}\n{END}{tail}".encode())


def prepare(target, drafter, layers: int = 20) -> None:
    """Save the verifier's first ``layers`` layers, final norm and head as the drafter folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    model.save_pretrained(drafter)
    AutoTokenizer.from_pretrained(target).save_pretrained(drafter)
    template = Path(target) / "chat_template.jinja"
    if template.exists():
        shutil.copy(template, drafter)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=str(ROOT / ".cache/models/SmolLM2-135M-Instruct"))
    ap.add_argument("--drafter", default=str(ROOT / ".cache/models/SmolLM2-135M-exit20"))
    ap.add_argument("--deltas", type=float, nargs="+", default=[0.25, 0.75])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--categories", nargs="+", default=["gsm8k", "writing", "coding", "qa", "summarization"])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks"))
    ap.add_argument("--docs", action="store_true", help="regenerate the table in docs/vllm.md")
    ap.add_argument("--docs-only", action="store_true", help="only regenerate the docs table from the JSON")
    ap.add_argument("--prepare", action="store_true", help="build the early-exit drafter folder and stop")
    args = ap.parse_args(argv)
    if args.prepare:
        prepare(args.target, args.drafter)
        return 0
    path = Path(args.out) / "vllm_e2e_cpu.json"
    if args.docs_only:
        update_docs(json.loads(path.read_text()))
        return 0
    result = measure(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(result, indent=2) + "\n").encode())
    md = "# vLLM end to end (CPU)\n\n" + render(result) + "\n"
    atomic_write_bytes(path.with_suffix(".md"), md.encode())
    print(render(result))
    if args.docs:
        update_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
