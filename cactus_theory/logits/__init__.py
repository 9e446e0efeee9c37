"""Real next-token distributions: offline models, drafters, the dump tool, its on-disk format and
loader, and real speculative decoding.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). Importing this package does
not import torch or transformers; the model-backed modules (``models``, ``drafters``, ``dump``,
``decode``) do.
"""

from .format import TAIL_ID, DumpFormatError
from .loader import (
    Dump,
    Pairs,
    Trajectory,
    apply_transforms,
    load_dump,
    load_full_vocab,
    load_full_vocab_sample,
    shipped_dumps,
)

__all__ = [
    "Dump",
    "DumpFormatError",
    "Pairs",
    "TAIL_ID",
    "Trajectory",
    "apply_transforms",
    "load_dump",
    "load_full_vocab",
    "load_full_vocab_sample",
    "shipped_dumps",
]
