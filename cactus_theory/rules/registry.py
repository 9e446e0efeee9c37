"""The rule registry: every rule, its knobs (defaults, ranges, the SpS value) and its flags.

Every consumer (the exact analysis, the samplers, the simulator, the report, the invariant
test battery) reaches rules through :func:`get_rule` and :data:`RULES`, so adding a rule here
adds it to every analysis and every invariant test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .._validation import choice

__all__ = ["Knob", "RuleSpec", "Rule", "RULES", "register", "get_rule", "rule_names"]


@dataclass(frozen=True)
class Knob:
    """A rule's parameter.

    Attributes
    ----------
    name : str
        As the rule's source names it.
    default : Any
        The source's default.
    low, high : float
        Valid range (``low_open``/``high_open`` make an end exclusive). Ignored for choices.
    choices : tuple, optional
        Valid values of a categorical knob.
    integer : bool
        The knob must be an integer.
    doc : str
        One line: what it controls.
    """

    name: str
    default: Any
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple | None = None
    integer: bool = False
    doc: str = ""

    def validate(self, value):
        """Return ``value`` checked against the knob's range; ValueError naming the knob."""
        if self.choices is not None:
            return choice(value, self.choices, self.name)
        if isinstance(value, bool):
            raise ValueError(f"{self.name}: must be a number, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: must be a number, got {value!r}") from None
        if math.isnan(v):
            raise ValueError(f"{self.name}: is NaN")
        if self.integer:
            if not float(v).is_integer():
                raise ValueError(f"{self.name}: must be an integer, got {value!r}")
            v = int(v)
        too_low = v <= self.low if self.low_open else v < self.low
        too_high = v >= self.high if self.high_open else v > self.high
        if too_low or too_high:
            lb = "(" if self.low_open else "["
            hb = ")" if self.high_open else "]"
            raise ValueError(f"{self.name}: {value!r} outside its range {lb}{self.low}, {self.high}{hb}")
        return v


@dataclass(frozen=True)
class RuleSpec:
    """A registry entry.

    Attributes
    ----------
    name : str
        Registry name (e.g. ``"cactus-taylor"``).
    factory : callable
        ``factory(**knobs) -> Rule``.
    knobs : tuple of Knob
        The rule's parameters, with the source's defaults.
    sps_knobs : mapping or None
        Knob values that reduce the rule to SpS exactly (each rule has its own), or None when
        no value does (``sps_note`` says why).
    deterministic : bool
        Acceptance is 0/1 given the distributions (no uniform draw decides it).
    reads_draft : bool
        The rule reads the drafter's distribution p (beyond the drafted token's id).
    needs_raw : bool
        The rule decides on the raw (temperature-1) distributions and acts on the processed
        ones; the raw ones are passed as ``raw_target_probs``/``raw_draft_probs``.
    family : str
        ``"target"``, ``"spike"`` or ``"decision"``: the plan type it returns.
    summary, reference, sps_note : str
        One line each.
    """

    name: str
    factory: Callable[..., "Rule"]
    knobs: tuple[Knob, ...]
    sps_knobs: Mapping[str, Any] | None
    deterministic: bool
    reads_draft: bool
    needs_raw: bool
    family: str
    summary: str
    reference: str
    sps_note: str = ""
    defaults: Mapping[str, Any] = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "defaults", {k.name: k.default for k in self.knobs})

    def make(self, **knobs) -> "Rule":
        """Build the rule with validated knobs (unknown names raise ValueError)."""
        known = {k.name: k for k in self.knobs}
        for key in knobs:
            if key not in known:
                valid = ", ".join(known) or "none"
                raise ValueError(f"{key}: not a knob of rule {self.name!r} (knobs: {valid})")
        values = {name: k.validate(knobs.get(name, k.default)) for name, k in known.items()}
        rule = self.factory(**values)
        rule.spec = self
        rule.knobs = values
        return rule


class Rule:
    """Base class: a configured rule. Subclasses implement :meth:`plan`.

    ``plan(target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None)``
    returns a :mod:`~cactus_theory.rules.plans` plan; it is array-agnostic (numpy float64 in
    the analysis, torch float32 in the samplers). Raw distributions default to the processed
    ones when not given.
    """

    spec: RuleSpec
    knobs: dict

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.knobs.items())
        return f"get_rule({self.spec.name!r}{', ' if args else ''}{args})"


RULES: dict[str, RuleSpec] = {}


def register(spec: RuleSpec) -> RuleSpec:
    """Add a rule to :data:`RULES` (names are unique)."""
    if spec.name in RULES:
        raise ValueError(f"rule: {spec.name!r} is already registered")
    RULES[spec.name] = spec
    return spec


def get_rule(name, **knobs) -> Rule:
    """A configured rule by registry name (a :class:`Rule` passes through unchanged).

    Raises
    ------
    ValueError
        Naming ``rule`` for an unknown name (the message lists the valid ones), or naming the
        knob for an unknown knob or a value outside its range.
    """
    if isinstance(name, Rule):
        if knobs:
            raise ValueError("rule: knobs given together with an already configured Rule")
        return name
    return RULES[choice(name, tuple(RULES), "rule")].make(**knobs)


def rule_names() -> list[str]:
    """All registered rule names, in registration order."""
    return list(RULES)
