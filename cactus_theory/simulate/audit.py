r"""Every relaxed rule at the same true emitted divergence: the audit.

Comparing relaxed acceptance rules at equal knob, or at equal accepted length, says nothing
about what they emit. The audit sets each rule's knob so that its **true emitted divergence**
meets one target :math:`\epsilon`, then reports side by side what it buys and what it costs:

* the statistic calibrated: per token (``per="token"``), the mean over positions of
  :math:`D(h_{alg,t}\|q_t)` with :math:`h_{alg}` the exact emitted law (Theorem 3,
  :func:`cactus_theory.analysis.one_step.emitted_distribution`); per sequence
  (``per="sequence"``), the chain's exact upper bound on the KL of the emitted text per token,
  :math:`\frac1N\sum_{\text{traj}}\sum_t (1-b_t) KL(h_t\|q_t)` at draft length
  ``sequence_m`` (:func:`cactus_theory.simulate._exact.sequence_divergence`; :math:`b_t` the
  probability that t is a bonus position);
* the knob: a monotone bisection within the rule's published range
  (:class:`cactus_theory.rules.registry.Knob`) from its lossless end (SpS's value where it has
  one), :func:`cactus_theory.analysis.calibrate_knob`; a rule that cannot reach
  the target in its range, or whose divergence jumps over it (0/1 rules, integer knobs, a KL
  that becomes infinite), is reported with its status, never dropped;
* the columns: acceptance :math:`\bar\alpha`, the relaxed-only acceptance
  :math:`\bar\alpha - \bar\alpha_{SpS}`, the exact expected accepted length
  :math:`AL_m` (teacher-forced, bonus not counted) at several m, emitted KL and TV, the gap
  to the optimal frontier at the rule's own per-position KL
  (:math:`F_t(KL_t) - \alpha_t`, Theorem 1), the gap to the corpus-mean frontier
  (:func:`cactus_theory.analysis.frontier.corpus_frontier`), and the end-of-sequence shift.

Where the work runs follows from the input: rows in memory (arrays, or an :class:`AuditCorpus`
of recorded trajectories) or a row source read chunk by chunk
(:class:`cactus_theory.rows.RowSource`; per-token statistics only: a row source has
neither trajectories nor vocabulary ids). One engine calibrates and tabulates both.

End of sequence
---------------
Per position the shift is :math:`h_{alg,t}(\mathrm{EOS}) - q_t(\mathrm{EOS})` (emitted minus
verifier). The completion-length ratio it predicts is that of **geometric stopping with
per-position independence**: if every position stops with the same probability s, the
expected length is 1/s, so with :math:`s = \mathrm{mean}_t\, q_t(\mathrm{EOS})` for the
verifier and :math:`\mathrm{mean}_t\, h_{alg,t}(\mathrm{EOS})` for the rule,

.. math:: \frac{L_{rule}}{L_{verifier}} = \frac{\mathrm{mean}_t\, q_t(\mathrm{EOS})}
          {\mathrm{mean}_t\, h_{alg,t}(\mathrm{EOS})}.

It is teacher-forced (the positions of the recorded verifier text, not of the text the rule
would write) and ignores any length cap. None where the means are 0 (EOS never in the support).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\epsilon` the target on the emitted divergence, :math:`h_{alg}` the emitted distribution.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1 and 3; Leviathan et al. 2023
(accepted length); Tran-Thien (2023), Mentored decoding (the frontier).
"""

from __future__ import annotations

import math

from tqdm.auto import tqdm

from .._validation import as_budget, choice, positive_int
from ..analysis.internal import Execution, RowSource
from ..divergences import get_divergence
from ..results import AuditResult
from ._audit_calibrate import audit_rule, check_rules
from ._audit_corpus import ROWS, AuditCorpus, corpus_from_arrays
from ._audit_format import format_audit
from ._audit_rows import ChunkedRows, CorpusRows

__all__ = [
    "audit",
    "format_audit",
]

#: Draft lengths m of the accepted-length columns.
_DRAFT_LENGTHS = (1, 2, 4, 8)
#: Draft length of the per-sequence divergence (``per="sequence"`` and the seq-KL column).
_SEQUENCE_M = 4
#: What the audit calibrates: the per-token mean, or the chain's sequence bound per token.
_PER = ("token", "sequence")


def _rows_of(target_probs, draft_probs, per, rows, eos_token_id, raw_target_probs, raw_draft_probs):
    """The evaluator's input: a row source (checked: it takes none of the in-memory options) or
    an :class:`AuditCorpus` (built from arrays)."""
    if isinstance(target_probs, RowSource):
        if draft_probs is not None:
            raise ValueError("draft_probs: give a row source (or a folder of shards) alone")
        if eos_token_id is not None:
            raise ValueError("eos_token_id: applies to dumps and arrays, not to a row source")
        if rows == "raw":
            raise ValueError("rows: a row source is audited on its rows as stored ('processed')")
        if per != "token":
            raise ValueError("per: 'sequence' needs trajectories (a dump or arrays), not a row source")
        return target_probs
    if isinstance(target_probs, AuditCorpus):
        return target_probs
    if draft_probs is None:
        raise ValueError("draft_probs: required with target_probs arrays")
    raw_q, raw_p = raw_target_probs, raw_draft_probs
    if rows == "raw":
        if raw_q is None or raw_p is None:
            raise ValueError("rows: 'raw' needs raw_target_probs and raw_draft_probs with arrays")
        target_probs, draft_probs = raw_q, raw_p
    return corpus_from_arrays(
        target_probs,
        draft_probs,
        raw_target_probs=raw_q,
        raw_draft_probs=raw_p,
        eos_token_id=eos_token_id,
    )


def audit(
    target_probs,
    draft_probs=None,
    *,
    eps=0.1,
    rules=None,
    per="token",
    divergence="kl",
    draft_lengths=_DRAFT_LENGTHS,
    sequence_m=_SEQUENCE_M,
    knobs=None,
    tune=None,
    rows="processed",
    eos_token_id=None,
    raw_target_probs=None,
    raw_draft_probs=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
) -> AuditResult:
    r"""Every chosen rule calibrated to the same true emitted divergence eps, side by side.

    .. math:: \mathrm{mean}_t\, D(h_{alg,t}(x)\|q_t) = \epsilon \quad\text{(each rule's knob x)}

    See the module docstring for the columns and the length model.

    Parameters
    ----------
    target_probs : array_like (N, V), AuditCorpus or RowSource
        Verifier rows q (with ``draft_probs``), recorded trajectories
        (:func:`corpus_from_dump`), or a row source read chunk by chunk.
    draft_probs : array_like (N, V), optional
        Drafter rows p (arrays only).
    eps : float
        Target on the emitted divergence (per token, or per token of the sequence bound).
    rules : sequence of str, optional
        Registry names (aliases allowed). Default: every registered rule except
        :data:`AUDIT_EXCLUDED` (listed in the result's ``excluded``); rules without a numeric
        knob are shown as reference.
    per : {"token", "sequence"}
        Calibrate the mean per-token :math:`D(h_{alg,t}\|q_t)`, or the chain's upper bound on
        the sequence divergence per token at m = ``sequence_m`` (KL or TV; trajectories only).
    divergence : str
        D of the target.
    draft_lengths : sequence of int
        m of the accepted-length columns.
    sequence_m : int
    knobs : dict of str to dict, optional
        Fixed knobs per rule (not calibrated).
    tune : dict of str to str, optional
        The knob calibrated per rule (default: its first numeric knob).
    rows : {"processed", "raw"}
        With arrays, ``"raw"`` audits ``raw_target_probs``/``raw_draft_probs``; with a corpus,
        which rows it holds (the result's ``rows_kind``).
    eos_token_id : int, optional
        With arrays, the column of the end-of-sequence token (the EOS columns).
    raw_target_probs, raw_draft_probs : array_like (N, V), optional
        With arrays, raw rows for rules that decide on them.
    chunk_rows, max_memory, progress
        Rows per chunk or the memory bound for a row source; a progress bar (over rules in
        memory, over chunks for a row source).

    Returns
    -------
    cactus_theory.results.AuditResult

    Raises
    ------
    ValueError
        Naming the argument (``eps``, ``rules``, ``per``, ``divergence``, ``rows``, ...).

    Symbols: q verifier, p drafter, n drafted token, eps the target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Leviathan et al. 2023.
    """
    rows = choice(rows, ROWS, "rows")
    source = _rows_of(target_probs, draft_probs, per, rows, eos_token_id, raw_target_probs, raw_draft_probs)
    eps = as_budget(eps, "eps")
    if not math.isfinite(eps):
        raise ValueError(f"eps: must be finite, got {eps}")
    per = choice(per, _PER, "per")
    d = get_divergence(divergence)
    if per == "sequence" and d.name not in ("kl", "tv"):
        raise ValueError(f"divergence: per='sequence' bounds KL or TV only, got {divergence!r}")
    if isinstance(source, RowSource):
        ev = ChunkedRows(source, d, Execution(chunk_rows, max_memory, progress))
    else:
        ms = tuple(positive_int(m, "draft_lengths") for m in (draft_lengths or ()))
        if not ms:
            raise ValueError("draft_lengths: give at least one draft length")
        ev = CorpusRows(source, per, d, ms, positive_int(sequence_m, "sequence_m"))
    names, excluded, knobs, tune = check_rules(rules, knobs, tune)
    table, shifts = [], {}
    for name in tqdm(names, disable=not (progress and ev.bar_over_rules), desc="audit", unit="rule"):
        row, shift = audit_rule(name, dict(knobs.get(name, {})), tune.get(name), ev, eps, per, d)
        table.append(row)
        if shift is not None:
            shifts[name] = shift
    frontier_at = ev.frontier_line(table, eps)
    return AuditResult(
        eps=float(eps),
        per=per,
        divergence=d.name,
        rows_kind=rows,
        **ev.result_fields(),
        sps_acceptance=ev.sps_acceptance,
        frontier_at_eps=frontier_at,
        table=tuple(table),
        excluded=excluded,
        eos_shift=shifts,
    )
