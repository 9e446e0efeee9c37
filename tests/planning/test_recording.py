"""Recordings as the planner reads them (``planning/_recording.py``): vLLM's ``/metrics``
counters parsed and summed, and recorded rounds' exact survival against a hand computation.
The shipped decoding records' profile is in ``test_profile.py``."""

import numpy as np
import pytest

from cactus_theory.planning._recording import Rounds, parse_vllm_metrics, round_survival

_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def test_vllm_counters_are_summed_over_engines_and_missing_positions_count_zero():
    text = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0"} 10.0',
            'vllm:spec_decode_num_drafts_total{engine="1"} 5.0',
            f'{_PER_POS}{{engine="0",position="0"}} 7.0',
            f'{_PER_POS}{{engine="1",position="0"}} 3.0',
            f'{_PER_POS}{{engine="1",position="2"}} 1.0',  # position 1 never reported: 0
            "vllm:num_requests_running 4",  # another counter: ignored
            "",
        ]
    )
    # no vllm:spec_decode_num_accepted_tokens counter: the accepted total is None
    assert parse_vllm_metrics(text) == ([10, 0, 1], 15, None)
    both = text + '\nvllm:spec_decode_num_accepted_tokens{engine="0"} 11'  # without _total too
    assert parse_vllm_metrics(both) == ([10, 0, 1], 15, 11)


@pytest.mark.parametrize(
    "text, message",
    [
        ("vllm:spec_decode_num_drafts_total 3", "^text: no vllm:spec_decode_num_accepted_tokens_per_pos"),
        (
            f'{_PER_POS}{{engine="0"}} 3',
            "^text: vllm:spec_decode_num_accepted_tokens_per_pos without a position",
        ),
        (
            f'{_PER_POS}{{position="0"}} many',
            "^text: counter vllm:spec_decode_num_accepted_tokens_per_pos has no number",
        ),
    ],
)
def test_bad_metrics_text_is_refused_naming_text(text, message):
    with pytest.raises(ValueError, match=message):
        parse_vllm_metrics(text)


def test_round_survival_is_the_product_of_sps_acceptances_at_the_recorded_drafts():
    """Three rows, two rounds (rows 0, 1 and row 2): SpS accepts draft n with min(1, q_n/p_n),
    so round 0 survives with 1/2 then 1/2 * 1 and round 1 with 1/4, padded with 0 (dyadic:
    exact in float64)."""
    q = np.array([[0.25, 0.75], [0.5, 0.5], [0.125, 0.875]])
    p = np.array([[0.5, 0.5], [0.25, 0.75], [0.5, 0.5]])
    rounds = Rounds(
        target_probs=q,
        draft_probs=p,
        raw_target_probs=q,
        raw_draft_probs=p,
        draft_col=np.array([0, 0, 0]),
        rounds=[np.array([0, 1]), np.array([2])],
        request=np.array([0, 0]),
        accepted=None,
    )
    assert rounds.max_drafts == 2
    assert round_survival(rounds, "sps").tolist() == [[0.5, 0.5], [0.25, 0.0]]
    # a rule with knobs: Cactus-Taylor at delta = 0 is SpS
    assert round_survival(rounds, "cactus-taylor", {"delta": 0.0}).tolist() == [[0.5, 0.5], [0.25, 0.0]]
