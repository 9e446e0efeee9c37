"""The main job: a plain-text report of the toolkit's exact results on embedded defaults.

Each section is a function returning text; :func:`build_report` joins them. Everything is
computed from seeded synthetic families (and, when shipped, recorded real distributions), so
the report is reproducible bit for bit.
"""

from __future__ import annotations

import numpy as np

from .analysis.comparison import (
    TAYLOR_WITHIN_BUDGET_FROM,
    format_family_comparison,
    taylor_kl_bound,
    taylor_vs_exact_grid,
    taylor_vs_exact_pairs,
)
from .distributions import synthetic_pairs, truncate

__all__ = ["build_report", "SECTIONS", "PAPER_TRUNCATION"]

#: The paper's sampling setting (code defaults): temperature 0.6, top-k 20, top-p 0.95.
PAPER_TRUNCATION = dict(temperature=0.6, top_k=20, top_p=0.95)
DEFAULT_DELTAS = (0.1, 0.5, 1.0)


def section_taylor_grid(seed: int = 0) -> str:
    """Corollary 5's Taylor point against Theorem 2's root on a (q_n, delta) grid."""
    qs = np.array([0.01, 0.05, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99])
    ds = np.array([0.01, 0.1, 0.5, 1.0, 2.0])
    g = taylor_vs_exact_grid(qs, ds, "kl")
    lines = ["## Per draft: Taylor point (Corollary 5) vs exact root (Theorem 2), KL budget",
             "cell = gamma_taylor / gamma_exact / KL(h_taylor||q)/delta"]
    lines.append(f"{'q_n':>6} | " + " | ".join(f"delta={d:<17g}" for d in ds))
    for i, q in enumerate(qs):
        cells = [f"{g.gamma_taylor[i, j]:.3f}/{g.gamma_exact[i, j]:.3f}/{g.budget_ratio[i, j]:.2f}"
                 for j in range(len(ds))]
        lines.append(f"{q:>6.2f} | " + " | ".join(f"{c:<23}" for c in cells))
    worst = taylor_vs_exact_grid(np.linspace(0, 1, 2001), ds, "kl").budget_ratio.max(axis=0)
    lines.append("worst KL(h_taylor||q)/delta over q_n: " + ", ".join(
        f"delta={d:g}: {w:.3f} (bound log(1+2d)/d = {float(taylor_kl_bound(d)) / d:.3f})"
        for d, w in zip(ds, worst)))
    lines.append(f"Corollary 6 holds (gamma <= 1/2 => KL <= delta); above 1/2 the Taylor point "
                 f"exceeds the budget, at most by KL <= log(1 + 2 delta), tight at "
                 f"q_n = 1/(1+2 delta); it is always within budget once delta >= "
                 f"{TAYLOR_WITHIN_BUDGET_FROM:.4f}.")
    return "\n".join(lines)


def section_families(seed: int = 0, n_pairs: int = 400, vocab_size: int = 64) -> str:
    """Per-draft vs emitted divergence of Taylor and exact Cactus on synthetic families."""
    out = ["## Per draft vs emitted: what Cactus actually emits (Theorem 3), synthetic families",
           f"{n_pairs} positions per family, V = {vocab_size}, seed {seed}; "
           "E_n = expectation over drafts n ~ p; h_alg = emitted distribution.",
           "Truncated = the paper's sampling setting (temperature 0.6, top-k 20, top-p 0.95) "
           "applied to both q and p."]
    for family in ("dirichlet", "zipf", "logits", "noisy_copy"):
        q, p = synthetic_pairs(family, n_pairs, vocab_size, seed)
        for label, (qq, pp) in (("untruncated", (q, p)),
                                ("truncated", (truncate(q, **PAPER_TRUNCATION),
                                               truncate(p, **PAPER_TRUNCATION)))):
            res = taylor_vs_exact_pairs(qq, pp, DEFAULT_DELTAS, "kl")
            out.append("")
            out.append(format_family_comparison(res, f"[{family}, {label}]"))
    return "\n".join(out)


def section_rules(seed: int = 0, vocab_size: int = 256, n_pairs: int = 8) -> str:
    """Every registered rule at its default knobs: acceptance, true emitted divergences, gaps."""
    from .analysis.rule_table import format_rule_table, rule_table

    out = ["## Every rule at its default knobs (issue 3's table; means over positions)",
           "accept = sum_n p_n a_n; KL, TV of the emitted h_alg from q; gap = frontier acceptance at "
           "the rule's own true divergence minus the rule's (>= 0; inf divergence: frontier = 1).",
           "Cascades and fuzzy SD decide on the raw (untruncated) rows."]
    q, p = np.array([[0.30, 0.35, 0.35]]), np.array([[0.05, 0.80, 0.15]])
    out.append(format_rule_table(rule_table(q, p), title="[README pair q = (.30,.35,.35), "
                                 "p = (.05,.80,.15), untruncated]", show_knobs=False))
    rq, rp = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    out.append(format_rule_table(rule_table(rq, rp), title=f"[noisy copy, V = {vocab_size}, "
                                 f"{n_pairs} positions, untruncated]", show_knobs=False))
    tq, tp = truncate(rq, **PAPER_TRUNCATION), truncate(rp, **PAPER_TRUNCATION)
    out.append(format_rule_table(rule_table(tq, tp, raw_target_probs=rq, raw_draft_probs=rp),
                                 title=f"[noisy copy, V = {vocab_size}, {n_pairs} positions, "
                                 "truncated T 0.6 / top-k 20 / top-p 0.95]", show_knobs=True))
    return "\n\n".join(out)


def calibration_table(target_probs, draft_probs, eps_values=(0.05, 0.1, 0.2), label="") -> list[str]:
    """Rows of calibrated Cactus-Taylor (per position, global) vs Mentored at each eps."""
    from .analysis.calibration import compare_with_mentored

    rows = []
    for eps in eps_values:
        sm = compare_with_mentored(target_probs, draft_probs, eps).summary
        rows.append(f"{label:<12}{eps:>6g}{sm['acceptance_sps']:>8.4f}{sm['acceptance_per_position']:>9.4f}"
                    f"{sm['acceptance_global']:>8.4f}{sm['acceptance_mentored']:>10.4f}"
                    f"{sm['global_delta']:>14.4g}{sm['median_per_position_delta']:>14.4g}"
                    f"{100 * sm['fraction_over_eps_global']:>9.0f}")
    return rows


CALIBRATION_HEADER = (f"{'rows':<12}{'eps':>6}{'SpS':>8}{'per-pos':>9}{'global':>8}{'Mentored':>10}"
                      f"{'global delta':>14}{'median delta':>14}{'% > eps':>9}")


def section_calibration(seed: int = 0, vocab_size: int = 256, n_pairs: int = 100) -> str:
    """Delta calibrated to a target emitted KL eps: per position, one global delta, Mentored."""
    lines = ["## Calibration: the delta that meets a target emitted KL(h_alg||q) = eps (Cactus-Taylor)",
             f"noisy copy, V = {vocab_size}, {n_pairs} positions. per-position = the largest delta with "
             "emitted KL <= eps at each position (the cactus-calibrated rule); global = one delta whose",
             "MEAN emitted KL is eps (so some positions exceed eps); Mentored = the acceptance-optimal "
             "rule with KL(pi||q) <= eps at every position (an upper bound on both).",
             CALIBRATION_HEADER]
    q, p = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    lines += calibration_table(q, p, label="untruncated")
    lines += calibration_table(truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION),
                               label="truncated")
    return "\n".join(lines)


#: Rules swept against the frontier: (name, knob values, fixed knobs).
FRONTIER_SWEEPS = (("cactus-taylor", "delta", (0.01, 0.1, 0.5, 1.0, 3.0)),
                   ("cactus-exact-kl", "delta", (0.01, 0.1, 0.5, 1.0, 3.0)),
                   ("mentored-kl", "D", (0.01, 0.05, 0.1, 0.3, 1.0)),
                   ("interpolation", "alpha", (0.05, 0.1, 0.25, 0.5, 0.9)),
                   ("cascade-token-v3", "alpha", (0.1, 0.3, 0.5, 0.7, 0.9)),
                   ("tas", "posterior_threshold", (0.01, 0.05, 0.09, 0.2, 0.5)))


def frontier_table(target_probs, draft_probs, raw_target_probs=None, raw_draft_probs=None,
                   sweeps=FRONTIER_SWEEPS) -> str:
    """Operating points of swept rules against the KL frontier (means over positions).

    gap = F(KL(h_alg||q)) - acceptance per position (>= 0), averaged; an infinite divergence at a
    position compares with F(inf) there.
    """
    from .analysis.frontier import operating_points

    lines = [f"{'rule':<18}{'knob':<20}{'value':>7}{'accept':>8}{'KL(h||q)':>10}{'gap@KL':>8}"]
    for name, knob, values in sweeps:
        op = operating_points(name, target_probs, draft_probs, knob=knob, values=values,
                              divergences=("kl",), raw_target_probs=raw_target_probs,
                              raw_draft_probs=raw_draft_probs)
        acc = np.mean(op.acceptance, axis=0)
        kl = np.mean(op.divergences["kl"], axis=0)
        gap = np.mean(op.gap["kl"], axis=0)
        gap = np.where(np.abs(gap) < 1e-9, 0.0, gap)  # >= 0 up to the solvers' rounding
        for v, a, d, g in zip(values, acc, kl, gap):
            lines.append(f"{name:<18}{knob:<20}{v:>7g}{a:>8.4f}{d:>10.4f}{g:>8.4f}")
    return "\n".join(lines)


def section_frontier(seed: int = 0, vocab_size: int = 256, n_pairs: int = 16) -> str:
    """Every swept rule against the optimal acceptance at its own true emitted KL."""
    from .solvers.frontier import frontier

    q, p = synthetic_pairs("noisy_copy", n_pairs, vocab_size, seed)
    tq, tp = truncate(q, **PAPER_TRUNCATION), truncate(p, **PAPER_TRUNCATION)
    eps = np.array([0.0, 0.01, 0.05, 0.1, 0.3, 1.0])
    lines = ["## The optimal frontier: the best acceptance of any rule emitting within eps of q",
             "F(eps) = max sum_x min(p_x, o_x) s.t. KL(o||q) <= eps (exact; Mentored decoding attains it). "
             f"noisy copy, V = {vocab_size}, {n_pairs} positions, means over positions.",
             "eps:          " + "".join(f"{e:>8g}" for e in eps)]
    for label, (qq, pp) in (("untruncated", (q, p)), ("truncated", (tq, tp))):
        F = np.mean(frontier(qq, pp, eps, "kl").acceptance, axis=0)
        lines.append(f"F, {label:<10}" + "".join(f"{x:>8.4f}" for x in F))
    lines += ["", "Operating points as each rule's knob sweeps (truncated rows; cascades and TAS on raw "
              "rows where they read them):", frontier_table(tq, tp, q, p)]
    return "\n".join(lines)


#: Rules compared in the chain section, at the paper's deltas and every peer's defaults.
CHAIN_RULES = (("sps", {}), ("tas", {}), ("cactus-taylor", {"delta": 0.75}),
               ("cactus-taylor", {"delta": 1.0}), ("cactus-exact-kl", {"delta": 0.75}),
               ("cactus-exact-kl", {"delta": 1.0}), ("interpolation", {}), ("mentored-kl", {}),
               ("cascade-token-v3", {}), ("fuzzy", {}))


def chain_table(trajectories, m: int, rules=None) -> str:
    """Exact chain metrics (dynamic programme) of several rules over the same trajectories.

    Columns: AL_m (no bonus), tokens per call (with the bonus), Rej relative to SpS (the
    first row must be SpS), and the sequence KL(emitted text || verifier) per token: exact
    lower and upper bounds and the naive per-step sum (teacher-forced).
    """
    from .rules import get_rule
    from .simulate.exact import exact_chain, sequence_divergence
    from .simulate.metrics import compute_metrics, pool_totals

    rules = CHAIN_RULES if rules is None else rules
    if rules[0][0] != "sps":
        raise ValueError("rules: the first rule must be sps (the Rej reference)")
    tokens = sum(t.length for t in trajectories)
    lines = [f"{'rule':<30}{'AL_m':>7}{'tok/call':>9}{'Rej %':>8}{'KL lo':>8}{'KL up':>8}{'sum KL':>8}"]
    sps_rej = None
    for name, knobs in rules:
        chains = [exact_chain(get_rule(name, **knobs), t, m) for t in trajectories]
        met = compute_metrics(pool_totals([c.totals for c in chains]))
        seq = [sequence_divergence(c) for c in chains]
        rej = met["rejected_per_token"].value
        sps_rej = rej if sps_rej is None else sps_rej
        label = name + (" " + " ".join(f"{k}={v:g}" for k, v in knobs.items()) if knobs
                        else " (defaults)")
        lo, up, naive = (sum(getattr(x, f) for x in seq) / tokens
                         for f in ("kl_lower", "kl_upper", "kl_per_step_sum"))
        lines.append(f"{label:<30}{met['al_paper'].value:>7.2f}{met['tokens_per_call'].value:>9.2f}"
                     f"{100 * (rej / sps_rej - 1):>8.1f}{lo:>8.3f}{up:>8.3f}{naive:>8.3f}")
    return "\n".join(lines)


def section_chain(seed: int = 0, m: int = 20, length: int = 200, trajectories: int = 4) -> str:
    """Exact chain expectations (dynamic programme) at the paper's draft length m = 20."""
    from .simulate.synthetic import synthetic_trajectory

    rng = np.random.default_rng(seed)
    trajs = [synthetic_trajectory("noisy_copy", length, 64, rng, **PAPER_TRUNCATION)
             for _ in range(trajectories)]
    lines = [f"## Chains: exact expectations at draft length m = {m} (dynamic programme over round starts)",
             f"{trajectories} noisy-copy trajectories of T = {length} positions, V = 64, the paper's "
             "truncation; teacher-forced (the (q_t, p_t) do not depend on what is emitted).",
             "AL_m = accepted drafts per round without the bonus (the paper's); tokens/call counts the "
             "bonus (vLLM V1, Spec-Bench); Rej = rejected drafts per token relative to SpS;",
             "sequence KL(emitted text || verifier) per token: exact lower and upper bounds, and the "
             "naive sum of per-step KL(h_t||q_t) (a looser upper bound, not an identity).",
             chain_table(trajs, m)]
    return "\n".join(lines)


#: Rules of the real-data chain tables.
REAL_CHAIN_RULES = (("sps", {}), ("tas", {}), ("cactus-taylor", {"delta": 0.75}),
                    ("cactus-taylor", {"delta": 1.0}), ("cactus-exact-kl", {"delta": 1.0}),
                    ("mentored-kl", {}))


def section_real(seed: int = 0, m: int = 8) -> str:
    """The same analyses on the shipped real distributions (SmolLM2-135M and its drafters)."""
    from .analysis.rule_table import format_rule_table, rule_table
    from .logits import load_dump, load_full_vocab_sample, shipped_dumps
    from .simulate.chain import Trajectory

    files = shipped_dumps()
    if not files:
        return "## Real distributions\n(no shipped recordings found)"
    out = ["## Real distributions: SmolLM2-135M-Instruct (verifier) and four drafters sharing its tokenizer",
           "Recorded by `cactus-theory dump --shipped`: 45 prompts (Spec-Bench categories, GSM8K, IFEval), "
           "sampling transforms temperature 0.6 / top-p 0.95 / top-k 20; raw = temperature 1.",
           "Per pair: per draft vs emitted KL for Cactus (as in the synthetic section), then exact chain "
           f"expectations at m = {m} (teacher-forced replay of the recorded trajectories)."]
    dumps = {}
    for f in files:
        d = load_dump(f)
        name = f.stem.replace("smollm2-135m_", "")
        dumps[name] = d
        q, p, rq, rp = d.pairs()
        res = taylor_vs_exact_pairs(q, p, (0.1, 0.75, 1.0), "kl")
        out.append("")
        out.append(format_family_comparison(res, f"[drafter {name}: {q.shape[0]} positions]"))
        trajs = [Trajectory(t.target_probs, t.draft_probs, t.raw_target_probs, t.raw_draft_probs)
                 for t in d.trajectories() if t.target_probs.shape[0] >= 2]
        out.append(chain_table(trajs, m, REAL_CHAIN_RULES))
    if "distilled" in dumps:
        q, p, rq, rp = dumps["distilled"].pairs()
        out.append("")
        out.append(format_rule_table(rule_table(q, p, raw_target_probs=rq, raw_draft_probs=rp),
                                     title="[every rule at default knobs, drafter distilled, "
                                     f"{q.shape[0]} positions, means]", show_knobs=False))
        out.append("\n".join(["", "Operating points against the KL frontier, drafter distilled (means over "
                               f"{q.shape[0]} positions; raw rows for TAS's entropy and the cascades):",
                               frontier_table(q, p, rq, rp)]))
        out.append("\n".join(["", "Calibration on the distilled pair (Cactus-Taylor): acceptance at "
                               "emitted KL <= eps", CALIBRATION_HEADER]
                              + calibration_table(q, p, label="distilled")))
    for which, model in (("smollm2", "SmolLM2-135M-Instruct"), ("gemma3", "Gemma-3-270M")):
        Q, P = load_full_vocab_sample(which)
        res = taylor_vs_exact_pairs(Q, P, (0.1, 1.0), "kl")
        out.append("")
        out.append(format_family_comparison(
            res, f"[full vocabulary V = {Q.shape[1]}: {model} (raw, T = 1) vs its 4-bit "
                 f"re-quantization, {Q.shape[0]} positions]"))
    return "\n".join(out)


def section_sequence_budget(seed: int = 0, eps: float = 0.1) -> str:
    """Methods at equal sequence-level KL: AL at m = 2, 4, 8, 20 (synthetic and real trajectories)."""
    from .analysis.sequence_budget import compare_sequence_budget, format_sequence_budget
    from .logits import load_dump, shipped_dumps
    from .simulate.chain import Trajectory
    from .simulate.synthetic import synthetic_trajectory

    rng = np.random.default_rng(seed)
    synth = [synthetic_trajectory("noisy_copy", 64, 64, rng, **PAPER_TRUNCATION) for _ in range(8)]
    out = ["## A sequence-level KL budget: every method at the same mean per-token emitted KL",
           "Each method's knob is calibrated so that the mean of KL(h_t||q_t) over the corpus is eps (with "
           "single-token steps, the sequence KL per token, by the chain rule); the offline optimum meets T eps "
           "on each trajectory, the online rule (held-out lambda + budget account) at most T eps on each. "
           "'worst' = the largest per-token KL of one trajectory; AL_m exact, teacher-forced, bonus not "
           "counted; KLup = the chain's exact upper bound on the sequence KL per token at the largest m.",
           format_sequence_budget(compare_sequence_budget(
               synth, eps, label="noisy copy, V = 64, T = 64, truncated T 0.6 / top-k 20 / top-p 0.95"))]
    files = [f for f in shipped_dumps() if "distilled" in f.name]
    if files:
        trajs = [Trajectory(t.target_probs, t.draft_probs) for t in load_dump(files[0]).trajectories()
                 if t.target_probs.shape[0] >= 2][:16]
        out += ["", format_sequence_budget(compare_sequence_budget(
            trajs, eps, label="real: SmolLM2-135M-Instruct, drafter distilled, first 16 prompts"))]
    return "\n".join(out)


def section_claims(seed: int = 0) -> str:
    """Verdicts with numbers on the paper's checkable claims."""
    from .paper_claims import check_claims, format_verdicts

    return "## The paper's claims, checked\n" + format_verdicts(check_claims(seed=seed))


SECTIONS = {
    "claims": section_claims,
    "taylor": section_taylor_grid,
    "families": section_families,
    "rules": section_rules,
    "frontier": section_frontier,
    "calibration": section_calibration,
    "chain": section_chain,
    "real": section_real,
    "sequence": section_sequence_budget,
}


def build_report(sections=None, seed: int = 0) -> str:
    """Join the report's sections (all by default) into one text.

    Parameters
    ----------
    sections : sequence of str, optional
        Keys of :data:`SECTIONS`; unknown keys raise ValueError naming ``sections``.
    seed : int
        Seed of every synthetic family.
    """
    names = list(SECTIONS) if not sections else list(sections)
    for name in names:
        if name not in SECTIONS:
            raise ValueError(f"sections: unknown section {name!r}; valid: {', '.join(SECTIONS)}")
    head = ("# cactus_theory report\n"
            "Exact one-step analysis (float64). q = verifier, p = drafter, n = drafted token, "
            "delta = budget.")
    return "\n\n".join([head] + [SECTIONS[name](seed=seed) for name in names]) + "\n"
