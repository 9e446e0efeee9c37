"""The ``cactus-theory`` command line: one table of thin subcommands over library functions.

Every subcommand is declared once in :data:`_SUBCOMMANDS` (its arguments and its handler) and shares
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
    _write,
    add_output,
    add_per_file,
    add_seed,
    dispatch,
)
from ._cli_pairs import (
    analyze_arguments,
    calibrate_arguments,
    frontier_arguments,
    rows_table,
    run_analyze,
    run_calibrate,
    run_frontier,
    run_solve,
    solve_arguments,
)
from ._extras import MissingExtraError

__all__ = ["main"]


# --------------------------------------------------------------------------- subcommands


def _args_report(p):
    from .report import _all_sections

    p.add_argument(
        "--sections",
        nargs="*",
        default=None,
        choices=list(_all_sections()),
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
        from ._tables import json_ready

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
    _emit(args, text="\n".join(lines), data=rows, tables=[rows_table(rows, "rules")])
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


def _plugin_command(name: str, ep) -> _Subcommand:
    """The subcommand ``name`` of an entry point of ``cactus_theory.commands``:
    its module's ``add_arguments`` and ``run`` with the shared ``--seed``, ``-o/--output`` and
    ``--json``; a module not importable here (this repository's lab from an installed wheel)
    gives a subcommand that says so in one line (exit status 2)."""
    from .report import _load_entry_point

    try:
        module = _load_entry_point(ep, name)
    except ValueError as exc:
        return _Subcommand(f"({exc})", _unavailable_arguments(exc), _cmd_unavailable)

    def arguments(p):
        module.add_arguments(p)
        add_seed(p)
        add_output(p)

    def handler(args):
        res = module.run(args)
        _emit(args, text=res.to_text(), data=res.to_dict())
        return 0

    return _Subcommand(module.HELP, arguments, handler)


def _unavailable_arguments(exc: ValueError):
    def arguments(p):
        p.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(unavailable=exc, missing_extra=True)

    return arguments


def _cmd_unavailable(args):
    raise args.unavailable


@dataclass(frozen=True)
class _Subcommand:
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
    from .inputs import _load_pairs, _shipped_pair_names

    progress = not args.no_progress
    if Path(source).is_dir():  # a folder of shards, read chunk by chunk
        for flag, value in (("raw", args.raw), ("positions", args.positions)):
            if value:
                raise ValueError(f"{flag}: applies to dumps, not to a folder of shards")
        return audit(source, max_memory=args.max_memory, progress=progress, **kw)
    if str(source) in _shipped_pair_names() or _is_dump(source):
        rows = "raw" if args.raw else "processed"
        return audit(source, rows=rows, max_positions=args.positions, progress=progress, **kw)
    if args.raw:
        raise ValueError("raw: needs a dump (its raw rows); --input holds (q, p) rows only")
    if args.positions is not None:
        raise ValueError("positions: applies to dumps only")
    q, p = _load_pairs(source)
    return audit(q, p, progress=progress, **kw)


def _cmd_audit(args) -> int:
    from pathlib import Path

    from ._cli import check_output_path
    from ._cli_pairs import rule_list
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
        from .rows import _shard_files

        results = [(f.name, _audit_input(str(f), args, kw)) for f in _shard_files(args.input)]
    else:
        results = [(None, _audit_input(args.input, args, kw))]
    if args.figure is not None:
        from .figures import figure_audit
        from .figures.internal import save_figure

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
    from .report import _section_summaries

    return "sections:\n" + "\n".join(f"  {k:<12} {v}" for k, v in _section_summaries().items())


#: The subcommand table: name -> :class:`_Subcommand`.
_SUBCOMMANDS = {
    "report": _Subcommand(
        "the main job: exact results on embedded defaults (text, Markdown, JSON, CSV)",
        _args_report,
        _cmd_report,
    ),
    "rules": _Subcommand("list every registered rule with its knobs", _args_rules, _cmd_rules),
    "solve": _Subcommand(
        "one (q, p, n, delta): Taylor point, exact root and cvxpy oracle side by side",
        solve_arguments,
        run_solve,
    ),
    "analyze": _Subcommand(
        "rules on a set of (q, p) rows: acceptance, per-draft and emitted divergences, frontier gap",
        analyze_arguments,
        run_analyze,
    ),
    "frontier": _Subcommand(
        "the optimal acceptance at each target emitted divergence eps", frontier_arguments, run_frontier
    ),
    "calibrate": _Subcommand(
        "the delta whose emitted divergence meets a target eps", calibrate_arguments, run_calibrate
    ),
    "audit": _Subcommand(
        "every rule calibrated to one true emitted divergence on a dump: acceptance, AL_m, "
        "KL/TV, frontier gap, EOS shift",
        _args_audit,
        _cmd_audit,
    ),
    "plan": _Subcommand(
        "from a recording, a budget and a cost model: each rule's knob, tokens per call and "
        "speedup at every draft length, the best one and a vLLM configuration",
        "cactus_theory.planning.internal:add_plan_arguments",
        "cactus_theory.planning.internal:run_plan",
    ),
    "simulate": _Subcommand(
        "simulate a rule over synthetic trajectories (teacher-forced) beside exact",
        "cactus_theory.simulate.internal:add_simulate_arguments",
        "cactus_theory.simulate.internal:run_simulate",
    ),
    "figures": _Subcommand("write the figures (PDF and PNG)", _args_figures, _cmd_figures),
    "models": _Subcommand(
        "list the offline models and drafters; --prepare builds the local cache",
        "cactus_theory.logits.internal:add_models_arguments",
        "cactus_theory.logits.internal:run_models",
    ),
    "dump": _Subcommand(
        "record verifier/drafter next-token distributions (real models)",
        "cactus_theory.integrations.vllm.internal:add_dump_arguments",
        "cactus_theory.integrations.vllm.internal:run_dump",
    ),
    "decode": _Subcommand(
        "real speculative decoding vs verifier-only decoding (real models)",
        "cactus_theory.logits.internal:add_decode_arguments",
        "cactus_theory.logits.internal:run_decode",
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


def _subcommands() -> dict:
    """:data:`_SUBCOMMANDS`, then those of the entry-point group
    ``cactus_theory.commands`` (this repository's lab declares ``benchmark``)."""
    from .report import _COMMAND_GROUP, _entry_points

    plugins = _entry_points(_COMMAND_GROUP)
    return {
        **_SUBCOMMANDS,
        **{n: _plugin_command(n, ep) for n, ep in sorted(plugins.items()) if n not in _SUBCOMMANDS},
    }


def _build_parser() -> argparse.ArgumentParser:
    """The full ``cactus-theory`` parser, built from :func:`_subcommands`."""
    parser = _Parser(prog="cactus-theory", description=__doc__.split("\n\n")[0], formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for name, sc in _subcommands().items():
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
    parser = _build_parser()
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
