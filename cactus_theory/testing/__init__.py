r"""Test any rejection sampler against the exact theory: ``cactus_theory.testing``.

* :func:`assert_sampler_law` / :func:`check_sampler_law`: draw a sampler many times and
  compare the law of what it emits, per position, with the rule's exact emitted
  distribution :math:`h_{alg}` (paper, Theorem 3) and its acceptance :math:`\alpha`, at a
  stated false-failure probability, plus exact invariants (layout, bonus token, greedy rows,
  seeded rows, vLLM's counters);
* adapters for vLLM 0.7's sampler interface, vLLM V1's ``rejection_sample`` and a plain
  callable (:mod:`.adapters`);
* :func:`reference_sampler` with planted defects (:mod:`.mutants`), to see a test catch them;
* Hypothesis strategies for (q, p) rows and draft batches (:mod:`.strategies`; needs
  ``hypothesis``);
* a pytest plugin (:mod:`.pytest_plugin`, entry point ``cactus_theory``): the fixtures
  ``sampler_law`` and ``exact_law`` and the marker ``sampler_law``.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
Reference: Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987.
"""

from .adapters import (
    SamplerAdapter,
    as_adapter,
    callable_adapter,
    v0_adapter,
    v1_adapter,
)
from .law import (
    DEFAULT_ALPHA,
    DEFAULT_NUM_SAMPLES,
    ExactLaw,
    LawCheck,
    SamplerLawResult,
    assert_sampler_law,
    check_sampler_law,
    default_cases,
    dyadic,
    exact_law,
)
from .mutants import DEFECTS, reference_sampler

__all__ = [
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
]
