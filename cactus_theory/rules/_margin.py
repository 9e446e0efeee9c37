r"""Margin-aware relaxation (after MARS, arXiv 2601.15498): accept the runner-up when the
verifier barely prefers its top token.

.. warning::
   The exact verification rule of MARS could not be read: only its abstract and third-party
   summaries were reachable. Verified from them: the rule is training-free, it "conditions
   verification on decision stability measured directly from the target logits", it "relaxes
   rejection only when strict verification provides minimal benefit", in "low-margin regimes
   where the target model exhibits weak preference among top candidates", by not "rejecting
   plausible runner-up tokens", with "a single global threshold" on the logit margin. This
   module implements the rule those statements define and nothing more; it is **not** a
   verified reproduction of MARS.

The drafted token n is accepted **deterministically** iff it is the verifier's top token, or it
is the runner-up and the top-1/top-2 logit margin is at most :math:`\theta`:

.. math:: \tilde q_n = \tilde q_{(1)} \quad\text{or}\quad
          \Bigl(\tilde q_n \ge \tilde q_{(2)} > 0 \ \text{and}\
          \log\frac{\tilde q_{(1)}}{\tilde q_{(2)}} \le \theta\Bigr),

with :math:`\tilde q` the raw (temperature-1) verifier row (a logit difference is a
log-probability difference); on rejection the verifier's argmax is emitted (greedy
verification). :math:`\theta = 0` is strict greedy acceptance except at exact ties. The
drafter's p is never read.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``, unused), n drafted token,
:math:`\theta` = ``margin_threshold`` (nats).

References
----------
Song, Wang, Wang, Lei, Shi, Han, Yang, Chang, Ai, "MARS: Unleashing the Power of Speculative
Decoding via Margin-Aware Verification", arXiv 2601.15498 (abstract); the exact rule and its
published threshold were not verified.
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import DecisionPlan, _one_hot
from .registry import Knob, Rule, RuleSpec, register


def top_two(rq):
    """The largest and second largest entries per row, shapes [..., 1] (0 for V = 1)."""
    xp = array_namespace(rq)
    V = rq.shape[-1]
    s = xp.sort(rq, axis=-1)
    first = s[..., V - 1 : V]
    second = s[..., V - 2 : V - 1] if V > 1 else xp.zeros_like(first)
    return first, second


class MarginRelaxed(Rule):
    r"""Accept the top token, or the runner-up when :math:`\log(\tilde q_{(1)}/\tilde q_{(2)})
    \le \theta`; recover the argmax of q.

    Symbols: q verifier (``target_probs``), p drafter (unused), n drafted token.
    Source: the abstract of arXiv 2601.15498 (module warning).
    """

    def __init__(self, margin_threshold: float):
        self.margin_threshold = margin_threshold

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``DecisionPlan``: 0/1 acceptance from the raw verifier row's top two, argmax-q recovery."""
        xp = array_namespace(target_probs)
        rq = target_probs if raw_target_probs is None else raw_target_probs
        first, second = top_two(rq)
        low_margin = (second > 0) & (second >= first * math.exp(-self.margin_threshold))
        ok = (rq >= first) | (low_margin & (rq >= second))
        accept = xp.astype(ok, target_probs.dtype)
        top = _one_hot(xp.argmax(target_probs, axis=-1), target_probs.shape[-1], target_probs)
        return DecisionPlan(target_probs, draft_probs, accept, top)


register(
    RuleSpec(
        name="margin-relaxed",
        factory=MarginRelaxed,
        knobs=(
            Knob(
                "margin_threshold",
                1.0,
                0.0,
                math.inf,
                doc="theta: accept the runner-up if the top-1/top-2 logit margin <= theta (nats; "
                "no published value verified)",
            ),
        ),
        sps_note="greedy acceptance: 0/1 decisions that ignore p and an argmax recovery; no "
        "theta gives SpS (theta = 0 is strict greedy acceptance up to ties)",
        deterministic=True,
        reads_draft=False,
        needs_raw=True,
        family="decision",
        summary="margin-aware relaxation (reading of MARS): accept top-1, or top-2 if "
        "log(q~(1)/q~(2)) <= theta; recover argmax q",
        reference="after MARS, arXiv 2601.15498 (abstract only; exact rule not verified)",
    )
)
