"""``cactus-theory dump --engine vllm``: record the rows vLLM verifies while it generates.

The dump subcommand's arguments (:mod:`cactus_theory.logits._dump_cli`) plus the engine's:
with ``--engine vllm`` the verifier and the one drafter are folders vLLM loads; vLLM generates
over the prompts with speculative decoding (draft model, probabilistic drafting) under the
plugin's configuration ``--engine-rule`` (default SpS), and the plugin's recorder
(:mod:`._recorder`) writes every verified non-greedy row to shards in ``--out-dir``. The folder
loads as a row source and goes straight into ``analyze`` and ``audit``. The engine runs in this
process (one worker), so the recorder is flushed when generation ends. Without vLLM the
command exits 2 with one line.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

__all__ = ["add_dump_arguments", "run_dump"]


def add_dump_arguments(p):
    """The dump subcommand's arguments with the engine options."""
    from ...logits.internal import add_dump_arguments as base

    base(p)
    p.add_argument(
        "--engine",
        choices=("torch", "vllm"),
        default="torch",
        help="torch: the toolkit's own generation; vllm: vLLM generates with speculative decoding "
        "and the plugin records the rows it verified (shards in --out-dir)",
    )
    p.add_argument(
        "--engine-rule",
        default='{"rule": "sps"}',
        help="with --engine vllm: the plugin's configuration the engine serves (JSON: rule and knobs)",
    )
    p.add_argument(
        "--num-speculative-tokens", type=int, default=3, help="with --engine vllm: drafts per round"
    )
    p.add_argument(
        "--max-bytes", type=int, default=2**30, help="with --engine vllm: bound on the shards' bytes"
    )
    p.add_argument(
        "--kv-cache-bytes", type=int, default=2**28, help="with --engine vllm: the engine's KV cache"
    )
    return p


def _check(args) -> dict:
    from ._config import parse_config

    if importlib.util.find_spec("vllm") is None:
        raise ValueError("engine: vllm is not installed (pip install 'cactus-theory[vllm]')")
    from ...logits.internal import check_args

    check_args(args)  # the dump's own checks (sampling values, counts, folders)
    if not args.temperature > 0:
        raise ValueError("temperature: --engine vllm records non-greedy rows only; give a value > 0")
    drafters = args.drafter or []
    if len(drafters) != 1 or not Path(drafters[0]).is_dir():
        raise ValueError("drafter: --engine vllm takes one drafter, a model folder vLLM loads")
    if not Path(args.verifier).is_dir():
        raise ValueError("verifier: --engine vllm takes a model folder vLLM loads")
    for name in ("num_speculative_tokens", "max_bytes", "kv_cache_bytes"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    try:
        rule = json.loads(args.engine_rule)
    except json.JSONDecodeError as exc:
        raise ValueError(f"engine-rule: not valid JSON ({exc.msg})") from None
    if not isinstance(rule, dict) or "record" in rule:
        raise ValueError("engine-rule: expected a mapping of rule and knobs (the recorder is set here)")
    parse_config(rule)  # one-line ValueError for an unknown or unsupported rule
    return rule


def _prompt_ids(tok, prompts, max_tokens):
    out = []
    for p in prompts:
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": p.text}], add_generation_prompt=True)
        else:
            ids = tok(p.text).input_ids
        out.append({"prompt_token_ids": list(ids)[-max_tokens:]})
    return out


def record_with_vllm(args) -> list[Path]:
    """Generate with vLLM over the prompts and record the verified rows (the shards written)."""
    from ...logits.internal import prompts_for
    from ._cpu_fix import patch_expand
    from ._recorder import flush_all

    rule = _check(args)
    prompts = prompts_for(args)
    out = Path(args.out_dir)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine (and its recorder) in this process
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the paths (or --json)
    patch_expand()
    from vllm import LLM, SamplingParams

    before = set(out.glob("shard-*.npz"))
    record = {"folder": str(out), "max_bytes": args.max_bytes, "top_k_raw": args.top_k_raw}
    llm = LLM(
        model=str(args.verifier),
        max_model_len=args.max_prompt_tokens + args.new_tokens + args.num_speculative_tokens + 1,
        enforce_eager=True,
        seed=args.seed,
        distributed_executor_backend="uni",
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=args.kv_cache_bytes,
        speculative_config={
            "model": str(args.drafter[0]),
            "method": "draft_model",
            "num_speculative_tokens": args.num_speculative_tokens,
            "draft_sample_method": "probabilistic",
        },
        additional_config={"cactus_theory": {**rule, "record": record}},
    )
    params = [
        SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k if args.top_k > 0 else -1,
            max_tokens=args.new_tokens,
            seed=args.seed + i,
        )
        for i in range(len(prompts))
    ]
    llm.generate(_prompt_ids(llm.get_tokenizer(), prompts, args.max_prompt_tokens), params, use_tqdm=False)
    flush_all()
    return sorted(set(out.glob("shard-*.npz")) - before)


def run_dump(args) -> int:
    """``cactus-theory dump``: the toolkit's generation, or vLLM's with ``--engine vllm``."""
    if getattr(args, "engine", "torch") != "vllm":
        from ...logits.internal import run_dump as base

        return base(args)
    from ...logits.internal import print_paths

    print_paths(record_with_vllm(args), getattr(args, "json", False))
    return 0
