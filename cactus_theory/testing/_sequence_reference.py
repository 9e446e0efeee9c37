r"""A reference speculative generator of whole requests with sampling state, and its defects.

Each step of a running request drafts ``k`` tokens from the drafter's processed rows
:math:`p_j`, verifies them against the target's processed rows :math:`q_j` with SpS
(Leviathan et al. 2023; Chen et al. 2023): the j-th draft :math:`n_j` is accepted when
:math:`u_j < \min(1, q_j(n_j) / p_j(n_j))`; at the first rejection the next token is drawn from
:math:`\max(q_j - p_j, 0)` normalised, after k acceptances from :math:`q_k` (the bonus token).
Both rows at step position j are processed (:func:`._sequence_state.process_logits`) with the
state of the history *including the drafts before j*: the counts of the generated tokens plus
the drafts ``n_0 .. n_{j-1}``, and the generated length plus j for the minimum length (vLLM V1
combines the output tokens with the step's draft tokens, ``Sampler._combine_outputs_with_spec_
tokens``). The committed tokens are then cut after the first stop token and at the budget
``max_tokens``, and only they enter the state. So every committed prefix follows the target's
processed chain: the generator is lossless for the law of :mod:`._sequence_state`.

A defect plants one bug of a class that engines have had (:data:`SEQUENCE_DEFECTS`, each with
a public report).
"""

from __future__ import annotations

import numpy as np

from ._sequence_state import process_logits

#: Defect name -> (what is wrong, one public report of the class).
SEQUENCE_DEFECTS = {
    "penalties-ignored": (
        "repetition, presence and frequency penalties not applied to the verifier's rows on the speculative path",
        "NVIDIA/TensorRT-LLM #17701 (also vllm-project/vllm #18902)",
    ),
    "penalty-last-token-per-step": (
        "the penalty state fed only the last committed token of each step (the other accepted tokens never counted)",
        "sgl-project/sglang #33643",
    ),
    "penalty-frozen-in-step": (
        "every position of a step verified with the penalty state of the step's start (the drafts before it not counted)",
        "sgl-project/sglang #28242 / #22049 (the 'relaxed' penalties of the verify step)",
    ),
    "penalty-counts-rejected": (
        "every proposed draft recorded in the penalty state, rejected ones included",
        "osaurus-ai/vmlx-swift #357 (fixed by #361)",
    ),
    "temperature-placeholder-greedy": (
        "the verifier's temperature left at a placeholder 0 on the speculative path: sampled rows verified greedily",
        "sgl-project/sglang #31214 / #32922",
    ),
    "min-tokens-counts-steps": (
        "the minimum length counted in steps instead of tokens: stop tokens masked for too long",
        "sgl-project/sglang #33643",
    ),
    "stop-not-truncated": (
        "a stop token accepted inside a step does not end the request: the tokens after it are committed",
        "huggingface/transformers #47912 (also LostRuins/koboldcpp #1276)",
    ),
    "budget-overrun": (
        "every accepted token of the last step committed: more than max_tokens generated",
        "huggingface/transformers #28508 (candidates beyond max_length)",
    ),
}


def _draw(rows, rng):
    """One token per row by inverse CDF (a zero-probability token is never drawn)."""
    cdf = np.cumsum(rows, axis=-1)
    cdf /= cdf[:, -1:]
    return (cdf < rng.random((len(rows), 1))).sum(axis=-1)


def _bump(counts, tokens, where=True):
    """Count one token per row (rows where ``where`` holds); each row's index is distinct."""
    counts[np.arange(len(counts)), tokens] += np.asarray(where, dtype=counts.dtype)


def _rows(
    model,
    hist,
    lengths,
    state,
    drafts,
    params,
    extra: int,
    *,
    frozen=False,
    by_steps=False,
    temperature=None,
    only_last=False,
):
    """Processed rows ``[m, k + extra, V]`` of one step: position j under the state of the
    history plus the drafts before j.

    ``state`` is (prompt_mask, counts, length counter); ``extra`` rows past the drafts (1 for the
    verifier's bonus row). ``frozen`` keeps the step's starting counts at every position,
    ``by_steps`` its starting length counter (defects); ``only_last`` returns the last row only."""
    prompt_mask, counts, counter = state
    c = counts.copy()
    rows = []
    last = drafts.shape[1] + extra - 1
    for j in range(last + 1):
        at = counter if by_steps else counter + j
        if not only_last or j == last:
            rows.append(
                process_logits(
                    model(hist, lengths + j), prompt_mask, counts if frozen else c, at, params, temperature
                )
            )
        if j < drafts.shape[1]:
            _bump(c, drafts[:, j])
    return np.stack(rows, axis=1)


class ReferenceGenerator:
    """Speculative generation of whole requests (SpS), correct or with one planted ``defect``.

    Call it as the check calls a generator: ``gen(case, num_requests, rng)`` returns the
    committed tokens ``[num_requests, case.length]``, -1 after a request stopped.
    """

    def __init__(self, defect: str | None = None):
        if defect is not None and defect not in SEQUENCE_DEFECTS:
            raise ValueError(f"defect: expected one of {sorted(SEQUENCE_DEFECTS)}, got {defect!r}")
        self.defect = defect

    def __repr__(self):
        return f"ReferenceGenerator({self.defect!r})" if self.defect else "ReferenceGenerator()"

    def __call__(self, case, num_requests: int, rng) -> np.ndarray:
        n, v, big = num_requests, case.vocab, len(case.prompt)
        hist = np.zeros((n, big + case.length + case.num_drafts + 2), dtype=np.int64)
        hist[:, :big] = case.prompt
        prompt_mask = np.zeros((n, v), bool)
        prompt_mask[:, list(case.prompt)] = True
        counts = np.zeros((n, v))
        out_len = np.zeros(n, dtype=np.int64)
        done = np.zeros(n, bool)
        steps = 0
        while True:
            live = np.flatnonzero(~done & (out_len < case.length))
            if live.size == 0:
                break
            counter = np.full(live.size, steps) if self.defect == "min-tokens-counts-steps" else out_len[live]
            state = (prompt_mask[live], counts[live], counter)
            drafts, new, a, keep, ended = self._step(case, hist, live, state, out_len[live], rng)
            counts[live] = self._record(counts[live], drafts, new, a, keep)
            pos = big + out_len[live][:, None] + np.arange(new.shape[1])[None, :]
            kept = np.arange(new.shape[1])[None, :] < keep[:, None]
            hist[np.broadcast_to(live[:, None], pos.shape)[kept], pos[kept]] = new[kept]
            out_len[live] += keep
            done[live] = ended
            steps += 1
        out = np.full((n, case.length), -1, dtype=np.int64)
        filled = np.arange(case.length)[None, :] < out_len[:, None]
        out[filled] = hist[:, big : big + case.length][filled]
        return out

    def _step(self, case, hist, live, state, out_len, rng):
        """Draft, verify (SpS) and cut one step of the live requests."""
        k, params, m, d = case.num_drafts, case.params, len(live), self.defect
        base = len(case.prompt) + out_len
        r, idx = np.arange(m), np.arange(k)
        by_steps = d == "min-tokens-counts-steps"
        drafts = np.zeros((m, k), dtype=np.int64)
        p = np.zeros((m, k, case.vocab))
        for j in range(k):  # the drafter's row j is processed with the drafts before j
            p[:, j] = _rows(
                case.draft,
                hist[live],
                base,
                state,
                drafts[:, :j],
                params,
                1,
                by_steps=by_steps,
                only_last=True,
            )[:, 0]
            drafts[:, j] = _draw(p[:, j], rng)
            hist[live, base + j] = drafts[:, j]
        q = _rows(
            case.target,
            hist[live],
            base,
            state,
            drafts,
            params.without_penalties() if d == "penalties-ignored" else params,
            1,
            frozen=d == "penalty-frozen-in-step",
            by_steps=by_steps,
            temperature=0.0 if d == "temperature-placeholder-greedy" else None,
        )
        ratio = q[r[:, None], idx, drafts] / p[r[:, None], idx, drafts]
        acc = rng.random((m, k)) < ratio
        a = np.where(acc.all(axis=1), k, acc.argmin(axis=1))
        row = q[r, a]
        res = np.maximum(row - p[r, np.minimum(a, k - 1)], 0.0)
        res = np.where((a < k)[:, None] & (res.sum(axis=1, keepdims=True) > 0), res, row)
        new = np.concatenate([drafts, np.zeros((m, 1), dtype=np.int64)], axis=1)
        new[r, a] = _draw(res, rng)
        keep, ended = self._cut(new, a, out_len, params)
        return drafts, new, a, keep, ended

    def _cut(self, new, a, out_len, params):
        """Tokens kept of a step (cut after a stop token and at the budget) and the stop flags."""
        m, width = new.shape
        is_stop = np.isin(new, list(params.stop_token_ids)) & (np.arange(width)[None, :] <= a[:, None])
        first = np.where(is_stop.any(axis=1), is_stop.argmax(axis=1), width)
        keep = a + 1
        if self.defect == "stop-not-truncated":  # only the step's last token is looked at
            ended = np.isin(new[np.arange(m), a], list(params.stop_token_ids))
        else:
            keep = np.minimum(keep, first + 1)
            ended = first < keep
        if params.max_tokens is not None:
            if self.defect != "budget-overrun":
                keep = np.minimum(keep, params.max_tokens - out_len)
            ended = ended | (out_len + keep >= params.max_tokens)
        return keep, ended

    def _record(self, counts, drafts, new, a, keep):
        """The penalty state after a step: the counts plus the kept tokens (or a defect's)."""
        c = counts.copy()
        r = np.arange(len(c))
        if self.defect == "penalty-last-token-per-step":
            _bump(c, new[r, keep - 1])
        elif self.defect == "penalty-counts-rejected":  # every proposal, then the emitted token
            for j in range(drafts.shape[1]):
                _bump(c, drafts[:, j])
            _bump(c, new[r, a])
        else:
            for j in range(new.shape[1]):
                _bump(c, new[:, j], j < keep)
        return c
