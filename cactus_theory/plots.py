"""Figures: one function per figure, one style; ``cactus-theory figures`` writes them all.

matplotlib is imported lazily (the numerical core never needs it). Every figure is computed
from seeded synthetic inputs, so re-running gives the same picture.
"""

from __future__ import annotations

import io
import os

import numpy as np

from ._io import atomic_write_bytes

from .analysis.comparison import taylor_kl_bound, taylor_vs_exact_grid, taylor_vs_exact_pairs
from .distributions import synthetic_pairs, truncate

__all__ = ["figure_gamma", "figure_taylor_overshoot", "figure_per_draft_vs_emitted",
           "figure_frontier", "FIGURES",
           "write_figures"]

_TRUNC = dict(temperature=0.6, top_k=20, top_p=0.95)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
    return plt


def figure_gamma(seed: int = 0):
    """gamma (boosted drafted-token probability) vs q_n: Taylor (Cor. 5) vs exact (Thm. 2)."""
    plt = _plt()
    qs = np.linspace(0, 1, 401)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, d in enumerate((0.05, 0.25, 1.0)):
        g = taylor_vs_exact_grid(qs, [d], "kl")
        ax.plot(qs, g.gamma_exact[:, 0], color=f"C{i}", label=f"exact, delta={d:g}")
        ax.plot(qs, g.gamma_taylor[:, 0], color=f"C{i}", ls="--", label=f"Taylor, delta={d:g}")
    ax.plot(qs, qs, color="k", lw=0.8, label="SpS (gamma = q_n)")
    ax.set(xlabel="verifier probability of the drafted token q_n", ylabel="target gamma_n",
           title="Per-draft target: Taylor vs exact (KL budget)")
    ax.legend(fontsize=7)
    return fig


def figure_taylor_overshoot(seed: int = 0):
    """Worst per-draft KL of the Taylor point relative to delta, with the bound log(1+2d)/d."""
    plt = _plt()
    ds = np.geomspace(1e-3, 10, 60)
    g = taylor_vs_exact_grid(np.linspace(0, 1, 4001), ds, "kl")
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.semilogx(ds, g.budget_ratio.max(axis=0), "o", ms=3, label="max over q_n of KL(h_T||q)/delta")
    ax.semilogx(ds, taylor_kl_bound(ds) / ds, "-", label="bound log(1+2 delta)/delta")
    ax.axhline(1, color="k", lw=0.8)
    ax.set(xlabel="delta", ylabel="per-draft KL / delta", title="Taylor point vs its budget")
    ax.legend(fontsize=7)
    return fig


def figure_per_draft_vs_emitted(seed: int = 0):
    """Mean per-draft KL and mean emitted KL vs delta (noisy-copy drafter, paper truncation)."""
    plt = _plt()
    q, p = synthetic_pairs("noisy_copy", 300, 64, seed)
    q, p = truncate(q, **_TRUNC), truncate(p, **_TRUNC)
    ds = np.geomspace(0.01, 3, 12)
    res = taylor_vs_exact_pairs(q, p, ds)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, rule in enumerate(("cactus-taylor", "cactus-exact-kl")):
        rows = [r for r in res.rows if r["rule"] == rule]
        ax.loglog(ds, [r["per_draft_mean"] for r in rows], color=f"C{i}", ls="--",
                  label=f"{rule}: E_n KL(h^(n)||q)")
        ax.loglog(ds, [r["emitted_mean"] for r in rows], color=f"C{i}", label=f"{rule}: KL(h_alg||q)")
    ax.loglog(ds, ds, color="k", lw=0.8, label="delta")
    ax.set(xlabel="delta", ylabel="mean KL over positions",
           title="Per draft vs emitted (noisy copy, T=0.6, top-k 20, top-p 0.95)")
    ax.legend(fontsize=6)
    return fig


def figure_frontier(seed: int = 0):
    """Acceptance vs true emitted KL on one truncated position: the frontier and each rule."""
    from .analysis.frontier import operating_points
    from .solvers.frontier import frontier_curve

    plt = _plt()
    q, p = synthetic_pairs("noisy_copy", 32, 256, seed)
    tq, tp = truncate(q, **_TRUNC), truncate(p, **_TRUNC)
    from .solvers.frontier import frontier

    gain = frontier(tq, tp, [0.0, 1.0], "kl").acceptance
    i = int(np.argmax(gain[:, 1] - gain[:, 0]))  # the position where a KL budget buys the most
    q, p, tq, tp = q[i:i + 1], p[i:i + 1], tq[i], tp[i]
    eps, F = frontier_curve(tq, tp, "kl", n_points=80)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(eps, F, "k-", lw=1.5, label="optimal frontier F(eps) (= Mentored decoding)")
    sweeps = (("cactus-taylor", "delta", np.geomspace(1e-3, 5, 14)),
              ("cactus-exact-kl", "delta", np.geomspace(1e-3, 5, 14)),
              ("cascade-token-v3", "alpha", np.linspace(0.05, 0.85, 9)),
              ("tas", "posterior_threshold", np.geomspace(0.005, 0.5, 9)))
    for k, (name, knob, values) in enumerate(sweeps):
        op = operating_points(name, tq, tp, knob=knob, values=values, divergences=("kl",),
                              raw_target_probs=q[0], raw_draft_probs=p[0])
        kl = op.divergences["kl"]
        ok = np.isfinite(kl)
        ax.plot(kl[ok], op.acceptance[ok], "o-", ms=3, color=f"C{k}", label=f"{name} ({knob} sweep)")
    ax.set(xlabel="true KL(h_alg || q) of what is emitted", ylabel="acceptance",
           title="Rules vs the optimal frontier (one truncated position)")
    ax.legend(fontsize=6, loc="lower right")
    return fig


FIGURES = {
    "gamma": figure_gamma,
    "taylor_overshoot": figure_taylor_overshoot,
    "per_draft_vs_emitted": figure_per_draft_vs_emitted,
    "frontier": figure_frontier,
}


def write_figures(folder: str, names=None, seed: int = 0) -> list[str]:
    """Write each figure as ``<folder>/<name>.png`` (atomically); return the paths."""
    names = list(FIGURES) if not names else list(names)
    for name in names:
        if name not in FIGURES:
            raise ValueError(f"names: unknown figure {name!r}; valid: {', '.join(FIGURES)}")
    os.makedirs(folder, exist_ok=True)
    plt = _plt()
    paths = []
    for name in names:
        fig = FIGURES[name](seed=seed)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        plt.close(fig)
        path = os.path.join(folder, f"{name}.png")
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
