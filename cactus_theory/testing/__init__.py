r"""Test any rejection sampler against the exact theory: ``cactus_theory.testing``.

* :func:`assert_sampler_law` / :func:`check_sampler_law`: draw a sampler many times and
  compare the law of what it emits, per position, with the rule's exact emitted
  distribution :math:`h_{alg}` (paper, Theorem 3) and its acceptance :math:`\alpha`, at a
  stated false-failure probability, plus exact invariants (layout, bonus token, greedy rows,
  seeded rows, vLLM's counters);
* adapters for vLLM 0.7's sampler interface, vLLM V1's ``rejection_sample``, the newer
  runner's padded layout, a plain callable and a sampler that draws its own drafts
  (:func:`v0_adapter`, :func:`v1_adapter`, :func:`padded_adapter`, :func:`callable_adapter`,
  :func:`drafting_adapter`);
* batch contracts (small batches of mixed requests: each request's law by slot, seeded
  requests reproduced in every batch, greedy rows and placeholder drafts) and a deep case of
  k = 8 drafts built for the rule under test, whose every position rejects often;
* :func:`reference_sampler` with planted defects, a casebook (:data:`CASEBOOK`) of bug classes
  that real samplers have had, each with one public report, to see a test catch them;
* block verification (Sun et al.) as ``rule="block"``: its exact law by enumeration of the
  draft sequences (:func:`exact_law`), its reference sampler and its defects;
* the power of each check: the smallest total variation it detects; a pass that cannot detect
  a deviation of ``tv_goal`` is reported "underpowered";
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
    "check_sampler_law": "_check",
    "assert_sampler_law": "_check",
    "SamplerLawResult": "_results",
    "exact_law": "_exact",
    "default_cases": "_cases",
    "default_raw_rows": "_cases",
    "dyadic": "_cases",
    "v0_adapter": "_adapters",
    "v1_adapter": "_adapters",
    "callable_adapter": "_adapters",
    "padded_adapter": "_adapters",
    "drafting_adapter": "_adapters",
    "reference_sampler": "_casebook",
    "CASEBOOK": "_casebook",
    "DEFECTS": "_casebook",
    "check_sequence_law": "_sequence",
}

__all__ = [
    "check_sampler_law",
    "assert_sampler_law",
    "SamplerLawResult",
    "exact_law",
    "default_cases",
    "default_raw_rows",
    "dyadic",
    "v0_adapter",
    "v1_adapter",
    "callable_adapter",
    "padded_adapter",
    "drafting_adapter",
    "reference_sampler",
    "CASEBOOK",
    "DEFECTS",
    "check_sequence_law",
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
