"""Regenerate the result tables of README.md and docs/*.md from a fresh report (no hand-pasted numbers).

Every generated block sits between two markers in exactly one page (README.md or a docs/*.md page)::

    <!-- BEGIN generated:NAME (scripts/update_readme.py) -->
    ...
    <!-- END generated:NAME -->

and :data:`BLOCKS` says what each NAME holds: a table of the report (``cactus_theory.report``),
optionally filtered to some rows and columns, or a sentence computed from a table. Usage::

    python scripts/update_readme.py            # rewrite the pages in place (each atomically)
    python scripts/update_readme.py --check    # exit 1 and name the blocks that differ
    python scripts/update_readme.py --sections taylor rules   # only blocks of these sections

A block of :data:`BLOCKS` whose markers are in no page, or in more than one, is an error.
``tests/test_readme.py`` fails when a page and a fresh report disagree.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
if str(ROOT) not in sys.path:  # run as a script from anywhere: import this checkout's package
    sys.path.insert(0, str(ROOT))

from cactus_theory.report import Table, compute_report, format_table  # noqa: E402


@dataclass(frozen=True)
class Block:
    """One generated block: report tables (by name), a row filter and dropped columns, or a text
    function of the report."""

    tables: tuple = ()
    where: tuple = ()  # ((column key, allowed values), ...)
    drop: tuple = ()
    text: object = None
    fenced: bool = True
    example: bool = False  # the output of the page's python block just above the marker
    needs_report: bool = True  # False: a text block computed from shipped data, not from the report

    @property
    def sections(self) -> set:
        if self.example or not self.needs_report:
            return set()
        names = set(t.split("/")[0] for t in self.tables)
        return names or {"calibration"}


_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def example_code(page_text: str, name: str) -> str:
    """The page's last fenced python block before the BEGIN marker of block ``name``."""
    head = page_text.split(BEGIN.format(name=name))[0]
    blocks = _PYTHON_BLOCK.findall(head)
    if not blocks:
        raise ValueError(f"no python block before the markers of {name!r}")
    return blocks[-1]


def needs_vllm(code: str) -> bool:
    """An example that imports vLLM: it runs in the vLLM environment
    (tests/testing/test_vllm_testing_module.py), the others in the main one (tests/test_readme.py)."""
    return re.search(r"^\s*(import|from) vllm\b", code, re.M) is not None


def run_example(code: str) -> str:
    """Execute a page's example code in a fresh namespace; return what it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "documentation example", "exec"), {"__name__": "__readme__"})
    return out.getvalue().rstrip("\n")


def _calibration_sentence(report) -> str:
    rows = report.table("calibration/noisy-copy").rows

    def ratio(label):
        r = [row["eps"] / row["global_delta"] for row in rows if row["rows"] == label]
        return f"{min(r):.2g}-{max(r):.2g}x"

    below = sum(
        r["acceptance_per_position"] <= r["acceptance_mentored"] + 1e-9 for r in rows
    )  # solver rounding
    beats = [r for r in rows if r["acceptance_global"] > r["acceptance_mentored"]]
    where = sorted(set(r["rows"] for r in beats))
    s = (
        f"eps / delta (the one global delta): {ratio('untruncated')} untruncated, "
        f"{ratio('truncated')} truncated. Mentored decoding (acceptance-optimal with KL <= eps at "
        f"every position) is at or above the per-position calibration on {below} of {len(rows)} rows"
    )
    if beats:
        s += (
            f"; the one global delta, which meets eps only on average (about half the positions "
            f"exceed it), beats Mentored on {len(beats)} of {len(rows)} rows ({', '.join(where)})."
        )
    else:
        s += "; the one global delta, which meets eps only on average, stays below Mentored on every row."
    return s


_DRAFTER_LABELS = {
    "early-exit-25": "early exit after layer 25 of 30",
    "requant-4": "re-quantized 4 bits (RTN, g32)",
    "requant-3": "re-quantized 3 bits",
    "distilled": "distilled (3.55 M trained params)",
}


def _shipped_pairs_table(report) -> str:
    """Acceptance of the shipped pairs by category and SpS's exact AL at m = 2 (from the dumps)."""
    from cactus_theory._report_sections import chain_rows
    from cactus_theory.figures._real import acceptance_by_category
    from cactus_theory.logits import load_dump, shipped_dumps

    lines = [
        "| drafter (p) | positions | acceptance, all | GSM8K | coding | translation "
        "| exact AL, m = 2 (all / GSM8K) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in _DRAFTER_LABELS.items():
        path = next(f for f in shipped_dumps() if f.name == f"smollm2-135m_{key}.npz")
        d = load_dump(path)
        acc, cat_means = d.acceptance(), acceptance_by_category(d)
        trajs = list(d.trajectories())
        al = [
            chain_rows(ts, 2, rules=(("sps", {}),))[0]["al_m"]
            for ts in (trajs, [t for t in trajs if t.category == "gsm8k"])
        ]
        by = [cat_means[c] for c in ("gsm8k", "coding", "translation")]
        lines.append(
            f"| {label} | {len(acc):,} | {acc.mean():.3f} | "
            + " | ".join(f"{v:.3f}" for v in by)
            + f" | {al[0]:.2f} / {al[1]:.2f} |"
        )
    return "\n".join(lines)


def _speedup_cell(c) -> str:
    sp = c.get("speedup_spread")
    if sp is None:
        raise ValueError("decode results: a configuration has no speedup_spread (re-run decode --shipped)")
    return f"{sp['median']:.2f}x [{sp['min']:.2f}, {sp['max']:.2f}]"


def _decode_table(report) -> str:
    """The recorded real decoding measurement (cactus_theory/data/real/decode/results.json): counts
    from the first repeat, wall-time speedup as median [min, max] over the interleaved repeats."""
    import json

    rec = json.loads((ROOT / "cactus_theory/data/real/decode/results.json").read_text())
    res = rec["main"]
    v, st = res["verifier"], res["settings"]
    n = st["repeats"]
    head = (
        f"{st['n_prompts']} GSM8K evaluation problems, at most {st['max_new_tokens']} new tokens, "
        f"{st['threads']} thread{'s' if st['threads'] != 1 else ''}, {n} interleaved repeats; verifier-only decoding: "
        f"{v['ms_per_token']:.1f} ms per token (median), NLL {v['nll_per_token']:.3f} nats per token, "
        f"GSM8K {round(v['gsm8k']['strict'] * v['gsm8k']['n'])}/{v['gsm8k']['n']}.\n\n"
    )
    lines = [
        "| rule, m | AL (bonus not counted) | expected AL | tokens / verifier call | wall-time speedup, "
        f"median [min, max] of {n} | verifier NLL / token | GSM8K strict / flexible |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in res["configs"].items():
        _, m, rule = name.split("|")
        g = c["gsm8k"]
        lines.append(
            f"| {rule}, {m.replace('=', ' = ')} | {c['al']:.3f} | {c['expected_al']:.3f} ± "
            f"{c['expected_al_se']:.3f} | {c['tokens_per_call']:.2f} | {_speedup_cell(c)} | "
            f"{c['nll_per_token']:.3f} | {round(g['strict'] * g['n'])}/{g['n']} / "
            f"{round(g['flexible'] * g['n'])}/{g['n']} |"
        )
    side = rec["side"]
    st = side["settings"]
    tail = (
        f"\n\nSide run ({st['n_prompts']} Spec-Bench prompts, {st['max_new_tokens']} tokens, "
        f"{st['repeats']} repeats): "
        + "; ".join(
            f"drafter {name.split('|')[0]}, {name.split('|')[2]} {name.split('|')[1].replace('=', ' = ')}: "
            f"AL {c['al']:.2f}, {c['tokens_per_call']:.2f} tokens per call, speedup {_speedup_cell(c)}"
            for name, c in side["configs"].items()
        )
        + "."
    )
    return head + "\n".join(lines) + tail


def _benchmark_table(report) -> str:
    """The recorded benchmark run (benchmarks/cpu_full.json, from ``cactus-theory benchmark --json``)."""
    import json

    from benchmarks.run import BenchmarkReport, GoalResult

    d = json.loads((ROOT / "benchmarks/cpu_full.json").read_text())
    rep = BenchmarkReport(
        tuple(GoalResult(**g) for g in d["goals"]), d["repeats"], d["quick"], d["environment"]
    )
    return rep.to_text().split("\n\nchecks against")[0]


#: What the recorded GPU check measures: a later commit touching one of these makes the record
#: predate the current code.
GPU_CODE = (
    "cactus_theory/samplers",
    "cactus_theory/solvers/*spike*.py",  # the spike root: its surface and private modules
    "cactus_theory/rules",
    "cactus_theory/analysis/calibration.py",
    "cactus_theory/analysis/_calibrated_rule.py",
    "scripts/gpu_check.py",
)


def latest_gpu_check(folder=None):
    """The newest ``benchmarks/gpu_check_*.json`` that records its date (``scripts/gpu_check.py
    --save``): (path, summary); None when there is none."""
    import json

    best = None
    for path in sorted((folder or ROOT / "benchmarks").glob("gpu_check_*.json")):
        d = json.loads(path.read_text())
        if not d.get("date") or d.get("dry_run"):
            continue
        key = (d.get("time_utc") or d["date"], path.name)
        if best is None or key > best[0]:
            best = (key, path, d)
    return None if best is None else best[1:]


def gpu_record_status(commit) -> str:
    """Whether the record's commit is the current code's, by git: ``"current"``, ``"predates"``
    (a later commit changed :data:`GPU_CODE`) or ``"unknown"`` (no commit recorded, or no git)."""
    import subprocess

    if not commit:
        return "unknown"
    try:
        later = subprocess.run(
            ["git", "rev-list", f"{commit}..HEAD", "--", *GPU_CODE],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return "predates" if later else "current"


def _gpu_table(report, folder=None) -> str:
    """The latest recorded CUDA check (benchmarks/gpu_check_*.json, from scripts/gpu_check.py --save)."""
    found = latest_gpu_check(folder)
    if found is None:
        return "no GPU check recorded (scripts/gpu_check.py --save writes one)"
    path, d = found
    status = gpu_record_status(d.get("commit"))
    commit = (d.get("commit") or "unknown")[:12]
    lines = [
        f"{d['device_name']}, {d['date']}, commit {commit}, torch {d['torch']} ({path.name}): "
        + ("every check passed" if d["passed"] else "SOME CHECKS FAILED OR WERE SKIPPED"),
        {
            "current": "No later commit changed the samplers, the spike solver, the rules, the "
            "calibration or the check.",
            "predates": "This record PREDATES the current code: later commits changed the samplers, "
            "the spike solver, the rules, the calibration or the check.",
            "unknown": "Whether this record predates the current code is unknown (no commit or no git).",
        }[status],
        "",
        f"{'rule':<22}{'law p':>7}  {'bf16==f32':<10}{'sync eager':<12}{'vLLM rows':<12}{'fused'}",
    ]
    for name, r in d["law"].items():
        sy = d["sync"].get(name, {})

        def word(v):
            if v is None:
                return "-"
            return "not run" if str(v).startswith("not run") else str(v).split(":")[0][:10]

        lines.append(
            f"{name:<22}{r['law_pvalue']:>7.3f}  {str(r['bf16_equal']):<10}{word(sy.get('eager')):<12}"
            f"{word(sy.get('vllm_rows')):<12}{word(sy.get('fused'))}"
        )
    lines.append(f"vLLM layouts (MRV1, MRV2): {d['sync'].get('vllm_layouts')}")
    rk = d.get("exact_root_kernel") or {}
    if "entries" in rk:
        lines.append(
            f"exact root, compiled kernel vs eager device path: {rk['differ']} of {rk['entries']:,} float32 "
            f"roots differ (at most {rk['max_ulps']} ulp), {rk['infeasible']} infeasible"
        )
        if "kernel_ms_512" in rk:
            lines.append(
                f"512 roots (the speed rows' drafted tokens): {rk['kernel_ms_512']:.3f} ms compiled, "
                f"{rk['eager_ms_512']:.2f} ms eager"
            )
    sp = d["speed"]
    if sp:
        lines += [
            "",
            "speed at B = 64, k = 8, V = 151,936 (median of 10, ms):",
            f"{'rule':<22}{'accept path':>12}{'forward':>10}{'fused':>10}{'peak GiB':>10}",
        ]
        for name, r in sp.items():
            lines.append(
                f"{name:<22}{r['accept_ms']:>12.2f}{r['forward_ms']:>10.2f}"
                f"{r.get('forward_fused_ms', float('nan')):>10.2f}{r['peak_gib']:>10.2f}"
            )
    goal = d.get("goals", {}).get("exact_over_taylor_accept")
    if goal:
        lines.append(
            f"exact root / Taylor accept path: {goal['ratio']:.2f}x (goal <= {goal['goal']}x: "
            f"{'met' if goal['met'] else 'MISSED'})"
        )
    real = d.get("real_kernels") or {}
    for name, r in real.items():
        if name == "source" or not isinstance(r, dict):
            continue
        if "passed" in r and "min_law_pvalue" in r:
            lines.append(
                f"{name}: SpS law {'passed' if r['passed'] else 'FAILED'} (smallest law p {r['min_law_pvalue']:.3g}, "
                f"{r['num_checks']} checks at family-wise alpha {r['alpha']:g}, {r['num_samples']:,} draws a case)"
            )
        else:
            lines.append(f"{name}: {r.get('error') or r.get('skipped')}")
    an = d.get("analysis") or {}
    for name, r in (an.get("speed") or {}).items():
        lines.append(
            f"one-step analysis {name}: torch (CUDA) {r['torch_rows_per_s']:.0f} rows/s, numpy "
            f"{r['numpy_rows_per_s']:.2f} rows/s (batch 64, V = 151,936; max |h diff| "
            f"{r['emitted_max_abs_diff']:.1e})"
        )
    po = d.get("plugin_overhead") or {}
    if po and "rules" not in po:
        lines.append(f"vLLM plugin step ratio: {next(iter(po.values()))}")
    return "\n".join(lines)


def _engine_costs_table(report) -> str:
    """Acceptance and emitted KL/TV per token of every engine setting on the shipped recordings
    (cactus_theory.analysis.engine_settings)."""
    from cactus_theory.analysis.engine_settings import all_settings, setting_costs
    from cactus_theory.logits import load_dump, shipped_dumps

    dumps = [load_dump(f) for f in sorted(shipped_dumps())]
    rows = setting_costs(all_settings(), [tuple(d.pairs()) for d in dumps])

    def num(x, digits):
        return "inf" if math.isinf(x) else f"{x:.{digits}f}"

    lines = [
        f"{rows[0]['positions']:,} positions: every position of the {len(dumps)} shipped recordings "
        f"({', '.join(d.name for d in dumps)}), pooled.",
        "",
        "| engine | setting | rule | drafts | acceptance | KL / token, mean | KL, worst | KL = inf "
        "| TV / token, mean | TV, worst |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['setting']} | `{r['rule']}` | {r['drafting']} | {r['acceptance']:.3f} "
            f"| {num(r['kl_mean'], 4)} | {num(r['kl_max'], 3)} | {100 * r['kl_inf_share']:.1f}% "
            f"| {r['tv_mean']:.4f} | {r['tv_max']:.3f} |"
        )
    return "\n".join(lines)


#: What each marker holds.
BLOCKS = {
    "taylor-grid": Block(
        ("taylor/grid",), where=(("q_n", (0.05, 0.35, 0.5, 0.9)), ("delta", (0.01, 0.1, 0.5, 1.0)))
    ),
    "families-noisy-copy-truncated": Block(
        ("families/noisy_copy/truncated",), where=(("delta", (0.1, 1.0)),)
    ),
    "rules-noisy-copy-truncated": Block(("rules/noisy-copy-truncated",), drop=("knobs",)),
    "frontier": Block(("frontier/F", "frontier/operating-points")),
    "calibration": Block(("calibration/noisy-copy",)),
    "calibration-sentence": Block(text=_calibration_sentence, fenced=False),
    "chain": Block(("chain/noisy-copy",)),
    "real-early-exit": Block(("real/early-exit-25/per-draft-vs-emitted",)),
    "real-distilled-chain": Block(("real/distilled/chain",)),
    "real-gemma3": Block(("real/full-vocab-gemma3",)),
    "quickstart-output": Block(example=True),
    "shipped-pairs": Block(text=_shipped_pairs_table, fenced=False, needs_report=False),
    "decode": Block(text=_decode_table, fenced=False, needs_report=False),
    "benchmark": Block(text=_benchmark_table, needs_report=False),
    "gpu-check": Block(text=_gpu_table, needs_report=False),
    "claims": Block(("claims/verdicts",), drop=("evidence",)),
    "sequence": Block(("sequence/synthetic", "sequence/real"), drop=("knob",)),
    "engine-costs": Block(text=_engine_costs_table, fenced=False, needs_report=False),
    "engines-drafting-example": Block(example=True),
}

BEGIN = "<!-- BEGIN generated:{name} (scripts/update_readme.py) -->"
END = "<!-- END generated:{name} -->"
_PATTERN = re.compile(
    r"<!-- BEGIN generated:(?P<name>[\w.-]+) \(scripts/update_readme\.py\) -->\n"
    r"(?P<body>.*?)\n?<!-- END generated:(?P=name) -->",
    re.S,
)


def _filtered(table: Table, block: Block) -> Table:
    def keep(row):
        return all(
            any(math.isclose(float(row[k]), v, rel_tol=1e-12) for v in allowed) for k, allowed in block.where
        )

    cols = tuple(c for c in table.columns if c.key not in block.drop)
    return Table(table.name, table.title, cols, tuple(r for r in table.rows if keep(r)), table.layout)


def render_block(report, name: str, page_text: str | None = None) -> str:
    """The text of block ``name`` from ``report`` (a :class:`cactus_theory.report.Report`).

    An example block runs the last python block above its markers in ``page_text`` (default: the
    page that holds the markers)."""
    block = BLOCKS[name]
    if block.example:
        if page_text is None:
            page_text = read_pages()[locate_blocks(read_pages())[name]]
        return f"```text\n{run_example(example_code(page_text, name))}\n```"
    if block.text is not None:
        body = block.text(report)
    else:
        body = "\n\n".join(format_table(_filtered(report.table(t), block), "text") for t in block.tables)
    return f"```\n{body}\n```" if block.fenced else body


def blocks_for(sections=None) -> list:
    """Names of the blocks whose tables come from ``sections`` (all blocks when None)."""
    return [n for n, b in BLOCKS.items() if sections is None or b.sections <= set(sections)]


def generate(names=None, seed: int = 0, progress: bool = False, pages: dict | None = None) -> dict:
    """Compute a fresh report (only the sections needed) and render the blocks ``names``.

    ``pages`` (path -> text, default :func:`read_pages`) supplies the example blocks' code."""
    names = list(BLOCKS) if names is None else list(names)
    sections = sorted(set().union(*(BLOCKS[n].sections for n in names))) if names else []
    report = compute_report(sections, seed=seed, progress=progress) if sections else None
    examples = [n for n in names if BLOCKS[n].example]
    where = {}
    if examples:
        pages = read_pages() if pages is None else pages
        where = locate_blocks(pages)
    return {n: render_block(report, n, pages[where[n]] if n in where else None) for n in names}


def page_paths(root: Path = ROOT) -> list:
    """The pages that may hold generated blocks: ``README.md`` and every ``docs/*.md``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def read_pages(root: Path = ROOT) -> dict:
    """Path -> text of every page of :func:`page_paths`."""
    return {path: path.read_text() for path in page_paths(root)}


_BEGIN_ANY = re.compile(r"<!-- BEGIN generated:(?P<name>[\w.-]+) \(scripts/update_readme\.py\) -->")
_END_ANY = re.compile(r"<!-- END generated:(?P<name>[\w.-]+) -->")


def readme_blocks(text: str) -> dict:
    """The generated blocks currently in one page's text: name -> body."""
    return {m.group("name"): m.group("body") for m in _PATTERN.finditer(text)}


def locate_blocks(pages: dict, names=None) -> dict:
    """Block name -> the page (a key of ``pages``) that holds its markers.

    ValueError naming the block when a block of ``names`` (default: all of :data:`BLOCKS`) has
    markers in no page, in more than one page or more than once in a page, when a BEGIN marker
    has no matching END (or the reverse), or when a page has markers of an unknown block."""
    names = list(BLOCKS) if names is None else list(names)
    found: dict = {}
    for path, text in pages.items():
        begins = [m.group("name") for m in _BEGIN_ANY.finditer(text)]
        ends = [m.group("name") for m in _END_ANY.finditer(text)]
        paired = [m.group("name") for m in _PATTERN.finditer(text)]
        for name in sorted(set(begins) | set(ends)):
            if not begins.count(name) == ends.count(name) == paired.count(name):
                raise ValueError(
                    f"{path}: the markers of block {name!r} do not pair up "
                    f"({begins.count(name)} BEGIN, {ends.count(name)} END)"
                )
            if name not in BLOCKS:
                raise ValueError(f"{path}: markers of unknown block {name!r}")
            found.setdefault(name, []).extend([path] * paired.count(name))
    where = {}
    for name in names:
        holders = found.get(name, [])
        if not holders:
            raise ValueError(f"block {name!r}: no markers in any page ({BEGIN.format(name=name)})")
        if len(holders) > 1:
            raise ValueError(
                f"block {name!r}: markers found {len(holders)} times "
                f"({', '.join(str(h) for h in holders)}); each block lives in exactly one page"
            )
        where[name] = holders[0]
    return where


def current_blocks(pages: dict) -> dict:
    """Name -> body of every generated block in ``pages`` (checked by :func:`locate_blocks`)."""
    locate_blocks(pages)
    out = {}
    for text in pages.values():
        out.update(readme_blocks(text))
    return out


def replace_blocks(text: str, blocks: dict) -> str:
    """``text`` with each block's body replaced (ValueError naming a block whose markers are missing)."""
    present = readme_blocks(text)
    for name in blocks:
        if name not in present:
            raise ValueError(f"no markers for block {name!r} ({BEGIN.format(name=name)})")

    def sub(m):
        name = m.group("name")
        if name not in blocks:
            return m.group(0)
        return f"{BEGIN.format(name=name)}\n{blocks[name]}\n{END.format(name=name)}"

    return _PATTERN.sub(sub, text)


def main(argv=None) -> int:
    """Command line: rewrite the pages' blocks, or ``--check`` them (exit 1 naming the stale blocks)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if a page is stale")
    ap.add_argument("--sections", nargs="*", default=None, help="only the blocks of these report sections")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose README.md and docs/*.md to use")
    args = ap.parse_args(argv)
    pages = read_pages(Path(args.root))
    try:
        where = locate_blocks(pages)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fresh = generate(blocks_for(args.sections), progress=True, pages=pages)
    if args.check:
        current = current_blocks(pages)
        stale = [n for n, body in fresh.items() if current.get(n) != body]
        if stale:
            listing = ", ".join(f"{n} ({where[n].relative_to(Path(args.root))})" for n in stale)
            print(f"stale blocks: {listing} (run python scripts/update_readme.py)", file=sys.stderr)
            return 1
        print(f"README.md and docs/*.md match a fresh report ({len(fresh)} blocks in {len(pages)} pages)")
        return 0
    from cactus_theory._io import atomic_write_text

    for path, text in pages.items():
        mine = {n: body for n, body in fresh.items() if where[n] == path}
        new = replace_blocks(text, mine) if mine else text
        if new != text:
            atomic_write_text(path, new)
        if mine:
            print(f"updated {len(mine)} blocks in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
