"""What :mod:`cactus_theory.figures` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.

The names of :data:`_ON_FIRST_USE` are imported from their modules when first used: importing
this module imports no module that importing the package does not (the plan's figure is drawn only when asked for).
"""

# ruff: noqa: F401
# (every import here is a re-export)

from .._extras import on_first_use
from ._style import save_figure

#: name -> "module:attribute" of this package, imported on first use
_ON_FIRST_USE = {
    "figure_plan": "_plan:figure_plan",
}

__all__ = []

__getattr__ = on_first_use(__name__, _ON_FIRST_USE)
