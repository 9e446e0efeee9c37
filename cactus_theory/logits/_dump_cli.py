"""The ``dump`` subcommand: its arguments, their checks (before any model is loaded), the run, and
the regeneration of the shipped sample."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import _dump
from ._dump import DumpConfig, _safe, dump_full_vocab, dump_pairs
from ._loader import FULL_VOCAB_PATH, REAL_DIR
from ._prompts import Prompt, benchmark_mix
from ._runner import SamplingParams
from ._torch import torch

SHIPPED_DRAFTERS = ("early-exit:25", "requant:4", "requant:3", "distilled")
SHIPPED_PER_CATEGORY = 3
SHIPPED_NEW_TOKENS = 48


def shipped_prompts() -> list[Prompt]:
    """The prompts of the shipped sample: ``SHIPPED_PER_CATEGORY`` from each of the 13 Spec-Bench
    categories, GSM8K and IFEval (eval split)."""
    return benchmark_mix(SHIPPED_PER_CATEGORY)


def regenerate_shipped(
    out_dir=None, progress=True, full_vocab=True, threads: int | None = None
) -> list[Path]:
    """Regenerate ``cactus_theory/data/real/`` (the command documented in the README)."""
    from ._models import default_device, load_smollm2

    if threads:
        torch.set_num_threads(threads)
    out_dir = Path(out_dir) if out_dir else REAL_DIR
    dev = default_device()
    lm = load_smollm2(device=dev)
    cfg = DumpConfig(new_tokens=SHIPPED_NEW_TOKENS, batch_size=10, seed=0, top_k_raw=64, device=dev)
    names = {s: f"smollm2-135m_{_safe(s.replace(':', '-'))}.npz" for s in SHIPPED_DRAFTERS}
    paths = dump_pairs(
        lm, list(SHIPPED_DRAFTERS), shipped_prompts(), out_dir, cfg, names=names, progress=progress
    )
    if full_vocab:
        fv = out_dir / FULL_VOCAB_PATH.relative_to(REAL_DIR)
        fv_prompts = [
            p for p in benchmark_mix(1) if p.category in ("gsm8k", "coding", "writing", "translation")
        ]
        paths.append(dump_full_vocab(lm, "requant:4", fv_prompts, 6, fv, DumpConfig(device=dev, seed=0)))
        from ._models import ModelNotAvailable

        try:
            paths.append(regenerate_gemma_full_vocab(out_dir))
        except ModelNotAvailable as exc:  # optional: Gemma is not in the `real` extra
            print(f"skipped the Gemma-3-270M full-vocabulary sample: {exc}")
    return paths


def regenerate_gemma_full_vocab(out_dir=None) -> Path:
    """Gemma-3-270M full-vocabulary sample (4 positions x 262,144 tokens; q = Gemma-3-270M base,
    p = its 4-bit RTN re-quantized copy): one position after each of 4 prompts (GSM8K, coding,
    writing, translation), formatted by :func:`chat_ids` (the GGUF's chat template when it carries one)."""
    from ._models import default_device, load_gemma3

    out_dir = Path(out_dir) if out_dir else REAL_DIR
    dev = default_device()
    lm = load_gemma3(device=dev)
    fv_prompts = [p for p in benchmark_mix(1) if p.category in ("gsm8k", "coding", "writing", "translation")]
    return dump_full_vocab(
        lm,
        "requant:4",
        fv_prompts,
        1,
        out_dir / "full_vocab" / "gemma-3-270m_full-vocab.npz",
        DumpConfig(device=dev, seed=0),
    )


def build_parser(ap: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The dump tool's arguments (on ``ap``, or on a new parser with defaults shown in --help)."""
    ap = ap or argparse.ArgumentParser(
        prog="cactus-theory dump",
        description=_dump.__doc__,
        formatter_class=type(
            "F", (argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter), {}
        ),
    )
    ap.add_argument(
        "--shipped",
        action="store_true",
        help="regenerate the shipped sample (into --out-dir, or into cactus_theory/data/real "
        "with --overwrite-shipped)",
    )
    ap.add_argument(
        "--overwrite-shipped",
        action="store_true",
        help="allow --shipped to rewrite the committed files inside the package",
    )
    _add_source_arguments(ap)
    ap.add_argument("--batch-size", type=int, default=8, help="prompts generated together (left-padded)")
    ap.add_argument("--temperature", type=float, default=0.6, help="> 0, or 0 for greedy")
    ap.add_argument("--top-p", type=float, default=0.95, help="in (0, 1]; 1 disables")
    ap.add_argument("--top-k", type=int, default=20, help=">= 0; 0 disables")
    ap.add_argument(
        "--top-k-raw",
        type=int,
        default=64,
        help="tokens of each model's raw (temperature-1) distribution kept per position, beside the "
        "processed supports; the rest is one tail column",
    )
    ap.add_argument(
        "--max-prompt-tokens", type=int, default=384, help="longer prompts keep their last this many tokens"
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the verifier's sampling (each batch seeded by seed and index)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (None: torch's own setting)")
    ap.add_argument(
        "--device", default=None, help="torch device (None: cuda when a GPU is visible, else cpu)"
    )
    ap.add_argument(
        "--no-resume",
        action="store_true",
        help="start over instead of reusing the completed batches of an interrupted run (.partial/)",
    )
    ap.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar over recorded positions"
    )
    from ._models import add_cache_dir_argument

    add_cache_dir_argument(ap)
    return ap


def _add_source_arguments(ap: argparse.ArgumentParser) -> None:
    """The models, prompts, output folder and length arguments of the dump tool."""
    ap.add_argument(
        "--verifier", default="smollm2", help="'smollm2' (built-in), a hub id, folder or .gguf file"
    )
    ap.add_argument(
        "--drafter",
        action="append",
        default=None,
        help="repeatable: early-exit:K, requant:B, distilled, or a hub id/folder/.gguf (default: distilled)",
    )
    ap.add_argument(
        "--prompts",
        default="mix",
        help="'mix' (every category), 'spec_bench', 'gsm8k', 'ifeval', or a .jsonl/.txt file",
    )
    ap.add_argument(
        "--per-category",
        type=int,
        default=2,
        help="prompts taken from each category of a shipped prompt set (not used with a file)",
    )
    ap.add_argument(
        "-o", "--out-dir", default="dumps", help="output folder (created if missing): one .npz per drafter"
    )
    ap.add_argument(
        "--new-tokens",
        type=int,
        default=64,
        help="tokens the verifier generates per prompt (fewer when it emits EOS); one recorded position each",
    )


def check_args(args) -> None:
    """Validate the dump tool's arguments before any model is loaded (ValueError naming one).

    Transforms: temperature finite and >= 0 (0 = greedy), top-p in (0, 1], top-k >= 0; counts
    >= 1; the verifier, drafters and prompts must exist locally. (``--shipped`` writes into
    ``--out-dir`` unless ``--overwrite-shipped`` is given.)
    """
    from .._validation import as_temperature, as_top_k, as_top_p
    from ._checks import check_drafter, check_model_source, check_prompts

    if args.temperature != 0:  # 0 = greedy
        as_temperature(args.temperature, "temperature")
    as_top_p(args.top_p, "top-p")
    if args.top_k != 0:  # 0 disables
        as_top_k(args.top_k, "top-k")
    for name in ("top_k_raw", "per_category", "new_tokens", "batch_size", "max_prompt_tokens"):
        v = getattr(args, name)
        if v < 1:
            raise ValueError(f"{name.replace('_', '-')}: must be >= 1, got {v}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"threads: must be >= 1, got {args.threads}")
    if args.shipped:
        return
    if args.verifier != "smollm2":
        check_model_source(args.verifier, "verifier")
    from ._models import SMOLLM2_LAYERS

    n_layers = SMOLLM2_LAYERS if args.verifier == "smollm2" else None  # else checked once loaded
    for d in args.drafter or ["distilled"]:
        check_drafter(d, n_layers=n_layers)
    if args.prompts != "mix":
        check_prompts(args.prompts)


def prompts_for(args):
    """The prompts ``--prompts`` names: the benchmark mix, a shipped set's evaluation split, or
    the user's own file."""
    from ._prompts import load_prompts, load_user_prompts

    if args.prompts == "mix":
        return benchmark_mix(args.per_category)
    if args.prompts in ("spec_bench", "gsm8k", "ifeval"):
        return load_prompts(args.prompts, "eval", per_category=args.per_category)
    return load_user_prompts(args.prompts)


def run_args(args) -> list[Path]:
    from ._models import default_device, load_hf, load_smollm2

    if args.threads:
        torch.set_num_threads(args.threads)
    check_args(args)
    if args.shipped:
        out = None if args.overwrite_shipped else args.out_dir
        return regenerate_shipped(out_dir=out, progress=not args.no_progress)
    dev = args.device or default_device()
    lm = load_smollm2(device=dev) if args.verifier == "smollm2" else load_hf(args.verifier, device=dev)
    prompts = prompts_for(args)
    cfg = DumpConfig(
        SamplingParams(args.temperature, args.top_p, args.top_k),
        args.new_tokens,
        args.batch_size,
        args.seed,
        args.top_k_raw,
        args.max_prompt_tokens,
        dev,
    )
    return dump_pairs(
        lm,
        args.drafter or ["distilled"],
        prompts,
        args.out_dir,
        cfg,
        progress=not args.no_progress,
        resume=not args.no_resume,
    )


def add_dump_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory dump`` (those of :func:`cactus_theory.logits.dump.build_parser`)."""
    build_parser(p)
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    return p


def run_dump(args) -> int:
    """Validate every argument and what the models need (before loading one), record, print the
    written paths."""
    from .._extras import require
    from ._models import apply_cache_dir, require_builtin

    check_args(args)
    apply_cache_dir(args)
    if args.shipped or args.verifier == "smollm2":
        require_builtin("cactus-theory dump")
    else:
        require("transformers", "cactus-theory dump", extra="real")
    print_paths(run_args(args), getattr(args, "json", False))
    return 0


def print_paths(paths, as_json: bool) -> None:
    """Print the written files, one a line, or as ``{"paths": [...]}`` JSON."""
    paths = [str(p) for p in paths]
    if as_json:
        print(json.dumps({"paths": paths}, indent=2))
    else:
        for path in paths:
            print(path)


def main(argv=None) -> int:
    """``python -m cactus_theory.logits.dump``: the ``dump`` subcommand as a module entry."""
    from .._cli import module_entry

    return module_entry(
        "dump",
        add_dump_arguments,
        run_dump,
        argv,
        description="record verifier/drafter next-token distributions (real models)",
    )
