"""Per-request anomaly: the exact law of a request's accepted count, and a planted drafter swap.

Runs in about a second (two shipped recordings loaded, 12 requests of 2-draft rounds).
"""

import itertools

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory.planning._anomaly import count_law, round_laws
from cactus_theory.simulate import realised_acceptance, survival_probabilities


def test_count_law_equals_enumeration():
    rng = np.random.default_rng(3)
    s = np.cumprod(rng.uniform(0.1, 0.9, size=(3, 2)), axis=1)
    laws = round_laws(s)
    brute = np.zeros(7)
    for ns in itertools.product(range(3), repeat=3):
        brute[sum(ns)] += np.prod([laws[r, n] for r, n in enumerate(ns)])
    # exact up to float64 round-off of a few products and sums
    np.testing.assert_allclose(count_law(s), brute, atol=1e-15)


def _rounds(traj, rng, m=2):
    """Rounds of m consecutive positions; drafts drawn from the trajectory's own p; the
    survival of each round given its drafts under SpS."""
    n = traj.length // m * m
    q, p = traj.target_probs[:n], traj.draft_probs[:n]
    cdf = np.cumsum(p, axis=1)
    drafts = np.minimum((rng.random(n)[:, None] * cdf[:, -1:] > cdf).sum(axis=1), p.shape[1] - 1)
    a = realised_acceptance(
        "sps", q.reshape(-1, m, q.shape[1]), p.reshape(-1, m, p.shape[1]), drafts.reshape(-1, m)
    )
    return survival_probabilities(a)


def _engine_counts(survival, rng):
    """Accepted drafts of each round, drawn with its exact survival (the verifier's coins)."""
    u = rng.random(survival.shape[0])
    return int((u[:, None] < survival).sum())  # N >= j iff u < S_j


@pytest.mark.parametrize("swapped_to", ["smollm2-135m_requant-4", "smollm2-135m_early-exit-25"])
def test_planted_drafter_swap_is_flagged(swapped_to):
    from cactus_theory.logits import load_dump, shipped_dumps

    files = {f.stem: f for f in shipped_dumps()}
    recorded = list(load_dump(files["smollm2-135m_distilled"]).trajectories())[:12]
    served = list(load_dump(files[swapped_to]).trajectories())[:12]
    rng = np.random.default_rng(0)
    rows, req, counts = [], [], []
    swapped = {3, 8}
    for i, (t_rec, t_srv) in enumerate(zip(recorded, served)):
        # the same verifier text in both recordings: only the drafter differs
        assert np.array_equal(t_rec.token_ids, t_srv.token_ids)
        s_rec = _rounds(t_rec, rng)
        rows.append(s_rec)
        req += [i] * len(s_rec)
        # the engine served the recorded drafter, except on the swapped requests
        counts.append(_engine_counts(_rounds(t_srv, rng) if i in swapped else s_rec, rng))
    prof = ct.AcceptanceProfile.from_survival(np.concatenate(rows), requests=req)
    out = prof.request_anomaly(counts, alpha=1e-3)
    flagged = {r["request"] for r in out if r["flagged"]}
    assert flagged == swapped, [
        (r["request"], r["observed"], round(r["expected"], 1), r["p_value"]) for r in out
    ]


def test_anomaly_bad_input():
    prof = ct.AcceptanceProfile.from_survival([[0.5, 0.2], [0.4, 0.1]], requests=[0, 0])
    with pytest.raises(ValueError, match="accepted_counts"):
        prof.request_anomaly([1, 2])
    with pytest.raises(ValueError, match="alpha"):
        prof.request_anomaly([1], alpha=0)
    with pytest.raises(ValueError, match="accepted_counts"):
        ct.AcceptanceProfile((0.5,)).request_anomaly([1])
    # a count beyond the rounds' drafts has probability 0: flagged
    assert prof.request_anomaly([5])[0]["flagged"]
