"""What :mod:`cactus_theory.integrations.vllm` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.

The names of :data:`_ON_FIRST_USE` are imported from their modules when first used: importing
this module imports no module that importing the package does not (the counters' reader imports scipy.stats; the dump command's helpers, the models' loader).
"""

# ruff: noqa: F401
# (every import here is a re-export)

from ..._extras import on_first_use
from ._config import CONFIG_KEY

#: name -> "module:attribute" of this package, imported on first use
_ON_FIRST_USE = {
    "recorded_rounds": "_counters:recorded_rounds",
    "add_dump_arguments": "_dump:add_dump_arguments",
    "run_dump": "_dump:run_dump",
}

__all__ = []

__getattr__ = on_first_use(__name__, _ON_FIRST_USE)
