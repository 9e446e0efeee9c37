"""Every registered rule's sampler and vLLM rows run without reading a tensor on the host.

On CUDA, ``scripts/gpu_check.py`` runs them under ``torch.cuda.set_sync_debug_mode("error")``;
here, on CPU tensors, :func:`cactus_theory.testing.sync.assert_no_host_sync` records the same
operations at the Python level (``.item()``, ``bool(tensor)``, ``.tolist()``, ``.numpy()``,
``.cpu()``, boolean masks, ``nonzero``, host data copied in). The exact root solves CPU
tensors on the host by design (numpy: nothing to wait for), and so does ``cactus-calibrated``'s
delta calibration; the tests force their device paths (``solvers._spike._host_tensor`` False),
the ones CUDA tensors take. The rules are those of the
registry at collection time (eager samplers, ``fused=False``; one call each on tiny shapes).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import cactus_theory  # noqa: F401  (registers cactus-calibrated)
from cactus_theory.integrations.vllm import _config as vllm_config
from cactus_theory.integrations.vllm._rows import mrv1_substitute, mrv2_substitute, substitute_target_logits
from cactus_theory.rules import RULES, get_rule
from cactus_theory.samplers import make_sampler
from cactus_theory.solvers import _spike as spike
from cactus_theory.testing.sync import HostSyncError, assert_no_host_sync, record_host_syncs

#: Rules that read tensors on the host by construction, with the reason (strict xfail: a rule
#: made sync-free must leave this list).
KNOWN_HOST_SYNC: dict[str, str] = {}

NAMES = sorted(RULES)


def _marked(names):
    return [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, raises=HostSyncError, reason=KNOWN_HOST_SYNC[n]))
        if n in KNOWN_HOST_SYNC
        else n
        for n in names
    ]


@pytest.fixture
def device_root(monkeypatch):
    """The exact root's device path (what CUDA tensors take) on CPU tensors."""
    monkeypatch.setattr(spike, "_host_tensor", lambda t: False)


def _batch(B=3, k=2, V=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(2 * torch.randn(B, k + 1, V, generator=g), -1)
    p = torch.softmax(2 * torch.randn(B, k, V, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    bonus = torch.randint(0, V, (B, 1), generator=g)
    return q, bonus, p, ids


def test_recorder_sees_each_kind_of_host_read():
    """The recorder flags every kind it claims to (else the tests below could not fail)."""
    x = torch.tensor([0.5, 0.0, 2.0])
    reads = {
        "item": lambda: x.sum().item(),
        "bool": lambda: bool(x[0] > 0),
        "float": lambda: float(x[0]),
        "tolist": lambda: x.tolist(),
        "numpy": lambda: x.numpy(),
        "cpu": lambda: x.cpu(),
        "np.asarray": lambda: np.asarray(x),
        "mask": lambda: x[x > 0],
        "nonzero": lambda: x.nonzero(),
        "host data": lambda: torch.tensor([1.0, 2.0]),
        "asarray of a number": lambda: torch.asarray(0.5, dtype=torch.float32),
        "from_numpy": lambda: torch.from_numpy(np.ones(2)),
        "repeat_interleave": lambda: torch.repeat_interleave(x, torch.tensor([1, 0, 2])),
    }
    for what, read in reads.items():
        with record_host_syncs() as hits:
            read()
        assert hits, what
    reps = torch.tensor([1, 0, 2])
    with record_host_syncs() as hits:  # device-side work, and constructors from tensors
        y = torch.where(x > 0, x, torch.full_like(x, 0.5)).cumsum(0)
        torch.as_tensor(y)
        torch.full((), 0.5)
        torch.repeat_interleave(x, reps, output_size=3)
        y.index_fill_(0, reps[:1], 1.0)
    assert hits == []


@pytest.mark.parametrize("name", _marked(NAMES))
def test_eager_sampler_is_sync_free(name, device_root):
    sampler = make_sampler(name)
    q, bonus, p, ids = _batch()
    sampler(q, bonus, p, ids)  # first call: counters created
    with assert_no_host_sync(f"{name}'s sampler"):
        out = sampler(q, bonus, p, ids)
    assert out.shape == (3, 3)


def _vllm_supported(names):
    out = []
    for name in names:
        try:
            vllm_config.check_rule_supported(get_rule(name))
        except ValueError:
            continue
        out.append(name)
    return out


VLLM_NAMES = _vllm_supported(NAMES)


def test_the_vllm_rule_list_is_not_empty():
    assert {"sps", "cactus-exact", "cactus-taylor", "mentored"} <= set(VLLM_NAMES)


@pytest.mark.parametrize("name", _marked(VLLM_NAMES))
def test_vllm_rows_are_sync_free(name, device_root):
    """The rule's part of the row substitution (both runners call it), random and greedy rows."""
    rule = get_rule(name)
    g = torch.Generator().manual_seed(1)
    logits = 2 * torch.randn(5, 16, generator=g)
    draft = torch.softmax(2 * torch.randn(5, 16, generator=g), -1)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    rows = torch.tensor([True, True, False, True, False])
    # the raw rows (read by the rules that need them) and the requests' temperatures (SCD's)
    raw = {"raw_target_logits": logits, "raw_draft_probs": draft, "temperature": torch.full((5,), 0.7)}
    with assert_no_host_sync(f"{name}'s vLLM rows"):
        substitute_target_logits(rule, logits, draft, ids, rows, **raw)


def test_vllm_runner_layouts_are_sync_free():
    """Both runners' layouts around the rule's rows, mixed greedy and random requests (MRV1
    given its device tensor of cumulative counts, as the plugin passes it; a rule that is not SpS,
    which the plugin does not substitute at all)."""
    rule = get_rule("cactus-taylor")
    g = torch.Generator().manual_seed(1)
    V, counts = 16, [2, 1, 2]
    logits = 2 * torch.randn(5, V, generator=g)
    draft = torch.softmax(2 * torch.randn(5, V, generator=g), -1)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    meta = types.SimpleNamespace(all_random=False, temperature=torch.tensor([1.0, 0.0, 0.7]))
    cu = torch.cumsum(torch.tensor(counts), 0).to(torch.int32)
    # MRV2: request 0 rows 0, 1 + bonus 2; request 1 row 3 + bonus 4
    draft_logits = 2 * torch.randn(2, 2, V, generator=g)
    sampled = torch.randint(0, V, (5,), generator=g)
    cu_logits = torch.tensor([0, 3, 5])
    state, local = torch.tensor([0, 0, 0, 1, 1]), torch.tensor([0, 1, 2, 0, 1])
    temps = torch.tensor([0.8, 0.5])
    with assert_no_host_sync("the MRV1 and MRV2 layouts"):
        mrv1_substitute(rule, ids, counts, draft, logits, meta, cu)
        mrv2_substitute(rule, logits, draft_logits, sampled, cu_logits, state, local, temps)
    with pytest.raises(HostSyncError, match="lift_fresh"):  # the list path copies host data
        with assert_no_host_sync("MRV1 from the list"):
            mrv1_substitute(rule, ids, counts, draft, logits, meta)


def test_mrv1_rows_from_cumulative_counts_equal_the_list_path():
    """The device mapping of rows to requests (cumulative counts) is the host one, a request
    with no drafts included."""
    rule = get_rule("cactus-taylor")
    g = torch.Generator().manual_seed(2)
    counts = [2, 0, 3, 1]
    logits = torch.randn(6, 8, generator=g)
    draft = torch.softmax(torch.randn(6, 8, generator=g), -1)
    ids = torch.randint(0, 8, (6,), generator=g)
    for temps in ([1.0, 0.5, 0.0, 0.7], [0.0, 1.0, 0.9, 0.0]):
        meta = types.SimpleNamespace(all_random=False, temperature=torch.tensor(temps))
        a = mrv1_substitute(rule, ids, counts, draft, logits, meta)[1]
        cu = torch.cumsum(torch.tensor(counts), 0).to(torch.int32)
        b = mrv1_substitute(rule, ids, counts, draft, logits, meta, cu)[1]
        assert torch.equal(a, b)
        assert not torch.equal(a, logits)  # some rows were substituted


def test_the_exact_roots_device_path_is_the_host_one(device_root, monkeypatch):
    """Forcing the device path changes the code, not the values (float32 roots; both are
    certified roots rounded to float32 by the same rule)."""
    q_n = torch.tensor([1e-6, 0.01, 0.3, 0.5, 0.9, 0.999], dtype=torch.float32)
    on_device = spike.exact_spike(q_n, 0.3)
    monkeypatch.setattr(spike, "_host_tensor", lambda t: True)
    assert torch.equal(on_device, spike.exact_spike(q_n, 0.3))
