r"""Real speculative decoding on CPU (or CUDA): a drafter proposes m tokens, the verifier checks
them in one forward pass and a rule of the toolkit decides, through the torch sampler interface.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), m draft length.

One round, batch size 1, both models with a KV cache:

1. the drafter samples :math:`d_1..d_m`, :math:`d_j \sim p_j` (processed distributions);
2. the verifier scores the prefix and all m drafts in one call, giving :math:`q_1..q_{m+1}`;
3. a bonus token :math:`b \sim q_{m+1}` is drawn, and the sampler (vLLM 0.7.3's interface,
   ``sampler(target_with_bonus_probs [1, m+1, V], bonus_token_ids [1, 1], draft_probs [1, m, V],
   draft_token_ids [1, m]) -> [1, m+1]`` with ``-1`` padding, built by
   ``cactus_theory.samplers.make_sampler(rule, **knobs)``) returns the accepted prefix plus one
   recovered or bonus token;
4. both caches are cropped to the accepted prefix.

Metrics (:class:`DecodeResult`):

* ``al`` -- accepted drafted tokens per verifier call (bonus **not** counted: the paper's AL_m);
* ``tokens_per_call`` -- emitted tokens per verifier call (= ``al + 1`` except at the end);
* ``speedup`` -- wall time of verifier-only decoding per token over speculative decoding's;
* ``nll`` -- the verifier's raw (temperature-1) per-token NLL of the output, by teacher forcing;
* ``expected_al`` -- :math:`\frac1R\sum_r \sum_{j=1}^m \prod_{i\le j} a_i(d_{r,i})` where
  :math:`a_i(n)` is the rule's acceptance probability of the drafted token computed from the
  recorded distributions (the expectation of the accepted length given the drafted tokens, over
  the acceptance coins): an unbiased prediction of the measured AL from the recorded (q, p).

The (q, p) pairs of every drafted position are recorded as a compact dump (see
:mod:`cactus_theory.logits._format`) with extras ``round``, ``draft_pos``, ``accepted_len``,
``emitted`` (the token the sampler emitted at that slot, or -1), so the exact expectations of the
analysis can be recomputed from the same runs.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import numpy as np

from ..results import Result
from ._format import FORMAT, compact_columns, pack_compact, split_positions, write_arrays
from ._runner import BatchRunner, SamplingParams, processed_sparse
from ._torch import torch


def _dense(ids, pr, V):
    out = torch.zeros(V, dtype=torch.float64)
    out[ids] = pr
    return out


@dataclass
class RoundRecord:
    """What one speculative round saw: processed q_1..q_m, p_1..p_m (sparse), drafts, outcome."""

    q_sparse: list
    p_sparse: list
    raw_q: list
    raw_p: list
    drafts: list
    accepted: int
    emitted: list


@dataclass
class DecodeResult(Result):
    """Outcome of decoding one prompt (speculative or verifier-only)."""

    prompt_ids: list
    tokens: list
    wall_s: float
    verifier_calls: int
    drafted: int = 0
    accepted: int = 0
    rounds: list = field(default_factory=list)

    @property
    def al(self) -> float:
        return self.accepted / self.verifier_calls if self.verifier_calls else float("nan")

    @property
    def tokens_per_call(self) -> float:
        return len(self.tokens) / self.verifier_calls if self.verifier_calls else float("nan")


def _call_sampler(sampler, q, bonus, p, drafts, raw_q=None, raw_p=None):
    kw = {}
    try:
        params = inspect.signature(getattr(sampler, "forward", sampler)).parameters
    except (TypeError, ValueError):
        params = {}
    if "raw_target_probs" in params and raw_q is not None:
        kw["raw_target_probs"] = raw_q
    if "raw_draft_probs" in params and raw_p is not None:
        kw["raw_draft_probs"] = raw_p
    return sampler(
        target_with_bonus_probs=q, bonus_token_ids=bonus, draft_probs=p, draft_token_ids=drafts, **kw
    )


@torch.no_grad()
def speculative_decode(
    verifier,
    drafter,
    prompt_ids,
    sampler,
    m: int,
    max_new_tokens: int,
    sampling: SamplingParams = SamplingParams(),  # noqa: B008  (a frozen dataclass)
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    record: bool = False,
    pass_raw: bool = True,
) -> DecodeResult:
    """Speculative decoding of one prompt.

    Parameters
    ----------
    verifier, drafter : torch.nn.Module
        Hugging Face-like causal LMs (``.logits`` output) over the same vocabulary.
    prompt_ids : list of int
    sampler : callable
        vLLM 0.7.3 rejection-sampler interface (see module docstring).
    m : int
        Draft length.
    max_new_tokens : int
    sampling : SamplingParams
        Transforms applied to both models (q and p handed to the sampler are processed).
    generator : torch.Generator
        Drafting and bonus sampling; the sampler uses its own randomness.
    eos_id : int, optional
        Stop after emitting it.
    record : bool
        Keep per-round distributions (for :func:`records_to_dump` and ``expected_al``).
    pass_raw : bool
        Also give the sampler ``raw_target_probs`` / ``raw_draft_probs`` when its ``forward``
        accepts them (rules that decide on raw distributions need them).

    Returns
    -------
    DecodeResult
    """
    g = generator or torch.Generator().manual_seed(0)
    vr, dr = BatchRunner(verifier), BatchRunner(drafter)
    seq = list(prompt_ids)
    P = len(seq)
    res = DecodeResult(list(prompt_ids), [], 0.0, 0)
    t0 = time.perf_counter()
    V = None
    done = False
    while not done and len(seq) - P < max_new_tokens:
        drafts, p_rows, p_sp, raw_p, V = _draft(dr, seq, m, V, sampling, g, record or pass_raw)
        before = len(seq)
        n_acc, emitted, rd = _verify(
            vr, seq, drafts, p_rows, p_sp, raw_p, V, sampler, sampling, g, record, pass_raw
        )
        res.verifier_calls += 1
        res.drafted += m
        res.accepted += n_acc
        if record:
            res.rounds.append(rd)
        for t in emitted:
            seq.append(t)
            if eos_id is not None and t == eos_id:
                done = True
                break
        # 3. crop both caches to the accepted prefix (the last emitted token is fed next round)
        vr.crop(before + n_acc)
        dr.crop(before + min(n_acc, m - 1))
    res.tokens = seq[P : P + max_new_tokens]
    res.wall_s = time.perf_counter() - t0
    return res


def _draft(dr, seq, m, V, sampling, g, keep):
    """Round step 1: the drafter samples m tokens. Returns the drafts, their dense processed rows,
    (when ``keep``) their sparse rows and raw rows, and the vocabulary size V (read off the first
    logits when ``V`` is None)."""
    feed = seq[dr.length :] if dr.cache is not None else seq
    out = dr.prefill([feed]) if dr.cache is None else dr.step(torch.tensor([feed]))
    drafts, p_rows, p_sp, raw_p = [], [], [], []
    for j in range(m):
        z = out.logits[0, -1]
        if V is None:
            V = z.shape[-1]
        ids, pr = processed_sparse(z[:V], sampling)
        d = int(ids[torch.multinomial(pr, 1, generator=g)])
        drafts.append(d)
        p_rows.append(_dense(ids, pr, V))
        if keep:
            p_sp.append((ids.numpy(), pr.numpy()))
            raw_p.append(torch.softmax(z[:V].double(), -1))
        if j < m - 1:
            out = dr.step(torch.tensor([[d]]))
    return drafts, p_rows, p_sp, raw_p, V


def _verify(vr, seq, drafts, p_rows, p_sp, raw_p, V, sampler, sampling, g, record, pass_raw):
    """Round step 2: the verifier scores the prefix and the drafts in one call, a bonus token is
    drawn and the sampler decides. Returns the accepted count, the emitted tokens and (when
    ``record``) the round's :class:`RoundRecord`."""
    m = len(drafts)
    vfeed = seq[vr.length :] + drafts if vr.cache is not None else seq + drafts
    vo = vr.prefill([vfeed]) if vr.cache is None else vr.step(torch.tensor([vfeed]))
    zq = vo.logits[0, -(m + 1) :, :V]
    q_rows, q_sp = [], []
    for j in range(m + 1):
        ids, pr = processed_sparse(zq[j], sampling)
        q_rows.append(_dense(ids, pr, V))
        if record:
            q_sp.append((ids.numpy(), pr.numpy()))
    q = torch.stack(q_rows)[None].float()
    p = torch.stack(p_rows)[None].float()
    bonus = torch.multinomial(q[0, m].double(), 1, generator=g).view(1, 1)
    raw_q = torch.softmax(zq.double(), -1) if (record or pass_raw) else None
    rq_arg = raw_q[None].float() if pass_raw else None
    rp_arg = torch.stack(raw_p)[None].float() if pass_raw else None
    o = _call_sampler(sampler, q, bonus, p, torch.tensor([drafts]), rq_arg, rp_arg)[0]
    emitted = [int(t) for t in o.tolist() if t != -1]
    n_acc = len(emitted) - 1
    rd = None
    if record:
        rd = RoundRecord(
            q_sp[:m], p_sp, [r.numpy() for r in raw_q[:m]], [r.numpy() for r in raw_p], drafts, n_acc, emitted
        )
    return n_acc, emitted, rd


@torch.no_grad()
def verifier_decode(
    verifier,
    prompt_ids,
    max_new_tokens: int,
    sampling: SamplingParams = SamplingParams(),  # noqa: B008  (a frozen dataclass)
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
) -> DecodeResult:
    """Verifier-only decoding (one call per token, KV cache): the speed and quality reference."""
    g = generator or torch.Generator().manual_seed(0)
    vr = BatchRunner(verifier)
    seq = list(prompt_ids)
    P = len(seq)
    t0 = time.perf_counter()
    out = vr.prefill([seq])
    calls = 0
    while len(seq) - P < max_new_tokens:
        z = out.logits[0, -1]
        ids, pr = processed_sparse(z, sampling)
        t = int(ids[torch.multinomial(pr, 1, generator=g)])
        seq.append(t)
        calls += 1
        if eos_id is not None and t == eos_id:
            break
        if len(seq) - P >= max_new_tokens:
            break
        out = vr.step(torch.tensor([[t]]))
    return DecodeResult(list(prompt_ids), seq[P:], time.perf_counter() - t0, calls)


@torch.no_grad()
def verifier_nll(verifier, prompt_ids, tokens) -> tuple[float, int]:
    """Sum of the verifier's raw (temperature-1) NLL of ``tokens`` after ``prompt_ids`` and the count."""
    if not tokens:
        return 0.0, 0
    x = torch.tensor([list(prompt_ids) + list(tokens)])
    z = verifier(x).logits[0, len(prompt_ids) - 1 : -1].double()
    lp = torch.log_softmax(z, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return float(-lp.sum()), len(tokens)


def _round_columns(rd, j, top_k_raw):
    """The compact columns of drafted position ``j`` of a recorded round (``compact_columns``)."""
    (qi, qp), (pi, pp) = rd.q_sparse[j], rd.p_sparse[j]
    return compact_columns(qi, qp, pi, pp, rd.raw_q[j], rd.raw_p[j], top_k_raw)


def expected_accepted(rounds, rule=None, top_k_raw: int = 64) -> np.ndarray:
    """Per-round expectation of the accepted length given the drafted tokens.

    ``E[n_acc | d] = sum_{j=1}^m prod_{i<=j} a_i(d_i)`` with ``a_i`` the rule's acceptance
    probability (``cactus_theory.rules.get_rule(...).plan(q, p).accept_probs_at``) computed on the
    recorded compact columns; for SpS ``a_i(n) = min(1, q_i(n)/p_i(n))``.

    Parameters
    ----------
    rounds : list of RoundRecord
    rule : Rule or str or None
        None means SpS (computed directly, no registry needed).
    """
    from ..rules import get_rule

    r = get_rule(rule) if rule is not None else None
    out = []
    for rd in rounds:
        acc = []
        for j, d in enumerate(rd.drafts):
            cols, q, p, rq, rp = _round_columns(rd, j, top_k_raw)
            k = int(np.searchsorted(cols[:-1], d))
            if r is None:
                acc.append(1.0 if p[k] <= 0 else min(1.0, q[k] / p[k]))
            else:
                plan = r.plan(q[None], p[None], raw_target_probs=rq[None], raw_draft_probs=rp[None])
                acc.append(float(np.asarray(plan.accept_probs_at(np.array([k])))[0]))
        out.append(float(np.cumprod(acc).sum()))
    return np.asarray(out)


def records_to_dump(results, prompts, path, meta: dict, top_k_raw: int = 64):
    """Write the recorded rounds of several :class:`DecodeResult` as a compact dump (positions =
    drafted positions; extras ``round``, ``draft_pos``, ``accepted_len``, ``emitted``)."""
    positions, tl, toks, pt, pl = [], [], [], [], []
    ex = {"round": [], "draft_pos": [], "accepted_len": [], "emitted": []}
    traj = []
    for res, pr in zip(results, prompts):
        n = 0
        for ri, rd in enumerate(res.rounds):
            for j, d in enumerate(rd.drafts):
                positions.append(_round_columns(rd, j, top_k_raw))
                toks.append(d)
                ex["round"].append(ri)
                ex["draft_pos"].append(j)
                ex["accepted_len"].append(rd.accepted)
                ex["emitted"].append(rd.emitted[j] if j < len(rd.emitted) else -1)
                n += 1
        tl.append(n)
        pt.extend(res.prompt_ids)
        pl.append(len(res.prompt_ids))
        traj.append({"prompt_id": pr.id, "category": pr.category, "source": pr.source, "n_positions": n})
    arrays = pack_compact(*split_positions(positions), toks, tl, pt, pl)
    for k, v in ex.items():
        arrays[f"x_{k}"] = np.asarray(v, np.int32)
    m = {
        "format": FORMAT,
        "kind": "decode_records",
        "trajectories": traj,
        "token_ids": "drafted tokens (extras: round, draft_pos, accepted_len, emitted)",
        **meta,
    }
    return write_arrays(path, arrays, m)


def resolve_sampler(rule: str, **knobs):
    """``cactus_theory.samplers.make_sampler(rule, **knobs)`` (the torch samplers)."""
    from ..samplers import make_sampler

    return make_sampler(rule, **knobs)
