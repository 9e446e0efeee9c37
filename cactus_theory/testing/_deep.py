r"""The rule-aware deep case of the sampler-law check: k = 8 drafts, recovery at every position.

Engines verify 4 to 32 drafts; a defect at a deep position is invisible to cases of k = 3. The
case ``"deep"`` has k = :data:`DEEP_K` drafts on V = :data:`DEEP_V` tokens and is built for
the rule under test: at position i the drafter row moves from the verifier row towards a
drafter that is wrong (a noisy copy of q, then a point mass on q's least likely token) until
the rule's own acceptance is

.. math:: \alpha_i = \frac{k - i}{k + 1 - i},

so that each position (and the bonus position) is reached and each position rejects about
``num_samples / (k + 1)`` draws: its recovery law (the token drawn after a rejection) is
exercised at every depth, whatever the rule's knob (a lossy rule at a large budget accepts
more and needs a drafter further from q). Where even the point mass cannot bring the
acceptance down to :math:`\alpha_i`, the point mass is used. Every row is dyadic
(:func:`~._dyadic.dyadic`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

import numpy as np

from ._dyadic import dyadic

#: Drafts and vocabulary of the deep case; block verification's law enumerates V^k draft
#: sequences, so its deep case has :data:`DEEP_V_BLOCK` tokens.
DEEP_K = 8
DEEP_V = 5
DEEP_V_BLOCK = 4
#: The name of the deep case in reports.
DEEP_CASE_NAME = "deep"
_BISECTION_STEPS = 24
_CACHE: dict = {}


def _rule_key(rule) -> str:
    knobs = sorted((k, repr(v)) for k, v in vars(rule).items()) if hasattr(rule, "__dict__") else []
    return f"{rule.name}:{knobs}"


def _path(q: np.ndarray, noisy: np.ndarray, t: float) -> np.ndarray:
    """The drafter at ``t`` in [0, 2]: q (t = 0) to ``noisy`` (t = 1) to a point mass on q's
    least likely token (t = 2)."""
    point = np.eye(len(q))[int(np.argmin(q))]
    wrong = 0.35 * noisy + 0.65 * point
    if t <= 1.0:
        return (1.0 - t) * q + t * wrong
    return (2.0 - t) * wrong + (t - 1.0) * point


def _acceptance(rule, q: np.ndarray, p: np.ndarray) -> float:
    from ._exact import exact_law

    return float(exact_law(rule, np.stack([q, q]), p[None]).acceptance[0])


def deep_case(rule) -> tuple[np.ndarray, np.ndarray]:
    r"""The deep case for ``rule`` (a resolved rule): (q (k+1, V), p (k, V)), dyadic."""
    key = _rule_key(rule)
    if key in _CACHE:
        q, p = _CACHE[key]
        return q.copy(), p.copy()
    rng = np.random.default_rng(20260907)
    k, v = DEEP_K, (DEEP_V_BLOCK if rule.name == "block" else DEEP_V)
    q = dyadic(rng.dirichlet(np.full(v, 1.5), size=k + 1))
    rows = []
    for i in range(k):
        noisy = q[i] * np.exp(1.2 * rng.standard_normal(v))
        noisy /= noisy.sum()
        target = (k - i) / (k + 1 - i)
        lo, hi = 0.0, 2.0
        if _acceptance(rule, q[i], _path(q[i], noisy, hi)) > target:
            lo = hi
        else:
            for _ in range(_BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                if _acceptance(rule, q[i], _path(q[i], noisy, mid)) > target:
                    lo = mid
                else:
                    hi = mid
        rows.append(_path(q[i], noisy, lo))
    p = dyadic(np.stack(rows))
    _CACHE[key] = (q, p)
    return q.copy(), p.copy()
