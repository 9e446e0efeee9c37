r"""The result of a deployment plan (:func:`cactus_theory.plan`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._base import Result, _g

#: The per-draft-length columns of :meth:`PlanResult.rows`, in order.
_PER_M = (
    "accepted_length",
    "tokens_per_call",
    "tokens_per_call_low",
    "tokens_per_call_high",
    "speedup",
    "speedup_low",
    "speedup_high",
)


@dataclass(frozen=True)
class PlanResult(Result):
    r"""Per rule: the knob at the budget, then tokens per verifier call and speedup for every m.

    Attributes
    ----------
    source : str
        The recording.
    kind : str
        ``"teacher-forced dump"``, ``"recorded rounds"`` or ``"acceptance profile"``.
    budget : dict or None
        ``{"eps": ..., "divergence": ...}`` when each rule's knob was calibrated to eps on the
        mean emitted divergence per token; None when the knobs were given.
    draft_lengths : tuple of int
        m = 1..m_max.
    cost : dict
        The cost model (:class:`cactus_theory.planning.CostModel` as data).
    table : tuple of dict
        Per rule: ``rule``, ``knob``, ``knobs``, ``status``, ``emitted_kl``, ``emitted_tv``,
        ``eos_shift``, ``length_ratio`` (None where the recording has no rows or no EOS), and
        per m (lists over ``draft_lengths``): ``accepted_length`` (AL_m, bonus not counted),
        ``tokens_per_call`` (= AL_m + 1), its interval ``tokens_per_call_low/high``,
        ``speedup`` and ``speedup_low/high``; ``best_m``, ``best_speedup``, ``engine_config``
        (vLLM's settings with the plugin's rule and knobs, checked by the plugin's parser) and
        ``engine_note``.
    break_even_acceptance : tuple
        Per m, the constant per-draft acceptance :math:`\alpha` at which speculation breaks even,
        :math:`(1 - \alpha^{m+1})/(1 - \alpha) = c(m)/c_v(1)` (None where even
        :math:`\alpha = 1` does not pay).
    best : dict
        ``rule``, ``m`` and ``speedup`` of the best row.
    interval : dict
        How the intervals were made (``method``, ``level``, ``resamples``, ``unit``).
    notes : tuple of str
    """

    source: str
    kind: str
    budget: dict | None
    draft_lengths: tuple
    cost: dict
    table: tuple
    break_even_acceptance: tuple
    best: dict
    interval: dict
    notes: tuple = ()

    def __repr__(self) -> str:
        b = self.best
        return (
            f"PlanResult({len(self.table)} rules on {self.source}, m = 1..{max(self.draft_lengths)}: "
            f"best {b.get('rule')} at m = {b.get('m')}, speedup {_g(b.get('speedup'), '.3f')})"
        )

    def row(self, rule: str) -> dict:
        """The table row of ``rule``."""
        for r in self.table:
            if r["rule"] == rule:
                return r
        raise ValueError(f"rule: {rule!r} is not in the plan ({', '.join(r['rule'] for r in self.table)})")

    def rows(self) -> list:
        """One flat dict per (rule, m), for ``pandas.DataFrame``."""
        out = []
        for r in self.table:
            for i, m in enumerate(self.draft_lengths):
                flat = {
                    "rule": r["rule"],
                    "knob": r["knob"],
                    "m": m,
                    **{k: r[k][i] for k in _PER_M},
                    "best": m == r["best_m"],
                    "break_even_acceptance": self.break_even_acceptance[i],
                    "emitted_kl": r["emitted_kl"],
                    "emitted_tv": r["emitted_tv"],
                    "length_ratio": r["length_ratio"],
                }
                out.append(flat)
        return out
