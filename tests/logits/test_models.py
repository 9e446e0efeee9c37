"""Model-backed smoke tests (marked ``model``): SmolLM2-135M-Instruct through the dump tool.

SmolLM2 loads from its GGUF file the first time, then from the local float32 copy that
``./dev setup`` prepares (``cactus-theory models --prepare``).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from cactus_theory.logits._drafters import early_exit_logits, early_exit_model  # noqa: E402
from cactus_theory.logits._models import SMOLLM2_LAYERS  # noqa: E402


@pytest.mark.model
def test_dump_matches_direct_forward(smollm2, tmp_path):
    from cactus_theory.logits import load_dump
    from cactus_theory.logits._prompts import benchmark_mix
    from cactus_theory.logits._runner import SamplingParams, processed_dense
    from cactus_theory.logits.dump import DumpConfig, dump_pairs

    prompts = [p for p in benchmark_mix(1) if p.category in ("gsm8k", "coding")]
    sp = SamplingParams()
    cfg = DumpConfig(sampling=sp, new_tokens=5, batch_size=2, top_k_raw=16, max_prompt_tokens=64)
    (path,) = dump_pairs(smollm2, ["early-exit:10"], prompts, tmp_path, cfg, progress=False)
    d = load_dump(path)
    assert d.meta["transforms"] == sp.as_dict() and d.meta["drafter_spec"] == "early-exit:10"
    ee = early_exit_model(smollm2.model, 10)
    n = 0
    for t in d.trajectories():
        seq = torch.tensor([list(t.prompt_token_ids) + list(t.token_ids)])
        P = len(t.prompt_token_ids)
        with torch.no_grad():
            zq = smollm2.model(seq).logits[0, P - 1 : P - 1 + len(t)]
            zp = ee(seq).logits[0, P - 1 : P - 1 + len(t)]
        for z, proc, raw in (
            (zq, t.target_probs, t.raw_target_probs),
            (zp, t.draft_probs, t.raw_draft_probs),
        ):
            full_raw = torch.softmax(z.double(), -1).numpy()
            full_proc = processed_dense(z, sp).numpy()
            c = t.columns
            real = c >= 0
            idx = np.where(real, c, 0)
            # The dump ran batched (left padding) with a KV cache, the check runs one unpadded
            # forward: float32 kernels differ by ~1e-5 in the logits, i.e. ~1e-5 relative in the
            # probabilities; 1e-4 absolute leaves a margin and still catches any misalignment
            # (an off-by-one position changes probabilities by O(0.1)).
            np.testing.assert_allclose(np.take_along_axis(full_raw, idx, 1)[real], raw[real], atol=1e-4)
            np.testing.assert_allclose(np.take_along_axis(full_proc, idx, 1)[real], proc[real], atol=1e-4)
            # the processed support is entirely inside the stored columns
            assert np.allclose(proc.sum(-1), 1.0, atol=1e-9)
            assert np.all((full_proc > 1e-3).sum(-1) <= (proc > 0).sum(-1) + 1)
        # the emitted tokens are in the verifier's processed support
        hit = t.columns == t.token_ids[:, None]
        assert np.all(hit.sum(1) == 1) and np.all(t.target_probs[hit] > 0)
        n += len(t)
    assert 2 <= n <= 10  # 5 tokens per prompt, fewer only if an EOS came first


@pytest.mark.model
def test_early_exit_reads_hidden_states(smollm2):
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = smollm2.model(ids, output_hidden_states=True)
        for k in (3, 29):
            a = early_exit_model(smollm2.model, k)(ids).logits
            b = early_exit_logits(smollm2.model, out.hidden_states, k)
            # same modules, same inputs: identical up to float32 reassociation (1e-4 on logits ~10)
            assert (a - b).abs().max() < 1e-4
        # the layer count the command line checks early-exit:K against before loading
        assert smollm2.model.config.num_hidden_layers == SMOLLM2_LAYERS == 30
        # all 30 layers would be the verifier itself (acceptance ~1 under a drafter's name)
        with pytest.raises(ValueError, match="^drafter: 'early-exit:30'"):
            early_exit_logits(smollm2.model, out.hidden_states, 30)
        # the model is the real SmolLM2: the documented check from models-and-data.md
        pr = torch.softmax(out.logits[0, -1], -1)
        top = int(pr.argmax())
        assert smollm2.tokenizer.decode([top]) == " Paris" and 0.7 < float(pr[top]) < 0.85
