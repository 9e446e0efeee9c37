r"""A vLLM plugin: serve any "speculative sampling against a per-draft target h" rule.

Install ``cactus-theory[vllm]``; vLLM loads :func:`register` from the ``vllm.general_plugins``
entry point in every process, and it patches both model runners' rejection samplers
(:mod:`._patch`). A rule is enabled by configuration (:mod:`._config`)::

    LLM(model=..., speculative_config={"model": drafter, "num_speculative_tokens": 3,
                                       "draft_sample_method": "probabilistic"},
        additional_config={"cactus_theory": {"rule": "cactus-taylor", "delta": 0.75}})

Each non-greedy, non-bonus verifier row q is replaced by the rule's :math:`h^{(n)}` for that
row's drafted token n (:mod:`._rows`), so vLLM's own kernels accept with
:math:`\min(1, h_n/p_n)` and recover from :math:`\max(h-p, 0)`: the emitted token follows
:math:`h_{alg}` (paper, Theorem 3), exactly what
:func:`cactus_theory.analysis.emitted_distribution` computes. Importing this package does not
import vLLM.

Symbols: q verifier, p drafter, n drafted token, h target, delta budget.
Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 2-3, Corollary 5.
"""

from ._config import PluginConfig, config_from_vllm, parse_config
from ._patch import SUPPORTED_VLLM, install, register, uninstall

__all__ = [
    "register",
    "install",
    "uninstall",
    "parse_config",
    "config_from_vllm",
    "PluginConfig",
    "SUPPORTED_VLLM",
]
