r"""Speculative contrastive decoding (SCD): SpS against the contrastive distribution.

The verifier (expert) checks the drafter's (amateur's) tokens against the contrastive row

.. math:: \pi_x \propto \exp\Bigl(\frac{(1+\beta) z^E_x - \beta z^A_x}{T}\Bigr)\, 1[x \in G],

with :math:`z^E, z^A` the verifier's and drafter's logits before temperature and truncation,
T the decoding temperature, and G the plausibility gate; then :math:`a_n = \min(1, \pi_n/p_n)`
and recovery :math:`\mathrm{normalize}(\max(0, \pi - p))`, so one step emits :math:`\pi`.
In probabilities (:math:`\tilde q, \tilde p` the raw, temperature-1 rows, q the processed
verifier): the logits' normalizers cancel, and

``gate="expert_toppk"`` (G = support of the processed q, i.e. the verifier's own
top-k/top-p set): on G, q is the temperature-T row renormalized, so
:math:`\pi \propto q^{1+\beta}\, \tilde p^{-\beta/T}` on :math:`\{q > 0\}`;

``gate="alpha"`` (the improved contrastive-decoding gate
:math:`z^E_x \ge \max z^E + T\log\alpha`, i.e. :math:`q_T(x) \ge \alpha \max q_T` with
:math:`q_T \propto \tilde q^{1/T}`): :math:`G = \{\tilde q_x \ge \alpha^T \max \tilde q\}` and
:math:`\pi \propto \tilde q^{(1+\beta)/T}\, \tilde p^{-\beta/T}` on G. This G is read from the
raw row, so it can hold tokens outside a truncated q (then KL(h || q) is infinite).

:math:`\beta = 0` with the top-p/top-k gate is SpS exactly (:math:`\pi = q`). Without raw rows
the processed ones stand in.

**A drafter's raw probability of 0 on G (a stated limit).** There the amateur logit is
:math:`-\infty` and the contrastive score :math:`+\infty`. The overlay raises a ValueError
("SCD amateur logits must be finite on the gate support"); this rule takes the limit
:math:`\tilde p_x \to 0` of those entries, the other logits fixed: :math:`\pi` puts all its
mass on :math:`Z = G \cap \{\tilde p = 0\}`, :math:`\pi \propto q^{1+\beta}` (or
:math:`\tilde q^{(1+\beta)/T}`) on Z. It is the overlay's :math:`\pi` in the limit of a
finite, falling amateur logit, so the rule stays defined (and continuous) on every row. Where
the processed drafter p is 0 on Z too (a zero raw row stays zero under temperature and
truncation), the acceptance :math:`\sum_x \min(\pi_x, p_x)` is **0** and the step emits
:math:`\pi`. Recorded rows can hold such zeros (a drafter that never proposes a token, or a
probability below the storage format's smallest value): the shipped distilled recording has
them on G at about a quarter of its positions (``docs/engines.md`` gives the count), where
SCD with :math:`\beta > 0` accepts nothing. A caller that wants the overlay's behaviour drops
the rows whose raw drafter row is 0 somewhere on G (for the default gate,
``((raw_draft_probs <= 0) & (target_probs > 0)).any(-1)``).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\beta` = ``scd_beta``, T = ``scd_temperature``, :math:`\alpha` = ``scd_alpha``.

References
----------
Yuan, Lu, Huang, Yuan, Zhou, "Speculative Contrastive Decoding", ACL 2024, arXiv 2311.08981
(verification against the contrastive distribution, resampling from its residual); the form of
the contrastive row and the gates as the arXiv 2607.08690 vLLM overlay computes them
(``relaxed_target_method="scd_expert_toppk_gated"`` / ``"scd_alpha"``, knobs ``scd_beta``
(grid 0.1, 0.5, 1.0), ``scd_temperature`` (default: the request temperature), ``scd_alpha``;
``apply_scd_constraint``, ``scd_alpha_gate_from_logits``); the alpha gate and the
:math:`(1+\beta) z^E - \beta z^A` score are O'Brien & Lewis's improved contrastive decoding
(arXiv 2309.09117).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import TargetPlan
from .registry import Knob, Rule, RuleSpec, register


def _safe_log(xp, x):
    """log x where x > 0, 0 elsewhere (the callers mask those entries)."""
    pos = x > 0
    return xp.log(xp.where(pos, x, xp.ones_like(x)))


def scd_target(
    target_probs,
    draft_probs,
    scd_beta: float,
    scd_temperature: float = 1.0,
    gate: str = "expert_toppk",
    scd_alpha: float = 0.1,
    raw_target_probs=None,
    raw_draft_probs=None,
):
    r"""The SCD contrastive row :math:`\pi` (module docstring), array-agnostic, rows [..., V].

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        Processed q and p.
    scd_beta, scd_temperature, gate, scd_alpha
        :math:`\beta \ge 0`, T > 0 (a float, or an array of shape [..., 1]: one T per row),
        ``"expert_toppk"`` or ``"alpha"``, :math:`0 < \alpha \le 1`.
    raw_target_probs, raw_draft_probs : array, shape (..., V), optional
        Raw (temperature-1) rows; default the processed ones.

    Returns
    -------
    array, shape (..., V)
        :math:`\pi`, a probability row.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
    Source: Yuan et al., ACL 2024 (arXiv 2311.08981); arXiv 2607.08690's vLLM overlay.
    """
    xp = array_namespace(target_probs, draft_probs)
    q = target_probs
    rq = q if raw_target_probs is None else raw_target_probs
    rp = draft_probs if raw_draft_probs is None else raw_draft_probs
    beta = float(scd_beta)
    # the knob (a float, validated by the registry) or an array T of shape [..., 1] giving each
    # row its own temperature (an engine's requests): the expressions below take either
    T = scd_temperature
    if gate == "expert_toppk":
        if beta == 0.0:
            return q  # pi = q on its own support: SpS
        G = q > 0
        base = (1.0 + beta) * _safe_log(xp, q)
    else:
        top = xp.max(rq, axis=-1, keepdims=True)
        G = (rq >= (scd_alpha**T) * top) & (rq > 0)
        base = ((1.0 + beta) / T) * _safe_log(xp, rq)
    if beta > 0.0:
        score = base - (beta / T) * _safe_log(xp, rp)
        inf_p = G & (rp <= 0)  # contrastive score +inf: the limit rp -> 0
    else:
        score = base
        inf_p = xp.zeros_like(G)
    neg_inf = xp.full_like(score, -math.inf)
    limit = xp.any(inf_p, axis=-1, keepdims=True)
    use = xp.where(limit, inf_p, G & ~inf_p)
    s = xp.where(use, score, neg_inf)
    s = xp.where(limit, xp.where(use, base, neg_inf), s)
    top_s = xp.max(s, axis=-1, keepdims=True)
    w = xp.where(use, xp.exp(xp.where(use, s - top_s, xp.zeros_like(s))), xp.zeros_like(s))
    return w / xp.sum(w, axis=-1, keepdims=True)


class SpeculativeContrastive(Rule):
    r"""SCD: SpS against the gated contrastive row :math:`\pi` (module docstring).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Yuan et al., ACL 2024 (arXiv 2311.08981); arXiv 2607.08690's vLLM overlay.
    """

    def __init__(self, scd_beta: float, scd_temperature: float, gate: str, scd_alpha: float):
        self.scd_beta = scd_beta
        self.scd_temperature = scd_temperature
        self.gate = gate
        self.scd_alpha = scd_alpha

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        r"""``TargetPlan(pi)`` (the contrastive row reads the raw rows where given)."""
        pi = scd_target(
            target_probs,
            draft_probs,
            self.scd_beta,
            self.scd_temperature,
            self.gate,
            self.scd_alpha,
            raw_target_probs,
            raw_draft_probs,
        )
        return TargetPlan(target_probs, draft_probs, pi)


register(
    RuleSpec(
        name="scd",
        factory=SpeculativeContrastive,
        knobs=(
            Knob("scd_beta", 0.5, 0.0, math.inf, doc="beta: contrast strength (overlay grid 0.1, 0.5, 1.0)"),
            Knob(
                "scd_temperature",
                1.0,
                0.0,
                math.inf,
                low_open=True,
                doc="T: the decoding temperature dividing the contrastive score (overlay: the request's)",
                request="temperature",
            ),
            Knob(
                "gate",
                "expert_toppk",
                choices=("expert_toppk", "alpha"),
                doc="plausibility set: the processed q's support, or q_T >= alpha max q_T",
            ),
            Knob("scd_alpha", 0.1, 0.0, 1.0, low_open=True, doc="alpha of the alpha gate (0 < alpha <= 1)"),
        ),
        calibrated=("scd_beta", "scd_temperature", "scd_alpha"),
        sps_knobs={"scd_beta": 0.0, "gate": "expert_toppk"},
        needs_raw=True,
        family="target",
        summary="speculative contrastive decoding: SpS against pi ~ q^(1+b) p~^(-b/T) on q's support",
        reference="Yuan et al., ACL 2024 (arXiv 2311.08981); arXiv 2607.08690 vLLM overlay "
        "(scd_expert_toppk_gated, scd_alpha)",
    )
)
