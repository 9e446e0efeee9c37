"""The ``cactus-theory`` command line: one table of thin subcommands over library functions.

Every subcommand is declared once in :data:`SUBCOMMANDS` (its arguments and its handler) and shares
the same flags where they apply: ``-o/--output`` (written atomically; its folder is checked before
any work starts), ``--json`` (the same numbers as data), ``--csv`` (tables), ``--seed``,
``-m/--draft-length`` and ``--knob NAME=VALUE`` (one parser, :func:`parse_knobs`). Defaults are
shown in ``--help``.

Errors in arguments or inputs exit with status 2 and one line on stderr
(``cactus-theory <command>: error: ...``); a missing optional dependency is such a line too, naming
the extra to install (``pip install 'cactus-theory[real]'``).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, delta the
per-draft budget, eps a target emitted divergence (Hao & Mou, ICLR 2026).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from ._cli import (
    _emit,
    _Formatter,
    _Parser,
    _positive_int,
    _write,  # noqa: F401
    add_output,
    add_per_file,
    add_seed,
    dispatch,
    parse_knobs,
)  # (OPTIONAL_EXTRAS, parse_knobs, ... re-exported)
from ._extras import MissingExtraError

__all__ = ["main", "SUBCOMMANDS", "Subcommand"]


def add_pair_input(p):
    """Add ``--q``/``--p`` (one row each) or ``--input`` (a file or a shipped recording)."""
    p.add_argument("--q", default=None, metavar="Q1,Q2,...", help="the verifier row q (comma-separated)")
    p.add_argument("--p", default=None, metavar="P1,P2,...", help="the drafter row p (comma-separated)")
    p.add_argument(
        "--input",
        "-i",
        default=None,
        metavar="FILE|NAME",
        help="(q, p) rows from a .npy/.npz/.json file or a shipped recording "
        "(distilled, early-exit-25, requant-3, requant-4)",
    )


def _pairs(args):
    from .inputs import load_pairs, parse_probs

    if args.input is not None:
        if args.q is not None or args.p is not None:
            raise ValueError("input: give either --input or --q and --p, not both")
        return load_pairs(args.input)
    if args.q is None or args.p is None:
        raise ValueError("q: give --q and --p (comma-separated rows) or --input FILE")
    from ._validation import as_prob_pair

    q, p = as_prob_pair(parse_probs(args.q, "q"), parse_probs(args.p, "p"), target_name="q", draft_name="p")
    return q[None, :], p[None, :]


# --------------------------------------------------------------------------- output


def _rows_table(rows, name="", title=""):
    from .report import Column, Table

    rows = [dict(r) for r in rows]
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]

    def fmt(k):
        vals = [r.get(k) for r in rows if r.get(k) is not None]
        if any(isinstance(v, dict) for v in vals):
            return "knobs"
        if any(isinstance(v, (str, bool, list, tuple)) for v in vals):
            return "s"
        if vals and all(isinstance(v, int) for v in vals):
            return "d"
        finite = [
            abs(float(v)) for v in vals if isinstance(v, (int, float)) and abs(float(v)) != float("inf")
        ]
        return ".4f" if all(v < 1e4 for v in finite) else ".4g"

    return Table(name, title, tuple(Column(k, k, fmt(k)) for k in keys), tuple(rows))


# --------------------------------------------------------------------------- subcommands


def _args_report(p):
    from .report import SECTIONS

    p.add_argument(
        "--sections",
        nargs="*",
        default=None,
        choices=list(SECTIONS),
        metavar="NAME",
        help="subset of sections (default: all; listed below)",
    )
    add_seed(p, "seed of every synthetic family")
    add_output(
        p,
        csv_flag=True,
        output_help="write to this file (atomically); .md writes Markdown with "
        "the figures linked, .json data, .csv tables, anything else text",
    )
    p.add_argument(
        "--figures-dir",
        default="figures",
        help="folder of the figures that Markdown output links (relative links)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar over sections")


def _cmd_report(args) -> int:
    from .report import compute_report, format_report

    report = compute_report(args.sections, seed=args.seed, progress=not args.no_progress)
    suffix = os.path.splitext(args.output or "")[1].lower()
    if args.json or suffix == ".json":
        from .report import json_ready

        _write(args, json.dumps(json_ready(report.to_dict()), indent=2, allow_nan=False))
    elif args.csv or suffix == ".csv":
        _write(args, format_report(report, "csv"))
    elif suffix in (".md", ".markdown"):
        rel = os.path.relpath(
            os.path.abspath(args.figures_dir), os.path.dirname(os.path.abspath(args.output))
        )
        _write(args, format_report(report, "markdown", figures_dir=rel))
    else:
        _write(args, format_report(report, "text"))
    return 0


def _args_rules(p):
    add_output(p, csv_flag=True)


def _cmd_rules(args) -> int:
    from .rules import RULES

    rows, lines = [], []
    for name, spec in RULES.items():
        knobs = {k.name: k.default for k in spec.knobs}
        sps = spec.sps_knobs if spec.sps_knobs is not None else f"none ({spec.sps_note})"
        rows.append(dict(rule=name, family=spec.family, knobs=knobs, sps_at=str(sps), summary=spec.summary))
        kt = ", ".join(f"{k}={v!r}" for k, v in knobs.items()) or "-"
        lines.append(f"{name:<26} [{spec.family}] knobs: {kt}; SpS at: {sps}\n    {spec.summary}")
    _emit(args, text="\n".join(lines), data=rows, tables=[_rows_table(rows, "rules")])
    return 0


def _args_figures(p):
    p.add_argument("--out", "-o", "--output", dest="out", default="figures", help="folder of the figures")
    p.add_argument(
        "--format",
        action="append",
        choices=("pdf", "png"),
        default=None,
        dest="formats",
        help="file format, repeatable (default: pdf and png)",
    )
    p.add_argument("--names", nargs="*", default=None, help="subset of figures (default: all)")
    p.add_argument(
        "--input",
        "-i",
        action="append",
        default=None,
        metavar="DUMP",
        help="draw the figures of your own recordings instead (repeatable): a file cactus-theory "
        "dump wrote, its output folder (every dump inside) or a shipped recording's name; "
        "figures: per_draft_vs_emitted, acceptance_vs_delta, frontier, calibration (one per "
        "recording), acceptance_by_category, al_by_m (all recordings in one)",
    )
    add_seed(p, "seed of the synthetic inputs (with --input: of the positions' subsample)")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")


def _cmd_figures(args) -> int:
    formats = list(dict.fromkeys(args.formats or ["pdf", "png"]))
    if args.input:
        from .figures import write_dump_figures

        written = write_dump_figures(
            args.out, args.input, names=args.names, formats=tuple(formats), seed=args.seed
        )
    else:
        from .figures import write_figures

        written = write_figures(args.out, names=args.names, formats=tuple(formats), seed=args.seed)
    paths = [str(p) for p in written]
    if args.json:
        sys.stdout.write(json.dumps({"paths": paths}, indent=2) + "\n")
    else:
        sys.stdout.write("".join(p + "\n" for p in paths))
    return 0


def _args_benchmark(p):
    p.add_argument("--repeats", type=_positive_int, default=5, help="timed repeats per case (medians)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (small batch, five rules at a small sampler shape): not the goals' numbers",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="intra-op torch threads of the sampler timings (default 2: the goals' condition)",
    )
    p.add_argument(
        "--all-rules",
        action="store_true",
        help="time every registered rule's sampler (default: one rule per family)",
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="the chunked analysis' rows at every size (100,000 rows at V = 1,000; "
        "1,024 at V = 151,936): minutes",
    )
    p.add_argument(
        "--sections",
        type=_benchmark_sections,
        default=None,
        help="comma-separated parts to run, of spike, emitted, analysis, samplers, frontier, scale "
        "(default: all)",
    )
    add_seed(p, "seed of the random (q, p) rows")
    add_output(p)


def _benchmark_sections(text: str):
    from .benchmark import SECTIONS

    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in SECTIONS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(SECTIONS)}")
    return names


def _cmd_benchmark(args) -> int:
    from .benchmark import SAMPLER_THREADS, SECTIONS, run_benchmarks

    res = run_benchmarks(
        repeats=args.repeats,
        quick=args.quick,
        seed=args.seed,
        all_rules=args.all_rules,
        scale=args.scale,
        threads=SAMPLER_THREADS if args.threads is None else args.threads,
        sections=SECTIONS if args.sections is None else args.sections,
    )
    _emit(args, text=res.to_text(), data=res.to_dict())
    return 0


def _args_solve(p):
    add_pair_input(p)
    p.add_argument("--row", type=int, default=0, help="which row of --input to solve")
    p.add_argument("-n", "--token", type=int, required=True, help="the drafted token n (an index into q, p)")
    p.add_argument("--delta", type=float, default=0.5, help="per-draft budget delta")
    p.add_argument("--divergence", default="kl", help="divergence of the budget D(h||q)")
    p.add_argument(
        "--methods",
        default="taylor,exact,cvxpy",
        help="comma-separated solvers, side by side (taylor is KL's Corollary 5 point)",
    )
    add_output(p, csv_flag=True)


def _pick_row(q, p, row):
    if not -q.shape[0] <= row < q.shape[0]:
        raise ValueError(f"row: {row} out of range for {q.shape[0]} rows")
    return q[row], p[row]


def _cmd_solve(args) -> int:
    import cactus_theory as ct

    q, p = _pick_row(*_pairs(args), args.row)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise ValueError("methods: give at least one of taylor, exact, cvxpy")
    sols, rows, notes = [], [], []
    for m in methods:
        try:
            s = ct.solve_spike(q, p, args.token, args.delta, divergence=args.divergence, method=m)
        except ValueError as exc:
            if m == "taylor" and args.divergence != "kl" and len(methods) > 1:
                notes.append(f"taylor: {exc}")  # Corollary 5's point is for the KL budget only
                continue
            raise
        sols.append(s)
        rows.append(
            dict(
                method=s.method,
                gamma=s.gamma,
                per_draft_divergence=s.per_draft_divergence,
                acceptance=s.acceptance,
                budget_hit=s.budget_hit,
                within_budget=s.within_budget,
            )
        )
    table = _rows_table(
        rows,
        "solve",
        f"q_n = {q[args.token]:.6g}, p_n = {p[args.token]:.6g}, "
        f"n = {args.token}, delta = {args.delta:g}, divergence = {args.divergence}",
    )
    from .report import format_table

    text = "\n".join([format_table(table)] + notes)
    _emit(args, text=text, data={"solutions": [s.to_dict() for s in sols], "notes": notes}, tables=[table])
    return 0


def _args_analyze(p):
    add_pair_input(p)
    p.add_argument("--rules", default=None, help="comma-separated rule names (default: every rule)")
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="per-draft budget of the Cactus rules (default: each rule's own default)",
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="knob for every chosen rule that has it, repeatable (e.g. --knob alpha=0.3)",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="bound on the working memory (e.g. 256MB, 1GiB; default 256 MiB): rows are "
        "analysed in chunks; --input may be a folder of .npy/.npz shards, read lazily",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar over chunks")
    add_per_file(p)
    add_output(p, csv_flag=True)


def _rule_list(text):
    if text is None:
        return None
    names = [r.strip() for r in text.split(",") if r.strip()]
    if not names:
        raise ValueError("rules: empty list")
    return names


def _cmd_analyze(args) -> int:
    from pathlib import Path

    import cactus_theory as ct

    from .rules import RULES

    folder = args.input is not None and Path(args.input).is_dir()
    if args.per_file and not folder:
        raise ValueError("per-file: applies to --input FOLDER (each of its files analysed apart)")
    if folder:  # a folder of shards, read lazily
        if args.q is not None or args.p is not None:
            raise ValueError("input: give either --input or --q and --p, not both")
        from .rows import as_row_source, shard_files

        if args.per_file:
            sources = [(f.name, as_row_source(f)) for f in shard_files(args.input)]
        else:
            sources = [(None, as_row_source(args.input))]  # refuses different recordings
    else:
        sources = [(None, _pairs(args))]
    rules = _rule_list(args.rules)
    flat = parse_knobs(args.knob)
    kw = {}
    if flat:  # each --knob NAME=VALUE goes to every chosen rule that declares NAME
        names = rules if rules is not None else list(RULES)
        for name in names:
            if name not in RULES:
                raise ValueError(f"rules: unknown rule {name!r}")
        per = {
            n: {k: v for k, v in flat.items() if any(kn.name == k for kn in RULES[n].knobs)} for n in names
        }
        unused = [k for k in flat if not any(k in d for d in per.values())]
        if unused:
            raise ValueError(f"knob: no chosen rule has a knob {unused[0]!r}")
        kw["knobs"] = {n: d for n, d in per.items() if d}
    if args.delta is not None:
        kw["delta"] = args.delta
    rows, data, shapes = [], [], []
    for name, src in sources:
        if isinstance(src, tuple):
            q, p = src
            shape = q.shape
        else:
            q, p, shape = src, None, (src.n_rows, max(V for _, V in src.widths()))
        res = ct.analyze_rules(q, p, rules, max_memory=args.max_memory, progress=not args.no_progress, **kw)
        shapes.append(shape)
        if name is None:
            rows += res.rows()
            data = res.to_dict()
        else:
            rows += [{"file": name, **r} for r in res.rows()]
            data.append({"file": name, "positions": shape[0], **res.to_dict()})
    if len(sources) == 1 and sources[0][0] is None:
        title = f"{shapes[0][0]} positions, V = {shapes[0][1]}"
    else:
        title = f"{len(sources)} files, each analysed apart: " + ", ".join(
            f"{n} ({s[0]} positions, V = {s[1]})" for (n, _), s in zip(sources, shapes)
        )
        data = {"files": data}
    table = _rows_table(rows, "analyze", title)
    from .report import format_table

    _emit(args, text=format_table(table), data=data, tables=[table])
    return 0


def _float_list(text, name):
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise ValueError(f"{name}: empty list")
    return vals


def _args_frontier(p):
    add_pair_input(p)
    p.add_argument(
        "--eps", default="0,0.01,0.05,0.1,0.3,1", help="target emitted divergences eps (comma-separated)"
    )
    p.add_argument("--divergence", default="kl", help="divergence D(o||q) of the constraint")
    add_output(p, csv_flag=True)


def _cmd_frontier(args) -> int:
    import cactus_theory as ct

    q, p = _pairs(args)
    res = ct.optimal_frontier(q, p, eps=_float_list(args.eps, "eps"), divergence=args.divergence)
    table = _rows_table(
        res.rows(), "frontier", f"{q.shape[0]} positions, V = {q.shape[1]}; means over positions"
    )
    from .report import format_table

    _emit(args, text=format_table(table), data=res.to_dict(), tables=[table])
    return 0


def _args_calibrate(p):
    add_pair_input(p)
    p.add_argument("--eps", type=float, required=True, help="target emitted divergence eps = D(h_alg||q)")
    p.add_argument("--rule", default="cactus-taylor", help="the rule whose delta is calibrated")
    p.add_argument("--divergence", default="kl", help="divergence of the target")
    add_output(p, csv_flag=True)


def _cmd_calibrate(args) -> int:
    import cactus_theory as ct

    q, p = _pairs(args)
    res = ct.calibrate_delta(q, p, args.eps, rule=args.rule, divergence=args.divergence)
    table = _rows_table(res.rows(), "calibrate", repr(res).splitlines()[0] if repr(res) else "")
    from .report import format_table

    _emit(args, text=format_table(table), data=res.to_dict(), tables=[table])
    return 0


@dataclass(frozen=True)
class Subcommand:
    """One row of the subcommand table: help line, argument builder and handler.

    ``arguments`` and ``handler`` are callables or ``"module:function"`` strings imported when
    needed (modules of the package itself; an ImportError there is a bug and is raised).
    """

    help: str
    arguments: Callable | str
    handler: Callable | str
    description: str = ""


def _args_audit(p):
    p.add_argument(
        "--input",
        "-i",
        required=True,
        metavar="DUMP|FILE",
        help="a dump file or a shipped recording (distilled, early-exit-25, requant-3, requant-4), "
        "a .npy/.npz/.json file of (q, p) rows, or a folder of .npy/.npz shards",
    )
    p.add_argument("--eps", type=float, default=0.1, help="target emitted divergence (per token)")
    p.add_argument("--rules", default=None, help="comma-separated rule names (default: every rule)")
    p.add_argument(
        "--per", default="token", choices=("token", "sequence"), help="calibrate per token or per sequence"
    )
    p.add_argument("--divergence", default="kl", help="divergence of the target")
    p.add_argument("--raw", action="store_true", help="audit a dump's raw rows (temperature 1, untruncated)")
    p.add_argument(
        "--positions",
        type=int,
        default=None,
        metavar="N",
        help="a dump's first trajectories up to at least N positions (default: all)",
    )
    p.add_argument(
        "-m",
        "--draft-lengths",
        default="1,2,4,8",
        help="draft lengths m of the accepted-length columns (comma-separated)",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="with --input a folder of .npy/.npz shards: bound on the working memory (e.g. 256MB)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (over rules; over chunks for a folder of shards)",
    )
    p.add_argument("--figure", default=None, metavar="PATH", help="also write the figure (.pdf or .png)")
    p.add_argument("--markdown", action="store_true", help="print Markdown (also when --output ends in .md)")
    add_per_file(p)
    add_output(p, csv_flag=True)


def _is_dump(path) -> bool:
    """True for a compact dump archive (it holds ``__meta__``), False for a plain (q, p) npz."""
    from pathlib import Path

    import numpy as np

    if Path(path).suffix.lower() != ".npz" or not Path(path).is_file():
        return False
    try:
        with np.load(path, allow_pickle=False) as z:
            return "__meta__" in z.files
    except (OSError, ValueError):
        return False


def _audit_input(source, args, kw):
    """The audit of one ``--input`` (a dump, a file of (q, p) rows, or a folder of shards)."""
    from pathlib import Path

    from .api import audit
    from .inputs import load_pairs, shipped_pair_names

    progress = not args.no_progress
    if Path(source).is_dir():  # a folder of shards, read chunk by chunk
        for flag, value in (("raw", args.raw), ("positions", args.positions)):
            if value:
                raise ValueError(f"{flag}: applies to dumps, not to a folder of shards")
        return audit(source, max_memory=args.max_memory, progress=progress, **kw)
    if str(source) in shipped_pair_names() or _is_dump(source):
        rows = "raw" if args.raw else "processed"
        return audit(source, rows=rows, max_positions=args.positions, progress=progress, **kw)
    if args.raw:
        raise ValueError("raw: needs a dump (its raw rows); --input holds (q, p) rows only")
    if args.positions is not None:
        raise ValueError("positions: applies to dumps only")
    q, p = load_pairs(source)
    return audit(q, p, progress=progress, **kw)


def _cmd_audit(args) -> int:
    from pathlib import Path

    from ._cli import check_output_path
    from ._tables import json_ready
    from .simulate.audit import format_audit

    if args.figure is not None:
        check_output_path(args.figure, "figure")
        if Path(args.figure).suffix.lower() not in (".pdf", ".png"):
            raise ValueError(f"figure: expected a .pdf or .png path, got {args.figure!r}")
    try:
        ms = tuple(int(x) for x in str(args.draft_lengths).split(",") if x.strip())
    except ValueError:
        raise ValueError(
            f"draft-lengths: expected comma-separated integers, got {args.draft_lengths!r}"
        ) from None
    kw = dict(
        eps=args.eps, rules=rule_list(args.rules), per=args.per, divergence=args.divergence, draft_lengths=ms
    )
    if args.per_file:
        if not Path(args.input).is_dir():
            raise ValueError("per-file: applies to --input FOLDER (each of its files audited apart)")
        if args.figure is not None:
            raise ValueError("figure: one figure per audit; without --per-file, give one file")
        from .rows import shard_files

        results = [(f.name, _audit_input(str(f), args, kw)) for f in shard_files(args.input)]
    else:
        results = [(None, _audit_input(args.input, args, kw))]
    if args.figure is not None:
        from .figures import figure_audit, save_figure

        stem = Path(args.figure)
        save_figure(figure_audit(results[0][1]), stem.with_suffix(""), (stem.suffix.lower()[1:],))
    suffix = os.path.splitext(args.output or "")[1].lower()
    if args.json or suffix == ".json":
        data = {"files": [{"file": name, **res.to_dict()} for name, res in results]}
        _write(
            args,
            json.dumps(
                json_ready(results[0][1].to_dict() if not args.per_file else data), indent=2, allow_nan=False
            ),
        )
        return 0
    style = "csv" if args.csv or suffix == ".csv" else "text"
    style = "markdown" if style == "text" and (args.markdown or suffix in (".md", ".markdown")) else style
    head = {"csv": "# {}\n", "markdown": "### {}\n\n", "text": "== {} ==\n"}[style]
    _write(
        args,
        "\n\n".join((head.format(name) if name else "") + format_audit(res, style) for name, res in results),
    )
    return 0


def _resolve(target):
    if callable(target):
        return target
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


def _report_epilog():
    from .report import SECTION_SUMMARIES

    return "sections:\n" + "\n".join(f"  {k:<12} {v}" for k, v in SECTION_SUMMARIES.items())


#: The subcommand table: name -> :class:`Subcommand`.
SUBCOMMANDS = {
    "report": Subcommand(
        "the main job: exact results on embedded defaults (text, Markdown, JSON, CSV)",
        _args_report,
        _cmd_report,
    ),
    "rules": Subcommand("list every registered rule with its knobs", _args_rules, _cmd_rules),
    "solve": Subcommand(
        "one (q, p, n, delta): Taylor point, exact root and cvxpy oracle side by side",
        _args_solve,
        _cmd_solve,
    ),
    "analyze": Subcommand(
        "rules on a set of (q, p) rows: acceptance, per-draft and emitted divergences, frontier gap",
        _args_analyze,
        _cmd_analyze,
    ),
    "frontier": Subcommand(
        "the optimal acceptance at each target emitted divergence eps", _args_frontier, _cmd_frontier
    ),
    "calibrate": Subcommand(
        "the delta whose emitted divergence meets a target eps", _args_calibrate, _cmd_calibrate
    ),
    "audit": Subcommand(
        "every rule calibrated to one true emitted divergence on a dump: acceptance, AL_m, "
        "KL/TV, frontier gap, EOS shift",
        _args_audit,
        _cmd_audit,
    ),
    "simulate": Subcommand(
        "simulate a rule over synthetic trajectories (teacher-forced) beside exact",
        "cactus_theory.simulate.cli:add_arguments",
        "cactus_theory.simulate.cli:run",
    ),
    "figures": Subcommand("write the figures (PDF and PNG)", _args_figures, _cmd_figures),
    "benchmark": Subcommand("speed goals as medians and ratios", _args_benchmark, _cmd_benchmark),
    "models": Subcommand(
        "list the offline models and drafters; --prepare builds the local cache",
        "cactus_theory.logits._commands:add_models_arguments",
        "cactus_theory.logits._commands:run_models",
    ),
    "dump": Subcommand(
        "record verifier/drafter next-token distributions (real models)",
        "cactus_theory.logits._commands:add_dump_arguments",
        "cactus_theory.logits._commands:run_dump",
    ),
    "decode": Subcommand(
        "real speculative decoding vs verifier-only decoding (real models)",
        "cactus_theory.logits._commands:add_decode_arguments",
        "cactus_theory.logits._commands:run_decode",
    ),
}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("cactus-theory")
    except Exception:  # noqa: BLE001 - not installed as a distribution: fall back to the package
        import cactus_theory

        return getattr(cactus_theory, "__version__", "unknown")


def _missing_extra_handler(exc: MissingExtraError):
    """The handler of a subcommand whose extra is missing: it raises the one-line error."""

    def handler(args):
        raise exc

    return handler


def build_parser() -> argparse.ArgumentParser:
    """The full ``cactus-theory`` parser, built from :data:`SUBCOMMANDS`."""
    parser = _Parser(prog="cactus-theory", description=__doc__.split("\n\n")[0], formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for name, sc in SUBCOMMANDS.items():
        epilog = _report_epilog() if name == "report" else None
        p = sub.add_parser(
            name,
            help=sc.help,
            description=sc.description or sc.help,
            epilog=epilog,
            formatter_class=_Formatter,
        )
        try:
            _resolve(sc.arguments)(p)
        except MissingExtraError as exc:  # a subcommand of an extra that is not installed
            p.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            p.set_defaults(handler=_missing_extra_handler(exc), missing_extra=True)
            continue
        p.set_defaults(handler=sc.handler)
    return parser


def main(argv=None) -> int:
    """Entry point: parse, check the output paths, dispatch; errors exit 2 with one line.

    Returns the exit status (argparse's own exits, such as ``--help`` and bad flags, included).
    """
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        # a subcommand whose extra is missing has no options to parse: its one line, not argparse's
        if unknown and not getattr(args, "missing_extra", False):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return dispatch(args, f"cactus-theory {args.command}", lambda a: _resolve(a.handler)(a))


if __name__ == "__main__":
    sys.exit(main())
