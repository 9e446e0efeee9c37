r"""The cases of the sampler-law check: the default rows, and the user's rows checked and read.

:func:`default_cases` are four cases of k = 3 drafts whose entries are multiples of
:math:`2^{-20}` (:func:`dyadic`), so a float32 sampler sees exactly the rows the float64 analysis
does, and for a given rule a fifth, ``"deep"``, of k = 8 drafts built for that rule
(:mod:`._deep`); :func:`default_raw_rows` their raw (unprocessed) rows. User rows are read as their float32
values (the sampler's), renormalized in float64.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

import numpy as np

from ._dyadic import dyadic
from ._torch import torch


def _default_rows():
    rng = np.random.default_rng(20260415)
    k, v = 3, 12
    q = rng.dirichlet(np.full(v, 0.8), size=k + 1)
    p = np.exp(np.log(q[:k]) + 0.9 * rng.standard_normal((k, v)))
    generic = (dyadic(q), dyadic(p))
    v = 10
    qe = rng.dirichlet(np.full(v, 1.0), size=k + 1)
    pe = rng.dirichlet(np.full(v, 1.0), size=k)
    qe[0, 2] = qe[0].sum() - qe[0, 2]  # one-hot p at token 2, q_2 = 1/2
    pe[0] = np.eye(v)[2]
    qe[1, [1, 4]] = 1e-6 * qe[1].sum()  # near-zero q where p is large
    pe[1, [1, 4]] = 0.3 * pe[1].sum()
    qe[2, 5:] = 0.0  # disjoint supports: alpha = 0
    pe[2, :5] = 0.0
    edge = (dyadic(qe), dyadic(pe))
    v = 8
    base_q = np.array([0.30, 0.22, 0.16, 0.12, 0.09, 0.06, 0.03, 0.02])
    base_p = np.array([0.55, 0.06, 0.13, 0.10, 0.08, 0.05, 0.02, 0.01])
    perms = [rng.permutation(v) for _ in range(k + 1)]
    overconfident = (
        dyadic(np.stack([base_q[s] for s in perms])),
        dyadic(np.stack([base_p[s] for s in perms[:k]])),
    )
    v = 10
    # raw rows with a tie at the top-3 boundary of q (0.14 = 0.14); the processed rows keep the
    # top 3 of q (the tie broken to the lower index) and the top 4 of p, so the drafter proposes
    # tokens of processed q = 0 about half the time
    raw_q = np.array([0.30, 0.20, 0.14, 0.14, 0.08, 0.06, 0.04, 0.02, 0.01, 0.01])
    raw_p = np.array([0.26, 0.11, 0.05, 0.21, 0.16, 0.09, 0.05, 0.04, 0.02, 0.01])
    perms = [np.sort(rng.permutation(v)[:4]) for _ in range(k + 1)]
    rq, rp = np.zeros((k + 1, v)), np.zeros((k, v))
    for i, s in enumerate(perms):  # the four largest raw-q entries to sorted slots: ties stay in index order
        rest = np.setdiff1d(np.arange(v), s)
        rest = rest[rng.permutation(len(rest))]
        slots = np.concatenate([s, rest])
        rq[i, slots] = raw_q
        if i < k:
            rp[i, slots] = raw_p
    rq, rp = dyadic(rq), dyadic(rp)
    tq = _top_k_rows(rq, 3)
    tq[k] = rq[k]  # the bonus row unprocessed: its law is tested as given
    truncated = (dyadic(tq), dyadic(_top_k_rows(rp, 4)), rq, rp)
    return [(*generic, None, None), (*edge, None, None), (*overconfident, None, None), truncated]


def _top_k_rows(x: np.ndarray, top_k: int) -> np.ndarray:
    """Rows keeping their ``top_k`` largest entries (ties to the lower index), renormalized."""
    order = np.argsort(-x, axis=-1, kind="stable")[..., :top_k]
    out = np.zeros_like(x)
    np.put_along_axis(out, order, np.take_along_axis(x, order, -1), -1)
    return out / out.sum(-1, keepdims=True)


#: The names of :func:`default_cases`, in order (failure reports name the case).
DEFAULT_CASE_NAMES = ("generic", "edge", "overconfident", "truncated")
#: The name of the case added to the default ones for block verification.
BLOCK_CASE_NAME = "low-joint-ratio"


def block_case() -> tuple[np.ndarray, np.ndarray]:
    r"""The case :func:`check_sampler_law` adds to the default ones for ``rule="block"``.

    k = 3, V = 4, dyadic: the drafter proposes token 0 with probability 0.9 where the verifier
    gives it 0.2, so after that draft block verification's cumulative ratio :math:`P_1` is about 2/9;
    at the second position the drafter puts 0.89 on two tokens the verifier gives 0.08. Where
    the block stops after that draft, the block residual :math:`\max(P_1 q_2 - p_2, 0)` and the
    token-wise one :math:`\max(q_2 - p_2, 0)` (normalized) are 0.41 apart in total variation,
    and block verification reaches the third position 2.8 times as often as token-wise
    verification. No tie :math:`q_j = p_j > 0`.
    """
    q = np.array(
        [
            [0.20, 0.02, 0.06, 0.72],
            [0.03, 0.05, 0.47, 0.45],
            [0.22, 0.02, 0.61, 0.15],
            [0.02, 0.61, 0.36, 0.01],
        ]
    )
    p = np.array([[0.90, 0.08, 0.01, 0.01], [0.49, 0.40, 0.10, 0.01], [0.01, 0.01, 0.90, 0.08]])
    return dyadic(q), dyadic(p)


def default_raw_rows() -> list:
    """Per default case, None or its raw (unprocessed) rows ``(raw_target_probs, raw_draft_probs)``.

    Only ``"truncated"`` has raw rows: :func:`check_sampler_law` hands them to a sampler that
    takes the keywords ``raw_target_probs`` and ``raw_draft_probs`` (and computes the law of a
    rule that decides on raw rows from them); a sampler without those keywords sees the
    processed rows only.
    """
    return [None if r[2] is None else (r[2].copy(), r[3].copy()) for r in _default_rows()]


def default_cases(rule=None) -> list[tuple[np.ndarray, np.ndarray]]:
    r"""The cases :func:`check_sampler_law` uses when none are given.

    Four cases of k = 3 drafts (:data:`DEFAULT_CASE_NAMES`), every row dyadic (:func:`dyadic`), the verifier rows
    different at every position (so a sampler that reads a neighbouring position's row is
    seen) and no tie :math:`q_j = p_j > 0`:

    * generic (V = 12): Dirichlet(0.8) verifier rows, drafter a noisy copy
      :math:`p \propto \exp(\log q + 0.9\,\xi)`;
    * edge (V = 10): position 0 a one-hot drafter (:math:`q_n = 1/2` at its token),
      position 1 near-zero verifier mass (:math:`\approx 10^{-6}`) on two tokens that the
      drafter proposes with probability 0.3 each, position 2 disjoint supports
      (acceptance 0);
    * overconfident (V = 8): the drafter puts 0.55 on a token the verifier gives 0.30, and on
      several others a mass between the verifier's and a fraction of it (where a rule that
      reshapes q, as Cactus's rescaling by :math:`(1-\gamma_n)/(1-q_n)`, changes the
      recovery), the tokens permuted differently at each position;
    * truncated (V = 10): processed rows, the top 3 of raw verifier rows that tie at the
      top-3 boundary (the lower index kept) and the top 4 of raw drafter rows, so the drafter
      proposes tokens of processed q = 0 about half the time; the raw rows
      (:func:`default_raw_rows`) reach a sampler that takes them;
    * deep (V = 5, k = 8; only with ``rule``): built for that rule, whose acceptance at
      position i is brought to :math:`(k - i)/(k + 1 - i)` by moving the drafter away from
      the verifier, so every position to the eighth and the bonus position is reached and
      every position rejects about 1/9 of the draws (its recovery law has power whatever the
      rule's knob; where the rule accepts more even from a point-mass drafter, that drafter).

    Parameters
    ----------
    rule : str or Rule, optional
        The rule the deep case is built for (a registry name, a configured rule or
        ``"block"``); None: the four cases of k = 3 only.

    Returns
    -------
    list of (target_probs (k+1, V), draft_probs (k, V))
        Float64 rows (the last verifier row is the bonus row).
    """
    cases = [(r[0].copy(), r[1].copy()) for r in _default_rows()]
    if rule is not None:
        from ._block import resolve_rule
        from ._deep import deep_case

        cases.append(deep_case(resolve_rule(rule)))
    return cases


def _float32_values(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite probabilities")
    return arr.astype(np.float32).astype(np.float64)


def _as_cases(target_probs, draft_probs, rule=None):
    if target_probs is None and draft_probs is None:
        return default_cases(rule)
    if target_probs is None or draft_probs is None:
        raise ValueError(
            "target_probs: give target_probs and draft_probs together (or neither for the default cases)"
        )
    if (
        isinstance(target_probs, (list, tuple))
        and target_probs
        and np.ndim(target_probs[0]) == 2
        and len(target_probs) == len(draft_probs)
    ):
        pairs = list(zip(target_probs, draft_probs))
    else:
        q = np.asarray(target_probs.cpu() if torch.is_tensor(target_probs) else target_probs)
        p = np.asarray(draft_probs.cpu() if torch.is_tensor(draft_probs) else draft_probs)
        if q.ndim == 2:
            q, p = q[None], p[None]
        if q.ndim != 3 or p.ndim != 3 or len(q) != len(p):
            raise ValueError(
                f"target_probs: expected (k+1, V) or (cases, k+1, V) with draft_probs "
                f"(k, V) or (cases, k, V), got {q.shape} and {p.shape}"
            )
        pairs = list(zip(q, p))
    cases = []
    for q, p in pairs:
        q = _float32_values(q.cpu() if torch.is_tensor(q) else q, "target_probs")
        p = _float32_values(p.cpu() if torch.is_tensor(p) else p, "draft_probs")
        if p.ndim != 2 or q.shape != (p.shape[0] + 1, p.shape[1]):
            raise ValueError(
                f"target_probs: each case needs target_probs (k+1, V) and draft_probs "
                f"(k, V), got {q.shape} and {p.shape}"
            )
        if np.any(q < 0) or np.any(p < 0) or np.any(q.sum(-1) <= 0) or np.any(p.sum(-1) <= 0):
            raise ValueError("target_probs: rows must be non-negative with positive sums")
        cases.append((q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)))
    return cases


def _as_raw_cases(raw_target_probs, raw_draft_probs, cases, default_cases_used):
    """Per case None (raw = processed) or the raw rows (q_raw (k+1, V), p_raw (k, V)), float64."""
    if raw_target_probs is None and raw_draft_probs is None:
        return [None] * len(cases)
    if default_cases_used:
        raise ValueError("raw_target_probs: raw rows need explicit target_probs and draft_probs")
    n = len(cases)

    def stacked(x, name, idx):
        if x is None:
            return [c[idx] for c in cases]
        arr = np.asarray(x.cpu() if torch.is_tensor(x) else x, dtype=np.float64)
        arr = arr[None] if arr.ndim == 2 else arr
        if arr.ndim != 3 or len(arr) != n:
            raise ValueError(f"{name}: expected one case or {n} stacked cases, got shape {arr.shape}")
        rows = []
        for a, c in zip(arr, cases):
            if a.shape != c[idx].shape or np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a.sum(-1) <= 0):
                raise ValueError(
                    f"{name}: each case needs shape {c[idx].shape} with non-negative finite rows of positive sum"
                )
            rows.append(a / a.sum(-1, keepdims=True))
        return rows

    qs = stacked(raw_target_probs, "raw_target_probs", 0)
    ps = stacked(raw_draft_probs, "raw_draft_probs", 1)
    return list(zip(qs, ps))


def _resolve_cases(target_probs, draft_probs, raw_target_probs, raw_draft_probs, adapter, case_names, rule):
    """The check's cases, per case its raw rows (None: raw = processed) and the cases' names;
    the default cases end with the deep case built for ``rule`` and, for block verification,
    :func:`block_case`."""
    from ._block import _is_block
    from ._deep import DEEP_CASE_NAME

    block = _is_block(rule)
    cases = _as_cases(target_probs, draft_probs, rule)
    defaults = target_probs is None
    raws = _as_raw_cases(raw_target_probs, raw_draft_probs, cases, defaults)
    extra = [block_case()] if defaults and block else []
    if any(r is not None for r in raws) and not adapter.supports_raw:
        raise ValueError(
            f"raw_target_probs: the {adapter.name} interface passes no raw rows to the sampler "
            "(vLLM's interfaces carry none); give a sampler that takes the keywords "
            "raw_target_probs and raw_draft_probs, or leave the raw rows out (raw = processed)"
        )
    if defaults and raw_target_probs is None and raw_draft_probs is None and adapter.supports_raw:
        raws = [
            None if r is None else tuple(_float32_values(x, "raw_target_probs") for x in r)
            for r in default_raw_rows()
        ] + [None]
    cases, raws = cases + extra, raws + [None] * len(extra)
    if case_names is None:
        names = (
            [*DEFAULT_CASE_NAMES, DEEP_CASE_NAME] if defaults else [f"case {c}" for c in range(len(cases))]
        )
        names += [BLOCK_CASE_NAME] * len(extra)
    else:
        names = [str(x) for x in case_names]
        if len(names) != len(cases):
            raise ValueError(f"case_names: expected {len(cases)} names, got {len(names)}")
    return cases, raws, names
