"""The rule registry: every rule, its knobs (defaults, ranges, the SpS value) and its flags.

Every consumer (the exact analysis, the samplers, the simulator, the report, the invariant
test battery) reaches rules through :func:`get_rule` and :data:`RULES`, so adding a rule here
adds it to every analysis and every invariant test.

Identity: a rule is one registry name plus knobs. A choice such as the divergence is a knob
(``cactus-exact`` with ``divergence="tv"``), not part of the name; the older per-divergence
names (``cactus-exact-tv``, ``mentored-reverse-kl``, ...) are **aliases**
(:func:`register_alias`): ``RULES["cactus-exact-tv"]`` and ``get_rule("cactus-exact-tv")``
resolve to the same rule with the knob set (and that knob fixed), while iterating
:data:`RULES` or :func:`rule_names` lists each rule once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import as_budget, as_real, choice
from ._forms import _FORM_FAMILIES, DecisionRule, ElementwiseTargetRule, Rule, SpikeRule

#: The declaration forms (the registry's functions, RuleSpec and Knob are exported by the
#: package, :mod:`cactus_theory.rules`).
__all__ = [
    "Rule",
    "ElementwiseTargetRule",
    "SpikeRule",
    "DecisionRule",
    "Knob",
    "RuleSpec",
    "register",
    "register_alias",
    "get_rule",
    "rule_names",
    "RULES",
]


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
    request : str
        The request's field an engine sets the knob from, per request (SCD's
        ``scd_temperature`` is the request's ``temperature``); empty: a configured value.
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
    request: str = ""

    def validate(self, value):
        """Return ``value`` checked against the knob's range; ValueError naming the knob."""
        if self.choices is not None:
            return choice(value, self.choices, self.name)
        v = as_real(value, self.name, "must be a number")
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
    """A registry entry. A rule states its name, factory, summary and reference, and only the
    fields that differ from the defaults (no knobs, no SpS value, a random acceptance that
    reads p and the processed distributions, the form's family).

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
        ``"target"``, ``"spike"`` or ``"decision"``: the plan type it returns (default: the
        declaration form's, ``"spike"`` for a :class:`SpikeRule` and ``"target"`` for an
        :class:`ElementwiseTargetRule`; the other rules state it).
    summary, reference, sps_note : str
        One line each.
    fast_accept : bool
        The rule's declaration form derives :meth:`Rule.accept_probs_at` as a path that
        evaluates the acceptance at the drafted tokens only (the samplers call that method;
        for a bare :class:`Rule` it builds the whole plan). Default: read from the rule class.
        The invariant battery checks it against the plan.
    calibrated : tuple of str
        The numeric knobs a calibration or a frontier sweep moves, in order of preference
        (:meth:`calibrated_knob`: the first that the user and the alias leave free). Default:
        the rule's only numeric knob; a rule with several must state them (the knobs' order
        decides nothing).
    preset : mapping
        Knob values fixed by an alias (empty for a rule's own entry).
    alias_of : RuleSpec or None
        For an alias, the rule it resolves to (configured rules carry that spec).
    defaults : mapping
        Every knob's default (the preset values for an alias).
    """

    name: str
    factory: Callable[..., Rule]
    summary: str
    reference: str
    knobs: tuple[Knob, ...] = ()
    sps_knobs: Mapping[str, Any] | None = None
    deterministic: bool = False
    reads_draft: bool = True
    needs_raw: bool = False
    family: str = ""
    sps_note: str = ""
    fast_accept: bool | None = None
    calibrated: tuple[str, ...] = ()
    preset: Mapping[str, Any] = field(default_factory=dict)
    alias_of: RuleSpec | None = field(default=None, repr=False)
    defaults: Mapping[str, Any] = field(init=False)

    def __post_init__(self):
        form = self.factory if isinstance(self.factory, type) else None
        if not self.family:  # the declaration form's, for a rule class of one
            family = next((f for cls, f in _FORM_FAMILIES.items() if form and issubclass(form, cls)), "")
            if not family:
                raise ValueError(
                    f"family: rule {self.name!r} must state its family (target, spike or decision)"
                )
            object.__setattr__(self, "family", family)
        if self.fast_accept is None:  # the class overrides Rule.accept_probs_at
            object.__setattr__(
                self, "fast_accept", form is not None and form.accept_probs_at is not Rule.accept_probs_at
            )
        numeric = [k.name for k in self.knobs if k.choices is None]
        if not self.calibrated and len(numeric) > 1:
            raise ValueError(
                f"calibrated: rule {self.name!r} has several numeric knobs {numeric}; state the ones "
                "a calibration moves, in order of preference"
            )
        object.__setattr__(self, "calibrated", tuple(self.calibrated or numeric))
        if not set(self.calibrated) <= set(numeric):
            raise ValueError(
                f"calibrated: {list(self.calibrated)} must be numeric knobs of rule {self.name!r}"
            )
        defaults = {k.name: k.default for k in self.knobs}
        unknown = set(self.preset) - set(defaults)
        if unknown:
            raise ValueError(f"preset: {sorted(unknown)} are not knobs of rule {self.name!r}")
        defaults.update(self.preset)
        object.__setattr__(self, "defaults", defaults)

    def calibrated_knob(self, fixed=()) -> Knob | None:
        """The knob a calibration moves: the first of :attr:`calibrated` that ``fixed`` (knob
        names the user sets) and the alias's preset leave free; None if none."""
        knobs = {k.name: k for k in self.knobs}
        free = [n for n in self.calibrated if n not in fixed and n not in self.preset]
        return knobs[free[0]] if free else None

    def make(self, **knobs) -> Rule:
        """Build the rule with validated knobs (unknown names raise ValueError).

        For an alias, its preset knobs are fixed: passing another value raises ValueError.
        """
        known = {k.name: k for k in self.knobs}
        for key in knobs:
            if key not in known:
                valid = ", ".join(known) or "none"
                raise ValueError(f"{key}: not a knob of rule {self.name!r} (knobs: {valid})")
        values = {name: k.validate(knobs.get(name, self.defaults[name])) for name, k in known.items()}
        for key, fixed in self.preset.items():
            if values[key] != known[key].validate(fixed):
                raise ValueError(
                    f"{key}: fixed to {fixed!r} by the alias {self.name!r} "
                    f"(use {self.alias_of.name!r} to choose it)"
                )
        rule = self.factory(**values)
        rule.spec = self.alias_of if self.alias_of is not None else self
        rule.knobs = values
        return rule


class _RuleRegistry(dict):
    """Rule name -> :class:`RuleSpec`; lookups also resolve aliases.

    Iteration, ``len``, ``keys``/``items``/``values`` see each rule once (its own name);
    ``registry[alias]``, ``alias in registry`` and ``registry.get(alias)`` resolve an alias to
    its :class:`RuleSpec` (the rule's entry with the preset knobs fixed). ``aliases`` maps each
    alias to its spec.
    """

    def __init__(self):
        super().__init__()
        self.aliases: dict[str, RuleSpec] = {}

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if isinstance(name, str) and name in self.aliases:
            return self.aliases[name]
        raise KeyError(name)

    def __contains__(self, name):
        return dict.__contains__(self, name) or (isinstance(name, str) and name in self.aliases)

    def get(self, name, default=None):
        """``registry[name]`` (rule or alias), or ``default``."""
        try:
            return self[name]
        except (KeyError, TypeError):
            return default

    def all_names(self) -> tuple:
        """Every accepted name: the rules' own, then the aliases."""
        return tuple(dict.keys(self)) + tuple(self.aliases)

    def _order(self, names) -> None:
        """Put the registered rules in the order ``names`` (every registered rule once), the
        aliases in their rules' order: the order is stated, not the modules' import order."""
        names = tuple(names)
        if sorted(names) != sorted(dict.keys(self)):
            missing = sorted(set(dict.keys(self)) - set(names))
            extra = sorted(set(names) - set(dict.keys(self)))
            raise ValueError(
                f"names: the stated order must list every registered rule once ({missing=}, {extra=})"
            )
        specs = {name: dict.__getitem__(self, name) for name in names}
        rank = {name: i for i, name in enumerate(names)}
        aliases = sorted(self.aliases.items(), key=lambda kv: rank.get(kv[1].alias_of.name, len(rank)))
        dict.clear(self)
        dict.update(self, specs)
        self.aliases = dict(aliases)


RULES: _RuleRegistry = _RuleRegistry()


def register(spec: RuleSpec) -> RuleSpec:
    """Add a rule to :data:`RULES` (names are unique, also against aliases)."""
    if spec.name in RULES:
        raise ValueError(f"rule: {spec.name!r} is already registered")
    RULES[spec.name] = spec
    return spec


def register_alias(alias: str, name: str, **preset) -> RuleSpec:
    """Register ``alias`` for rule ``name`` with the knobs ``preset`` fixed.

    ``get_rule(alias, **knobs)`` then equals ``get_rule(name, **preset, **knobs)`` (the
    configured rule carries ``name``'s spec), and passing a preset knob with another value
    raises ValueError.
    """
    if alias in RULES:
        raise ValueError(f"rule: {alias!r} is already registered")
    base = dict.__getitem__(RULES, name)
    spec = RuleSpec(
        name=alias,
        factory=base.factory,
        knobs=base.knobs,
        sps_knobs=base.sps_knobs,
        deterministic=base.deterministic,
        reads_draft=base.reads_draft,
        needs_raw=base.needs_raw,
        family=base.family,
        summary=f"alias of {name} with " + ", ".join(f"{k}={v!r}" for k, v in preset.items()),
        reference=base.reference,
        sps_note=base.sps_note,
        fast_accept=base.fast_accept,
        calibrated=base.calibrated,
        preset=dict(preset),
        alias_of=base,
    )
    RULES.aliases[alias] = spec
    return spec


def get_rule(name, **knobs) -> Rule:
    """A configured rule by registry name (a :class:`Rule` passes through unchanged).

    Aliases resolve to their rule with the preset knobs (:func:`register_alias`).

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
    if not isinstance(name, str) or name not in RULES:
        raise ValueError(
            f"rule: unknown value {name!r}; valid: {', '.join(RULES)} "
            f"(aliases: {', '.join(RULES.aliases) or 'none'})"
        )
    return RULES[name].make(**knobs)


def rule_names(*, aliases: bool = False) -> list[str]:
    """All registered rule names, in registration order (then the aliases if ``aliases``)."""
    return list(RULES.all_names() if aliases else RULES)


def _rule_knobs(rules=None, delta=None, knobs=None) -> tuple[list[str], dict[str, dict]]:
    """The rule names and each one's knobs for a comparison of several rules.

    ``rules``: a name, a sequence of names (aliases allowed) or None (every rule); ``delta``:
    given to every rule that has a ``delta`` knob; ``knobs``: rule name -> dict of knobs,
    applied after ``delta``. ValueError naming ``rules``, ``delta`` or ``knobs`` otherwise.
    """
    names = (
        list(RULES)
        if rules is None
        else [choice(r, RULES.all_names(), "rules") for r in ([rules] if isinstance(rules, str) else rules)]
    )
    if delta is not None:
        delta = as_budget(delta, "delta")
    if knobs is not None and not isinstance(knobs, dict):
        raise ValueError(f"knobs: expected a dict of rule name -> dict of knobs, got {type(knobs).__name__}")
    per_rule = {}
    for name in names:
        k = {}
        if delta is not None and any(kn.name == "delta" for kn in RULES[name].knobs):
            k["delta"] = delta
        k.update((knobs or {}).get(name, {}))
        per_rule[name] = k
    return names, per_rule
