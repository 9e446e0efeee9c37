"""Multi-draft and tree verifiers: the family's declaration form, its registry and its members.

Importing it registers ``rrs``, ``rrs-without-replacement``, ``spectr``, ``optimal``,
``block`` and ``traversal`` in :data:`VERIFIERS` (:mod:`.base`), and the lossy
``optimal-budget``, ``optimal-multiplier`` and ``cactus-rrs`` (:mod:`._budgeted`) and SGLang's
``sglang-tree`` (:mod:`._sglang_tree`). Every registered verifier goes
through the family's invariant battery (``tests/rules/test_multidraft_rules.py``).
"""

from . import _block, _budgeted, _optimal, _rrs, _sglang_tree, _spectr, _traversal  # noqa: F401  (registration side effect)
from .base import (
    VERIFIERS,
    MultiDraftVerifier,
    NodeLaw,
    NodeVerifier,
    PathLaw,
    VerifierSpec,
    get_verifier,
    register_verifier,
)

__all__ = [
    "VERIFIERS",
    "MultiDraftVerifier",
    "NodeVerifier",
    "NodeLaw",
    "PathLaw",
    "VerifierSpec",
    "get_verifier",
    "register_verifier",
]
