r"""``cactus-theory simulate``: a rule over synthetic trajectories, simulated beside exact.

Runs the teacher-forced chain simulator (:mod:`.chain`) for one rule and for SpS (the Rej
reference) over synthetic trajectories (:mod:`.synthetic`), and prints every metric of
:mod:`.metrics` with the simulated value (± standard error) beside the exact expectation from
the dynamic programme (:mod:`.exact`), then the sequence-level KL of the emitted text from the
verifier's: the exact bounds and a Monte-Carlo estimate. Symbols: q verifier, p drafter,
m draft length, c drafter/verifier cost ratio.

The main CLI wires it as ``subparsers`` entry: :func:`add_parser` registers the arguments and
:func:`run` executes them; bad values raise ValueError naming the argument.
"""

from __future__ import annotations

import argparse
import math
from typing import List

import numpy as np

from ..rules import RULES, get_rule
from .chain import position_laws, simulate_chain
from .exact import exact_chain, sequence_divergence, sequence_kl_monte_carlo
from .metrics import METRIC_LABELS, compute_metrics, pool_totals, rej_relative
from .synthetic import FAMILIES, synthetic_trajectory

__all__ = ["add_parser", "run", "simulate_table"]

TEACHER_FORCED = ("teacher-forced: the (q_t, p_t) along each trajectory do not depend on the "
                  "emitted tokens")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``simulate`` sub-command.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``parser.add_subparsers()``; the new parser's ``func`` default is :func:`run`.

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser(
        "simulate", help="simulate a rule over synthetic trajectories (teacher-forced) vs exact",
        description=__doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else None)
    p.add_argument("--rule", default="cactus-taylor", help="registry name (default cactus-taylor)")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                   help="rule knob, repeatable (e.g. --knob delta=0.75)")
    p.add_argument("--family", default="noisy_copy", help=f"one of {', '.join(FAMILIES)}")
    p.add_argument("--vocab-size", type=int, default=64)
    p.add_argument("--length", type=int, default=256, help="positions per trajectory (T)")
    p.add_argument("--trajectories", type=int, default=4)
    p.add_argument("--runs", type=int, default=200, help="simulated runs per trajectory")
    p.add_argument("--draft-length", "-m", type=int, default=8, help="m, drafts per round")
    p.add_argument("--cost-ratio", type=float, default=0.05,
                   help="c, drafter cost per drafted token / verifier call (speedup model)")
    p.add_argument("--temperature", type=float, default=0.6,
                   help="processing of q and p (default 0.6: the paper's sampling setting)")
    p.add_argument("--top-k", type=int, default=20, help="0 disables (default 20, the paper's)")
    p.add_argument("--top-p", type=float, default=0.95, help="1 disables (default 0.95, the paper's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)
    return p


def _parse_knobs(items: List[str]) -> dict:
    knobs = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"knob: expected NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        try:
            v = float(value)
            knobs[name] = int(v) if v.is_integer() and "." not in value and "e" not in value.lower() else v
        except ValueError:
            knobs[name] = value
    return knobs


def _check(args) -> None:
    for name in ("vocab_size", "length", "trajectories", "runs", "draft_length"):
        val = getattr(args, name)
        if val is None or val < 1:
            raise ValueError(f"{name.replace('_', '-')}: must be >= 1, got {val!r}")
    if not math.isfinite(args.cost_ratio) or args.cost_ratio < 0:
        raise ValueError(f"cost-ratio: must be a finite number >= 0, got {args.cost_ratio!r}")
    if not math.isfinite(args.temperature) or args.temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {args.temperature!r}")
    if args.top_k is not None and args.top_k < 0:
        raise ValueError(f"top-k: must be >= 0 (0 disables), got {args.top_k!r}")
    if args.top_p is not None and not (0 < args.top_p <= 1):
        raise ValueError(f"top-p: must lie in (0, 1], got {args.top_p!r}")
    if args.family not in FAMILIES:
        raise ValueError(f"family: unknown {args.family!r} (valid: {', '.join(FAMILIES)})")
    if args.rule not in RULES:
        raise ValueError(f"rule: unknown {args.rule!r} (valid: {', '.join(RULES)})")


def simulate_table(args) -> str:
    """Run the simulation described by ``args`` and return the report as text.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by the parser of :func:`add_parser`.

    Returns
    -------
    str
        The metrics table (simulated ± se beside exact) and the sequence-KL block, every
        number labelled teacher-forced.

    Raises
    ------
    ValueError
        Naming the argument for a bad value (the main CLI exits 2 with one line).
    """
    _check(args)
    rule = get_rule(args.rule, **_parse_knobs(args.knob))
    sps = get_rule("sps")
    rng = np.random.default_rng(args.seed)
    m = args.draft_length
    sim = {"rule": [], "sps": []}
    ex = {"rule": [], "sps": []}
    seq = []
    alphas = []
    from tqdm.auto import tqdm

    for _ in tqdm(range(args.trajectories), desc="trajectories (teacher-forced)",
                  disable=args.no_progress):
        traj = synthetic_trajectory(args.family, args.length, args.vocab_size, rng,
                                    temperature=args.temperature, top_k=args.top_k or None,
                                    top_p=None if args.top_p == 1 else args.top_p)
        for key, r in (("rule", rule), ("sps", sps)):
            laws = position_laws(r, traj)
            run_ = simulate_chain(r, traj, m, n_runs=args.runs, rng=rng, laws=laws,
                                  record_tokens=(key == "rule"))
            chain = exact_chain(r, traj, m, laws=laws)
            sim[key].append(run_.totals())
            ex[key].append(chain.totals)
            if key == "rule":
                seq.append((sequence_divergence(chain), sequence_kl_monte_carlo(laws, m, run_.tokens)))
                alphas.append(laws.alpha)
    ms = {k: compute_metrics(pool_totals(v), args.cost_ratio) for k, v in sim.items()}
    mx = {k: compute_metrics(pool_totals(v), args.cost_ratio) for k, v in ex.items()}

    lines = []
    lines.append(f"cactus-theory simulate: {rule!r}, m = {m}, c = {args.cost_ratio}")
    lines.append(f"{args.trajectories} synthetic {args.family} trajectories, T = {args.length}, "
                 f"V = {args.vocab_size}, temperature = {args.temperature}, top_k = {args.top_k}, "
                 f"top_p = {args.top_p}; {args.runs} runs each, seed {args.seed}")
    lines.append(f"All numbers are {TEACHER_FORCED}.")
    lines.append("simulated = pooled ratio over runs ± delta-method standard error; "
                 "exact = ratio of expected totals (dynamic programme over round starts).")
    lines.append("")
    w = 72
    lines.append(f"{'metric (convention)':<{w}} {'simulated':>20} {'exact':>10}")
    lines.append("-" * (w + 32))

    def row(label, s, e):
        lines.append(f"{label:<{w}} {format(s, '.4f'):>20} {format(e, '.4f'):>10}")

    for name, label in METRIC_LABELS.items():
        row(label if name != "speedup" else f"{label}, c = {args.cost_ratio}",
            ms["rule"][name], mx["rule"][name])
    row("Rej: rejected drafts / token, relative to SpS (paper)",
        rej_relative(ms["rule"], ms["sps"]), rej_relative(mx["rule"], mx["sps"]))
    row("AL_m of SpS on the same trajectories (reference)", ms["sps"]["al_paper"],
        mx["sps"]["al_paper"])
    a_bar = float(np.mean(np.concatenate(alphas)))
    iid = float(m + 1) if a_bar >= 1.0 else (1.0 - a_bar ** (m + 1)) / (1.0 - a_bar)
    lines.append(f"{'tokens / call, i.i.d. model (1-a^(m+1))/(1-a), a = mean alpha ' + format(a_bar, '.4f'):<{w}} "
                 f"{'-':>20} {iid:>10.4f}")
    for i in range(m):
        row(f"per-position acceptance, marginal P(N > {i}) (vLLM V1 per-pos)",
            ms["rule"]["pos_marginal"][i], mx["rule"]["pos_marginal"][i])
    for i in range(m):
        row(f"per-position acceptance, conditional P(N > {i} | N >= {i})",
            ms["rule"]["pos_conditional"][i], mx["rule"]["pos_conditional"][i])
    for i in range(m + 1):
        row(f"acceptance-length histogram P(N = {i}) over rounds",
            ms["rule"]["hist"][i], mx["rule"]["hist"][i])
    lines.append("")
    lines.append(f"Sequence-level KL(emitted text || verifier), nats per trajectory of T = "
                 f"{args.length} ({TEACHER_FORCED}; mean over trajectories):")
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    w2 = 74
    lines.append(f"  {'exact lower bound   sum_t KL(b_t q_t + (1-b_t) h_t || q_t)':<{w2}} "
                 f"{mean([s.kl_lower for s, _ in seq]):.4f}")
    lines.append(f"  {'exact upper bound   sum_t (1-b_t) KL(h_t || q_t)':<{w2}} "
                 f"{mean([s.kl_upper for s, _ in seq]):.4f}")
    lines.append(f"  {'per-step sum        sum_t KL(h_t || q_t)  (looser upper bound, not equal)':<{w2}} "
                 f"{mean([s.kl_per_step_sum for s, _ in seq]):.4f}")
    est = [e for _, e in seq]
    se = float(np.sqrt(np.sum([e.se ** 2 for e in est]))) / len(est)
    lines.append(f"  {'Monte-Carlo estimate of KL(P || Q) (forward algorithm, simulated texts)':<{w2}} "
                 f"{mean([e.value for e in est]):.4f} ± {se:.4f}")
    lines.append("  (b_t = probability that position t is a bonus token, emitted from q_t)")
    return "\n".join(lines)


def run(args) -> int:
    """Execute ``cactus-theory simulate``: print :func:`simulate_table`'s report.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    int
        0 (bad arguments raise ValueError instead).
    """
    print(simulate_table(args))
    return 0
