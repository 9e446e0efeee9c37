"""What :mod:`cactus_theory.logits` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.

The model-backed names (:data:`_MODEL_BACKED`) are imported from their modules on first
use (:pep:`562`): those modules import torch (the ``[real]`` extra), which importing this
module must not.
"""

# ruff: noqa: F401
# (every import here is a re-export)

import importlib

from ._commands import add_dump_arguments, run_dump
from ._format import (
    FORMAT,
    FULL_REQUIRED,
    FULL_VOCAB_FORMAT,
    TAIL_ID,
    checksum,
    compact_columns,
    pack_compact,
    read_arrays,
)
from ._loader import REAL_DIR, _renorm

#: name -> the private module that defines it, imported on first use (it needs torch)
_MODEL_BACKED = {
    "BatchRunner": "_runner",
    "SamplingParams": "_runner",
    "check_args": "_dump_cli",
    "make_drafter": "_drafters",
    "print_paths": "_dump_cli",
    "processed_sparse": "_runner",
    "prompts_for": "_dump_cli",
    "torch": "_torch",
}

__all__ = []


def __getattr__(name):
    if name in _MODEL_BACKED:
        return getattr(importlib.import_module(f".{_MODEL_BACKED[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
