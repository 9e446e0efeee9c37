r"""Verdicts, with numbers, on the claims of the Cactus paper that a theory toolkit can check.

The lab beside the library (a checkout of the repository, not the installed package): each
``claim_*`` function computes its evidence from seeded inputs and returns a :class:`Verdict`;
:func:`check_claims` runs them all, ``paper_checks/run.py`` writes ``verdicts.md`` and the
report's ``claims`` section prints them. The claims are those listed in the paper notes (Hao &
Mou, ICLR 2026, arXiv 2604.04987); numbering follows that list.
Symbols: q verifier, p drafter, n drafted token, delta budget, h target, h_alg emitted.

Modules: :mod:`~paper_checks.verdicts` (checks, definitions, verdicts, their text),
:mod:`~paper_checks.theorems` (claims 1-6 and 11), :mod:`~paper_checks.theorem3` (claim 7),
:mod:`~paper_checks.examples` (claims 8 and 9), :mod:`~paper_checks.paper_table` (claim 10).
"""

from __future__ import annotations

from .examples import claim_readme_example, claim_tas_cross_entropy, readme_example_readings
from .paper_table import claim_table_consistency, per_prompt_sps_spread, rej_readings
from .theorem3 import claim_theorem3, theorem3_family
from .theorems import (
    claim_acceptance,
    claim_controlled_divergence,
    claim_corollary5,
    claim_corollary6,
    claim_delta_zero,
    claim_theorem1,
    claim_theorem2,
    corpus,
)
from .verdicts import (
    NOT_CHECKED,
    VERDICT_WORDS,
    Check,
    Definition,
    Verdict,
    format_verdicts,
    format_vocabulary,
    grade,
    verdict_word,
)

__all__ = [
    "Check",
    "Definition",
    "Verdict",
    "VERDICT_WORDS",
    "NOT_CHECKED",
    "grade",
    "verdict_word",
    "check_claims",
    "format_verdicts",
    "format_vocabulary",
    "rej_readings",
    "per_prompt_sps_spread",
    "theorem3_family",
    "readme_example_readings",
]


def check_claims(seed: int = 0, with_cvxpy: bool = True) -> list[Verdict]:
    """Run every claim check on seeded synthetic corpora (4 families, untruncated and truncated)."""
    rows = corpus(seed)
    out = [claim_delta_zero(rows), claim_acceptance(rows), claim_theorem1(rows)]
    out.append(
        claim_theorem2(seed)
        if with_cvxpy
        else Verdict(4, "Theorem 2", (), "cvxpy skipped", unstated="not run")
    )
    out += [
        claim_corollary5(),
        claim_corollary6(),
        claim_theorem3(rows),
        claim_tas_cross_entropy(),
        claim_readme_example(),
        claim_table_consistency(),
        claim_controlled_divergence(rows),
    ]
    return out
