"""What :mod:`cactus_theory.analysis` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.
"""

# ruff: noqa: F401
# (every import here is a re-export)

from ._corpus import calibrate_over, frontier_over, rule_table_over
from ._lengths import geometric_length_ratio
from ._runners import ArrayRows, Execution, RowChunk, RowSource, runner_for

__all__ = []
