"""The rule protocol is closed: a rule states its acceptance and recovery through a declaration
form, and the torch consumers never dispatch on a rule's type.

* No rule file defines one of the acceptance or recovery methods the forms derive
  (:data:`DERIVED`): only :mod:`cactus_theory.rules._forms` does (the plan, ``Rule.plan``, is
  the declaration of a rule with no narrower form). Checked on the source of every module
  under ``cactus_theory/rules`` and on every registered rule's class (``cactus-calibrated``,
  declared in :mod:`cactus_theory.analysis`, included).
* No module of ``cactus_theory/samplers`` or ``cactus_theory/integrations`` calls
  ``isinstance`` / ``issubclass`` with a rule class (a single-draft rule, a declaration form
  or a multi-draft verifier), or compares a rule class's method by identity (``type(rule).m is
  Rule.m``): they read the declaration (``Rule.realisation``, the specs) and the kernel
  registry.

Each scanner is also run on planted violations, which it must report.
"""

import ast
import inspect
import pathlib

import pytest

import cactus_theory  # noqa: F401  (registers every rule, cactus-calibrated included)
from cactus_theory.rules import RULES, Rule
from cactus_theory.rules.multidraft import MultiDraftVerifier

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "cactus_theory"

#: The acceptance and recovery paths the declaration forms derive (no rule file defines them).
DERIVED = (
    "accept_probs_at",
    "accept_probs_from_values",
    "recovery_at",
    "recovery_weights_at",
    "spike_at_tokens",
)

#: The modules that define the forms and the plans (where DERIVED are defined).
FORM_MODULES = ("_forms.py", "plans.py", "registry.py")


def _subclasses(cls):
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _subclasses(sub)
    return out


#: Every rule class's name: single-draft rules, their forms, multi-draft verifiers.
RULE_CLASSES = frozenset(c.__name__ for c in _subclasses(Rule) | _subclasses(MultiDraftVerifier))


def overrides(source: str) -> list[str]:
    """``Class.method`` for each method of :data:`DERIVED` a class in ``source`` defines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in DERIVED:
                    out.append(f"{node.name}.{item.name}")
    return out


def _names(node) -> list[str]:
    """The class names an isinstance argument or an ``is`` operand names."""
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _names(elt)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr, *_names(node.value)]
    return []


def type_dispatch(source: str, classes=RULE_CLASSES) -> list[str]:
    """``line: code`` of each isinstance / issubclass test against a rule class, and of each
    identity comparison that reads a rule class's attribute, in ``source`` (a name bound to a
    tuple of rule classes, ``forms = (SpikeRule, ...)``, counts as one)."""
    tree = ast.parse(source)
    classes = set(classes)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            if set(_names(node.value)) & classes:
                classes |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
            hit = node.func.id in ("isinstance", "issubclass") and bool(set(_names(node.args[1])) & classes)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            operands = [node.left, *node.comparators]
            hit = any(isinstance(o, ast.Attribute) and set(_names(o.value)) & classes for o in operands)
        if hit:
            out.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(out)]


def _modules(*parts):
    return sorted((PACKAGE.joinpath(*parts)).rglob("*.py"))


@pytest.mark.parametrize(
    "path", [p for p in _modules("rules") if p.name not in FORM_MODULES], ids=lambda p: p.name
)
def test_no_rule_file_overrides_acceptance_or_recovery(path):
    assert overrides(path.read_text()) == []


def test_every_registered_rule_takes_acceptance_and_recovery_from_a_form():
    forms = inspect.getmodule(Rule).__name__
    for name in RULES.all_names():
        cls = type(RULES[name].make())
        for method in DERIVED:
            owner = next((c for c in cls.__mro__ if method in vars(c)), None)
            assert owner is None or owner.__module__ == forms, (name, method, owner)


@pytest.mark.parametrize("path", _modules("samplers") + _modules("integrations"), ids=lambda p: p.name)
def test_no_type_dispatch_on_rules_in_samplers_or_integrations(path):
    assert type_dispatch(path.read_text()) == []


PLANTED_RULE = """
class Lossy(DecisionRule):
    def accept_at(self, q_n, p_n, s):
        return q_n

    def accept_probs_at(self, target_probs, draft_probs, token_ids, **raw):
        return target_probs

class Other(Rule):
    def recovery_weights_at(self, *args, **kw):
        return None
"""

PLANTED_CONSUMER = """
def paths(rule, plan):
    if isinstance(plan, TargetPlan):  # a plan, not a rule: allowed
        pass
    if isinstance(rule, SpikeRule):
        pass
    if shortcuts and isinstance(rule, (int, Interpolation)):
        pass
    if type(rule).recovery_weights_at is Rule.recovery_weights_at:
        pass
    if issubclass(type(rule), rules.RecursiveRejection):
        pass
    forms = (ElementwiseTargetRule, SpikeRule)
    if isinstance(rule, forms):
        pass
    return rule.realisation.spike is None
"""


def test_the_scanners_report_planted_violations():
    assert overrides(PLANTED_RULE) == ["Lossy.accept_probs_at", "Other.recovery_weights_at"]
    hits = type_dispatch(PLANTED_CONSUMER)
    assert [h.split(":")[0] for h in hits] == ["5", "7", "9", "11", "14"], hits
    assert type_dispatch("def f(plan):\n    return isinstance(plan, TargetPlan)\n") == []
    assert {"SpikeRule", "Interpolation", "RecursiveRejection", "DecisionRule"} <= RULE_CLASSES
