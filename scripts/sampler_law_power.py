"""Detection rates of ``cactus_theory.testing.check_sampler_law`` at its default sample size.

For each planted defect of :func:`cactus_theory.testing.reference_sampler` and for the correct
samplers (the reference sampler and :func:`cactus_theory.make_sampler`), runs the check over
``--seeds`` seeds on the default cases (``--num-samples`` draws per case) and prints, as JSON lines, the fraction of seeds at
which the call failed, with the median and largest of the smallest p-values.

    .venv/bin/python scripts/sampler_law_power.py --seeds 20
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import cactus_theory as ct
from cactus_theory.rules import get_rule
from cactus_theory.testing import (
    DEFAULT_ALPHA,
    DEFAULT_NUM_SAMPLES,
    check_sampler_law,
    reference_sampler,
)

DELTA = 0.05


def configurations():
    sps, cactus = get_rule("sps"), get_rule("cactus-taylor", delta=DELTA)
    yield "reference sps (correct)", lambda: reference_sampler("sps"), sps
    yield "reference cactus-taylor (correct)", lambda: reference_sampler("cactus-taylor", delta=DELTA), cactus
    yield "make_sampler sps (correct)", lambda: ct.make_sampler("sps"), sps
    yield "make_sampler cactus-taylor (correct)", lambda: ct.make_sampler(cactus), cactus
    for defect in ("recovery-from-q", "bonus-off-by-one", "swapped-ratio"):
        yield f"sps with {defect}", lambda d=defect: reference_sampler("sps", defect=d), sps
    yield (
        "cactus-taylor with cactus-no-rescale",
        lambda: reference_sampler("cactus-taylor", delta=DELTA, defect="cactus-no-rescale"),
        cactus,
    )


def _failed(result, name):
    """The check ``name`` failed at some case and position."""
    return any(c.name == name and not c.passed for c in result.checks)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--num-samples", type=int, default=DEFAULT_NUM_SAMPLES)
    ap.add_argument("--invariants", action="store_true", help="also the exact invariant checks")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for name, make, rule in configurations():
        t0 = time.perf_counter()
        results = [
            check_sampler_law(make(), rule, seed=s, num_samples=args.num_samples, invariants=args.invariants)
            for s in seeds
        ]
        mins = np.array([r.min_p_value for r in results])
        print(
            json.dumps(
                {
                    "sampler": name,
                    "num_samples": args.num_samples,
                    "alpha": DEFAULT_ALPHA,
                    "seeds": len(results),
                    "failed": int(sum(not r.passed for r in results)),
                    "detection_rate": float(np.mean([not r.passed for r in results])),
                    "failed_by_law": int(sum(_failed(r, "law") for r in results)),
                    "failed_by_acceptance": int(sum(_failed(r, "acceptance") for r in results)),
                    "median_min_p": float(np.median(mins)),
                    "max_min_p": float(mins.max()),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
