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
   uniforms), the whole forward, and the fused forward (``fused=True``, compiled by its first
   call) at B = 64, k = 8, V = 151,936, median of CUDA-event timings;
5. analysis: :func:`cactus_theory.analysis.one_step.analyze` on torch tensors of the device
   against numpy (every rule, small V; then the exact and Taylor Cactus rules at
   V = 151,936), and rows per second at batch 64, V = 151,936 (torch on the device, numpy on
   the host).

Everything runs in one process within ``--budget-s`` (default 200 s; well under 4 minutes
on an H200). When the environment variable ``OUT`` names a folder, the summary is also
written there as ``gpu_check.json`` and ``gpu_check.txt``.

Usage: ``python scripts/gpu_check.py [--device cuda] [--draws 50000] [--speed-rules ...]``.
``--device cpu`` runs the same checks on the CPU (sync mode skipped); ``--dry-run`` is a
small CPU run (few draws, small shapes, three rules) to test the script itself.
Exit status 1 when a law, bf16 or analysis check fails.
"""

from __future__ import annotations

import argparse
import json
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
    big = exp >= 5  # pool cells with expected count < 5 (chi-square rule)
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

    def accept_path():
        # what forward does: the cheapest accept path the rule declares (gamma at the drafted
        # tokens for Cactus, [B, k] gathers, row passes, else the plan), on the row sums
        a = s.accept_probs_at_drafts(q[:, :k], p, ids, q[:, :k].sum(-1), p.sum(-1))[0]
        return torch.rand(B, k, device=device) < a

    def forward():
        return s(q, bonus, p, ids)

    fused = make_sampler(name, fused=True)

    def forward_fused():  # the compiled core (torch.compile; compiled by the first call)
        return fused(q, bonus, p, ids)

    for f in (accept_path, forward, forward_fused):
        f()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t_acc = timed(accept_path, device, reps)
    t_fwd = timed(forward, device, reps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    t_fused = timed(forward_fused, device, reps)
    return t_acc, t_fwd, peak, t_fused


def analysis_check(device, V_small=1000, V_big=151_936, batch=64, reps=3, rules=None):
    """torch analysis on ``device`` vs numpy: max |h_alg| difference per rule, rows/s."""
    from cactus_theory.analysis.one_step import analyze

    rng = np.random.default_rng(5)
    out = {"rules": {}, "speed": {}}
    q = rng.dirichlet(np.full(V_small, 0.3), size=4)
    p = rng.dirichlet(np.full(V_small, 0.3), size=4)
    for name in rules or list(RULES):
        ref = analyze(name, q, p)
        got = analyze(name, torch.tensor(q, device=device), torch.tensor(p, device=device))
        err = float(np.max(np.abs(got.emitted.cpu().numpy() - ref.emitted)))
        acc = float(np.max(np.abs(got.acceptance.cpu().numpy() - ref.acceptance)))
        out["rules"][name] = {
            "emitted_max_abs_diff": err,
            "acceptance_max_abs_diff": acc,
            "ok": err <= 1e-12 and acc <= 1e-12,
        }
    g = rng.gumbel(size=(batch, V_big))
    qb = np.exp(g - g.max(-1, keepdims=True))
    lp = 0.8 * g + 0.6 * rng.gumbel(size=g.shape)
    pb = np.exp(lp - lp.max(-1, keepdims=True))
    qb, pb = qb / qb.sum(-1, keepdims=True), pb / pb.sum(-1, keepdims=True)
    for name in ("cactus-exact-kl", "cactus-taylor"):
        rule = get_rule(name, delta=0.1)
        qt, pt = torch.tensor(qb, device=device), torch.tensor(pb, device=device)

        def run():
            r = analyze(rule, qt, pt)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return r

        got = run()
        t_torch = statistics.median(_wall(run) for _ in range(reps))
        ref_rows = min(batch, 4)  # numpy on the host: a few rows suffice for the rate
        t0 = time.perf_counter()
        ref = analyze(rule, qb[:ref_rows], pb[:ref_rows])
        t_np = (time.perf_counter() - t0) / ref_rows
        err = float(np.max(np.abs(got.emitted[:ref_rows].cpu().numpy() - ref.emitted)))
        # V-term prefix sums in different orders: V * eps of the row mass
        out["speed"][name] = {
            "torch_rows_per_s": batch / t_torch,
            "numpy_rows_per_s": 1 / t_np,
            "emitted_max_abs_diff": err,
            "ok": err <= V_big * 2.3e-16,
        }
    return out


def _wall(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _write_out(summary, lines):
    """Write the JSON and text summary under $OUT (when set), atomically."""
    out = os.environ.get("OUT")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    for fname, text in (
        ("gpu_check.json", json.dumps(summary, indent=2, default=str)),
        ("gpu_check.txt", "\n".join(lines) + "\n"),
    ):
        tmp = os.path.join(out, fname + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out, fname))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--draws", type=int, default=50_000)
    ap.add_argument("--rules", nargs="*", default=None, help="default: every registered rule")
    ap.add_argument(
        "--speed-rules",
        nargs="*",
        default=[
            "sps",
            "cactus-taylor",
            "cactus-exact-kl",
            "tas",
            "topk",
            "mentored-kl",
            "cascade-opt",
            "fuzzy",
        ],
    )
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=200.0,
        help="stop starting new checks after this many seconds (device time is scarce)",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="small CPU run of every check (tests the script, not the GPU)"
    )
    args = ap.parse_args(argv)
    lines = []
    summary = {"law": {}, "speed": {}, "analysis": None}

    def log(*parts):
        line = " ".join(str(x) for x in parts)
        print(line, flush=True)
        lines.append(line)

    if args.dry_run:
        args.device, args.draws, args.reps = "cpu", 4000, 2
        args.B, args.k, args.V = 4, 2, 4096
        args.rules = args.rules or ["sps", "cactus-taylor", "cactus-exact-kl"]
        args.speed_rules = ["sps", "cactus-exact-kl"]
    start = time.perf_counter()
    over = lambda: time.perf_counter() - start > args.budget_s  # noqa: E731
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log("gpu_check: CUDA is not available (use --device cpu for a dry run)")
        return 2
    names = args.rules or list(RULES)
    log(
        f"gpu_check on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, {len(names)} rules"
    )
    log(f"law: chi-square of the emitted token vs exact h_alg, n = {args.draws}, false alarm {ALPHA}")
    failed = False
    log(f"{'rule':<26} {'law p-value':>12} {'bf16==f32':>10}  {'no seeded rows':<22} seeded rows")
    for name in names:
        if over():
            log(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
            failed = True
            continue
        t0 = time.perf_counter()
        try:
            pval = law_check(name, device, args.draws)
            bf = bf16_check(name, device)
            sy, sy_seeded = sync_check(name, device)
        except Exception as e:  # report and continue
            log(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
            failed = True
            continue
        ok = pval > ALPHA and bf
        failed |= not ok
        summary["law"][name] = {
            "law_pvalue": pval,
            "bf16_equal": bf,
            "sync_unseeded": sy,
            "sync_seeded": sy_seeded,
            "ok": ok,
        }
        log(
            f"{name:<26} {pval:>12.3g} {str(bf):>10}  {sy:<22} {sy_seeded}"
            f"{'' if ok else '  <-- FAIL'}  ({time.perf_counter() - t0:.1f}s)"
        )
    log(f"\nspeed at B={args.B}, k={args.k}, V={args.V} (median of {args.reps}, ms):")
    log(f"{'rule':<26} {'accept path':>12} {'forward':>10} {'peak GiB':>9} {'fused':>8}")
    for name in args.speed_rules:
        if name not in RULES:
            continue
        if over():
            log(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
            continue
        try:
            t_acc, t_fwd, peak, t_fused = speed(name, device, args.B, args.k, args.V, args.reps)
            log(f"{name:<26} {t_acc:>12.2f} {t_fwd:>10.2f} {peak:>9.2f} {t_fused:>8.2f}")
            summary["speed"][name] = {
                "accept_ms": t_acc,
                "forward_ms": t_fwd,
                "peak_gib": peak,
                "forward_fused_ms": t_fused,
            }
        except Exception as e:
            log(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if over():
        log("analysis: skipped (--budget-s spent)")
        failed = True
    else:
        try:
            small = dict(V_big=4096, batch=4, reps=1) if args.dry_run else {}
            an = analysis_check(device, rules=args.rules, **small)
            summary["analysis"] = an
            log("\nanalysis on torch vs numpy (max |h_alg diff|):")
            for name, r in an["rules"].items():
                failed |= not r["ok"]
                log(f"{name:<26} {r['emitted_max_abs_diff']:>10.1e}{'' if r['ok'] else '  <-- FAIL'}")
            for name, r in an["speed"].items():
                failed |= not r["ok"]
                log(
                    f"{name:<26} torch {r['torch_rows_per_s']:.1f} rows/s, numpy "
                    f"{r['numpy_rows_per_s']:.2f} rows/s, diff {r['emitted_max_abs_diff']:.1e}"
                    f"{'' if r['ok'] else '  <-- FAIL'}"
                )
        except Exception as e:
            log(f"analysis ERROR {type(e).__name__}: {str(e)[:200]}")
            failed = True
    summary["device"] = str(device)
    summary["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    summary["seconds"] = time.perf_counter() - start
    summary["passed"] = not failed
    log(
        f"\nsummary ({time.perf_counter() - start:.0f} s):",
        "FAIL (or skipped)" if failed else "all law, bf16 and analysis checks passed",
    )
    _write_out(summary, lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
