"""Integrations of the toolkit's rules into serving engines (each optional; see its module).

:mod:`cactus_theory.integrations.vllm` routes vLLM's rejection sampling (both model runners)
through a registered rule of :data:`cactus_theory.rules.RULES`.
"""

__all__: list[str] = []  # the integrations are subpackages (each optional)
