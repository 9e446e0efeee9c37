"""Benchmark prompts shipped with the package, and GSM8K answer extraction.

Shipped under ``cactus_theory/data/prompts/`` (gzip-compressed copies of the full files in the
project's ``shared/data``, each folder with its LICENSE):

* ``spec_bench/question.jsonl.gz``: Spec-Bench's 480 questions (hemingkx/Spec-Bench,
  Apache-2.0): translation, summarization, qa, math_reasoning, rag (80 each) and MT-Bench's 80
  (writing, roleplay, reasoning, math, coding, extraction, stem, humanities; 10 each). Only the
  first turn is used.
* ``gsm8k/test.jsonl.gz``: the GSM8K test set, 1,319 problems (openai/grade-school-math, MIT).
* ``ifeval/input_data.jsonl.gz``: the 541 IFEval prompts (google-research, Apache-2.0).

Splits. ``split="eval"`` is what dumps and decoding measurements use: the first 20 questions of
each 80-question Spec-Bench category, the first 5 of each MT-Bench category, GSM8K problems 0-199
and IFEval prompts 0-99. ``split="train"`` is the disjoint rest, used only to distil the drafter
(``scripts/train_distilled_drafter.py``), so no evaluation prompt is seen in training.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parents[1] / "data" / "prompts"

SPEC_BENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
)
SOURCES = ("spec_bench", "gsm8k", "ifeval")

GSM8K_INSTRUCTION = (
    "Solve the following math problem step by step. "
    "End your reply with 'The answer is N.' where N is a number.\n\n"
)


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt.

    Attributes
    ----------
    id : str
        ``"<source>/<key>"``, e.g. ``"gsm8k/17"``, ``"spec_bench/81"``.
    source : str
        ``"spec_bench"``, ``"gsm8k"``, ``"ifeval"`` or ``"user"``.
    category : str
        Spec-Bench category, or ``"gsm8k"`` / ``"ifeval"`` / ``"user"``.
    text : str
        The user message (for GSM8K, the instruction plus the question).
    answer : str or None
        GSM8K gold numeric answer (the part after ``####``), else None.
    """

    id: str
    source: str
    category: str
    text: str
    answer: str | None = None


def _read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _split_ok(split: str, rank: int, n_eval: int) -> bool:
    if split == "all":
        return True
    if split == "eval":
        return rank < n_eval
    if split == "train":
        return rank >= n_eval
    raise ValueError(f"unknown split {split!r}; use 'eval', 'train' or 'all'")


def load_prompts(
    source: str, split: str = "eval", categories=None, per_category: int | None = None
) -> list[Prompt]:
    """Load shipped prompts.

    Parameters
    ----------
    source : {"spec_bench", "gsm8k", "ifeval"}
    split : {"eval", "train", "all"}
        See the module docstring.
    categories : iterable of str, optional
        Spec-Bench categories to keep (default all).
    per_category : int, optional
        Keep at most this many prompts per category (in file order).

    Returns
    -------
    list of Prompt
    """
    out: list[Prompt] = []
    if source == "spec_bench":
        rows = _read_jsonl_gz(PROMPT_DIR / "spec_bench" / "question.jsonl.gz")
        rank: dict[str, int] = {}
        for r in rows:
            cat = r["category"]
            k = rank.get(cat, 0)
            rank[cat] = k + 1
            n_eval = (
                5
                if k < 10 and cat not in ("translation", "summarization", "qa", "math_reasoning", "rag")
                else 20
            )
            if categories is not None and cat not in categories:
                continue
            if not _split_ok(split, k, n_eval):
                continue
            out.append(Prompt(f"spec_bench/{r['question_id']}", "spec_bench", cat, r["turns"][0]))
    elif source == "gsm8k":
        rows = _read_jsonl_gz(PROMPT_DIR / "gsm8k" / "test.jsonl.gz")
        for i, r in enumerate(rows):
            if not _split_ok(split, i, 200):
                continue
            gold = r["answer"].split("####")[-1].strip().replace(",", "")
            out.append(Prompt(f"gsm8k/{i}", "gsm8k", "gsm8k", GSM8K_INSTRUCTION + r["question"], gold))
    elif source == "ifeval":
        rows = _read_jsonl_gz(PROMPT_DIR / "ifeval" / "input_data.jsonl.gz")
        for i, r in enumerate(rows):
            if not _split_ok(split, i, 100):
                continue
            out.append(Prompt(f"ifeval/{r['key']}", "ifeval", "ifeval", r["prompt"]))
    else:
        raise ValueError(f"unknown prompt source {source!r}; use one of {SOURCES}")
    if per_category is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in out:
            if seen.get(p.category, 0) < per_category:
                kept.append(p)
                seen[p.category] = seen.get(p.category, 0) + 1
        out = kept
    return out


def benchmark_mix(per_category: int = 2, split: str = "eval") -> list[Prompt]:
    """``per_category`` prompts from every Spec-Bench category, GSM8K and IFEval (15 categories)."""
    return (
        load_prompts("spec_bench", split, per_category=per_category)
        + load_prompts("gsm8k", split, per_category=per_category)
        + load_prompts("ifeval", split, per_category=per_category)
    )


def load_user_prompts(path) -> list[Prompt]:
    """Prompts from a user file: ``.jsonl`` with a ``prompt`` (or ``text``/``question``) key per
    line, optional ``id`` and ``category``; or plain text with one prompt per line."""
    path = Path(path)
    out = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            r = json.loads(line)
            text = r.get("prompt") or r.get("text") or r.get("question")
            if text is None:
                raise ValueError(f"{path}: line {i + 1} has no 'prompt', 'text' or 'question' key")
            out.append(Prompt(f"user/{r.get('id', i)}", "user", r.get("category", "user"), text))
        else:
            out.append(Prompt(f"user/{i}", "user", "user", line))
    return out


_NUM = r"-?\$?\d[\d,]*(?:\.\d+)?"


def _norm_number(s: str) -> str | None:
    s = s.replace("$", "").replace(",", "").strip().rstrip(".")
    try:
        v = float(s)
    except ValueError:
        return None
    return str(int(v)) if v == int(v) else str(v)


def extract_gsm8k_answer(text: str, strict: bool = False) -> str | None:
    """Extract the numeric answer of a GSM8K completion.

    Parameters
    ----------
    text : str
    strict : bool
        True: only ``The answer is N`` / ``#### N`` counts (the format the prompt asks for, as
        lm-eval's strict-match). False: fall back to the last number in the text
        (lm-eval's flexible-extract).

    Returns
    -------
    str or None
        The normalized number (``"18"``, ``"2.5"``), or None.
    """
    m = re.findall(r"(?:answer is|####)\s*:?\s*(" + _NUM + ")", text, flags=re.IGNORECASE)
    if m:
        return _norm_number(m[-1])
    if strict:
        return None
    m = re.findall(_NUM, text)
    return _norm_number(m[-1]) if m else None


def gsm8k_accuracy(completions, golds, strict: bool = False) -> float:
    """Fraction of completions whose extracted answer equals the gold one (numerically)."""
    golds = list(golds)
    completions = list(completions)
    if len(golds) != len(completions):
        raise ValueError("completions and golds differ in length")
    if not golds:
        return float("nan")
    ok = 0
    for c, g in zip(completions, golds):
        a = extract_gsm8k_answer(c, strict=strict)
        ok += a is not None and _norm_number(g) == a
    return ok / len(golds)


def chat_ids(tokenizer, text: str, max_prompt_tokens: int | None = None) -> list[int]:
    """Token ids of ``text`` as a single user turn in the tokenizer's chat template (with the
    generation prompt). Long prompts are cut to their last ``max_prompt_tokens`` user tokens
    (keeping the template around them)."""
    if getattr(tokenizer, "chat_template", None):
        if max_prompt_tokens is not None:
            body = tokenizer(text, add_special_tokens=False).input_ids
            if len(body) > max_prompt_tokens:
                text = tokenizer.decode(body[-max_prompt_tokens:])
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)
    ids = tokenizer(text).input_ids
    if max_prompt_tokens is not None:
        ids = ids[-max_prompt_tokens:]
    return list(ids)


__all__ = [
    "Prompt",
    "SPEC_BENCH_CATEGORIES",
    "benchmark_mix",
    "chat_ids",
    "extract_gsm8k_answer",
    "gsm8k_accuracy",
    "load_prompts",
    "load_user_prompts",
]
