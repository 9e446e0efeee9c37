"""Reliability: inputs that used to crash, allocate without bound or name the wrong thing."""

import tracemalloc

import numpy as np
import pytest

from cactus_theory.cli import main
from cactus_theory.simulate import exact_chain, simulate_chain, synthetic_trajectory
from cactus_theory.simulate._chain import position_laws
from cactus_theory.simulate._exact import sequence_log_prob
from cactus_theory.solvers._cvx import max_draft_probability_cvxpy

T = 10


@pytest.fixture(scope="module")
def trajectory():
    return synthetic_trajectory("dirichlet", T, 8, 0)


def test_a_draft_length_beyond_the_trajectory_allocates_nothing_of_its_size(trajectory):
    """m = 10^9 on 10 positions: no round drafts more than T - 1 = 9 tokens, so every result
    equals m = 9's (per-position totals of length 9), and nothing m-sized is allocated."""
    tracemalloc.start()
    huge_exact = exact_chain("cactus-taylor", trajectory, 10**9)
    huge_run = simulate_chain("cactus-taylor", trajectory, 10**9, n_runs=50, rng=1)
    laws = position_laws("cactus-taylor", trajectory)
    tokens = huge_run.tokens  # recorded by default
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # a generous bound for these tiny inputs (T = 10, V = 8, 50 runs): an m-sized float64
    # array alone would be 8 GB
    assert peak < 50e6
    ref_exact = exact_chain("cactus-taylor", trajectory, T - 1)
    ref_run = simulate_chain("cactus-taylor", trajectory, T - 1, n_runs=50, rng=1)
    assert huge_exact.m == 10**9 and huge_run.m == 10**9
    for name in ("rounds", "tokens", "accepted", "drafts", "exposure", "reached", "hist"):
        np.testing.assert_array_equal(getattr(huge_exact.totals, name), getattr(ref_exact.totals, name))
        np.testing.assert_array_equal(getattr(huge_run.totals(), name), getattr(ref_run.totals(), name))
    np.testing.assert_array_equal(huge_run.round_accepted, ref_run.round_accepted)
    np.testing.assert_array_equal(
        sequence_log_prob(laws, 10**9, tokens), sequence_log_prob(laws, T - 1, tokens)
    )


def test_pooled_totals_of_trajectories_of_different_lengths(trajectory):
    """A short trajectory's totals stop at its longest round; pooling pads them with zeros."""
    from cactus_theory.simulate._metrics import pool_totals

    short = synthetic_trajectory("dirichlet", 4, 8, 1)
    a = exact_chain("sps", trajectory, 6).totals
    b = exact_chain("sps", short, 6).totals
    assert (a.draft_length, b.draft_length) == (6, 3)
    pooled = pool_totals([a, b])
    assert pooled.draft_length == 6
    np.testing.assert_array_equal(pooled.exposure[1, 3:], 0.0)
    np.testing.assert_array_equal(pooled.hist[1, :4], b.hist[0])


@pytest.mark.parametrize("rng", ["abc", -1, 1.5, True])
def test_a_bad_rng_is_a_value_error_naming_rng(trajectory, rng):
    with pytest.raises(ValueError, match=r"^rng: "):
        simulate_chain("sps", trajectory, 2, rng=rng)


def test_a_negative_seed_on_the_command_line_names_seed(capsys):
    assert main(["simulate", "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seed" in err[0] and ">= 0" in err[0]


@pytest.mark.parametrize("token", [1.5, "1", True])
def test_a_non_integer_token_id_in_the_cvxpy_oracle_is_named_as_such(token):
    with pytest.raises(ValueError, match=r"^token_id: must be an integer token id"):
        max_draft_probability_cvxpy([0.2, 0.3, 0.5], token, 0.1)


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
def test_no_drafted_tokens_is_a_value_error_naming_draft_token_ids(fused):
    import torch

    from cactus_theory.samplers import make_sampler

    q = torch.full((2, 1, 5), 0.2)
    p = torch.full((2, 0, 5), 0.2)
    with pytest.raises(ValueError, match=r"^draft_token_ids: shape \[B, 0\]"):
        make_sampler("sps", fused=fused)(
            q, torch.zeros(2, 1, dtype=torch.int64), p, torch.zeros(2, 0, dtype=torch.int64)
        )


def test_killed_figures_run_leaves_no_file_cut_short(tmp_path):
    """`cactus-theory figures --out DIR` killed (SIGKILL) mid-run: every file at its final name
    is complete (PDFs end with %%EOF, PNGs with their IEND chunk); only dot-prefixed temporary
    files of the atomic writer may remain."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cactus_theory.cli", "figures", "--out", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a speed test
        while time.monotonic() < deadline and proc.poll() is None:
            if len([f for f in tmp_path.iterdir() if not f.name.startswith(".")]) >= 3:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    final = [f for f in tmp_path.iterdir() if not f.name.startswith(".")]
    assert final, "no figure was written before the kill"
    for f in final:
        data = f.read_bytes()
        if f.suffix == ".pdf":
            assert data.rstrip().endswith(b"%%EOF"), f.name
        elif f.suffix == ".png":
            assert data.endswith(b"IEND\xaeB`\x82"), f.name
