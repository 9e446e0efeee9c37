r"""The verdicts' vocabulary: a check, a definition tried, a verdict, and their plain-text form.

A :class:`Check` is one numerical test (``value op threshold``); a :class:`Definition` is one
reading of a claim's quantity with the paper's checks under it; a :class:`Verdict` is computed
from the definitions tried by :func:`verdict_word`, by the criteria of :data:`VERDICT_WORDS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Tolerance of an identity computed in float64 over rows of at most a few hundred terms
#: (sums of V <= 48 probabilities, a few ulps each): 1e-12 is far above that rounding.
EXACT_TOL = 1e-12
#: Tolerance of a cvxpy answer: Clarabel/SCS are run at about 1e-8 to 1e-9 feasibility and gap.
CVX_TOL = 1e-6
#: Tolerance of an inequality whose two sides are computed by different float64 routes
#: (a divergence ratio, an argmax on a grid): well above rounding, far below any finding.
RATIO_TOL = 1e-9


@dataclass(frozen=True)
class Check:
    r"""One numerical test behind a verdict: ``value op threshold``.

    Attributes
    ----------
    statement : str
        What is tested, in words.
    value : float
        The computed number.
    op : str
        ``"<="``, ``">="`` or ``">"``.
    threshold : float
        The stated threshold (its reason is in the constant or the claim's code).
    of_paper : bool
        True: the check tests what the paper states (it enters the verdict). False: a finding
        of this toolkit beyond the paper (reported and pinned, not graded).
    """

    statement: str
    value: float
    op: str
    threshold: float
    of_paper: bool = True

    @property
    def passed(self) -> bool:
        """Whether ``value op threshold`` holds."""
        v, t = self.value, self.threshold
        return {"<=": v <= t, ">=": v >= t, ">": v > t}[self.op]

    def line(self) -> str:
        """One line: ``[pass] statement: value <= threshold``; a value below
        :data:`ROUNDING_FLOOR` in size reads ``0 (to 1e-14)`` (its digits are float64 rounding of
        order-one quantities, which the summation order of a machine or thread count moves)."""
        tag = ("pass" if self.passed else "FAIL") if self.of_paper else ("true" if self.passed else "false")
        shown = f"0 (to {ROUNDING_FLOOR:g})" if abs(self.value) < ROUNDING_FLOOR else f"{self.value:.6g}"
        return f"[{tag}] {self.statement}: {shown} {self.op} {self.threshold:.6g}"


#: Below this size a check's value is shown as ``0 (to 1e-14)``: float64 rounding (a few ulps of
#: order-one quantities), whose digits depend on the summation order.
ROUNDING_FLOOR = 1e-14

#: The verdict words and the criterion of each (:func:`verdict_word` applies them).
VERDICT_WORDS = {
    "holds": "every check of what the paper states passes, under the definition the paper states "
    "(or, where it leaves the quantity unstated, under every definition tried)",
    "partly": "some of the paper's checks pass and some fail, under the definition the paper states "
    "(or under every definition tried, where it leaves the quantity unstated)",
    "fails": "every check of what the paper states fails, under the definition the paper states "
    "(or under every definition tried, where it leaves the quantity unstated)",
    "undetermined": "the paper leaves a quantity of the claim unstated, and the definitions tried give "
    "different words or one of them cannot be computed from what the paper prints",
}
#: Not a verdict: the claim's checks were not run (an optional solver was skipped).
NOT_CHECKED = "not checked"


def grade(checks) -> str:
    """The word of one definition's checks: all of the paper's pass ``holds``, none ``fails``, else
    ``partly`` (``not checked`` when there is no check of the paper)."""
    paper = [c.passed for c in checks if c.of_paper]
    if not paper:
        return NOT_CHECKED
    return "holds" if all(paper) else ("fails" if not any(paper) else "partly")


@dataclass(frozen=True)
class Definition:
    """One reading of a claim's quantity and the paper's checks under it.

    Attributes
    ----------
    name : str
        The definition, in words.
    checks : tuple of Check
        The checks of what the paper states, under this definition (graded by :func:`grade`).
    stated : bool
        True: the paper states this definition. At most one definition of a verdict is stated.
    computable : bool
        False: what the paper prints does not determine the checks under this definition.
    note : str
        Why it cannot be computed, or what else it shows.
    """

    name: str
    checks: tuple = ()
    stated: bool = False
    computable: bool = True
    note: str = ""

    @property
    def word(self):
        """``holds``, ``partly`` or ``fails`` under this definition; None where not computable."""
        return grade(self.checks) if self.computable else None


def verdict_word(definitions) -> str:
    """The verdict from the definitions tried, by the criteria of :data:`VERDICT_WORDS`.

    The word of the stated definition when the paper states one; otherwise the common word when
    every definition tried is computable and all give the same word, else ``undetermined``.

    Raises
    ------
    ValueError
        ``definitions`` empty, more than one stated, or a stated one that cannot be computed.
    """
    definitions = tuple(definitions)
    if not definitions:
        raise ValueError("definitions: a verdict needs at least one definition tried")
    stated = [d for d in definitions if d.stated]
    if len(stated) > 1:
        raise ValueError(f"definitions: {len(stated)} are marked stated; the paper states at most one")
    if stated:
        if stated[0].word is None:
            raise ValueError(f"definitions: the stated definition {stated[0].name!r} is not computable")
        return stated[0].word
    words = {d.word for d in definitions}
    if len(words) == 1 and None not in words:
        return words.pop()
    return "undetermined"


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict, computed from the definitions tried by :func:`verdict_word`.

    Attributes
    ----------
    number : int
        The claim's number in the paper notes.
    claim : str
        The claim.
    definitions : tuple of Definition
        The definitions of the claim's quantity tried, each with the paper's checks under it.
    evidence : str
        What else the numbers show.
    numbers : dict
        The key numbers by name (tests pin them).
    findings : tuple of Check
        Checks of this toolkit beyond the paper (reported and pinned, not graded).
    unstated : str
        What the paper leaves unstated ("" when it states the claim's quantity).
    """

    number: int
    claim: str
    definitions: tuple
    evidence: str
    numbers: dict = field(default_factory=dict)
    findings: tuple = ()
    unstated: str = ""

    def __post_init__(self):
        if not self.unstated and not any(d.stated for d in self.definitions) and self.definitions:
            raise ValueError(
                f"unstated: claim {self.number} names no stated definition, so it must say "
                "what the paper leaves unstated"
            )

    @property
    def checks(self) -> tuple:
        """Every check: the definitions' (graded) and the findings (not graded)."""
        return tuple(c for d in self.definitions for c in d.checks) + tuple(self.findings)

    @property
    def verdict(self) -> str:
        """A word of :data:`VERDICT_WORDS` (``not checked`` when no definition was run)."""
        return verdict_word(self.definitions) if self.definitions else NOT_CHECKED


def stated(name, *checks) -> tuple:
    """The one definition the paper states, with its checks (a verdict's ``definitions``)."""
    return (Definition(name, tuple(checks), stated=True),)


def format_vocabulary() -> str:
    """The verdict words with their criteria, one per line."""
    return "\n".join(f"{w}: {c}" for w, c in VERDICT_WORDS.items())


def format_verdicts(verdicts) -> str:
    """Plain-text list of verdicts: the verdict, each definition tried with its word and checks, the
    findings, the evidence."""
    out = []
    for v in verdicts:
        head = f"{v.number:>2}. {v.claim}\n    verdict: {v.verdict}"
        if v.unstated:
            head += f" (the paper leaves unstated: {v.unstated})"
        out.append(head)
        for d in v.definitions:
            word = d.word if d.computable else "not computable"
            tag = "definition (stated)" if d.stated else "definition tried"
            out.append(f"    {tag}: {d.name} -> {word}" + (f" ({d.note})" if d.note else ""))
            out += [f"      {c.line()}" for c in d.checks]
        out += [f"    finding {c.line()}" for c in v.findings]
        out.append(f"    evidence: {v.evidence}")
    return "\n".join(out)
