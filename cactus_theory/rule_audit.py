r"""Every relaxed rule at the same true emitted divergence: the audit.

Comparing relaxed acceptance rules at equal knob, or at equal accepted length, says nothing
about what they emit. The audit sets each rule's knob so that its **true emitted divergence**
meets one target :math:`\epsilon`, then reports side by side what it buys and what it costs:

* the statistic calibrated: per token (``per="token"``), the mean over positions of
  :math:`D(h_{alg,t}\|q_t)` with :math:`h_{alg}` the exact emitted law (Theorem 3,
  :func:`cactus_theory.analysis.one_step.emitted_distribution`); per sequence
  (``per="sequence"``), the chain's exact upper bound on the KL of the emitted text per token,
  :math:`\frac1N\sum_{\text{traj}}\sum_t (1-b_t) KL(h_t\|q_t)` at draft length
  ``sequence_m`` (:func:`cactus_theory.simulate.exact.sequence_divergence`; :math:`b_t` the
  probability that t is a bonus position);
* the knob: a monotone bisection within the rule's published range
  (:class:`cactus_theory.rules.registry.Knob`) from its lossless end (SpS's value where it has
  one), :func:`cactus_theory.analysis.calibration.calibrate_knob`; a rule that cannot reach
  the target in its range, or whose divergence jumps over it (0/1 rules, integer knobs, a KL
  that becomes infinite), is reported with its status, never dropped;
* the columns: acceptance :math:`\bar\alpha`, the relaxed-only acceptance
  :math:`\bar\alpha - \bar\alpha_{SpS}`, the exact expected accepted length
  :math:`AL_m` (teacher-forced, bonus not counted) at several m, emitted KL and TV, the gap
  to the optimal frontier at the rule's own per-position KL
  (:math:`F_t(KL_t) - \alpha_t`, Theorem 1), and the end-of-sequence shift.

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
from dataclasses import dataclass, field

import numpy as np

from ._tables import Column, Table, format_table
from ._validation import as_budget, as_prob_pair, choice, positive_int
from .analysis.lengths import geometric_length_ratio
from .divergences import get_divergence
from .results import _g, _internal, _Result

__all__ = [
    "AuditResult",
    "AuditCorpus",
    "audit",
    "audit_corpus",
    "audit_rows",
    "corpus_from_dump",
    "corpus_from_arrays",
    "AUDIT_EXCLUDED",
    "DRAFT_LENGTHS",
]

#: Draft lengths m of the accepted-length columns.
DRAFT_LENGTHS = (1, 2, 4, 8)
#: Draft length of the per-sequence divergence (``per="sequence"`` and the seq-KL column).
SEQUENCE_M = 4
PER = ("token", "sequence")
ROWS = ("processed", "raw")
#: Rules left out of the default set, with the reason (listed in every result's ``excluded``).
AUDIT_EXCLUDED = {
    "cactus-calibrated": "its knob eps is already a per-position budget on D(h_alg||q), and each "
    "evaluation runs a root search per row; pass it in rules= to include it",
}
#: Refinement steps of the knob's bisection (a bracket in the mapped knob u narrower than
#: 2^-20 of the scan's spacing, about 1e-7: finer than any knob is published with).
KNOB_STEPS = 20
#: Scan points of the knob's first-crossing search (mapped knob u in [0, 1]).
KNOB_GRID = 9
#: Emitted divergence below which a rule without a knob counts as lossless (float64 rounding
#: of a KL of identical rows).
LOSSLESS_TOL = 1e-12


@dataclass(frozen=True)
class AuditCorpus:
    """The rows an audit runs on.

    Attributes
    ----------
    target_probs, draft_probs : ndarray, shape (N, V)
        q and p as the rules act on them.
    raw_target_probs, raw_draft_probs : ndarray, shape (N, V)
        Raw rows for rules that decide on them (the same rows for ``rows="raw"``).
    bounds : ndarray of int, shape (n_traj + 1,)
        Trajectory offsets (teacher-forced chains run per trajectory).
    eos : ndarray of bool, shape (N, V), or None
        Columns holding the end-of-sequence token.
    label : str
    eos_token_id : int or None
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    raw_target_probs: np.ndarray
    raw_draft_probs: np.ndarray
    bounds: np.ndarray
    eos: np.ndarray | None
    label: str = ""
    eos_token_id: int | None = None

    @property
    def n_positions(self) -> int:
        return int(self.target_probs.shape[0])


def corpus_from_dump(dump, *, rows="processed", max_positions=None, eos_token_id=None) -> AuditCorpus:
    r"""An :class:`AuditCorpus` from a loaded dump (:class:`cactus_theory.logits.Dump`).

    ``rows="processed"``: the recorded sampling transforms (the shipped ones: temperature 0.6,
    top-k 20, top-p 0.95); ``"raw"``: the temperature-1 untruncated rows on the stored columns
    plus the tail bucket (a divergence on them is a lower bound of the full-vocabulary one, by
    data processing). ``max_positions``: whole trajectories in file order until at least that
    many positions. ``eos_token_id`` defaults to the dump's
    (:func:`cactus_theory.logits.format.eos_token_id`).
    """
    from .logits.format import eos_token_id as dump_eos

    rows = choice(rows, ROWS, "rows")
    if max_positions is not None:
        max_positions = positive_int(max_positions, "max_positions")
    trajs = []
    total = 0
    for t in dump.trajectories():
        trajs.append(t)
        total += t.length
        if max_positions is not None and total >= max_positions:
            break
    if not trajs:
        raise ValueError("dump: no positions")
    W = max(t.vocab_size for t in trajs)

    def stack(attr):
        return np.concatenate([np.pad(getattr(t, attr), ((0, 0), (0, W - t.vocab_size))) for t in trajs])

    cols = np.concatenate(
        [np.pad(t.columns, ((0, 0), (0, W - t.vocab_size)), constant_values=-1) for t in trajs]
    )
    q, p, rq, rp = (stack(a) for a in ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs"))
    if rows == "raw":
        q, p = rq, rp
    eos_id = dump_eos(dump.meta) if eos_token_id is None else int(eos_token_id)
    eos = None if eos_id is None else cols == eos_id
    bounds = np.concatenate([[0], np.cumsum([t.length for t in trajs])]).astype(np.int64)
    transforms = dump.meta.get("transforms", {})
    how = (
        "raw rows (temperature 1, untruncated)"
        if rows == "raw"
        else "processed rows (" + ", ".join(f"{k} {v}" for k, v in transforms.items()) + ")"
    )
    return AuditCorpus(
        q,
        p,
        rq,
        rp,
        bounds,
        eos,
        f"{dump.name}: {len(trajs)} trajectories, {bounds[-1]} positions, {how}",
        eos_id,
    )


def corpus_from_arrays(
    target_probs,
    draft_probs,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    eos_token_id=None,
    trajectory_lengths=None,
    label="",
) -> AuditCorpus:
    r"""An :class:`AuditCorpus` from (q, p) rows, shape (N, V) (one row: N = 1).

    ``eos_token_id``: the column of the end-of-sequence token (None: no EOS columns);
    ``trajectory_lengths``: how the rows split into teacher-forced trajectories (default: one
    trajectory of all rows, in order).
    """
    q, p = as_prob_pair(target_probs, draft_probs)
    if q.ndim == 1:
        q, p = q[None], p[None]
    if q.ndim != 2:
        raise ValueError(f"target_probs: expected rows of shape (N, V), got {q.shape}")
    rq = (
        q
        if raw_target_probs is None
        else as_prob_pair(raw_target_probs, q, target_name="raw_target_probs")[0]
    )
    rp = p if raw_draft_probs is None else as_prob_pair(raw_draft_probs, p, target_name="raw_draft_probs")[0]
    if rq.shape != q.shape or rp.shape != q.shape:
        raise ValueError(f"raw_target_probs: expected shape {q.shape}")
    N, V = q.shape
    eos = None
    if eos_token_id is not None:
        if isinstance(eos_token_id, bool) or not isinstance(eos_token_id, (int, np.integer)):
            raise ValueError(f"eos_token_id: expected a column index, got {eos_token_id!r}")
        if not 0 <= int(eos_token_id) < V:
            raise ValueError(f"eos_token_id: {eos_token_id} outside [0, {V})")
        eos = np.zeros((N, V), dtype=bool)
        eos[:, int(eos_token_id)] = True
    if trajectory_lengths is None:
        lengths = [N]
    else:
        lengths = [positive_int(x, "trajectory_lengths") for x in trajectory_lengths]
        if sum(lengths) != N:
            raise ValueError(f"trajectory_lengths: sum to {sum(lengths)}, expected {N} (the rows)")
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return AuditCorpus(
        q,
        p,
        rq,
        rp,
        bounds,
        eos,
        label or f"{N} positions, V = {V}",
        None if eos is None else int(eos_token_id),
    )


# --------------------------------------------------------------------------- evaluation


def _laws(rule, c: AuditCorpus):
    from .analysis.one_step import emitted_distribution, make_plan
    from .simulate.chain import PositionLaws

    plan = make_plan(
        rule,
        c.target_probs,
        c.draft_probs,
        raw_target_probs=c.raw_target_probs,
        raw_draft_probs=c.raw_draft_probs,
    )
    a = np.clip(np.asarray(plan.accept_probs(), dtype=np.float64), 0.0, 1.0)
    pp = np.asarray(plan.draft_probs, dtype=np.float64)
    acc = pp * a
    h = np.asarray(emitted_distribution(plan), dtype=np.float64)
    q = np.asarray(plan.target_probs, dtype=np.float64)
    return PositionLaws(acc.sum(-1), acc, np.clip(h - acc, 0.0, None), h, q)


def _chains(laws, c: AuditCorpus, m):
    from .simulate.chain import PositionLaws, Trajectory
    from .simulate.exact import exact_chain

    out = []
    for a, b in zip(c.bounds[:-1], c.bounds[1:]):
        part = PositionLaws(
            *(
                x[a:b]
                for x in (laws.alpha, laws.accept_joint, laws.reject_joint, laws.emitted, laws.target_probs)
            )
        )
        t = Trajectory(c.target_probs[a:b], c.draft_probs[a:b])
        out.append(exact_chain(None, t, m, laws=part))
    return out


def _sequence_kl(laws, c: AuditCorpus, m):
    """(lower, upper) bounds on the sequence KL of the emitted text, per position."""
    from .simulate.exact import sequence_divergence

    sd = [sequence_divergence(ch) for ch in _chains(laws, c, m)]
    N = c.n_positions
    return sum(s.kl_lower for s in sd) / N, sum(s.kl_upper for s in sd) / N


def _sequence_tv(laws, c, m):
    from .simulate.exact import sequence_divergence

    return sum(sequence_divergence(ch).tv_upper for ch in _chains(laws, c, m)) / c.n_positions


def _statistic(laws, c, per, d, m):
    if per == "token":
        return float(np.mean(d.unchecked(laws.emitted, laws.target_probs)))
    if d.name == "kl":
        return _sequence_kl(laws, c, m)[1]
    return _sequence_tv(laws, c, m)


def _tunable(spec, fixed, tune):
    """The knob that is calibrated: ``tune`` or the first numeric knob not fixed by the user."""
    numeric = [
        k for k in spec.knobs if k.choices is None and k.name not in fixed and k.name not in spec.preset
    ]
    if tune is not None:
        for k in spec.knobs:
            if k.name == tune and k.choices is None:
                return k
        raise ValueError(f"tune: {tune!r} is not a numeric knob of rule {spec.name!r}")
    return numeric[0] if numeric else None


def _inside(knob, x, toward):
    """An end of the knob's range, moved inside when the range is open there."""
    open_ = (knob.low_open and x == knob.low) or (knob.high_open and x == knob.high)
    return float(np.nextafter(x, toward)) if open_ and math.isfinite(x) else x


def _path(spec, knob, stat):
    """(start, end, scale): the lossless end (SpS's value, else the end with the smaller
    statistic), the other end of the published range, and the tan map's scale."""
    lo, hi = _inside(knob, knob.low, knob.high), _inside(knob, knob.high, knob.low)
    sps = (spec.sps_knobs or {}).get(knob.name) if spec.sps_knobs is not None else None
    if sps is not None:
        start = float(sps)
        end = hi if start == knob.low or start == lo else lo if start in (knob.high, hi) else None
        if end is None:  # SpS inside the range: go towards the end with the larger statistic
            end = (
                hi
                if stat(hi if math.isfinite(hi) else 1e6) >= stat(lo if math.isfinite(lo) else -1e6)
                else lo
            )
    else:
        far = lambda x: x if math.isfinite(x) else math.copysign(1e6, x)  # noqa: E731
        s_lo, s_hi = stat(far(lo)), stat(far(hi))
        start, end = (lo, hi) if s_lo <= s_hi else (hi, lo)
    anchor = start if math.isfinite(start) else end
    default = float(knob.default)
    scale = abs(default - anchor) if math.isfinite(anchor) else abs(default)
    return start, end, max(scale, 1e-3) if math.isfinite(anchor) else max(scale, 1.0)


def _fmt_knob(name, v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{name}={v:.4g}"
    return f"{name}={v}"


def _metrics(name, laws, c, spec_knobs, knob_text, status, note, ms, seq_m, d, sps_acc):
    from .analysis.frontier import gap_to_frontier
    from .simulate.exact import sequence_divergence
    from .simulate.metrics import compute_metrics, pool_totals

    q, h = laws.target_probs, laws.emitted
    kl_t = np.asarray(get_divergence("kl").unchecked(h, q), dtype=np.float64)
    tv_t = np.asarray(get_divergence("tv").unchecked(h, q), dtype=np.float64)
    alpha = laws.alpha
    F, gap = gap_to_frontier(c.target_probs, c.draft_probs, np.clip(alpha, 0.0, 1.0), kl_t, "kl")
    row = {
        "rule": name,
        "knob": knob_text,
        "knobs": spec_knobs,
        "status": status,
        "acceptance": float(alpha.mean()),
        "relaxed_acceptance": float(alpha.mean()) - sps_acc,
    }
    chains = {m: _chains(laws, c, m) for m in dict.fromkeys(ms + (seq_m,))}
    for m in ms:
        row[f"al_{m}"] = compute_metrics(pool_totals([ch.totals for ch in chains[m]]))["al_paper"].value
    row["emitted_kl"] = float(kl_t.mean())
    row["emitted_tv"] = float(tv_t.mean())
    if d.name not in ("kl", "tv"):
        row[f"emitted_{d.name}"] = float(np.mean(d.unchecked(h, q)))
    sd = [sequence_divergence(ch) for ch in chains[seq_m]]
    lower, upper = (sum(getattr(x, k) for x in sd) / c.n_positions for k in ("kl_lower", "kl_upper"))
    row["sequence_kl_upper"] = upper
    row["sequence_kl_lower"] = lower
    row["frontier"] = float(np.mean(F))
    row["frontier_gap"] = float(np.mean(gap))
    shift = None
    if c.eos is not None:
        q_e = np.where(c.eos, q, 0.0).sum(-1)
        h_e = np.where(c.eos, h, 0.0).sum(-1)
        shift = h_e - q_e
        row["eos_q"] = float(q_e.mean())
        row["eos_h"] = float(h_e.mean())
        row["eos_shift"] = float(shift.mean())
        row["length_ratio"] = geometric_length_ratio(q_e.reshape(-1), h_e.reshape(-1))
    row["note"] = note
    return row, shift


def _check_maps(knobs, tune):
    if knobs is not None and not isinstance(knobs, dict):
        raise ValueError(f"knobs: expected a dict of rule name -> dict of knobs, got {type(knobs).__name__}")
    if tune is not None and not isinstance(tune, dict):
        raise ValueError(f"tune: expected a dict of rule name -> knob name, got {type(tune).__name__}")
    return knobs or {}, tune or {}


def _names(rules):
    """The audited rule names and the default set's exclusions (with reasons)."""
    from .rules import RULES

    if rules is None:
        names = [n for n in RULES if n not in AUDIT_EXCLUDED]
        return names, {n: AUDIT_EXCLUDED[n] for n in RULES if n in AUDIT_EXCLUDED}
    names = [choice(r, RULES.all_names(), "rules") for r in ([rules] if isinstance(rules, str) else rules)]
    if not names:
        raise ValueError("rules: empty list")
    return names, {}


def _check_tune(names, knobs, tune):
    from .rules import RULES

    for name, knob_name in tune.items():
        if name not in names:
            raise ValueError(f"tune: rule {name!r} is not among the audited rules")
        _tunable(RULES[name], dict(knobs.get(name, {})), knob_name)


#: A calibration stopped by a step of its statistic that still lands within this relative
#: distance below eps is reported as :data:`NEAR_STATUS`, not ``"step"``.
NEAR_RTOL = 0.002
NEAR_STATUS = "within 0.2% of eps"


def _status(cal, eps):
    """The status word of a calibration: ``"step"`` becomes :data:`NEAR_STATUS` when the value
    reached lies within :data:`NEAR_RTOL` of eps (below it: a step stops short of eps)."""
    if cal.status == "step" and eps > 0 and 0 <= eps - cal.achieved <= NEAR_RTOL * eps:
        return NEAR_STATUS
    return cal.status


def _note(cal, per, d, knob, eps=None):
    """One line on how the calibration ended."""
    if eps is not None and _status(cal, eps) == NEAR_STATUS:
        return (
            f"{per} {d.name} = {cal.achieved:.4g}, {100 * (eps - cal.achieved) / eps:.2g}% below eps "
            f"(the next knob value, {_fmt_knob(knob.name, cal.next_value)}, jumps to {_g(cal.next_achieved)})"
        )
    return {
        "calibrated": f"{per} {d.name} = {cal.achieved:.4g} ({cal.evaluations} evaluations)",
        "step": f"{per} {d.name} jumps from {cal.achieved:.4g} to {_g(cal.next_achieved)} at "
        f"{_fmt_knob(knob.name, cal.next_value)}: cannot meet eps exactly",
        "range-end": f"cannot reach eps in its range: {per} {d.name} = {cal.achieved:.4g} at the range's end",
        "above": f"above eps at every knob: {per} {d.name} = {cal.achieved:.4g} at its least",
    }[cal.status]


def _corpus_frontiers(table, c, per, d, eps):
    """The corpus-mean frontier: at eps (returned; per-token calibration in KL or TV only) and,
    in each row, at the rule's own mean KL (``corpus_frontier``, ``corpus_gap``).

    Rules calibrated per token spend a mean budget, so their yardstick is the frontier of one
    multiplier over all positions, not the mean of per-position frontiers at eps (which rules
    beat). Per sequence the calibrated statistic weights positions, so no single line at eps
    bounds every rule; each row still has its own.
    """
    from .analysis.frontier import CORPUS_FRONTIER_DIVERGENCES, corpus_frontier

    at_eps = None
    if per == "token" and d.name in CORPUS_FRONTIER_DIVERGENCES:
        at_eps = corpus_frontier(c.target_probs, c.draft_probs, eps, d.name)
    cache = {}
    for row in table:
        kl = row.get("emitted_kl")
        if kl is None or not math.isfinite(kl):
            continue
        if at_eps is not None and d.name == "kl" and eps * (1 - 1e-9) <= kl <= eps:
            F = at_eps  # calibrated: the line at eps (within 1e-9 of its value at kl, and above it)
        else:
            if kl not in cache:
                cache[kl] = corpus_frontier(c.target_probs, c.draft_probs, kl, "kl")
            F = cache[kl]
        row["corpus_frontier"] = F
        row["corpus_gap"] = F - row["acceptance"]
    return at_eps


def audit_corpus(
    corpus: AuditCorpus,
    eps=0.1,
    *,
    rules=None,
    per="token",
    divergence="kl",
    draft_lengths=DRAFT_LENGTHS,
    sequence_m=SEQUENCE_M,
    knobs=None,
    tune=None,
    rows="processed",
    progress=False,
) -> AuditResult:
    r"""Calibrate every chosen rule to the emitted divergence eps on ``corpus`` and compare them.

    Parameters are those of :func:`audit` (the corpus built already); ``progress`` shows a
    progress bar over the rules.

    Symbols: q verifier, p drafter, eps the target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from .rules import RULES, get_rule

    eps = as_budget(eps, "eps")
    if not math.isfinite(eps):
        raise ValueError(f"eps: must be finite, got {eps}")
    per = choice(per, PER, "per")
    d = get_divergence(divergence)
    if per == "sequence" and d.name not in ("kl", "tv"):
        raise ValueError(f"divergence: per='sequence' bounds KL or TV only, got {divergence!r}")
    ms = tuple(positive_int(m, "draft_lengths") for m in (draft_lengths or ()))
    if not ms:
        raise ValueError("draft_lengths: give at least one draft length")
    seq_m = positive_int(sequence_m, "sequence_m")
    knobs, tune = _check_maps(knobs, tune)
    names, excluded = _names(rules)
    _check_tune(names, knobs, tune)
    c = corpus
    sps_acc = float(np.minimum(c.target_probs, c.draft_probs).sum(-1).mean())
    table, shifts = [], {}
    from tqdm.auto import tqdm

    for name in tqdm(names, disable=not progress, desc="audit", unit="rule"):
        spec = RULES[name]
        fixed = dict(knobs.get(name, {}))
        try:
            knob = _tunable(spec, fixed, tune.get(name))

            def stat(x, name=name, fixed=fixed, knob=knob):
                rule = get_rule(name, **fixed, **({} if knob is None else {knob.name: x}))
                return _statistic(_laws(rule, c), c, per, d, seq_m)

            if knob is None:
                rule = get_rule(name, **fixed)
                laws = _laws(rule, c)
                s0 = _statistic(laws, c, per, d, seq_m)
                status = "reference" if s0 <= LOSSLESS_TOL else "no knob"
                note = (
                    "lossless: emits q"
                    if status == "reference"
                    else f"no numeric knob: {per} {d.name} = {s0:.4g} at its fixed knobs"
                )
                row, shift = _metrics(
                    name, laws, c, dict(rule.knobs), "-", status, note, ms, seq_m, d, sps_acc
                )
            else:
                from .analysis.calibration import calibrate_knob

                start, end, scale = _path(spec, knob, stat)
                cal = calibrate_knob(
                    stat,
                    start,
                    end,
                    eps,
                    scale=scale,
                    integer=knob.integer,
                    grid_points=KNOB_GRID,
                    steps=KNOB_STEPS,
                )
                rule = get_rule(name, **fixed, **{knob.name: cal.value})
                laws = _laws(rule, c)
                note = _note(cal, per, d, knob, eps)
                row, shift = _metrics(
                    name,
                    laws,
                    c,
                    dict(rule.knobs),
                    _fmt_knob(knob.name, cal.value),
                    _status(cal, eps),
                    note,
                    ms,
                    seq_m,
                    d,
                    sps_acc,
                )
                row["achieved"] = cal.achieved
        except (ValueError, NotImplementedError, TypeError) as exc:
            table.append(
                {"rule": name, "knob": "-", "knobs": fixed, "status": "not audited", "note": str(exc)}
            )
            continue
        table.append(row)
        if shift is not None:
            shifts[name] = shift
    frontier_at = _corpus_frontiers(table, c, per, d, eps)
    return AuditResult(
        eps=float(eps),
        per=per,
        divergence=d.name,
        rows_kind=rows,
        label=c.label,
        n_positions=c.n_positions,
        n_trajectories=int(len(c.bounds) - 1),
        draft_lengths=ms,
        sequence_m=seq_m,
        eos_token_id=c.eos_token_id,
        sps_acceptance=sps_acc,
        frontier_at_eps=frontier_at,
        table=tuple(table),
        excluded=excluded,
        eos_shift=shifts,
    )


@dataclass(frozen=True, repr=False)
class AuditResult(_Result):
    r"""Rules calibrated to one emitted divergence, side by side (:func:`audit`).

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
        positions), the budget the rules are calibrated to per token. None per sequence and
        for divergences other than KL and TV.
    table : tuple of dict
        One row per rule: ``rule``, ``knob``, ``status`` (``calibrated``, ``within 0.2% of
        eps`` (stopped by a step of the statistic that close below eps), ``step``, ``range-end``, ``above``, ``reference``, ``no knob``, ``not audited``), ``acceptance``,
        ``relaxed_acceptance`` (:math:`\bar\alpha - \bar\alpha_{SpS}`), ``al_<m>``,
        ``emitted_kl``, ``emitted_tv``, ``sequence_kl_upper``/``_lower`` (per token, m =
        ``sequence_m``), ``frontier`` and ``frontier_gap`` (per position, each at the rule's
        own per-position KL: mean of :math:`F_t(KL_t) - \alpha_t`), ``corpus_frontier`` and
        ``corpus_gap`` (the corpus-mean frontier at the rule's own mean KL), ``eos_q``, ``eos_h``,
        ``eos_shift`` (means), ``length_ratio``, ``achieved``, ``note``.
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

    def to_table(self, name: str = "audit") -> Table:
        """The side-by-side table as a :class:`cactus_theory.report.Table`."""
        cols = [Column("rule", "rule", "s"), Column("knob", "knob", "s"), Column("status", "status", "s")]
        cols += [Column("acceptance", "accept"), Column("relaxed_acceptance", "a-a_SpS")]
        cols += [Column(f"al_{m}", f"AL_{m}", ".3f") for m in self.draft_lengths]
        cols += [Column("emitted_kl", "KL(h||q)"), Column("emitted_tv", "TV")]
        if self.sequence_m:  # trajectories: the chain's sequence bound
            cols.append(Column("sequence_kl_upper", f"seqKL/tok@{self.sequence_m}"))
        cols.append(Column("frontier_gap", "gap/pos"))
        cols.append(Column("corpus_gap", "gap/corpus"))
        if self.eos_token_id is not None:
            cols += [
                Column("eos_q", "q(EOS)", ".2e"),
                Column("eos_shift", "h-q(EOS)", ".2e"),
                Column("length_ratio", "len ratio", ".3f"),
            ]
        title = (
            f"[{self.label}; every rule at {self.per} {self.divergence} = {self.eps:g}; "
            f"SpS acceptance {self.sps_acceptance:.4f}"
            + (
                f", corpus-mean frontier F(eps) {self.frontier_at_eps:.4f}"
                if self.frontier_at_eps is not None
                else ""
            )
            + "]"
        )
        return Table(name, title, tuple(cols), tuple(self.rows()))

    def notes(self) -> list[str]:
        """One line per rule not calibrated exactly (its status and why), then the excluded."""
        out = [f"{r['rule']}: {r['status']}: {r['note']}" for r in self.table if r["status"] != "calibrated"]
        out += [f"{k}: not in the default set: {v}" for k, v in self.excluded.items()]
        return out

    def to_markdown(self) -> str:
        """The table in Markdown, then the notes."""
        return "\n\n".join(
            [format_table(self.to_table(), "markdown")] + ["\n".join(f"- {n}" for n in self.notes())]
        )

    def to_text(self) -> str:
        """The table as aligned text, then the notes."""
        return "\n".join([format_table(self.to_table(), "text")] + self.notes())

    def figure(self, ax=None):
        """:func:`cactus_theory.figures.audit.figure_audit` of this result."""
        from .figures.audit import figure_audit

        return figure_audit(self, ax=ax)

    def __repr__(self) -> str:
        ok = sum(r["status"] == "calibrated" for r in self.table)
        return (
            f"AuditResult({len(self.table)} rules at {self.per} {self.divergence} = {self.eps:g}, "
            f"{ok} calibrated; {self.n_positions} positions)\n" + self.to_text()
        )


def audit(
    target_probs,
    draft_probs=None,
    *,
    eps=0.1,
    rules=None,
    per="token",
    divergence="kl",
    draft_lengths=DRAFT_LENGTHS,
    sequence_m=SEQUENCE_M,
    knobs=None,
    tune=None,
    rows="processed",
    max_positions=None,
    eos_token_id=None,
    raw_target_probs=None,
    raw_draft_probs=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
) -> AuditResult:
    r"""Every chosen rule calibrated to the same true emitted divergence eps, side by side.

    See the module docstring (:mod:`cactus_theory.rule_audit`) for the columns and the length model.

    Parameters
    ----------
    target_probs : array_like (N, V), Dump, str, Path or RowSource
        Verifier rows q (with ``draft_probs``), or a dump: a loaded
        :class:`cactus_theory.logits.Dump`, a dump file or a shipped recording's name
        (``"distilled"``, ...), or a folder of shards / a row source, read chunk by chunk.
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
        the sequence divergence per token at m = ``sequence_m`` (KL or TV).
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
        A dump's processed rows (its sampling transforms) or its raw temperature-1 rows.
    max_positions : int, optional
        A dump's first trajectories up to at least this many positions.
    eos_token_id : int, optional
        The EOS vocabulary id (a dump's own by default) or, for arrays, its column.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw rows for arrays (rules that decide on them).
    chunk_rows, max_memory, progress
        For a row source (:mod:`cactus_theory.rows`: a folder of ``.npy``/``.npz`` shards, or a
        :class:`~cactus_theory.analysis.chunked.RowSource`): rows per chunk or the memory bound,
        and a progress bar over chunks (:func:`audit_rows`).

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        Naming the argument (``eps``, ``rules``, ``per``, ``divergence``, ``rows``, ...).

    Symbols: q verifier, p drafter, n drafted token, eps the target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3; Leviathan et al. 2023.
    """
    from pathlib import Path

    from .analysis.chunked import RowSource
    from .logits.loader import Dump

    if isinstance(target_probs, RowSource) or (
        isinstance(target_probs, (str, Path)) and Path(target_probs).is_dir()
    ):
        if draft_probs is not None:
            raise ValueError("draft_probs: give a row source (or a folder of shards) alone")
        for name, value in (("max_positions", max_positions), ("eos_token_id", eos_token_id)):
            if value is not None:
                raise ValueError(f"{name}: applies to dumps and arrays, not to a row source")
        if choice(rows, ROWS, "rows") == "raw":
            raise ValueError("rows: a row source is audited on its rows as stored ('processed')")
        return audit_rows(
            target_probs,
            eps,
            rules=rules,
            per=per,
            divergence=divergence,
            knobs=knobs,
            tune=tune,
            chunk_rows=chunk_rows,
            max_memory=max_memory,
            progress=progress,
        )
    if isinstance(target_probs, (str, Path)):
        if draft_probs is not None:
            raise ValueError("draft_probs: give a dump alone, or (target_probs, draft_probs) arrays")
        target_probs = _load(target_probs)
    if isinstance(target_probs, Dump):
        corpus = corpus_from_dump(
            target_probs, rows=rows, max_positions=max_positions, eos_token_id=eos_token_id
        )
    else:
        if draft_probs is None:
            raise ValueError("draft_probs: required with target_probs arrays")
        rows = choice(rows, ROWS, "rows")
        if rows == "raw":
            if raw_target_probs is None or raw_draft_probs is None:
                raise ValueError("rows: 'raw' needs raw_target_probs and raw_draft_probs with arrays")
            target_probs, draft_probs = raw_target_probs, raw_draft_probs
        corpus = corpus_from_arrays(
            target_probs,
            draft_probs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            eos_token_id=eos_token_id,
        )
        if max_positions is not None:
            raise ValueError("max_positions: applies to dumps only")
    return audit_corpus(
        corpus,
        eps,
        rules=rules,
        per=per,
        divergence=divergence,
        draft_lengths=draft_lengths,
        sequence_m=sequence_m,
        knobs=knobs,
        tune=tune,
        rows=rows,
        progress=progress,
    )


def _chunk_kernel(chunk, name, knobs, divergence, final):
    """Per-row emitted divergence of one rule on a chunk (and, ``final``, every column's rows)."""
    from .analysis.frontier import gap_to_frontier
    from .analysis.one_step import emitted_distribution, make_plan
    from .rules import get_rule

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    rq = q if chunk.raw_target_probs is None else np.asarray(chunk.raw_target_probs, dtype=np.float64)
    rp = p if chunk.raw_draft_probs is None else np.asarray(chunk.raw_draft_probs, dtype=np.float64)
    plan = make_plan(get_rule(name, **knobs), q, p, raw_target_probs=rq, raw_draft_probs=rp)
    h = np.asarray(emitted_distribution(plan), dtype=np.float64)
    qq, pp = np.asarray(plan.target_probs, dtype=np.float64), np.asarray(plan.draft_probs, dtype=np.float64)
    D = np.asarray(get_divergence(divergence).unchecked(h, qq), dtype=np.float64)
    if not final:
        return D
    alpha = np.sum(pp * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    kl = np.asarray(get_divergence("kl").unchecked(h, qq), dtype=np.float64)
    _, gap = gap_to_frontier(qq, pp, np.clip(alpha, 0.0, 1.0), kl, "kl")
    return {
        "D": D,
        "alpha": alpha,
        "sps": np.minimum(qq, pp).sum(-1),
        "kl": kl,
        "tv": np.asarray(get_divergence("tv").unchecked(h, qq), dtype=np.float64),
        "gap": np.asarray(gap, dtype=np.float64),
    }


def audit_rows(
    source,
    eps=0.1,
    *,
    rules=None,
    per="token",
    divergence="kl",
    knobs=None,
    tune=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
) -> AuditResult:
    r"""The audit over a row source, chunk by chunk (a folder of shards, files, large arrays).

    Each evaluation of a knob is one pass over the rows (the mean per-token
    :math:`D(h_{alg,t}\|q_t)`, by :mod:`cactus_theory.analysis.chunked`'s runner, with a
    progress bar over chunks when ``progress``); a last pass gives acceptance,
    :math:`\bar\alpha - \bar\alpha_{SpS}`, emitted KL and TV and the frontier gap. A row
    source has neither trajectories nor vocabulary ids, so the accepted-length, sequence and
    EOS columns are absent and ``per`` must be ``"token"``.

    Symbols: q verifier, p drafter, eps the target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from .analysis.calibration import calibrate_knob
    from .analysis.chunked import runner_for
    from .rows import as_row_source
    from .rules import RULES, get_rule

    eps = as_budget(eps, "eps")
    if not math.isfinite(eps):
        raise ValueError(f"eps: must be finite, got {eps}")
    if choice(per, PER, "per") != "token":
        raise ValueError("per: 'sequence' needs trajectories (a dump or arrays), not a row source")
    d = get_divergence(divergence)
    src = as_row_source(source)
    run = runner_for(src, "rules", chunk_rows, max_memory, progress)
    N = run.n_rows
    if N == 0:
        raise ValueError("target_probs: no rows")
    knobs, tune = _check_maps(knobs, tune)
    names, excluded = _names(rules)
    _check_tune(names, knobs, tune)
    table, sps_acc = [], None
    for name in names:
        spec = RULES[name]
        fixed = dict(knobs.get(name, {}))
        try:
            knob = _tunable(spec, fixed, tune.get(name))

            def stat(x, name=name, fixed=fixed, knob=knob):
                kn = dict(fixed, **({} if knob is None else {knob.name: x}))
                return float(np.sum(np.concatenate(run.map(_chunk_kernel, name, kn, d.name, False)))) / N

            if knob is None:
                cal, value_text, kn = None, "-", fixed
            else:
                start, end, scale = _path(spec, knob, stat)
                cal = calibrate_knob(
                    stat,
                    start,
                    end,
                    eps,
                    scale=scale,
                    integer=knob.integer,
                    grid_points=KNOB_GRID,
                    steps=KNOB_STEPS,
                )
                kn = dict(fixed, **{knob.name: cal.value})
                value_text = _fmt_knob(knob.name, cal.value)
            parts = run.map(_chunk_kernel, name, kn, d.name, True)
            col = {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}
            configured = dict(get_rule(name, **kn).knobs)
        except (ValueError, NotImplementedError, TypeError) as exc:
            table.append(
                {"rule": name, "knob": "-", "knobs": fixed, "status": "not audited", "note": str(exc)}
            )
            continue
        sps_acc = float(col["sps"].mean())
        if cal is None:
            s0 = float(col["D"].mean())
            status = "reference" if s0 <= LOSSLESS_TOL else "no knob"
            note = (
                "lossless: emits q"
                if status == "reference"
                else f"no numeric knob: token {d.name} = {s0:.4g}"
            )
        else:
            status, note = _status(cal, eps), _note(cal, "token", d, knob, eps)
        row = {
            "rule": name,
            "knob": value_text,
            "knobs": configured,
            "status": status,
            "acceptance": float(col["alpha"].mean()),
            "relaxed_acceptance": float(col["alpha"].mean()) - sps_acc,
            "emitted_kl": float(col["kl"].mean()),
            "emitted_tv": float(col["tv"].mean()),
            "frontier": float(np.mean(col["gap"] + col["alpha"])),
            "frontier_gap": float(col["gap"].mean()),
            "note": note,
        }
        if cal is not None:
            row["achieved"] = cal.achieved
        table.append(row)
    return AuditResult(
        eps=float(eps),
        per="token",
        divergence=d.name,
        rows_kind="processed",
        label=f"{src!r}: {N} rows",
        n_positions=int(N),
        n_trajectories=0,
        draft_lengths=(),
        sequence_m=0,
        eos_token_id=None,
        sps_acceptance=float("nan") if sps_acc is None else sps_acc,
        frontier_at_eps=None,
        table=tuple(table),
        excluded=excluded,
    )


def _load(source):
    """A dump from a path or a shipped recording's name (ValueError naming ``target_probs``)."""
    from pathlib import Path

    from .inputs import shipped_pair_names
    from .logits.loader import REAL_DIR, load_dump

    path = Path(source)
    if not path.exists():
        name = str(source)
        if name in shipped_pair_names():
            path = REAL_DIR / f"smollm2-135m_{name}.npz"
        else:
            raise ValueError(
                f"target_probs: {name!r} is neither a dump file nor a shipped recording "
                f"({', '.join(shipped_pair_names())})"
            )
    return load_dump(path)


# --------------------------------------------------------------------------- command line


def add_arguments(p):
    """Arguments of ``cactus-theory audit``."""
    from ._cli import add_output, add_per_file

    p.add_argument(
        "--input",
        "-i",
        required=True,
        metavar="DUMP|FILE",
        help="a dump file or a shipped recording (distilled, early-exit-25, requant-3, requant-4), "
        "a .npy/.npz/.json file of (q, p) rows, or a folder of .npy/.npz shards",
    )
    p.add_argument("--eps", type=float, default=0.1, help="target emitted divergence (per token)")
    p.add_argument("--rules", default=None, help="comma-separated rule names (default: every rule)")
    p.add_argument("--per", default="token", choices=PER, help="calibrate per token or per sequence")
    p.add_argument("--divergence", default="kl", help="divergence of the target")
    p.add_argument("--raw", action="store_true", help="audit a dump's raw rows (temperature 1, untruncated)")
    p.add_argument(
        "--positions",
        type=int,
        default=None,
        metavar="N",
        help="a dump's first trajectories up to at least N positions (default: all)",
    )
    p.add_argument(
        "-m",
        "--draft-lengths",
        default=",".join(map(str, DRAFT_LENGTHS)),
        help="draft lengths m of the accepted-length columns (comma-separated)",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="with --input a folder of .npy/.npz shards: bound on the working memory (e.g. 256MB)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (over rules; over chunks for a folder of shards)",
    )
    p.add_argument("--figure", default=None, metavar="PATH", help="also write the figure (.pdf or .png)")
    p.add_argument("--markdown", action="store_true", help="print Markdown (also when --output ends in .md)")
    add_per_file(p)
    add_output(p, csv_flag=True)


def run(args) -> int:
    """Handler of ``cactus-theory audit``."""
    import json
    import os
    from pathlib import Path

    from ._cli import _write, check_output_path
    from ._tables import json_ready

    if args.figure is not None:
        check_output_path(args.figure, "figure")
        if Path(args.figure).suffix.lower() not in (".pdf", ".png"):
            raise ValueError(f"figure: expected a .pdf or .png path, got {args.figure!r}")
    try:
        ms = tuple(int(x) for x in str(args.draft_lengths).split(",") if x.strip())
    except ValueError:
        raise ValueError(
            f"draft-lengths: expected comma-separated integers, got {args.draft_lengths!r}"
        ) from None
    rules = None if args.rules is None else [r.strip() for r in args.rules.split(",") if r.strip()]
    if rules is not None and not rules:
        raise ValueError("rules: empty list")
    kw = dict(eps=args.eps, rules=rules, per=args.per, divergence=args.divergence, draft_lengths=ms)
    if args.per_file:
        if not Path(args.input).is_dir():
            raise ValueError("per-file: applies to --input FOLDER (each of its files audited apart)")
        if args.figure is not None:
            raise ValueError("figure: one figure per audit; without --per-file, give one file")
        from .rows import shard_files

        results = [(f.name, _audit_input(str(f), args, dict(kw))) for f in shard_files(args.input)]
    else:
        results = [(None, _audit_input(args.input, args, kw))]
    if args.figure is not None:
        from .figures.style import save_figure

        stem = Path(args.figure)
        save_figure(results[0][1].figure(), stem.with_suffix(""), (stem.suffix.lower()[1:],))
    suffix = os.path.splitext(args.output or "")[1].lower()
    if args.json or suffix == ".json":
        data = (
            results[0][1].to_dict()
            if not args.per_file
            else {"files": [{"file": name, **res.to_dict()} for name, res in results]}
        )
        _write(args, json.dumps(json_ready(data), indent=2, allow_nan=False))
        return 0
    if args.csv or suffix == ".csv":
        fmt = lambda res: format_table(res.to_table(), "csv")  # noqa: E731
        head = "# {}\n"
    elif args.markdown or suffix in (".md", ".markdown"):
        fmt, head = (lambda res: res.to_markdown()), "### {}\n\n"
    else:
        fmt, head = (lambda res: res.to_text()), "== {} ==\n"
    _write(args, "\n\n".join((head.format(name) if name else "") + fmt(res) for name, res in results))
    return 0


def _audit_input(source, args, kw):
    """The audit of one ``--input`` (a dump, a file of (q, p) rows, or a folder of shards)."""
    from pathlib import Path

    from .inputs import load_pairs, shipped_pair_names

    is_dump = str(source) in shipped_pair_names() or (
        Path(source).suffix.lower() == ".npz" and Path(source).is_file() and _is_dump(source)
    )
    if Path(source).is_dir():  # a folder of shards, read chunk by chunk
        for flag, value in (("raw", args.raw), ("positions", args.positions)):
            if value:
                raise ValueError(f"{flag}: applies to dumps, not to a folder of shards")
        kw.pop("draft_lengths")
        return audit(source, max_memory=args.max_memory, progress=not args.no_progress, **kw)
    if is_dump:
        return audit(
            source,
            rows="raw" if args.raw else "processed",
            max_positions=args.positions,
            progress=not args.no_progress,
            **kw,
        )
    if args.raw:
        raise ValueError("raw: needs a dump (its raw rows); --input holds (q, p) rows only")
    if args.positions is not None:
        raise ValueError("positions: applies to dumps only")
    q, p = load_pairs(source)
    return audit(q, p, progress=not args.no_progress, **kw)


def _is_dump(path) -> bool:
    """True for a compact dump archive (it holds ``__meta__``), False for a plain (q, p) npz."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return "__meta__" in z.files
    except (OSError, ValueError):
        return False
