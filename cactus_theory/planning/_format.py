"""A plan as text, Markdown or CSV: one row per (rule, draft length), then the engine settings."""

from __future__ import annotations

import json

from .._tables import Column, Table, format_table

__all__ = ["plan_table", "format_plan"]


def plan_table(result) -> Table:
    """The (rule, m) rows of a :class:`~cactus_theory.results.PlanResult` as a table."""
    cols = (
        Column("rule", "rule", "s"),
        Column("knob", "knob", "s"),
        Column("m", "m", "d"),
        Column("accepted_length", "AL_m", ".3f"),
        Column("tokens_per_call", "tokens/call", ".3f"),
        Column("tokens_per_call_low", "low", ".3f"),
        Column("tokens_per_call_high", "high", ".3f"),
        Column("speedup", "speedup", ".3f"),
        Column("speedup_low", "low", ".3f"),
        Column("speedup_high", "high", ".3f"),
        Column("break_even_acceptance", "break-even a", ".3f"),
        Column("emitted_kl", "KL/token", ".4f"),
        Column("emitted_tv", "TV/token", ".4f"),
        Column("length_ratio", "length ratio", ".3f"),
    )
    rows = tuple({**r, "rule": r["rule"] + (" *" if r["best"] else "")} for r in result.rows())
    return Table("plan", "plan", cols, rows)


def format_plan(result, style: str = "text") -> str:
    """The plan's table, its best row and each rule's engine configuration."""
    table = format_table(plan_table(result), style)
    if style == "csv":
        return table
    iv = result.interval
    b = result.best
    budget = (
        f"eps = {result.budget['eps']:g} on the mean emitted {result.budget['divergence']} per token"
        if result.budget
        else "knobs as given"
    )
    head = [
        f"plan: {result.source} ({result.kind}); {budget}",
        f"cost: draft {result.cost['draft_cost']:.4g}, verify 1..{len(result.cost['verify_costs'])} tokens "
        f"{', '.join(f'{x:.4g}' for x in result.cost['verify_costs'][:4])}"
        f"{', ...' if len(result.cost['verify_costs']) > 4 else ''} {result.cost['unit']} ({result.cost['source']})",
        f"intervals: {iv['method']}, {100 * iv['level']:g}% over {iv['unit']}, {iv['resamples']} resamples; "
        "* marks each rule's best m",
    ]
    tail = [
        f"best: {b['rule']} at m = {b['m']}, predicted speedup {b['speedup']:.3f}" if b["m"] else "best: none"
    ]
    for r in result.table:
        cfg = r["engine_config"]
        tail.append(
            f"vLLM ({r['rule']}): {json.dumps(cfg)}"
            if cfg is not None
            else f"vLLM ({r['rule']}): {r['engine_note']}"
        )
    tail += [f"note: {n}" for n in result.notes]
    sep = "\n\n" if style == "markdown" else "\n"
    return sep.join(["\n".join(head), table, "\n".join(tail)])
