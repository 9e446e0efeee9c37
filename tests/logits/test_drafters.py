"""The built-in drafters (``logits/_drafters.py``): round-to-nearest re-quantization, the
distilled drafter's int8 file (written and read back on a tiny random Llama, no model hub) and
the shipped distilled weights on SmolLM2 (marked ``model``)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import tiny_llama  # noqa: E402

from cactus_theory.logits._drafters import (  # noqa: E402
    DistilledDrafter,
    load_distilled,
    rtn_quantize_,
    save_distilled,
)


def test_rtn_quantize_levels_and_error():
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    q = rtn_quantize_(w.clone(), bits=3)
    for g in range(2):
        blk, orig = q[:, 32 * g : 32 * (g + 1)], w[:, 32 * g : 32 * (g + 1)]
        for r in range(4):
            assert len(torch.unique(blk[r])) <= 8  # 3 bits: at most 8 levels per group
            step = (orig[r].max() - orig[r].min()) / 7
            # round to nearest: error at most half a step (plus float32 rounding, 1e-6)
            assert (blk[r] - orig[r]).abs().max() <= step / 2 + 1e-6


def _tiny_distilled(seed):
    """A distilled drafter on a 4-layer tiny Llama (V = 11): 2 frozen layers, 1 trained layer
    with random weights, the sub-vocabulary {1, 4, 6, 9} and a random bias."""
    verifier = tiny_llama(11, seed=seed, layers=4)
    d = DistilledDrafter(verifier, torch.tensor([1, 4, 6, 9]), n_frozen=2, n_trained=1)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for v in d.trained_state().values():
            v.copy_(0.1 * torch.randn(v.shape, generator=g))
    return verifier, d.eval()


def test_distilled_drafter_round_trips_through_its_int8_file(tmp_path):
    """save_distilled then load_distilled gives back every trained tensor to within the int8
    code's error: per group of 32, half a step (max |w| / 254) plus the float16 scale's
    relative rounding (2^-11) over at most 127 steps; frozen layers are the verifier's own.
    The drafter's law is zero outside its sub-vocabulary and sums to 1 inside it."""
    verifier, d = _tiny_distilled(0)
    path = save_distilled(d, tmp_path / "drafter.pt", meta={"steps": 3})
    back = load_distilled(verifier, path)
    assert back.meta == {"steps": 3} and back.sub_vocab.tolist() == [1, 4, 6, 9]
    assert back.inner.layers[0] is verifier.model.layers[0]
    for name, w in d.trained_state().items():
        got = back.trained_state()[name]
        if w.dim() == 2 and w.shape[1] % 32 == 0:
            groups = w.reshape(w.shape[0], -1, 32)
            step = groups.abs().amax(-1, keepdim=True) / 127
            err = (got.reshape(groups.shape) - groups).abs()
            assert torch.all(err <= step * (0.5 + 127 * 2**-11) + 1e-12), name
        else:  # vectors and odd shapes are stored in float32 as they are
            assert torch.equal(got, w), name
    ids = torch.tensor([[2, 3, 5]])
    with torch.no_grad():
        p = torch.softmax(back(ids).logits.double(), -1)
    outside = torch.ones(11, dtype=torch.bool)
    outside[[1, 4, 6, 9]] = False
    assert torch.all(p[..., outside] == 0)
    assert torch.allclose(p.sum(-1), torch.ones(1, 3, dtype=torch.float64), atol=1e-12)


def test_load_distilled_refuses_a_missing_or_foreign_file(tmp_path):
    verifier, _ = _tiny_distilled(1)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_distilled(verifier, tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="junk.pt: not a readable distilled-drafter file"):
        load_distilled(verifier, tmp_path / "junk.pt")
    torch.save({"format": "something/2"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="other.pt: unknown format 'something/2'"):
        load_distilled(verifier, tmp_path / "other.pt")


@pytest.mark.model
def test_distilled_drafter_loads_and_is_sparse(smollm2):
    from cactus_theory.logits._drafters import DISTILLED_PATH, load_distilled

    if not DISTILLED_PATH.exists():
        pytest.skip("distilled drafter weights not trained yet")
    d = load_distilled(smollm2.model)
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        z = d(ids).logits[0, -1]
    p = torch.softmax(z.double(), -1)
    assert abs(float(p.sum()) - 1) < 1e-9  # float64 softmax
    assert int((p > 0).sum()) == len(d.sub_vocab)  # zero outside the sub-vocabulary
