"""The real speculative-decoding loop (cactus_theory.logits.decode) on tiny random Llama models.

The statistical test: with SpS (delta = 0) the loop must emit exactly the verifier's sequence
distribution (Theorem 1 applied round by round, plus correct KV-cache cropping). A negative
control (a sampler that accepts every draft, i.e. emits the drafter) must fail the same test, so
the test can fail.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from scipy import stats  # noqa: E402
from tiny_models import tiny_llama as _tiny_llama  # noqa: E402

from cactus_theory.logits._decode import expected_accepted, records_to_dump  # noqa: E402
from cactus_theory.logits._runner import SamplingParams  # noqa: E402
from cactus_theory.logits.decode import speculative_decode, verifier_decode  # noqa: E402

V, L, M = 4, 3, 2  # vocabulary, generated length, draft length
PLAIN = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)  # full support: every sequence possible


def tiny_llama(seed):
    return _tiny_llama(V, seed=seed)


def local_sps(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs=None):
    """Minimal SpS in vLLM 0.7.3's rejection-sampler interface (test-local reference)."""
    B, k = draft_token_ids.shape
    out = torch.full((B, k + 1), -1, dtype=torch.long)
    for b in range(B):
        for j in range(k):
            q, p = target_with_bonus_probs[b, j].double(), draft_probs[b, j].double()
            n = int(draft_token_ids[b, j])
            if torch.rand(()) < min(1.0, float(q[n] / p[n])):
                out[b, j] = n
                continue
            r = torch.clamp(q - p, min=0)
            out[b, j] = int(torch.multinomial(r / r.sum(), 1))
            break
        else:
            out[b, k] = int(bonus_token_ids[b, 0])
    return out


def accept_all(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs=None):
    """Broken on purpose: accepts every draft (emits the drafter's distribution)."""
    return torch.cat([draft_token_ids, bonus_token_ids], 1)


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return tiny_llama(1), tiny_llama(2)


def exact_sequence_probs(model, prompt):
    """Verifier (processed = plain softmax here) probability of each of the V**L continuations."""
    seqs = np.array(np.meshgrid(*[np.arange(V)] * L, indexing="ij")).reshape(L, -1).T
    x = torch.tensor([list(prompt) + list(s) for s in seqs])
    with torch.no_grad():
        lp = torch.log_softmax(model(x).logits.double(), -1)
    P = len(prompt)
    tot = sum(lp[:, P - 1 + t].gather(-1, x[:, P + t : P + t + 1])[:, 0] for t in range(L))
    return seqs, tot.exp().numpy()


def sample_counts(verifier, drafter, sampler, n, prompt):
    torch.manual_seed(123)  # the samplers' own randomness
    g = torch.Generator().manual_seed(7)
    counts = np.zeros(V**L)
    for _ in range(n):
        r = speculative_decode(verifier, drafter, prompt, sampler, M, L, PLAIN, g)
        counts[np.ravel_multi_index(tuple(r.tokens), (V,) * L)] += 1
    return counts


def chi2_pvalue(counts, probs):
    # Pearson chi-square on all V**L = 64 cells; the fixture models give every cell an expected
    # count above 5 at n = 800 (checked below), where the chi-square approximation holds.
    exp = probs * counts.sum()
    assert exp.min() > 5
    return stats.chisquare(counts, exp).pvalue


N_SAMPLES = 800
ALPHA = 1e-3  # false-alarm rate of the test for a correct loop (the seed is fixed, so it is deterministic)


def toolkit_sps():
    from cactus_theory.samplers import make_sampler

    return make_sampler("sps")


@pytest.mark.parametrize("which", ["local", "toolkit"])
def test_sps_loop_reproduces_verifier_distribution(pair, which):
    verifier, drafter = pair
    sampler = local_sps if which == "local" else toolkit_sps()
    prompt = [1, 2]
    _, probs = exact_sequence_probs(verifier, prompt)
    _, dprobs = exact_sequence_probs(drafter, prompt)
    # The pair must be far apart, or the test would pass even for a loop that emits the drafter.
    assert 0.5 * np.abs(probs - dprobs).sum() > 0.25  # it is 0.32 for these seeds
    counts = sample_counts(verifier, drafter, sampler, N_SAMPLES, prompt)
    assert chi2_pvalue(counts, probs) > ALPHA


def test_negative_control_accept_all_is_detected(pair):
    verifier, drafter = pair
    prompt = [1, 2]
    _, probs = exact_sequence_probs(verifier, prompt)
    counts = sample_counts(verifier, drafter, accept_all, N_SAMPLES, prompt)
    assert chi2_pvalue(counts, probs) < ALPHA


def test_counters_records_and_expected_al(pair, tmp_path):
    verifier, drafter = pair
    g = torch.Generator().manual_seed(0)
    res = speculative_decode(verifier, drafter, [1, 2, 3], local_sps, 3, 20, PLAIN, g, record=True)
    assert len(res.tokens) == 20
    assert res.drafted == 3 * res.verifier_calls
    # every call emits accepted + 1 tokens, except that the last call's output may be cut at 20
    assert res.accepted + res.verifier_calls >= 20
    assert all(rd.accepted == len(rd.emitted) - 1 for rd in res.rounds)
    e = expected_accepted(res.rounds)
    assert e.shape == (len(res.rounds),) and np.all((0 <= e) & (e <= 3))
    # accept_all: every a_i recorded would still be the SpS value; check one round by hand
    rd = res.rounds[0]
    a = []
    for j, d in enumerate(rd.drafts):
        qd = dict(zip(rd.q_sparse[j][0].tolist(), rd.q_sparse[j][1].tolist())).get(d, 0.0)
        pd = dict(zip(rd.p_sparse[j][0].tolist(), rd.p_sparse[j][1].tolist()))[d]
        a.append(min(1.0, qd / pd))
    assert e[0] == pytest.approx(np.cumprod(a).sum(), abs=1e-12)  # same float64 arithmetic, order aside

    from cactus_theory.logits import Prompt, load_dump

    path = records_to_dump(
        [res], [Prompt("user/0", "user", "user", "x")], tmp_path / "rec.npz", {"rule": "sps"}
    )
    d = load_dump(path)
    (t,) = list(d.trajectories())
    assert len(t) == res.drafted
    assert np.array_equal(t.extras["accepted_len"][::3], [rd.accepted for rd in res.rounds])


def test_verifier_decode_matches_length(pair):
    verifier, _ = pair
    r = verifier_decode(verifier, [1, 2], 10, PLAIN, torch.Generator().manual_seed(0))
    assert len(r.tokens) == 10 and r.verifier_calls == 10


def test_shipped_decode_records_match_their_expected_al():
    """Real SmolLM2 runs (shipped records): the measured accepted length per round agrees with
    its expectation given the drafted tokens, sum_j prod_{i<=j} min(1, q_i(d_i)/p_i(d_i)),
    computed from the recorded distributions."""
    from cactus_theory.logits import load_dump
    from cactus_theory.logits._bench import shipped_decode_records

    paths = [p for p in shipped_decode_records() if p.name.endswith("_sps.npz")]
    if not paths:
        pytest.skip("no shipped decoding records")
    d = load_dump(paths[0])
    m = d.meta["m"]
    measured, expected = [], []
    for t in d.trajectories():
        hit = t.columns == t.token_ids[:, None]
        assert np.all(hit.sum(1) == 1)  # every drafted token is a stored column
        a = np.minimum(1.0, t.target_probs[hit] / t.draft_probs[hit])
        rounds = t.extras["round"]
        for r in np.unique(rounds):
            sel = rounds == r
            assert sel.sum() == m
            expected.append(np.cumprod(a[sel]).sum())
            measured.append(t.extras["accepted_len"][sel][0])
    measured, expected = np.asarray(measured, float), np.asarray(expected)
    # given the drafts, accepted_len - expected has mean 0 and variance <= m^2 / 4 per round;
    # 4 standard errors of the observed spread: false-alarm rate about 6e-5 (normal approx.)
    se = np.std(measured - expected, ddof=1) / np.sqrt(len(measured))
    assert abs(measured.mean() - expected.mean()) < 4 * se
    assert np.all((measured >= 0) & (measured <= m))
