r"""Sampling state of a whole request: history-dependent processing and its exact sequence law.

A request's next-token law after the history ``prompt + out`` (``out`` the tokens generated so
far) is the model's logits row processed with the request's state, in vLLM V1's order
(``vllm/v1/sample/sampler.py``: the logits processors that change the argmax, then the
penalties, then the temperature):

1. logit bias (OpenAI's ``logit_bias``, vLLM's ``LogitBiasLogitsProcessor``): :math:`x_v + b_v`;
2. minimum length (vLLM's ``MinTokensLogitsProcessor``): every stop token set to
   :math:`-\infty` while :math:`|out| <` ``min_tokens``;
3. repetition penalty :math:`r` (HF's ``RepetitionPenaltyLogitsProcessor``, vLLM's
   ``apply_penalties``) on every token seen in the prompt **or** the output: :math:`x_v / r`
   when :math:`x_v > 0`, :math:`x_v r` otherwise;
4. frequency and presence penalties (OpenAI's definition, as vLLM's ``apply_penalties``),
   counted over the **generated** tokens only (the prompt does not count):
   :math:`x_v - f\,c_v - \pi\,[c_v > 0]`, :math:`c_v` the count of v in ``out``;
5. temperature :math:`T`: :math:`\mathrm{softmax}(x / T)`; :math:`T = 0` is greedy (one-hot at
   the first argmax).

Generation stops after a stop token (which is emitted) or after ``max_tokens`` generated tokens.
The first ``length`` committed tokens of a request are a sequence over the vocabulary and a
terminal symbol ``END`` (id ``vocab``) that fills the positions after the request stopped, so
their exact law is the chain

.. math:: P(x_1, \dots, x_L) = \prod_{j=1}^{L} q(x_j \mid \text{prompt}, x_{<j}),

with :math:`q(\cdot \mid h)` the processed row above while the request runs and a point mass at
``END`` once it stopped (:func:`state_joint_law`, enumerated by
:func:`._generation.target_joint_law`).

Symbols: q verifier (the target's processed next-token law), p drafter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._generation import target_joint_law


@dataclass(frozen=True)
class SequenceParams:
    """A request's sampling parameters (vLLM's ``SamplingParams`` names and conventions).

    ``logit_bias`` maps token id to an additive bias; ``stop_token_ids`` are the ids that end
    the request (the EOS included) and that ``min_tokens`` masks; ``max_tokens`` is the budget
    of generated tokens (None: no budget).
    """

    temperature: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict = field(default_factory=dict)
    min_tokens: int = 0
    stop_token_ids: tuple = ()
    max_tokens: int | None = None

    def __post_init__(self):
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature: expected a finite value >= 0, got {self.temperature!r}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty: expected > 0, got {self.repetition_penalty!r}")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.max_tokens < 1):
            raise ValueError(
                f"min_tokens, max_tokens: expected >= 0 and >= 1, got {self.min_tokens}, {self.max_tokens}"
            )

    def without_penalties(self) -> SequenceParams:
        """The same request with the repetition, presence and frequency penalties off."""
        return SequenceParams(
            self.temperature,
            1.0,
            0.0,
            0.0,
            self.logit_bias,
            self.min_tokens,
            self.stop_token_ids,
            self.max_tokens,
        )


def process_logits(logits, prompt_mask, counts, out_len, params: SequenceParams, temperature=None):
    """Rows of next-token probabilities ``[N, V]`` from raw logits under each row's state.

    Parameters
    ----------
    logits : (N, V) array
    prompt_mask : (N, V) bool array
        Tokens present in the prompt (the repetition penalty's prompt part).
    counts : (N, V) array
        Count of each token among the generated tokens of the row's history.
    out_len : (N,) int array
        Generated tokens so far (the minimum length's counter).
    params : SequenceParams
    temperature : float, optional
        Overrides ``params.temperature``.
    """
    x = np.array(logits, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    for tok, b in params.logit_bias.items():
        x[:, tok] += b
    if params.min_tokens > 0 and params.stop_token_ids:
        early = np.asarray(out_len) < params.min_tokens
        x[np.ix_(early, list(params.stop_token_ids))] = -np.inf
    r = params.repetition_penalty
    if r != 1.0:
        seen = np.asarray(prompt_mask) | (counts > 0)
        x = np.where(seen, np.where(x > 0, x / r, x * r), x)
    x = x - params.frequency_penalty * counts - params.presence_penalty * (counts > 0)
    t = params.temperature if temperature is None else temperature
    if t == 0:
        return np.eye(x.shape[-1])[np.argmax(x, axis=-1)]
    z = x / t
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def stopped(out, params: SequenceParams) -> bool:
    """Whether a request whose generated tokens are ``out`` has ended (stop token or budget)."""
    if out and out[-1] in params.stop_token_ids:
        return True
    return params.max_tokens is not None and len(out) >= params.max_tokens


def state_joint_law(logits_row, params: SequenceParams, prompt, vocab: int, length: int) -> np.ndarray:
    """The exact law ``(vocab + 1,) * length`` of the first ``length`` committed tokens.

    Parameters
    ----------
    logits_row : callable
        ``f(ids: list[int]) -> (vocab,)`` the target's raw logits after the history ``ids``.
    params : SequenceParams
    prompt : sequence of int
    vocab, length : int

    Returns
    -------
    numpy.ndarray
        Probabilities indexed by the tokens; index ``vocab`` is ``END`` (the request stopped).
    """
    prompt = [int(t) for t in prompt]
    prompt_mask = np.zeros((1, vocab), bool)
    prompt_mask[0, prompt] = True
    end = np.eye(vocab + 1)[vocab]

    def row(ids):
        out = ids[len(prompt) :]
        if vocab in out or stopped(out, params):
            return end
        counts = np.bincount(np.asarray(out, dtype=np.int64), minlength=vocab)[None]
        logits = np.asarray(logits_row(ids), dtype=np.float64)[None]
        q = process_logits(logits, prompt_mask, counts, np.array([len(out)]), params)[0]
        return np.append(q, 0.0)

    return target_joint_law(row, prompt, vocab + 1, length)
