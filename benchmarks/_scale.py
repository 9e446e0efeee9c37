r"""The scale rows: the chunked analysis against the in-memory one, memory and rows per second,
each measurement in a fresh process (``scale`` section)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from cactus_theory.analysis.one_step import _analyze_block as analyze  # every row at once
from cactus_theory.rules import get_rule

from ._goals import VOCAB, correlated_pair, goal

#: The checkout holding this folder (a fresh process imports ``benchmarks`` from it).
ROOT = Path(__file__).resolve().parents[1]


#: (n, V) of the chunked-analysis rows (:func:`bench_scale`): ``scale=True`` (the sizes of the
#: goal), the default run, and ``quick``.
SCALE_SIZES = ((1_000, 1_000), (10_000, 1_000), (100_000, 1_000), (64, VOCAB), (1_024, VOCAB))
SCALE_SIZES_DEFAULT = ((1_000, 1_000), (10_000, 1_000), (64, VOCAB))
SCALE_SIZES_QUICK = ((500, 1_000), (1_000, 1_000), (2, VOCAB))
#: Rows of the one-by-one blocks of the check (fewer where V is large: at most
#: :data:`SCALE_BLOCK_VALUES` values a block, 27 rows at V = 151,936).
SCALE_BLOCK = 1_000
SCALE_BLOCK_VALUES = 1 << 22


def _scale_block(V):
    return max(1, min(SCALE_BLOCK, SCALE_BLOCK_VALUES // V))


def _scale_rows(n, V, seed):
    """``correlated_pair`` rows made in blocks of :func:`_scale_block` rows (its temporaries
    stay one block's), float64 (n, V) each."""
    q, p = np.empty((n, V)), np.empty((n, V))
    step = _scale_block(V)
    for i, a in enumerate(range(0, n, step)):
        b = min(n, a + step)
        q[a:b], p[a:b] = correlated_pair(V, (b - a,), seed=seed + i)
    return q, p


def _rss_bytes(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status: no {field}")


def scale_probe(n, V, path, seed=0):
    """One measurement in this (fresh) process: ``cactus-exact`` analysed over n rows of V,
    ``path`` ``"in-memory"`` (:func:`cactus_theory.analysis.one_step.analyze`, every row at
    once) or ``"chunked"`` (:func:`cactus_theory.analysis.analyze`, default memory
    bound, per-row values kept). Peak extra memory: the resident set's high-water mark
    (``VmHWM``, reset through ``/proc/self/clear_refs`` once the input is made and the freed
    heap returned with ``malloc_trim``) over the resident set before the call; without
    ``clear_refs``, the tracemalloc peak. The chunked
    path's check: its first rows' acceptance and KL (two blocks) equal, bit for bit, those of
    blocks of :func:`_scale_block` rows (1,000 at V = 1,000) analysed one by one.

    Returns
    -------
    dict
        n, V, path, input_bytes, peak_extra_bytes, memory_method, seconds, check.
    """
    import tracemalloc

    from cactus_theory.analysis import analyze as analyze_chunked

    rule = get_rule("cactus-exact")
    q, p = _scale_rows(n, V, seed)
    analyze(rule, q[:2], p[:2])  # imports and caches before the measurement
    try:  # freed heap memory back to the system first: the resident set is then the live data
        import ctypes
        import ctypes.util

        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        method, before = "peak RSS (VmHWM)", _rss_bytes("VmRSS")
    except OSError:
        method, before = "tracemalloc", None
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    if path == "in-memory":
        res = analyze(rule, q, p)
    else:
        res = analyze_chunked(rule, q, p, per_token=False)
    seconds = time.perf_counter() - t0
    if before is not None:
        peak = _rss_bytes("VmHWM") - before
    else:
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    step = _scale_block(V)
    m = min(n, 2 * step)
    blocks = [analyze(rule, q[a : a + step], p[a : a + step]) for a in range(0, m, step)]
    acc = np.concatenate([np.atleast_1d(b.acceptance) for b in blocks])[:m]
    kl = np.concatenate([np.atleast_1d(b.divergences["kl"]) for b in blocks])[:m]
    same = bool(
        np.array_equal(np.asarray(res.acceptance)[:m], acc)
        and np.array_equal(np.asarray(res.divergences["kl"])[:m], kl)
    )
    return {
        "n": n,
        "V": V,
        "path": path,
        "input_bytes": int(q.nbytes + p.nbytes),
        "peak_extra_bytes": int(peak),
        "memory_method": method,
        "seconds": seconds,
        "check": same,
        "checked_rows": m,
        "block_rows": step,
    }


def _probe(n, V, path, seed):
    """:func:`scale_probe` in a fresh Python process (its memory is the call's alone)."""
    import json
    import subprocess
    import sys

    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks._scale import scale_probe; "
        f"print(json.dumps(scale_probe({n}, {V}, {path!r}, {seed})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_scale(sizes, seed=0, quick=False):
    """The chunked analysis (:func:`cactus_theory.analysis.analyze`) against the in-memory one:
    peak extra memory over the input and rows per second at each (n, V) of ``sizes``, each in
    a fresh process; the in-memory path at the smallest n of each V is the reference. Goals:
    the chunked path's peak extra memory under 1 GB (the default bound keeps it near
    256 MiB), flat in n (largest n over smallest, at most 1.2), and its rows per second within
    1.2x of the in-memory path's (checked: the same numbers as 1,000-row blocks one by one).
    ``quick``: the speed and flatness targets are the full run's (the rows pass on their
    checks and the 1 GB bound)."""
    tag = " (full run)" if quick else ""
    out = []
    for V in sorted({V for _, V in sizes}):
        ns = sorted(n for n, v in sizes if v == V)
        ref = _probe(ns[0], V, "in-memory", seed)
        ref_rate = ref["n"] / ref["seconds"]
        out.append(
            goal(
                f"scale: in-memory analyze, V = {V}, n = {ns[0]:,} [extra/input]",
                f"{ref['peak_extra_bytes'] / 1e6:.0f} MB over a {ref['input_bytes'] / 1e6:.0f} MB "
                f"input, {ref_rate:.1f} rows/s ({ref['memory_method']})",
                ref["peak_extra_bytes"] / ref["input_bytes"],
                "reported",
                True,
                True,
                "reference",
            )
        )
        peaks = []
        for n in ns:
            r = _probe(n, V, "chunked", seed)
            rate = r["n"] / r["seconds"]
            peaks.append(r["peak_extra_bytes"])
            out.append(
                goal(
                    f"scale: chunked analyze, V = {V}, n = {n:,} [in-memory/chunked time]",
                    f"{r['peak_extra_bytes'] / 1e6:.0f} MB extra over a "
                    f"{r['input_bytes'] / 1e6:.0f} MB input "
                    f"({r['peak_extra_bytes'] / r['input_bytes']:.3g}x), {rate:.1f} rows/s "
                    f"against {ref_rate:.1f} in memory at n = {ns[0]:,}",
                    ref_rate / rate,
                    "<= 1.2" + tag,
                    (quick or ref_rate / rate <= 1.2) and r["peak_extra_bytes"] < 1e9,
                    r["check"],
                    f"first {r['checked_rows']:,} rows equal {r['block_rows']:,}-row blocks "
                    "one by one: "
                    f"{r['check']}; extra memory < 1 GB: {r['peak_extra_bytes'] < 1e9}",
                )
            )
        if len(ns) > 1:
            flat = peaks[-1] / peaks[0]
            out.append(
                goal(
                    f"scale: chunked memory flat in n, V = {V} [n = {ns[-1]:,} / {ns[0]:,}]",
                    f"{peaks[-1] / 1e6:.0f} MB at n = {ns[-1]:,}, {peaks[0] / 1e6:.0f} MB at n = {ns[0]:,}",
                    flat,
                    "<= 1.2" + tag,
                    quick or flat <= 1.2,
                    True,
                    "same run",
                )
            )
    return out
