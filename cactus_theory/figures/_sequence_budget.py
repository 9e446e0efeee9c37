r"""Figure: AL against draft length for the methods compared at one sequence-level budget.

y is each method's :math:`AL_m` relative to Cactus-Taylor with one delta (in %), so the
small differences between methods at equal divergence are visible.

One line per method of :mod:`cactus_theory.simulate._sequence_budget` (Cactus with one delta,
Cactus and Mentored decoding per position, the offline optimum, the sequence-budget rule with
one multiplier and online with a budget account), each calibrated to the same mean per-token
emitted KL :math:`\epsilon`; y is the exact teacher-forced :math:`AL_m` (bonus not counted).

Symbols: q verifier, p drafter, m draft length, :math:`\epsilon` per-token KL budget.
Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), :math:`AL_m` and Theorem 3.
"""

from __future__ import annotations

from ._notes import record_rules
from ._style import DOUBLE_COLUMN, PALETTE, new_axes, styled

__all__ = ["plot_sequence_budget", "figure_sequence_budget"]

_STYLES = {
    "cactus-taylor, one delta": dict(color=PALETTE[1], marker="o", ls="-"),
    "cactus-taylor, delta per position": dict(color=PALETTE[1], marker="s", ls="--"),
    "mentored-kl, one D per position": dict(color=PALETTE[3], marker="^", ls="--"),
    "offline optimum, lambda per trajectory": dict(color=PALETTE[0], marker="*", ls="-"),
    "sequence-budget-kl, one lambda": dict(color=PALETTE[2], marker="D", ls="-"),
    "sequence-budget-kl, held-out lambda + account": dict(color=PALETTE[2], marker="v", ls=":"),
}


@styled
def plot_sequence_budget(result, ax=None):
    r"""Plot :math:`AL_m` (relative to the first method, Cactus with one delta) against m.

    Parameters
    ----------
    result : SequenceBudgetComparison
        From :func:`cactus_theory.simulate._sequence_budget.compare_sequence_budget`.
    ax : matplotlib Axes, optional
        Where to draw (default: a new Figure with one Axes; pyplot is not used).

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding ``ax``; the legend gives each method's mean per-token KL.

    Symbols: m draft length, :math:`\epsilon` per-token budget. Source: Hao & Mou, ICLR 2026.
    """
    fig, ax = new_axes(ax, width=DOUBLE_COLUMN, height=2.8)
    ms = list(result.draft_lengths)
    rows = result.rows()
    ref = rows[0]  # Cactus with one delta: the paper's usage, calibrated
    labels = {}
    for row in rows:
        style = _STYLES.get(row["method"], {})
        gain = [100.0 * (row[f"al_{m}"] / ref[f"al_{m}"] - 1.0) for m in ms]
        labels[row["method"]] = f"{row['method']} (KL/token {row['kl_per_token']:.3f})"
        ax.plot(ms, gain, label=labels[row["method"]], **style)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(ms)
    ax.set_xticklabels([str(m) for m in ms])
    ax.set_xlabel(r"draft length $m$")
    ax.set_ylabel(r"$\mathrm{AL}_m$ relative to Cactus, one $\delta$ (%)")
    ax.legend(
        title=rf"mean $\mathrm{{KL}}(h_t\,\|\,q_t) = {result.eps:g}$ per token",
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
    )
    record_rules(ax, list(labels), labels)
    return fig


def figure_sequence_budget(trajectories=None, eps: float = 0.1, *, seed: int = 0, ax=None):
    """Compare the methods at one per-token budget ``eps`` and plot them (:func:`plot_sequence_budget`).

    ``trajectories`` default: the report's synthetic corpus
    (:func:`cactus_theory.report.default_corpora`): 8 noisy-copy trajectories, V = 64, T = 64,
    truncated, drawn with ``seed`` (:func:`~cactus_theory.figures._data.synthetic_trajectories`).
    """
    from ..simulate import compare_sequence_budget
    from ._data import synthetic_trajectories

    if trajectories is None:
        trajectories = synthetic_trajectories(n=8, length=64, vocab_size=64, seed=seed)
        label = "noisy copy, V = 64, T = 64, truncated T 0.6 / top-k 20 / top-p 0.95"
    else:
        label = "user trajectories"
    return plot_sequence_budget(compare_sequence_budget(trajectories, eps, label=label), ax=ax)
