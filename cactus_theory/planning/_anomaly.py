r"""Per-request anomaly: a request's accepted count against the exact law of its rounds.

Given its drafts, round r of a request accepts :math:`N_r` drafts with the exact law

.. math:: P(N_r = j) = S_{r,j} - S_{r,j+1}, \qquad S_{r,0} = 1,\ S_{r,K+1} = 0,

independently across rounds (each round has its own verifier coins), so the request's total
:math:`A = \sum_r N_r` has the law of the convolution of its rounds' laws. A request whose
observed count lies far in a tail, two-sided :math:`p = \min(1, 2\min(P(A \le a), P(A \ge a)))`
below ``alpha``, is flagged: the engine did not verify the rows that were recorded the way the
rule says (a sampler bug, or a drafter other than the recorded one).

Symbols: q verifier, p drafter, :math:`S_{r,j}` the survival of round r's first j drafts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["round_laws", "count_law", "request_anomaly"]


def round_laws(survival) -> np.ndarray:
    """:math:`P(N_r = j)`, j = 0..K, of each round from its survival rows (rounds, K)."""
    s = np.asarray(survival, dtype=np.float64)
    ones, zeros = np.ones((s.shape[0], 1)), np.zeros((s.shape[0], 1))
    full = np.concatenate([ones, s, zeros], axis=1)
    return np.clip(full[:, :-1] - full[:, 1:], 0.0, 1.0)


def count_law(survival) -> np.ndarray:
    """The exact law of :math:`\\sum_r N_r` over the given rounds (index = total accepted)."""
    law = np.ones(1)
    for row in round_laws(survival):
        law = np.convolve(law, row)
    return law / law.sum()


def request_anomaly(round_survival, round_request, accepted_counts, *, alpha: float = 1e-3) -> list:
    """Each request's two-sided tail probability under the exact law of its recorded rounds.

    Parameters
    ----------
    round_survival : ndarray, shape (rounds, K)
        :math:`S_{r,j}` of every recorded round.
    round_request : ndarray of int, shape (rounds,)
        The request of each round.
    accepted_counts : mapping of request -> int, or sequence of int
        The accepted drafts the engine reported per request (a sequence: in the order of the
        sorted request ids).
    alpha : float
        Flag level of the two-sided tail probability, in (0, 1).

    Returns
    -------
    list of dict
        Per request: ``request``, ``rounds``, ``observed``, ``expected``, ``sd``, ``p_low``
        :math:`P(A \\le a)`, ``p_high`` :math:`P(A \\ge a)`, ``p_value`` and ``flagged``.
    """
    if not 0 < float(alpha) < 1:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha}")
    s = np.asarray(round_survival, dtype=np.float64)
    req = np.asarray(round_request)
    ids = np.unique(req)
    if isinstance(accepted_counts, dict):
        missing = [r for r in accepted_counts if r not in set(ids.tolist())]
        if missing:
            raise ValueError(f"accepted_counts: requests {missing[:3]} have no recorded rounds")
        counts = dict(accepted_counts)
    else:
        c = np.asarray(accepted_counts).reshape(-1)
        if c.shape[0] != ids.shape[0]:
            raise ValueError(f"accepted_counts: {c.shape[0]} counts for {ids.shape[0]} requests")
        counts = dict(zip(ids.tolist(), c.tolist()))
    out = []
    for r, a in counts.items():
        if int(a) != a or a < 0:
            raise ValueError(f"accepted_counts: request {r} has {a!r}, not a count >= 0")
        rows = s[req == r]
        law = count_law(rows)
        a = int(a)
        cdf = np.cumsum(law)
        p_low = float(cdf[a]) if a < law.size else 1.0
        p_high = float(law[a:].sum()) if a < law.size else 0.0
        k = np.arange(law.size)
        mean = float(k @ law)
        out.append(
            dict(
                request=r,
                rounds=int(rows.shape[0]),
                observed=a,
                expected=mean,
                sd=float(np.sqrt(max((k - mean) ** 2 @ law, 0.0))),
                p_low=min(p_low, 1.0),
                p_high=min(p_high, 1.0),
                p_value=float(min(1.0, 2 * min(p_low, p_high))),
                flagged=bool(min(1.0, 2 * min(p_low, p_high)) < alpha),
            )
        )
    return out
