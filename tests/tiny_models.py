"""Tiny random Llama models and a character tokenizer for the model-backed tests (no model hub).

Each test states its shape (vocabulary, layers, positions, initial weight scale) and seed; the
rest of the configuration is shared, so two tests with the same arguments build the same model.
"""

import torch


def tiny_llama(
    vocab: int, *, seed: int, layers: int = 1, max_positions: int = 64, init: float = 0.1, **config
):
    """A random ``LlamaForCausalLM`` (hidden size 16, untied embeddings) seeded by ``seed``, in eval
    mode; ``config`` overrides any other ``LlamaConfig`` field (e.g. a larger head for vLLM)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    fields = dict(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=max_positions,
        initializer_range=init,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(LlamaConfig(**{**fields, **config})).eval()


class CharTokenizer:
    """Characters -> ids 1 + ord(c) mod (vocab - 1); no chat template; no EOS (rows run to the end)."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = None

    def __init__(self, vocab: int):
        self.vocab = vocab

    def __call__(self, text, add_special_tokens=True):
        class Encoded:
            pass

        out = Encoded()
        out.input_ids = [1 + (ord(c) % (self.vocab - 1)) for c in text]
        return out
