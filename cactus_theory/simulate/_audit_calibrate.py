r"""The audit's calibration: each rule's knob set so that its emitted divergence meets eps.

The knob is a monotone bisection within the rule's published range
(:class:`cactus_theory.rules.registry.Knob`) from its lossless end (SpS's value where it has
one), by :func:`cactus_theory.analysis.calibrate_knob`; a rule that cannot reach
the target in its range, or whose divergence jumps over it (0/1 rules, integer knobs, a KL that
becomes infinite), is reported with its status, never dropped. The statistic and the table's
columns come from an evaluator (:mod:`._audit_rows`): the rows in memory or chunk by chunk.

Symbols: q verifier, p drafter, eps the target on the emitted divergence. Source: Hao & Mou,
ICLR 2026 (arXiv 2604.04987), Theorem 3.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import choice
from ..analysis import calibrate_knob
from ..results.internal import _g
from ..rules import RULES, get_rule

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
#: A calibration stopped by a step of its statistic that still lands within this relative
#: distance below eps is reported as :data:`NEAR_STATUS`, not ``"step"``.
NEAR_RTOL = 0.002
NEAR_STATUS = "within 0.2% of eps"
#: The errors that make a rule's row "not audited" (its note says why) instead of failing the audit.
NOT_AUDITED = (ValueError, NotImplementedError, TypeError)


def check_rules(rules, knobs, tune):
    """The audited rule names, the default set's exclusions (with reasons), and the fixed knobs
    and tuned knob per rule, validated (ValueError naming ``rules``, ``knobs`` or ``tune``)."""
    if knobs is not None and not isinstance(knobs, dict):
        raise ValueError(f"knobs: expected a dict of rule name -> dict of knobs, got {type(knobs).__name__}")
    if tune is not None and not isinstance(tune, dict):
        raise ValueError(f"tune: expected a dict of rule name -> knob name, got {type(tune).__name__}")
    knobs, tune = knobs or {}, tune or {}
    if rules is None:
        names = [n for n in RULES if n not in AUDIT_EXCLUDED]
        excluded = {n: AUDIT_EXCLUDED[n] for n in RULES if n in AUDIT_EXCLUDED}
    else:
        names = [
            choice(r, RULES.all_names(), "rules") for r in ([rules] if isinstance(rules, str) else rules)
        ]
        excluded = {}
        if not names:
            raise ValueError("rules: empty list")
    for name, knob_name in tune.items():
        if name not in names:
            raise ValueError(f"tune: rule {name!r} is not among the audited rules")
        if knob_name in knobs.get(name, {}):
            raise ValueError(f"tune: knob {knob_name!r} of rule {name!r} is also fixed in knobs")
        tunable(RULES[name], dict(knobs.get(name, {})), knob_name)
    return names, excluded, knobs, tune


def tunable(spec, fixed, tune):
    """The knob that is calibrated: ``tune``, or the first of the knobs the rule's declaration
    states (``RuleSpec.calibrated``) that the user does not fix."""
    if tune is not None:
        for k in spec.knobs:
            if k.name == tune and k.choices is None:
                return k
        raise ValueError(f"tune: {tune!r} is not a numeric knob of rule {spec.name!r}")
    return spec.calibrated_knob(fixed)


def _inside(knob, x, toward):
    """An end of the knob's range, moved inside when the range is open there."""
    open_ = (knob.low_open and x == knob.low) or (knob.high_open and x == knob.high)
    return float(np.nextafter(x, toward)) if open_ and math.isfinite(x) else x


def _far(x):
    """A finite stand-in for an infinite end of a range (to compare the statistic at both ends)."""
    return x if math.isfinite(x) else math.copysign(1e6, x)


def knob_path(spec, knob, stat):
    """(start, end, scale): the lossless end (SpS's value, else the end with the smaller
    statistic), the other end of the published range, and the tan map's scale."""
    lo, hi = _inside(knob, knob.low, knob.high), _inside(knob, knob.high, knob.low)
    sps = (spec.sps_knobs or {}).get(knob.name) if spec.sps_knobs is not None else None
    if sps is not None:
        start = float(sps)
        end = hi if start == knob.low or start == lo else lo if start in (knob.high, hi) else None
        if end is None:  # SpS inside the range: go towards the end with the larger statistic
            end = hi if stat(_far(hi)) >= stat(_far(lo)) else lo
    else:
        s_lo, s_hi = stat(_far(lo)), stat(_far(hi))
        start, end = (lo, hi) if s_lo <= s_hi else (hi, lo)
    anchor = start if math.isfinite(start) else end
    default = float(knob.default)
    scale = abs(default - anchor) if math.isfinite(anchor) else abs(default)
    return start, end, max(scale, 1e-3) if math.isfinite(anchor) else max(scale, 1.0)


def fmt_knob(name, v):
    """``name=value`` of a knob (4 significant digits for a float)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{name}={v:.4g}"
    return f"{name}={v}"


def calibration_status(cal, eps):
    """The status word of a calibration: ``"step"`` becomes :data:`NEAR_STATUS` when the value
    reached lies within :data:`NEAR_RTOL` of eps (below it: a step stops short of eps)."""
    if cal.status == "step" and eps > 0 and 0 <= eps - cal.achieved <= NEAR_RTOL * eps:
        return NEAR_STATUS
    return cal.status


def _note(cal, per, d, knob, eps):
    """One line on how the calibration ended."""
    if calibration_status(cal, eps) == NEAR_STATUS:
        return (
            f"{per} {d.name} = {cal.achieved:.4g}, {100 * (eps - cal.achieved) / eps:.2g}% below eps "
            f"(the next knob value, {fmt_knob(knob.name, cal.next_value)}, jumps to {_g(cal.next_achieved)})"
        )
    return {
        "calibrated": f"{per} {d.name} = {cal.achieved:.4g} ({cal.evaluations} evaluations)",
        "step": f"{per} {d.name} jumps from {cal.achieved:.4g} to {_g(cal.next_achieved)} at "
        f"{fmt_knob(knob.name, cal.next_value)}: cannot meet eps exactly",
        "range-end": f"cannot reach eps in its range: {per} {d.name} = {cal.achieved:.4g} at the range's end",
        "above": f"above eps at every knob: {per} {d.name} = {cal.achieved:.4g} at its least",
    }[cal.status]


def audit_rule(name, fixed, tune, ev, eps, per, d):
    """The table row of one rule: its knob calibrated on the evaluator ``ev``, then its columns.

    ``ev.statistic(name, knobs)`` is the calibrated statistic (per ``per``, of divergence ``d``);
    ``ev.columns(name, knobs, with_statistic)`` gives (the statistic or None, the row's columns,
    the per-position EOS shift or None). A rule whose evaluation raises one of
    :data:`NOT_AUDITED` gets a ``"not audited"`` row with the reason.
    """
    spec = RULES[name]
    try:
        knob = tunable(spec, fixed, tune)
        if knob is None:
            kn, cal = fixed, None
            s0, columns, shift = ev.columns(name, kn, True)
        else:
            stat = lambda x: ev.statistic(name, dict(fixed, **{knob.name: x}))  # noqa: E731
            start, end, scale = knob_path(spec, knob, stat)
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
            _, columns, shift = ev.columns(name, kn, False)
        configured = dict(get_rule(name, **kn).knobs)
    except NOT_AUDITED as exc:
        return {"rule": name, "knob": "-", "knobs": fixed, "status": "not audited", "note": str(exc)}, None
    if cal is None:
        status = "reference" if s0 <= LOSSLESS_TOL else "no knob"
        note = (
            "lossless: emits q"
            if status == "reference"
            else f"no numeric knob: {per} {d.name} = {s0:.4g} at its fixed knobs"
        )
        knob_text = "-"
    else:
        status, note, knob_text = (
            calibration_status(cal, eps),
            _note(cal, per, d, knob, eps),
            fmt_knob(knob.name, cal.value),
        )
    row = {"rule": name, "knob": knob_text, "knobs": configured, "status": status, **columns, "note": note}
    if cal is not None:
        row["achieved"] = cal.achieved
    return row, shift
