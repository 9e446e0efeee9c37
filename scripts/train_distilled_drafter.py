#!/usr/bin/env python
"""Distil a small drafter from SmolLM2-135M-Instruct (the verifier of the built-in pairs).

Usage (from the repository root, after ``./dev setup``)::

    .venv/bin/python scripts/train_distilled_drafter.py teacher --minutes 12   # teacher samples
    .venv/bin/python scripts/train_distilled_drafter.py teacher-forced --minutes 6  # teacher on text
    .venv/bin/python scripts/train_distilled_drafter.py train --minutes 15     # fit the drafter
    .venv/bin/python scripts/train_distilled_drafter.py eval                   # held-out acceptance

Phase ``teacher`` samples continuations from the verifier (temperature 0.6, top-p 0.95, top-k 20,
the decoding setting) on the *train* split of the shipped prompts (disjoint from every prompt the
dumps and the decoding measurements use, see :mod:`cactus_theory.logits._prompts`), and caches at
every generated position the verifier's raw (temperature-1) top-32 log-probabilities, under
``.cache/distill/`` (git-ignored). Phase ``teacher-forced`` adds, much more cheaply (no
sampling, one batched forward per sequence), the teacher's top-32 on existing train-split text:
GSM8K reference solutions as assistant turns and the Spec-Bench / IFEval user texts. Phase ``train`` fits the drafter by minimizing the
cross-entropy ``-sum_x q~_x log p_x`` between the teacher's top-32 distribution ``q~`` (restricted
to the drafter's sub-vocabulary and renormalized) and the drafter's raw distribution ``p`` over
its sub-vocabulary, i.e. the KL from the teacher up to a constant. Its result is written to
``cactus_theory/data/drafters/smollm2-distilled.pt`` (int8 weights, a few MB).

Architecture (see :class:`cactus_theory.logits._drafters.DistilledDrafter`): the verifier's input
embedding and first ``n_frozen`` layers (frozen, taken from the verifier at load time, so they
are not stored), ``n_trained`` trainable Llama layers (initialized from the verifier's next
layers), the final RMSNorm, and an output head restricted to the ``sub_vocab`` most frequent
tokens (the rows of the verifier's tied embedding, frozen, plus a trained bias), as in FR-Spec.
Tokens outside the sub-vocabulary get drafter probability 0 (harmless for speculative sampling:
they are never drafted, the verifier can still emit them on rejection).

Keep to one or two threads (``--threads``); the wall-time budget is per phase (``--minutes``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cactus_theory.logits._models import cache_dir, load_smollm2  # noqa: E402
from cactus_theory.logits._prompts import chat_ids, load_prompts  # noqa: E402
from cactus_theory.logits._runner import BatchRunner, SamplingParams, processed_sparse, sample_from  # noqa: E402

TOPK = 32


def teacher(args):
    out_dir = cache_dir() / "distill"
    out_dir.mkdir(parents=True, exist_ok=True)
    lm = load_smollm2()
    tok = lm.tokenizer
    prompts = (
        load_prompts("spec_bench", "train") + load_prompts("gsm8k", "train") + load_prompts("ifeval", "train")
    )
    random.Random(0).shuffle(prompts)
    sp = SamplingParams()
    g = torch.Generator().manual_seed(args.seed)
    done = {int(p.stem.split("_")[1]) for p in out_dir.glob("batch_*.pt")}
    t_end = time.time() + 60 * args.minutes
    B = args.batch
    nb = (len(prompts) + B - 1) // B
    for b in range(nb):
        if b in done:
            continue
        if time.time() > t_end:
            break
        batch = prompts[b * B : (b + 1) * B]
        seqs = [chat_ids(tok, p.text, max_prompt_tokens=args.max_prompt_tokens) for p in batch]
        r = BatchRunner(lm.model, pad_id=tok.pad_token_id)
        logits = r.prefill(seqs).logits[:, -1]
        gen, tk_ids, tk_lp = [], [], []
        alive = torch.ones(len(batch), dtype=torch.bool)
        for _ in range(args.new_tokens):
            lp = torch.log_softmax(logits.double(), -1)
            v, i = lp.topk(TOPK, -1)
            tk_ids.append(i.to(torch.int32))
            tk_lp.append(v.to(torch.float16))
            ids, pr = processed_sparse(logits, sp)
            t = sample_from(pr, ids, g)
            t = torch.where(alive, t, torch.full_like(t, tok.pad_token_id))
            gen.append(t)
            alive &= t != tok.eos_token_id
            if not alive.any():
                break
            logits = r.step(t).logits[:, -1]
        gen = torch.stack(gen, 1)
        tk_ids = torch.stack(tk_ids, 1)
        tk_lp = torch.stack(tk_lp, 1)
        rows = []
        for i, s in enumerate(seqs):
            g_i = gen[i].tolist()
            n = len(g_i)
            if tok.eos_token_id in g_i:
                n = g_i.index(tok.eos_token_id) + 1
            rows.append(
                {
                    "prompt": s,
                    "gen": g_i[:n],
                    "topk_ids": tk_ids[i, :n].clone(),
                    "topk_lp": tk_lp[i, :n].clone(),
                }
            )
        tmp = out_dir / f".tmp_batch_{b}.pt"
        torch.save(rows, tmp)
        tmp.replace(out_dir / f"batch_{b}.pt")
        print(
            f"batch {b}/{nb}: {sum(len(r['gen']) for r in rows)} tokens, {time.strftime('%H:%M:%S')}",
            flush=True,
        )


def teacher_forced(args):
    """Teacher top-32 on existing text (cheap: one batched forward per sequence, no sampling):
    GSM8K train-split problems with their reference solutions (calculator annotations removed)
    as assistant turns, and the Spec-Bench / IFEval train-split user texts."""
    import re

    out_dir = cache_dir() / "distill"
    out_dir.mkdir(parents=True, exist_ok=True)
    lm = load_smollm2()
    tok = lm.tokenizer
    import gzip

    from cactus_theory.logits._prompts import PROMPT_DIR

    gs = [json.loads(x) for x in gzip.open(PROMPT_DIR / "gsm8k" / "test.jsonl.gz", "rt")][200:]
    items = []
    for r in gs:
        sol = re.sub(r"<<[^>]*>>", "", r["answer"])
        body, ans = sol.rsplit("####", 1)
        sol = body.strip() + f"\nThe answer is {ans.strip()}."
        items.append((r["question"], sol))
    gsm_prompts = {p.text.split("\n\n", 1)[1]: p for p in load_prompts("gsm8k", "train")}
    rows_in = []
    for qtext, sol in items:
        p = gsm_prompts.get(qtext)
        if p is None:
            continue
        ctx = chat_ids(tok, p.text, max_prompt_tokens=args.max_prompt_tokens)
        gen = tok(sol, add_special_tokens=False).input_ids + [tok.eos_token_id]
        rows_in.append((ctx, gen))
    for p in load_prompts("spec_bench", "train") + load_prompts("ifeval", "train"):
        ids = tok(p.text, add_special_tokens=False).input_ids[: args.max_prompt_tokens]
        if len(ids) > 16:
            rows_in.append((ids[:4], ids[4:]))
    random.Random(2).shuffle(rows_in)
    t_end = time.time() + 60 * args.minutes
    B = 8
    for b in range(0, len(rows_in), B):
        f = out_dir / f"tf_{b // B}.pt"
        if f.exists():
            continue
        if time.time() > t_end:
            break
        batch = rows_in[b : b + B]
        seqs = [c + g[:-1] for c, g in batch]
        L = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), L), dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.as_tensor(s)
            mask[i, : len(s)] = 1
        with torch.no_grad():
            z = lm.model(input_ids=ids, attention_mask=mask).logits
        rows = []
        for i, (c, g) in enumerate(batch):
            lp = torch.log_softmax(z[i, len(c) - 1 : len(c) - 1 + len(g)].double(), -1)
            v, k = lp.topk(TOPK, -1)
            rows.append(
                {"prompt": c, "gen": g, "topk_ids": k.to(torch.int32), "topk_lp": v.to(torch.float16)}
            )
        tmp = out_dir / f".tmp_tf_{b // B}.pt"
        torch.save(rows, tmp)
        tmp.replace(f)
        if (b // B) % 10 == 0:
            print(f"tf batch {b // B}/{len(rows_in) // B}: {time.strftime('%H:%M:%S')}", flush=True)


def _load_teacher():
    rows = []
    for p in sorted((cache_dir() / "distill").glob("*.pt")):
        rows += torch.load(p)
    return rows


def train(args):
    from cactus_theory.logits._drafters import DistilledDrafter, save_distilled

    lm = load_smollm2()
    rows = _load_teacher()
    random.Random(1).shuffle(rows)
    n_val = min(48, max(8, len(rows) // 20))
    val, tr = rows[:n_val], rows[n_val:]
    print(
        f"{len(tr)} train / {len(val)} val sequences, {sum(len(r['gen']) for r in tr)} train tokens",
        flush=True,
    )
    # Sub-vocabulary: the tokens carrying the most teacher top-32 probability mass (plus specials).
    V = lm.vocab_size
    mass = torch.zeros(V, dtype=torch.float64)
    for r in tr:
        mass.index_add_(0, r["topk_ids"].reshape(-1).long(), r["topk_lp"].reshape(-1).double().exp())
        mass.index_add_(
            0, torch.as_tensor(r["prompt"]).long(), torch.full((len(r["prompt"]),), 1e-3, dtype=torch.float64)
        )
    for t in (lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id, lm.tokenizer.bos_token_id):
        if t is not None:
            mass[t] += 1e9
    sub = torch.sort(torch.topk(mass, args.sub_vocab).indices).values
    cover = mass[sub].sum() / mass.sum()
    print(
        f"sub-vocabulary of {args.sub_vocab} covers {float(cover):.4f} of the teacher top-32 mass (specials weighted up)"
    )
    if args.init:
        # continue from saved weights (their sub-vocabulary and layer counts win)
        from cactus_theory.logits._drafters import load_distilled

        model = load_distilled(lm.model, args.init)
        sub = model.sub_vocab.clone()
        args.n_frozen, args.n_trained, args.sub_vocab = model.n_frozen, model.n_trained, len(sub)
        model.train()
        print(f"continuing from {args.init} ({model.meta})", flush=True)
    else:
        model = DistilledDrafter.from_verifier(
            lm.model, sub, n_frozen=args.n_frozen, n_trained=args.n_trained
        )
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable params: {sum(p.numel() for p in params) / 1e6:.2f} M", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    full_to_sub = torch.full((V,), -1, dtype=torch.long)
    full_to_sub[sub] = torch.arange(len(sub))

    def batch_loss(batch, max_positions=None):
        """Cross-entropy against the teacher on (a random subset of) the generated positions; the
        head is evaluated only there (it is the expensive part)."""
        seqs, spans = [], []
        for r in batch:
            seq = (r["prompt"] + r["gen"])[:-1]
            s0 = len(r["prompt"]) - 1
            cut = max(0, len(seq) - args.max_len)  # keep the end: all of it has targets
            seqs.append(seq[cut:])
            spans.append((s0 - cut, r))
        L = max(len(x) for x in seqs)
        B = len(batch)
        ids = torch.zeros((B, L), dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, x in enumerate(seqs):
            ids[i, : len(x)] = torch.as_tensor(x)
            mask[i, : len(x)] = 1
        bi, ti, tj, tp = [], [], [], []
        for i, (s0, r) in enumerate(spans):
            n = len(r["gen"])
            j = full_to_sub[r["topk_ids"].long()]
            pr = r["topk_lp"].float().exp() * (j >= 0)
            pr = pr / pr.sum(-1, keepdim=True).clamp_min(1e-9)
            for k in range(n):
                pos = s0 + k
                if pos < 0:
                    continue
                bi.append(i)
                ti.append(pos)
                tj.append(j[k].clamp_min(0))
                tp.append(pr[k])
        bi, ti = torch.tensor(bi), torch.tensor(ti)
        tj, tp = torch.stack(tj), torch.stack(tp)
        if max_positions is not None and len(bi) > max_positions:
            sel = torch.randperm(len(bi))[:max_positions]
            bi, ti, tj, tp = bi[sel], ti[sel], tj[sel], tp[sel]
        h = model.hidden(ids, attention_mask=mask)[bi, ti]
        logits = model.head(h)  # [P, S]
        lp = torch.log_softmax(logits.float(), -1)
        ce = -(tp * lp.gather(-1, tj)).sum(-1)
        return ce.mean(), (logits, tj, tp)

    def val_acceptance():
        model.eval()
        acc, n = 0.0, 0
        with torch.no_grad():
            for k in range(0, len(val), 8):
                loss, (logits, tj, tp) = batch_loss(val[k : k + 8])
                p = torch.softmax(logits.float(), -1).gather(-1, tj)
                a = torch.minimum(p, tp).sum(-1)  # T=1 acceptance vs the teacher top-32 (restricted)
                acc += float(a.sum())
                n += len(a)
        model.train()
        return acc / n

    print(f"initial val acceptance (T=1, vs teacher top-32): {val_acceptance():.4f}", flush=True)
    t_end = time.time() + 60 * args.minutes
    step = 0
    model.train()
    while time.time() < t_end and step < args.max_steps:
        random.shuffle(tr)
        for k in range(0, len(tr), args.batch):
            if time.time() > t_end or step >= args.max_steps:
                break
            lr = args.lr * min(1.0, (step + 1) / 50)
            for gp in opt.param_groups:
                gp["lr"] = lr
            loss, _ = batch_loss(tr[k : k + args.batch], args.positions)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss {float(loss):.4f} {time.strftime('%H:%M:%S')}", flush=True)
            if step % 100 == 0:
                print(f"  val acceptance {val_acceptance():.4f}", flush=True)
                save_distilled(model, args.out, meta={"steps": step})
    va = val_acceptance()
    print(f"final val acceptance (T=1, vs teacher top-32): {va:.4f} after {step} steps", flush=True)
    prev = int(getattr(model, "meta", {}).get("steps", 0)) if args.init else 0
    save_distilled(
        model,
        args.out,
        meta={
            "steps": prev + step,
            "val_acceptance_T1_top32": va,
            "train_sequences": len(tr),
            "n_frozen": args.n_frozen,
            "n_trained": args.n_trained,
            "sub_vocab": args.sub_vocab,
        },
    )
    print(f"saved {args.out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["teacher", "teacher-forced", "train"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--max-prompt-tokens", type=int, default=256)
    ap.add_argument("--sub-vocab", type=int, default=8192)
    ap.add_argument("--n-frozen", type=int, default=2)
    ap.add_argument("--n-trained", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--max-steps", type=int, default=10**9)
    ap.add_argument("--init", default=None, help="continue training from these saved weights")
    ap.add_argument("--max-len", type=int, default=320, help="training sequence length cap (tokens)")
    ap.add_argument("--positions", type=int, default=768, help="loss positions sampled per step")
    ap.add_argument(
        "--out", default=str(REPO / "cactus_theory" / "data" / "drafters" / "smollm2-distilled.pt")
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    {"teacher": teacher, "teacher-forced": teacher_forced, "train": train}[args.phase](args)


if __name__ == "__main__":
    main()
