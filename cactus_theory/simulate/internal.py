"""What :mod:`cactus_theory.simulate` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.
"""

# ruff: noqa: F401
# (every import here is a re-export)

from ._audit_corpus import corpus_from_arrays, corpus_from_dump
from ._audit_format import audit_table
from ._audit_rows import CorpusRows
from ._chain import PositionLaws
from ._cli import add_arguments as add_simulate_arguments
from ._cli import run as run_simulate
from ._metrics import pool_totals

__all__ = []
