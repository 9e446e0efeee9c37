r"""Test any rejection sampler against the exact theory: ``cactus_theory.testing``.

* :func:`assert_sampler_law` / :func:`check_sampler_law`: draw a sampler many times and
  compare the law of what it emits, per position, with the rule's exact emitted
  distribution :math:`h_{alg}` (paper, Theorem 3) and its acceptance :math:`\alpha`, at a
  stated false-failure probability, plus exact invariants (layout, bonus token, greedy rows,
  seeded rows, vLLM's counters);
* adapters for vLLM 0.7's sampler interface, vLLM V1's ``rejection_sample`` and a plain
  callable (:mod:`.adapters`);
* :func:`reference_sampler` with planted defects, a casebook (:data:`CASEBOOK`) of bug classes
  that real samplers have had, each with one public report (:mod:`.mutants`), to see a test
  catch them;
* the power of each check: the smallest total variation it detects (:mod:`.power`); a pass
  that cannot detect a deviation of ``tv_goal`` is reported "underpowered";
* Hypothesis strategies for (q, p) rows and draft batches (:mod:`.strategies`; needs
  ``hypothesis``);
* a pytest plugin (:mod:`.pytest_plugin`, entry point ``cactus_theory``): the fixtures
  ``sampler_law`` and ``exact_law`` and the marker ``sampler_law``.

Needs torch and hypothesis (``pip install 'cactus-theory[test]'``): the names are imported on
first use, and without torch that use raises one line naming the extra.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
Reference: Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987.
"""

from __future__ import annotations

import importlib

#: Where each public name lives; imported on first use, so that importing this package (as the
#: pytest plugin does in every pytest run of the environment) needs neither torch nor hypothesis.
_LAZY = {
    "SamplerAdapter": "adapters",
    "as_adapter": "adapters",
    "callable_adapter": "adapters",
    "v0_adapter": "adapters",
    "v1_adapter": "adapters",
    "padded_adapter": "adapters",
    "DEFAULT_ALPHA": "law",
    "DEFAULT_NUM_SAMPLES": "law",
    "ExactLaw": "law",
    "LawCheck": "law",
    "SamplerLawResult": "law",
    "assert_sampler_law": "law",
    "check_sampler_law": "law",
    "default_cases": "law",
    "default_raw_rows": "law",
    "DEFAULT_CASE_NAMES": "law",
    "DEFAULT_POWER": "power",
    "DEFAULT_DETECTABLE_TV": "power",
    "detectable_tv": "power",
    "draws_needed": "power",
    "CASEBOOK": "mutants",
    "dyadic": "law",
    "exact_law": "law",
    "DEFECTS": "mutants",
    "reference_sampler": "mutants",
}

__all__ = [
    "CASEBOOK",
    "DEFAULT_CASE_NAMES",
    "DEFAULT_DETECTABLE_TV",
    "DEFAULT_POWER",
    "default_raw_rows",
    "detectable_tv",
    "draws_needed",
    "DEFAULT_ALPHA",
    "DEFAULT_NUM_SAMPLES",
    "DEFECTS",
    "ExactLaw",
    "LawCheck",
    "SamplerAdapter",
    "SamplerLawResult",
    "as_adapter",
    "assert_sampler_law",
    "callable_adapter",
    "check_sampler_law",
    "default_cases",
    "dyadic",
    "exact_law",
    "reference_sampler",
    "v0_adapter",
    "v1_adapter",
    "padded_adapter",
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
