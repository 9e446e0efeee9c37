"""A plan's engine configuration: vLLM's speculative settings with the plugin's rule and knobs,
checked by the plugin's own parser (:func:`cactus_theory.integrations.vllm.parse_config`)."""

from __future__ import annotations

__all__ = ["engine_config"]

#: Stands for the drafter when the plan does not know it (the user fills it in).
_DRAFTER_PLACEHOLDER = "<drafter model>"


def engine_config(rule: str, knobs: dict, m, drafter=None):
    """(config, note): vLLM's ``speculative_config`` and ``additional_config`` for the plugin,
    or (None, the plugin's one-line reason) when it cannot serve the rule.

    A rule the plugin serves with the toolkit's own sampler (``PluginConfig.path ==
    "sampler"``) runs on vLLM's older model runner only: its configuration carries
    ``env = {"VLLM_USE_V2_MODEL_RUNNER": "0"}`` and the note says so."""
    from ..integrations.vllm import parse_config
    from ..integrations.vllm.internal import CONFIG_KEY

    if m is None:
        return None, "no draft length to configure"
    section = {"rule": rule, **{k: v for k, v in knobs.items()}}
    try:
        parsed = parse_config(section)
    except ValueError as exc:
        return None, f"the vLLM plugin refuses it: {exc}"
    config = {
        "speculative_config": {
            "model": drafter or _DRAFTER_PLACEHOLDER,
            "num_speculative_tokens": int(m),
            "draft_sample_method": "probabilistic",
        },
        "additional_config": {CONFIG_KEY: section},
    }
    if parsed.path == "sampler":
        config["env"] = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
        return config, (
            "parsed by the plugin's configuration check; served by the toolkit's sampler on "
            "vLLM's older model runner only (VLLM_USE_V2_MODEL_RUNNER=0)"
        )
    return config, "parsed by the plugin's configuration check"
