#!/usr/bin/env python
"""CUDA checks of the batched samplers (cactus_theory.samplers); prints a summary.

For every rule of the registry (q verifier, p drafter, n drafted token):

1. law: the emitted token at one position matches the exact h_alg (paper, Theorem 3) by a
   chi-square test (false-alarm rate 1e-3 per rule; n draws per rule);
2. sync: ``forward`` without seeded rows runs under ``torch.cuda.set_sync_debug_mode("error")``
   (no host-device synchronization anywhere in it, the accept path included), eager and
   fused (``fused=True``; compiled, so within ``--budget-s``: the speed rules' at the speed
   shapes, then the others at small ones), and so do the rule's vLLM rows
   (:func:`cactus_theory.integrations.vllm._rows.substitute_target_logits`, for the rules the
   plugin supports) and both runners' layouts around them; rows seeded with per-row
   generators are reported separately (warn mode, count of warnings). On CPU tensors (the
   dry run) the same calls run under :func:`cactus_theory.testing.sync.record_host_syncs`
   instead, the exact root on its device path;
3. bf16: bfloat16 inputs give exactly the float32 result on the rounded values;
4. speed (selected rules): the accept path (plan + acceptance of the drafted tokens +
   uniforms), the whole forward, and the fused forward (``fused=True``, compiled by its first
   call) at B = 64, k = 8, V = 151,936, median of CUDA-event timings; the exact root's accept
   path against the Taylor rule's (goal: within 1.5x on a GPU);
5. analysis: :func:`cactus_theory.analysis.one_step.analyze` on torch tensors of the device
   against numpy (every rule, small V; then the exact and Taylor Cactus rules at
   V = 151,936), and rows per second at batch 64, V = 151,936 (torch on the device, numpy on
   the host).

6. vLLM plugin overhead, where vLLM imports: the verification step (MRV1's
   ``rejection_sample``) with and without the plugin's rule (``scripts/vllm_overhead.py``;
   goal: within 1.1x of the stock step on a GPU).

Everything runs in one process within ``--budget-s`` (default 400 s: under 8 minutes with
start-up on an H200). The summary is written as ``gpu_check.json`` and ``gpu_check.txt``
(atomically) to ``--out`` or, when that is not given, to the folder the environment variable
``OUT`` names.

Usage: ``python scripts/gpu_check.py [--device cuda] [--out DIR] [--draws 50000]
[--speed-rules ...]``. ``--device cpu`` runs the same checks on the CPU (the sync check by the
recorder); ``--dry-run``, and any run where CUDA is not available, is a small CPU run (few
draws, small shapes, three rules, nothing compiled) to test the script itself.
Exit status 1 when a law, bf16, sync or analysis check fails, or on CUDA when a speed goal is
missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (vllm_overhead, its sibling)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from cactus_theory.analysis.one_step import emitted_distribution  # noqa: E402
from cactus_theory.integrations.vllm._config import check_rule_supported  # noqa: E402
from cactus_theory.integrations.vllm._rows import (  # noqa: E402
    mrv1_substitute,
    mrv2_substitute,
    substitute_target_logits,
)
from cactus_theory.rules import RULES, get_rule  # noqa: E402
from cactus_theory.samplers import make_sampler  # noqa: E402
from cactus_theory.solvers import _spike as spike  # noqa: E402
from cactus_theory.testing.sync import record_host_syncs  # noqa: E402

#: Speed goals on a GPU: the exact root's accept path within this factor of the Taylor rule's,
EXACT_OVER_TAYLOR_GOAL = 1.5
#: and a verification step with the plugin's rule within this factor of vLLM's stock step.
PLUGIN_OVER_STOCK_GOAL = 1.1

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


@contextlib.contextmanager
def _device_root():
    """The exact root's device path (what CUDA tensors take) also for CPU tensors."""
    orig = spike._host_tensor
    spike._host_tensor = lambda t: False
    try:
        yield
    finally:
        spike._host_tensor = orig


def sync_free(fn, device):
    """``"sync-free"`` when ``fn()`` synchronizes nowhere, else ``"SYNC: ..."``: on CUDA under
    ``torch.cuda.set_sync_debug_mode("error")``; on CPU tensors by the host-read recorder
    (:mod:`cactus_theory.testing.sync`), the exact root on its device path."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        try:
            torch.cuda.set_sync_debug_mode("error")
            fn()
            return "sync-free"
        except RuntimeError as e:
            return "SYNC: " + str(e).splitlines()[0][:80]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    with _device_root(), record_host_syncs() as hits:
        fn()
    if not hits:
        return "sync-free"
    return "SYNC: " + ", ".join(dict.fromkeys(f"{h.op} at {h.where.rsplit('/', 2)[-1]}" for h in hits))[:120]


def aten_op_count(fn):
    """The number of aten operators ``fn()`` dispatches (each a kernel launch on a GPU: the
    accept path's launch-bound cost at small batches), the exact root on its device path."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    try:
        with _device_root(), _Count():
            fn()
    except Exception:  # noqa: BLE001 - a compiled call under a dispatch mode: not counted
        return -1
    return _Count.n


def sync_check(name, device, fused=False, shape=(8, 4, 1000)):
    s = make_sampler(name, fused=fused)
    q, bonus, p, ids = batch(*shape, device)
    s(q, bonus, p, ids)  # warm-up (lazy init, counters; fused: the compile)
    unseeded = sync_free(lambda: s(q, bonus, p, ids), device)
    if device.type != "cuda":
        return unseeded, "skipped (cpu)"
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


def vllm_supported(name):
    """True when the vLLM plugin serves the rule (its plan is SpS against a per-draft h)."""
    try:
        check_rule_supported(get_rule(name))
    except ValueError:
        return False
    return True


def rows_sync_check(name, device, V=1000):
    """The rule's vLLM rows (:func:`substitute_target_logits`) under :func:`sync_free`."""
    rule = get_rule(name)
    g = torch.Generator(device=device).manual_seed(4)
    logits = 2 * torch.randn(6, V, generator=g, device=device)
    draft = torch.softmax(2 * torch.randn(6, V, generator=g, device=device), -1)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    rows = torch.arange(6, device=device) % 3 != 2  # every third row greedy or bonus
    # a rule that decides on the raw rows gets them (here the processed ones: temperature 1)
    raw = dict(raw_target_logits=logits, raw_draft_probs=draft) if rule.spec.needs_raw else {}
    raw["temperature"] = torch.ones(6, device=device)  # a request-tied knob's value (SCD)
    substitute_target_logits(rule, logits, draft, ids, rows, **raw)  # warm-up
    return sync_free(lambda: substitute_target_logits(rule, logits, draft, ids, rows, **raw), device)


def layouts_sync_check(device, V=1000):
    """Both runners' layouts around the rows (MRV1 given its cumulative counts, as the
    plugin passes them; MRV2), mixed greedy and random requests, with ``cactus-taylor`` (SpS
    is not substituted at all)."""
    rule = get_rule("cactus-taylor")
    g = torch.Generator(device=device).manual_seed(5)
    logits = 2 * torch.randn(5, V, generator=g, device=device)
    draft = torch.softmax(2 * torch.randn(5, V, generator=g, device=device), -1)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    counts = [2, 1, 2]
    meta = types.SimpleNamespace(all_random=False, temperature=torch.tensor([1.0, 0.0, 0.7], device=device))
    cu = torch.tensor([2, 3, 5], dtype=torch.int32, device=device)
    draft_logits = 2 * torch.randn(2, 2, V, generator=g, device=device)
    sampled = torch.randint(0, V, (5,), generator=g, device=device)
    cu_logits = torch.tensor([0, 3, 5], device=device)
    state = torch.tensor([0, 0, 0, 1, 1], device=device)
    local = torch.tensor([0, 1, 2, 0, 1], device=device)
    temps = torch.tensor([0.8, 0.5], device=device)

    def run():
        mrv1_substitute(rule, ids, counts, draft, logits, meta, cu)
        mrv2_substitute(rule, logits, draft_logits, sampled, cu_logits, state, local, temps)

    run()
    return sync_free(run, device)


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


def speed(name, device, B, k, V, reps, with_fused=True):
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

    for f in (accept_path, forward):
        f()
    fused_error = None
    if with_fused:
        try:
            forward_fused()
        except Exception as e:  # report it as the fused row's result; time the rest
            fused_error = f"ERROR {type(e).__name__}: {str(e)[:80]}"
            with_fused = False
    if device.type == "cuda":
        sync = {
            "accept_path": sync_free(accept_path, device),
            "forward": sync_free(forward, device),
            "forward_fused": sync_free(forward_fused, device) if with_fused else (fused_error or "skipped"),
        }
    else:  # (the recorder costs seconds per call here; the law section checked the same calls)
        sync = dict.fromkeys(("accept_path", "forward", "forward_fused"), "skipped")
        if fused_error:
            sync["forward_fused"] = fused_error
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t_acc = timed(accept_path, device, reps)
    t_fwd = timed(forward, device, reps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    t_fused = timed(forward_fused, device, reps) if with_fused else float("nan")
    # last: under the counting mode a compiled kernel gives way to the rule's eager path
    sync["aten_ops_accept_path"] = aten_op_count(accept_path)
    return t_acc, t_fwd, peak, t_fused, sync


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


def root_kernel_check(device, n=200_000, delta=None):
    """The exact root's compiled kernel (:func:`cactus_theory.samplers._kernels.cactus.compiled_root`)
    against the solver's eager device path (:func:`cactus_theory.solvers._spike.device_root`)
    on float32 q_n spread over [1e-30, 1): the count of entries that differ, the largest
    difference in float32 ulps, and feasibility of the kernel's roots as eager torch
    computes the two-point KL in float32 (the precision the CPU tests pin); compile seconds."""
    from cactus_theory.divergences import get_divergence
    from cactus_theory.samplers._kernels.cactus import compiled_root

    kl = get_divergence("kl")
    g = torch.Generator(device=device).manual_seed(3)
    q = torch.pow(10.0, -30 * torch.rand(n, generator=g, device=device)).clamp(max=0.999999)
    q = torch.cat([q, torch.tensor([0.0, 1.0, float("nan")], device=device)])
    t0 = time.perf_counter()
    delta = float(get_rule("cactus-exact").delta) if delta is None else delta  # the samplers' compile
    fn = compiled_root("kl", torch.float32, device.type, delta)
    got = fn(q)
    if device.type == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    want = spike.device_root(q, delta, kl)
    q512 = q[:512].contiguous()  # the speed rows' [64, 8] drafted tokens
    kernel_ms = timed(lambda: fn(q512), device, 20)
    eager_ms = timed(lambda: spike.device_root(q512, delta, kl), device, 5)
    diff = got != want
    qq = torch.nan_to_num(q, nan=0.0)
    ulps = (got.view(torch.int32).long() - want.view(torch.int32).long()).abs()
    feasible = (kl.two_point(got, qq) <= delta) & (got >= qq)
    return {
        "entries": int(q.numel()),
        "differ": int(diff.sum()),
        "max_ulps": int(ulps.max()),
        "infeasible": int((~feasible).sum()),
        "compile_s": compile_s,
        "kernel_ms_512": kernel_ms,
        "eager_ms_512": eager_ms,
        "ok": int((~feasible).sum()) == 0 and int(ulps.max()) <= 1,
    }


def _load_kernels(kernels_dir):
    """The vLLM kernels copied by ``scripts/vendor_gpu_kernels.py`` (a package folder):
    ``(mrv1_kernels, mrv2.rejection_sampler_utils, source line)``."""
    import importlib
    import importlib.util

    name = "vendored_vllm_kernels"  # the folder's own name (.gpu_kernels) is no package name
    if name not in sys.modules:
        folder = os.path.abspath(kernels_dir)
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[name] = pkg
        spec.loader.exec_module(pkg)
    mrv1 = importlib.import_module(f"{name}.mrv1_kernels")
    mrv2 = importlib.import_module(f"{name}.mrv2.rejection_sampler_utils")
    with open(os.path.join(kernels_dir, "SOURCE")) as f:
        source = f.read().strip()
    return mrv1, mrv2, source


def mrv1_rejection_sample(kernels):
    """vLLM V1's module-level ``rejection_sample`` (its random and greedy paths, no synthetic
    mode) driving the V1 runner's own Triton kernels ``kernels`` (``mrv1_kernels``): the
    same launches, grids and inputs as vLLM's driver (uniforms in float64, one exponential
    row per request, recovered tokens by ``argmax(max(q - p, 0) / E)``)."""

    def rejection_sample(draft_ids, num_draft, max_spec_len, cu, draft_probs, target_logits, bonus, meta):
        device = target_logits.device
        B, T, V = len(num_draft), draft_ids.shape[0], target_logits.shape[-1]
        out = torch.full((B, max_spec_len + 1), -1, dtype=torch.int32, device=device)
        is_greedy = meta.temperature == 0
        uniform = torch.rand((T,), dtype=torch.float64, device=device)
        start = 0
        for i, k in enumerate(num_draft):  # seeded requests draw from their generator
            if k and i in meta.generators:
                uniform[start : start + k] = _seeded_draw(meta.generators[i], k, torch.float64, "uniform")
            start += k
        if not meta.all_random:
            argmax = target_logits.argmax(dim=-1)
            kernels.rejection_greedy_sample_kernel[(B,)](
                out,
                cu,
                draft_ids,
                argmax,
                bonus,
                is_greedy,
                max_spec_len,
                uniform,
                None,
                SYNTHETIC_MODE=False,
            )
            if meta.all_greedy:
                return out
        target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
        e = torch.empty((B, V), dtype=torch.float32, device=device)
        e.exponential_()
        for i, g in meta.generators.items():
            if num_draft[i] > 0:
                e[i] = _seeded_draw(g, V, torch.float32, "exponential")
        recovered = torch.empty_like(draft_ids)
        kernels.sample_recovered_tokens_kernel[(B, max_spec_len)](
            recovered,
            cu,
            draft_ids,
            draft_probs,
            target_probs,
            e.reciprocal(),
            V,
            BLOCK_SIZE=8192,
            NO_DRAFT_PROBS=False,
            USE_FP64_GUMBEL=False,
        )
        kernels.rejection_random_sample_kernel[(B,)](
            out,
            cu,
            draft_ids,
            draft_probs,
            target_probs,
            bonus,
            recovered,
            uniform,
            is_greedy,
            max_spec_len,
            V,
            None,
            NO_DRAFT_PROBS=False,
            SYNTHETIC_MODE=False,
        )
        return out

    return rejection_sample


def _seeded_draw(gen, n, dtype, kind):
    """n draws of a request's own generator, on the generator's device (vLLM's engine hands
    device generators; the law check's seeded rows come with CPU ones)."""
    x = torch.empty(n, dtype=dtype, device=gen.device)
    return x.uniform_(generator=gen) if kind == "uniform" else x.exponential_(generator=gen)


def mrv2_rejection_sample(utils):
    """The newer runner's ``rejection_sample`` (``rejection_sampler_utils``: Philox/Gumbel
    Triton kernels) in :func:`cactus_theory.testing.padded_adapter`'s layout: logits are
    ``log`` of the rows (temperature 1), one request per row block, fresh seeds per call."""

    def fn(target_probs, draft_probs, draft_sampled, cu):
        device = target_probs.device
        L = target_probs.shape[0]
        B, K = draft_probs.shape[0], draft_probs.shape[1]
        counts = cu[1:] - cu[:-1]
        idx = torch.arange(B, dtype=torch.int32, device=device)
        expanded = torch.repeat_interleave(idx, counts.to(torch.int64), output_size=L)
        local = torch.arange(L, dtype=torch.int32, device=device) - cu[:-1].to(torch.int32)[expanded.long()]
        return utils.rejection_sample(
            torch.log(target_probs.to(torch.float32)).contiguous(),
            torch.log(draft_probs.to(torch.float32)).contiguous(),
            draft_sampled.to(torch.int64).contiguous(),
            cu.to(torch.int32),
            torch.arange(L, dtype=torch.int64, device=device),
            idx,
            expanded,
            local,
            torch.ones(B, dtype=torch.float32, device=device),
            torch.randint(0, 2**31 - 1, (B,), dtype=torch.int64, device=device),
            K,
        )

    return fn


def real_kernels_check(kernels_dir, device, n):
    """The SpS law (:func:`cactus_theory.testing.check_sampler_law`, default cases) of vLLM's
    real GPU kernels: the V1 runner's Triton kernels through
    :func:`~cactus_theory.testing.v1_adapter`, the newer runner's through
    :func:`~cactus_theory.testing.padded_adapter`."""
    from cactus_theory.testing import check_sampler_law, padded_adapter, v1_adapter

    mrv1, mrv2, source = _load_kernels(kernels_dir)
    out = {"source": source}
    for name, adapter in (
        ("vllm_mrv1_triton", v1_adapter(mrv1_rejection_sample(mrv1))),
        ("vllm_mrv2_triton", padded_adapter(mrv2_rejection_sample(mrv2))),
    ):
        t0 = time.perf_counter()
        try:
            res = check_sampler_law(adapter, "sps", num_samples=n, device=device)
            stat = [c for c in res.checks if c.test != "exact"]
            law = [c.p_value for c in stat if c.name == "law"]
            out[name] = {
                "passed": bool(res.passed),
                "alpha": res.alpha,
                "num_samples": n,
                "min_law_pvalue": min(law) if law else None,
                "min_pvalue": min(c.p_value for c in stat) if stat else None,
                "num_checks": len(res.checks),
                "failed": [c.line()[:240] for c in res.checks if not c.passed][:5],
                "skipped": list(res.skipped)[:5],
                "seconds": time.perf_counter() - t0,
            }
        except Exception as e:  # report and continue
            out[name] = {"passed": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def _wall(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _commit():
    """The checked-out commit ($CACTUS_THEORY_COMMIT, else ``git rev-parse HEAD``; None when
    neither is available, as in a copy of the tree without its history)."""
    env = os.environ.get("CACTUS_THEORY_COMMIT")
    if env:
        return env
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=os.path.dirname(os.path.abspath(__file__)),
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def benchmark_name(summary) -> str:
    """``gpu_check_<gpu>_<date>.json``: the device's name in lower case, letters and digits."""
    gpu = "".join(c if c.isalnum() else "_" for c in summary["device_name"].lower().removeprefix("nvidia "))
    return f"gpu_check_{gpu.strip('_')}_{summary['date']}.json"


def save_benchmark(summary, folder=None) -> str:
    """Write ``summary`` as ``benchmarks/<benchmark_name>`` (atomically); returns the path."""
    folder = folder or os.path.join(ROOT, "benchmarks")
    path = os.path.join(folder, benchmark_name(summary))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(summary, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def _write_out(summary, lines, out=None):
    """Write the JSON and text summary under ``out`` (default $OUT, when set), atomically."""
    out = out or os.environ.get("OUT")
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
    ap.add_argument("--out", default=None, help="folder for gpu_check.json/.txt (default: $OUT)")
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
        default=400.0,
        help="stop starting new checks after this many seconds (device time is scarce)",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="small CPU run of every check (tests the script, not the GPU)"
    )
    ap.add_argument("--no-fused", action="store_true", help="skip the compiled samplers (nothing compiled)")
    ap.add_argument(
        "--fused-rules",
        nargs="*",
        default=None,
        help="compile only these rules' fused samplers (speed and sync; default: every rule)",
    )
    ap.add_argument(
        "--kernels",
        default=os.path.join(ROOT, ".gpu_kernels"),
        help="vLLM's kernels copied by scripts/vendor_gpu_kernels.py (law-checked on CUDA when present)",
    )
    ap.add_argument(
        "--kernel-draws", type=int, default=20_000, help="draws per case of the kernels' law check"
    )
    ap.add_argument(
        "--save",
        action="store_true",
        help="also write the JSON as benchmarks/gpu_check_<gpu>_<date>.json (what the README's GPU section reads)",
    )
    args = ap.parse_args(argv)
    lines = []
    summary = {"law": {}, "sync": {}, "speed": {}, "goals": {}, "plugin_overhead": None, "analysis": None}

    def log(*parts):
        line = " ".join(str(x) for x in parts)
        print(line, flush=True)
        lines.append(line)

    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available() and not args.dry_run:
        log("gpu_check: CUDA is not available: a dry run on the CPU (the script's code paths, not the GPU)")
        args.dry_run = True
    if args.dry_run:
        args.device, args.draws, args.reps = "cpu", 2000, 2
        args.B, args.k, args.V = 4, 2, 1024
        args.rules = args.rules or ["sps", "cactus-taylor", "cactus-exact-kl"]
        args.speed_rules = ["cactus-taylor", "cactus-exact-kl"]
        args.no_fused = True  # (compiling costs seconds to minutes per rule on a CPU)
    start = time.perf_counter()
    over = lambda: time.perf_counter() - start > args.budget_s  # noqa: E731
    fused_wanted = lambda n: not args.no_fused and (args.fused_rules is None or n in args.fused_rules)  # noqa: E731
    device = torch.device(args.device)
    names = args.rules or list(RULES)
    log(
        f"gpu_check on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, {len(names)} rules{' (dry run)' if args.dry_run else ''}"
    )
    log(f"law: chi-square of the emitted token vs exact h_alg, n = {args.draws}, false alarm {ALPHA}")
    log(
        "sync: "
        + ("torch.cuda.set_sync_debug_mode('error')" if device.type == "cuda" else "host-read recorder")
    )
    failed = False
    log(
        f"{'rule':<26} {'law p-value':>12} {'bf16==f32':>10}  {'sync (eager)':<14} {'vLLM rows':<14} seeded rows"
    )
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
            rows = rows_sync_check(name, device) if vllm_supported(name) else "not served"
        except Exception as e:  # report and continue
            log(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
            failed = True
            continue
        sync_ok = sy == "sync-free" and rows in ("sync-free", "not served")
        ok = pval > ALPHA and bf and sync_ok
        failed |= not ok
        summary["law"][name] = {
            "law_pvalue": pval,
            "bf16_equal": bf,
            "sync_unseeded": sy,
            "sync_seeded": sy_seeded,
            "sync_vllm_rows": rows,
            "ok": ok,
        }
        summary["sync"][name] = {"eager": sy, "vllm_rows": rows}
        log(
            f"{name:<26} {pval:>12.3g} {str(bf):>10}  {sy[:14]:<14} {rows[:14]:<14} {sy_seeded}"
            f"{'' if ok else '  <-- FAIL'}  ({time.perf_counter() - t0:.1f}s)"
        )
        if not sync_ok:
            log(f"{'':<26} {sy} | {rows}")
    try:
        lay = layouts_sync_check(device)
    except Exception as e:
        lay = f"ERROR {type(e).__name__}: {str(e)[:100]}"
    summary["sync"]["vllm_layouts"] = lay
    failed |= lay != "sync-free"
    log(f"{'vLLM layouts (MRV1, MRV2)':<26} {lay}")

    if device.type == "cuda":
        try:
            rk = root_kernel_check(device)
        except Exception as e:
            rk = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        failed |= not rk["ok"]
        summary["exact_root_kernel"] = rk
        log(
            "\nexact root, compiled kernel vs the eager device path: "
            + (
                f"{rk['differ']} of {rk['entries']} entries differ (at most {rk['max_ulps']} float32 ulps), "
                f"{rk['infeasible']} infeasible under eager float32 KL, compiled in {rk['compile_s']:.1f} s; "
                f"512 roots: {rk['kernel_ms_512']:.3f} ms compiled, {rk['eager_ms_512']:.2f} ms eager"
                if "error" not in rk
                else rk["error"]
            )
            + ("" if rk["ok"] else "  <-- FAIL")
        )
    else:
        summary["exact_root_kernel"] = {"skipped": "the compiled root runs off the CPU only"}
    if device.type != "cuda":
        summary["real_kernels"] = {"skipped": "needs CUDA (Triton kernels)"}
    elif not os.path.isdir(args.kernels):
        summary["real_kernels"] = {"skipped": f"no {args.kernels} (scripts/vendor_gpu_kernels.py makes it)"}
    elif over():
        summary["real_kernels"] = {"skipped": "--budget-s spent"}
    else:
        rk = real_kernels_check(args.kernels, device, args.kernel_draws)
        summary["real_kernels"] = rk
        log(f"\nvLLM's GPU kernels ({rk['source']}), SpS law by cactus_theory.testing.check_sampler_law:")
        for name, r in rk.items():
            if name == "source":
                continue
            failed |= not r["passed"]
            log(
                f"{name:<26} "
                + (
                    f"passed={r['passed']} min law p = {r['min_law_pvalue']:.3g}, min p = {r['min_pvalue']:.3g} "
                    f"(alpha {r['alpha']:g}, {r['num_checks']} checks, n = {r['num_samples']}/case) {r['seconds']:.1f}s"
                    if "error" not in r
                    else r["error"]
                )
                + ("" if r["passed"] else "  <-- FAIL " + " | ".join(r.get("failed", [])))
            )
    summary["real_kernels"].setdefault(
        "flashinfer",
        {
            "skipped": "not attempted: FlashInfer is neither installed nor buildable offline on the device image"
        },
    )

    log(f"\nspeed at B={args.B}, k={args.k}, V={args.V} (median of {args.reps}, ms):")
    log(
        f"{'rule':<26} {'accept path':>12} {'forward':>10} {'peak GiB':>9} {'fused':>8}  sync (accept, forward, fused), aten ops of the accept path"
    )
    for name in args.speed_rules:
        if name not in RULES:
            continue
        if over():
            log(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
            continue
        try:
            t_acc, t_fwd, peak, t_fused, sync = speed(
                name, device, args.B, args.k, args.V, args.reps, with_fused=fused_wanted(name)
            )
            sync_ok = all(
                v in ("sync-free", "skipped") for key, v in sync.items() if key != "aten_ops_accept_path"
            )
            failed |= not sync_ok
            log(
                f"{name:<26} {t_acc:>12.2f} {t_fwd:>10.2f} {peak:>9.2f} {t_fused:>8.2f}  "
                + ", ".join(str(v)[:40] for v in sync.values())
                + ("" if sync_ok else "  <-- FAIL")
            )
            summary["speed"][name] = {
                "accept_ms": t_acc,
                "forward_ms": t_fwd,
                "peak_gib": peak,
                "forward_fused_ms": t_fused,
                "sync": sync,
            }
        except Exception as e:
            log(f"{name:<26} ERROR {type(e).__name__}: {str(e)[:100]}")
            failed = True
        if device.type == "cuda":
            torch.cuda.empty_cache()
    sp = summary["speed"]
    if "cactus-exact-kl" in sp and "cactus-taylor" in sp:
        ratio = sp["cactus-exact-kl"]["accept_ms"] / sp["cactus-taylor"]["accept_ms"]
        met = ratio <= EXACT_OVER_TAYLOR_GOAL
        summary["goals"]["exact_over_taylor_accept"] = {
            "ratio": ratio,
            "goal": EXACT_OVER_TAYLOR_GOAL,
            "met": met,
            "gated": device.type == "cuda",
        }
        failed |= device.type == "cuda" and not met
        log(
            f"exact root / Taylor accept path: {ratio:.2f}x (goal <= {EXACT_OVER_TAYLOR_GOAL}x on a GPU"
            f"{'' if device.type == 'cuda' else '; not gated on CPU'}){'' if met else '  <-- MISSED'}"
        )

    if over():
        log("plugin overhead: skipped (--budget-s spent)")
    else:
        try:
            import vllm_overhead

            res = vllm_overhead.verify_step_overhead(device, quick=args.dry_run)
        except ImportError as e:
            res = {"skipped": f"vLLM not importable here ({str(e)[:80]})"}
        except Exception as e:
            res = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            failed = True
        summary["plugin_overhead"] = res
        if "rules" in res:
            log("\nplugin overhead: " + vllm_overhead.summary_line(res))
            worst = max(r["ratio_median"] for r in res["rules"].values())
            met = worst <= PLUGIN_OVER_STOCK_GOAL
            summary["goals"]["plugin_over_stock_step"] = {
                "ratio": worst,
                "goal": PLUGIN_OVER_STOCK_GOAL,
                "met": met,
                "gated": device.type == "cuda",
            }
            failed |= device.type == "cuda" and not met
        else:
            log(f"\nplugin overhead: {next(iter(res.values()))}")

    if over():
        log("analysis: skipped (--budget-s spent)")
        failed = True
    else:
        try:
            small = dict(V_big=1024, batch=4, reps=1) if args.dry_run else {}
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
    if not args.no_fused:
        log("\nsync of the fused (compiled) samplers at B=8, k=4, V=1000, rules not timed above:")
        for name in names:
            if name in sp and sp[name]["sync"]["forward_fused"] != "skipped":
                summary["sync"].setdefault(name, {})["fused"] = sp[name]["sync"]["forward_fused"]
                continue
            if not fused_wanted(name):
                summary["sync"].setdefault(name, {})["fused"] = "not run (--fused-rules)"
                continue
            if over():
                log(f"{name:<26} skipped: --budget-s {args.budget_s:g} s spent")
                summary["sync"].setdefault(name, {})["fused"] = "skipped (budget)"
                continue
            t0 = time.perf_counter()
            try:
                fz = sync_check(name, device, fused=True)[0]
            except Exception as e:
                fz = f"ERROR {type(e).__name__}: {str(e)[:80]}"
            summary["sync"].setdefault(name, {})["fused"] = fz
            failed |= fz != "sync-free"
            log(
                f"{name:<26} {fz}{'' if fz == 'sync-free' else '  <-- FAIL'}  ({time.perf_counter() - t0:.1f}s)"
            )

    summary["device"] = str(device)
    summary["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    summary["dry_run"] = bool(args.dry_run)
    summary["torch"] = torch.__version__
    summary["date"] = time.strftime("%Y-%m-%d", time.gmtime())
    summary["time_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summary["commit"] = _commit()
    summary["seconds"] = time.perf_counter() - start
    summary["passed"] = not failed
    log(
        f"\nsummary ({time.perf_counter() - start:.0f} s):",
        "FAIL (or skipped)" if failed else "all law, bf16, sync, speed-goal and analysis checks passed",
    )
    _write_out(summary, lines, args.out)
    if args.save and not args.dry_run:
        path = save_benchmark(summary)
        log(f"written {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
