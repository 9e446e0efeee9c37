"""The ``decode`` subcommand: its arguments, their checks (before any model is loaded), the run and
its text table."""

from __future__ import annotations

import argparse

from .._tables import to_json
from ._bench import BenchConfig, regenerate_decode_results, run_repeated

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
    from ._models import add_cache_dir_argument

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
    from ._models import SMOLLM2_LAYERS

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
    from ._models import apply_cache_dir, require_builtin

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
        _emit(args, text=to_json(res, indent=1), data=res)
        return 0
    from ._prompts import benchmark_mix, load_prompts, load_user_prompts

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

        atomic_write_text(args.output, to_json(res))
    if args.json:
        print(to_json(res))
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
