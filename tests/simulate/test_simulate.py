"""The teacher-forced chain's metrics (``simulate/_metrics.py``): the paper's relative Rej and
the relations between the metric conventions.

The chain itself is tested in ``test_chain.py``, its exact DP and sequence divergence in
``test_exact.py``, the subcommand in ``test_simulate_cli.py``.
"""

import pytest

from cactus_theory.simulate import compute_metrics, exact_chain, synthetic_trajectory
from cactus_theory.simulate._metrics import Estimate, rej_relative


def _tiny(T, V, seed, truncated=False):
    return synthetic_trajectory("dirichlet", T, V, seed, top_k=2 if truncated else None, concentration=0.7)


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
def test_rej_relative_from_paper_al_column():
    """Paper Table (GSM8K, m = 20): AL 5.11 (SpS) and 7.15 (Cactus 0.75) give Rej = -35.3 %.

    The paper prints -36 %: rejected drafts per generated token, (m - AL)/(AL + 1), reproduces
    its Rej column to within ~2 points, not exactly (it likely averages per sample).
    """
    per_tok = lambda al: {"rejected_per_token": Estimate((20 - al) / (al + 1))}  # noqa: E731
    rej = rej_relative(per_tok(7.15), per_tok(5.11)).value
    assert rej == pytest.approx(-0.353, abs=1e-3)
    assert abs(rej - (-0.36)) > 0.005


def test_metric_conventions_relation():
    traj = _tiny(50, 6, seed=5)
    ex = compute_metrics(exact_chain("cactus-taylor", traj, 4).totals, cost_ratio=0.0)
    assert ex["tokens_per_call"].value == pytest.approx(ex["al_paper"].value + 1, abs=1e-12)
    assert ex["speedup"].value == pytest.approx(ex["tokens_per_call"].value, abs=1e-12)  # c = 0
    assert sum(h.value for h in ex["hist"]) == pytest.approx(1.0, abs=1e-12)
    assert ex["v0_system_efficiency"].value <= 1.0
