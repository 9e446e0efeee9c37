"""The rule registry (``rules/registry.py``): the calibrated knob stated in the declaration, not
taken from the knob order; the registry's stated order; a knob's validation naming it; aliases
and their presets.
"""

import pytest

import cactus_theory  # noqa: F401  (registers every rule, cactus-calibrated included)
from cactus_theory.rules import RULES, Rule


def test_the_calibrated_knob_is_stated_not_taken_from_the_knob_order():
    from cactus_theory.rules import Knob, RuleSpec

    two = (Knob("a", 0.1, 0.0, 1.0), Knob("b", 0.2, 0.0, 1.0), Knob("c", "x", choices=("x", "y")))
    with pytest.raises(ValueError, match="calibrated: rule 'two' has several numeric knobs"):
        RuleSpec(name="two", factory=Rule, summary="", reference="", family="decision", knobs=two)
    with pytest.raises(ValueError, match="must be numeric knobs"):
        RuleSpec(
            name="two",
            factory=Rule,
            summary="",
            reference="",
            family="decision",
            knobs=two,
            calibrated=("c",),
        )
    spec = RuleSpec(
        name="two",
        factory=Rule,
        summary="",
        reference="",
        family="decision",
        knobs=two,
        calibrated=("b", "a"),
    )
    assert spec.calibrated_knob().name == "b" and spec.calibrated_knob(fixed={"b"}).name == "a"
    assert spec.calibrated_knob(fixed={"a", "b"}) is None
    one = RuleSpec(name="one", factory=Rule, summary="", reference="", family="decision", knobs=two[:1])
    assert one.calibrated == ("a",)  # a single numeric knob needs no statement
    # entropy-verify's statement, whatever the order of its knobs
    assert RULES["entropy-verify"].calibrated_knob().name == "posterior_alpha"
    assert RULES["tas"].calibrated_knob().name == "posterior_threshold"


def test_the_registry_order_is_stated():
    from cactus_theory.rules import _ORDER

    assert list(RULES)[: len(_ORDER)] == list(_ORDER)
    with pytest.raises(ValueError, match="every registered rule once"):
        RULES._order(_ORDER[1:])
    assert [k.name for k in RULES["scd"].knobs if k.request] == ["scd_temperature"]


def test_a_knob_refuses_a_bad_value_naming_itself_and_its_range():
    """Knob.validate: an open end is printed with a parenthesis and refused at the end itself;
    a closed end is accepted; a value past it, NaN, a non-integer for an integer knob and a name
    that is not a knob are refused, each message starting with the knob's name."""
    from cactus_theory.rules import Knob, get_rule

    k = Knob("x", 0.5, 0.0, 1.0, low_open=True)
    assert k.validate(1.0) == 1.0 and k.validate(0.5) == 0.5
    for bad in (0.0, 2):
        with pytest.raises(ValueError, match=rf"^x: {bad} outside its range \(0\.0, 1\.0\]$"):
            k.validate(bad)
    with pytest.raises(ValueError, match=r"^alpha: 1\.5 outside its range \[0\.0, 1\.0\]$"):
        get_rule("interpolation", alpha=1.5)
    with pytest.raises(ValueError, match="^topk: must be an integer, got 1.5$"):
        get_rule("topk", topk=1.5)
    with pytest.raises(ValueError, match="^posterior_alpha: is NaN$"):
        get_rule("tas", posterior_alpha=float("nan"))
    with pytest.raises(ValueError, match=r"^bogus: not a knob of rule 'sps' \(knobs: none\)$"):
        get_rule("sps", bogus=1)
    with pytest.raises(ValueError, match="^rule: unknown value 'nope'; valid: cactus-taylor, "):
        get_rule("nope")


def test_aliases_are_names_with_a_preset():
    """Every alias is listed with aliases=True only, and builds its canonical rule with its
    preset knobs (cactus-exact-kl: cactus-exact's class with divergence kl)."""
    from cactus_theory.rules import get_rule, rule_names

    names, every = rule_names(), rule_names(aliases=True)
    assert set(names) < set(every) and list(RULES.all_names()) == every
    assert every[: len(names)] == names
    rule = get_rule("cactus-exact-kl", delta=0.25)
    assert rule.name == "cactus-exact" and rule.knobs == {"delta": 0.25, "divergence": "kl"}
    assert "cactus-exact-kl" not in names
    assert RULES["cactus-exact-kl"].factory is RULES["cactus-exact"].factory
