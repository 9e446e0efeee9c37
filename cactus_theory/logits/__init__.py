"""Real next-token distributions: offline models, drafters, the dump tool, its on-disk format and
loader, and real speculative decoding.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). Importing this package does
not import torch or transformers; the model-backed public modules (:mod:`.dump`, :mod:`.decode`,
:mod:`.tree_dump`) do.
"""

from ._format import DumpFormatError, eos_token_id
from ._loader import (
    Dump,
    load_dump,
    load_full_vocab,
    load_full_vocab_sample,
    shipped_dumps,
)
from ._models import ModelNotAvailable, load_smollm2
from ._prompts import Prompt, load_prompts

__all__ = [
    "Dump",
    "DumpFormatError",
    "ModelNotAvailable",
    "Prompt",
    "eos_token_id",
    "load_dump",
    "load_full_vocab",
    "load_full_vocab_sample",
    "load_prompts",
    "load_smollm2",
    "shipped_dumps",
]
