r"""Claim 10: the paper's main table, its Rej column against its AL column under every definition of
Rej tried."""

from __future__ import annotations

import math

from .verdicts import Check, Definition, Verdict

#: (task, method, AL, Rej %) from the paper's main table (Qwen3-14B / Qwen3-0.6B, m = 20).
PAPER_TABLE = [
    ("GSM8K", "SpS", 5.11, None),
    ("GSM8K", "TAS", 6.78, -32),
    ("GSM8K", "Cactus 0.75", 7.15, -36),
    ("GSM8K", "Cactus 1.0", 7.00, -34),
    ("GPQA", "SpS", 3.84, None),
    ("GPQA", "TAS", 6.41, -46),
    ("GPQA", "Cactus 0.75", 6.46, -46),
    ("GPQA", "Cactus 1.0", 6.74, -50),
]


#: Definitions of Rej computable from the printed table: (name, rejected tokens as a function
#: of AL and m). AL counts accepted drafted tokens per verification round (bonus not counted), so
#: a round emits AL + 1 tokens and leaves m - AL drafted tokens unaccepted.
REJ_DEFINITIONS = (
    (
        "unaccepted drafted tokens per generated token, (m - AL)/(AL + 1)",
        lambda al, m: (m - al) / (al + 1),
    ),
    (
        "draft slots not filled by an output token, per generated token, (m - AL - 1)/(AL + 1)",
        lambda al, m: (m - al - 1) / (al + 1),
    ),
    ("unaccepted drafted tokens per verification round, m - AL", lambda al, m: m - al),
    (
        "rejection events per generated token (one per round), 1/(AL + 1)",
        lambda al, m: 1.0 / (al + 1),
    ),
    (
        "unaccepted drafted tokens per accepted token, (m - AL)/AL",
        lambda al, m: (m - al) / al,
    ),
    (
        "AL read as counting the bonus token: (m + 1 - AL)/AL per generated token",
        lambda al, m: (m + 1 - al) / al,
    ),
)
#: Half-widths of the printed rounding: AL to 2 decimals, Rej to a whole percent.
AL_ROUNDING, REJ_ROUNDING = 0.005, 0.5


def rej_readings(m: int = 20, table=None) -> list[dict]:
    r"""Rej implied by the printed AL under each definition of :data:`REJ_DEFINITIONS`.

    Rej of a method is :math:`100\,(r(AL)/r(AL_{SpS}) - 1)` where :math:`r` is the definition's
    rejected tokens (corpus averages: the ratio of the printed means). A row agrees when the
    interval of implied Rej over the AL rounding (+-0.005 on both ALs) meets the printed Rej's
    (+-0.5 points).

    Returns
    -------
    list of dict
        One per definition: ``name``, ``rows`` (task, method, implied, lo, hi, printed, gap) and
        ``agree`` (number of rows whose gap is 0).
    """
    table = PAPER_TABLE if table is None else table
    out = []
    for name, r in REJ_DEFINITIONS:
        ref, rows = {}, []
        for task, method, al, rej in table:
            if rej is None:
                ref[task] = al
                continue
            r0 = ref[task]
            ends = [
                100 * (r(al + x, m) / r(r0 + y, m) - 1)
                for x in (-AL_ROUNDING, AL_ROUNDING)
                for y in (-AL_ROUNDING, AL_ROUNDING)
            ]
            lo, hi = (
                min(ends),
                max(ends),
            )  # r is monotone in AL, so the corners bound the interval
            gap = max(0.0, lo - (rej + REJ_ROUNDING), (rej - REJ_ROUNDING) - hi)
            rows.append(
                dict(
                    task=task,
                    method=method,
                    implied=100 * (r(al, m) / r(r0, m) - 1),
                    lo=lo,
                    hi=hi,
                    printed=rej,
                    gap=gap,
                )
            )
        out.append(dict(name=name, rows=rows, agree=sum(row["gap"] == 0 for row in rows)))
    return out


def per_prompt_sps_spread(m: int = 20, table=None) -> list[dict]:
    r"""Spread of SpS's per-prompt AL that per-prompt averaging would need to give each printed Rej.

    Averaging :math:`r(AL_i) = (m+1)/(AL_i+1) - 1` over prompts instead of over the corpus raises
    it by about :math:`(m+1)\,\mathrm{Var}(AL_i)/(AL+1)^3` (second order, Jensen). With no per-prompt
    spread for the method, the printed Rej needs SpS's per-prompt standard deviation
    :math:`s = \sqrt{(r(AL)/(1 + Rej/100) - r(AL_{SpS}))\,(AL_{SpS}+1)^3/(m+1)}` (nan where the
    radicand is negative).
    """
    table = PAPER_TABLE if table is None else table
    ref, out = {}, []
    r = lambda al: (m + 1) / (al + 1) - 1  # noqa: E731  (unaccepted drafted tokens per generated token)
    for task, method, al, rej in table:
        if rej is None:
            ref[task] = al
            continue
        r0 = ref[task]
        var = (r(al) / (1 + rej / 100) - r(r0)) * (r0 + 1) ** 3 / (m + 1)
        out.append(dict(task=task, method=method, sd=math.sqrt(var) if var >= 0 else math.nan))
    return out


def claim_table_consistency(m: int = 20) -> Verdict:
    """The Rej column against the AL column, under every definition of Rej tried.

    The paper's table says only "rejected tokens relative to SpS": per what (generated token,
    round, accepted token), which tokens count, and whether it averages over prompts or over the
    corpus are unstated, so each computable definition is graded row by row, and per-prompt
    averaging (which the printed means cannot determine) is listed as not computable.
    """
    defs, parts, nums = [], [], {}
    readings = rej_readings(m)
    for k, rd in enumerate(readings):
        checks = tuple(
            Check(
                f"{row['task']} {row['method']}: implied {row['implied']:.1f}% "
                f"[{row['lo']:.1f}, {row['hi']:.1f}] vs printed {row['printed']}%: gap (points)",
                row["gap"],
                "<=",
                0.0,
            )
            for row in rd["rows"]
        )
        defs.append(
            Definition(
                f"{rd['name']}, relative to SpS, corpus averages",
                checks,
                note=f"{rd['agree']} of {len(rd['rows'])} rows agree",
            )
        )
        nums[f"agree_{k}"] = rd["agree"]
        nums[f"max_gap_{k}"] = max(abs(row["implied"] - row["printed"]) for row in rd["rows"])
        parts.append(f"{rd['name']}: {rd['agree']} of {len(rd['rows'])} rows")
    spread = per_prompt_sps_spread(m)
    sd = [x["sd"] for x in spread]
    nums["per_prompt_sd"] = sd
    defs.append(
        Definition(
            "per-prompt averages of (m - AL_i)/(AL_i + 1) (or of per-prompt relative changes), "
            "relative to SpS",
            computable=False,
            note="the table prints corpus means of AL only; per-prompt averaging raises each "
            "method's rate by about (m+1) Var(AL_i)/(AL+1)^3, and the printed Rej would need "
            "SpS's per-prompt AL to have a "
            "standard deviation of "
            + ", ".join(f"{x['task']} {x['method']} {x['sd']:.2f}" for x in spread)
            + " (with none for the method)",
        )
    )
    return Verdict(
        10,
        "the AL and Rej columns are mutually consistent",
        tuple(defs),
        "agreement within the printed rounding (AL +-0.005, Rej +-0.5 points) under each definition: "
        + "; ".join(parts)
        + ". "
        + _rej_summary(readings),
        nums,
        unstated="the definition of Rej ('rejected tokens relative to SpS')",
    )


def _rej_summary(readings) -> str:
    """Which definition agrees best, its misses, and whether the printed Rej lies between the
    first definition's and the one per accepted token on every row (computed, not asserted)."""
    best = max(readings, key=lambda rd: rd["agree"])
    n = len(best["rows"])
    miss = [f"{row['task']} {row['method']}" for row in best["rows"] if row["gap"] > 0]
    head = (
        "every row agrees under " + best["name"]
        if not miss
        else f"no definition tried gives every row; the closest, {best['name'].split(', ')[-1]}, agrees on "
        f"{best['agree']} of {n} (misses {', '.join(miss)})"
    )
    lo, hi = readings[0], readings[4]  # per generated token, per accepted token
    between = all(b["implied"] < a["printed"] < a["implied"] for a, b in zip(lo["rows"], hi["rows"]))
    return head + (
        f"; the printed Rej lies strictly between the implied values of {lo['name'].split(', ')[-1]} "
        f"and {hi['name'].split(', ')[-1]} on every row"
        if between
        else ""
    )
