r"""Cost models of a speculative round: drafting per token, verifying k tokens in one call.

A round that drafts m tokens and verifies them (with the bonus position, m + 1 tokens in one
verifier call) costs

.. math:: c(m) = m\, c_d + c_v(m + 1),

and plain decoding costs :math:`c_v(1)` per token. With :math:`E_m` the expected tokens a round
emits (accepted drafts plus the recovered or bonus token), the predicted speedup over plain
decoding is

.. math:: \mathrm{speedup}(m) = \frac{E_m / c(m)}{1 / c_v(1)} = \frac{E_m\, c_v(1)}{m\, c_d + c_v(m + 1)}

(Leviathan et al. 2023, Section 3.4, with the verifier's cost a function of the tokens it
verifies; on a GPU :math:`c_v(k) \approx c_v(1)`, on a CPU it grows with k). Everything else a
real loop spends (sampling, the rule's own step, cache bookkeeping, scheduling) is left out.

Symbols: m draft length, :math:`c_d` drafter cost per token, :math:`c_v(k)` verifier cost of a
call over k tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .._io import atomic_write_text
from ..results import Result

__all__ = ["CostModel"]

#: Tokens per verifier call tabulated by :meth:`CostModel.from_numbers` (m up to 63).
_TABULATED = 64


def _positive(x, name) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {x!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name}: must be finite and >= 0, got {x!r}")
    return v


@dataclass(frozen=True)
class CostModel(Result):
    r"""Drafter cost per token :math:`c_d` and verifier cost :math:`c_v(k)`, k = 1..K tokens.

    Build one from numbers (:meth:`from_numbers`), a timing file (:meth:`read`) or a
    measurement of the shipped SmolLM2 pair (:meth:`measure`).

    Attributes
    ----------
    draft_cost : float
        :math:`c_d` (any unit, the same as ``verify_costs``).
    verify_costs : tuple of float
        :math:`c_v(1), \dots, c_v(K)`: one verifier call over k tokens (> 0).
    unit : str
    source : str
        Where the numbers come from.
    load : dict or None
        The machine's load when measured (``os.getloadavg`` before and after, CPU count).
    """

    draft_cost: float
    verify_costs: tuple
    unit: str = "verifier steps"
    source: str = "numbers"
    load: dict | None = field(default=None)

    def __post_init__(self):
        d = _positive(self.draft_cost, "draft_cost")
        v = self.verify_costs
        v = (v,) if isinstance(v, (int, float)) else tuple(v)
        if not v:
            raise ValueError("verify_costs: give the cost of verifying 1, 2, ... tokens")
        v = tuple(_positive(x, "verify_costs") for x in v)
        if v[0] <= 0:
            raise ValueError("verify_costs: verifying one token must cost more than 0")
        object.__setattr__(self, "draft_cost", d)
        object.__setattr__(self, "verify_costs", v)

    @property
    def max_draft_length(self) -> int:
        """The longest draft whose round cost the model covers (K - 1)."""
        return len(self.verify_costs) - 1

    @property
    def cost_ratio(self) -> float:
        r""":math:`c_d / c_v(1)`, the drafter's cost per token relative to a plain step."""
        return self.draft_cost / self.verify_costs[0]

    def verify(self, k: int) -> float:
        """:math:`c_v(k)`, one verifier call over k tokens."""
        if not 1 <= int(k) <= len(self.verify_costs):
            raise ValueError(f"k: the cost model covers 1..{len(self.verify_costs)} verified tokens, got {k}")
        return self.verify_costs[int(k) - 1]

    def round_cost(self, m: int) -> float:
        r""":math:`c(m) = m c_d + c_v(m + 1)`; :math:`c(0) = c_v(1)`, one plain step."""
        return int(m) * self.draft_cost + self.verify(int(m) + 1)

    def speedup(self, tokens_per_call: float, m: int) -> float:
        r"""Predicted speedup over plain decoding, :math:`E_m c_v(1) / c(m)`."""
        return float(tokens_per_call) * self.verify_costs[0] / self.round_cost(m)

    def __repr__(self) -> str:
        v = ", ".join(f"{x:.4g}" for x in self.verify_costs[:4])
        more = ", ..." if len(self.verify_costs) > 4 else ""
        return (
            f"CostModel(draft {self.draft_cost:.4g}, verify [{v}{more}] {self.unit}, "
            f"ratio {self.cost_ratio:.3g}, source={self.source!r})"
        )

    @classmethod
    def from_numbers(cls, draft_cost: float, verify_cost: float = 1.0, verify_slope: float = 0.0):
        r"""A linear model: :math:`c_v(k) = c_v + s\,(k - 1)` (``verify_slope`` s per extra token).

        ``draft_cost`` and ``verify_cost`` in one unit (e.g. ``from_numbers(0.1)``: a drafted
        token costs a tenth of a plain step, verifying more tokens costs nothing more, the GPU
        picture).
        """
        c, s = _positive(verify_cost, "verify_cost"), _positive(verify_slope, "verify_slope")
        if c <= 0:
            raise ValueError("verify_cost: must be > 0")
        return cls(draft_cost, tuple(c + s * k for k in range(_TABULATED)), source="numbers")

    @classmethod
    def read(cls, path):
        """Read a timing file written by :meth:`write` (JSON: ``draft_cost``, ``verify_costs``,
        optional ``unit``, ``source``, ``load``)."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"path: cannot read a timing file {str(path)!r} ({exc})") from None
        if not isinstance(data, dict) or "draft_cost" not in data or "verify_costs" not in data:
            raise ValueError(f"path: {str(path)!r} has no draft_cost and verify_costs")
        return cls(
            data["draft_cost"],
            tuple(data["verify_costs"]),
            data.get("unit", "seconds"),
            data.get("source", str(path)),
            data.get("load"),
        )

    def write(self, path) -> Path:
        """Write the model as a timing file (JSON, atomically); returns the path."""
        from .._tables import json_ready

        atomic_write_text(str(path), json.dumps(json_ready(self.to_dict()), indent=2) + "\n")
        return Path(path)

    @classmethod
    def measure(
        cls,
        m_max: int = 4,
        *,
        drafter: str = "distilled",
        repeats: int = 7,
        progress: bool = False,
        models=None,
    ):
        """Time the shipped SmolLM2-135M verifier over 1..m_max+1 tokens and a drafter per token.

        See :func:`._measure.measure_costs` (median of interleaved repeats, the load recorded).
        """
        from ._measure import measure_costs

        return cls(**measure_costs(m_max, drafter=drafter, repeats=repeats, progress=progress, models=models))
