"""Every ``--json`` output of the command line is strict JSON, in the package's one encoding.

The encoding (:func:`cactus_theory._tables.json_ready`, used by every ``to_dict`` and every
``--json``): numpy unwrapped, a non-finite float written as the string ``"nan"``, ``"inf"`` or
``"-inf"``. RFC 8259 has no NaN nor Infinity; Python's :mod:`json` writes and reads them by
default, so each output here is parsed with a hook that refuses them (``parse_constant``).

Each subcommand that has a ``--json`` flag (read from the parser, so a new one must be added
to :data:`ARGV`) runs once on a small input; the real-model ones (``dump``, ``decode``) only
where the installed SmolLM2 is (marker ``model``).
"""

import json
import math

import numpy as np
import pytest

from cactus_theory import cli
from cactus_theory._tables import json_ready, to_json
from cactus_theory.results import Result

Q = "0.30,0.25,0.15,0.12,0.08,0.05,0.03,0.02"
P = "0.05,0.40,0.20,0.10,0.10,0.05,0.05,0.05"
QP = ["--q", Q, "--p", P]

#: A small run of each subcommand with ``--json`` ({tmp} is a fresh folder).
ARGV = {
    "report": ["report", "--sections", "taylor", "--no-progress"],
    "rules": ["rules"],
    "solve": ["solve", *QP, "-n", "1", "--delta", "0.5"],
    "analyze": ["analyze", *QP, "--rules", "sps,cactus-taylor", "--delta", "0.5"],
    # eps = inf: the saturated end of the frontier, a non-finite number in the output
    "frontier": ["frontier", *QP, "--eps", "0,0.1,inf"],
    "calibrate": ["calibrate", *QP, "--eps", "0.1"],
    "audit": [
        "audit",
        "--input",
        "distilled",
        "--rules",
        "sps",
        "--positions",
        "40",
        "-m",
        "2",
        "--no-progress",
    ],
    "plan": [
        "plan",
        "-i",
        "distilled",
        "--eps",
        "0.05",
        "--draft-cost",
        "0.1",
        "-m",
        "2",
        "--positions",
        "48",
    ],
    "simulate": [
        "simulate",
        "--length",
        "16",
        "--trajectories",
        "1",
        "--runs",
        "5",
        "-m",
        "2",
        "--no-progress",
    ],
    "figures": ["figures", "-o", "{tmp}/figures", "--names", "gamma", "--format", "png"],
    "benchmark": ["benchmark", "--repeats", "1", "--quick", "--sections", "spike"],
    "models": ["models"],
    "dump": [
        "dump",
        "--prompts",
        "gsm8k",
        "--per-category",
        "1",
        "--new-tokens",
        "2",
        "--batch-size",
        "1",
        "--drafter",
        "early-exit:20",
        "--no-progress",
        "-o",
        "{tmp}/dump",
    ],
    "decode": [
        "decode",
        "--n-prompts",
        "1",
        "--max-new-tokens",
        "2",
        "-m",
        "2",
        "--no-progress",
        "--repeats",
        "1",
    ],
}
#: The subcommands that load a real model.
MODEL = {"dump", "decode"}


def _refuse(name):
    raise ValueError(f"not strict JSON: {name}")


def strict_loads(text: str):
    """json.loads refusing NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=_refuse)


def _json_commands() -> list[str]:
    sub = cli._build_parser()._subparsers._group_actions[0]
    return sorted(
        name
        for name, p in sub.choices.items()
        if any("--json" in a.option_strings for a in p._actions) or p.get_default("missing_extra")
    )


def test_every_json_subcommand_has_a_run_here():
    assert set(_json_commands()) <= set(ARGV), set(_json_commands()) - set(ARGV)


def test_the_strict_parser_refuses_what_python_writes_by_default():
    for bad in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ValueError, match="not strict JSON"):
            strict_loads(f'{{"x": {bad}}}')
    assert strict_loads('{"x": "nan"}') == {"x": "nan"}


def test_one_encoding_of_non_finite_values_read_back_by_float():
    data = {
        "a": np.array([1.0, np.nan, np.inf, -np.inf]),
        "b": (np.float32(2.5), np.int64(3), np.bool_(True)),
    }
    plain = json_ready(data)
    assert plain == {"a": [1.0, "nan", "inf", "-inf"], "b": [2.5, 3, True]}
    back = strict_loads(to_json(data))
    assert back == plain
    values = [float(v) for v in back["a"]]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2:] == [math.inf, -math.inf]
    with pytest.raises(TypeError, match="json_ready: cannot encode a object"):
        json_ready(object())


def test_results_share_the_base_and_its_encoding():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Probe(Result):
        x: float
        status: str = "saturated"

    @dataclasses.dataclass(frozen=True)
    class Plain(Result):
        y: np.ndarray

    assert Probe(math.inf).to_dict() == {"x": "inf", "status": "saturated"}
    assert (Probe(1.0).status, Probe(1.0).message) == ("saturated", "")
    assert (Plain(np.array([np.nan])).status, Plain(np.array([np.nan])).to_dict()) == ("ok", {"y": ["nan"]})
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        Plain(np.zeros(1)).nope  # noqa: B018


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.model) if n in MODEL else n for n in sorted(ARGV)]
)
def test_json_output_is_strict(name, tmp_path, capsys):
    if name not in _json_commands():
        pytest.skip(f"{name}: not a subcommand with --json here")
    if name in MODEL:
        from cactus_theory.logits import ModelNotAvailable, load_smollm2

        try:
            load_smollm2()
        except ModelNotAvailable as exc:  # pragma: no cover - ./dev setup installs it
            pytest.skip(str(exc))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in ARGV[name]] + ["--json"]
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    data = strict_loads(out)
    assert data not in (None, {}, [])
