"""``scripts/gpu_check.py`` runs end to end as a dry run on the CPU (its code paths; the CUDA
checks themselves need a GPU): every section reports, the sync section by the host-read
recorder, and the summary is written as JSON and text."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check_script", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _readme():
    if "update_readme" in sys.modules:
        return sys.modules["update_readme"]
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_writes_every_section(tmp_path):
    mod = _script()
    rc = mod.main(
        ["--dry-run", "--rules", "sps", "cactus-exact-kl", "cactus-calibrated", "--out", str(tmp_path)]
    )
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    text = (tmp_path / "gpu_check.txt").read_text()
    assert rc == 0, text
    assert summary["dry_run"] is True and summary["passed"] is True
    assert set(summary["law"]) == {"sps", "cactus-exact-kl", "cactus-calibrated"}
    for name in ("sps", "cactus-exact-kl", "cactus-calibrated"):
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
    assert "skipped" in summary["exact_root_kernel"] and "skipped" in summary["real_kernels"]
    assert summary["date"] and summary["time_utc"].startswith(summary["date"])
    (tmp_path / "gpu_check.json").rename(tmp_path / "dry.json")


def test_the_docs_gpu_block_reads_the_latest_record(tmp_path):
    """``--save``'s file name, and the generated GPU block: the newest dated record (dry runs
    and undated records skipped), with whether it predates the current code."""
    mod, readme = _script(), _readme()
    assert mod.main(["--dry-run", "--rules", "sps", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert readme.latest_gpu_check(tmp_path) is None  # gpu_check.json: not a gpu_check_*.json
    summary.update(dry_run=False, device_name="NVIDIA H200", commit=None)
    old = dict(summary, time_utc="2000-01-01T00:00:00Z", date="2000-01-01")
    assert Path(mod.save_benchmark(old, tmp_path)).name == "gpu_check_h200_2000-01-01.json"
    path = Path(mod.save_benchmark(summary, tmp_path))
    assert path.name == f"gpu_check_h200_{summary['date']}.json"
    (tmp_path / "gpu_check_undated.json").write_text(json.dumps({"law": {}}))
    assert readme.latest_gpu_check(tmp_path)[0] == path
    text = readme._gpu_table(None, tmp_path)
    assert text.startswith(f"NVIDIA H200, {summary['date']}, commit unknown")
    assert "predates the current code is unknown" in text and "sps" in text
    assert readme.gpu_record_status(None) == "unknown"
    head = mod._commit()
    if head:  # a checkout with its history: HEAD's own record is current
        assert readme.gpu_record_status(head) == "current"


def test_sync_check_reports_a_host_read():
    """The dry run's sync check names a host read (else its 'sync-free' could not fail)."""
    import torch

    mod = _script()
    x = torch.ones(3)
    assert mod.sync_free(lambda: (x * 2).sum(), torch.device("cpu")) == "sync-free"
    got = mod.sync_free(lambda: float(x.sum()), torch.device("cpu"))
    assert got.startswith("SYNC: ") and "_local_scalar_dense" in got


def test_vendor_script_copies_vllms_kernels_without_vllm_imports(tmp_path):
    """``scripts/vendor_gpu_kernels.py`` on the installed vLLM (the vLLM environment's; skipped
    without one): the V1 runner's three Triton kernels and the newer runner's module tree,
    importing triton directly and nothing of vllm."""
    import re

    spec = importlib.util.spec_from_file_location(
        "vendor_gpu_kernels", ROOT / "scripts" / "vendor_gpu_kernels.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        vllm = mod._default_vllm()
    except SystemExit:
        import pytest

        pytest.skip("no .venv-vllm with vLLM's sources")
    assert mod.main(["--vllm", vllm, "--out", str(tmp_path)]) == 0
    mrv1 = (tmp_path / "mrv1_kernels.py").read_text()
    for name in mod.MRV1_KERNELS:
        assert f"def {name}(" in mrv1
    for path in tmp_path.rglob("*.py"):
        assert not re.search(r"^\s*(from|import) vllm\b", path.read_text(), flags=re.M), path
    assert (tmp_path / "mrv2" / "rejection_sampler_utils.py").exists()
    assert (tmp_path / "SOURCE").read_text().startswith("vllm ")
