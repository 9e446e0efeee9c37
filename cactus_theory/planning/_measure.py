r"""Measuring a cost model on this machine: the shipped SmolLM2 verifier and a drafter.

On a prompt already in both models' KV caches, one repeat times, in a shuffled order, the
verifier's call over k = 1..m+1 new tokens and the drafter's call over one new token, each
followed by the row processing the decoding loop does (temperature, top-k, top-p of every
scored row, :func:`cactus_theory.logits._runner.processed_sparse`), and crops the caches back.
The costs are the medians over the repeats, so a load that comes and goes touches every entry
alike; the load average before and after is recorded beside them.

Symbols: m draft length.
"""

from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["measure_costs", "machine_load"]

#: Tokens of the shared prompt prefix (a short chat turn).
_PREFIX_TOKENS = 48


def machine_load() -> dict:
    """The 1-, 5- and 15-minute load averages and the CPU count."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cpus": os.cpu_count()}


def _timed(runner, tokens, sampling, processed_sparse, torch):
    keep = runner.length
    t0 = time.perf_counter()
    out = runner.step(torch.tensor([tokens]))
    for j in range(len(tokens)):
        processed_sparse(out.logits[0, j], sampling)
    dt = time.perf_counter() - t0
    runner.crop(keep)
    return dt


def measure_costs(
    m_max: int = 4, *, drafter: str = "distilled", repeats: int = 7, progress: bool = False, models=None
):
    """Costs in seconds, measured (see the module docstring).

    Returns the fields of a :class:`~._cost.CostModel` (``draft_cost``, ``verify_costs``,
    ``unit``, ``source``, ``load``).

    Parameters
    ----------
    m_max : int
        The longest draft: the verifier is timed over 1..m_max+1 tokens.
    drafter : str
        A drafter of :func:`cactus_theory.logits._drafters.make_drafter` (``distilled``,
        ``early-exit:K``, ``requant:B``).
    repeats : int
        Interleaved repeats (medians over them).
    models : (LoadedModel, torch.nn.Module), optional
        The verifier and the drafter already loaded (else loaded here).
    """
    from tqdm.auto import tqdm

    from .._validation import positive_int
    from ..logits import load_smollm2
    from ..logits.internal import BatchRunner, SamplingParams, make_drafter, processed_sparse, torch

    m_max, repeats = positive_int(m_max, "m_max"), positive_int(repeats, "repeats")
    lm, dmodel = models if models is not None else (None, None)
    lm = lm or load_smollm2()
    dmodel = dmodel if dmodel is not None else make_drafter(drafter, lm)[0]
    sampling = SamplingParams()
    rng = np.random.default_rng(0)
    V = int(lm.vocab_size)
    prefix = rng.integers(100, min(V, 30000), size=_PREFIX_TOKENS).tolist()
    vr, dr = BatchRunner(lm.model), BatchRunner(dmodel)
    vr.prefill([prefix])
    dr.prefill([prefix])
    load_before = machine_load()
    times = {k: [] for k in range(1, m_max + 2)}
    times["draft"] = []
    jobs = list(times)
    for _ in tqdm(range(repeats), disable=not progress, desc="cost", unit="repeat"):
        for job in rng.permutation(len(jobs)):
            key = jobs[job]
            toks = rng.integers(100, min(V, 30000), size=1 if key == "draft" else key).tolist()
            runner = dr if key == "draft" else vr
            times[key].append(_timed(runner, toks, sampling, processed_sparse, torch))
    load = {
        "before": load_before,
        "after": machine_load(),
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }
    return dict(
        draft_cost=float(np.median(times["draft"])),
        verify_costs=tuple(float(np.median(times[k])) for k in range(1, m_max + 2)),
        unit="seconds",
        source=f"measured: {lm.name} verifier, drafter {drafter}, median of {repeats} interleaved repeats",
        load=load,
    )
