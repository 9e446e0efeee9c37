"""What :mod:`cactus_theory.rules` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.
"""

# ruff: noqa: F401
# (every import here is a re-export)

from ._cactus import SMOOTH_DIVERGENCES, CactusExact
from ._cascades import Cascade
from ._fuzzy import FuzzySpeculative, _divergence_name
from ._tas import VLLM_ENTROPY_EPS, TypicalAcceptance
from ._topk import TopKAcceptance

__all__ = []
