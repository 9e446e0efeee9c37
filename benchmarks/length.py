r"""Completion lengths under a rule, measured by real decoding, against the EOS-shift prediction.

The lab beside the library (a checkout's ``benchmarks/``, not the installed package): its entry
point is ``scripts/length_check.py``, its recorded run ``benchmarks/length_check/``.

The question: a relaxed rule moves the probability of the end-of-sequence token from
:math:`q_t(\mathrm{EOS})` to :math:`h_{alg,t}(\mathrm{EOS})` at every drafted position; how
much longer (or shorter) do the completions get? Three ways of decoding the same prompts with
the shipped SmolLM2 verifier and a drafter that shares its tokenizer:

* ``verifier``: plain sampling of the processed verifier q;
* ``sps``: speculative sampling (lossless: its lengths must match plain sampling's);
* the rule (default ``cactus-taylor`` at ``delta = 0.35``, the setting of the published
  length study).

**How the speculative rows are decoded.** Speculative decoding with draft length m emits
every token from one of two laws: at the j-th drafted slot of a round (j < m, all earlier
drafts of the round accepted) the rule's emitted law :math:`h_{alg}` of that position's
(q, p); after m accepted drafts, the bonus token from q. A rejection ends the round (the
recovered token is emitted and the next round begins). The batch runs **one token per row
and step** in that order: a drafted slot draws :math:`d \sim p` and calls the rule's batched
torch sampler (:func:`cactus_theory.samplers.make_sampler`, k = 1) on (q, p, d), a bonus slot
samples q. That is the law of speculative decoding with draft length m exactly (each
decision reads only its own position's q, p and draft) with the verifier run one position at
a time, so every row of a batch stays at the same length and plain sampling, SpS and the rule
share one batched forward pass per step. It measures lengths and acceptance, not speed.

**Measured.** Per configuration: completion length (tokens up to and including EOS, or the
cap ``max_new_tokens``) with its mean and standard error, and the stopping rate per token
:math:`\hat s = \#\text{EOS} / \#\text{tokens}` (the maximum-likelihood rate of geometric
stopping under censoring at the cap); the measured length ratio is
:math:`\hat s_{verifier} / \hat s_{rule}` with a bootstrap interval over completions (2.5 and
97.5 percentiles).

**Predicted** (the audit's model, :mod:`cactus_theory.audit`): geometric stopping with one
rate per configuration, teacher-forced on the verifier's own completions,

.. math:: \frac{L_{rule}}{L_{verifier}} = \frac{\mathrm{mean}_t\, q_t(\mathrm{EOS})}
          {\mathrm{mean}_t\, h_{alg,t}(\mathrm{EOS})}

over the positions t of the ``verifier`` rows, with :math:`h_{alg,t}` the rule's exact emitted
law at (q_t, p_t) (:func:`cactus_theory.analysis.emitted_distribution`). An on-policy
version is reported as well: over the rule's own positions, the expected number of stops
given the contexts is :math:`\sum_t h_t(\mathrm{EOS})` at drafted slots plus
:math:`\sum_t q_t(\mathrm{EOS})` at bonus slots (its difference from the counted stops is a
martingale: zero in expectation), which separates the two approximations of the teacher-forced
prediction, that the rule writes different contexts and that bonus positions are emitted
from q.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), m draft length.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987 (Theorem 3, the emitted law); Leviathan et
al., ICML 2023 (speculative sampling).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from cactus_theory._io import atomic_write_text
from cactus_theory._tables import to_json
from cactus_theory.analysis.internal import geometric_length_ratio
from cactus_theory.logits.internal import BatchRunner, SamplingParams, processed_sparse

__all__ = ["LENGTH_SETTINGS", "LengthConfig", "run_length_check", "length_markdown", "write_length_check"]

#: The two sampling settings: temperature 1 untruncated (the whole vocabulary) and the
#: paper's (temperature 0.6, top-p 0.95, top-k 20).
LENGTH_SETTINGS = {
    "t1-untruncated": SamplingParams(1.0, 1.0, 0),
    "paper": SamplingParams(0.6, 0.95, 20),
}


@dataclass(frozen=True)
class LengthConfig:
    """What :func:`run_length_check` runs (defaults: the recorded run)."""

    prompts: tuple = ("spec_bench/164", "spec_bench/165", "spec_bench/325")
    samples: int = 12
    max_new_tokens: int = 48
    rule: str = "cactus-taylor"
    delta: float = 0.35
    m: int = 2
    drafter: str = "distilled"
    settings: tuple = ("t1-untruncated", "paper")
    seed: int = 0
    bootstrap: int = 2000


def _processed(z: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """Dense float64 processed rows ``[B, V]``; untruncated settings keep the whole vocabulary."""
    if (not sp.top_k or sp.top_k <= 0) and sp.top_p >= 1.0 and sp.temperature > 0:
        return torch.softmax(z.double() / sp.temperature, dim=-1)
    ids, pr = processed_sparse(z, sp)
    out = torch.zeros(z.shape, dtype=torch.float64)
    out.scatter_(-1, ids, pr)
    return out


def _fan_out(runner: BatchRunner, prompts, R: int):
    """Prefill one copy of each prompt (left-padded) and repeat each row's cache ``R`` times."""
    out = runner.prefill(list(prompts))
    runner.cache.batch_repeat_interleave(R)
    runner.mask = runner.mask.repeat_interleave(R, 0)
    runner.next_pos = runner.next_pos.repeat_interleave(R)
    return out.logits[:, -1].repeat_interleave(R, 0)


def _keep(runner: BatchRunner, keep: torch.Tensor) -> None:
    """Drop the finished rows from a runner's cache (``keep``: the batch positions kept)."""
    runner.cache.batch_select_indices(keep)
    runner.mask = runner.mask[keep]
    runner.next_pos = runner.next_pos[keep]


def _decode_prompt(verifier, drafter, prompts, eos, sp, cfg: LengthConfig, sampler, rule, gen):
    """Every prompt: ``samples`` rows of each of verifier / sps / rule, all in one lockstep batch.

    Finished rows (EOS emitted) leave the batch. Arrays indexed by row id; ``live`` maps the
    batch positions to row ids. ``eos`` None: no stopping (every row runs to the cap; the EOS
    columns are then not recorded). ``sampler``: ``{"sps": ..., "rule": ...}`` k = 1 torch
    samplers; ``rule``: the configured rule of the third group (its exact emitted law).
    """
    from cactus_theory.analysis import emitted_distribution

    n = cfg.samples
    groups = np.tile(np.repeat(np.arange(3), n), len(prompts))  # 0 verifier, 1 sps, 2 rule
    prompt_of = np.repeat(np.arange(len(prompts)), 3 * n)
    B = groups.size
    vr, dr = BatchRunner(verifier), BatchRunner(drafter)
    zq = _fan_out(vr, prompts, 3 * n)
    zp = _fan_out(dr, prompts, 3 * n)
    V = min(zq.shape[-1], zp.shape[-1])
    live = np.arange(B)
    phase = np.zeros(B, dtype=np.int64)
    length = np.zeros(B, dtype=np.int64)
    stopped = np.zeros(B, dtype=bool)
    drafted = np.zeros(B, dtype=np.int64)
    accepted = np.zeros(B, dtype=np.int64)
    tokens = np.full((B, cfg.max_new_tokens), -1, dtype=np.int64)
    e = 0 if eos is None else eos  # the column read for the EOS bookkeeping
    q_eos_tf, h_eos_tf = [], []  # teacher-forced on the verifier rows
    expected_stops = np.zeros(B)  # compensator: the emitting law's EOS mass, summed
    spec = {1: _pair(sampler["sps"]), 2: _pair(sampler["rule"])}
    for step in range(cfg.max_new_tokens):
        q = _processed(zq[:, :V], sp)
        p = _processed(zp[:, :V], sp)
        tok = torch.multinomial(q, 1, generator=gen)[:, 0]
        g_live = groups[live]
        # the verifier rows: what the rule would emit at their positions (the prediction)
        plain = np.flatnonzero(g_live == 0)
        if plain.size:
            h = np.asarray(emitted_distribution(rule, q[plain].numpy(), p[plain].numpy()))
            q_eos_tf.extend(q[plain, e].tolist())
            h_eos_tf.extend(h[:, e].tolist())
            expected_stops[live[plain]] += q[plain, e].numpy()
        for g in (1, 2):
            pos = np.flatnonzero(g_live == g)
            rid = live[pos]
            at_slot = phase[rid] < cfg.m
            slot, bonus = pos[at_slot], pos[~at_slot]
            expected_stops[live[bonus]] += q[bonus, e].numpy()
            phase[live[bonus]] = 0
            if slot.size:
                d = torch.multinomial(p[slot], 1, generator=gen)
                out, ok = spec[g](q[slot].float(), p[slot].float(), d)
                tok[slot] = out
                r = live[slot]
                drafted[r] += 1
                accepted[r] += ok
                phase[r] = np.where(ok, phase[r] + 1, 0)
                if g == 1:
                    expected_stops[r] += q[slot, e].numpy()
                else:
                    h = np.asarray(emitted_distribution(rule, q[slot].numpy(), p[slot].numpy()))
                    expected_stops[r] += h[:, e]
        t = tok.numpy()
        tokens[live, step] = t
        length[live] += 1
        hit = t == eos if eos is not None else np.zeros(t.shape, dtype=bool)
        stopped[live[hit]] = True
        if hit.all():
            break
        if hit.any():
            keep = torch.as_tensor(np.flatnonzero(~hit))
            _keep(vr, keep)
            _keep(dr, keep)
            live, tok = live[~hit], tok[keep]
        zq = vr.step(tok).logits[:, -1]
        zp = dr.step(tok).logits[:, -1]
    return {
        "groups": groups,
        "prompt": prompt_of,
        "tokens": tokens,
        "length": length,
        "stopped": stopped,
        "drafted": drafted,
        "accepted": accepted,
        "expected_stops": expected_stops,
        "q_eos_tf": np.asarray(q_eos_tf),
        "h_eos_tf": np.asarray(h_eos_tf),
    }


def _pair(sampler):
    """Wrap a k = 1 torch sampler: (q [b,V], p [b,V], d [b,1]) -> (emitted token, accepted)."""

    def run(q, p, d):
        b = q.shape[0]
        target = torch.stack([q, q], 1)  # the bonus slot is not used (a bonus slot is its own step)
        bonus = torch.zeros((b, 1), dtype=torch.long)
        o = sampler(
            target_with_bonus_probs=target, bonus_token_ids=bonus, draft_probs=p[:, None], draft_token_ids=d
        )
        return o[:, 0], (o[:, 1] != -1).numpy()

    return run


def _split(batch: dict, n_prompts: int) -> list:
    """One part per prompt (rows of that prompt); the teacher-forced EOS columns go to the first."""
    parts = []
    for i in range(n_prompts):
        sel = batch["prompt"] == i
        part = {k: v[sel] for k, v in batch.items() if k not in ("q_eos_tf", "h_eos_tf")}
        part["q_eos_tf"] = batch["q_eos_tf"] if i == 0 else np.zeros(0)
        part["h_eos_tf"] = batch["h_eos_tf"] if i == 0 else np.zeros(0)
        parts.append(part)
    return parts


def _rate(lengths, stops):
    return stops.sum() / lengths.sum()


def _bootstrap_ci(L, S, name_a, name_b, stat, repeats, rng):
    """95% bootstrap interval of ``stat`` (of the two settings' (length, stops) sums) over
    completions, resampled within each prompt (the design is stratified); ``L``/``S`` hold per
    setting the per-prompt lengths and stop flags."""
    vals = []
    for _ in range(repeats):
        num = {name_a: [0.0, 0.0], name_b: [0.0, 0.0]}
        for i in range(len(L[name_a])):
            for nm in (name_a, name_b):
                la, sa = L[nm][i], S[nm][i]
                j = rng.integers(0, la.size, la.size)
                num[nm][0] += la[j].sum()
                num[nm][1] += sa[j].sum()
        vals.append(stat(num[name_a], num[name_b]))
    v = np.asarray(vals, dtype=float)
    v = v[np.isfinite(v)]
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if v.size else [None, None]


def _summaries(parts, cfg: LengthConfig, rng):
    """Pool the prompts of one setting: lengths, rates, ratios with bootstrap intervals."""
    names = ("verifier", "sps", cfg.rule)
    L = {k: [] for k in names}
    S = {k: [] for k in names}
    E = {k: [] for k in names}
    acc = {k: [0, 0] for k in names}
    for part in parts:
        for g, name in enumerate(names):
            sel = part["groups"] == g
            L[name].append(part["length"][sel])
            S[name].append(part["stopped"][sel])
            E[name].append(part["expected_stops"][sel])
            acc[name][0] += int(part["accepted"][sel].sum())
            acc[name][1] += int(part["drafted"][sel].sum())
    out = {}
    for name in names:
        lens, st = np.concatenate(L[name]), np.concatenate(S[name])
        out[name] = {
            "n": int(lens.size),
            "mean_length": float(lens.mean()),
            "se_length": float(lens.std(ddof=1) / math.sqrt(lens.size)) if lens.size > 1 else None,
            "stopped": int(st.sum()),
            "stop_rate": float(_rate(lens, st)),
            "expected_stops": float(np.concatenate(E[name]).sum()),
            "acceptance": acc[name][0] / acc[name][1] if acc[name][1] else None,
            "tokens": int(lens.sum()),
            "drafted": acc[name][1],
        }

    rate_ratio = lambda a, b: (a[1] / a[0]) / (b[1] / b[0]) if b[1] > 0 else math.inf
    mean_ratio = lambda a, b: b[0] / a[0]
    ratios = {}
    for name in ("sps", cfg.rule):
        v, r = out["verifier"], out[name]
        ratios[name] = {
            "measured_rate_ratio": v["stop_rate"] / r["stop_rate"] if r["stop_rate"] > 0 else None,
            "measured_rate_ratio_ci": _bootstrap_ci(L, S, "verifier", name, rate_ratio, cfg.bootstrap, rng),
            "measured_mean_length_ratio": r["mean_length"] / v["mean_length"],
            "measured_mean_length_ratio_ci": _bootstrap_ci(
                L, S, "verifier", name, mean_ratio, cfg.bootstrap, rng
            ),
        }
    q_tf = np.concatenate([part["q_eos_tf"] for part in parts])
    h_tf = np.concatenate([part["h_eos_tf"] for part in parts])
    r = out[cfg.rule]
    ratios[cfg.rule]["predicted_ratio_teacher_forced"] = geometric_length_ratio(q_tf, h_tf)
    ratios[cfg.rule]["eos_q_mean"] = float(q_tf.mean())
    ratios[cfg.rule]["eos_h_mean"] = float(h_tf.mean())
    ratios[cfg.rule]["eos_shift_mean"] = float((h_tf - q_tf).mean())
    # the rule's bonus slots emit q: the teacher-forced shift diluted by their share b
    b_frac = 1.0 - r["drafted"] / r["tokens"]
    diluted = (1.0 - b_frac) * h_tf.mean() + b_frac * q_tf.mean()
    ratios[cfg.rule]["bonus_fraction"] = float(b_frac)
    ratios[cfg.rule]["predicted_ratio_teacher_forced_bonus_diluted"] = (
        float(q_tf.mean() / diluted) if diluted > 0 else None
    )
    # the same under the cap T: E min(L, T) = (1 - (1 - s)^T) / s for geometric stopping at s,
    # with s the verifier's measured rate and s / (predicted ratio) the rule's
    s_v, pred = out["verifier"]["stop_rate"], ratios[cfg.rule]["predicted_ratio_teacher_forced"]
    capped = lambda s_: (1.0 - (1.0 - s_) ** cfg.max_new_tokens) / s_ if s_ > 0 else float(cfg.max_new_tokens)
    ratios[cfg.rule]["predicted_mean_length_ratio_capped"] = (
        float(capped(s_v / pred) / capped(s_v)) if pred else None
    )
    lens_r = np.concatenate(L[cfg.rule]).sum()
    on_policy_rate = r["expected_stops"] / lens_r
    ratios[cfg.rule]["predicted_ratio_on_policy"] = (
        float(out["verifier"]["expected_stops"] / np.concatenate(L["verifier"]).sum() / on_policy_rate)
        if on_policy_rate > 0
        else None
    )
    return {"configs": out, "ratios": ratios}


def run_length_check(cfg: LengthConfig = LengthConfig(), threads: int | None = None, progress=None) -> dict:  # noqa: B008
    """Decode ``cfg.prompts`` ``cfg.samples`` times per configuration and setting; see the module.

    Returns
    -------
    dict
        ``{"settings": {...}, "results": {setting: {"configs": ..., "ratios": ...}}}``: per
        configuration n, mean length and its standard error, EOS count, stop rate, acceptance;
        per rule (and SpS) the measured ratios with 95% bootstrap intervals and the predictions.
    """
    from cactus_theory.logits import load_prompts
    from cactus_theory.logits._models import load_smollm2
    from cactus_theory.logits._prompts import chat_ids
    from cactus_theory.logits.internal import make_drafter
    from cactus_theory.rules import get_rule
    from cactus_theory.samplers import make_sampler

    if cfg.samples < 2:
        raise ValueError(
            f"samples: need at least 2 per configuration for a standard error, got {cfg.samples}"
        )
    if cfg.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: must be >= 1, got {cfg.max_new_tokens}")
    if cfg.m < 1:
        raise ValueError(f"m: must be >= 1, got {cfg.m}")
    for s in cfg.settings:
        if s not in LENGTH_SETTINGS:
            raise ValueError(f"settings: unknown setting {s!r}; use {sorted(LENGTH_SETTINGS)}")
    t0 = time.perf_counter()
    if threads:
        torch.set_num_threads(threads)
    sources = {pid.split("/", 1)[0] for pid in cfg.prompts}
    unknown = sorted(sources - {"spec_bench", "gsm8k", "ifeval"})
    if unknown:
        raise ValueError(f"prompts: unknown prompt sources {unknown}; ids look like spec_bench/164")
    catalogue = {p.id: p for src in sorted(sources) for p in load_prompts(src, "all")}
    missing = [pid for pid in cfg.prompts if pid not in catalogue]
    if missing:
        raise ValueError(f"prompts: unknown prompt ids {missing}")
    lm = load_smollm2()
    tok = lm.tokenizer
    eos = tok.eos_token_id
    drafter = make_drafter(cfg.drafter, lm)[0]
    rule = get_rule(cfg.rule, delta=cfg.delta)
    sampler = {"sps": make_sampler("sps"), "rule": make_sampler(cfg.rule, delta=cfg.delta)}
    rng = np.random.default_rng(cfg.seed)
    results = {}
    for s_i, name in enumerate(cfg.settings):
        sp = LENGTH_SETTINGS[name]
        ids = [chat_ids(tok, catalogue[pid].text, max_prompt_tokens=384) for pid in cfg.prompts]
        seed = cfg.seed * 1_000_003 + s_i
        torch.manual_seed(seed)  # the samplers' own randomness
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            batch = _decode_prompt(lm.model, drafter, ids, eos, sp, cfg, sampler, rule, gen)
        parts = _split(batch, len(cfg.prompts))
        if progress:
            progress(f"{name} done at {time.perf_counter() - t0:.0f} s")
        results[name] = _summaries(parts, cfg, rng)
        results[name]["sampling"] = sp.as_dict()
    return {
        "settings": {
            "prompts": list(cfg.prompts),
            "samples_per_config_per_prompt": cfg.samples,
            "max_new_tokens": cfg.max_new_tokens,
            "rule": cfg.rule,
            "delta": cfg.delta,
            "m": cfg.m,
            "drafter": cfg.drafter,
            "verifier": lm.name,
            "seed": cfg.seed,
            "bootstrap": cfg.bootstrap,
            "threads": torch.get_num_threads(),
            "wall_s": round(time.perf_counter() - t0, 1),
        },
        "results": results,
    }


def _f(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"


def length_markdown(res: dict) -> str:
    """The result of :func:`run_length_check` as Markdown tables (one per sampling setting)."""
    st = res["settings"]
    rule = st["rule"]
    lines = [
        "# Completion length: measured by real decoding vs the EOS-shift prediction",
        "",
        f"Verifier {st['verifier']}, drafter `{st['drafter']}`, draft length m = {st['m']}, rule "
        f"`{rule}` at delta = {st['delta']}; prompts {', '.join(st['prompts'])}; "
        f"{st['samples_per_config_per_prompt']} completions per prompt and configuration, at most "
        f"{st['max_new_tokens']} new tokens; {st['wall_s']} s on {st['threads']} CPU thread(s).",
        "",
        "Length: tokens up to and including EOS or the cap (mean +- standard error). Stop rate: "
        "EOS count / tokens (geometric stopping, censored at the cap). Measured ratio: verifier's "
        "stop rate / the configuration's, [95% bootstrap interval]. Predicted: teacher-forced "
        "mean q(EOS) / mean h_alg(EOS) on the verifier's completions (the audit's model) and the "
        "same on the rule's own positions (on-policy, bonus slots from q).",
    ]
    for name, r in res["results"].items():
        s = r["sampling"]
        lines += [
            "",
            f"## {name} (temperature {s['temperature']}, top-p {s['top_p']}, top-k {s['top_k']})",
            "",
            "| configuration | n | length | EOS | stop rate | acceptance | measured ratio (rate) | "
            "measured ratio (mean length) | predicted (teacher-forced) | predicted (on-policy) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for cname, c in r["configs"].items():
            rr = r["ratios"].get(cname, {})
            ci = rr.get("measured_rate_ratio_ci", [None, None])
            cm = rr.get("measured_mean_length_ratio_ci", [None, None])
            lines.append(
                f"| {cname} | {c['n']} | {c['mean_length']:.1f} +- {_f(c['se_length'], 1)} | {c['stopped']} | "
                f"{c['stop_rate']:.4f} | {_f(c['acceptance'])} | "
                + (
                    f"{_f(rr['measured_rate_ratio'], 2)} [{_f(ci[0], 2)}, {_f(ci[1], 2)}] | "
                    f"{_f(rr['measured_mean_length_ratio'], 2)} [{_f(cm[0], 2)}, {_f(cm[1], 2)}] | "
                    if rr
                    else "1 | 1 | "
                )
                + f"{_f(rr.get('predicted_ratio_teacher_forced'), 2) if cname == rule else ('1' if rr else '-')} | "
                + f"{_f(rr.get('predicted_ratio_on_policy'), 2) if cname == rule else '-'} |"
            )
        rr = r["ratios"][rule]
        lines += [
            "",
            f"Teacher-forced EOS: mean q = {rr['eos_q_mean']:.5f}, mean h_alg = {rr['eos_h_mean']:.5f}, "
            f"mean shift h_alg - q = {rr['eos_shift_mean']:+.5f} per position."
            + (
                f" Share of the rule's tokens emitted at bonus slots (from q): {rr['bonus_fraction']:.3f}; "
                f"the teacher-forced prediction diluted by it: "
                f"{_f(rr['predicted_ratio_teacher_forced_bonus_diluted'], 2)}. The teacher-forced "
                f"prediction of the mean length ratio under the cap of {st['max_new_tokens']} tokens "
                f"(geometric stopping at the verifier's measured rate): "
                f"{_f(rr['predicted_mean_length_ratio_capped'], 2)}."
                if "bonus_fraction" in rr
                else ""
            ),
        ]
    return "\n".join(lines) + "\n"


def write_length_check(res: dict, out_dir) -> tuple:
    """Write ``length_check.json`` and ``length_check.md`` into ``out_dir`` (each atomically)."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j = atomic_write_text(out / "length_check.json", to_json(res, indent=1) + "\n")
    m = atomic_write_text(out / "length_check.md", length_markdown(res))
    return j, m
