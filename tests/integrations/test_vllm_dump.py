"""``cactus-theory dump --engine vllm``: vLLM generates, the plugin's recorder writes the rows it
verified, and the shards go straight into ``analyze`` and ``audit``.

Where vLLM is installed (``.venv-vllm``, the vLLM stage of ``./dev test``) the command runs end to
end on two tiny random Llama models (:mod:`vllm_server`); elsewhere it must refuse with one
line and exit 2.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _cli(*argv, timeout=600):
    code = "import sys; from cactus_theory.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout
    )


def test_engine_vllm_refusal_is_one_line_on_stderr(tmp_path, capsys):
    if HAS_VLLM:
        pytest.skip("vLLM is installed here: the refusal applies where it is not")
    from cactus_theory.cli import main

    status = None
    try:
        status = main(["dump", "--engine", "vllm", "--out-dir", str(tmp_path)])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "engine: vllm is not installed" in err[0]
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed here (./dev test runs this in .venv-vllm)")
def test_dump_with_vllm_records_rows_that_analyze_and_audit_read(tmp_path):
    import vllm_server

    from cactus_theory.integrations.vllm._counters import recorded_rounds
    from cactus_theory.logits._format import read_arrays, validate_compact

    target, drafter = vllm_server.build_models(tmp_path / "models")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello world\ndef f(x):\nthe cat sat on\n")
    out = tmp_path / "rows"
    argv = ["dump", "--engine", "vllm", "--verifier", str(target), "--drafter", str(drafter)]
    argv += [
        "--prompts",
        str(prompts),
        "--out-dir",
        str(out),
        "--new-tokens",
        "16",
        "--max-prompt-tokens",
        "32",
    ]
    argv += ["--temperature", "0.8", "--top-k", "0", "--top-p", "1", "--top-k-raw", "128"]
    argv += ["--engine-rule", '{"rule": "cactus-taylor", "delta": 0.5}', "--json"]
    res = _cli(*argv)
    assert res.returncode == 0, res.stderr[-3000:]
    paths = json.loads(res.stdout)["paths"]  # vLLM's log goes to stderr
    assert paths and all(p.startswith(str(out)) for p in paths)
    for p in paths:
        arrays, meta = read_arrays(p)
        validate_compact(p, arrays, meta)
        assert meta["engine"] == "vllm" and meta["rule"] == "cactus-taylor"
    rec = recorded_rounds(out)
    # every round drafts 3 tokens and emits 1 to 4; 3 prompts of at most 16 tokens (fewer after
    # an EOS), of which each request's first comes from the prefill step, not from a round, and
    # a request's last round may run up to 3 tokens past its end
    assert all(len(r) == 3 for r in rec.rounds)
    emitted = rec.num_accepted + 1
    assert np.all((emitted >= 1) & (emitted <= 4)) and emitted.sum() <= 3 * (15 + 3)
    # whole rows (T = 0.8, no truncation): the engine's float32 softmax of 128 entries sums to 1
    # within 128 roundings of 2**-24 each (7.6e-6)
    np.testing.assert_allclose(rec.target_probs.sum(-1), 1.0, rtol=0, atol=128 * 2.0**-24)
    for command in ("analyze", "audit"):
        res = _cli(command, "--input", str(out), "--rules", "sps,cactus-taylor", "--json", "--no-progress")
        assert res.returncode == 0, res.stderr[-3000:]
        data = json.loads(res.stdout)
        assert [r["rule"] for r in data["table"]] == ["sps", "cactus-taylor"]
    bad = _cli("dump", "--engine", "vllm", "--verifier", str(target), "--out-dir", str(out))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "drafter" in bad.stderr
