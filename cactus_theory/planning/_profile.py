r"""Acceptance profiles: the per-position survival of a draft chain, read, written and checked.

A round drafts up to K tokens; the verifier accepts a prefix of N of them (longest-prefix
verification). The profile is the survival

.. math:: S_j = P(N \ge j), \qquad j = 1, \dots, K

(NVIDIA's ``marginal_accept_rates``, vLLM's per-position accepted counts over the rounds), its
conditional rates :math:`c_j = S_j / S_{j-1}` (``conditional_accept_rates``, :math:`S_0 = 1`)
and the mean accepted length with the bonus token, which the survival fixes exactly:

.. math:: E[N + 1] = 1 + \sum_{j \le K} S_j .

:meth:`AcceptanceProfile.check_identity` compares a reported mean with that sum (NVIDIA Model
Optimizer's ``speculation_profile.json`` check, tolerance 0.02); :meth:`AcceptanceProfile.check_curve`
checks a measured curve (survival in [0, 1] and nonincreasing) without assuming the
conditional rates fall with depth (they rise on some pairs). A profile built from recorded
rounds keeps the exact survival of each round, given its drafts
(:math:`S_{r,j} = \prod_{i \le j} a_{r,i}`, :func:`cactus_theory.simulate.survival_probabilities`),
which :meth:`AcceptanceProfile.request_anomaly` uses for per-request tail probabilities.

Symbols: q verifier, p drafter, n drafted token, N accepted drafts of a round, K drafts.

References
----------
Leviathan et al. 2023 (arXiv 2211.17192), Section 3.1; NVIDIA Model Optimizer,
``examples/specdec_bench/specdec_bench/speculation_profile.py`` (schema 1.0); vLLM V1
``vllm:spec_decode_num_accepted_tokens_per_pos`` and ``vllm:spec_decode_num_drafts``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._io import atomic_write_text
from ..results import Result
from ..results.internal import _internal

__all__ = ["AcceptanceProfile"]

#: NVIDIA's ``speculation_profile.json`` schema version written and read.
_SCHEMA_VERSION = "1.0"
#: Tolerance of the identity 1 + sum of marginals = mean accepted length (NVIDIA's default).
_IDENTITY_TOLERANCE = 0.02
#: Round-off allowed when checking that a survival is nonincreasing and inside [0, 1] (files
#: store 6 decimals; float64 products are exact to ~1e-15).
_CURVE_SLACK = 1e-6


def _survival_rows(survival, name: str) -> np.ndarray:
    s = np.asarray(survival, dtype=np.float64)
    if s.ndim == 1:
        s = s[None]
    if s.ndim != 2 or s.shape[1] == 0:
        raise ValueError(f"{name}: expected shape (K,) or (rounds, K) with K >= 1, got {np.shape(survival)}")
    if not np.all(np.isfinite(s)) or np.any((s < -_CURVE_SLACK) | (s > 1 + _CURVE_SLACK)):
        raise ValueError(f"{name}: survival probabilities must lie in [0, 1]")
    if np.any(np.diff(s, axis=1) > _CURVE_SLACK):
        raise ValueError(f"{name}: survival must be nonincreasing along the drafts")
    return np.clip(s, 0.0, 1.0)


@dataclass(frozen=True)
class AcceptanceProfile(Result):
    r"""The per-position survival :math:`S_j = P(N \ge j)` of a draft chain, j = 1..K.

    Build one from a recording (:meth:`from_dump`, :meth:`from_recorder`), from engine counters
    (:meth:`from_vllm_metrics`), from a file (:meth:`read`) or from survival rows
    (:meth:`from_survival`); write NVIDIA's format with :meth:`write`.

    Attributes
    ----------
    marginal : tuple of float
        :math:`S_1, \dots, S_K` (NVIDIA's ``marginal_accept_rates``).
    mean_accept_length : float or None
        The reported mean tokens per verification round, bonus included (None: not reported;
        then :attr:`implied_mean_accept_length` is the mean).
    histogram : dict or None
        Accept length (1..K+1, bonus included) -> count or probability.
    source : str
        What the profile was built from.
    meta : dict
        Provenance (rule, knobs, draft length, counts).
    """

    marginal: tuple
    mean_accept_length: float | None = None
    histogram: dict | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)
    round_survival: np.ndarray | None = _internal(default=None)
    round_request: np.ndarray | None = _internal(default=None)

    def __post_init__(self):
        s = _survival_rows(self.marginal, "marginal")[0]
        object.__setattr__(self, "marginal", tuple(float(x) for x in s))

    # ------------------------------------------------------------------ derived numbers
    @property
    def num_speculative_tokens(self) -> int:
        """K, the drafts per round the profile covers."""
        return len(self.marginal)

    @property
    def conditional(self) -> tuple:
        r""":math:`c_j = S_j / S_{j-1}` (:math:`S_0 = 1`; 0 after a zero survival)."""
        s = np.concatenate([[1.0], self.marginal])
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(s[:-1] > 0, s[1:] / np.where(s[:-1] > 0, s[:-1], 1.0), 0.0)
        return tuple(float(x) for x in c)

    @property
    def implied_mean_accept_length(self) -> float:
        r""":math:`1 + \sum_j S_j`: the mean tokens per round the survival fixes."""
        return 1.0 + float(sum(self.marginal))

    def tokens_per_call(self, k: int) -> float:
        r""":math:`E_k = 1 + \sum_{j \le k} S_j`: expected tokens of a round verifying k drafts."""
        k = int(k)
        if not 0 <= k <= self.num_speculative_tokens:
            raise ValueError(f"k: must lie in 0..{self.num_speculative_tokens}, got {k}")
        return 1.0 + float(sum(self.marginal[:k]))

    def __repr__(self) -> str:
        s = ", ".join(f"{x:.3f}" for x in self.marginal)
        return (
            f"AcceptanceProfile(K={self.num_speculative_tokens}, marginal=[{s}], "
            f"mean accept length {self.implied_mean_accept_length:.3f}, source={self.source!r})"
        )

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_survival(cls, survival, *, requests=None, source: str = "survival", meta=None):
        r"""The profile of survival rows, one per round: :math:`S_j` is their mean.

        Parameters
        ----------
        survival : array_like, shape (K,) or (rounds, K), or a list of 1-D arrays
            :math:`S_{r,1..K_r}` per round (nonincreasing, in [0, 1]); rounds that drafted fewer
            than K tokens are padded with 0 (a round cannot accept beyond its drafts).
        requests : array_like of int, shape (rounds,), optional
            The request of each round (per-request anomaly, bootstrap over requests).
        """
        if isinstance(survival, (list, tuple)) and survival and np.ndim(survival[0]) == 1:
            k = max(len(r) for r in survival)
            rows = np.zeros((len(survival), k))
            for i, r in enumerate(survival):
                rows[i, : len(r)] = _survival_rows(r, "survival")[0]
        else:
            rows = _survival_rows(survival, "survival")
        req = None
        if requests is not None:
            req = np.asarray(requests, dtype=np.int64).reshape(-1)
            if req.shape[0] != rows.shape[0]:
                raise ValueError(f"requests: {req.shape[0]} entries for {rows.shape[0]} rounds")
        hist = _histogram(rows)
        return cls(
            tuple(rows.mean(axis=0)),
            None,
            hist,
            source,
            dict(meta or {}, rounds=int(rows.shape[0])),
            rows,
            req,
        )

    @classmethod
    def from_dump(cls, dump, *, rule: str = "sps", m: int | None = None, max_positions=None, **knobs):
        """The exact profile of a recording under a rule (see :func:`._recording.dump_profile`).

        Parameters
        ----------
        dump : Dump, str or Path
            A loaded dump, a dump file or a shipped recording's name. Decoding records (``cactus-theory
            decode``) give each recorded round's exact survival given its drafts; a teacher-forced
            recording gives the exact chain's survival at draft length ``m`` (default 4).
        rule : str
            The rule, configured with ``**knobs``.
        max_positions : int, optional
            A teacher-forced dump's first trajectories up to at least this many positions.
        """
        from ._recording import dump_profile_fields

        return cls(**dump_profile_fields(dump, rule=rule, m=m, max_positions=max_positions, **knobs))

    @classmethod
    def from_recorder(cls, folder, *, rule: str = "sps", **knobs):
        """The exact profile of the rounds a vLLM recorder saved (:mod:`cactus_theory.integrations.vllm`).

        Each round's survival is :math:`\\prod_{i \\le j} a_i` at its recorded drafts; the engine's
        accepted counts become ``histogram`` and ``mean_accept_length`` (so
        :meth:`check_identity` holds the engine against the exact survival).
        """
        from ._recording import recorder_profile_fields

        return cls(**recorder_profile_fields(folder, rule=rule, **knobs))

    @classmethod
    def from_vllm_metrics(cls, text: str, *, source: str = "vllm /metrics"):
        """The measured profile of vLLM's Prometheus counters (the text of ``/metrics``).

        :math:`S_j` = ``spec_decode_num_accepted_tokens_per_pos[j-1] / spec_decode_num_drafts``;
        the reported mean is ``1 + num_accepted_tokens / num_drafts``.
        """
        from ._recording import parse_vllm_metrics

        per_pos, drafts, accepted = parse_vllm_metrics(text)
        if drafts <= 0:
            raise ValueError("text: vllm:spec_decode_num_drafts is 0 or missing (no speculative rounds)")
        meta = {"num_drafts": int(drafts), "accepted_per_pos": [int(x) for x in per_pos]}
        mean = None if accepted is None else 1.0 + accepted / drafts
        return cls(tuple(np.asarray(per_pos, dtype=np.float64) / drafts), mean, None, source, meta)

    # ------------------------------------------------------------------ NVIDIA's file
    def to_nvidia(self, *, method: str | None = None, draft_checkpoint=None, target_model=None) -> dict:
        """The profile as NVIDIA's ``speculation_profile.json`` payload (schema 1.0)."""
        k = self.num_speculative_tokens
        mean = (
            self.mean_accept_length
            if self.mean_accept_length is not None
            else self.implied_mean_accept_length
        )
        hist = None if self.histogram is None else {str(a): b for a, b in self.histogram.items()}
        return {
            "schema_version": _SCHEMA_VERSION,
            "measured": True,
            "method": method,
            "draft_checkpoint": draft_checkpoint,
            "target_model": target_model,
            "num_speculative_tokens": k,
            "block_size": None,
            "max_supported_k": k,
            "verification_method": "longest_prefix",
            "conditional_accept_rates": [round(x, 6) for x in self.conditional],
            "marginal_accept_rates": [round(x, 6) for x in self.marginal],
            "mean_accept_length": round(mean, 6),
            "mean_accept_length_per_request": None,
            "accept_length_model": "chain_analytic",
            "accept_length_by_k": {str(k): round(mean, 6)},
            "acceptance_length_histogram": hist,
            "per_category": None,
            "measurement_conditions": {"source": self.source, **self.meta},
            "validation": {
                "mean_consistency": self.check_identity(),
                "marginal_monotonicity": self.check_curve(),
            },
        }

    def write(self, path, **provenance) -> Path:
        """Write :meth:`to_nvidia` as JSON to ``path`` (atomically); returns the path."""
        from .._tables import json_ready

        atomic_write_text(str(path), json.dumps(json_ready(self.to_nvidia(**provenance)), indent=2) + "\n")
        return Path(path)

    @classmethod
    def read(cls, path):
        """Read NVIDIA's ``speculation_profile.json`` (or its dict).

        The marginal rates are the survival; ``mean_accept_length`` and
        ``acceptance_length_histogram`` are kept as reported.
        """
        if isinstance(path, dict):
            data, source = path, "speculation_profile"
        else:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(
                    f"path: cannot read a speculation profile from {str(path)!r} ({exc})"
                ) from None
            source = str(path)
        if not isinstance(data, dict) or not data.get("marginal_accept_rates"):
            raise ValueError("path: not a speculation profile (no marginal_accept_rates)")
        hist = data.get("acceptance_length_histogram")
        hist = None if not hist else {int(a): float(b) for a, b in hist.items()}
        meta = {
            k: data[k]
            for k in ("method", "num_speculative_tokens", "schema_version")
            if data.get(k) is not None
        }
        mean = data.get("mean_accept_length")
        return cls(
            tuple(data["marginal_accept_rates"]), None if mean is None else float(mean), hist, source, meta
        )

    # ------------------------------------------------------------------ checks
    def check_identity(self, tolerance: float = _IDENTITY_TOLERANCE) -> dict:
        r"""The identity :math:`1 + \sum_j S_j = E[N + 1]` against the reported mean.

        Returns a dict (``implied``, ``reported``, ``abs_delta``, ``tolerance``, ``passed``); with
        no reported mean, the histogram's mean is the reported one, and with neither the
        identity holds by construction (``passed`` True, ``reported`` None).
        """
        reported = self.mean_accept_length
        if reported is None and self.histogram:
            n = sum(self.histogram.values())
            reported = sum(a * b for a, b in self.histogram.items()) / n if n else None
        implied = self.implied_mean_accept_length
        delta = None if reported is None else abs(implied - reported)
        return {
            "implied": implied,
            "reported": reported,
            "abs_delta": delta,
            "tolerance": float(tolerance),
            "passed": delta is None or delta <= tolerance,
        }

    def check_curve(self) -> dict:
        """A measured survival curve's checks, rates rising or falling with depth both allowed.

        The survival must lie in [0, 1] and be nonincreasing (an engine cannot accept draft
        j + 1 without draft j); the conditional rates may rise with depth (vLLM #52992 reports
        0.71 to 0.89) or fall. Returns ``passed``, ``violations`` (positions, 1-based, where the
        survival rises) and ``conditional_trend`` ("rising", "falling", "flat" or "mixed").
        """
        s = np.asarray(self.marginal)
        bad = [int(j) + 2 for j in np.flatnonzero(np.diff(s) > _CURVE_SLACK)]
        c = np.asarray(self.conditional)
        c = c[np.concatenate([[True], s[:-1] > 0])]
        d = np.diff(c)
        trend = (
            "flat"
            if d.size == 0 or np.all(np.abs(d) <= _CURVE_SLACK)
            else "rising"
            if np.all(d >= -_CURVE_SLACK)
            else "falling"
            if np.all(d <= _CURVE_SLACK)
            else "mixed"
        )
        return {"passed": not bad, "violations": bad, "conditional_trend": trend}

    def request_anomaly(self, accepted_counts, *, alpha: float = 1e-3):
        """Each request's accepted count against the exact law of its recorded rounds.

        See :func:`._anomaly.request_anomaly` (needs a profile built from recorded rounds with
        their requests).
        """
        from ._anomaly import request_anomaly

        if self.round_survival is None or self.round_request is None:
            raise ValueError("accepted_counts: this profile has no recorded rounds per request")
        return request_anomaly(self.round_survival, self.round_request, accepted_counts, alpha=alpha)


def _histogram(rows: np.ndarray) -> dict:
    """Mean over rounds of :math:`P(N + 1 = \\ell)`, ℓ = 1..K+1, from survival rows."""
    k = rows.shape[1]
    s = np.concatenate([np.ones((rows.shape[0], 1)), rows, np.zeros((rows.shape[0], 1))], axis=1)
    pmf = (s[:, :-1] - s[:, 1:]).mean(axis=0)
    return {j + 1: float(pmf[j]) for j in range(k + 1)}
