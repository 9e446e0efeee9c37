r"""The audit's table and text: :class:`cactus_theory.results.AuditResult` as a table, aligned
text, Markdown or CSV (the rows, then one line per rule not calibrated exactly)."""

from __future__ import annotations

from .._tables import Column, Table, format_table
from .._validation import choice

#: Formats of :func:`format_audit`.
FORMATS = ("text", "markdown", "csv")

#: The counting conventions of the audit's acceptance and accepted-length columns, printed in
#: the table's title: acceptance per drafted token, :math:`\sum_n p_n a_n` averaged over the
#: positions, and :math:`AL_m` the paper's accepted drafts per verification round of m drafts
#: (``al_paper`` of :mod:`cactus_theory.simulate._metrics`); the bonus token is counted in
#: neither (vLLM V1's and Spec-Bench's mean acceptance length is :math:`AL_m + 1`).
COUNTING = "accept: drafts accepted / drafted; AL_m: drafts accepted / round of m; bonus token not counted (tokens / call = AL_m + 1)"


def audit_table(result, name: str = "audit") -> Table:
    """The side-by-side table of an audit (:class:`cactus_theory.results.AuditResult`)."""
    cols = [Column("rule", "rule", "s"), Column("knob", "knob", "s"), Column("status", "status", "s")]
    cols += [Column("acceptance", "accept"), Column("relaxed_acceptance", "a-a_SpS")]
    cols += [Column(f"al_{m}", f"AL_{m}", ".3f") for m in result.draft_lengths]
    cols += [Column("emitted_kl", "KL(h||q)"), Column("emitted_tv", "TV")]
    if result.sequence_m:  # trajectories: the chain's sequence bound
        cols.append(Column("sequence_kl_upper", f"seqKL/tok@{result.sequence_m}"))
    cols.append(Column("frontier_gap", "gap/pos"))
    cols.append(Column("corpus_gap", "gap/corpus"))
    if result.eos_token_id is not None:
        cols += [
            Column("eos_q", "q(EOS)", ".2e"),
            Column("eos_shift", "h-q(EOS)", ".2e"),
            Column("length_ratio", "len ratio", ".3f"),
        ]
    line = (
        ""
        if result.frontier_at_eps is None
        else f", corpus-mean frontier F(eps) {result.frontier_at_eps:.4f}"
    )
    title = (
        f"[{result.label}; every rule at {result.per} {result.divergence} = {result.eps:g}; "
        f"SpS acceptance {result.sps_acceptance:.4f}{line}; {COUNTING}]"
    )
    return Table(name, title, tuple(cols), tuple(result.rows()))


def format_audit(result, style: str = "text") -> str:
    """An audit as aligned ``"text"`` or ``"markdown"`` (the table, then the notes:
    :meth:`cactus_theory.results.AuditResult.notes`), or ``"csv"`` (the table)."""
    style = choice(style, FORMATS, "style")
    table = format_table(audit_table(result), style)
    if style == "csv":
        return table
    if style == "markdown":
        return "\n\n".join([table, "\n".join(f"- {n}" for n in result.notes())])
    return "\n".join([table] + result.notes())
