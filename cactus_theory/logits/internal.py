"""What :mod:`cactus_theory.logits` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.

The names of :data:`_ON_FIRST_USE` are imported from their modules when first used: importing
this module imports no module that importing the package does not (the model-backed modules import torch, the ``[real]`` extra; the commands, the model checks).
"""

# ruff: noqa: F401
# (every import here is a re-export)

from .._extras import on_first_use
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

#: name -> "module:attribute" of this package, imported on first use
_ON_FIRST_USE = {
    "add_decode_arguments": "_commands:add_decode_arguments",
    "add_dump_arguments": "_commands:add_dump_arguments",
    "add_models_arguments": "_commands:add_models_arguments",
    "run_decode": "_commands:run_decode",
    "run_dump": "_commands:run_dump",
    "run_models": "_commands:run_models",
    "BatchRunner": "_runner:BatchRunner",
    "SamplingParams": "_runner:SamplingParams",
    "processed_sparse": "_runner:processed_sparse",
    "check_args": "_dump_cli:check_args",
    "print_paths": "_dump_cli:print_paths",
    "prompts_for": "_dump_cli:prompts_for",
    "make_drafter": "_drafters:make_drafter",
    "torch": "_torch:torch",
}

__all__ = []

__getattr__ = on_first_use(__name__, _ON_FIRST_USE)
