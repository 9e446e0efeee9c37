"""One entry of the sampler-law casebook: a defect class and its public report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defect:
    """One entry of the casebook.

    Attributes
    ----------
    name : str
        The ``defect`` argument of :func:`reference_sampler`.
    bug_class : str
        What is wrong, in the sampler's terms.
    source : str
        One public report of a real sampler with this class of bug (repository and number).
    rule : str
        The rule the mutant claims (``"sps"``, ``"cactus-taylor"`` for Cactus's own, ``"block"``
        for block verification's).
    bonus : str
        The mutant's bonus contract (``"given"`` or ``"drawn"``).
    shown_by : str
        What in the default cases makes it visible.
    drafting : bool
        The mutant draws its own drafts (checked through
        :func:`~cactus_theory.testing.drafting_adapter`).
    """

    name: str
    bug_class: str
    source: str
    rule: str
    bonus: str
    shown_by: str
    drafting: bool = False
