r"""The deployment plan: from a recording, a budget and a cost model to the draft length, the
rule's knob and the predicted speedup, with its interval over the recorded positions.

For each rule, its knob is calibrated so that the mean emitted divergence per token meets eps
(:func:`cactus_theory.simulate.audit.audit`'s calibration; or the knobs are given), then for every
draft length m = 1..m_max the expected tokens per verifier call :math:`E_m` (accepted drafts
plus the recovered or bonus token) is computed exactly:

* teacher-forced dump: the exact chain of each trajectory
  (:func:`cactus_theory.simulate.exact_chain`), :math:`E_m = \sum_i T_i / \sum_i R_i` over
  trajectories i (expected emitted tokens T and verifier calls R);
* recorded rounds: :math:`E_m = 1 + \mathrm{mean}_r \sum_{j \le m} S_{r,j}` with the exact
  survival of each round given its recorded drafts
  (:func:`cactus_theory.simulate.survival_probabilities`), m up to the recorded drafts;
* an acceptance profile: :math:`E_m = 1 + \sum_{j \le m} S_j`.

The predicted speedup is :math:`E_m c_v(1) / (m c_d + c_v(m + 1))` (:mod:`._cost`); the best m
maximises it (:func:`cactus_theory.simulate.best_verify_length` on the same numbers). The
interval is a percentile bootstrap over the recorded requests (trajectories: positions within
one are dependent, so whole requests are resampled); the cost model is held fixed. The
break-even acceptance solves :math:`\sum_{i=0}^{m} \alpha^i = c(m)/c_v(1)`: the constant
per-draft acceptance below which drafting m tokens cannot pay.

Symbols: q verifier, p drafter, n drafted token, m draft length, eps the target on the emitted
divergence, :math:`S_j` survival of the first j drafts.

References
----------
Leviathan et al. 2023 (arXiv 2211.17192), Sections 3.1 and 3.4; Hao & Mou, ICLR 2026
(arXiv 2604.04987), Theorem 3.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .._validation import as_budget, positive_int
from ..divergences import get_divergence
from ..results import PlanResult
from ._cost import CostModel
from ._engine import engine_config
from ._profile import AcceptanceProfile
from ._recording import Rounds, decode_rounds, load_dump_or_rounds, round_survival, trajectory_totals

__all__ = ["plan", "break_even_acceptance"]

#: Rules planned when none are named.
_DEFAULT_RULES = ("sps", "cactus-taylor")


def break_even_acceptance(cost: CostModel, m: int):
    r"""The constant acceptance :math:`\alpha` with :math:`\sum_{i=0}^{m}\alpha^i = c(m)/c_v(1)`.

    0 when a round costs no more than a plain step, None when even :math:`\alpha = 1` (every
    draft accepted, m + 1 tokens per round) does not pay.
    """
    from scipy.optimize import brentq

    r = cost.round_cost(m) / cost.verify(1)
    if r <= 1:
        return 0.0
    if r > m + 1:
        return None
    return float(brentq(lambda a: sum(a**i for i in range(m + 1)) - r, 0.0, 1.0, xtol=1e-12))


def _load_recording(recording):
    """An AcceptanceProfile (given, or a ``.json`` profile file), else a Dump or Rounds."""
    if isinstance(recording, AcceptanceProfile):
        return recording
    if isinstance(recording, (str, Path)) and str(recording).lower().endswith(".json"):
        return AcceptanceProfile.read(recording)
    return load_dump_or_rounds(recording)


def _as_cost(cost) -> CostModel:
    if isinstance(cost, CostModel):
        return cost
    if cost is None:
        raise ValueError(
            "cost: required (a CostModel, or a number: the drafter's cost per token over a plain step)"
        )
    if isinstance(cost, (int, float)):
        return CostModel.from_numbers(float(cost))
    raise ValueError(f"cost: expected a CostModel or a number, got {type(cost).__name__}")


def _bootstrap(num, den, resamples, level, rng):
    """(point, low, high) of sum(num)/sum(den) per column, resampling rows (requests)."""
    point = num.sum(0) / den.sum(0)
    if resamples == 0 or num.shape[0] < 2:
        return point, point.copy(), point.copy()
    idx = rng.integers(0, num.shape[0], size=(resamples, num.shape[0]))
    stats = num[idx].sum(1) / np.maximum(den[idx].sum(1), 1e-300)
    tail = 100 * (1 - level) / 2
    return point, np.percentile(stats, tail, axis=0), np.percentile(stats, 100 - tail, axis=0)


def _knob_rows(corpus, names, eps, divergence, knobs, progress):
    """Per rule: its knobs (calibrated to eps, or given) and the emitted-divergence columns."""
    from ..simulate.audit import audit
    from ..simulate.internal import CorpusRows

    if eps is not None:
        res = audit(
            corpus,
            eps=eps,
            rules=names,
            divergence=divergence,
            draft_lengths=(1,),
            sequence_m=1,
            knobs=knobs,
            progress=progress,
        )
        return [dict(r) for r in res.table]
    ev = CorpusRows(corpus, "token", get_divergence(divergence), (1,), 1)
    out = []
    for name in names:
        k = dict((knobs or {}).get(name, {}))
        _, row, _ = ev.columns(name, k, False)
        from ..rules import get_rule

        r = get_rule(name, **k)
        label = ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}" for a, b in k.items()) or "-"
        out.append(dict(rule=name, knob=label, knobs=dict(r.knobs), status="given", **row))
    return out


def _rounds_corpus(rounds: Rounds):
    from ..simulate.internal import corpus_from_arrays

    return corpus_from_arrays(
        rounds.target_probs,
        rounds.draft_probs,
        raw_target_probs=rounds.raw_target_probs,
        raw_draft_probs=rounds.raw_draft_probs,
    )


def _profile_rows(prof: AcceptanceProfile, ms, resamples, level, rng):
    """tokens per call (point, low, high) per m from a profile (bootstrap over its rounds' requests)."""
    if prof.round_survival is None:
        e = np.array([prof.tokens_per_call(m) for m in ms])
        return e, e.copy(), e.copy()
    s = prof.round_survival
    cum = 1.0 + np.cumsum(s, axis=1)[:, [m - 1 for m in ms]]
    req = prof.round_request if prof.round_request is not None else np.arange(s.shape[0])
    ids, inv = np.unique(req, return_inverse=True)
    num = np.zeros((ids.size, len(ms)))
    np.add.at(num, inv, cum)
    den = np.bincount(inv, minlength=ids.size).astype(float)[:, None] * np.ones(len(ms))
    return _bootstrap(num, den, resamples, level, rng)


def _check(recording, eps, m_max, resamples, level):
    eps = None if eps is None else as_budget(eps, "eps")
    if eps is not None and not math.isfinite(eps):
        raise ValueError(f"eps: must be finite, got {eps}")
    m_max = positive_int(m_max, "m_max")
    resamples = int(resamples)
    if resamples < 0:
        raise ValueError(f"bootstrap: must be >= 0, got {resamples}")
    if not 0 < float(level) < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    return eps, m_max, resamples, float(level)


def plan(
    recording,
    *,
    eps=None,
    divergence="kl",
    rules=None,
    knobs=None,
    cost=None,
    m_max=8,
    bootstrap=200,
    level=0.95,
    seed=0,
    max_positions=None,
    drafter=None,
    progress=False,
) -> PlanResult:
    r"""Before deploying: each rule's knob at the budget, the expected tokens per verifier call
    and the predicted speedup at every draft length, the best draft length and a ready vLLM
    configuration.

    .. math:: \mathrm{speedup}(m) = \frac{E_m\, c_v(1)}{m\, c_d + c_v(m + 1)}, \qquad
              E_m = E[N + 1] = 1 + \sum_{j \le m} S_j

    with :math:`E_m` exact on the recording (:mod:`cactus_theory.planning._plan`),
    :math:`c_d` the drafter's cost per token and :math:`c_v(k)` the verifier's over k tokens.

    Parameters
    ----------
    recording : str, Path, Dump or AcceptanceProfile
        A teacher-forced dump (a file or a shipped recording's name: ``distilled``,
        ``early-exit-25``, ``requant-3``, ``requant-4``), decoding records
        (``cactus-theory decode``), a folder of vLLM recorder shards, an
        :class:`~cactus_theory.planning.AcceptanceProfile` or a ``speculation_profile.json``.
    eps : float, optional
        Target on the mean emitted divergence per token: each rule's first numeric knob is
        calibrated to it (the audit's calibration). None: the rules run at ``knobs``.
    divergence : str
        D of eps (``"kl"``, ``"tv"``, ...).
    rules : sequence of str, optional
        Registry names (default ``("sps", "cactus-taylor")``).
    knobs : dict of str to dict, optional
        Fixed knobs per rule (with eps: knobs not calibrated).
    cost : CostModel or float
        The cost model; a number is the drafter's cost per token relative to a plain step
        (:meth:`CostModel.from_numbers`).
    m_max : int
        The longest draft length planned (recorded rounds and profiles: at most their drafts).
    bootstrap : int
        Resamples of the percentile bootstrap over the recorded requests (0: no interval).
    level : float
        The intervals' level.
    seed : int
        The bootstrap's seed.
    max_positions : int, optional
        A dump's first trajectories up to at least this many positions.
    drafter : str, optional
        The drafter's model name written into the engine configuration.
    progress : bool
        A progress bar over rules.

    Returns
    -------
    cactus_theory.results.PlanResult

    Examples
    --------
    >>> import cactus_theory as ct
    >>> res = ct.plan("distilled", eps=0.05, cost=0.1, m_max=3, max_positions=100, bootstrap=0)
    >>> res.best["rule"], res.best["m"]
    ('cactus-taylor', 1)

    Symbols: q verifier, p drafter, n drafted token, m draft length, eps the target on the
    emitted divergence, :math:`S_j` the survival of the first j drafts.
    Source: Leviathan et al. 2023 (arXiv 2211.17192), Sections 3.1 and 3.4; Hao & Mou, ICLR
    2026 (arXiv 2604.04987), Theorem 3.
    """
    from ..logits import Dump
    from ..simulate.internal import corpus_from_dump

    eps, m_max, resamples, level = _check(recording, eps, m_max, bootstrap, level)
    cost = _as_cost(cost)
    rec = _load_recording(recording)
    names = list(_DEFAULT_RULES if rules is None else ([rules] if isinstance(rules, str) else rules))
    if not names:
        raise ValueError("rules: empty list")
    rng = np.random.default_rng(seed)
    notes = []
    if isinstance(rec, Dump) and rec.meta.get("kind") == "decode_records":
        rec = decode_rounds(rec)
    if isinstance(rec, AcceptanceProfile):
        kind, source = "acceptance profile", rec.source
        if eps is not None or rules is not None or knobs:
            raise ValueError("eps: a profile holds no rows, so no rule can be calibrated or applied to it")
        m_max = min(m_max, rec.num_speculative_tokens)
        ms = tuple(range(1, m_max + 1))
        e, lo, hi = _profile_rows(rec, ms, resamples, level, rng)
        base = dict(
            rule=rec.meta.get("rule", "as measured"),
            knob="-",
            knobs={},
            status="measured",
            emitted_kl=None,
            emitted_tv=None,
            eos_shift=None,
            length_ratio=None,
        )
        table = [(base, e, lo, hi)]
    else:
        if isinstance(rec, Rounds):
            kind, source, corpus = "recorded rounds", rec.label, _rounds_corpus(rec)
            m_max = min(m_max, rec.max_drafts)
            notes.append("divergences are means over the recorded (drafted) rows")
        else:
            from ..logits import eos_token_id

            kind, source = "teacher-forced dump", rec.name
            corpus = corpus_from_dump(rec, max_positions=max_positions, eos_token_id=eos_token_id(rec.meta))
        ms = tuple(range(1, m_max + 1))
        table = []
        for row in tqdm(
            _knob_rows(corpus, names, eps, divergence, knobs, progress),
            disable=not progress,
            desc="plan",
            unit="rule",
        ):
            k = {a: b for a, b in row.get("knobs", {}).items()}
            if row.get("status") == "not audited":
                nan = np.full(len(ms), np.nan)
                table.append((row, nan, nan, nan))
                continue
            if isinstance(rec, Rounds):
                prof = AcceptanceProfile.from_survival(
                    round_survival(rec, row["rule"], k), requests=rec.request
                )
                e, lo, hi = _profile_rows(prof, ms, resamples, level, rng)
            else:
                tokens, calls, _ = trajectory_totals(corpus, row["rule"], k, ms)
                e, lo, hi = _bootstrap(tokens, calls, resamples, level, rng)
            table.append((row, e, lo, hi))
    return _assemble(source, kind, eps, divergence, ms, cost, table, resamples, level, drafter, notes)


def _assemble(source, kind, eps, divergence, ms, cost, table, resamples, level, drafter, notes):
    if max(ms) > cost.max_draft_length:
        raise ValueError(
            f"cost: covers draft lengths up to {cost.max_draft_length}, the plan needs {max(ms)}"
        )
    c0 = cost.verify(1)
    rc = np.array([cost.round_cost(m) for m in ms])
    rows, best = [], {"rule": None, "m": None, "speedup": None}
    for row, e, lo, hi in table:
        sp = e * c0 / rc
        ok = np.isfinite(sp)
        bm = int(ms[int(np.nanargmax(sp))]) if ok.any() else None
        out = {
            "rule": row["rule"],
            "knob": row.get("knob", "-"),
            "knobs": dict(row.get("knobs", {})),
            "status": row.get("status"),
            "emitted_kl": row.get("emitted_kl"),
            "emitted_tv": row.get("emitted_tv"),
            "eos_shift": row.get("eos_shift"),
            "length_ratio": row.get("length_ratio"),
            "accepted_length": (e - 1).tolist(),
            "tokens_per_call": e.tolist(),
            "tokens_per_call_low": lo.tolist(),
            "tokens_per_call_high": hi.tolist(),
            "speedup": sp.tolist(),
            "speedup_low": (lo * c0 / rc).tolist(),
            "speedup_high": (hi * c0 / rc).tolist(),
            "best_m": bm,
            "best_speedup": None if bm is None else float(sp[bm - 1]),
        }
        out["engine_config"], out["engine_note"] = engine_config(row["rule"], out["knobs"], bm, drafter)
        if bm is not None and (best["speedup"] is None or out["best_speedup"] > best["speedup"]):
            best = {"rule": out["rule"], "m": bm, "speedup": out["best_speedup"]}
        rows.append(out)
    if kind == "teacher-forced dump":
        unit = "trajectories (requests)"
    elif kind == "recorded rounds":
        unit = "requests of the recorded rounds"
    else:
        unit = "none (a profile without rounds)" if table and table[0][2] is table[0][1] else "requests"
    return PlanResult(
        source=source,
        kind=kind,
        budget=None if eps is None else {"eps": float(eps), "divergence": get_divergence(divergence).name},
        draft_lengths=ms,
        cost=cost.to_dict(),
        table=tuple(rows),
        break_even_acceptance=tuple(break_even_acceptance(cost, m) for m in ms),
        best=best,
        interval={"method": "percentile bootstrap", "level": level, "resamples": resamples, "unit": unit},
        notes=tuple(notes),
    )
