"""A sampler is assembled once: its accept path, recovery path and capability probes are chosen
when it is made (:func:`cactus_theory.samplers.make_sampler`), not at every call.

The check: after construction, a call reads no attribute of the configured rule from the
samplers' code (its declaration, its spec, its capabilities: they were bound into the
sampler's program), and no attribute of its :class:`RuleSpec` or of its registered kernels
at all. The rule's own maths (its plan, its spike, a kernel's formula) still reads its knobs:
those reads come from the rule's and the kernels' modules and are not counted.
"""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch

from cactus_theory.rules import RULES, get_rule
from cactus_theory.rules.registry import RuleSpec
from cactus_theory.samplers import make_sampler, ragged_forward
from cactus_theory.samplers._kernels import RuleKernels

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Modules whose reads of the rule count: the samplers' own code (the kernels' formulas read
#: the knobs they compute with, as the rule's plan does).
_SAMPLER = "cactus_theory.samplers"
_KERNELS = "cactus_theory.samplers._kernels"


@contextlib.contextmanager
def _recorded_reads(rule):
    """Every attribute read of ``rule`` by the samplers' code, and every read of a RuleSpec or
    RuleKernels attribute (by anyone), while the block runs: a list of (owner, name, module)."""
    reads = []
    patched = []

    def recorder(cls, owner, samplers_only):
        original = cls.__getattribute__

        def getattribute(self, name):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not name.startswith("__") and (
                not samplers_only or (caller.startswith(_SAMPLER) and not caller.startswith(_KERNELS))
            ):
                if not samplers_only or self is rule:
                    reads.append((owner, name, caller))
            return original(self, name)

        patched.append((cls, "__getattribute__" in cls.__dict__, cls.__dict__.get("__getattribute__")))
        cls.__getattribute__ = getattribute

    recorder(type(rule), "rule", True)
    recorder(RuleSpec, "spec", False)
    recorder(RuleKernels, "kernels", False)
    try:
        yield reads
    finally:
        for cls, had, old in reversed(patched):
            if had:
                cls.__getattribute__ = old
            else:
                del cls.__getattribute__


def _batch(B, k, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(2.0 * torch.randn(B, k + 1, V, generator=g), -1)
    p = torch.softmax(2.0 * torch.randn(B, k, V, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    bonus = torch.randint(0, V, (B, 1), generator=g)
    return q, bonus, p, ids


@pytest.mark.parametrize("name", list(RULES))
def test_a_call_reads_no_declaration(name):
    """Eager V0 and V1 calls of every registered rule's sampler (its defaults): zero reads of
    the rule's declaration or kernels after construction."""
    rule = get_rule(name)
    sampler = make_sampler(rule)
    q, bonus, p, ids = _batch(4, 3, 12, seed=1)
    sampler(q, bonus, p, ids)  # the counters exist after a first call, as in vLLM
    with _recorded_reads(rule) as reads:
        sampler(q, bonus, p, ids)
        ragged_forward(
            sampler, ids.reshape(-1), [3, 3, 3, 3], p.reshape(-1, 12), q[:, :3].reshape(-1, 12), bonus
        )
    assert reads == [], f"{name}: {len(reads)} reads during a call, e.g. {sorted(set(reads))[:8]}"


def test_the_recorder_sees_a_read():
    """The check can fail: a read of the rule's spec from the samplers' code is recorded."""
    rule = get_rule("sps")
    with _recorded_reads(rule) as reads:
        exec("rule.spec.deterministic", {"__name__": _SAMPLER + ".base", "rule": rule})
    assert ("rule", "spec", _SAMPLER + ".base") in reads and (
        "spec",
        "deterministic",
        _SAMPLER + ".base",
    ) in reads
