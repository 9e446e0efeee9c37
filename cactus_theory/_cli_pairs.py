"""The subcommands over (q, p) rows: ``solve``, ``analyze``, ``frontier`` and ``calibrate``.

Each takes its rows from ``--q``/``--p`` (one row each) or ``--input`` (:func:`add_pair_input`)
and prints one table (:func:`rows_table`); :mod:`cactus_theory.cli` wires them in.
"""

from __future__ import annotations

from ._cli import _emit, add_output, add_per_file, parse_knobs
from ._tables import Column, Table, format_table

#: The columns of ``solve``'s table: one row per method, from its :class:`SpikeSolution`.
SOLVE_COLUMNS = ("method", "gamma", "per_draft_divergence", "acceptance", "budget_hit", "within_budget")


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


def pairs(args):
    from .inputs import _load_pairs, _parse_probs

    if args.input is not None:
        if args.q is not None or args.p is not None:
            raise ValueError("input: give either --input or --q and --p, not both")
        return _load_pairs(args.input)
    if args.q is None or args.p is None:
        raise ValueError("q: give --q and --p (comma-separated rows) or --input FILE")
    from ._validation import as_prob_pair

    q, p = as_prob_pair(_parse_probs(args.q, "q"), _parse_probs(args.p, "p"), target_name="q", draft_name="p")
    return q[None, :], p[None, :]


def rows_table(rows, name="", title=""):
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


def solve_arguments(p):
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


def run_solve(args) -> int:
    import cactus_theory as ct

    q, p = _pick_row(*pairs(args), args.row)
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
        rows.append({k: getattr(s, k) for k in SOLVE_COLUMNS})
    table = rows_table(
        rows,
        "solve",
        f"q_n = {q[args.token]:.6g}, p_n = {p[args.token]:.6g}, "
        f"n = {args.token}, delta = {args.delta:g}, divergence = {args.divergence}",
    )
    text = "\n".join([format_table(table)] + notes)
    _emit(args, text=text, data={"solutions": [s.to_dict() for s in sols], "notes": notes}, tables=[table])
    return 0


def analyze_arguments(p):
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


def rule_list(text):
    if text is None:
        return None
    names = [r.strip() for r in text.split(",") if r.strip()]
    if not names:
        raise ValueError("rules: empty list")
    return names


def _analyze_sources(args) -> list:
    """``[(file name or None, rows)]``: the (q, p) pair, or a folder's row source (one, or one per
    file with ``--per-file``), read lazily."""
    from pathlib import Path

    folder = args.input is not None and Path(args.input).is_dir()
    if args.per_file and not folder:
        raise ValueError("per-file: applies to --input FOLDER (each of its files analysed apart)")
    if not folder:
        return [(None, pairs(args))]
    if args.q is not None or args.p is not None:
        raise ValueError("input: give either --input or --q and --p, not both")
    from .rows import _shard_files, as_row_source

    if args.per_file:
        return [(f.name, as_row_source(f)) for f in _shard_files(args.input)]
    return [(None, as_row_source(args.input))]  # refuses different recordings


def _analyze_knobs(args, rules) -> dict:
    """The keyword arguments of ``analyze_rules``: each ``--knob NAME=VALUE`` for every chosen rule
    that declares NAME (ValueError naming ``knob`` for one that none has), and ``--delta``."""
    from .rules import RULES

    flat = parse_knobs(args.knob)
    kw = {}
    if flat:
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
    return kw


def run_analyze(args) -> int:
    import cactus_theory as ct

    sources = _analyze_sources(args)
    rules = rule_list(args.rules)
    kw = _analyze_knobs(args, rules)
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
    table = rows_table(rows, "analyze", title)
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


def frontier_arguments(p):
    add_pair_input(p)
    p.add_argument(
        "--eps", default="0,0.01,0.05,0.1,0.3,1", help="target emitted divergences eps (comma-separated)"
    )
    p.add_argument("--divergence", default="kl", help="divergence D(o||q) of the constraint")
    add_output(p, csv_flag=True)


def run_frontier(args) -> int:
    import cactus_theory as ct

    q, p = pairs(args)
    res = ct.optimal_frontier(q, p, eps=_float_list(args.eps, "eps"), divergence=args.divergence)
    table = rows_table(
        res.rows(), "frontier", f"{q.shape[0]} positions, V = {q.shape[1]}; means over positions"
    )
    _emit(args, text=format_table(table), data=res.to_dict(), tables=[table])
    return 0


def calibrate_arguments(p):
    add_pair_input(p)
    p.add_argument("--eps", type=float, required=True, help="target emitted divergence eps = D(h_alg||q)")
    p.add_argument("--rule", default="cactus-taylor", help="the rule whose delta is calibrated")
    p.add_argument("--divergence", default="kl", help="divergence of the target")
    add_output(p, csv_flag=True)


def run_calibrate(args) -> int:
    import cactus_theory as ct

    q, p = pairs(args)
    res = ct.calibrate_delta(q, p, args.eps, rule=args.rule, divergence=args.divergence)
    table = rows_table(res.rows(), "calibrate", repr(res).splitlines()[0] if repr(res) else "")
    _emit(args, text=format_table(table), data=res.to_dict(), tables=[table])
    return 0
