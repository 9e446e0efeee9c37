r"""The audit's table rows: each rule's statistic and columns, on rows in memory or chunk by chunk.

Two evaluators with one interface (``statistic``, ``columns``, ``sps_acceptance``,
``result_fields``, ``frontier_line``), used by :func:`cactus_theory.simulate.audit.audit`:

* :class:`CorpusRows`: an :class:`~._audit_corpus.AuditCorpus` in memory. The rule's exact
  per-position laws (:func:`cactus_theory.simulate._chain.position_laws`; Theorem 3), the
  teacher-forced exact chain per trajectory (:func:`cactus_theory.simulate._exact.exact_chain`)
  for the accepted length :math:`AL_m` and the sequence bound
  :math:`\frac1N\sum_t (1-b_t) KL(h_t\|q_t)` (:func:`~.exact.sequence_divergence`), the
  end-of-sequence shift, and the corpus-mean frontier line
  (:func:`cactus_theory.analysis.frontier.corpus_frontier`).
* :class:`ChunkedRows`: a row source read chunk by chunk (no trajectories, no vocabulary ids:
  per-token statistics only; acceptance, emitted KL and TV, the per-position frontier gap).

Symbols: q verifier, p drafter, :math:`h_{alg}` the emitted law, :math:`b_t` the probability
that t is a bonus position. Sources: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3;
Leviathan et al. 2023 (accepted length).
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import as_prob_pair
from ..analysis.frontier import _CORPUS_FRONTIER_DIVERGENCES, corpus_frontier, gap_to_frontier
from ..analysis.internal import Execution, geometric_length_ratio, runner_for
from ..analysis.one_step import emitted_distribution, make_plan
from ..divergences import get_divergence
from ..rules import get_rule
from ._chain import PositionLaws, position_laws
from ._exact import exact_chain, sequence_divergence
from ._metrics import compute_metrics, pool_totals

_KL, _TV = get_divergence("kl"), get_divergence("tv")


def _mean(d, h, q) -> float:
    """The mean over positions of :math:`D(h_t\\|q_t)`."""
    return float(np.mean(d.unchecked(h, q)))


class CorpusRows:
    """Evaluations on an audit corpus in memory (the statistic per token or per sequence)."""

    bar_over_rules = True

    def __init__(self, corpus, per, d, draft_lengths, sequence_m):
        self.c, self.per, self.d, self.ms, self.seq_m = corpus, per, d, draft_lengths, sequence_m
        self.sps_acceptance = float(np.minimum(corpus.target_probs, corpus.draft_probs).sum(-1).mean())

    def _laws(self, name, knobs) -> PositionLaws:
        return position_laws(get_rule(name, **knobs), self.c.rows)

    def _chains(self, laws, m):
        """The exact chain of each trajectory at draft length m (teacher-forced)."""
        out = []
        for t, a, b in zip(self.c.trajectories, self.c.bounds[:-1], self.c.bounds[1:]):
            part = PositionLaws(
                *(
                    x[a:b]
                    for x in (
                        laws.alpha,
                        laws.accept_joint,
                        laws.reject_joint,
                        laws.emitted,
                        laws.target_probs,
                    )
                )
            )
            out.append(exact_chain(None, t, m, laws=part))
        return out

    def _sequence(self, chains, key) -> float:
        """A sequence bound per position: ``key`` of :class:`~.exact.SequenceDivergence` summed."""
        return sum(getattr(sequence_divergence(ch), key) for ch in chains) / self.c.n_positions

    def _statistic(self, laws) -> float:
        if self.per == "token":
            return _mean(self.d, laws.emitted, laws.target_probs)
        return self._sequence(
            self._chains(laws, self.seq_m), "kl_upper" if self.d.name == "kl" else "tv_upper"
        )

    def statistic(self, name, knobs) -> float:
        return self._statistic(self._laws(name, knobs))

    def columns(self, name, knobs, with_statistic):
        """(statistic or None, columns, EOS shift per position or None) of the rule at ``knobs``."""
        laws = self._laws(name, knobs)
        c, q, h, alpha = self.c, laws.target_probs, laws.emitted, laws.alpha
        kl_t = np.asarray(_KL.unchecked(h, q), dtype=np.float64)
        F, gap = gap_to_frontier(c.target_probs, c.draft_probs, np.clip(alpha, 0.0, 1.0), kl_t, "kl")
        row = {
            "acceptance": float(alpha.mean()),
            "relaxed_acceptance": float(alpha.mean()) - self.sps_acceptance,
        }
        chains = {m: self._chains(laws, m) for m in dict.fromkeys(self.ms + (self.seq_m,))}
        for m in self.ms:
            row[f"al_{m}"] = compute_metrics(pool_totals([ch.totals for ch in chains[m]]))["al_paper"].value
        row["emitted_kl"] = float(kl_t.mean())
        row["emitted_tv"] = _mean(_TV, h, q)
        if self.d.name not in ("kl", "tv"):
            row[f"emitted_{self.d.name}"] = _mean(self.d, h, q)
        sd = [sequence_divergence(ch) for ch in chains[self.seq_m]]
        lower, upper = (sum(getattr(x, k) for x in sd) / c.n_positions for k in ("kl_lower", "kl_upper"))
        row["sequence_kl_upper"], row["sequence_kl_lower"] = upper, lower
        row["frontier"], row["frontier_gap"] = float(np.mean(F)), float(np.mean(gap))
        shift = None
        if c.eos is not None:
            q_e, h_e = np.where(c.eos, q, 0.0).sum(-1), np.where(c.eos, h, 0.0).sum(-1)
            shift = h_e - q_e
            row.update(eos_q=float(q_e.mean()), eos_h=float(h_e.mean()), eos_shift=float(shift.mean()))
            row["length_ratio"] = geometric_length_ratio(q_e.reshape(-1), h_e.reshape(-1))
        return (self._statistic(laws) if with_statistic else None), row, shift

    def result_fields(self) -> dict:
        c = self.c
        return dict(
            label=c.label,
            n_positions=c.n_positions,
            n_trajectories=int(len(c.bounds) - 1),
            draft_lengths=self.ms,
            sequence_m=self.seq_m,
            eos_token_id=c.eos_token_id,
        )

    def frontier_line(self, table, eps):
        """The corpus-mean frontier: at eps (returned; per-token calibration in KL or TV only)
        and, in each row, at the rule's own mean KL (``corpus_frontier``, ``corpus_gap``).

        Rules calibrated per token spend a mean budget, so their yardstick is the frontier of
        one multiplier over all positions, not the mean of per-position frontiers at eps (which
        rules beat). Per sequence the calibrated statistic weights positions, so no single line
        at eps bounds every rule; each row still has its own.
        """
        q, p, d = self.c.target_probs, self.c.draft_probs, self.d
        at_eps = None
        if self.per == "token" and d.name in _CORPUS_FRONTIER_DIVERGENCES:
            at_eps = corpus_frontier(q, p, eps, d.name)
        cache = {}
        for row in table:
            kl = row.get("emitted_kl")
            if kl is None or not math.isfinite(kl):
                continue
            if at_eps is not None and d.name == "kl" and eps * (1 - 1e-9) <= kl <= eps:
                F = at_eps  # calibrated: the line at eps (within 1e-9 of its value at kl, and above it)
            else:
                if kl not in cache:
                    cache[kl] = corpus_frontier(q, p, kl, "kl")
                F = cache[kl]
            row["corpus_frontier"] = F
            row["corpus_gap"] = F - row["acceptance"]
        return at_eps


def _chunk_kernel(chunk, name, knobs, divergence, final):
    """Per-row emitted divergence of one rule on a chunk (and, ``final``, every column's rows)."""
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    rq = q if chunk.raw_target_probs is None else np.asarray(chunk.raw_target_probs, dtype=np.float64)
    rp = p if chunk.raw_draft_probs is None else np.asarray(chunk.raw_draft_probs, dtype=np.float64)
    plan = make_plan(get_rule(name, **knobs), q, p, raw_target_probs=rq, raw_draft_probs=rp)
    h = np.asarray(emitted_distribution(plan), dtype=np.float64)
    qq, pp = np.asarray(plan.target_probs, dtype=np.float64), np.asarray(plan.draft_probs, dtype=np.float64)
    D = np.asarray(get_divergence(divergence).unchecked(h, qq), dtype=np.float64)
    if not final:
        return D
    alpha = np.sum(pp * np.clip(plan.accept_probs(), 0.0, 1.0), axis=-1)
    kl = np.asarray(_KL.unchecked(h, qq), dtype=np.float64)
    _, gap = gap_to_frontier(qq, pp, np.clip(alpha, 0.0, 1.0), kl, "kl")
    tv = np.asarray(_TV.unchecked(h, qq), dtype=np.float64)
    return {
        "D": D,
        "alpha": alpha,
        "sps": np.minimum(qq, pp).sum(-1),
        "kl": kl,
        "tv": tv,
        "gap": np.asarray(gap, dtype=np.float64),
    }


class ChunkedRows:
    """Evaluations on a row source, one pass over its chunks each (per-token statistics only)."""

    bar_over_rules = False

    def __init__(self, source, d, execution: Execution):
        self.src, self.d = source, d
        self.run = runner_for(source, "rules", execution)
        self.n = self.run.n_rows
        if self.n == 0:
            raise ValueError("target_probs: no rows")
        self.sps_acceptance = float("nan")  # set by the last pass of columns

    def statistic(self, name, knobs) -> float:
        return (
            float(np.sum(np.concatenate(self.run.map(_chunk_kernel, name, knobs, self.d.name, False))))
            / self.n
        )

    def columns(self, name, knobs, with_statistic):
        """(mean statistic, columns, None) of the rule at ``knobs``: one pass over the chunks."""
        parts = self.run.map(_chunk_kernel, name, knobs, self.d.name, True)
        col = {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}
        self.sps_acceptance = float(col["sps"].mean())
        alpha = float(col["alpha"].mean())
        row = {
            "acceptance": alpha,
            "relaxed_acceptance": alpha - self.sps_acceptance,
            "emitted_kl": float(col["kl"].mean()),
            "emitted_tv": float(col["tv"].mean()),
            "frontier": float(np.mean(col["gap"] + col["alpha"])),
            "frontier_gap": float(col["gap"].mean()),
        }
        return float(col["D"].mean()), row, None

    def result_fields(self) -> dict:
        return dict(
            label=f"{self.src!r}: {self.n} rows",
            n_positions=int(self.n),
            n_trajectories=0,
            draft_lengths=(),
            sequence_m=0,
            eos_token_id=None,
        )

    def frontier_line(self, table, eps):
        """None: the corpus-mean frontier needs every row at once (see :class:`CorpusRows`)."""
        return None
