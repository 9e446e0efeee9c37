"""The ``plan`` subcommand: a recording, a budget and a cost model to the plan's table."""

from __future__ import annotations

import json
import os

from .._cli import _write, add_knobs, add_output, check_output_path, parse_knobs

__all__ = ["add_arguments", "run"]


def _floats(text: str, name: str) -> tuple:
    try:
        out = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated numbers, got {text!r}") from None
    if not out:
        raise ValueError(f"{name}: give at least one number")
    return out


def add_arguments(p):
    """The ``plan`` subcommand's arguments."""
    p.add_argument(
        "--input",
        "-i",
        required=True,
        metavar="RECORDING",
        help="a dump file or a shipped recording (distilled, early-exit-25, requant-3, requant-4), "
        "decoding records, a folder of vLLM recorder shards, or a speculation_profile.json",
    )
    p.add_argument(
        "--eps",
        type=float,
        default=None,
        help="target mean emitted divergence per token (calibrates each rule's knob)",
    )
    p.add_argument("--divergence", default="kl", help="divergence of eps (kl, tv, ...)")
    p.add_argument("--rules", default="sps,cactus-taylor", help="comma-separated rule names")
    add_knobs(p)
    p.add_argument("-m", "--m-max", type=int, default=8, help="the longest draft length planned")
    cost = p.add_mutually_exclusive_group()
    cost.add_argument(
        "--draft-cost", type=float, default=None, help="drafter cost per token, in plain verifier steps"
    )
    cost.add_argument(
        "--cost-file", default=None, metavar="PATH", help="a timing file (JSON: draft_cost, verify_costs)"
    )
    cost.add_argument(
        "--measure", action="store_true", help="measure the costs of the shipped SmolLM2 pair on this machine"
    )
    p.add_argument(
        "--verify-costs",
        default=None,
        metavar="C1,C2,...",
        help="with --draft-cost: verifier cost of 1, 2, ... tokens (default 1 for any number)",
    )
    p.add_argument(
        "--drafter",
        default="distilled",
        help="with --measure: the drafter timed (distilled, early-exit:K, requant:B); also written into the engine configuration",
    )
    p.add_argument(
        "--measure-repeats", type=int, default=7, help="with --measure: interleaved timing repeats (medians)"
    )
    p.add_argument(
        "--cost-out", default=None, metavar="PATH", help="write the cost model used as a timing file"
    )
    p.add_argument(
        "--profile-out",
        default=None,
        metavar="PATH",
        help="write the best rule's exact survival at m-max as NVIDIA's speculation_profile.json",
    )
    p.add_argument(
        "--positions",
        type=int,
        default=None,
        metavar="N",
        help="a dump's first trajectories up to at least N positions",
    )
    p.add_argument(
        "--bootstrap", type=int, default=200, help="bootstrap resamples over the recorded requests (0: none)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--figure", default=None, metavar="PATH", help="also write the figure (.pdf or .png)")
    p.add_argument("--markdown", action="store_true", help="print Markdown")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    add_output(p, csv_flag=True)


def _cost(args):
    from ._cost import CostModel

    if args.verify_costs is not None and args.draft_cost is None:
        raise ValueError("verify-costs: give it with --draft-cost")
    if args.cost_file is not None:
        return CostModel.read(args.cost_file)
    if args.measure:
        return CostModel.measure(
            args.m_max, drafter=args.drafter, repeats=args.measure_repeats, progress=not args.no_progress
        )
    if args.draft_cost is None:
        raise ValueError("draft-cost: give a cost model (--draft-cost, --cost-file or --measure)")
    if args.verify_costs is None:
        return CostModel.from_numbers(args.draft_cost)
    return CostModel(args.draft_cost, _floats(args.verify_costs, "verify-costs"))


def _check(args):
    for path, name in (
        (args.figure, "figure"),
        (args.cost_out, "cost-out"),
        (args.profile_out, "profile-out"),
    ):
        check_output_path(path, name)
    if args.figure is not None and os.path.splitext(args.figure)[1].lower() not in (".pdf", ".png"):
        raise ValueError(f"figure: expected a .pdf or .png path, got {args.figure!r}")
    if args.m_max < 1:
        raise ValueError(f"m-max: must be >= 1, got {args.m_max}")
    knobs = parse_knobs(args.knob)
    rules = [r.strip() for r in str(args.rules).split(",") if r.strip()]
    if knobs and len(rules) != 1:
        raise ValueError("knob: give --knob with exactly one rule in --rules")
    return rules, ({rules[0]: knobs} if knobs else None)


def run(args) -> int:
    """Run ``cactus-theory plan``."""
    from ._format import format_plan
    from ._plan import plan
    from ._profile import AcceptanceProfile

    rules, knobs = _check(args)
    cost = _cost(args)
    profile_input = str(args.input).lower().endswith(".json")
    res = plan(
        args.input,
        eps=args.eps,
        divergence=args.divergence,
        rules=None if profile_input and args.rules == "sps,cactus-taylor" else rules,
        knobs=knobs,
        cost=cost,
        m_max=args.m_max,
        bootstrap=args.bootstrap,
        seed=args.seed,
        max_positions=args.positions,
        drafter=args.drafter if args.measure else None,
        progress=not args.no_progress,
    )
    if args.cost_out:
        cost.write(args.cost_out)
    if args.profile_out:
        if res.kind == "acceptance profile":
            AcceptanceProfile.read(args.input).write(args.profile_out)
        else:
            best = res.row(res.best["rule"])
            AcceptanceProfile.from_dump(
                args.input,
                rule=best["rule"],
                m=None if res.kind == "recorded rounds" else max(res.draft_lengths),
                max_positions=args.positions,
                **best["knobs"],
            ).write(args.profile_out)
    if args.figure:
        from ..figures.internal import figure_plan, save_figure

        stem, ext = os.path.splitext(args.figure)
        save_figure(figure_plan(res), stem, (ext.lower()[1:],))
    suffix = os.path.splitext(args.output or "")[1].lower()
    if args.json or suffix == ".json":
        from .._tables import json_ready

        _write(args, json.dumps(json_ready(res.to_dict()), indent=2, allow_nan=False))
        return 0
    style = (
        "csv"
        if args.csv or suffix == ".csv"
        else "markdown"
        if args.markdown or suffix in (".md", ".markdown")
        else "text"
    )
    _write(args, format_plan(res, style))
    return 0
