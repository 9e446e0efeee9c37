r"""The plugin's configuration: which rule, its knobs, and the checks made at start-up.

The rule travels in vLLM's ``additional_config`` (hashed into the engine config, reaches every
worker) or, when that is not set, in the environment variable ``CACTUS_THEORY_VLLM`` (JSON)::

    additional_config={"cactus_theory": {"rule": "cactus-taylor", "delta": 0.75}}
    CACTUS_THEORY_VLLM='{"rule": "cactus-taylor", "delta": 0.75}'

Every key other than ``rule`` and ``record`` is a knob of that rule (``cactus-theory rules``
lists them); ``record`` turns on the recorder of verified rows (:mod:`._recorder`)::

    {"rule": "cactus-taylor", "delta": 0.75, "record": {"folder": "rows/", "max_bytes": 10**9}}

A rule is supported when it is "speculative sampling against a per-draft target h": its plan is
a :class:`~cactus_theory.rules.plans.TargetPlan` or :class:`~cactus_theory.rules.plans.SpikePlan`
whose h sums to 1. The plugin then replaces each non-greedy, non-bonus verifier row q by
:math:`h^{(n)}` for that row's drafted token n and vLLM's stock kernels accept with
:math:`\min(1, h_n/p_n)` and recover from :math:`\max(h - p, 0)` (paper, Theorem 3: the emitted
law is then :math:`h_{alg}`). Every other registered single-draft rule (its own acceptance and
recovery, a ``DecisionPlan``: TAS, fuzzy SD, lossy SD, ...; or a target that is not a
distribution, top-k's indicator, which vLLM's softmax of the logits would change) is served by
the toolkit's own sampler, built once from the rule's declaration when the engine builds its
rejection sampler (:func:`serving_path` says which). The older model runner runs it in place of
vLLM's kernels (flat layout, :func:`cactus_theory.samplers.ragged_forward`); the newer runner
refuses it at start-up. Refused, each with one line saying why:

* a knob the engine sets per request (its declaration's ``Knob.request``: SCD's
  ``scd_temperature``);
* greedy drafting (``draft_sample_method != "probabilistic"``: p would be one-hot) and the
  non-standard verifiers (``rejection_sample_method`` "synthetic", "block", "fly").

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, h target.
Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 2 and 3.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...rules import Rule, get_rule
from ...rules.plans import SpikePlan, TargetPlan

__all__ = [
    "ENV_VAR",
    "CONFIG_KEY",
    "PluginConfig",
    "parse_config",
    "config_from_vllm",
    "check_rule_supported",
    "serving_path",
    "check_speculative_config",
    "request_knob",
]

ENV_VAR = "CACTUS_THEORY_VLLM"
"""Environment variable holding the configuration as JSON (used when ``additional_config`` lacks it)."""

CONFIG_KEY = "cactus_theory"
"""Key of the plugin's section in vLLM's ``additional_config``."""

RECORD_KEY = "record"
"""Key of the recorder's settings in the plugin's section (:mod:`._recorder`)."""


def request_knob(spec):
    """``(knob, request field)`` of the knob a rule's declaration says the engine sets from each
    request (``Knob.request``: SCD's contrastive temperature is the request's, as the arXiv
    2607.08690 overlay sets it), or None; configuring it is refused."""
    tied = [(k.name, k.request) for k in (spec.knobs if spec is not None else ()) if k.request]
    return tied[0] if tied else None


@dataclass(frozen=True)
class PluginConfig:
    """A validated configuration: the rule's registry name, its knobs and the built rule.

    Attributes
    ----------
    rule_name : str
        Registry name (``cactus_theory.rules.RULES``).
    knobs : dict
        The knobs as given (validated by the registry).
    rule : Rule
        The configured rule.
    path : {"rows", "sampler"}
        How the plugin serves it (:func:`serving_path`).
    record : dict or None
        The recorder's settings (key ``"record"``: ``folder``, ``max_bytes``, optional
        ``rows_per_shard``, ``top_k_raw``; :class:`.recorder.Recorder`), or None.
    """

    rule_name: str
    knobs: dict = field(default_factory=dict)
    rule: Rule | None = None
    record: dict | None = None
    path: str = "rows"


def parse_config(raw: Any) -> PluginConfig | None:
    """Validate a configuration mapping (or its JSON text); None when ``raw`` is None or empty.

    Raises
    ------
    ValueError
        One line naming the problem: not a mapping, no ``rule``, unknown rule or knob, knob out
        of range, or a knob the engine sets per request.
    """
    if raw is None:
        return None
    if isinstance(raw, str):
        if not raw.strip():
            return None
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{CONFIG_KEY}: not valid JSON ({exc.msg})") from None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{CONFIG_KEY}: must be a mapping like {{'rule': 'cactus-taylor', 'delta': 0.5}}")
    if not raw:
        return None
    if "rule" not in raw:
        raise ValueError(f"{CONFIG_KEY}: the key 'rule' is missing (a name from `cactus-theory rules`)")
    knobs = {k: v for k, v in raw.items() if k not in ("rule", RECORD_KEY)}
    record = raw.get(RECORD_KEY)
    if record is not None and (not isinstance(record, Mapping) or not {"folder", "max_bytes"} <= set(record)):
        raise ValueError(
            f"{RECORD_KEY}: expected a mapping with 'folder' and 'max_bytes' (bytes of shards at most)"
        )
    rule = get_rule(raw["rule"], **knobs)
    spec = rule.spec.alias_of or rule.spec
    tied = request_knob(spec)
    if tied is not None and tied[0] in knobs:
        raise ValueError(
            f"{tied[0]}: set from each request's {tied[1]} in the engine (rule {rule.name!r}); "
            "leave it out of the configuration"
        )
    path = serving_path(rule)
    return PluginConfig(rule.name, dict(knobs), rule, None if record is None else dict(record), path)


def config_from_vllm(vllm_config=None) -> PluginConfig | None:
    """The configuration from ``vllm_config.additional_config[CONFIG_KEY]``, else ``$CACTUS_THEORY_VLLM``.

    ``vllm_config`` is a ``vllm.config.VllmConfig`` or None (then only the environment is read).
    """
    extra = getattr(vllm_config, "additional_config", None) or {}
    if isinstance(extra, Mapping) and extra.get(CONFIG_KEY):
        return parse_config(extra[CONFIG_KEY])
    return parse_config(os.environ.get(ENV_VAR))


def _probe_rows():
    """A few fixed (q, p) pairs, float64, used to check a rule's plan structure."""
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.full(7, 0.7), size=4)
    p = rng.dirichlet(np.full(7, 0.7), size=4)
    return q, p


def serving_path(rule: Rule) -> str:
    """``"rows"`` when vLLM's own kernels realise the rule on substituted verifier rows
    (:func:`check_rule_supported` passes), else ``"sampler"``: the toolkit's sampler of the rule
    verifies in their place (the older runner only)."""
    try:
        check_rule_supported(rule)
    except ValueError:
        return "sampler"
    return "rows"


def check_rule_supported(rule: Rule) -> None:
    """Raise ValueError (one line, naming ``rule``) unless vLLM's own kernels realise the rule:
    SpS against a normalized per-draft h (the plugin serves the others with the toolkit's
    sampler, :func:`serving_path`).

    The check builds the rule's plan on fixed probe rows: a ``DecisionPlan`` is refused, and so
    is a target that does not sum to 1 (within 1e-9, float64 round-off on 7 terms).
    """
    q, p = _probe_rows()
    plan = rule.plan(q, p)
    if isinstance(plan, SpikePlan):
        h = plan.target_at(np.argmax(p, axis=-1))
    elif isinstance(plan, TargetPlan):
        h = plan.target
    else:
        raise ValueError(
            f"rule: {rule.name!r} has its own acceptance and recovery ({type(plan).__name__}); "
            "vLLM's kernels can only realise speculative sampling against a per-draft target h"
        )
    if not np.allclose(np.sum(h, axis=-1), 1.0, rtol=0.0, atol=1e-9):
        raise ValueError(
            f"rule: {rule.name!r} has a target h that is not a distribution; vLLM's kernels "
            "normalize the target logits, which would change its acceptance min(1, h_n/p_n)"
        )


def check_speculative_config(spec_config) -> None:
    """Raise ValueError (one line) for speculative settings the plugin cannot serve exactly.

    ``spec_config`` is a ``vllm.config.SpeculativeConfig`` (attributes ``draft_sample_method``
    and ``rejection_sample_method`` are read when present).
    """
    if spec_config is None:
        raise ValueError(f"{CONFIG_KEY}: a rule is configured but speculative decoding is off")
    method = getattr(spec_config, "rejection_sample_method", "standard")
    if method != "standard":
        raise ValueError(
            f"rejection_sample_method: {method!r} is not supported with {CONFIG_KEY} "
            "(only 'standard', whose kernels the rule's target goes through)"
        )
    draft = getattr(spec_config, "draft_sample_method", None)
    if draft is not None and draft != "probabilistic":
        raise ValueError(
            f"draft_sample_method: {draft!r}; {CONFIG_KEY} needs 'probabilistic' "
            "(with greedy drafting p is one-hot and the rule never sees the drafter)"
        )
