"""The report's sections on seeded synthetic families: the Taylor point, per draft vs emitted,
every rule, calibration, the frontier, chains, and a sequence-level KL budget.

Each ``section_<name>(seed=...)`` returns a :class:`Section` of notes and tables;
:mod:`cactus_theory.report` runs them beside the sections on the shipped data and prints them.
Symbols: q verifier, p drafter, n drafted token, delta the per-draft budget, eps a target emitted
divergence, h_alg the emitted distribution (Theorem 3 of Hao & Mou, ICLR 2026).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._tables import Column, Table, format_table, json_ready
from .analysis.comparison import (
    TAYLOR_WITHIN_BUDGET_FROM,
    taylor_kl_bound,
    taylor_vs_exact_grid,
    taylor_vs_exact_pairs,
)
from .distributions import PAPER_TRUNCATION, synthetic_pairs, truncate

DEFAULT_DELTAS = (0.1, 0.5, 1.0)


@dataclass(frozen=True)
class Section:
    """One report section: a heading, ``blocks`` in print order (note lines and tables), figures."""

    name: str
    heading: str
    blocks: tuple
    figures: tuple = ()

    @property
    def tables(self) -> tuple:
        """The section's tables, in order."""
        return tuple(b for b in self.blocks if isinstance(b, Table))

    def to_dict(self) -> dict:
        """The section as JSON-ready data."""
        return {
            "name": self.name,
            "heading": self.heading,
            "notes": [b for b in self.blocks if isinstance(b, str)],
            "tables": [t.to_dict() for t in self.tables],
            "figures": list(self.figures),
        }


def family_table(res, name: str, title: str) -> Table:
    d = res.divergence
    cols = (
        Column("rule", "rule", "s"),
        Column("delta", "delta", "g"),
        Column("acceptance", "accept"),
        Column("per_draft_mean", f"E_n {d}(h^n||q)"),
        Column("per_draft_max", "max_n"),
        Column("emitted_mean", f"{d}(h_alg||q)"),
        Column("emitted_max", "max"),
        Column("emitted_over_delta_max", "max/delta", ".3f"),
        Column("emitted_tv_mean", "TV(h_alg,q)"),
    )
    return Table(name, title, cols, tuple(dict(r) for r in res.rows))


def section_taylor(seed: int = 0) -> Section:
    """Per draft: Corollary 5's Taylor point against Theorem 2's exact root on a (q_n, delta) grid."""
    qs = np.array([0.01, 0.05, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99])
    ds = np.array([0.01, 0.1, 0.5, 1.0, 2.0])
    g = taylor_vs_exact_grid(qs, ds, "kl")
    rows = tuple(
        dict(
            q_n=float(q),
            delta=float(d),
            gamma_taylor=float(g.gamma_taylor[i, j]),
            gamma_exact=float(g.gamma_exact[i, j]),
            budget_ratio=float(g.budget_ratio[i, j]),
        )
        for i, q in enumerate(qs)
        for j, d in enumerate(ds)
    )
    grid = Table(
        "taylor/grid",
        "",
        (
            Column("q_n", "q_n", ".2f"),
            Column("delta", "delta", "g"),
            Column("gamma_taylor", "gamma_taylor", ".3f"),
            Column("gamma_exact", "gamma_exact", ".3f"),
            Column("budget_ratio", "KL(h_taylor||q)/delta", ".2f"),
        ),
        rows,
    )
    worst = taylor_vs_exact_grid(np.linspace(0, 1, 2001), ds, "kl").budget_ratio.max(axis=0)
    wrows = tuple(
        dict(delta=float(d), worst_ratio=float(w), bound_ratio=float(taylor_kl_bound(d)) / float(d))
        for d, w in zip(ds, worst)
    )
    wt = Table(
        "taylor/worst",
        "worst KL(h_taylor||q)/delta over q_n in [0, 1] (2001 points):",
        (
            Column("delta", "delta", "g"),
            Column("worst_ratio", "worst KL/delta", ".3f"),
            Column("bound_ratio", "bound log(1+2d)/d", ".3f"),
        ),
        wrows,
    )
    note = (
        f"Corollary 6 holds (gamma <= 1/2 => KL <= delta); above 1/2 the Taylor point exceeds "
        f"the budget, at most by KL <= log(1 + 2 delta), tight at q_n = 1/(1+2 delta); it is "
        f"always within budget once delta >= {TAYLOR_WITHIN_BUDGET_FROM:.4f}."
    )
    return Section(
        "taylor",
        "Per draft: Taylor point (Corollary 5) vs exact root (Theorem 2), KL budget",
        ("gamma = the boosted h_n; budget ratio = KL(h_taylor||q)/delta (> 1: over budget).", grid, wt, note),
        figures=("gamma", "taylor_overshoot"),
    )


def section_families(seed: int = 0, n_pairs: int = 400, vocab_size: int = 64) -> Section:
    """Per draft vs emitted divergence of Taylor and exact Cactus on four synthetic families."""
    blocks = [
        f"{n_pairs} positions per family, V = {vocab_size}, seed {seed}; "
        "E_n = expectation over drafts n ~ p; h_alg = emitted distribution. "
        "Truncated = the paper's sampling setting (temperature 0.6, top-k 20, top-p 0.95) "
        "applied to both q and p."
    ]
    for family in ("dirichlet", "zipf", "logits", "noisy_copy"):
        q, p = synthetic_pairs(family, n_pairs, vocab_size, seed)
        for label, (qq, pp) in (
            ("untruncated", (q, p)),
            ("truncated", (truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION))),
        ):
            res = taylor_vs_exact_pairs(qq, pp, DEFAULT_DELTAS, "kl")
            blocks.append(family_table(res, f"families/{family}/{label}", f"[{family}, {label}]"))
    return Section(
        "families",
        "Per draft vs emitted: what Cactus actually emits (Theorem 3), synthetic families",
        tuple(blocks),
        figures=("per_draft_vs_emitted",),
    )


def rules_table(rows, name: str, title: str, show_knobs: bool) -> Table:
    from .analysis.rule_table import _COLUMNS

    cols = (Column("rule", "rule", "s"),) + tuple(Column(k, h) for k, h in _COLUMNS)
    if show_knobs:
        cols += (Column("knobs", "knobs", "knobs"),)
    return Table(name, title, cols, tuple(dict(r) for r in rows))


def section_rules(seed: int = 0, vocab_size: int = 256, n_pairs: int = 8) -> Section:
    """Every registered rule at its default knobs: acceptance, true emitted divergences, frontier gaps."""
    from .analysis.rule_table import rule_table

    q, p = np.array([[0.30, 0.35, 0.35]]), np.array([[0.05, 0.80, 0.15]])
    rq, rp = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    tq, tp = truncate(rq, **PAPER_TRUNCATION), truncate(rp, **PAPER_TRUNCATION)
    blocks = (
        "accept = sum_n p_n a_n; KL, TV of the emitted h_alg from q; gap = frontier acceptance "
        "at the rule's own true divergence minus the rule's (>= 0; inf divergence: frontier = 1). "
        "Cascades and fuzzy SD decide on the raw (untruncated) rows.",
        rules_table(
            rule_table(q, p),
            "rules/readme-pair",
            "[README pair q = (.30,.35,.35), p = (.05,.80,.15), untruncated]",
            False,
        ),
        rules_table(
            rule_table(rq, rp),
            "rules/noisy-copy",
            f"[noisy copy, V = {vocab_size}, {n_pairs} positions, untruncated]",
            False,
        ),
        rules_table(
            rule_table(tq, tp, raw_target_probs=rq, raw_draft_probs=rp),
            "rules/noisy-copy-truncated",
            f"[noisy copy, V = {vocab_size}, {n_pairs} positions, truncated T 0.6 / top-k 20 / top-p 0.95]",
            True,
        ),
    )
    return Section("rules", "Every rule at its default knobs (means over positions)", blocks)


#: The summary entries of ``compare_with_mentored`` a calibration row copies, in column order.
_CALIBRATION_SUMMARY = (
    "acceptance_sps",
    "acceptance_per_position",
    "acceptance_global",
    "acceptance_mentored",
    "global_delta",
    "median_per_position_delta",
)

CALIBRATION_COLUMNS = (
    Column("rows", "rows", "s"),
    Column("eps", "eps", "g"),
    Column("acceptance_sps", "SpS"),
    Column("acceptance_per_position", "per-pos"),
    Column("acceptance_global", "global"),
    Column("acceptance_mentored", "Mentored"),
    Column("global_delta", "global delta", ".4g"),
    Column("median_per_position_delta", "median delta", ".4g"),
    Column("percent_over_eps_global", "% > eps", ".0f"),
)


def calibration_rows(target_probs, draft_probs, eps_values=(0.05, 0.1, 0.2), label="") -> list[dict]:
    """Rows of calibrated Cactus-Taylor (per position, one global delta) vs Mentored at each eps."""
    from .analysis.calibration import compare_with_mentored

    rows = []
    for eps in eps_values:
        sm = compare_with_mentored(target_probs, draft_probs, eps).summary
        rows.append(
            dict(
                rows=label,
                eps=float(eps),
                **{k: sm[k] for k in _CALIBRATION_SUMMARY},
                percent_over_eps_global=100 * sm["fraction_over_eps_global"],
            )
        )
    return [json_ready(r) for r in rows]


def section_calibration(seed: int = 0, vocab_size: int = 256, n_pairs: int = 100) -> Section:
    """Delta calibrated to a target emitted KL eps: per position, one global delta, and Mentored."""
    q, p = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    rows = calibration_rows(q, p, label="untruncated") + calibration_rows(
        truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION), label="truncated"
    )
    note = (
        f"noisy copy, V = {vocab_size}, {n_pairs} positions. per-position = the largest delta with "
        "emitted KL <= eps at each position (the cactus-calibrated rule); global = one delta whose "
        "MEAN emitted KL is eps (so some positions exceed eps); Mentored = the acceptance-optimal "
        "rule with KL(pi||q) <= eps at every position."
    )
    return Section(
        "calibration",
        "Calibration: the delta that meets a target emitted KL(h_alg||q) = eps (Cactus-Taylor)",
        (note, Table("calibration/noisy-copy", "", CALIBRATION_COLUMNS, tuple(rows))),
    )


#: Rules swept against the frontier: (name, knob, values).
FRONTIER_SWEEPS = (
    ("cactus-taylor", "delta", (0.01, 0.1, 0.5, 1.0, 3.0)),
    ("cactus-exact-kl", "delta", (0.01, 0.1, 0.5, 1.0, 3.0)),
    ("mentored-kl", "D", (0.01, 0.05, 0.1, 0.3, 1.0)),
    ("interpolation", "alpha", (0.05, 0.1, 0.25, 0.5, 0.9)),
    ("cascade-token-v3", "alpha", (0.1, 0.3, 0.5, 0.7, 0.9)),
    ("tas", "posterior_threshold", (0.01, 0.05, 0.09, 0.2, 0.5)),
)

OPERATING_COLUMNS = (
    Column("rule", "rule", "s"),
    Column("knob", "knob", "s"),
    Column("value", "value", "g"),
    Column("acceptance", "accept"),
    Column("kl", "KL(h||q)"),
    Column("gap_kl", "gap@KL"),
)


def operating_rows(
    target_probs, draft_probs, raw_target_probs=None, raw_draft_probs=None, sweeps=FRONTIER_SWEEPS
) -> list[dict]:
    """Operating points of swept rules against the KL frontier (means over positions).

    gap = F(KL(h_alg||q)) - acceptance per position (>= 0), averaged; an infinite divergence at a
    position compares with F(inf) there.
    """
    from .analysis.frontier import operating_points

    rows = []
    for name, knob, values in sweeps:
        op = operating_points(
            name,
            target_probs,
            draft_probs,
            knob=knob,
            values=values,
            divergences=("kl",),
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
        )
        acc = np.mean(op.acceptance, axis=0)
        kl = np.mean(op.divergences["kl"], axis=0)
        gap = np.mean(op.gap["kl"], axis=0)
        gap = np.where(np.abs(gap) < 1e-9, 0.0, gap)  # >= 0 up to the solvers' rounding (1e-9)
        rows += [
            dict(rule=name, knob=knob, value=float(v), acceptance=float(a), kl=float(d), gap_kl=float(g))
            for v, a, d, g in zip(values, acc, kl, gap)
        ]
    return rows


def section_frontier(seed: int = 0, vocab_size: int = 256, n_pairs: int = 16) -> Section:
    """The optimal frontier F(eps), and every swept rule against F at its own true emitted KL."""
    from .solvers import frontier

    q, p = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    tq, tp = truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION)
    eps = (0.0, 0.01, 0.05, 0.1, 0.3, 1.0)
    frows = []
    for label, (qq, pp) in (("untruncated", (q, p)), ("truncated", (tq, tp))):
        F = np.mean(frontier(qq, pp, np.array(eps), "kl").acceptance, axis=0)
        frows.append({"rows": label, **{f"eps={e:g}": float(x) for e, x in zip(eps, F)}})
    ft = Table(
        "frontier/F",
        "",
        (Column("rows", "F(eps) at eps =", "s"),) + tuple(Column(f"eps={e:g}", f"{e:g}") for e in eps),
        tuple(frows),
    )
    ot = Table(
        "frontier/operating-points",
        "Operating points as each rule's knob sweeps (truncated rows; cascades and TAS read the "
        "raw rows where they use them):",
        OPERATING_COLUMNS,
        tuple(operating_rows(tq, tp, q, p)),
    )
    note = (
        "F(eps) = max sum_x min(p_x, o_x) s.t. KL(o||q) <= eps (exact; Mentored decoding attains it). "
        f"noisy copy, V = {vocab_size}, {n_pairs} positions, means over positions."
    )
    return Section(
        "frontier",
        "The optimal frontier: the best acceptance of any rule emitting within eps of q",
        (note, ft, ot),
        figures=("frontier",),
    )


#: Rules compared in the chain section, at the paper's deltas and every peer's defaults.
CHAIN_RULES = (
    ("sps", {}),
    ("tas", {}),
    ("cactus-taylor", {"delta": 0.75}),
    ("cactus-taylor", {"delta": 1.0}),
    ("cactus-exact-kl", {"delta": 0.75}),
    ("cactus-exact-kl", {"delta": 1.0}),
    ("interpolation", {}),
    ("mentored-kl", {}),
    ("cascade-token-v3", {}),
    ("fuzzy", {}),
)

CHAIN_COLUMNS = (
    Column("rule", "rule", "s"),
    Column("al_m", "AL_m", ".2f"),
    Column("tokens_per_call", "tok/call", ".2f"),
    Column("rej_percent", "Rej %", ".1f"),
    Column("kl_lower", "KL lo", ".3f"),
    Column("kl_upper", "KL up", ".3f"),
    Column("kl_sum", "sum KL", ".3f"),
)


def chain_rows(trajectories, m: int, rules=None) -> list[dict]:
    """Exact chain metrics (dynamic programme) of several rules over the same trajectories.

    Columns: AL_m (no bonus), tokens per call (with the bonus), Rej relative to SpS (the
    first rule must be SpS), and the sequence KL(emitted text || verifier) per token: exact
    lower and upper bounds and the naive per-step sum (teacher-forced).
    """
    from .rules import get_rule
    from .simulate import compute_metrics, exact_chain, sequence_divergence
    from .simulate.internal import pool_totals

    rules = CHAIN_RULES if rules is None else rules
    if rules[0][0] != "sps":
        raise ValueError("rules: the first rule must be sps (the Rej reference)")
    tokens = sum(t.length for t in trajectories)
    rows, sps_rej = [], None
    for name, knobs in rules:
        chains = [exact_chain(get_rule(name, **knobs), t, m) for t in trajectories]
        met = compute_metrics(pool_totals([c.totals for c in chains]))
        seq = [sequence_divergence(c) for c in chains]
        rej = met["rejected_per_token"].value
        sps_rej = rej if sps_rej is None else sps_rej
        label = name + (" " + " ".join(f"{k}={v:g}" for k, v in knobs.items()) if knobs else " (defaults)")
        lo, up, naive = (
            float(sum(getattr(x, f) for x in seq) / tokens)
            for f in ("kl_lower", "kl_upper", "kl_per_step_sum")
        )
        rows.append(
            dict(
                rule=label,
                al_m=float(met["al_paper"].value),
                tokens_per_call=float(met["tokens_per_call"].value),
                rej_percent=float(100 * (rej / sps_rej - 1)),
                kl_lower=lo,
                kl_upper=up,
                kl_sum=naive,
            )
        )
    return rows


def section_chain(seed: int = 0, m: int = 20, length: int = 200, trajectories: int = 4) -> Section:
    """Exact chain expectations (dynamic programme over round starts) at the paper's m = 20."""
    from .simulate import synthetic_trajectory

    rng = np.random.default_rng(seed)
    trajs = [
        synthetic_trajectory("noisy_copy", length, 64, rng, **PAPER_TRUNCATION) for _ in range(trajectories)
    ]
    note = (
        f"{trajectories} noisy-copy trajectories of T = {length} positions, V = 64, the paper's "
        "truncation; teacher-forced (the (q_t, p_t) do not depend on what is emitted). "
        "AL_m = accepted drafts per round without the bonus (the paper's); tok/call counts the "
        "bonus (vLLM V1, Spec-Bench); Rej = rejected drafts per token relative to SpS; "
        "sequence KL(emitted text || verifier) per token: exact lower and upper bounds, and the "
        "naive sum of per-step KL(h_t||q_t) (a looser upper bound, not an identity)."
    )
    return Section(
        "chain",
        f"Chains: exact expectations at draft length m = {m} (dynamic programme over round starts)",
        (note, Table("chain/noisy-copy", "", CHAIN_COLUMNS, tuple(chain_rows(trajs, m)))),
    )


def sequence_budget_table(res, name: str = "sequence") -> Table:
    """A :class:`~cactus_theory.simulate._sequence_budget.SequenceBudgetComparison` as a Table:
    one row per method (acceptance, KL per token, worst trajectory, AL_m per m, the chain's KL
    upper bound at the largest m, the calibrated knob)."""
    ms = res.draft_lengths
    cols = (
        (
            Column("method", "method", "s"),
            Column("acceptance", "accept"),
            Column("kl_per_token", "KL/tok"),
            Column("kl_worst_trajectory", "worst", ".3f"),
        )
        + tuple(Column(f"al_{m}", f"AL_{m}", ".3f") for m in ms)
        + (Column(f"kl_upper_{ms[-1]}", f"KLup@{ms[-1]}"), Column("knob", "knob", "s"))
    )
    title = (
        f"[{res.label}: {res.trajectories} trajectories, {res.positions} positions, "
        f"eps = {res.eps:g} nats per token]"
    )
    return Table(name, title, cols, tuple(res.rows()))


def format_sequence_budget(result) -> str:
    """Plain-text table of a
    :class:`~cactus_theory.simulate._sequence_budget.SequenceBudgetComparison` (one row per
    method), printed by :func:`format_table`."""
    return format_table(sequence_budget_table(result), "text")


def default_corpora(seed: int = 0, real: bool = True) -> list:
    """The report's corpora: ``[(key, trajectories, label), ...]``.

    ``synthetic``: 8 noisy-copy trajectories (V = 64, T = 64) truncated as in the paper's code
    (temperature 0.6, top-k 20, top-p 0.95), drawn with ``seed``; ``real`` (when ``real`` and the
    shipped recordings are present): the first 16 prompts of the SmolLM2-135M-Instruct / distilled
    drafter recording with at least two positions.
    """
    from .logits import load_dump, shipped_dumps
    from .simulate import synthetic_trajectory

    truncation = dict(temperature=0.6, top_k=20, top_p=0.95)
    rng = np.random.default_rng(seed)
    synth = [synthetic_trajectory("noisy_copy", 64, 64, rng, **truncation) for _ in range(8)]
    corpora = [("synthetic", synth, "noisy copy, V = 64, T = 64, truncated T 0.6 / top-k 20 / top-p 0.95")]
    files = [f for f in shipped_dumps() if "distilled" in f.name] if real else []
    if files:
        trajs = [t for t in load_dump(files[0]).trajectories() if t.target_probs.shape[0] >= 2][:16]
        corpora.append(("real", trajs, "real: SmolLM2-135M-Instruct, drafter distilled, first 16 prompts"))
    return corpora


def section_sequence_budget(seed: int = 0, eps: float = 0.1) -> Section:
    """Methods at equal sequence-level KL: AL at m = 2, 4, 8, 20 (synthetic and real trajectories)."""
    from .simulate import compare_sequence_budget

    corpora = default_corpora(seed)
    blocks = [
        "Each method's knob is calibrated so that the mean of KL(h_t||q_t) over the corpus is eps (with "
        "single-token steps, the sequence KL per token, by the chain rule); the offline optimum meets T eps "
        "on each trajectory, the online rule (held-out lambda + budget account) at most T eps on each. "
        "'worst' = the largest per-token KL of one trajectory; AL_m exact, teacher-forced, bonus not "
        "counted; KLup = the chain's exact upper bound on the sequence KL per token at the largest m."
    ]
    for key, trajs, label in corpora:
        blocks.append(
            sequence_budget_table(compare_sequence_budget(trajs, eps, label=label), f"sequence/{key}")
        )
    return Section(
        "sequence",
        "A sequence-level KL budget: every method at the same mean per-token emitted KL",
        tuple(blocks),
    )
