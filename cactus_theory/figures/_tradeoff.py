r"""The paper's main trade-off: acceptance and accepted length against delta, for several m.

Acceptance of one draft :math:`\alpha = \sum_n p_n \min(1, \gamma_n/p_n)` (exact, averaged
over positions) and the expected accepted length per round :math:`AL_m` (bonus not counted,
the paper's convention) from the exact dynamic programme over round starts
(:func:`cactus_theory.simulate._exact.exact_chain`, teacher-forced).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` budget, m draft length. Reference: Hao & Mou, ICLR 2026 (arXiv 2604.04987),
Corollary 5, Theorem 2, main table (AL_m).
"""

from __future__ import annotations

import numpy as np

from ..rules import get_rule
from ..simulate import compute_metrics, exact_chain, position_laws
from ..simulate.internal import pool_totals
from ._data import synthetic_trajectories
from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, SINGLE_COLUMN, legend_above, new_axes, new_axes_row, styled

__all__ = [
    "rule_label",
    "expected_al",
    "tradeoff_table",
    "format_tradeoff_table",
    "figure_acceptance_vs_delta",
    "figure_al_by_m",
]

_MARKERS = ("o", "s", "^", "D", "v", "P")


def rule_label(name: str, knobs: dict) -> str:
    """Legend text of a configured rule: ``cactus-taylor, $\\delta$ = 0.75``."""
    sym = {"delta": r"$\delta$", "eps": r"$\epsilon$", "alpha": r"$\alpha$"}
    return name + "".join(f", {sym.get(k, k)} = {v:g}" for k, v in knobs.items())


def expected_al(rule, trajectories, ms):
    r"""Exact :math:`AL_m` (bonus not counted) pooled over trajectories, and the mean :math:`\alpha`.

    Parameters
    ----------
    rule : str or Rule
    trajectories : list of :class:`cactus_theory.simulate._chain.Trajectory`
    ms : sequence of int
        Draft lengths.

    Returns
    -------
    al : ndarray, shape (len(ms),)
    alpha : float
        Mean one-draft acceptance over all positions.
    """
    rule = get_rule(rule)
    laws = [position_laws(rule, t) for t in trajectories]
    al = []
    for m in ms:
        chains = [exact_chain(rule, t, int(m), laws=lw) for t, lw in zip(trajectories, laws)]
        al.append(compute_metrics(pool_totals([c.totals for c in chains]))["al_paper"].value)
    alpha = float(np.mean(np.concatenate([lw.alpha for lw in laws])))
    return np.asarray(al), alpha


@styled
def figure_acceptance_vs_delta(trajectories=None, *, deltas=None, ms=(2, 4, 8, 20), ax=None):
    r"""Acceptance (left) and :math:`AL_m` (right) against delta, Taylor and exact, several m.

    SpS (delta = 0) is drawn as thin horizontal lines; Cactus-Taylor solid, Cactus-exact
    dashed; one colour per draft length m on the right.

    Parameters
    ----------
    trajectories : list of Trajectory, or a Dump, optional
        Teacher-forced (q_t, p_t) sequences (default: 4 noisy-copy trajectories of 100
        positions, V = 64, the paper's truncation). A Dump gives its trajectories.
    deltas : array_like, optional
        Budgets (default 10 log-spaced points on [0.01, 3]).
    ms : sequence of int
        Draft lengths.
    ax : pair of matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    from ..logits import Dump
    from ._data import dump_trajectories

    if trajectories is None:
        trajectories = synthetic_trajectories()
    elif isinstance(trajectories, Dump):
        trajectories = dump_trajectories(trajectories)
    ds = np.geomspace(0.01, 3, 10) if deltas is None else np.asarray(deltas, dtype=np.float64)
    ms = [int(m) for m in ms]
    sps_al, sps_alpha = expected_al("sps", trajectories, ms)
    res = {}
    for name in ("cactus-taylor", "cactus-exact-kl"):
        out = [expected_al(get_rule(name, delta=float(d)), trajectories, ms) for d in ds]
        res[name] = (np.stack([o[0] for o in out]), np.array([o[1] for o in out]))
    fig, (a1, a2) = new_axes_row(ax, 2, DOUBLE_COLUMN, 2.5)
    styles = {"cactus-taylor": ("-", "Cactus-Taylor"), "cactus-exact-kl": ("--", "Cactus-exact KL")}
    for name, (ls, label) in styles.items():
        a1.semilogx(ds, res[name][1], ls=ls, color=PALETTE[1], marker="o", mfc="none", label=label)
    a1.axhline(sps_alpha, color="k", lw=0.8, label="SpS")
    a1.set(xlabel=r"per-draft budget $\delta$", ylabel=r"acceptance $\alpha$")
    a1.legend(loc="lower right")
    for j, m in enumerate(ms):
        c = PALETTE[1 + j % (len(PALETTE) - 1)]
        for name, (ls, _) in styles.items():
            # one marker per m, at staggered budgets: curves of two m that coincide (AL_m
            # saturates once drafts are rarely accepted that far) stay visible side by side
            a2.semilogx(
                ds,
                res[name][0][:, j],
                ls=ls,
                color=c,
                marker=_MARKERS[j % len(_MARKERS)],
                markevery=(j % len(ms), len(ms)),
                ms=4,
                mfc="none",
                label=f"$m = {m}$" if name == "cactus-taylor" else None,
            )
        a2.axhline(sps_al[j], color=c, lw=0.7, ls=":")
    a2.plot([], [], color="k", ls="-", label="Taylor")
    a2.plot([], [], color="k", ls="--", label="exact")
    a2.plot([], [], color="k", ls=":", lw=0.7, label="SpS")
    a2.set(xlabel=r"per-draft budget $\delta$", ylabel=r"accepted length $AL_m$ (no bonus)")
    # above the panel: the curves rise into its upper left on real data
    a2.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=4, columnspacing=0.8, handlelength=1.6)
    return fig


@styled
def figure_al_by_m(
    trajectory_sets=None,
    *,
    rules=(("sps", {}), ("cactus-taylor", {"delta": 0.75})),
    ms=(1, 2, 3, 4, 6, 8),
    ax=None,
):
    r"""Exact :math:`AL_m` against the draft length m for several data sets and rules.

    Parameters
    ----------
    trajectory_sets : dict of str to list of Trajectory (or a Dump), optional
        Label to trajectories (default: the four shipped SmolLM2 pairs).
    rules : sequence of (name, knobs)
        Rules, one line style each (first solid, then dashed, dotted, ...).
    ms : sequence of int
        Draft lengths.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    from ..logits import Dump
    from ._data import dump_trajectories, real_trajectories

    if trajectory_sets is None:
        trajectory_sets = {
            name: real_trajectories(name) for name in ("requant-4", "requant-3", "early-exit-25", "distilled")
        }
    ms = [int(m) for m in ms]
    own = ax is None
    fig, ax = new_axes(ax, SINGLE_COLUMN)
    lss = ("-", "--", ":", "-.")
    for k, (label, trajs) in enumerate(trajectory_sets.items()):
        if isinstance(trajs, Dump):
            trajs = dump_trajectories(trajs)
        c = PALETTE[1 + k % (len(PALETTE) - 1)]
        for r, (name, knobs) in enumerate(rules):
            al, _ = expected_al(get_rule(name, **knobs), trajs, ms)
            ax.plot(
                ms,
                al,
                color=c,
                ls=lss[r % len(lss)],
                marker=_MARKERS[k % len(_MARKERS)],
                label=label if r == 0 else None,
            )
    for r, (name, knobs) in enumerate(rules):
        ax.plot([], [], color="k", ls=lss[r % len(lss)], label=rule_label(name, knobs))
    ax.set(xlabel="draft length $m$", ylabel=r"accepted length $AL_m$ (no bonus)")
    # above the axes: with several data sets the lines fill the panel
    legend_above(fig, ax, own, ncol=2, fontsize=8, columnspacing=0.8)
    labels = [rule_label(name, knobs) for name, knobs in rules]
    record_rules(ax, labels, {lab: lab for lab in labels})
    return fig


def tradeoff_table(target_probs, draft_probs, delta, m, *, raw_target_probs=None, raw_draft_probs=None):
    r"""SpS, Cactus-Taylor and Cactus-exact at one delta: acceptance, frontier, AL_m, emitted KL.

    The N rows are treated as one teacher-forced trajectory for :math:`AL_m` (exact DP).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (N, V)
    delta : float
        Cactus's budget.
    m : int
        Draft length.

    Returns
    -------
    list of dict
        Per rule: ``rule``, ``acceptance`` (mean :math:`\alpha`), ``frontier`` (mean of the
        optimal acceptance :math:`F_i` at the rule's own true KL per position), ``al`` (exact
        :math:`AL_m`, bonus not counted), ``kl_median``, ``kl_p90``, ``kl_max`` of
        :math:`\mathrm{KL}(h_{\mathrm{alg}}\|q)` over positions.
    """
    from ..analysis.frontier import operating_points
    from ..simulate import Trajectory

    traj = Trajectory(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    rows = []
    for name, knobs in (
        ("sps", {}),
        ("cactus-taylor", {"delta": float(delta)}),
        ("cactus-exact-kl", {"delta": float(delta)}),
    ):
        op = operating_points(
            name,
            traj.target_probs,
            traj.draft_probs,
            knob=None if not knobs else "delta",
            values=None if not knobs else [float(delta)],
            divergences=("kl",),
            raw_target_probs=traj.raw_target_probs,
            raw_draft_probs=traj.raw_draft_probs,
        )
        kl = op.divergences["kl"][:, 0]
        al, _ = expected_al(get_rule(name, **knobs), [traj], [int(m)])
        rows.append(
            dict(
                rule=rule_label(name, knobs),
                acceptance=float(op.acceptance[:, 0].mean()),
                frontier=float(op.frontier["kl"][:, 0].mean()),
                al=float(al[0]),
                kl_median=float(np.median(kl)),
                kl_p90=float(np.quantile(kl, 0.9)),
                kl_max=float(kl.max()),
            )
        )
    return rows


def format_tradeoff_table(rows, m=None) -> str:
    """Plain-text table of :func:`tradeoff_table`'s rows."""
    al = f"AL_{m}" if m is not None else "AL_m"
    head = f"{'rule':<32}{'accept':>8}{'F@KL':>8}{al:>8}{'KL med':>9}{'KL p90':>9}{'KL max':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['rule'].replace('$', '').replace(chr(92), ''):<32}{r['acceptance']:>8.4f}"
            f"{r['frontier']:>8.4f}{r['al']:>8.3f}{r['kl_median']:>9.4f}{r['kl_p90']:>9.4f}"
            f"{r['kl_max']:>9.4f}"
        )
    return "\n".join(lines)
