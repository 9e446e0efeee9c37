"""``cactus-theory`` through ``main([...])`` in a test: its exit status, what it printed and its
error lines, or its ``--json`` output parsed back."""

import json

from cactus_theory.cli import main


def run(capsys, *argv):
    """main(argv) -> (status, stdout, stderr lines)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, [ln for ln in err.splitlines() if ln.strip()]


def run_json(capsys, *argv):
    """main(argv + ["--json"]) parsed, after checking that it exited 0."""
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)
