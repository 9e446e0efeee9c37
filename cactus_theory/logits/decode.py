"""Real speculative decoding on CPU (or CUDA) with a rule of the toolkit deciding, and its
benchmark against verifier-only decoding (see :mod:`cactus_theory.logits._decode` for the round
and the metrics).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), m draft length.
``python -m cactus_theory.logits.decode`` runs the ``decode`` subcommand.
"""

from ._decode import DecodeResult, speculative_decode, verifier_decode

__all__ = [
    "DecodeResult",
    "speculative_decode",
    "verifier_decode",
]


if __name__ == "__main__":  # python -m cactus_theory.logits.decode [args]: the ``decode`` subcommand
    from ._decode_cli import decode_main

    raise SystemExit(decode_main())
