r"""What an engine's verification setting costs: the emitted divergence per token it allows.

Each :class:`EngineSetting` is a serving engine's (or a method's released code's) verification
rule at one of its default or documented knob values, with the drafting policy the engine
uses. :func:`setting_costs` evaluates it exactly, position by position, on (q, p) rows: the
acceptance :math:`\sum_n p_n a_n` (p the drafting law) and the emitted law's
:math:`KL(h_{alg} \| q)` and :math:`TV(h_{alg}, q)` per token, averaged over the positions
(corpus average) and at their worst (the largest over the positions). ``docs/engines.md``
holds the table on the shipped recordings (``scripts/update_readme.py``).

:func:`all_settings` lists the engines' settings (``_ENGINE_SETTINGS``), then every other
registered rule at its registry defaults (a rule registered later enters the table by its
registration alone), except the rules of ``_NOT_TABULATED`` (each with the reason it is not tabulated).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`h_{alg}` the emitted distribution (Theorem 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..divergences import get_divergence
from ..rules import RULES, get_rule
from .one_step import acceptance_rate, emitted_distribution, make_plan

__all__ = [
    "EngineSetting",
    "all_settings",
    "setting_costs",
]


@dataclass(frozen=True)
class EngineSetting:
    """One engine's verification setting.

    Attributes
    ----------
    engine : str
        The engine or the method's released code.
    setting : str
        The option and value as the engine spells them.
    rule : str
        Registry name.
    knobs : mapping
        The rule's knobs at this setting (empty: the registry defaults).
    drafting : str
        The drafting policy (:func:`~cactus_theory.analysis.one_step._drafting_distribution`).
    """

    engine: str
    setting: str
    rule: str
    knobs: dict = field(default_factory=dict)
    drafting: str = "sample"

    def label(self) -> str:
        """``rule(knob=value, ...)``."""
        args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.knobs.items())
        return f"{self.rule}({args})" if args else self.rule


#: The engines' defaults and documented values (sources: each rule's module docstring).
_ENGINE_SETTINGS = (
    EngineSetting("vLLM", 'draft_sample_method="greedy" (default): argmax drafts', "sps", drafting="argmax"),
    EngineSetting("vLLM", 'draft_sample_method="probabilistic": sampled drafts', "sps"),
    EngineSetting("vLLM", "no draft probabilities (NO_DRAFT_PROBS), sampled drafts", "sampler-match"),
    EngineSetting("vLLM V0", "typical acceptance, posterior_threshold 0.09, posterior_alpha 0.3", "tas"),
    EngineSetting("vLLM #45229", "relaxed thinking acceptance: top 3, ratio 0.5", "vllm-relaxed-thinking"),
    EngineSetting("TensorRT-LLM", "MTP, relaxed_topk 1, relaxed_delta 0 (default)", "greedy"),
    EngineSetting(
        "TensorRT-LLM", "relaxed acceptance, DeepSeek-R1 recipe: top 10, delta 0.6", "relaxed-topk"
    ),
    EngineSetting(
        "SGLang",
        "thresholds single 1.0, acc 1.0 (default), argmax drafts",
        "sglang-threshold",
        drafting="argmax",
    ),
    EngineSetting(
        "SGLang",
        "threshold_acc 0.5, argmax drafts",
        "sglang-threshold",
        {"threshold_acc": 0.5},
        drafting="argmax",
    ),
    EngineSetting(
        "SGLang",
        "threshold_single 0.01, argmax drafts",
        "sglang-threshold",
        {"threshold_single": 0.01},
        drafting="argmax",
    ),
    EngineSetting("transformers #45979", "assistant_ensemble_weight (default)", "static-ensemble"),
    EngineSetting("FSD code", "fsd_div_threshold 0.4, js_div (README example)", "fuzzy"),
    EngineSetting(
        "arXiv 2607.08690 overlay",
        'relaxed_target_method="rfsd", fuzzy_threshold 0.05',
        "rfsd",
        {"fuzzy_threshold": 0.05},
    ),
    EngineSetting(
        "arXiv 2607.08690 overlay",
        'relaxed_target_method="rfsd", fuzzy_threshold 0.30',
        "rfsd",
        {"fuzzy_threshold": 0.3},
    ),
    EngineSetting("arXiv 2607.08690 overlay", "scd_beta 0.1", "scd", {"scd_beta": 0.1}),
    EngineSetting("arXiv 2607.08690 overlay", "scd_beta 1.0", "scd", {"scd_beta": 1.0}),
    EngineSetting("arXiv 2607.08690 overlay", "mentored_dec, alpha 0.35 (no default there)", "lossy-sd"),
    EngineSetting("Cactus code", "delta (default)", "cactus-taylor"),
    EngineSetting(
        "vllm-ascend",
        "enable_entropy_verify, posterior_threshold 0.95, posterior_alpha 0.4 (defaults)",
        "entropy-verify",
    ),
    EngineSetting(
        "Modular MAX",
        "relaxed thinking acceptance, relaxed_topk 10, relaxed_delta 0.6, argmax drafts",
        "relaxed-topk",
        {"relaxed_topk": 10, "relaxed_delta": 0.6},
        drafting="argmax",
    ),
    EngineSetting(
        "hipfire", "cactus_delta 1.0 (opt-in; 0 = SpS by default)", "cactus-taylor", {"delta": 1.0}
    ),
)

#: Registered rules left out of :func:`all_settings`, and why.
_NOT_TABULATED = {
    "cactus-calibrated": "its knob is a per-position budget met by construction, not an engine's setting",
}


def all_settings() -> list[EngineSetting]:
    """The engines' settings, then every other registered rule at its registry defaults."""
    out = list(_ENGINE_SETTINGS)
    covered = {s.rule for s in out}
    for name in RULES:
        if name not in covered and name not in _NOT_TABULATED:
            out.append(EngineSetting("registry default", "", name))
    return out


def setting_costs(settings, pairs) -> list[dict]:
    r"""Acceptance and emitted KL/TV per token of each setting over the positions of ``pairs``.

    Parameters
    ----------
    settings : sequence of EngineSetting
    pairs : sequence of tuple
        ``(target_probs, draft_probs, raw_target_probs, raw_draft_probs)`` arrays [N_i, V_i]
        (one tuple per recording); the positions of all of them are pooled.

    Returns
    -------
    list of dict
        Per setting: ``engine``, ``setting``, ``rule`` (the label), ``drafting``,
        ``positions``, ``acceptance`` (mean), ``kl_mean``, ``kl_max``, ``kl_inf_share``
        (share of positions where the KL is infinite), ``tv_mean``, ``tv_max``. A mean with an
        infinite term is ``inf``.
    """
    kl, tv = get_divergence("kl"), get_divergence("tv")
    rows = []
    for s in settings:
        rule = get_rule(s.rule, **s.knobs)
        acc, kls, tvs = [], [], []
        for q, p, rq, rp in pairs:
            plan = make_plan(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp, drafting=s.drafting)
            h = emitted_distribution(plan)
            acc.append(np.asarray(acceptance_rate(plan)))
            kls.append(np.asarray(kl.unchecked(h, plan.target_probs)))
            tvs.append(np.asarray(tv.unchecked(h, plan.target_probs)))
        acc, kls, tvs = (np.concatenate(x) for x in (acc, kls, tvs))
        rows.append(
            {
                "engine": s.engine,
                "setting": s.setting,
                "rule": s.label(),
                "drafting": s.drafting,
                "positions": int(acc.size),
                "acceptance": float(acc.mean()),
                "kl_mean": float(kls.mean()),
                "kl_max": float(kls.max()),
                "kl_inf_share": float(np.isinf(kls).mean()),
                "tv_mean": float(tvs.mean()),
                "tv_max": float(tvs.max()),
            }
        )
    return rows
