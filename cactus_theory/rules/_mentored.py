r"""Mentored decoding (Tran-Thien 2023): SpS against the acceptance-optimal target within a budget.

.. math:: \pi = \arg\max_{\pi\in\Delta_V} \sum_x \min(p_x, \pi_x) \quad\text{s.t.}\quad
          D(\pi \| q) \le D_{budget},

then :math:`a_n = \min(1, \pi_n / p_n)` and recovery :math:`\mathrm{normalize}(\max(0, \pi - p))`,
so the emitted distribution is :math:`\pi` exactly and :math:`D(\pi\|q) \le` budget holds for
what is actually emitted. One registry entry, ``mentored``, with the divergence as a knob
(default KL): ``divergence="kl"`` constrains :math:`KL(\pi\|q)`, ``"reverse_kl"``
constrains :math:`KL(q\|\pi)` (the blog does not fix the direction), and the other
divergences of :mod:`cactus_theory.divergences`; ``mentored-kl``, ``mentored-reverse-kl``, ...
are aliases with the knob fixed.
The solver is :mod:`cactus_theory.solvers._mentored` (exact; clip form
:math:`\pi = \mathrm{clip}(p, aq, bq)` on supp(q), plus mass off supp(q) for divergences
with a finite slope at infinity once the budget allows it).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
``D`` the budget (the blog's name).

References
----------
V. Tran-Thien, "An optimal lossy variant of speculative decoding", Hugging Face blog (2023);
Narasimhan et al., ICLR 2025 (arXiv 2405.19261), Table 3 ("lossy speculative decoding").
"""

from __future__ import annotations

import math

from ..divergences import DIVERGENCES
from ..solvers.internal import mentored_target_rows
from .plans import TargetPlan
from .registry import Knob, Rule, RuleSpec, register, register_alias

#: The blog fixes no default budget; 0.1 nats is ours (documented in the registry).
DEFAULT_BUDGET = 0.1


class Mentored(Rule):
    r"""SpS against the optimal target :math:`\pi` with :math:`D(\pi\|q) \le` ``D``.

    .. warning::
       The blog states the problem for KL without fixing its direction and gives no default
       budget; ``D = 0.1`` is our default. For divergences with a finite cost off supp(q)
       (reverse KL, Neyman chi-square, Hellinger, TV, JS) and a truncated q, :math:`\pi` can
       put mass where q = 0 (the clip form of the blog does not hold there).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, D: float, divergence: str):
        self.D = D
        self.divergence = divergence

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``TargetPlan(pi)`` with pi from the exact solver (array-agnostic)."""
        return TargetPlan(
            target_probs,
            draft_probs,
            mentored_target_rows(target_probs, draft_probs, self.D, self.divergence),
        )


register(
    RuleSpec(
        name="mentored",
        factory=Mentored,
        knobs=(
            Knob(
                "D",
                DEFAULT_BUDGET,
                0.0,
                math.inf,
                doc="budget on the emitted distribution's divergence (blog: D; no default there)",
            ),
            Knob(
                "divergence", "kl", choices=tuple(DIVERGENCES), doc="divergence of the budget D(pi || q) <= D"
            ),
        ),
        sps_knobs={"D": 0.0},
        family="target",
        summary="Mentored decoding: acceptance-optimal target with D(pi||q) <= D",
        reference="Tran-Thien 2023, HF blog 'An optimal lossy variant of speculative decoding'",
    )
)

for _name in DIVERGENCES:
    register_alias(f"mentored-{_name.replace('_', '-')}", "mentored", divergence=_name)
