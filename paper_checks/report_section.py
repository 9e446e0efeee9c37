"""The report's ``claims`` section: a verdict with numbers on each checkable claim of the paper.

Declared in ``pyproject.toml`` under the entry-point group ``cactus_theory.report_sections``, so
``cactus-theory report`` runs it from a checkout of the repository (an editable install puts the
checkout on the path); the installed package never imports this folder. Symbols: q verifier, p drafter, n drafted token, delta budget (Hao &
Mou, ICLR 2026).
"""

from __future__ import annotations

from cactus_theory.report import Column, Section, Table

from . import check_claims

__all__ = ["section_claims"]

_COLUMNS = (
    Column("number", "#", "d"),
    Column("claim", "claim", "s"),
    Column("verdict", "verdict", "s"),
    Column("evidence", "evidence", "s"),
)


def section_claims(seed: int = 0) -> Section:
    """Verdicts with numbers on the paper's checkable claims (a checkout's paper_checks/)."""
    rows = tuple(
        dict(number=v.number, claim=v.claim, verdict=v.verdict, evidence=v.evidence)
        for v in check_claims(seed=seed)
    )
    return Section(
        "claims", "The paper's claims, checked", (Table("claims/verdicts", "", _COLUMNS, rows, "records"),)
    )
