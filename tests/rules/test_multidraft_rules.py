"""The multi-draft family's invariant battery: every registered verifier is enrolled.

For each verifier of :data:`cactus_theory.rules.multidraft.VERIFIERS` and each drafting scheme
and structure it verifies: the emitted law is the verifier's (brute-force enumeration of every
drawn tree, on tiny vocabularies), the acceptance and accepted-length formulas (closed forms,
LP, dynamic programme) equal the enumeration, k = 1 is the registered ``sps`` rule, and the
batched torch sampler's emitted law matches the exact law (chi-square). Structures are small
(V = 3 or 4, k <= 3, depth <= 2) so the battery stays within the suite's time budget.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from tree_structures import tree_structure

from cactus_theory.analysis.multidraft import (
    drawn_trees,
    expected_accepted_length,
    lossless_error,
    multidraft_acceptance,
    multidraft_emitted,
    tree_outcomes,
)
from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.drafts import MultiDraft
from cactus_theory.rules import get_rule
from cactus_theory.rules.multidraft import VERIFIERS, get_verifier
from cactus_theory.samplers.multidraft import TreeSampler
from cactus_theory.simulate._trees import simulate_tree, synthetic_chain, synthetic_multidraft, synthetic_tree

# Lossless by enumeration: the emitted law is a sum of at most a few thousand float64 products;
# SpecTr's division factor is feasible to a relative 1e-12 (its residual is clipped there).
LOSSLESS_TOL = 1e-11
# Chi-square and DP-vs-simulation: each test fails falsely with probability at most this
# (the seeds are fixed, so a run is reproducible; the bound is for a fresh seed).
FALSE_FAILURE = 1e-5


def _cases():
    """(verifier, drafting, structure label) for every scheme and structure a verifier verifies."""
    out = []
    for name, spec in VERIFIERS.items():
        for drafting in spec.drafting:
            for structure in ("multi", "tree", "chain"):
                if structure not in spec.structures:
                    continue
                if structure == "chain" and "tree" in spec.structures:
                    continue  # a chain is a tree: covered by the tree case
                out.append((name, drafting, structure))
    return out


CASES = _cases()


@pytest.mark.parametrize(("name", "drafting", "structure"), CASES)
def test_emitted_law_is_the_verifiers_by_enumeration(name, drafting, structure):
    if not VERIFIERS[name].lossless:
        pytest.skip("lossy verifier: its emitted law is checked by its own tests")
    for seed in (0, 1):
        tree = tree_structure(structure, drafting, seed)
        err = lossless_error(name, tree)
        assert err < LOSSLESS_TOL, (name, drafting, structure, seed, err)


@pytest.mark.parametrize(("name", "drafting", "structure"), CASES)
def test_accepted_length_formula_equals_enumeration(name, drafting, structure):
    tree = tree_structure(structure, drafting, 2)
    enum = expected_accepted_length(name, tree, "enumerate")
    try:
        dp = expected_accepted_length(name, tree, "dp")
    except ValueError as exc:  # traversal on a branching tree: no DP, said so by name
        assert "method" in str(exc) and not tree.is_chain and not VERIFIERS[name].nodewise
        return
    # both are sums of at most a few hundred float64 products
    assert dp == pytest.approx(enum, abs=1e-12)


@pytest.mark.parametrize("name", [n for n, s in VERIFIERS.items() if "multi" in s.structures])
def test_one_position_acceptance_equals_enumeration(name):
    spec = VERIFIERS[name]
    drafting = spec.drafting[0]
    md = synthetic_multidraft("dirichlet", k=2, n_positions=2, vocab_size=4, rng=3, drafting=drafting)
    acc = multidraft_acceptance(name, md)
    for i in range(2):
        enum = tree_outcomes(name, md.row(i).as_tree()).acceptance
        assert acc[i] == pytest.approx(enum, abs=1e-12)  # float64 rounding of short sums
    if spec.lossless:
        np.testing.assert_allclose(multidraft_emitted(name, md), md.target_probs, atol=LOSSLESS_TOL)


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_k1_is_sps(name):
    """At one draft, every verifier is its declared per-position rule (``single_draft``; SpS for
    most: accept min(1, q_n/p_n), recover normalize(max(0, q - p))): the acceptance at each
    drafted token, and the emitted law averaged over the draft. A rule whose plan recovers
    from one mixed row (``sglang-threshold``) is compared per draft on the acceptance only."""
    spec = VERIFIERS[name]
    verifier = get_verifier(name)
    # a lossy verifier is SpS at its default knobs; a named rule takes the verifier's knobs
    rule = get_rule(spec.single_draft, **({} if spec.single_draft == "sps" else verifier.knobs))
    rng = np.random.default_rng(4)
    q, p = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    plan = rule.plan(q[None], p[None])
    schemes = [d for d in spec.drafting if d != "top_k"]
    assert schemes, "every verifier verifies a random scheme"
    for drafting in schemes:
        tree = MultiDraft(q, p, 1, drafting).as_tree()
        emitted = np.zeros_like(q)
        for prob, drawn in drawn_trees(tree):
            n = int(drawn.token_ids[1])
            law = verifier.tree_law(drawn)
            want = float(plan.accept_probs_at(np.array([n]))[0])
            assert law.end_probs[1] == pytest.approx(want, abs=1e-12)
            emitted += prob * (law.end_probs[1] * np.eye(q.size)[n] + law.end_probs[0] * law.residuals[0])
            if want < 1 and spec.single_draft == "sps":
                recovery = plan.recovery_at(np.array([n]))[0]
                np.testing.assert_allclose(law.residuals[0], recovery, atol=1e-12)
        # sums of five float64 products
        np.testing.assert_allclose(emitted, emitted_distribution(rule, q[None], p[None])[0], atol=1e-12)


def test_block_never_below_tokenwise_and_optimal_on_top():
    """Block verification >= token-wise SpS on chains (Sun et al. 2024, Theorem 2); the LP
    optimum >= RRS and k-SEQ at one position (it maximizes over lossless verifiers)."""
    for seed in range(4):
        chain = synthetic_chain("dirichlet", 2, vocab_size=3, rng=seed, concentration=0.5).as_tree()
        block = expected_accepted_length("block", chain)
        tokenwise = expected_accepted_length("rrs", chain)
        assert block >= tokenwise - 1e-12
        md = synthetic_multidraft("dirichlet", k=2, n_positions=1, vocab_size=4, rng=seed)
        opt = multidraft_acceptance("optimal", md)[0]
        assert opt >= multidraft_acceptance("rrs", md)[0] - 1e-9  # HiGHS' optimality tolerance
        assert opt >= multidraft_acceptance("spectr", md)[0] - 1e-9
    # the paper's toy pair: q = (1/3, 2/3), p = (2/3, 1/3), gamma = 2: 10/9 token-wise, 11/9 block
    from cactus_theory.drafts import DraftChain

    q, p = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])
    toy = DraftChain(np.stack([q, q, q]), np.stack([p, p])).as_tree()
    assert expected_accepted_length("rrs", toy) == pytest.approx(10 / 9, abs=1e-12)
    assert expected_accepted_length("block", toy) == pytest.approx(11 / 9, abs=1e-12)


def test_traversal_reduces_to_block_on_chains_and_to_rrs_at_one_position():
    traversal, block = get_verifier("traversal"), get_verifier("block")
    for drafting in ("iid", "top_k"):
        tree = tree_structure("chain", drafting, 5)
        for _, drawn in drawn_trees(tree):
            a, b = traversal.tree_law(drawn), block.tree_law(drawn)
            np.testing.assert_allclose(a.end_probs, b.end_probs, atol=1e-14)
            mask = a.end_probs > 0
            np.testing.assert_allclose(a.residuals[mask], b.residuals[mask], atol=1e-14)
    for drafting, rrs in (("iid", "rrs"), ("without_replacement", "rrs-without-replacement")):
        tree = tree_structure("multi", drafting, 6)
        for _, drawn in drawn_trees(tree):
            a, b = traversal.tree_law(drawn), get_verifier(rrs).tree_law(drawn)
            np.testing.assert_allclose(a.end_probs, b.end_probs, atol=1e-14)


def _chi_square(verifier, tree, n, seed):
    draws = drawn_trees(tree)
    probs = np.array([d[0] for d in draws])
    idx = np.random.default_rng(seed).choice(len(draws), n, p=probs / probs.sum())
    q = torch.tensor(np.stack([draws[i][1].target_probs for i in idx]), dtype=torch.float32)
    p = torch.tensor(np.stack([draws[i][1].draft_probs for i in idx]), dtype=torch.float32)
    tok = torch.tensor(np.stack([draws[i][1].token_ids for i in idx]))
    out = TreeSampler(verifier)(
        q, p, tok, draws[0][1].parents, tree.drafting, torch.Generator().manual_seed(seed)
    )
    exact = tree_outcomes(verifier, tree).emitted
    counts = Counter(tuple(int(x) for x in row if x >= 0) for row in out.tokens.tolist())
    assert set(counts) <= {k for k, v in exact.items() if v > 0}, "an impossible sequence was emitted"
    keys = sorted(exact)
    expected = np.array([exact[k] for k in keys]) * n
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    keep = expected >= 5  # pool the cells below 5 expected draws (chi-square's validity)
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


# one case per verifier and scheme: the sampler's own algorithm (coins, residual updates)
SAMPLER_CASES = [(n, d, "tree" if "tree" in VERIFIERS[n].structures else "chain") for n, d, _ in CASES]
SAMPLER_CASES = sorted(set(SAMPLER_CASES))


@pytest.mark.parametrize(("name", "drafting", "structure"), SAMPLER_CASES)
def test_sampler_law_matches_exact_law(name, drafting, structure):
    tree = tree_structure(structure, drafting, 7)
    pvalue = _chi_square(name, tree, 2000, seed=8)
    assert pvalue > FALSE_FAILURE, (name, drafting, pvalue)


@pytest.mark.parametrize("name", ["rrs", "spectr", "optimal", "block"])
def test_dp_matches_simulation(name):
    spec = VERIFIERS[name]
    if "tree" in spec.structures:
        tree = synthetic_tree("dirichlet", (2, 1), vocab_size=3, rng=9, drafting="iid", concentration=0.7)
    else:
        tree = synthetic_chain("dirichlet", 2, vocab_size=3, rng=9, concentration=0.7).as_tree()
    exact = expected_accepted_length(name, tree)
    lengths = tree_outcomes(name, tree).length_probs
    variance = float(np.arange(lengths.size) ** 2 @ lengths - exact**2)
    sim = simulate_tree(name, tree, n=700, rng=10)
    assert abs(sim.mean - exact) <= sim.tolerance(FALSE_FAILURE, variance), (name, sim.mean, exact)


def test_docs_page_lists_every_verifier_and_its_example_runs(capsys):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "multidraft.md").read_text()
    for name in VERIFIERS:
        assert f"| `{name}` |" in page, f"docs/multidraft.md has no row for verifier {name!r}"
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/multidraft.md", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and all(line.endswith("True") for line in lines), lines


def test_degenerate_rows_keep_block_and_traversal_lossless():
    """A position where p = q (no residual mass: Z = 0 with weight 1) and a one-hot row: the
    convention h = 0 when Z + 1 - w = 0 (no mass to correct with) keeps the law exact."""
    from cactus_theory.drafts import DraftChain

    rng = np.random.default_rng(13)
    q, p = rng.dirichlet(np.ones(3), 3), rng.dirichlet(np.ones(3), 2)
    p[1] = q[1]
    chain = DraftChain(q, p).as_tree()
    q2 = q.copy()
    q2[1] = p[1] = np.array([1.0, 0.0, 0.0])
    one_hot = DraftChain(q2, p).as_tree()
    for tree in (chain, one_hot):
        for name in ("block", "traversal", "rrs"):
            assert lossless_error(name, tree) < LOSSLESS_TOL


@settings(
    max_examples=profile_examples(2 / 15, "every lossless verifier of the scheme enumerated per example"),
    deadline=None,
)
@given(
    v=st.integers(2, 4),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    drafting=st.sampled_from(["iid", "without_replacement", "top_k"]),
)
def test_one_position_laws_are_q_property(v, k, seed, drafting):
    """Random one-position instances (some zero entries): every lossless verifier of the scheme emits q."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(v, 0.5))
    p = rng.dirichlet(np.full(v, 0.5))
    q[rng.random(v) < 0.2] = 0.0
    if q.sum() == 0:
        q[0] = 1.0
    q /= q.sum()
    k = min(k, int(np.count_nonzero(p > 0))) if drafting != "iid" else k
    tree = MultiDraft(q, p, k, drafting).as_tree()
    for name in [
        n for n, s in VERIFIERS.items() if s.lossless and drafting in s.drafting and "multi" in s.structures
    ]:
        assert lossless_error(name, tree) < LOSSLESS_TOL, (name, v, k, drafting)
