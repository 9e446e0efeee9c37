r"""Row substitution: the verifier rows a rule's per-draft target h replaces (torch, no vLLM).

For a rule of the form "speculative sampling against a per-draft target h" (Theorem 3's
structure: :math:`a_n = \min(1, h^{(n)}_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, h^{(n)} - p))`), replacing the verifier row q of a drafted
token n by :math:`h^{(n)}` makes any exact SpS kernel realise the rule:

.. math:: \text{logits}' = \log h^{(n)}\quad(\log 0 = -\infty),

since softmax(logits') = h (h sums to 1, checked at start-up) and the kernel accepts with
:math:`\min(1, h_n/p_n)` and recovers from :math:`\max(h - p, 0)`. Greedy rows (temperature 0)
and bonus rows are returned unchanged, so the greedy kernel and the bonus token see q.

The computation is float32 on the input's device, through the rule's array-API ``plan``
(:mod:`cactus_theory.rules.plans`): the formulas are the ones the exact analysis uses. No
boolean indexing: every row is computed and ``torch.where`` keeps the untouched ones.

**Raw rows.** Rules that decide on the raw rows (``RuleSpec.needs_raw``: the cascades' deferral
tests, SCD's contrastive score) receive them: the verifier's raw row is the model's logits
before penalties, temperature and top-k/top-p (both runners keep them: MRV1's
``logits[target_logits_indices]``, MRV2's ``logits`` before ``apply_sampling_params``, which
copies); the drafter's raw row is MRV2's raw draft logits, and in MRV1, whose drafter
(``compute_probs_and_sample_next_token`` in vLLM 0.32-0.33) divides its logits by the request
temperature T and truncates nothing, :math:`\tilde p = \mathrm{softmax}(T \log p)` (exact up to
float32 underflow of p below ~1e-45). That is right only for a drafter that truncates nothing:
on the older runner the plugin checks each step's substituted drafter rows for zeros (a
truncating drafter's top-k/top-p, or a drafter without probabilities, whose p is one-hot)
until it finds one, and then warns once per rule (:func:`check_raw_draft`): the rebuilt raw
row is then the truncated row's, and the rule's raw tests read it in place of the drafter's
raw row. (A zero can also be a logit of -inf, or float32 underflow, where the rebuilt row is
right; the plugin cannot tell them apart and says so.) The newer runner hands the drafter's raw
logits, so its raw rows are exact; without them (one-hot drafts) it warns the same way.

**Knobs tied to the request.** SCD's ``scd_temperature`` is the request's temperature (as the
arXiv 2607.08690 overlay sets it; its declaration says so, ``Knob.request``): the rule's plan
gets each row's temperature as a [rows, 1] tensor, on the device, without a host read.

**Declared shortcuts** (read from the rule's declaration, ``Rule.realisation``, never from its
type; apart from the maths, each checked against the plan path by the tests and timed against
it by ``scripts/vllm_overhead.py``):

* a rule configured at its SpS knobs (``RuleSpec.sps_knobs``: h = q) is not substituted at all
  (:func:`is_sps`; the wrappers call vLLM's kernel directly);
* a spike (``Realisation.spike``: Cactus) changes one logit per row:
  with :math:`\ell` the logits, :math:`L = \mathrm{logsumexp}(\ell)`, :math:`q_n = e^{\ell_n - L}`
  and :math:`\gamma_n` at the drafted token alone, setting
  :math:`\ell'_n = L + \log(\gamma_n / c_n)`, :math:`c_n = (1 - \gamma_n)/(1 - q_n)` (the
  other logits kept) gives :math:`\mathrm{softmax}(\ell')_n = \gamma_n` and
  :math:`\mathrm{softmax}(\ell')_i = q_i (1-\gamma_n)/(1-q_n)` (Theorem 2's
  :math:`h^{(n)}`); where :math:`c_n = 0` (:math:`\gamma_n = 1`, or :math:`q_n = 1`),
  :math:`\ell'_n = \max\ell + 200` (every
  other float32 weight :math:`e^{\ell_i - \ell'_n} \le e^{-200}` is 0: h is one-hot at n).
  One read of the row (the logsumexp); the engine's wrappers write the entry in place and put
  it back after the kernel (:func:`mrv1_substitute` ``in_place``), so the logprobs the engine
  reports still come from q. On probabilities (:func:`substitute_target_probs`, MRV1, after
  the kernel's own softmax) the row is scaled by :math:`c_n` in place and :math:`\gamma_n`
  set at n;
* a target h = (1 - w) q + w p (``Realisation.lerp_weight``: interpolation, the static
  ensemble) on probabilities: ``lerp(q, p, w)`` in place.

Symbols: q verifier (``target_logits`` softmaxed), p drafter (``draft_probs``), n drafted token
(``draft_token_ids``), h target. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 2-3.
"""

from __future__ import annotations

import copy
import logging

from ..._extras import require
from ...rules import Rule
from ...rules.plans import SpikePlan, TargetPlan, _spike_row_scale, _spike_target_
from ._config import request_knob

torch = require("torch", "cactus_theory.integrations.vllm", extra="vllm")

__all__ = [
    "is_sps",
    "needs_raw",
    "uses_plan",
    "raw_draft_from_tempered",
    "check_raw_draft",
    "target_rows",
    "substitute_target_logits",
    "substitute_target_probs",
    "mrv1_substitute_probs",
    "mrv1_substitute",
    "mrv2_substitute",
]


def _spec(rule):
    spec = getattr(rule, "spec", None)
    return spec.alias_of if spec is not None and spec.alias_of is not None else spec


def is_sps(rule: Rule) -> bool:
    """True when the rule is configured at its SpS knobs (``RuleSpec.sps_knobs``): h = q."""
    spec = _spec(rule)
    if spec is None or spec.sps_knobs is None:
        return False
    knobs = getattr(rule, "knobs", {})
    return all(knobs.get(k) == v for k, v in spec.sps_knobs.items())


def needs_raw(rule: Rule) -> bool:
    """True when the rule reads the raw rows (``RuleSpec.needs_raw``, unless the configured rule
    says its knobs make it read none: ``reads_raw`` False, the OPT cascade's processed gate)."""
    spec = _spec(rule)
    return bool(spec is not None and spec.needs_raw and getattr(rule, "reads_raw", True))


def uses_plan(rule: Rule, shortcuts: bool = True) -> bool:
    """False when a declared shortcut computes the rule's rows without p (SpS, a spike rule)."""
    if not shortcuts:
        return True
    return not (is_sps(rule) or (rule.realisation.spike is not None and _request_knob(rule) is None))


def _request_knob(rule: Rule):
    return request_knob(_spec(rule))


def raw_draft_from_tempered(draft_probs, temperature):
    r"""The drafter's raw row :math:`\tilde p = \mathrm{softmax}(T \log p)` from its tempered row.

    Parameters
    ----------
    draft_probs : Tensor, shape (num_rows, V)
        :math:`p = \mathrm{softmax}(z / T)` (MRV1's drafter: temperature only, no truncation).
    temperature : Tensor, shape (num_rows,)
        Each row's request temperature T (rows with T = 0 get T = 1; they are greedy rows).
    """
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).to(torch.float32)
    return torch.softmax(t[:, None] * torch.log(draft_probs.to(torch.float32)), dim=-1)


logger = logging.getLogger("vllm.cactus_theory")

#: The rules already warned about by :func:`check_raw_draft` (once per rule and process).
_RAW_WARNED: set = set()


def check_raw_draft(rule: Rule, draft_probs, rows, *, one_hot: bool = False) -> bool:
    r"""Warn once per rule when the drafter's raw rows cannot be had from its processed rows.

    The older runner rebuilds the drafter's raw row as :math:`\mathrm{softmax}(T\log p)`
    (:func:`raw_draft_from_tempered`), which is its raw row only when the drafter truncates
    nothing. A zero in a substituted row of p (``rows``) means a truncated row (or a one-hot p,
    ``one_hot``: a drafter without probabilities), a logit of -inf, or float32 underflow; the
    check cannot tell them apart and warns (one ``logging`` warning under ``vllm.cactus_theory``,
    naming the rule) the first time it meets one. Until it has warned it reads one boolean per
    step (a host read; a rule that reads no raw rows is never checked).

    Returns
    -------
    bool
        True when this call warned.
    """
    name = getattr(rule, "name", repr(rule))
    if name in _RAW_WARNED or draft_probs is None or draft_probs.shape[0] == 0:
        return False
    zero_rows = ((draft_probs == 0).any(dim=-1) & rows).any()
    if not (one_hot or bool(zero_rows)):
        return False
    _RAW_WARNED.add(name)
    why = (
        "the drafter gives no probabilities (p is one-hot)"
        if one_hot
        else "its rows have zeros (a drafter that truncates, or logits of -inf / float32 underflow)"
    )
    logger.warning(
        "cactus_theory: rule %r reads the drafter's raw row, which this runner rebuilds from p, "
        "and %s: where the drafter truncated, the rule's raw tests read the truncated row "
        "instead of the drafter's raw row (this warning is shown once)",
        name,
        why,
    )
    return True


def target_rows(
    rule: Rule,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    *,
    raw_target_probs: torch.Tensor | None = None,
    raw_draft_probs: torch.Tensor | None = None,
    temperature: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""The per-draft target :math:`h^{(n)}` of each row through the rule's plan, float32, [num_rows, V].

    Parameters
    ----------
    rule : Rule
        A rule whose plan is a ``TargetPlan`` or ``SpikePlan``.
    target_probs, draft_probs : Tensor, shape (num_rows, V)
        Processed verifier q and drafter p, as vLLM's kernel reads them.
    draft_token_ids : Tensor, shape (num_rows,)
        The drafted token n of each row (must lie in [0, V)).
    raw_target_probs, raw_draft_probs : Tensor, shape (num_rows, V), optional
        Raw rows, passed to the plan of a rule that reads them.
    temperature : Tensor, shape (num_rows,), optional
        Each row's request temperature: sets the rule's request-tied knob
        (``Knob.request``) row by row (a copy of the rule whose attribute is the
        [num_rows, 1] tensor). Required for such a rule.
    """
    q = target_probs.to(torch.float32)
    p = draft_probs.to(torch.float32)
    ids = draft_token_ids.to(torch.int64)
    raw = {}
    if needs_raw(rule):
        raw = {"raw_target_probs": raw_target_probs, "raw_draft_probs": raw_draft_probs}
    tied = _request_knob(rule)
    if tied is None:
        return _plan_rows(rule, q, p, ids, raw)
    if temperature is None:
        raise ValueError(f"temperature: rule {rule.name!r} sets {tied[0]} from each request's temperature")
    # the rule with the knob set to each row's value (shape [rows, 1]; T = 0, a greedy row left
    # as q by the caller, gets 1): no host read of the values
    t = temperature.to(device=q.device, dtype=torch.float32)
    r = copy.copy(rule)
    setattr(r, tied[0], torch.where(t > 0, t, torch.ones_like(t))[:, None])
    return _plan_rows(r, q, p, ids, raw)


def _plan_rows(rule, q, p, ids, raw):
    """h^(n) of each row through the rule's plan (``raw``: the raw-row keywords, or empty)."""
    plan = rule.plan(q, p, **raw)
    if isinstance(plan, SpikePlan):
        return plan.target_at(ids)
    if isinstance(plan, TargetPlan):
        return plan.target
    raise ValueError(f"rule: {rule.name!r} gives a {type(plan).__name__}, not a per-draft target")


#: Added to a row's largest logit where gamma_n = 1: exp(-200) is 0 in float32, so the
#: kernel's softmax of the row is exactly one-hot at n.
ONE_HOT_GAP = 200.0


def _spike_entries(rule: Rule, logits, ids, valid):
    r"""The drafted tokens' new logits :math:`\ell'_n = L + \log(\gamma_n / c_n)` of a spike
    rule (module docstring; :math:`c_n` from the one scale of Theorem 2's target,
    ``rules.plans._spike_row_scale``), [rows]."""
    lse = torch.logsumexp(logits, dim=-1)
    z_n = logits.gather(1, ids[:, None])[:, 0]
    q_n = torch.exp(z_n - lse).clamp(max=1.0)
    gamma = rule.realisation.spike(q_n).to(torch.float32)
    c = _spike_row_scale(q_n[:, None], torch.zeros_like(ids), gamma)  # q_n as a one-entry row
    full = (gamma >= 1.0) | (c <= 0.0)
    ratio = gamma / torch.where(full, torch.ones_like(c), c)
    top = logits.amax(dim=-1) + ONE_HOT_GAP
    new = torch.where(full, top, lse + torch.log(ratio))
    return torch.where(valid, new, z_n), z_n


def _valid_ids(rows, draft_token_ids):
    """The rows to substitute (``rows`` with a drafted token: vLLM's placeholder is negative) and
    the drafted ids as int64 indices (a placeholder read as 0, its row left unchanged)."""
    return rows & (draft_token_ids >= 0), draft_token_ids.to(torch.int64).clamp(min=0)


def _raw_rows(rule, raw_target_logits, raw_draft_probs) -> dict:
    """The raw rows a rule that reads them gets (raw q as the softmax of the raw logits); ``{}``
    for the others; ValueError naming ``raw_target_logits`` when such a rule gets none."""
    if not needs_raw(rule):
        return {}
    if raw_target_logits is None or raw_draft_probs is None:
        raise ValueError(f"raw_target_logits: rule {rule.name!r} reads the raw rows; none were given")
    return {
        "raw_target_probs": torch.softmax(raw_target_logits.to(torch.float32), dim=-1),
        "raw_draft_probs": raw_draft_probs.to(torch.float32),
    }


def substitute_target_logits(
    rule: Rule,
    target_logits: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    rows: torch.Tensor,
    *,
    raw_target_logits: torch.Tensor | None = None,
    raw_draft_probs: torch.Tensor | None = None,
    temperature: torch.Tensor | None = None,
    shortcuts: bool = True,
    in_place: bool = False,
):
    """``log h`` on the rows where ``rows`` is True, ``target_logits`` elsewhere.

    Parameters
    ----------
    rule : Rule
        The configured rule.
    target_logits : Tensor, shape (num_rows, V)
        Processed verifier logits (temperature, top-k/top-p applied); float32 result.
    draft_probs : Tensor, shape (num_rows, V)
        Drafter probabilities p of each row.
    draft_token_ids : Tensor, shape (num_rows,)
        Drafted token of each row; rows with a negative id (vLLM's placeholder) are left unchanged.
    rows : Tensor of bool, shape (num_rows,)
        Rows to substitute (non-greedy, non-bonus).
    raw_target_logits, raw_draft_probs : Tensor, shape (num_rows, V), optional
        Raw verifier logits and raw drafter row, for a rule that reads raw rows (ValueError
        when such a rule gets none).
    temperature : Tensor, shape (num_rows,), optional
        Each row's request temperature (for a rule with a request-tied knob).
    shortcuts : bool
        Use the declared shortcuts (module docstring); False computes every rule through its
        plan (the reference the shortcuts are tested and timed against).
    in_place : bool
        Return ``(logits, undo)``: a spike rule's entries are written into ``target_logits``
        (float32) itself and ``undo()`` puts them back; other rules return a new tensor and
        ``undo`` is None. False (default): a new tensor, ``target_logits`` untouched.
    """
    logits = target_logits.to(torch.float32)
    undo = None
    if logits.shape[0] == 0 or (shortcuts and is_sps(rule)):
        out = logits if in_place else logits.clone()
    elif not uses_plan(rule, shortcuts):
        valid, ids = _valid_ids(rows, draft_token_ids)
        new_n, old_n = _spike_entries(rule, logits, ids, valid)
        out = logits if in_place else logits.clone()
        out.scatter_(1, ids[:, None], new_n[:, None])
        if in_place:

            def undo():
                out.scatter_(1, ids[:, None], old_n[:, None])

    else:
        out = _plan_logits(
            rule, logits, draft_probs, draft_token_ids, rows, raw_target_logits, raw_draft_probs, temperature
        )
    return (out, undo) if in_place else out


def _plan_logits(
    rule, logits, draft_probs, draft_token_ids, rows, raw_target_logits, raw_draft_probs, temperature
):
    """``log h`` through the rule's plan on the valid rows (:func:`substitute_target_logits`)."""
    valid, ids = _valid_ids(rows, draft_token_ids)
    raw = _raw_rows(rule, raw_target_logits, raw_draft_probs)
    q = torch.softmax(logits, dim=-1)
    h = target_rows(rule, q, draft_probs, ids, temperature=temperature, **raw)
    return torch.where(valid[:, None], torch.log(h), logits)


def _rows_of_requests(values, num_rows, num_draft_tokens, cu_num_draft_tokens, device):
    """Per-request ``values`` [B] expanded to the flat rows (request i owns num_draft_tokens[i])."""
    if cu_num_draft_tokens is not None:
        ends = cu_num_draft_tokens.to(device=device, dtype=torch.int64)
        row_ids = torch.arange(num_rows, device=device, dtype=torch.int64)
        req = torch.searchsorted(ends, row_ids, right=True).clamp(max=ends.shape[0] - 1)
        return values[req]
    counts = torch.as_tensor(list(num_draft_tokens), device=device)
    return torch.repeat_interleave(values, counts, output_size=num_rows)


def substitute_target_probs(
    rule: Rule,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    rows: torch.Tensor,
    *,
    raw_target_logits: torch.Tensor | None = None,
    raw_draft_probs: torch.Tensor | None = None,
    temperature: torch.Tensor | None = None,
    shortcuts: bool = True,
) -> torch.Tensor:
    r"""The kernel's verifier probabilities with :math:`h^{(n)}` on the rows where ``rows`` is True.

    The probability-domain twin of :func:`substitute_target_logits`, for a kernel that has
    softmaxed the processed logits already (MRV1's ``rejection_sample``): no softmax and no
    log. A spike rule scales the row by :math:`c_n` and sets :math:`\gamma_n` at n, in place in
    ``target_probs`` (float32, the kernel's own tensor; one read and write of the row);
    interpolation (and the static ensemble, its reparametrization) is
    ``lerp(q, p, alpha)`` in place (one fused pass); SpS returns ``target_probs``; other rules
    return a new tensor from their plan.

    Parameters
    ----------
    target_probs : Tensor, shape (num_rows, V)
        The kernel's q (softmax of the processed logits), float32.
    draft_probs, draft_token_ids, rows, raw_target_logits, raw_draft_probs, temperature, shortcuts
        As in :func:`substitute_target_logits`.
    """
    if target_probs.shape[0] == 0 or (shortcuts and is_sps(rule)):
        return target_probs
    valid, ids = _valid_ids(rows, draft_token_ids)
    real = rule.realisation
    if not uses_plan(rule, shortcuts):
        q_n = target_probs.gather(1, ids[:, None])[:, 0]
        gamma = real.spike(q_n).to(target_probs.dtype)
        return _spike_target_(target_probs, ids, gamma, valid=valid)
    if shortcuts and real.lerp_weight is not None:
        # h = (1 - w) q + w p = lerp(q, p, w): one fused pass, in place
        w = torch.where(valid, torch.full_like(valid, real.lerp_weight, dtype=target_probs.dtype), 0.0)
        return target_probs.lerp_(draft_probs.to(target_probs.dtype), w[:, None])
    raw = _raw_rows(rule, raw_target_logits, raw_draft_probs)
    h = target_rows(rule, target_probs, draft_probs, ids, temperature=temperature, **raw)
    return torch.where(valid[:, None], h.to(target_probs.dtype), target_probs)


def _mrv1_inputs(
    rule,
    draft_token_ids,
    num_draft_tokens,
    draft_probs,
    sampling_metadata,
    cu,
    num_rows,
    vocab,
    device,
    shortcuts,
):
    """MRV1's drafter rows (one-hot for None), substituted rows, row temperatures, raw drafter rows."""
    one_hot = draft_probs is None
    if one_hot and uses_plan(rule, shortcuts):
        draft_probs = torch.nn.functional.one_hot(draft_token_ids.to(torch.int64).clamp(min=0), vocab).to(
            torch.float32
        )
    temps = sampling_metadata.temperature
    row_temp = None
    if temps is not None and (needs_raw(rule) or _request_knob(rule) is not None):
        row_temp = _rows_of_requests(
            temps.to(device=device, dtype=torch.float32), num_rows, num_draft_tokens, cu, device
        )
    if sampling_metadata.all_random:
        rows = torch.ones(num_rows, dtype=torch.bool, device=device)
    else:
        rows = _rows_of_requests(temps != 0, num_rows, num_draft_tokens, cu, device)
    raw_draft = None
    if needs_raw(rule) and row_temp is not None and draft_probs is not None:
        check_raw_draft(rule, draft_probs, rows, one_hot=one_hot)
        raw_draft = raw_draft_from_tempered(draft_probs, row_temp)
    return draft_probs, rows, row_temp, raw_draft


def mrv1_substitute_probs(
    rule: Rule,
    draft_token_ids,
    num_draft_tokens,
    draft_probs,
    target_probs,
    sampling_metadata,
    cu_num_draft_tokens=None,
    raw_target_logits=None,
    *,
    shortcuts: bool = True,
):
    """New ``(draft_probs, target_probs)`` for MRV1's kernels after its softmax (the layout and
    arguments of :func:`mrv1_substitute`; :func:`substitute_target_probs`'s in-place rule)."""
    num_rows, vocab = target_probs.shape
    if shortcuts and is_sps(rule):
        return draft_probs, target_probs
    draft_probs, rows, row_temp, raw_draft = _mrv1_inputs(
        rule, draft_token_ids, num_draft_tokens, draft_probs, sampling_metadata, cu_num_draft_tokens,
        num_rows, vocab, target_probs.device, shortcuts,
    )  # fmt: skip
    probs = substitute_target_probs(
        rule,
        target_probs,
        draft_probs,
        draft_token_ids,
        rows,
        raw_target_logits=raw_target_logits,
        raw_draft_probs=raw_draft,
        temperature=row_temp,
        shortcuts=shortcuts,
    )
    return draft_probs, probs.contiguous()


def mrv1_substitute(
    rule: Rule,
    draft_token_ids,
    num_draft_tokens,
    draft_probs,
    target_logits,
    sampling_metadata,
    cu_num_draft_tokens=None,
    raw_target_logits=None,
    *,
    shortcuts: bool = True,
    in_place: bool = False,
):
    """New ``(draft_probs, target_logits)`` for MRV1's module-level ``rejection_sample``.

    MRV1 layout (``vllm/v1/sample/rejection_sampler.py``): flat rows, one per drafted token,
    request i owning ``num_draft_tokens[i]`` of them; the bonus rows are not among them.
    Greedy requests (``sampling_metadata.temperature == 0``) keep their rows. ``draft_probs``
    None (a drafter without probabilities) becomes the one-hot rows the kernel would assume.
    ``cu_num_draft_tokens`` (the kernel's device tensor of cumulative counts, request i's rows
    ending at ``cu_num_draft_tokens[i]``), when given, maps rows to requests on the device
    (row j belongs to the first request whose end exceeds j); without it the Python list
    ``num_draft_tokens`` is copied to the device (a blocking host-to-device copy).
    ``raw_target_logits`` (``logits[target_logits_indices]`` of ``RejectionSampler.forward``)
    are the verifier's raw rows; the drafter's raw rows are :func:`raw_draft_from_tempered`.
    ``in_place``: :func:`substitute_target_logits`'s, and the result is
    ``(draft_probs, target_logits, undo)``.
    """
    num_rows, vocab = target_logits.shape
    device = target_logits.device
    if shortcuts and is_sps(rule):
        return (draft_probs, target_logits, None) if in_place else (draft_probs, target_logits)
    draft_probs, rows, row_temp, raw_draft = _mrv1_inputs(
        rule, draft_token_ids, num_draft_tokens, draft_probs, sampling_metadata, cu_num_draft_tokens,
        num_rows, vocab, device, shortcuts,
    )  # fmt: skip
    new_logits = substitute_target_logits(
        rule,
        target_logits,
        draft_probs,
        draft_token_ids,
        rows,
        raw_target_logits=raw_target_logits,
        raw_draft_probs=raw_draft,
        temperature=row_temp,
        shortcuts=shortcuts,
        in_place=in_place,
    )
    if in_place:
        new_logits, undo = new_logits
        return draft_probs, new_logits, undo
    return draft_probs, new_logits.contiguous()


def mrv2_substitute(
    rule: Rule,
    target_logits,
    draft_logits,
    draft_sampled,
    cu_num_logits,
    expanded_idx_mapping,
    expanded_local_pos,
    temperature,
    raw_target_logits=None,
    *,
    shortcuts: bool = True,
    in_place: bool = False,
):
    """New ``target_logits`` for MRV2's ``rejection_sample`` (``rejection_sampler_utils.py``).

    MRV2 layout: request r owns logits rows ``cu_num_logits[r] : cu_num_logits[r+1]``, the last
    one the bonus row; row j verifies the token ``draft_sampled[j + 1]``; the drafter's raw
    logits of row j are ``draft_logits[expanded_idx_mapping[j], expanded_local_pos[j]]``,
    divided by the request's temperature (``temperature[expanded_idx_mapping[j]]``) as the
    kernel does; temperature 0 means greedy. ``draft_logits`` None means one-hot drafts.
    ``raw_target_logits`` (the ``logits`` ``RejectionSampler._verify`` received, same rows)
    are the verifier's raw rows; the drafter's raw rows are ``softmax(draft_logits)``.
    ``in_place``: :func:`substitute_target_logits`'s (the result is ``(target_logits, undo)``).
    """
    num_rows, vocab = target_logits.shape
    device = target_logits.device
    if num_rows == 0 or (shortcuts and is_sps(rule)):
        return (target_logits, None) if in_place else target_logits
    is_bonus = torch.zeros(num_rows, dtype=torch.bool, device=device)
    # (index_fill_ takes the value as a scalar: no host tensor to copy to the device)
    is_bonus.index_fill_(0, (cu_num_logits[1:] - 1).to(torch.int64), True)
    next_tok = torch.full((num_rows,), -1, dtype=torch.int64, device=device)
    next_tok[:-1] = draft_sampled[1:num_rows].to(torch.int64)
    state = expanded_idx_mapping.to(torch.int64)
    temp = temperature.to(torch.float32)[state]
    rows = (~is_bonus) & (temp != 0)
    raw_draft = p = None
    if not uses_plan(rule, shortcuts):
        pass  # the spike rows read gamma at n alone, not p
    elif draft_logits is None:
        p = torch.nn.functional.one_hot(next_tok.clamp(min=0), vocab).to(torch.float32)
        raw_draft = p
        if needs_raw(rule):
            check_raw_draft(rule, p, rows, one_hot=True)
    else:
        local = expanded_local_pos.to(torch.int64).clamp(max=draft_logits.shape[1] - 1)
        raw = draft_logits[state, local, :vocab].to(torch.float32)
        safe_t = torch.where(temp != 0, temp, torch.ones_like(temp))
        p = torch.softmax(raw / safe_t[:, None], dim=-1)
        if needs_raw(rule):
            raw_draft = torch.softmax(raw, dim=-1)
    return substitute_target_logits(
        rule,
        target_logits,
        p,
        next_tok,
        rows,
        raw_target_logits=raw_target_logits,
        raw_draft_probs=raw_draft,
        temperature=temp,
        shortcuts=shortcuts,
        in_place=in_place,
    )
