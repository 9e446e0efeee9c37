"""Rule configurations shared by the sampler and simulator test batteries."""

import math

from cactus_theory.rules import RULES


def _mid_knobs(spec):
    """Halfway between the defaults and the rule's SpS knobs (finite numeric knobs only), so
    rules whose defaults accept everything on small vocabularies are also tested partway."""
    if not spec.sps_knobs:
        return None
    mid = {}
    for k, v in spec.sps_knobs.items():
        d = spec.defaults[k]
        if isinstance(v, (int, float)) and isinstance(d, (int, float)) and math.isfinite(v):
            mid[k] = 0.5 * (v + d)
    return mid or None


#: (test id, rule name, knobs): every rule at its defaults, plus halfway to SpS where defined.
CONFIGS = [(n, n, {}) for n in RULES.all_names()] + [
    (f"{n}[{','.join(f'{k}={v:g}' for k, v in _mid_knobs(s).items())}]", n, _mid_knobs(s))
    for n, s in RULES.items() if _mid_knobs(s)]
