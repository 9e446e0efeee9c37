"""Bad input, class by class: each fails early with an error naming the argument, or (samplers)
is flagged and never emitted. One test per class of the reliability issue (library level)."""

import math

import numpy as np
import pytest
import torch

import cactus_theory as ct
from cactus_theory.analysis import calibration as cal
from cactus_theory.analysis import frontier as afr
from cactus_theory.rules import RULES, get_rule
from cactus_theory.samplers import make_sampler, ragged_forward
from cactus_theory.solvers import _frontier as fr
from cactus_theory.solvers import _mentored as men
from cactus_theory.solvers._spike import exact_spike, spike_scale, taylor_spike

NAN = float("nan")
Q, P = [0.30, 0.35, 0.35], [0.05, 0.80, 0.15]


def _batch(b=4, k=3, v=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(b, k + 1, v, generator=g), -1)
    p = torch.softmax(torch.randn(b, k, v, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, v), 1, generator=g).reshape(b, k)
    bonus = torch.randint(0, v, (b, 1), generator=g)
    return q, bonus, p, ids


# -- samplers: silent wrong answers become flagged rows that emit nothing ----------------------


def _corrupt(kind, q, bonus, p, ids):
    q, bonus, p, ids = q.clone(), bonus.clone(), p.clone(), ids.clone()
    v = q.shape[-1]
    if kind == "draft id 10^9":
        ids[1, 0] = 10**9
    elif kind == "negative draft id":
        ids[1, 1] = -1
    elif kind == "bonus id out of range":
        bonus[1, 0] = v
    elif kind == "negative bonus id":
        bonus[1, 0] = -3
    elif kind == "NaN q row":
        q[1, 2] = NAN
    elif kind == "all-zero q row":
        q[1, 0] = 0.0
    elif kind == "negative p":
        p[1, 1, 0] = -0.2
    elif kind == "inf p":
        p[1, 0, 3] = math.inf
    return q, bonus, p, ids


SAMPLER_CLASSES = [
    "draft id 10^9",
    "negative draft id",
    "bonus id out of range",
    "negative bonus id",
    "NaN q row",
    "all-zero q row",
    "negative p",
    "inf p",
]


# every rule for one id class and one probability class (the two code paths of the entry
# validation); three representative rules (plain, spike, host-validating) for the others
CASES = [
    (rule, kind)
    for kind in SAMPLER_CLASSES
    for rule in (
        sorted(RULES)
        if kind in ("draft id 10^9", "NaN q row")
        else ["sps", "cactus-taylor", "cactus-calibrated"]
    )
]


@pytest.mark.parametrize("rule, kind", CASES)
def test_sampler_never_emits_from_an_invalid_row(rule, kind):
    """Row 1 is invalid: it emits only -1 and is flagged; the other rows are untouched."""
    q, bonus, p, ids = _batch(seed=1)
    bad = _corrupt(kind, q, bonus, p, ids)
    gens = lambda: {i: torch.Generator().manual_seed(10 + i) for i in range(4)}  # noqa: E731
    s = make_sampler(rule)
    out = s(*bad, seeded_seqs=gens())
    assert out[1].tolist() == [-1] * 4
    assert s.last_invalid_rows.tolist() == [False, True, False, False]
    assert int(s.num_invalid_rows) == 1
    v = q.shape[-1]
    assert bool(((out == -1) | ((out >= 0) & (out < v))).all())
    clean = make_sampler(rule)(q, bonus, p, ids, seeded_seqs=gens())
    keep = [0, 2, 3]
    assert torch.equal(out[keep], clean[keep])  # seeded rows: the valid rows' outputs unchanged
    # counters count only what was emitted
    assert int(s.num_emitted_tokens) == int((out != -1).sum())
    assert int(s.num_accepted_prefix_tokens) == int(((out != -1).sum(1) - 1).clamp_min(0)[keep].sum())


@pytest.mark.parametrize("kind", SAMPLER_CLASSES)
def test_strict_mode_raises_naming_the_argument(kind):
    name = {
        "draft id 10^9": "draft_token_ids",
        "negative draft id": "draft_token_ids",
        "bonus id out of range": "bonus_token_ids",
        "negative bonus id": "bonus_token_ids",
        "NaN q row": "target_with_bonus_probs",
        "all-zero q row": "target_with_bonus_probs",
        "negative p": "draft_probs",
        "inf p": "draft_probs",
    }[kind]
    with pytest.raises(ValueError, match=name):
        make_sampler("cactus-taylor", strict_mode=True)(*_corrupt(kind, *_batch()))


def test_ragged_layout_flags_invalid_requests():
    s = make_sampler("sps")
    t = torch.full((5, 8), 1 / 8)
    out = ragged_forward(
        s, torch.tensor([1, 2, 10**9, 0, 1]), [2, 1, 0, 2], None, t, torch.tensor([[1], [2], [3], [1]])
    )
    assert out[1].tolist() == [-1, -1, -1] and s.last_invalid_rows.tolist() == [False, True, False, False]
    out = ragged_forward(
        s, torch.tensor([1, 2, 3, 0, 1]), [2, 1, 0, 2], None, t, torch.tensor([[1], [2], [-4], [1]])
    )  # the k = 0 request's bonus
    assert out[2].tolist() == [-1, -1, -1]


@pytest.mark.parametrize(
    "arg", ["target_with_bonus_probs", "bonus_token_ids", "draft_probs", "draft_token_ids"]
)
def test_numpy_array_into_a_sampler_is_a_type_error_naming_it(arg):
    q, bonus, p, ids = _batch()
    args = dict(target_with_bonus_probs=q, bonus_token_ids=bonus, draft_probs=p, draft_token_ids=ids)
    args[arg] = args[arg].numpy()
    with pytest.raises(TypeError, match=arg):
        make_sampler("sps")(**args)


@pytest.mark.parametrize("seeded", [{0: 5}, {0: np.random.default_rng(0)}, [torch.Generator()]])
def test_wrong_generator_type_is_a_type_error(seeded):
    with pytest.raises(TypeError, match="seeded_seqs"):
        make_sampler("sps")(*_batch(), seeded_seqs=seeded)
    with pytest.raises(TypeError, match="seeded_seqs"):
        ragged_forward(
            make_sampler("sps"),
            torch.tensor([1, 2]),
            [1, 1],
            None,
            torch.full((2, 4), 0.25),
            torch.tensor([[0], [1]]),
            generators=seeded,
        )


# -- solvers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: exact_spike(np.array(1.5), 0.1), "q_n"),
        (lambda: exact_spike(np.array(-0.1), 0.1), "q_n"),
        (lambda: exact_spike(np.array(NAN), 0.1), "q_n"),
        (lambda: exact_spike(np.array(0.3), -1.0), "delta"),
        (lambda: exact_spike(np.array(0.3), NAN), "delta"),
        (lambda: exact_spike(np.array(0.3), 0.1, iterations=-1), "iterations"),
        (lambda: taylor_spike(np.array(0.3), -1.0), "delta"),
        (lambda: taylor_spike(np.array(0.3), NAN), "delta"),
        (lambda: taylor_spike(np.array(1.5), 0.1), "q_n"),
        (lambda: spike_scale(np.array(0.3), np.array(2.0)), "gamma"),
        (lambda: fr.frontier(Q, P, [NAN]), "eps"),
        (lambda: fr.frontier(Q, P, []), "eps"),
        (lambda: fr.frontier([NAN, 0.5, 0.5], P, [0.1]), "target_probs"),
        (lambda: fr.frontier(Q, [0.5, 0.5], [0.1]), "draft_probs"),
        (lambda: fr.frontier_curve(Q, P, n_points=1), "n_points"),
        (lambda: fr.min_divergence_for_acceptance(Q, P, NAN), "acceptance"),
        (lambda: fr.min_divergence_for_acceptance(Q, P, 0.5, steps=0), "steps"),
        (lambda: fr.saturation_budget(Q, [0.5, NAN, 0.5]), "draft_probs"),
        (lambda: men.solve_mentored(np.array(Q), np.array(P), NAN), "budget"),
        (lambda: men.solve_mentored(np.array([NAN, 0.5, 0.5]), np.array(P), 0.1), "target_probs"),
        (lambda: men.max_acceptance(Q, P, -1.0), "budget"),
        (lambda: men.mentored_target([0.5, 0.6, 0.1], P, 0.1), "target_probs"),
    ],
)
def test_solver_functions_validate(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_cvxpy_oracles_validate():
    from cactus_theory.solvers._cvx import max_draft_probability_cvxpy
    from cactus_theory.solvers._cvx_frontier import max_acceptance_cvxpy

    for call, name in [
        (lambda: max_draft_probability_cvxpy(Q, 1.5, 0.1), "token_id"),
        (lambda: max_draft_probability_cvxpy(Q, -1, 0.1), "token_id"),
        (lambda: max_draft_probability_cvxpy(Q, 0, NAN), "delta"),
        (lambda: max_draft_probability_cvxpy([NAN, 0.5, 0.5], 0, 0.1), "target_probs"),
        (lambda: max_acceptance_cvxpy(Q, P, -1.0), "budget"),
        (lambda: max_acceptance_cvxpy(Q, P, 0.1, "wasserstein"), "divergence"),
    ]:
        with pytest.raises(ValueError, match=name):
            call()


# -- analysis, frontier, calibration -------------------------------------------------------------


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: ct.analyze(get_rule("sps"), [NAN, 0.5, 0.5], P), "target_probs"),
        (lambda: ct.analyze(get_rule("sps"), Q, [0.5, 0.6, 0.1]), "draft_probs"),
        (lambda: ct.analyze(get_rule("sps"), Q, [0.5, 0.5]), "draft_probs"),
        (lambda: ct.emitted_distribution(get_rule("sps"), [[0.5, -0.1, 0.6]], [P]), "target_probs"),
        (lambda: get_rule("cactus-taylor", delta=NAN), "delta"),
        (lambda: get_rule("cactus-exact-kl", delta=-1), "delta"),
        (lambda: get_rule("no-such-rule"), "rule"),
        (lambda: afr.operating_points("cactus-taylor", Q, P, values=[]), "values"),
        (lambda: afr.operating_points("cactus-taylor", Q, P, values=[NAN]), "delta"),
        (lambda: afr.operating_points("cactus-taylor", Q, P, knob="bogus", values=[0.1]), "bogus"),
        (lambda: afr.all_operating_points(Q, P, rules=[]), "rules"),
        (lambda: afr.default_sweep("cactus-taylor", 1), "n_points"),
        (lambda: afr.default_sweep("no-such-rule"), "rule"),
        (lambda: afr.gap_to_frontier(Q, P, NAN, 0.1), "acceptance"),
        (lambda: afr.gap_to_frontier(Q, P, 0.5, NAN), "divergence_value"),
        (lambda: ct.calibrate_delta(Q, P, NAN), "eps"),
        (lambda: ct.calibrate_delta(Q, P, -1.0), "eps"),
        (lambda: cal.emitted_divergence_curve(Q, P, []), "deltas"),
        (lambda: cal.emitted_divergence_curve(Q, P, [NAN]), "deltas"),
        (lambda: cal._corpus_divergence_distribution([Q], [P], []), "deltas"),
        (lambda: cal.global_delta([Q], [P], 0.1, statistic="bogus"), "statistic"),
        (lambda: cal._spike_for(Q, NAN), "delta"),
        (lambda: cal._spike_for(Q, 0.1, base="bogus"), "base"),
        (lambda: cal._spike_for([0.5, 0.6, 0.1], 0.1), "target_probs"),
        (lambda: cal._saturation_delta([NAN, 0.5, 0.5]), "target_probs"),
        (lambda: cal.compare_with_mentored(Q, P, NAN), "eps"),
    ],
)
def test_analysis_functions_validate(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("ids", [np.array(1.5), np.array(3), np.array(-1), np.array([0.5])])
def test_non_integer_or_out_of_range_token_id_is_named(ids):
    """A numpy token id is an integer in [0, V): 1.5 is not truncated to 1, -1 does not wrap."""
    plan = get_rule("cactus-taylor", delta=0.5).plan(np.array(Q), np.array(P))
    with pytest.raises(ValueError, match="token_ids"):
        plan.accept_probs_at(ids)


# -- dumps ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["nan", "negative", "unnormalized", "negative token id"])
def test_dump_with_valid_checksum_but_invalid_rows_is_named_by_file(tmp_path, damage):
    from cactus_theory.logits import DumpFormatError, load_dump, shipped_dumps
    from cactus_theory.logits._format import read_arrays, write_arrays

    arrays, meta = read_arrays(shipped_dumps()[0])
    meta.pop("checksum")
    if damage == "nan":
        arrays["target_probs"][0] = NAN
    elif damage == "negative":
        arrays["draft_probs"][1] = -0.25
    elif damage == "unnormalized":
        arrays["target_probs"][: arrays["row_offsets"][1]] *= 2.0
    else:
        arrays["token_ids"][0] = -7
    path = tmp_path / f"damaged_{damage.replace(' ', '_')}.npz"
    write_arrays(path, arrays, meta)  # a fresh, valid checksum over the damaged arrays
    with pytest.raises(DumpFormatError, match=path.name):
        load_dump(path)
    assert issubclass(DumpFormatError, ValueError)
