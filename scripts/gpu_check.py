#!/usr/bin/env python
"""CUDA checks of the batched samplers (cactus_theory.samplers); prints a summary.

For every rule of the registry (q verifier, p drafter, n drafted token):

1. law: the emitted token at one position matches the exact h_alg (paper, Theorem 3) by a
   chi-square test (false-alarm rate 1e-3 per rule; n draws per rule);
2. sync: ``forward`` without seeded rows runs under ``torch.cuda.set_sync_debug_mode("error")``
   (no host-device synchronization anywhere in it, the accept path included); rows seeded with
   per-row generators are reported separately (warn mode, count of warnings);
3. bf16: bfloat16 inputs give exactly the float32 result on the rounded values;
4. speed (selected rules): the accept path (plan + acceptance of the drafted tokens +
   uniforms) and the whole forward at B = 64, k = 8, V = 151,936, median of CUDA-event timings.

Usage: ``python scripts/gpu_check.py [--device cuda] [--draws 50000] [--speed-rules ...]``.
``--device cpu`` runs the same checks on the CPU (sync mode skipped), for a dry run.
Exit status 1 when a law or bf16 check fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from cactus_theory.analysis.one_step import emitted_distribution  # noqa: E402
from cactus_theory.rules import RULES, get_rule  # noqa: E402
from cactus_theory.samplers import make_sampler  # noqa: E402

ALPHA = 1e-3


def law_check(name, device, n):
    rng = np.random.default_rng(7)
    V = 6
    q = rng.dirichlet(np.full(V, 0.8))
    p = rng.dirichlet(np.full(V, 0.8))
    h = emitted_distribution(get_rule(name), q, p)
    g = torch.Generator(device=device).manual_seed(11)
    qt = torch.tensor(q, dtype=torch.float32, device=device).expand(n, 2, V)
    pt = torch.tensor(p, dtype=torch.float32, device=device).expand(n, 1, V)
    ids = torch.multinomial(pt[:, 0], 1, replacement=True, generator=g)
    bonus = torch.zeros(n, 1, dtype=torch.int64, device=device)
    torch.manual_seed(12)
    out = make_sampler(name)(qt, bonus, pt, ids)
    counts = np.bincount(out[:, 0].cpu().numpy(), minlength=V).astype(float)
    if counts[h == 0].sum() > 0:
        return 0.0
    exp = n * h
    big = exp >= 5                      # pool cells with expected count < 5 (chi-square rule)
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    if keep.sum() < 2:
        return 1.0
    return float(stats.chisquare(obs_c[keep], exp_c[keep] * obs_c[keep].sum() / exp_c[keep].sum()).pvalue)


def batch(B, k, V, device, seed=0, dtype=torch.float32):
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.softmax(3 * torch.randn(B, k + 1, V, generator=g, device=device), -1)
    p = torch.softmax(3 * torch.randn(B, k, V, generator=g, device=device), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    bonus = torch.randint(0, V, (B, 1), generator=g, device=device)
    return q.to(dtype), bonus, p.to(dtype), ids


def sync_check(name, device):
    if device.type != "cuda":
        return "skipped (cpu)", "skipped"
    s = make_sampler(name)
    q, bonus, p, ids = batch(8, 4, 1000, device)
    s(q, bonus, p, ids)  # warm-up (lazy init, counters)
    torch.cuda.synchronize()
    try:
        torch.cuda.set_sync_debug_mode("error")
        s(q, bonus, p, ids)
        unseeded = "sync-free"
    except RuntimeError as e:
        unseeded = "SYNC: " + str(e).splitlines()[0][:80]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    import warnings
    gens = {i: torch.Generator(device=device).manual_seed(i) for i in range(0, 8, 2)}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            s(q, bonus, p, ids, seeded_seqs=gens)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return unseeded, f"{len(w)} sync warnings"


def bf16_check(name, device):
    q, bonus, p, ids = batch(16, 4, 257, device, seed=3, dtype=torch.bfloat16)
    s = make_sampler(name)
    gens = lambda: {i: torch.Generator(device=device).manual_seed(i) for i in range(16)}  # noqa: E731
    a = s(q, bonus, p, ids, seeded_seqs=gens())
    b = s(q.float(), bonus, p.float(), ids, seeded_seqs=gens())
    return bool(torch.equal(a, b)) and int(a.max()) < 257


def timed(fn, device, reps):
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def speed(name, device, B, k, V, reps):
    q, bonus, p, ids = batch(B, k, V, device, seed=1)
    s = make_sampler(name)
    rule = s.rule

    def accept_path():
        plan = rule.plan(q[:, :k], p)
        a = plan.accept_probs_at(ids)
        return torch.rand(B, k, device=device) < a

    def forward():
        return s(q, bonus, p, ids)

    for f in (accept_path, forward):
        f()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t_acc = timed(accept_path, device, reps)
    t_fwd = timed(forward, device, reps)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else float("nan")
    return t_acc, t_fwd, peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--draws", type=int, default=50_000)
    ap.add_argument("--rules", nargs="*", default=None, help="default: every registered rule")
    ap.add_argument("--speed-rules", nargs="*",
                    default=["sps", "cactus-taylor", "cactus-exact-kl", "tas", "topk",
                             "mentored-kl", "cascade-opt", "fuzzy"])
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="stop starting new checks after this many seconds (device time is scarce)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    over = lambda: time.perf_counter() - start > args.budget_s  # noqa: E731
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available (use --device cpu for a dry run)")
        return 2
    names = args.rules or list(RULES)
    print(f"gpu_check on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
          f"torch {torch.__version__}, {len(names)} rules")
    print(f"law: chi-square of the emitted token vs exact h_alg, n = {args.draws}, false alarm {ALPHA}")
    failed = False
    print(f"{'rule':<26} {'law p-value':>12} {'bf16==f32':>10}  {'no seeded rows':<22} seeded rows")
    for name in names:
        if over():
            print(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
            failed = True
            continue
        t0 = time.perf_counter()
        try:
            pval = law_check(name, device, args.draws)
            bf = bf16_check(name, device)
            sy, sy_seeded = sync_check(name, device)
        except Exception as e:  # report and continue
            print(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
            failed = True
            continue
        ok = pval > ALPHA and bf
        failed |= not ok
        print(f"{name:<26} {pval:>12.3g} {str(bf):>10}  {sy:<22} {sy_seeded}"
              f"{'' if ok else '  <-- FAIL'}  ({time.perf_counter() - t0:.1f}s)")
    print(f"\nspeed at B={args.B}, k={args.k}, V={args.V} (median of {args.reps}, ms):")
    print(f"{'rule':<26} {'accept path':>12} {'forward':>10} {'peak GiB':>9}")
    for name in args.speed_rules:
        if name not in RULES:
            continue
        if over():
            print(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
            continue
        try:
            t_acc, t_fwd, peak = speed(name, device, args.B, args.k, args.V, args.reps)
            print(f"{name:<26} {t_acc:>12.2f} {t_fwd:>10.2f} {peak:>9.2f}")
        except Exception as e:
            print(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"\nsummary ({time.perf_counter() - start:.0f} s):",
          "FAIL (or skipped)" if failed else "all law and bf16 checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
