r"""Claims 8 and 9: TAS as the cross-entropy budget problem, and the README's worked example."""

from __future__ import annotations

import math

import numpy as np

from cactus_theory.divergences import get_divergence
from cactus_theory.solvers._spike import exact_spike, taylor_spike

from .verdicts import Check, Definition, Verdict, stated


def claim_tas_cross_entropy() -> Verdict:
    # max h_n s.t. sum h_i (-log q_i) <= delta is a linear programme: h = e_n if q_n >= e^-delta,
    # else h mixes e_n with e_m (m = argmax q), h_n = (delta + log q_m) / (log q_m - log q_n)^+.
    q = np.array([0.5, 0.3, 0.15, 0.05])
    H = float(-(q * np.log(q)).sum())
    alpha = 0.3
    delta = H - math.log(alpha)  # the budget that makes e^-delta = alpha e^-H(q)
    c = -np.log(q)
    gap = c - c.min()
    hn = np.where(c <= delta, 1.0, np.clip((delta - c.min()) / np.where(gap > 0, gap, 1.0), 0, 1))
    fractional = int(np.sum((hn > 0) & (hn < 1)))
    tas_accepts = q >= alpha * math.exp(-H)  # TAS's threshold without its eps cap
    mismatch = int(np.sum((hn >= 1) != tas_accepts))
    return Verdict(
        8,
        "Eq. 10 / Prop. 4: TAS is the same problem with a cross-entropy budget",
        stated(
            "max h_n subject to the cross-entropy H(h, q) <= delta (a linear programme), "
            "against TAS's 0/1 acceptance at q_n >= alpha e^-H(q) without its eps cap",
            Check(
                "tokens where the LP's certain acceptance differs from TAS's threshold "
                "(delta = H(q) + log(1/alpha))",
                mismatch,
                "<=",
                0,
            ),
            Check(
                "tokens where the LP's optimum is fractional (TAS is 0/1)",
                fractional,
                "<=",
                0,
            ),
        ),
        f"the cross-entropy problem is a linear programme: accept with certainty iff q_n >= e^-delta "
        f"and recover to argmax q; between thresholds its optimum is fractional (q = {q.tolist()}, "
        f"alpha = {alpha}), where TAS rejects outright; TAS's eps cap has no budget counterpart",
        {"mismatch": mismatch, "fractional": fractional},
    )


#: The README worked example: q, p over (decode, generate, output), the drafted token, and its
#: printed numbers with the rounding interval each printed value stands for.
README_EXAMPLE = dict(q=(0.30, 0.35, 0.35), p=(0.05, 0.80, 0.15), n=1)
README_PRINTED = {
    "gamma = .66": (0.655, 0.665),
    "h_decode = .16": (0.155, 0.165),
    "h_output = .18": (0.175, 0.185),
    "acceptance 82%": (0.815, 0.825),
    "KL(h||q) = 0.20 nats": (0.195, 0.205),
}
#: Grid step of the delta scan of the README readings.
README_DELTA_STEP = 1e-5


def readme_example_readings(step: float = README_DELTA_STEP):
    r"""Every (rule, delta) reading of the README worked example, number by number.

    For the Taylor point and the exact KL root, scan delta on [0.1, 0.4] (step ``step``) and
    return, for each printed number, the delta interval where the rule's value rounds to it
    (half-open intervals of :data:`README_PRINTED`), and the interval where all of them do.

    Returns
    -------
    dict
        ``{rule: {number label or "all": (lo, hi) or None}}``.
    """
    q = np.array(README_EXAMPLE["q"])
    p = np.array(README_EXAMPLE["p"])
    n = README_EXAMPLE["n"]
    deltas = np.arange(0.1, 0.4, step)
    out = {}
    for rule in ("cactus-taylor", "cactus-exact-kl"):
        gam = _spike_grid(rule, q[n], deltas)
        c = (1 - gam) / (1 - q[n])
        vals = {
            "gamma = .66": gam,
            "h_decode = .16": q[0] * c,
            "h_output = .18": q[2] * c,
            "acceptance 82%": gam / p[n],
            "KL(h||q) = 0.20 nats": get_divergence("kl").two_point(gam, np.full(gam.shape, q[n])),
        }
        res, every = {}, np.ones(deltas.shape, bool)
        for label, (lo, hi) in README_PRINTED.items():
            ok = (vals[label] >= lo) & (vals[label] < hi)
            every &= ok
            res[label] = (float(deltas[ok].min()), float(deltas[ok].max())) if ok.any() else None
        res["all"] = (float(deltas[every].min()), float(deltas[every].max())) if every.any() else None
        out[rule] = res
    return out


def _spike_grid(rule, q_n, deltas):
    if rule == "cactus-taylor":
        return np.asarray(taylor_spike(np.full(deltas.shape, q_n), deltas), dtype=np.float64)
    return np.asarray(exact_spike(np.full(deltas.shape, q_n), deltas, "kl"), dtype=np.float64)


def claim_readme_example() -> Verdict:
    rd = readme_example_readings()
    parts, defs = [], []
    for rule, v in rd.items():
        per = "; ".join(
            f"{k} for delta in [{x[0]:.4f}, {x[1]:.4f}]" if x else f"{k} never"
            for k, x in v.items()
            if k != "all"
        )
        allr = f"[{v['all'][0]:.4f}, {v['all'][1]:.4f}]" if v["all"] else "none"
        parts.append(f"{rule}: every number fits for delta in {allr} ({per})")
        n_fit = 0 if v["all"] is None else round((v["all"][1] - v["all"][0]) / README_DELTA_STEP) + 1
        defs.append(
            Definition(
                f"{rule}, delta on [0.1, 0.4] (step {README_DELTA_STEP:g})",
                (
                    Check(
                        f"{rule}: grid deltas at which every printed number fits",
                        n_fit,
                        ">=",
                        1,
                    ),
                ),
            )
        )
    nums = {f"{r}_all": v["all"] for r, v in rd.items()}
    return Verdict(
        9,
        "README example: .35 -> .66, h ~ (.16, .66, .18), 44% -> 82% acceptance, 0.20 nats",
        tuple(defs),
        f"delta grid step {README_DELTA_STEP:g}, printed values read as rounding intervals. "
        + ". ".join(parts)
        + ". The README states neither rule nor delta; with the exact root, "
        "KL(h||q) = delta, so that reading is delta ~ 0.20 itself; SpS accepts .35/.80 = 43.75%",
        nums,
        unstated="which rule (Taylor point or exact root) and which delta gave the numbers",
    )
