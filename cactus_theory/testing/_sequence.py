r"""Whole requests with sampling state against their exact sequence law: :func:`check_sequence_law`.

A speculative engine commits several tokens per step, and the state that processes each row
(penalty counts, the minimum-length counter, stop tokens, the token budget) must advance by
token, not by step. A one-step law, with the rows handed in, cannot see a state that advances
wrongly; the joint law of the first L committed tokens can. Each case is a tiny history-dependent
model (logits from a seeded table of the last two tokens), a drafter close to it and a request's
sampling parameters (:class:`._sequence_state.SequenceParams`); its exact law over the
:math:`(V + 1)^L` sequences (``END`` after the request stopped) is enumerated
(:func:`._sequence_state.state_joint_law`), and the committed sequences of the generator under
test are compared with it by Pearson's chi-square (:func:`._generation.sequence_law`), with the
smallest total variation each case detects.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from ._generation import sequence_law
from ._sequence_state import SequenceParams, state_joint_law
from ._stats import DEFAULT_POWER
from ._torch import torch

#: Requests per case of the default check.
DEFAULT_NUM_REQUESTS = 20_000
#: The level of the whole check (shared equally by its cases).
DEFAULT_ALPHA = 1e-6


@dataclass(frozen=True, eq=False)
class TableModel:
    """Next-token logits from the last two tokens of a history: ``table[h[-2], h[-1]]``.

    Called as ``model(tokens [N, T], lengths [N]) -> [N, V]``, row i's history being
    ``tokens[i, :lengths[i]]`` (at least two tokens).
    """

    table: np.ndarray

    def __call__(self, tokens, lengths):
        tokens, lengths = np.asarray(tokens), np.asarray(lengths)
        r = np.arange(len(tokens))
        return self.table[tokens[r, lengths - 2], tokens[r, lengths - 1]]


def table_models(vocab: int, seed: int, scale: float = 1.5, draft_noise: float = 0.5):
    """A target table model and a drafter close to it (the target's logits plus Gaussian noise)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, scale, (vocab, vocab, vocab))
    return TableModel(table), TableModel(table + rng.normal(0.0, draft_noise, table.shape))


@dataclass(frozen=True, eq=False)
class SequenceCase:
    """One request: models, sampling parameters, prompt, the window ``length`` and drafts per step."""

    name: str
    target: TableModel
    draft: TableModel
    params: SequenceParams
    prompt: tuple
    vocab: int
    length: int
    num_drafts: int
    _law: dict = field(default_factory=dict, repr=False)

    def joint_law(self) -> np.ndarray:
        """The exact law ``(vocab + 1,) * length`` of the committed tokens (``END`` = vocab)."""
        if "joint" not in self._law:

            def row(ids):
                return self.target(np.array([ids]), np.array([len(ids)]))[0]

            self._law["joint"] = state_joint_law(row, self.params, self.prompt, self.vocab, self.length)
        return self._law["joint"]


def default_sequence_cases() -> list[SequenceCase]:
    """The default cases (shared objects, so that each exact law is enumerated once)."""
    return list(_default_cases())


@functools.lru_cache(maxsize=1)
def _default_cases() -> tuple:
    """The default cases: penalties and a logit bias; stop tokens, a minimum length and a budget.

    ``penalties``: 5 tokens, T = 0.9, repetition 1.5, presence 0.5, frequency 1.0, a logit bias,
    2 drafts per step, the first 5 tokens. ``stop-and-budget``: token 0 a stop token, at least 2
    and at most 4 generated tokens, mild penalties, 3 drafts per step, the first 5 tokens (so one
    token past the budget is seen)."""
    t1, d1 = table_models(5, seed=11)
    t2, d2 = table_models(5, seed=12)
    t2.table[..., 0] += 0.8  # the stop token likely enough that its mask and cut show
    d2.table[..., 0] += 0.8
    pen = SequenceParams(
        temperature=0.9,
        repetition_penalty=1.5,
        presence_penalty=0.5,
        frequency_penalty=1.0,
        logit_bias={3: 1.0},
    )
    stop = SequenceParams(
        temperature=1.0, frequency_penalty=0.5, min_tokens=2, stop_token_ids=(0,), max_tokens=4
    )
    return (
        SequenceCase("penalties", t1, d1, pen, (1, 2), 5, 5, 2),
        SequenceCase("stop-and-budget", t2, d2, stop, (3, 4), 5, 5, 3),
    )


def _committed(sequences, case: SequenceCase) -> np.ndarray:
    """Generated tokens as ``[N, length]`` with ``END`` (= vocab) after a request stopped."""
    if torch.is_tensor(sequences):
        sequences = sequences.cpu().numpy()
    if not isinstance(sequences, np.ndarray):  # a list of token-id lists, of any lengths
        rows = [list(r)[: case.length] for r in sequences]
        padded = np.full((len(rows), case.length), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            padded[i, : len(r)] = r
        sequences = padded
    seq = np.asarray(sequences)
    if seq.ndim != 2 or not np.issubdtype(seq.dtype, np.integer):
        raise ValueError(
            f"sequences: expected integer token ids of shape (N, m), got {seq.dtype} {seq.shape}"
        )
    out = np.full((len(seq), case.length), case.vocab, dtype=np.int64)
    m = min(seq.shape[1], case.length)
    out[:, :m] = np.where(seq[:, :m] < 0, case.vocab, seq[:, :m])
    return out


def _readable(detail: str, case: SequenceCase) -> str:
    """The chi-square's detail with each flat cell index written as the token sequence."""
    shape = (case.vocab + 1,) * case.length

    def seq(match):
        toks = np.unravel_index(int(match.group(1)), shape)
        return "sequence (" + ", ".join("END" if t == case.vocab else str(int(t)) for t in toks) + ")"

    return re.sub(r"token (\d+)", seq, detail)


def check_sequence_law(
    generator,
    cases=None,
    *,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
) -> dict:
    r"""Check a speculative generator of whole requests against the exact law of its output.

    Parameters
    ----------
    generator : callable
        ``generator(case, num_requests, rng)``: generate ``num_requests`` independent requests
        of ``case`` (``case.target`` and ``case.draft`` the verifier's and drafter's logits
        ``f(tokens [N, T], lengths [N]) -> [N, V]`` of the history, ``case.params`` the
        sampling parameters, ``case.prompt``, ``case.num_drafts`` drafts per step, from the
        ``numpy.random.Generator`` ``rng``) and return their committed tokens: an array
        ``[num_requests, m]`` (-1 after a request stopped) or a list of token-id lists. Only
        the first ``case.length`` positions are read.
    cases : list, optional
        Default: :func:`default_sequence_cases` (penalties and a logit bias; a stop token, a
        minimum length and a budget).
    num_requests : int
    seed : int
    alpha : float
        The probability that a correct generator fails the whole check (each case tests at
        ``alpha / len(cases)``).
    power : float
        The power at which each case's smallest detectable total variation is stated.

    Returns
    -------
    dict
        ``passed``; ``cases``: per case ``name``, ``passed``, ``p_value``, ``n``, ``cells``,
        ``detectable_tv`` (:math:`t^* = \tfrac12\sqrt{\lambda^*/n}` between the tested cells)
        and ``detail``; ``detectable_tv`` (the largest over the cases).
    """
    cases = default_sequence_cases() if cases is None else list(cases)
    if not cases:
        raise ValueError("cases: expected at least one case")
    if num_requests < 1:
        raise ValueError(f"num_requests: expected >= 1, got {num_requests}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected 0 < alpha < 1, got {alpha}")
    rows = []
    for i, case in enumerate(cases):
        rng = np.random.default_rng([seed, i])
        seqs = _committed(generator(case, num_requests, rng), case)
        if len(seqs) != num_requests:
            raise ValueError(f"generator: returned {len(seqs)} sequences for {num_requests} requests")
        res = sequence_law(seqs, case.joint_law(), alpha=alpha / len(cases), power=power)
        res["detail"] = _readable(res["detail"], case)
        rows.append({"name": case.name, **res})
    return {
        "passed": all(r["passed"] for r in rows),
        "cases": rows,
        "detectable_tv": max(r["detectable_tv"] for r in rows),
    }
