r"""Exact one-step analysis of any rule: acceptance, emitted distribution, divergences.

For a rule with acceptance :math:`a_n` and recovery :math:`r^{(n)}` (see
:mod:`cactus_theory.rules.plans`), one verification step with drafted :math:`n \sim p` emits

.. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n)\, r^{(n)}_j \qquad\text{(Theorem 3)}

and accepts the draft with probability :math:`\alpha = \sum_n p_n a_n`. Symbols: q verifier
(``target_probs``), p drafter (``draft_probs``), n drafted token, :math:`h_{alg}` the emitted
distribution. Everything here is numpy float64, or torch float64 on the inputs' device when
``target_probs`` and ``draft_probs`` are torch tensors (CPU or CUDA; bf16/fp16/fp32 inputs
are promoted to float64 and validated like numpy input): plans, emitted distribution and
divergences then run batched on torch end to end. Batch axes lead, the vocabulary is last.

The mixture itself is computed exactly without a V x V intermediate
(:mod:`cactus_theory.analysis._emitted`; ``method="dense"`` enumerates every draft's
recovery, the test oracle). Rows beyond one chunk, row sources (files, folders of shards) and
Dask arrays are analysed chunk by chunk (``chunk_rows``, ``max_memory``) or as Dask tasks
(``runner``), the numbers those of one call over all rows bit for bit.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1 and 3.
"""

from __future__ import annotations

import functools

import numpy as np
from array_api_compat import array_namespace

from .._validation import as_count, as_prob_pair, as_probs, choice
from ..conventions import normalization_tolerance
from ..divergences import get_divergence
from ..results import OneStepResult
from ..rules import DecisionPlan, SpikePlan, TargetPlan, get_rule
from ..rules.plans import _one_hot
from ._emitted import emitted_of_plan
from ._rowwise import analyze_over, emitted_on_dask, emitted_over
from ._runners import Execution, is_dask

__all__ = [
    "analyze",
    "emitted_distribution",
    "make_plan",
    "acceptance_probabilities",
    "acceptance_rate",
    "per_draft_divergence",
]

_DEFAULT_DIVERGENCES = ("kl", "reverse_kl", "tv")
_EMIT_METHODS = ("fast", "dense")

#: Drafting policies of one drafted token (:func:`_drafting_distribution`).
_DRAFTING = ("sample", "argmax", "top_k")


def _overflow_is_inf(fn):
    """Ratios like p_j/q_j with subnormal q_j overflow to +inf, which is the right limit in
    every formula here (min(1, inf) = 1; t_j = inf never enters a residual): no warning."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(over="ignore"):
            return fn(*args, **kwargs)

    return wrapper


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _as_torch_probs(x, name: str):
    """A torch probability tensor [..., V] as float64 on its device, rows renormalized.

    The same checks as :func:`cactus_theory._validation.as_probs` (they read device values:
    the analysis synchronizes, the samplers do not come here). bf16/fp16/fp32 inputs are
    promoted to float64 before the row sums.
    """
    import torch

    if x.dim() == 0:
        raise ValueError(f"{name}: expected an array of shape (..., V), got a scalar")
    if x.shape[-1] == 0:
        raise ValueError(f"{name}: the vocabulary axis (last) is empty")
    if not x.is_floating_point():
        raise ValueError(f"{name}: must be a floating tensor, got {x.dtype}")
    arr = x.to(torch.float64)
    if not bool(torch.isfinite(arr).all()):
        raise ValueError(f"{name}: contains NaN or infinite probabilities")
    if bool((arr < 0).any()):
        raise ValueError(f"{name}: contains negative probabilities (min {float(arr.min()):.3g})")
    sums = arr.sum(dim=-1, keepdim=True)
    tol = normalization_tolerance(x.dtype)
    if bool(((sums - 1.0).abs() > tol).any()):
        raise ValueError(f"{name}: rows must sum to 1 within {tol:g}")
    return arr / sums


def _as_pair(target_probs, draft_probs):
    """(q, p): numpy float64 via the package's validation, or torch float64 on q's device."""
    if not (_is_torch(target_probs) or _is_torch(draft_probs)):
        return as_prob_pair(target_probs, draft_probs)
    if not (_is_torch(target_probs) and _is_torch(draft_probs)):
        raise ValueError(
            "draft_probs: target_probs and draft_probs must both be torch tensors or both be array-likes"
        )
    if target_probs.device != draft_probs.device:
        raise ValueError(f"draft_probs: on {draft_probs.device}, target_probs on {target_probs.device}")
    q = _as_torch_probs(target_probs, "target_probs")
    p = _as_torch_probs(draft_probs, "draft_probs")
    if q.shape != p.shape:
        raise ValueError(
            f"draft_probs: shape {tuple(p.shape)} does not match target_probs' shape {tuple(q.shape)}"
        )
    return q, p


def _drafting_distribution(draft_probs, drafting: str = "sample", draft_top_k=None):
    r"""The law the drafted token is drawn from under a drafting policy (array-agnostic).

    ``"sample"``: p itself (the default everywhere). ``"argmax"``: the point mass at the
    drafter's most likely token, the lowest id among ties (``numpy.argmax``,
    ``torch.argmax``); vLLM's ``draft_sample_method="greedy"``, EAGLE's chains.
    ``"top_k"``: p restricted to its ``draft_top_k`` most likely tokens (exactly k, ties to
    the lower id, as :func:`cactus_theory.drafts.top_k_tokens`) and renormalized;
    ``draft_top_k = 1`` is ``"argmax"``.

    A verifier that keeps the engine's semantics verifies the drafted token against the law
    it was drawn from: the analysis gives the rule this law as its drafter row p.

    Parameters
    ----------
    draft_probs : array, shape (..., V)
        The drafter's rows p (numpy or torch; rows sum to 1).
    drafting : {"sample", "argmax", "top_k"}
    draft_top_k : int, optional
        k >= 1 for ``"top_k"`` (values above V use V); not used otherwise.

    Returns
    -------
    array, shape (..., V)
        Rows summing to 1, the dtype and namespace of ``draft_probs``.

    Symbols: p drafter (``draft_probs``), n drafted token.
    """
    choice(drafting, _DRAFTING, "drafting")
    if drafting == "sample":
        return draft_probs
    xp = array_namespace(draft_probs)
    p = draft_probs
    V = p.shape[-1]
    if drafting == "argmax":
        k = 1
    else:
        if draft_top_k is None:
            raise ValueError("draft_top_k: an integer k >= 1 is required with drafting='top_k', got None")
        k = as_count(draft_top_k, "draft_top_k", minimum=1)
        k = min(k, V)
    if k == 1:
        return _one_hot(xp.argmax(p, axis=-1), V, p)
    kth = xp.sort(p, axis=-1)[..., V - k : V - k + 1]
    above = p > kth
    ties = p == kth
    room = k - xp.sum(xp.astype(above, xp.int64), axis=-1, keepdims=True)
    tie_rank = xp.cumulative_sum(xp.astype(ties, xp.int64), axis=-1)
    keep = above | (ties & (tie_rank <= room))
    kept = xp.where(keep, p, xp.zeros_like(p))
    return kept / xp.sum(kept, axis=-1, keepdims=True)


@_overflow_is_inf
def make_plan(
    rule,
    target_probs,
    draft_probs,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    drafting: str = "sample",
    draft_top_k=None,
):
    """Validate the inputs (float64, rows renormalized) and build the rule's plan.

    Parameters
    ----------
    rule : str or Rule
        A registry name (default knobs) or a configured rule from :func:`get_rule`.
    target_probs, draft_probs : array_like, shape (..., V)
        Processed verifier (q) and drafter (p) distributions.
    raw_target_probs, raw_draft_probs : array_like, shape (..., V), optional
        Raw (temperature-1) distributions for rules that decide on them; default: the
        processed ones.
    drafting : {"sample", "argmax", "top_k"}
        How the drafted token is drawn (:func:`_drafting_distribution`): the rule is given
        that law as its drafter row. A rule that reads the raw drafter row still reads the
        drafter's own (``raw_draft_probs``, default the processed p before the policy).
    draft_top_k : int, optional
        k for ``drafting="top_k"``.
    """
    rule = get_rule(rule)
    q, p = _as_pair(target_probs, draft_probs)
    conv = _as_torch_probs if _is_torch(q) else as_probs
    raw_q = q if raw_target_probs is None else conv(raw_target_probs, "raw_target_probs")
    raw_p = p if raw_draft_probs is None else conv(raw_draft_probs, "raw_draft_probs")
    for name, arr in (("raw_target_probs", raw_q), ("raw_draft_probs", raw_p)):
        if tuple(arr.shape) != tuple(q.shape):
            raise ValueError(f"{name}: shape {tuple(arr.shape)} does not match target_probs' {q.shape}")
    p = _drafting_distribution(p, drafting, draft_top_k)
    return rule.plan(q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p)


def _as_plan(
    plan_or_rule,
    target_probs,
    draft_probs,
    raw_target_probs,
    raw_draft_probs,
    drafting="sample",
    draft_top_k=None,
):
    if isinstance(plan_or_rule, (TargetPlan, SpikePlan, DecisionPlan)):
        if drafting != "sample":
            raise ValueError("drafting: a plan has its drafter row already; give the rule and the rows")
        return plan_or_rule
    if target_probs is None or draft_probs is None:
        raise ValueError("target_probs: required together with draft_probs when a rule is given")
    return make_plan(
        plan_or_rule,
        target_probs,
        draft_probs,
        raw_target_probs=raw_target_probs,
        raw_draft_probs=raw_draft_probs,
        drafting=drafting,
        draft_top_k=draft_top_k,
    )


@_overflow_is_inf
def acceptance_probabilities(
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    drafting: str = "sample",
    draft_top_k=None,
) -> np.ndarray:
    r"""Per-draft acceptance :math:`a_n` for every candidate drafted token n.

    Parameters
    ----------
    rule : str, Rule or plan
        What to analyse (a plan from :func:`make_plan` skips validation).
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p.
    drafting : {"sample", "argmax", "top_k"}
        How the drafted token is drawn (:func:`_drafting_distribution`; default: from p).
    draft_top_k : int, optional
        k for ``drafting="top_k"``.

    Returns
    -------
    ndarray, shape (..., V)
        :math:`a_n \in [0, 1]`; e.g. SpS gives :math:`\min(1, q_n/p_n)`.
    """
    plan = _as_plan(rule, target_probs, draft_probs, raw_target_probs, raw_draft_probs, drafting, draft_top_k)
    xp = array_namespace(plan.draft_probs)
    return xp.clip(plan.accept_probs(), 0.0, 1.0)


@_overflow_is_inf
def acceptance_rate(
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    drafting: str = "sample",
    draft_top_k=None,
) -> np.ndarray:
    r"""Overall acceptance :math:`\alpha = \sum_n p_n a_n` of one drafted token.

    With a drafting policy (``drafting``, ``draft_top_k``: see :func:`make_plan`) p is the
    law the policy draws from: argmax drafting gives :math:`a_{\arg\max p}`, which is not
    always the larger acceptance (q = (0, 1, 0), p = (0.51, 0.49, 0): 0 for the argmax
    draft, 0.49 for sampling under SpS).

    Examples
    --------
    >>> q, p = [0.30, 0.35, 0.35], [0.05, 0.80, 0.15]
    >>> round(float(acceptance_rate("sps", q, p)), 4)    # sum min(p, q)
    0.55
    """
    plan = _as_plan(rule, target_probs, draft_probs, raw_target_probs, raw_draft_probs, drafting, draft_top_k)
    xp = array_namespace(plan.draft_probs)
    return xp.sum(plan.draft_probs * xp.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)


@_overflow_is_inf
def emitted_distribution(
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    method: str = "fast",
    drafting: str = "sample",
    draft_top_k=None,
    chunk_rows=None,
    max_memory=None,
    progress: bool = False,
    runner=None,
) -> np.ndarray:
    r"""The distribution of the emitted token, :math:`h_{alg}` (Theorem 3), exactly.

    .. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n)\, r^{(n)}_j

    where q = verifier (``target_probs``), p = drafter (``draft_probs``), n = drafted token,
    :math:`a_n` the rule's acceptance and :math:`r^{(n)}` its recovery distribution.

    Parameters
    ----------
    rule : str, Rule or plan
        A registry name, a configured rule or a plan from :func:`make_plan`.
    target_probs, draft_probs : array_like, shape (..., V)
        Verifier q and drafter p (validated; rows renormalized in float64).
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw distributions for rules that decide on them.
    method : {"fast", "dense"}
        ``"fast"``: O(V log V) per row (spike plans) or O(V) (target and decision plans).
        ``"dense"``: enumerate every draft's recovery (O(V^2)); for testing at small V.
    drafting : {"sample", "argmax", "top_k"}
        How the drafted token is drawn (:func:`_drafting_distribution`; default: from p).
    draft_top_k : int, optional
        k for ``drafting="top_k"``.
    chunk_rows, max_memory, progress, runner
        Where the work runs, as in :func:`analyze`: rows beyond one chunk (or a row source)
        chunk by chunk, the rows' distributions joined in order (the returned array is N x V,
        the working memory one chunk's); Dask arrays give a lazy Dask array with q's row
        chunks (the vocabulary axis one chunk).

    Returns
    -------
    ndarray, shape (..., V)
        A probability distribution per row (sums to 1 up to rounding).

    Examples
    --------
    >>> import numpy as np
    >>> q, p = np.array([0.30, 0.35, 0.35]), np.array([0.05, 0.80, 0.15])
    >>> np.allclose(emitted_distribution("sps", q, p), q)        # Theorem 1: SpS emits q
    True

    References
    ----------
    Hao & Mou, ICLR 2026, arXiv 2604.04987, Theorem 3.
    """
    choice(method, _EMIT_METHODS, "method")
    execution = Execution(chunk_rows, max_memory, progress, runner)
    is_plan = isinstance(rule, (TargetPlan, SpikePlan, DecisionPlan))
    if not is_plan and target_probs is not None and runner != "local" and is_dask(target_probs):
        return emitted_on_dask(_emitted_rows, get_rule(rule), target_probs, draft_probs, method)
    if (
        is_plan
        or target_probs is None
        or (runner is None and not execution.wants_chunks(target_probs, "emitted"))
    ):
        plan = _as_plan(
            rule, target_probs, draft_probs, raw_target_probs, raw_draft_probs, drafting, draft_top_k
        )
        return emitted_of_plan(plan, method)
    raws = (raw_target_probs, raw_draft_probs)
    args = (method, drafting, draft_top_k)
    return emitted_over(
        _emitted_rows, get_rule(rule), target_probs, draft_probs, raws, args, execution=execution
    )


def _emitted_rows(chunk, rule, method, drafting="sample", draft_top_k=None):
    """:math:`h_{alg}` of a chunk's rows (a :class:`~cactus_theory.analysis._runners.RowChunk`)."""
    plan = _as_plan(
        rule,
        chunk.target_probs,
        chunk.draft_probs,
        chunk.raw_target_probs,
        chunk.raw_draft_probs,
        drafting,
        draft_top_k,
    )
    return emitted_of_plan(plan, method)


@_overflow_is_inf
def per_draft_divergence(
    rule, target_probs=None, draft_probs=None, divergence="kl", *, raw_target_probs=None, raw_draft_probs=None
):
    r""":math:`D(h^{(n)} \| q)` of the rule's per-draft target for every candidate n.

    For a spike plan this is Theorem 2's two-point form at :math:`(\gamma_n, q_n)`; for a
    target plan it is :math:`D(\mathrm{normalize}(h) \| q)` for every n. Decision plans have
    no per-draft target and raise ValueError.

    Returns
    -------
    ndarray, shape (..., V)
    """
    plan = _as_plan(rule, target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    d = get_divergence(divergence)
    xp = array_namespace(plan.draft_probs)
    if isinstance(plan, SpikePlan):
        return d.two_point(plan.spike, plan.target_probs)
    if isinstance(plan, TargetPlan):
        h = plan.target / xp.sum(plan.target, axis=-1, keepdims=True)
        val = d.unchecked(h, plan.target_probs)
        return xp.broadcast_to(val[..., None], h.shape) + xp.zeros_like(h)
    raise ValueError("rule: a decision rule has no per-draft target distribution")


@_overflow_is_inf
def _analyze_block(
    rule,
    target_probs,
    draft_probs,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    divergences=_DEFAULT_DIVERGENCES,
    drafting: str = "sample",
    draft_top_k=None,
) -> OneStepResult:
    """:func:`analyze` of rows held at once (numpy or torch), whatever their number."""
    rule = get_rule(rule)
    plan = make_plan(
        rule,
        target_probs,
        draft_probs,
        raw_target_probs=raw_target_probs,
        raw_draft_probs=raw_draft_probs,
        drafting=drafting,
        draft_top_k=draft_top_k,
    )
    a = acceptance_probabilities(plan)
    emitted = emitted_of_plan(plan)
    xp = array_namespace(a)
    divs = {name: get_divergence(name).unchecked(emitted, plan.target_probs) for name in divergences}
    return OneStepResult(repr(rule), a, xp.sum(plan.draft_probs * a, axis=-1), emitted, divs)


def _analyze_rows(chunk, rule, divergences, per_token, drafting="sample", draft_top_k=None):
    """:func:`analyze` of a chunk's rows (``per_token`` False: the per-row values only)."""
    res = _analyze_block(
        rule,
        chunk.target_probs,
        chunk.draft_probs,
        raw_target_probs=chunk.raw_target_probs,
        raw_draft_probs=chunk.raw_draft_probs,
        divergences=divergences,
        drafting=drafting,
        draft_top_k=draft_top_k,
    )
    if per_token:
        return res
    return OneStepResult(res.rule, None, res.acceptance, None, res.divergences)


def analyze(
    rule,
    target_probs,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    divergences=None,
    per_token=None,
    drafting: str = "sample",
    draft_top_k=None,
    chunk_rows=None,
    max_memory=None,
    progress: bool = False,
    runner=None,
) -> OneStepResult:
    r"""Acceptance, emitted distribution and its divergences from q in one call.

    :math:`\alpha = \sum_n p_n a_n` and :math:`D(h_{alg}\|q)` per row, with
    :math:`h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n) r^{(n)}_j` (Theorem 3).

    Parameters
    ----------
    rule : str or Rule
        What to analyse.
    target_probs : array_like, tensor, Dask array or RowSource, shape (..., V)
        Verifier q, or a row source (:mod:`cactus_theory.rows`; then ``draft_probs`` is None).
    draft_probs : array_like, tensor or Dask array, shape (..., V), optional
        Drafter p, with array q.
    raw_target_probs, raw_draft_probs : optional
        Raw distributions for rules that decide on them.
    divergences : sequence of str, optional
        Divergences ``D(h_alg || q)`` to report (default KL, reverse KL, TV).
    per_token : bool, optional
        Keep the (N, V) arrays ``accept_probs`` and ``emitted`` (default: True for in-memory
        arrays, False for a row source or Dask arrays). False returns them as None and holds
        only per-row values.
    drafting : {"sample", "argmax", "top_k"}
        How the drafted token is drawn (:func:`_drafting_distribution`; default: from p).
    draft_top_k : int, optional
        k for ``drafting="top_k"``.
    chunk_rows, max_memory : optional
        Rows per chunk, or the bound on the working memory (``"256MB"``, bytes; default
        256 MiB): rows beyond one chunk are analysed chunk by chunk.
    progress : bool
        A progress bar over chunks.
    runner : {None, "local", "dask"}
        Where the chunks run: None, Dask arrays as Dask tasks and anything else in this
        process; ``"dask"`` a row source's shards as Dask tasks on Dask's current scheduler.

    Returns
    -------
    OneStepResult
        The rows' results joined in order (batch shape of array input kept): the numbers of
        one call over all rows bit for bit, however the rows are chunked or where they run.

    Symbols: q verifier, p drafter, n drafted token. Source: Hao & Mou, ICLR 2026
    (arXiv 2604.04987), Theorem 3.
    """
    rule = get_rule(rule)
    divergences = tuple(_DEFAULT_DIVERGENCES if divergences is None else divergences)
    execution = Execution(chunk_rows, max_memory, progress, runner)
    if runner is None and per_token is not False and not execution.wants_chunks(target_probs, "analyze"):
        if draft_probs is None:
            raise ValueError("draft_probs: required with a target_probs array")
        return _analyze_block(
            rule,
            target_probs,
            draft_probs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            divergences=divergences,
            drafting=drafting,
            draft_top_k=draft_top_k,
        )
    return analyze_over(
        _analyze_rows,
        rule,
        (target_probs, draft_probs, raw_target_probs, raw_draft_probs),
        divergences,
        per_token,
        (drafting, draft_top_k),
        execution=execution,
    )
