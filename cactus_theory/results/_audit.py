"""The audit's result type (:func:`cactus_theory.api.audit`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._base import Result, _internal


@dataclass(frozen=True, repr=False)
class AuditResult(Result):
    r"""Rules calibrated to one emitted divergence, side by side
    (:func:`cactus_theory.api.audit`, :func:`cactus_theory.simulate.audit.audit`).

    Each row carries its calibration's status; :func:`cactus_theory.simulate.audit.format_audit`
    prints the table and :meth:`notes`.

    Attributes
    ----------
    eps, per, divergence : float, str, str
        The target, whether it is per token or per sequence, and D.
    rows_kind : {"processed", "raw"}
        Which rows of a dump were audited.
    label : str
    n_positions, n_trajectories : int
    draft_lengths : tuple of int
        m of the ``al_<m>`` columns.
    sequence_m : int
        m of the sequence-level divergence.
    eos_token_id : int or None
    sps_acceptance : float
        Mean SpS acceptance :math:`\sum_x \min(p_x, q_x)`.
    frontier_at_eps : float or None
        The corpus-mean frontier :math:`\bar F(\epsilon)`: the best mean acceptance of any
        rule whose mean divergence over the positions is eps
        (:func:`cactus_theory.analysis.frontier.corpus_frontier`; one multiplier over all
        positions), the budget the rules are calibrated to per token. None per sequence, for
        divergences other than KL and TV, and for a row source read chunk by chunk.
    table : tuple of dict
        One row per rule: ``rule``, ``knob``, ``status`` (``calibrated``, ``within 0.2% of
        eps`` (stopped by a step of the statistic that close below eps), ``step``,
        ``range-end``, ``above``, ``reference``, ``no knob``, ``not audited``), ``acceptance``,
        ``relaxed_acceptance`` (:math:`\bar\alpha - \bar\alpha_{SpS}`), ``al_<m>``,
        ``emitted_kl``, ``emitted_tv``, ``sequence_kl_upper``/``_lower`` (per token, m =
        ``sequence_m``), ``frontier`` and ``frontier_gap`` (per position, each at the rule's
        own per-position KL: mean of :math:`F_t(KL_t) - \alpha_t`), ``corpus_frontier`` and
        ``corpus_gap`` (the corpus-mean frontier at the rule's own mean KL), ``eos_q``,
        ``eos_h``, ``eos_shift`` (means), ``length_ratio``, ``achieved``, ``note``.
    excluded : dict
        Rules left out of the default set, with the reason.
    eos_shift : dict of str to ndarray
        Per rule, :math:`h_{alg,t}(\mathrm{EOS}) - q_t(\mathrm{EOS})` per position (not
        exported by ``to_dict``).
    """

    eps: float
    per: str
    divergence: str
    rows_kind: str
    label: str
    n_positions: int
    n_trajectories: int
    draft_lengths: tuple
    sequence_m: int
    eos_token_id: int | None
    sps_acceptance: float
    frontier_at_eps: float | None
    table: tuple
    excluded: dict = field(default_factory=dict)
    eos_shift: dict = _internal(default_factory=dict)

    def rows(self) -> list[dict]:
        """The table's rows (for pandas)."""
        return [dict(r) for r in self.table]

    def row(self, rule: str) -> dict:
        """The row of ``rule`` (ValueError naming ``rule`` if absent)."""
        for r in self.table:
            if r["rule"] == rule:
                return dict(r)
        raise ValueError(f"rule: {rule!r} not in this audit ({', '.join(r['rule'] for r in self.table)})")

    def notes(self) -> list[str]:
        """One line per rule not calibrated exactly (its status and why), then the excluded."""
        out = [f"{r['rule']}: {r['status']}: {r['note']}" for r in self.table if r["status"] != "calibrated"]
        out += [f"{k}: not in the default set: {v}" for k, v in self.excluded.items()]
        return out

    def __repr__(self) -> str:
        ok = sum(r["status"] == "calibrated" for r in self.table)
        return (
            f"AuditResult({len(self.table)} rules at {self.per} {self.divergence} = {self.eps:g}, "
            f"{ok} calibrated; {self.n_positions} positions)"
        )
