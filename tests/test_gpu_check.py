"""``scripts/gpu_check.py`` runs end to end as a dry run on the CPU (its code paths; the CUDA
checks themselves need a GPU): every section reports, the sync section by the host-read
recorder, and the summary is written as JSON and text."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check_script", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_writes_every_section(tmp_path):
    mod = _script()
    rc = mod.main(["--dry-run", "--rules", "sps", "cactus-exact-kl", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    text = (tmp_path / "gpu_check.txt").read_text()
    assert rc == 0, text
    assert summary["dry_run"] is True and summary["passed"] is True
    assert set(summary["law"]) == {"sps", "cactus-exact-kl"}
    for name in ("sps", "cactus-exact-kl"):
        assert summary["sync"][name] == {"eager": "sync-free", "vllm_rows": "sync-free"}
    assert summary["sync"]["vllm_layouts"] == "sync-free"
    ops = {
        n: summary["speed"][n]["sync"]["aten_ops_accept_path"] for n in ("cactus-taylor", "cactus-exact-kl")
    }
    assert 0 < ops["cactus-taylor"] < ops["cactus-exact-kl"]  # the root iterates; Taylor is a formula
    goal = summary["goals"]["exact_over_taylor_accept"]
    assert goal["gated"] is False and goal["ratio"] > 0
    assert "skipped" in summary["plugin_overhead"] or "rules" in summary["plugin_overhead"]
    assert summary["analysis"]["rules"]["cactus-exact-kl"]["ok"]


def test_sync_check_reports_a_host_read():
    """The dry run's sync check names a host read (else its 'sync-free' could not fail)."""
    import torch

    mod = _script()
    x = torch.ones(3)
    assert mod.sync_free(lambda: (x * 2).sum(), torch.device("cpu")) == "sync-free"
    got = mod.sync_free(lambda: float(x.sum()), torch.device("cpu"))
    assert got.startswith("SYNC: ") and "_local_scalar_dense" in got
