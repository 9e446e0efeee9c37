r"""What the sampler-law check found: its checks, the verdict, the diagnosis and the report.

Each statistical check runs at level ``alpha / m`` (Bonferroni over its m checks), so a correct
sampler fails a call with probability at most ``alpha``; an exact check passes only with
p-value 1. A failure report opens with a diagnosis: the pattern of the failed checks and what it
points to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .._tables import json_ready
from ..results import Result
from ._stats import DEFAULT_DETECTABLE_TV, DEFAULT_POWER, _power_fields


def _record(name, test, p_value, n, detail, case=None, position=None, **extra) -> dict:
    """One check's record (:class:`~._results.LawCheck` fields before the verdict)."""
    return {
        "name": name,
        "case": case,
        "position": position,
        "test": test,
        "p_value": p_value,
        "n": n,
        "detail": detail,
        **extra,
    }


def _exact(name, ok, n, detail, case=None) -> dict:
    return _record(name, "exact", float(ok), n, detail, case=case)


@dataclass(frozen=True)
class LawCheck:
    """One check of :func:`check_sampler_law`.

    Attributes
    ----------
    name : str
        ``"law"``, ``"bonus-law"`` (the emitted bonus token against the bonus row),
        ``"acceptance"``, ``"recovery"`` (the token emitted after a rejection against the
        recovery law), ``"draft-law"`` (the drafts of a sampler that draws them),
        ``"counter:<name>"``, ``"layout"``, ``"bonus"``, ``"greedy"``, ``"seeded"``,
        ``"zero-uniform"``, ``"placeholder"`` or a batch contract (``"batch-law:<slot>"``,
        ``"batch-layout"``, ``"batch-greedy"``, ``"batch-seeded"``).
    case, position : int or None
        Where (None for checks over all cases or positions).
    test : str
        ``"chi-square"``, ``"binomial"``, ``"bernstein"`` (statistical) or ``"exact"``.
    p_value : float
        The test's p-value (a bound for Bernstein); 1 or 0 for an exact check.
    threshold : float
        The level it is compared with (``alpha / m``); 0 for an exact check.
    n : int
        Draws the check saw.
    passed : bool
    detail : str
        What was seen (for a failure: where the law is off, and by how much).
    case_name : str or None
        The case's name (``"generic"``, ``"edge"``, ... or ``"case 3"``).
    detectable_tv : float or None
        For a chi-square check: the smallest total variation between the emitted law and the
        exact one that the check detects with probability ``power``
        (:mod:`._stats`; 0 when the exact law is one token,
        inf when the position is reached but the draws fill fewer than two cells).
    underpowered : bool
        A passed chi-square check whose ``detectable_tv`` exceeds the call's goal at a position
        the exact law reaches; for a ``recovery`` check (the token after a rejection), only
        when no case's recovery check at that position meets the goal (the recovery law was
        not exercised enough there). The batch checks state their power and set no goal.
    draws_needed : int or None
        For an underpowered check: draws per case at which the goal would be met.
    """

    name: str
    case: int | None
    position: int | None
    test: str
    p_value: float
    threshold: float
    n: int
    passed: bool
    detail: str
    case_name: str | None = None
    detectable_tv: float | None = None
    underpowered: bool = False
    draws_needed: int | None = None

    def where(self) -> str:
        parts = [] if self.case is None else [f"case {self.case_name or self.case!r}"]
        if self.position is not None:
            parts.append(f"position {self.position}")
        return " ".join(parts) or "all cases"

    def line(self) -> str:
        if self.test == "exact":
            verdict = "ok" if self.passed else "FAILED"
            return f"{self.where()}: {self.name} (exact) {verdict}: {self.detail}"
        cmp = ">=" if self.passed else "<"
        return (
            f"{self.where()}: {self.name} ({self.test}) p = {self.p_value:.3g} {cmp} "
            f"{self.threshold:.3g}, n = {self.n}: {self.detail}"
        )


@dataclass(frozen=True)
class SamplerLawResult(Result):
    """What :func:`check_sampler_law` found.

    Attributes
    ----------
    passed : bool
        No check failed.
    rule : str
        The rule's name.
    interface : str
        The adapter (``"vllm-v0"``, ``"vllm-v1"``, ``"callable"``, ``"padded"``).
    num_samples : int
        Draws per case.
    alpha : float
        Family-wise false-failure probability; each of the ``num_tests`` statistical checks
        ran at ``alpha / num_tests``.
    seed : int
    checks : tuple of LawCheck
    skipped : tuple of str
        Checks that could not run, with the reason.
    power, tv_goal : float
        Each chi-square check states the smallest total variation it detects with probability
        ``power``; a reached position whose smallest detectable deviation exceeds ``tv_goal``
        is underpowered.
    bonus : str
        The bonus contract the call tested: ``"given"`` (the sampler emits the bonus token it
        is handed) or ``"drawn"`` (it draws its own from the bonus row).
    diagnosis : tuple of str
        For a failure or an underpowered pass: the pattern of the failed checks and what it
        points to.
    """

    passed: bool
    rule: str
    interface: str
    num_samples: int
    alpha: float
    seed: int
    checks: tuple[LawCheck, ...]
    skipped: tuple[str, ...] = field(default=())
    power: float = DEFAULT_POWER
    tv_goal: float = DEFAULT_DETECTABLE_TV
    bonus: str = "given"
    diagnosis: tuple[str, ...] = field(default=())

    @property
    def failures(self) -> tuple[LawCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def underpowered(self) -> tuple[LawCheck, ...]:
        """The passed chi-square checks too weak for ``tv_goal`` at ``power``."""
        return tuple(c for c in self.checks if c.underpowered)

    @property
    def outcome(self) -> str:
        """``"failed"`` (a check failed), ``"underpowered"`` (none failed, but a reached
        position's check cannot detect a deviation of ``tv_goal`` with probability ``power``) or
        ``"passed"``."""
        if not self.passed:
            return "failed"
        return "underpowered" if self.underpowered else "passed"

    @property
    def status(self) -> str:
        """The :class:`~cactus_theory.results.Result` status: :attr:`outcome`."""
        return self.outcome

    @property
    def num_tests(self) -> int:
        return sum(c.test != "exact" for c in self.checks)

    @property
    def p_values(self) -> dict[str, float]:
        """``{"<name> <where>": p-value}`` of the statistical checks."""
        return {f"{c.name} {c.where()}": c.p_value for c in self.checks if c.test != "exact"}

    @property
    def min_p_value(self) -> float:
        return min([c.p_value for c in self.checks if c.test != "exact"], default=1.0)

    @property
    def draws_needed(self) -> int | None:
        """Draws per case at which no position is underpowered (None when none is)."""
        need = [c.draws_needed for c in self.underpowered if c.draws_needed is not None]
        return max(need) if need else None

    def power_lines(self) -> list[str]:
        """Per case: each position's draws and the smallest total variation detected, with its
        rejection draws and the recovery law's smallest detected total variation; then the
        checks over several cases (batch contracts, drafts)."""
        by_case: dict = {}
        recovery: dict = {}
        pooled = []
        for c in self.checks:
            if c.test != "chi-square":
                continue
            if c.name == "recovery":
                recovery[(c.case, c.position)] = c
            elif c.name in ("law", "bonus-law"):
                by_case.setdefault((c.case, c.case_name), []).append(c)
            else:
                pooled.append(c)
        out = []
        for (case, name), checks in by_case.items():
            cells = []
            for c in sorted(checks, key=lambda c: c.position):
                tv = c.detectable_tv
                if tv is None:
                    cells.append(f"{c.position}: never reached (exact reach 0)")
                    continue
                cell = f"{c.position}: n = {c.n}, TV >= {_tv(tv)}" + (
                    " (underpowered)" if c.underpowered else ""
                )
                rec = recovery.get((case, c.position))
                if rec is not None and rec.detectable_tv is not None:
                    cell += f", {rec.n} rejections, recovery TV >= {_tv(rec.detectable_tv)}" + (
                        " (underpowered)" if rec.underpowered else ""
                    )
                cells.append(cell)
            out.append(f"case {name!r}: " + "; ".join(cells))
        merged: dict = {}
        for c in pooled:  # one line per check and case (its positions together)
            merged.setdefault((c.name, c.case, c.case_name), []).append(c)
        for (name, case, case_name), checks in merged.items():
            where = "" if case is None else f" case {case_name!r}"
            cells = [
                ("" if c.position is None else f"{c.position}: ")
                + f"n = {c.n}, TV >= {'-' if c.detectable_tv is None else _tv(c.detectable_tv)}"
                for c in checks
            ]
            out.append(f"{name}{where}: " + "; ".join(cells))
        return out

    def report(self) -> str:
        head = (
            f"sampler law of rule {self.rule!r} through the {self.interface} interface: "
            f"{self.outcome.upper() if self.outcome != 'passed' else 'passed'} "
            f"({len(self.checks) - len(self.failures)}"
            f"/{len(self.checks)} checks; {self.num_samples} draws per case, seed {self.seed}, "
            f"false-failure probability {self.alpha:g} over {self.num_tests} tests; bonus token "
            f"{self.bonus})"
        )
        lines = [head]
        fails = self.failures
        if self.diagnosis:
            lines.append("diagnosis:")
            lines += ["  " + d for d in self.diagnosis]
        if fails:
            lines.append("failed:")
            lines += ["  " + c.line() for c in fails]
        lines.append(
            f"power (the smallest total variation each position's law check detects with "
            f"probability {self.power:g}; goal {self.tv_goal:g}):"
        )
        lines += ["  " + line for line in self.power_lines()]
        if self.underpowered:
            lines.append(
                f"underpowered: {len(self.underpowered)} reached positions cannot detect a deviation "
                f"of total variation {self.tv_goal:g}; about {self.draws_needed} draws per case would"
            )
        if self.skipped:
            lines.append("skipped: " + "; ".join(self.skipped))
        return "\n".join(lines)

    __str__ = report

    def to_dict(self) -> dict:
        """The outcome, the settings and every check as plain data (the package's JSON encoding)."""
        return json_ready(
            {
                "passed": self.passed,
                "outcome": self.outcome,
                "rule": self.rule,
                "interface": self.interface,
                "num_samples": self.num_samples,
                "alpha": self.alpha,
                "seed": self.seed,
                "bonus": self.bonus,
                "power": self.power,
                "tv_goal": self.tv_goal,
                "diagnosis": list(self.diagnosis),
                "checks": [c.__dict__.copy() for c in self.checks],
                "skipped": list(self.skipped),
            }
        )


def _tv(tv: float) -> str:
    return "inf" if math.isinf(tv) else f"{tv:.3f}"


def _diagnose_block(fails) -> list[str]:
    """Block verification's patterns: a law off after kept drafts, an acceptance off alone."""
    law = [c for c in fails if c.name == "law"]
    acc = [c for c in fails if c.name == "acceptance"]
    out = []
    if law and all(c.position > 0 for c in law):
        out.append(
            "block verification: the law is off only after kept drafts: the token after them is to be "
            "drawn from the block residual max(P_tau q - p, 0) (P_tau the kept drafts' clipped "
            "cumulative ratio), not the token-wise max(q - p, 0)"
        )
    if acc and not law:
        out.append(
            "block verification: the acceptance is off and the law is right: the thresholds read "
            "other drafter rows than the drafts came from (one-hot rows at the drafts, a fallback "
            "where the drafter's probabilities are absent, keep the law and lower the acceptance), "
            "or the sampler verifies token by token"
        )
    return out


def _diagnose(checks, laws, bonus_mode, block: bool = False) -> list[str]:
    """Patterns of the failed checks, and what each points to (``block``: the sampler claims
    block verification)."""
    fails = [c for c in checks if not c.passed]
    out = _diagnose_block(fails) if block else []
    block_named = bool(out)  # then later positions' failures are the block's pattern
    zero = [
        c
        for c in fails
        if (c.name in ("law", "bonus-law") and "exact probability is 0" in c.detail)
        or c.name == "zero-uniform"
    ]
    if zero:
        where = ", ".join(sorted({c.where() for c in zero}))
        out.append(
            f"a token of exact probability 0 was emitted ({where}): a truncation (top-k / top-p "
            "mask, its ties at the boundary) not applied to the rows the sampler verifies with, or "
            "an inclusive comparison u <= ratio that accepts a zero-probability draft when u = 0"
        )
    law_fail = {(c.case, c.position) for c in fails if c.name in ("law", "recovery")}
    acc_fail = {(c.case, c.position) for c in fails if c.name == "acceptance"}
    recovery = sorted(law_fail - acc_fail, key=lambda x: (x[0], x[1]))
    if recovery and acc_fail == set():
        out.append(
            "the emitted law is off where the acceptance is exact: the recovery distribution (the "
            "token drawn after a rejection: its residual max(h - p, 0), its normalization, or "
            "randomness shared with the acceptance test)"
        )
    if acc_fail:
        out.append(
            "the acceptance is off: the acceptance test (its ratio, the comparison, its uniforms) or "
            "the rows given to it (drafter rows other than the ones the drafts were drawn from; a "
            "target not processed with the request's temperature / top-k / top-p)"
        )
    by_case: dict = {}
    for c in fails:
        if c.name in ("law", "acceptance") and c.case is not None:
            by_case.setdefault(c.case_name, set()).add(c.position)
    later = sorted(name for name, pos in by_case.items() if 0 not in pos)
    if later and not block_named and all(0 not in pos for pos in by_case.values()):
        out.append(
            f"position 0 is right and later positions are wrong (case {', '.join(map(repr, later))}): "
            "indexing (rows or drafts read at another position) or randomness shared across positions"
        )
    if any(c.name == "draft-law" for c in fails):
        out.append(
            "the drafts the sampler drew do not follow the drafter rows: drafted from other rows, "
            "with another temperature or filter, or with noise that is not uniform"
        )
    batch = sorted({c.name for c in fails if c.name.startswith("batch-")})
    if batch and not any(c.name in ("law", "recovery", "acceptance", "layout", "greedy") for c in fails):
        out.append(
            f"only a batch contract failed ({', '.join(batch)}): a request's output depends on the batch "
            "around it (its slot, the batch size, its neighbours, seeded rows beside unseeded ones: "
            "batch-law is the law of each request's tokens in small batches by slot; batch-seeded a "
            "seeded request reproduced in every batch and call)"
        )
    if any(c.name == "bonus-law" for c in fails):
        out.append(
            "the emitted bonus token does not follow the bonus row: it is drawn from another row "
            "(the bonus position's verifier row is the last of each request's k + 1)"
        )
    if any(c.name == "bonus" for c in fails) and bonus_mode == "given":
        out.append(
            "the bonus token emitted after k acceptances is not the one handed in: if the sampler "
            "draws its own bonus token, declare it (bonus='drawn' or draws_bonus_token = True) and "
            "its law is tested instead"
        )
    if any(c.name == "placeholder" for c in fails):
        out.append(
            "a placeholder draft id -1 is accepted: it indexes the vocabulary from the end (the last "
            "token's probabilities) instead of being rejected"
        )
    if any(c.name == "layout" for c in fails):
        out.append("the output layout (accepted drafts, one token, then -1) is broken")
    if any(c.name == "greedy" for c in fails):
        out.append("greedy rows (temperature 0) are not verified by argmax")
    if any(c.name == "seeded" for c in fails):
        out.append("a row's own generator does not make it reproducible")
    if any(c.name.startswith("counter") for c in fails):
        out.append("the sampler's counters disagree with its output")
    return out


def _verdicts(raw: list[dict], names, alpha, power, tv_goal, num_samples) -> tuple[LawCheck, ...]:
    """The checks of the records ``raw``: statistical ones at ``alpha / m``, exact ones at 1."""
    m = max(1, sum(r["test"] != "exact" for r in raw))
    level = alpha / m
    checks = []
    extras = []
    for r in raw:
        exact = r["test"] == "exact"
        passed = bool(r["p_value"] == 1.0) if exact else bool(r["p_value"] >= level)
        extras.append((passed, _power_fields(r, passed, level, power, tv_goal, num_samples)))
    # the recovery law at a position is exercised when one case's rejections there detect tv_goal
    covered = {
        r["position"]
        for r, (_ok, e) in zip(raw, extras)
        if r["name"] == "recovery" and e.get("detectable_tv") is not None and e["detectable_tv"] <= tv_goal
    }
    for r, (passed, extra) in zip(raw, extras):
        exact = r["test"] == "exact"
        if extra.get("underpowered") and (
            r.get("_no_goal") or (r["name"] == "recovery" and r["position"] in covered)
        ):
            extra = {**extra, "underpowered": False, "draws_needed": None}
        r = {key: val for key, val in r.items() if not key.startswith("_")}
        name = None if r["case"] is None else names[r["case"]]
        checks.append(
            LawCheck(threshold=0.0 if exact else level, passed=passed, case_name=name, **r, **extra)
        )
    return tuple(checks)
