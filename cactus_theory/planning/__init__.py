r"""Planning a deployment: from a recording, a budget and a cost model to the draft length, the
rule's knob and the predicted speedup (:func:`plan`), with acceptance profiles
(:class:`AcceptanceProfile`: NVIDIA's ``speculation_profile.json``, vLLM's per-position counters,
the identity check, per-request anomaly) and cost models (:class:`CostModel`: numbers, a timing
file, a measurement).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, m draft
length, eps the target on the emitted divergence.
"""

from ._cost import CostModel
from ._plan import plan
from ._profile import AcceptanceProfile

__all__ = ["plan", "AcceptanceProfile", "CostModel"]
