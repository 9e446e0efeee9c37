r"""Speculative cascades (Narasimhan et al., ICLR 2025): SpS against a deferral target pi.

Each rule builds one target :math:`\pi` from the drafter p and the verifier q and runs
lossless SpS against it (:math:`a_n = \min(1, \pi_n/p_n)`, recovery
:math:`\mathrm{normalize}(\max(0, \pi - p))`), so it emits :math:`\pi` exactly.
The deferral *tests* read the **raw** (temperature-1) distributions :math:`\tilde p, \tilde q`
(``raw_draft_probs``, ``raw_target_probs``), as the official notebook does; :math:`\pi`, the
acceptance ratio and the TV of OPT use the processed ones.

**OPT's gate** (``cascade-opt``'s knob ``gate``): ``"raw"`` (default) compares the raw maxima
:math:`\max\tilde p \ge \max\tilde q - \alpha\,TV(p, q)`, as eq. 10 and the official
notebook do; ``"processed"`` compares the processed maxima :math:`\max p \ge \max q - \alpha\,
TV(p, q)`, the default of the arXiv 2607.08690 vLLM overlay (``spec_cascade_opt_gate``
``"processed"``; its ``"paper"`` is ``"raw"`` here). TV is the processed rows' in both. On rows
without raw distributions (raw = processed) the two gates agree.

========== ======================================================================== =========
rule       :math:`\pi`                                                              SpS at
========== ======================================================================== =========
chow       p if :math:`\max\tilde p \ge 1 - \alpha`, else q (eq. 2)                 alpha=-1
diff       p if :math:`\max\tilde p \ge \max\tilde q - \alpha`, else q (eq. 5)      alpha=-1
opt        p if :math:`\max\tilde p \ge \max\tilde q - \alpha\,TV(p,q)`, else q     alpha=-inf
           (eq. 10)
token-v1   :math:`p_x 1[x\in A] + (1 - p(A)) q_x`,                                   alpha=-1
           :math:`A = \{x: \tilde p_x \ge \max\tilde q - \alpha\}` (eq. 13)
token-v2   same, :math:`A = \{x: \tilde q_x \ge \max\tilde q - \alpha\}` (eq. 14)   alpha=-1
token-v3   same, :math:`A = \{x: \tilde q_x \ge (1-\alpha)\max\tilde q\}` (eq. 15)  alpha=-1
========== ======================================================================== =========

The SpS end of each knob is its own: alpha = 0 is **not** SpS for Chow when p is one-hot
(max p = 1 >= 1), for OPT (p is picked whenever max p >= max q), or for Token-V2/V3 (A still
holds the verifier's argmax). Any alpha < 0 gives SpS for Chow and Token-V3; alpha = -1 does
for Diff, Token-V1 and Token-V2 (their tests need a probability above max q + 1 > 1).

**Ties.** The sets A keep every token that passes the test, ties included: at alpha = 0,
Token-V2/V3's A is every token tied at :math:`\max\tilde q`. The arXiv 2607.08690 vLLM
overlay (``spec_cascade_tok3_top_mask_from_logits``) special-cases alpha = 0 as
``argmax``, which keeps only the first tied token (lowest id), while at 0 < alpha < 1 its
threshold test keeps all ties as here. This module keeps eq. 15 as written at alpha = 0 too:
the set is then the limit of the sets at alpha > 0 (the overlay's jumps there on a tied row,
and depends on the token order). The two agree wherever the top raw verifier entry is unique.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
alpha the lenience (the paper's alpha; the notebook calls it ``lenience``).

References
----------
Narasimhan et al., "Faster Cascades via Speculative Decoding", ICLR 2025, arXiv 2405.19261,
eqs. 2, 5, 10, 13-15; official notebook google-research/google-research
``speculative_cascades/speculative_cascades_gemma.ipynb`` (demo: token-v3, lenience 0.5).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import TargetPlan
from .registry import Knob, Rule, RuleSpec, register

#: rule name -> (alpha range low, high, the alpha giving SpS, equation)
CASCADE_RULES = {
    "chow": (-1.0, 1.0, -1.0, "eq. 2"),
    "diff": (-1.0, 1.0, -1.0, "eq. 5"),
    "opt": (-math.inf, math.inf, -math.inf, "eq. 10"),
    "token-v1": (-1.0, 1.0, -1.0, "eq. 13"),
    "token-v2": (-1.0, 1.0, -1.0, "eq. 14"),
    "token-v3": (-1.0, 1.0, -1.0, "eq. 15"),
}


#: OPT's gate: which maxima the deferral test compares (module docstring).
OPT_GATES = ("raw", "processed")


def cascade_target(
    kind: str,
    alpha: float,
    target_probs,
    draft_probs,
    raw_target_probs=None,
    raw_draft_probs=None,
    gate: str = "raw",
):
    r"""The deferral target :math:`\pi` of a speculative-cascade rule (array-agnostic).

    Parameters
    ----------
    kind : {"chow", "diff", "opt", "token-v1", "token-v2", "token-v3"}
        The deferral rule (module table).
    alpha : float
        Lenience.
    target_probs, draft_probs : array, shape (..., V)
        Processed q and p (build :math:`\pi`).
    raw_target_probs, raw_draft_probs : array, shape (..., V), optional
        Raw q and p the deferral tests read (default: the processed ones).
    gate : {"raw", "processed"}
        OPT's gate (module docstring): ``"processed"`` makes OPT's test read the processed
        rows even where raw ones are given. The other rules read the raw rows.

    Returns
    -------
    array, shape (..., V)
        :math:`\pi`, a probability row.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Narasimhan et al., ICLR 2025 (arXiv 2405.19261) eqs. 2, 5, 10, 13-15; official Gemma notebook.
    """
    q, p = target_probs, draft_probs
    processed_gate = kind == "opt" and gate == "processed"
    rq = q if raw_target_probs is None or processed_gate else raw_target_probs
    rp = p if raw_draft_probs is None or processed_gate else raw_draft_probs
    xp = array_namespace(q, p)
    max_rq = xp.max(rq, axis=-1, keepdims=True)
    max_rp = xp.max(rp, axis=-1, keepdims=True)
    if kind in ("chow", "diff", "opt"):
        if kind == "chow":
            pick = max_rp >= 1.0 - alpha
        elif kind == "diff":
            pick = max_rp >= max_rq - alpha
        else:
            tv = xp.sum(xp.clip(p - q, 0.0, None), axis=-1, keepdims=True)
            if math.isinf(alpha):
                # alpha * TV with TV = 0 is 0 * inf: the limit test is "max p ~ >= max q ~"
                # only where TV = 0 (then p = q and either choice is q) for -inf, always for +inf.
                pick = (tv <= 0) if alpha < 0 else xp.ones_like(tv, dtype=xp.bool)
            else:
                pick = max_rp >= max_rq - alpha * tv
        return xp.where(pick, p, q)
    if kind == "token-v1":
        A = rp >= max_rq - alpha
    elif kind == "token-v2":
        A = rq >= max_rq - alpha
    else:
        A = rq >= (1.0 - alpha) * max_rq
    pA = xp.where(A, p, xp.zeros_like(p))
    rest = 1.0 - xp.sum(pA, axis=-1, keepdims=True)
    return pA + xp.maximum(rest, xp.zeros_like(rest)) * q  # rest < 0 only by rounding


class Cascade(Rule):
    """SpS against a speculative-cascade deferral target (module table).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Narasimhan et al., ICLR 2025 (arXiv 2405.19261) eqs. 2, 5, 10, 13-15; official Gemma notebook.
    """

    def __init__(self, kind: str, alpha: float, gate: str = "raw"):
        self.kind = kind
        self.alpha = alpha
        self.gate = gate

    @property
    def reads_raw(self) -> bool:
        """Whether the plan reads the raw rows: every rule but OPT with ``gate="processed"``."""
        return not (self.kind == "opt" and self.gate == "processed")

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        r"""``TargetPlan(pi)``; the deferral tests read the raw distributions (OPT: its gate)."""
        pi = cascade_target(
            self.kind, self.alpha, target_probs, draft_probs, raw_target_probs, raw_draft_probs, self.gate
        )
        return TargetPlan(target_probs, draft_probs, pi)


_ALPHA_DOC = "lenience (paper's alpha, notebook's 'lenience'; notebook demo 0.5)"
_GATE = Knob(
    "gate",
    "raw",
    choices=OPT_GATES,
    doc="rows whose maxima the test compares: raw (eq. 10, the notebook) or processed (the overlay's default)",
)


def _factory(kind):
    """The registry's factory of one cascade rule (OPT also takes its gate)."""
    if kind == "opt":
        return lambda alpha, gate: Cascade(kind, alpha, gate)
    return lambda alpha: Cascade(kind, alpha)


for _kind, (_lo, _hi, _sps, _eq) in CASCADE_RULES.items():
    register(
        RuleSpec(
            name=f"cascade-{_kind}",
            factory=_factory(_kind),
            knobs=(Knob("alpha", 0.5, _lo, _hi, doc=_ALPHA_DOC),) + ((_GATE,) if _kind == "opt" else ()),
            sps_knobs={"alpha": _sps},
            needs_raw=True,
            family="target",
            summary=f"speculative cascade, {_kind} deferral ({_eq}); emits its target pi exactly",
            reference=f"Narasimhan et al., ICLR 2025 (arXiv 2405.19261) {_eq}; official Gemma notebook",
        )
    )
