r"""``cactus-theory simulate``: a rule over synthetic trajectories, simulated beside exact.

Runs the teacher-forced chain simulator (:mod:`.chain`) for one rule and for SpS (the Rej
reference) over synthetic trajectories (:mod:`.synthetic`), and prints every metric of
:mod:`.metrics` with the simulated value (± standard error) beside the exact expectation from
the dynamic programme (:mod:`.exact`), then the sequence-level KL of the emitted text from the
verifier's: the exact bounds and a Monte-Carlo estimate. Symbols: q verifier, p drafter,
m draft length, c drafter/verifier cost ratio.

The main CLI's subcommand table calls :func:`add_arguments` and :func:`run` (:func:`add_parser`
registers the same on any ``subparsers``); bad values raise ValueError naming the argument, and
``--json`` prints :func:`simulate_data`'s numbers.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from ..rules import RULES, get_rule
from ._chain import position_laws, simulate_chain
from ._exact import exact_chain, sequence_divergence, sequence_kl_monte_carlo
from ._metrics import METRIC_LABELS, compute_metrics, pool_totals, rej_relative
from ._synthetic import FAMILIES, synthetic_trajectory

__all__ = ["add_arguments", "add_parser", "run", "simulate_data", "format_simulation", "simulate_table"]

TEACHER_FORCED = "teacher-forced: the (q_t, p_t) along each trajectory do not depend on the emitted tokens"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``simulate`` arguments to ``p`` (the main CLI's subcommand table calls this).

    Parameters
    ----------
    p : argparse.ArgumentParser

    Returns
    -------
    argparse.ArgumentParser
    """
    from .._cli import add_knobs, add_output, add_seed

    p.add_argument("--rule", default="cactus-taylor", help="registry name")
    add_knobs(p)
    p.add_argument("--family", default="noisy_copy", help=f"one of {', '.join(FAMILIES)}")
    p.add_argument("--vocab-size", type=int, default=64, help="V, tokens of the synthetic vocabulary")
    p.add_argument("--length", type=int, default=256, help="positions per trajectory (T)")
    p.add_argument("--trajectories", type=int, default=4, help="synthetic trajectories of the family")
    p.add_argument("--runs", type=int, default=200, help="simulated runs per trajectory")
    p.add_argument("--draft-length", "-m", type=int, default=8, help="m, drafts per round (at most T)")
    p.add_argument(
        "--cost-ratio",
        type=float,
        default=0.05,
        help="c, drafter cost per drafted token / verifier call (speedup model)",
    )
    p.add_argument(
        "--temperature", type=float, default=0.6, help="processing of q and p (the paper's sampling setting)"
    )
    p.add_argument("--top-k", type=int, default=20, help="0 disables (the paper's setting)")
    p.add_argument("--top-p", type=float, default=0.95, help="1 disables (the paper's setting)")
    add_seed(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_output(p)
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``simulate`` sub-command on ``subparsers`` (its ``func`` default is :func:`run`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser(
        "simulate",
        help="simulate a rule over synthetic trajectories (teacher-forced) vs exact",
        description=__doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _check(args) -> None:
    for name in ("vocab_size", "length", "trajectories", "runs", "draft_length"):
        val = getattr(args, name)
        if val is None or val < 1:
            raise ValueError(f"{name.replace('_', '-')}: must be >= 1, got {val!r}")
    if not math.isfinite(args.cost_ratio) or args.cost_ratio < 0:
        raise ValueError(f"cost-ratio: must be a finite number >= 0, got {args.cost_ratio!r}")
    from .._validation import as_temperature, as_top_k, as_top_p

    as_temperature(args.temperature, "temperature")
    if args.top_k:  # 0 disables
        as_top_k(args.top_k, "top-k")
    if args.top_p is not None:
        as_top_p(args.top_p, "top-p")
    if args.family not in FAMILIES:
        raise ValueError(f"family: unknown {args.family!r} (valid: {', '.join(FAMILIES)})")
    if args.draft_length > args.length:
        raise ValueError(
            f"draft-length: m = {args.draft_length} exceeds the trajectory length "
            f"T = {args.length} (a round never drafts past the end)"
        )
    if args.rule not in RULES:
        raise ValueError(f"rule: unknown {args.rule!r} (valid: {', '.join(RULES)})")


def simulate_data(args) -> dict:
    """Run the simulation described by ``args`` and return every number as plain data.

    Parameters
    ----------
    args : argparse.Namespace
        As parsed by the parser of :func:`add_arguments`.

    Returns
    -------
    dict
        ``settings``; ``metrics``: per metric ``{"label", "simulated", "simulated_se", "exact"}``
        for the rule (and SpS's AL_m as reference); per-position and histogram lists; the
        sequence-level KL block (exact bounds and the Monte-Carlo estimate with its standard error).
        Every number is teacher-forced.

    Raises
    ------
    ValueError
        Naming the argument for a bad value (the main CLI exits 2 with one line).
    """
    from .._cli import parse_knobs

    _check(args)
    rule = get_rule(args.rule, **parse_knobs(args.knob))
    m = args.draft_length
    sim, ex, seq, alphas = _run_trajectories(args, rule, m)
    ms = {k: compute_metrics(pool_totals(v), args.cost_ratio) for k, v in sim.items()}
    mx = {k: compute_metrics(pool_totals(v), args.cost_ratio) for k, v in ex.items()}
    a_bar = float(np.mean(np.concatenate(alphas)))
    iid = float(m + 1) if a_bar >= 1.0 else (1.0 - a_bar ** (m + 1)) / (1.0 - a_bar)

    def pair(key, i):
        return _estimate_row(ms["rule"][key][i], mx["rule"][key][i])

    per_pos = dict(
        marginal=[pair("pos_marginal", i) for i in range(m)],
        conditional=[pair("pos_conditional", i) for i in range(m)],
        histogram=[pair("hist", i) for i in range(m + 1)],
    )
    settings = dict(
        rule=args.rule,
        rule_repr=repr(rule),
        knobs=parse_knobs(args.knob),
        m=m,
        **{k: getattr(args, k) for k in _SETTINGS},
        teacher_forced=TEACHER_FORCED,
    )
    return dict(
        settings=settings,
        metrics=_metric_rows(ms, mx, args.cost_ratio),
        mean_alpha=a_bar,
        iid_tokens_per_call=iid,
        per_position=per_pos,
        sequence_kl=_sequence_kl(seq),
    )


#: The arguments echoed in the settings block as given (after rule, knobs and m).
_SETTINGS = (
    "cost_ratio",
    "family",
    "trajectories",
    "length",
    "vocab_size",
    "temperature",
    "top_k",
    "top_p",
    "runs",
    "seed",
)


def _run_trajectories(args, rule, m):
    """Simulated and exact totals of the rule and of SpS on each synthetic trajectory, the
    rule's sequence divergences (exact, Monte Carlo) and its per-position acceptances."""
    from tqdm.auto import tqdm

    sps = get_rule("sps")
    rng = np.random.default_rng(args.seed)
    sim = {"rule": [], "sps": []}
    ex = {"rule": [], "sps": []}
    seq = []
    alphas = []
    for _ in tqdm(range(args.trajectories), desc="trajectories (teacher-forced)", disable=args.no_progress):
        traj = synthetic_trajectory(
            args.family,
            args.length,
            args.vocab_size,
            rng,
            temperature=args.temperature,
            top_k=args.top_k or None,
            top_p=None if args.top_p == 1 else args.top_p,
        )
        for key, r in (("rule", rule), ("sps", sps)):
            laws = position_laws(r, traj)
            run_ = simulate_chain(
                r, traj, m, n_runs=args.runs, rng=rng, laws=laws, record_tokens=(key == "rule")
            )
            chain = exact_chain(r, traj, m, laws=laws)
            sim[key].append(run_.totals())
            ex[key].append(chain.totals)
            if key == "rule":
                seq.append((sequence_divergence(chain), sequence_kl_monte_carlo(laws, m, run_.tokens)))
                alphas.append(laws.alpha)
    return sim, ex, seq, alphas


def _estimate_row(simulated, exact) -> dict:
    """``{"simulated", "simulated_se", "exact"}`` of an estimate (or a plain number)."""
    se = getattr(simulated, "se", None)
    return dict(
        simulated=float(getattr(simulated, "value", simulated)),
        simulated_se=None if se is None else float(se),
        exact=float(getattr(exact, "value", exact)),
    )


def _metric_rows(ms, mx, cost_ratio) -> list[dict]:
    """One row per metric of the rule, Rej relative to SpS, and SpS's AL_m for reference."""
    rows = [
        dict(
            metric=name,
            label=label if name != "speedup" else f"{label}, c = {cost_ratio}",
            **_estimate_row(ms["rule"][name], mx["rule"][name]),
        )
        for name, label in METRIC_LABELS.items()
    ]
    rej = "Rej: rejected drafts / token, relative to SpS (paper)"
    rs, rx = rej_relative(ms["rule"], ms["sps"]), rej_relative(mx["rule"], mx["sps"])
    rows.append(dict(metric="rej_relative", label=rej, **_estimate_row(rs, rx)))
    sps = "AL_m of SpS on the same trajectories (reference)"
    rows.append(
        dict(metric="sps_al_paper", label=sps, **_estimate_row(ms["sps"]["al_paper"], mx["sps"]["al_paper"]))
    )
    return rows


def _sequence_kl(seq) -> dict:
    """Means over trajectories of the exact sequence-KL bounds and the Monte-Carlo estimate."""
    est = [e for _, e in seq]

    def mean(xs):
        return float(np.mean(xs))

    return dict(
        kl_lower=mean([s_.kl_lower for s_, _ in seq]),
        kl_upper=mean([s_.kl_upper for s_, _ in seq]),
        kl_per_step_sum=mean([s_.kl_per_step_sum for s_, _ in seq]),
        monte_carlo=mean([e.value for e in est]),
        monte_carlo_se=float(np.sqrt(np.sum([e.se**2 for e in est]))) / len(est),
    )


def format_simulation(data: dict) -> str:
    """The plain-text report of :func:`simulate_data`'s result (simulated ± se beside exact)."""
    st = data["settings"]
    m = st["m"]
    lines = [
        f"cactus-theory simulate: {st['rule_repr']}, m = {m}, c = {st['cost_ratio']}",
        f"{st['trajectories']} synthetic {st['family']} trajectories, T = {st['length']}, "
        f"V = {st['vocab_size']}, temperature = {st['temperature']}, top_k = {st['top_k']}, "
        f"top_p = {st['top_p']}; {st['runs']} runs each, seed {st['seed']}",
        f"All numbers are {TEACHER_FORCED}.",
        "simulated = pooled ratio over runs ± delta-method standard error; "
        "exact = ratio of expected totals (dynamic programme over round starts).",
        "",
    ]
    w = 72
    lines.append(f"{'metric (convention)':<{w}} {'simulated':>20} {'exact':>10}")
    lines.append("-" * (w + 32))

    def sim_cell(v, s_):
        return f"{v:.4f}" + (f" ± {s_:.4f}" if s_ is not None else "")

    for r in data["metrics"]:
        lines.append(
            f"{r['label']:<{w}} {sim_cell(r['simulated'], r['simulated_se']):>20} {r['exact']:>10.4f}"
        )
    lines.append(
        f"{'tokens / call, i.i.d. model (1-a^(m+1))/(1-a), a = mean alpha ' + format(data['mean_alpha'], '.4f'):<{w}} "
        f"{'-':>20} {data['iid_tokens_per_call']:>10.4f}"
    )
    pp = data["per_position"]
    for i, r in enumerate(pp["marginal"]):
        lines.append(
            f"{f'per-position acceptance, marginal P(N > {i}) (vLLM V1 per-pos)':<{w}} "
            f"{sim_cell(r['simulated'], r['simulated_se']):>20} {r['exact']:>10.4f}"
        )
    for i, r in enumerate(pp["conditional"]):
        lines.append(
            f"{f'per-position acceptance, conditional P(N > {i} | N >= {i})':<{w}} "
            f"{sim_cell(r['simulated'], r['simulated_se']):>20} {r['exact']:>10.4f}"
        )
    for i, r in enumerate(pp["histogram"]):
        lines.append(
            f"{f'acceptance-length histogram P(N = {i}) over rounds':<{w}} "
            f"{sim_cell(r['simulated'], r['simulated_se']):>20} {r['exact']:>10.4f}"
        )
    sq = data["sequence_kl"]
    w2 = 74
    lines += [
        "",
        f"Sequence-level KL(emitted text || verifier), nats per trajectory of T = "
        f"{st['length']} ({TEACHER_FORCED}; mean over trajectories):",
        f"  {'exact lower bound   sum_t KL(b_t q_t + (1-b_t) h_t || q_t)':<{w2}} {sq['kl_lower']:.4f}",
        f"  {'exact upper bound   sum_t (1-b_t) KL(h_t || q_t)':<{w2}} {sq['kl_upper']:.4f}",
        f"  {'per-step sum        sum_t KL(h_t || q_t)  (looser upper bound, not equal)':<{w2}} "
        f"{sq['kl_per_step_sum']:.4f}",
        f"  {'Monte-Carlo estimate of KL(P || Q) (forward algorithm, simulated texts)':<{w2}} "
        f"{sq['monte_carlo']:.4f} ± {sq['monte_carlo_se']:.4f}",
        "  (b_t = probability that position t is a bonus token, emitted from q_t)",
    ]
    return "\n".join(lines)


def simulate_table(args) -> str:
    """The report as text: :func:`format_simulation` of :func:`simulate_data` (``args`` as there)."""
    return format_simulation(simulate_data(args))


def run(args) -> int:
    """Execute ``cactus-theory simulate``: the text report, or ``--json`` data, to stdout or ``-o``.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    int
        0 (bad arguments raise ValueError instead).
    """
    from .._cli import _emit

    data = simulate_data(args)
    _emit(args, text=format_simulation(data), data=data)
    return 0
