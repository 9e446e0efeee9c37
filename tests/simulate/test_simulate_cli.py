"""The ``cactus-theory simulate`` subcommand's table and its bad arguments
(``simulate/_cli.py``)."""

import argparse

import pytest

from cactus_theory.simulate import _cli as cli


def _args(*extra):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    cli.add_parser(sub)
    return ap.parse_args(
        [
            "simulate",
            "--no-progress",
            "--trajectories",
            "2",
            "--runs",
            "30",
            "--length",
            "40",
            "--vocab-size",
            "16",
            *extra,
        ]
    )


def test_cli_table():
    text = cli.simulate_table(_args("--rule", "cactus-exact-kl", "--knob", "delta=0.5"))
    assert "teacher-forced" in text
    assert "AL_m" in text and "tokens / verifier call" in text and "Rej" in text
    assert "upper bound" in text and "Monte-Carlo" in text
    assert "delta=0.5" in text


@pytest.mark.parametrize(
    "extra, arg",
    [
        (("--runs", "0"), "runs"),
        (("--rule", "nope"), "rule"),
        (("--knob", "delta"), "knob"),
        (("--top-p", "2"), "top-p"),
        (("--cost-ratio", "-1"), "cost-ratio"),
        (("--family", "nope"), "family"),
        (("--knob", "delta=-1"), "delta"),
    ],
)
def test_cli_bad_arguments_raise_value_error(extra, arg):
    with pytest.raises(ValueError, match=arg):
        cli.run(_args(*extra))
