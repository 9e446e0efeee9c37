r"""Is a sampler's output law the rule's exact law? Statistical checks with a stated error rate.

One verification step of k drafts :math:`n_i \sim p_i` against verifier rows :math:`q_i`
emits, at each position i it reaches, a token with the law (paper, Theorem 3)

.. math:: h_{alg,i}(j) = p_{ij} a_i(j) + \sum_n p_{in} (1 - a_i(n))\, r_i^{(n)}(j)

and goes on to position i + 1 (accepts) with probability :math:`\alpha_i = \sum_n p_{in}
a_i(n)`; drafts and the sampler's noise are independent across positions, so given that
position i is reached its token and its acceptance follow :math:`h_{alg,i}` and
:math:`\alpha_i` whatever happened before. :func:`check_sampler_law` draws a sampler
``num_samples`` times on each case (fresh drafts n ~ p and bonus tokens ~ :math:`q_k` per
draw) and tests, per case and position:

* **law**: Pearson's chi-square of the emitted tokens at the reached draws against
  :math:`h_{alg,i}` (:func:`cactus_theory.emitted_distribution`); cells of expected count
  below ``min_expected`` are pooled, and a token of exact probability 0 that is emitted
  fails outright;
* **acceptance**: an exact two-sided binomial test of the number of reached draws that go
  on, against :math:`\alpha_i` (:func:`cactus_theory.acceptance_rate`);
* **recovery**: Pearson's chi-square of the tokens emitted by the draws that stop at position i
  (a rejection) against the recovery law :math:`(h_{alg,i} - p_i a_i) / (1 - \alpha_i)`, its
  power stated by those rejection draws;
* **draft-law** (a sampler that draws its own drafts, :func:`drafting_adapter`): each
  position's drafts against :math:`p_i`;
* **bonus-law**: Pearson's chi-square of the tokens emitted at position k (after k
  acceptances) against the bonus row :math:`q_k`, whoever draws the bonus token;
* **counters** (V0 samplers that keep vLLM 0.7's counters): ``num_accepted_tokens``
  (non-causal: every position whose own test passes) against its expectation
  :math:`N \sum_i \alpha_i` by Bernstein's inequality (a bound that holds at every N);
  ``num_emitted_tokens``, ``num_draft_tokens`` and ``num_accepted_prefix_tokens`` against
  the output, exactly.

Each statistical check runs at level ``alpha / m`` (Bonferroni over its m checks), so a
correct sampler fails a call with probability at most ``alpha`` (exactly for the binomial
and Bernstein checks; for chi-square to the accuracy of its asymptotic law, which the
pooling of small cells protects). The exact invariants have no false failures: the output's
layout (accepted drafts, one token, then -1), the bonus token emitted untouched after k
acceptances (when the sampler is handed it), greedy rows verified greedily, seeded rows
reproduced, and for a sampler that takes its acceptance uniforms, no token of exact probability
0 emitted when every uniform is 0.

Cases with the same k run interleaved in one batch (row r holds case r mod C), so a sampler
that reads another request's rows is seen. Each chi-square check states its power: the
smallest total variation it detects with probability ``power`` (Cochran's non-central limit); a reached
position whose power misses ``tv_goal`` makes the outcome "underpowered". A failure report
opens with a diagnosis: the pattern of the failed checks and what it points to.

The sampler sees the cases' rows in float32 and the exact law is computed on those float32
values (float64, renormalized). Rows whose entries are multiples of :math:`2^{-20}`
(:func:`dyadic`, as the default cases) are the same in both and sum to 1 exactly.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3. vLLM 0.7.3
``spec_decode_base_sampler.py::_create_output`` (output layout and counters).
"""

from __future__ import annotations

import numpy as np

from ._adapters import SamplerAdapter, _declared_bonus, _declares, as_adapter
from ._batches import _batch_contracts
from ._block import _is_block, resolve_rule
from ._cases import _resolve_cases
from ._draws import PLACEHOLDER, _draw_cases, _pad
from ._exact import exact_law
from ._invariants import _invariants, _placeholder
from ._results import SamplerLawResult, _diagnose, _exact, _record, _verdicts
from ._stats import DEFAULT_DETECTABLE_TV, DEFAULT_POWER, _bernstein, _binomial, _token_law

#: Draws per case by default: every broken sampler of the casebook is caught at it.
DEFAULT_NUM_SAMPLES = 20_000
#: Family-wise false-failure probability of one call by default.
DEFAULT_ALPHA = 1e-6


def _check_int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return int(value)


def _validated(num_samples, seed, alpha, min_expected, power, tv_goal) -> tuple[int, int]:
    """``(num_samples, seed)`` as ints; a ValueError naming the first bad argument."""
    num_samples = _check_int(num_samples, "num_samples", 1)
    seed = _check_int(seed, "seed", 0)
    if not (isinstance(alpha, (float, int)) and 0 < alpha < 1):
        raise ValueError(f"alpha: expected 0 < alpha < 1, got {alpha!r}")
    if not (isinstance(min_expected, (float, int)) and min_expected > 0):
        raise ValueError(f"min_expected: expected a positive number, got {min_expected!r}")
    if not (isinstance(power, (float, int)) and 0 < power < 1):
        raise ValueError(f"power: expected 0 < power < 1, got {power!r}")
    if not (isinstance(tv_goal, (float, int)) and 0 < tv_goal <= 1):
        raise ValueError(f"tv_goal: expected 0 < tv_goal <= 1, got {tv_goal!r}")
    return num_samples, seed


def check_sampler_law(
    sampler,
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    min_expected: float = 5.0,
    invariants: bool = True,
    device="cpu",
    raw_target_probs=None,
    raw_draft_probs=None,
    bonus: str | None = None,
    mixed: bool = True,
    case_names=None,
    power: float = DEFAULT_POWER,
    tv_goal: float = DEFAULT_DETECTABLE_TV,
) -> SamplerLawResult:
    r"""Draw ``sampler`` many times and compare its output law with ``rule``'s exact law.

    The checks are listed in :mod:`cactus_theory.testing`: per case and position a
    chi-square test of the emitted tokens against :math:`h_{alg,i}` and a binomial test of
    the acceptance against :math:`\alpha_i`, a chi-square test of the emitted bonus token
    against the bonus row, vLLM 0.7's counters against their expectation, each at
    ``alpha / m``; with ``invariants``, the exact checks of the layout, the bonus token (when
    it is given), greedy rows, seeded rows and zero uniforms, and the batch contracts (small
    batches of mixed requests: each request's law by slot, seeded requests reproduced in every
    batch and call, greedy rows, placeholder drafts; :mod:`._batches`).

    **The sampler's contract.** It is called on a batch (by an adapter) of
    verifier rows ``[B, k+1, V]`` (the last position is the bonus row), drafter rows
    ``[B, k, V]``, drafted tokens ``[B, k]`` drawn from the drafter rows and bonus tokens
    ``[B, 1]`` drawn from the bonus row, and returns ``[B, k+1]``: the accepted drafts, one
    recovered token, or after k acceptances the bonus token, then -1. The bonus token:

    * ``bonus="given"`` (default): the sampler emits the bonus token it is handed (vLLM's
      contract); an exact check compares them;
    * ``bonus="drawn"``: the sampler draws its own bonus token from the bonus row (as
      transformers' assisted generation and the newer vLLM runner do). It declares it with
      this argument or an attribute ``draws_bonus_token = True`` on the sampler; the exact
      check is then skipped, and the ``bonus-law`` chi-square (always run) tests the emitted
      bonus token against the bonus row, so a bonus drawn from another row fails.

    Optional keywords the sampler may take: ``seeded_seqs`` (row -> ``torch.Generator``),
    ``raw_target_probs`` / ``raw_draft_probs`` (the unprocessed rows) and
    ``uniform_samples`` ``[B, k+1]`` (the acceptance uniforms, as FlashInfer's chain
    speculative sampling takes them): a sampler that takes them is handed float32 uniforms
    from the check's generator and, with ``invariants``, a side batch where every uniform is
    exactly 0 (``zero-uniform``: no token of exact probability 0 may be emitted). A sampler
    with an attribute ``takes_placeholder_drafts = True`` also gets, with ``invariants``, rows
    whose last draft is the placeholder -1 with a zero drafter row (``placeholder``: it is never
    accepted).

    Parameters
    ----------
    sampler : callable or SamplerAdapter
        A V0 sampler, vLLM V1's ``rejection_sample`` or a plain callable
        (the adapter is chosen by its signature; pass one of :func:`v0_adapter`,
        :func:`v1_adapter`, :func:`callable_adapter`, :func:`padded_adapter` to choose).
    rule : str or Rule
        The rule the sampler claims to implement (a registry name, or a configured rule
        from :func:`cactus_theory.get_rule`, e.g. ``get_rule("cactus-taylor", delta=0.5)``), or
        ``"block"``: block verification (Sun et al.), lossless, its acceptance exact by
        enumeration of the draft sequences (:func:`exact_law`).
    target_probs, draft_probs : array_like, optional
        The cases: ``(k+1, V)`` and ``(k, V)``, or stacked ``(cases, k+1, V)`` and
        ``(cases, k, V)``, or lists of such pairs (cases may differ in k and V). Default:
        :func:`default_cases` of ``rule``: four cases of k = 3 and the case ``"deep"`` of k = 8
        built for the rule so that each of its positions rejects about one draw in nine (with
        :func:`default_raw_rows` for a sampler that takes raw rows;
        for ``rule="block"`` also the case ``"low-joint-ratio"``, where the block residual
        matters).
    num_samples : int
        Draws per case (default :data:`DEFAULT_NUM_SAMPLES`).
    alpha : float
        The probability, at most, that a correct sampler fails the call (0 < alpha < 1).
    seed : int
        Seeds the drafts, the bonus tokens, the uniforms and torch's global generator
        (restored after).
    min_expected : float
        Chi-square cells with a smaller expected count are pooled.
    invariants : bool
        Also run the exact invariant checks.
    device : str or torch.device
        Where the sampler's inputs live.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw (unprocessed) rows, shaped as ``target_probs`` and ``draft_probs`` (one case, or
        stacked cases; explicit cases are then required). The sampler receives them as the
        keywords ``raw_target_probs`` ([B, k+1, V]) and ``raw_draft_probs`` ([B, k, V]); the
        exact law of a rule that decides on raw rows (``rule.spec.needs_raw``: fuzzy, margin,
        relaxed-topk, scd, cascades) uses them. vLLM's interfaces carry no raw rows, so with
        raw rows a V1 ``rejection_sample``, or a sampler without those keywords, is refused
        (ValueError naming ``raw_target_probs``). Without raw rows the raw rows are the
        processed ones (what such a rule does at temperature 1 without truncation).
    bonus : {"given", "drawn"}, optional
        The bonus contract (above); default: ``"drawn"`` when the sampler (or the function an
        adapter wraps) has ``draws_bonus_token = True``, else ``"given"``.
    mixed : bool
        Cases with the same k run interleaved in one batch (row r holds case r mod C, the
        vocabularies padded with zero-probability tokens to the largest), so a sampler that
        reads another request's rows is seen; False calls the sampler once per case.
    case_names : sequence of str, optional
        Names of the cases in reports (default: :data:`DEFAULT_CASE_NAMES` for the default
        cases, ``"case i"`` otherwise).
    power, tv_goal : float
        Each chi-square check states the smallest total variation it detects with probability
        ``power``; a reached position where that exceeds ``tv_goal`` makes the
        outcome ``"underpowered"`` instead of ``"passed"``.

    Returns
    -------
    SamplerLawResult

    Raises
    ------
    ValueError
        A bad argument (named), or a sampler output of the wrong shape.
    """
    num_samples, seed = _validated(num_samples, seed, alpha, min_expected, power, tv_goal)
    adapter: SamplerAdapter = as_adapter(sampler)
    bonus_mode = _declared_bonus(sampler, bonus)
    rule = resolve_rule(rule)
    cases, raws, names = _resolve_cases(
        target_probs, draft_probs, raw_target_probs, raw_draft_probs, adapter, case_names, rule
    )
    laws = [
        exact_law(rule, q, p, **({} if r is None else {"raw_target_probs": r[0], "raw_draft_probs": r[1]}))
        for (q, p), r in zip(cases, raws)
    ]
    before = adapter.counters()
    outputs = _draw_cases(adapter, cases, raws, num_samples, seed, device, mixed)
    raw = _law_checks(cases, laws, outputs, min_expected)
    if adapter.draws_drafts:
        raw += _draft_checks(cases, outputs, min_expected)
    skipped: list[str] = []
    raw += _counter_checks(before, adapter.counters(), laws, outputs, num_samples, skipped)
    if bonus_mode == "drawn":
        skipped.append(
            "bonus (exact): the sampler draws its own bonus token (declared); bonus-law tests it "
            "against the bonus row"
        )
    if invariants:
        raw += _invariants(adapter, rule, cases, laws, outputs, seed, device, skipped, bonus_mode)
        placeholders = _declares(sampler, "takes_placeholder_drafts") and not adapter.draws_drafts
        if placeholders:
            raw += _placeholder(adapter, cases, seed, device)
        elif adapter.draws_drafts:
            skipped.append("placeholder: the sampler draws its own drafts")
        else:
            skipped.append("placeholder: the sampler does not declare takes_placeholder_drafts")
        raw += _batch_contracts(
            adapter, rule, cases, raws, laws, seed, device, skipped, bonus_mode, placeholders, num_samples
        )
    checks = _verdicts(raw, names, alpha, power, tv_goal, num_samples)
    return SamplerLawResult(
        passed=all(c.passed for c in checks),
        rule=rule.name,
        interface=adapter.name,
        num_samples=num_samples,
        alpha=float(alpha),
        seed=seed,
        checks=checks,
        skipped=tuple(skipped),
        power=float(power),
        tv_goal=float(tv_goal),
        bonus=bonus_mode,
        diagnosis=tuple(_diagnose(checks, laws, bonus_mode, _is_block(rule))),
    )


def _law_checks(cases, laws, outputs, min_expected) -> list[dict]:
    """Per case and position: the emitted law (chi-square; the bonus position against the bonus
    row) and the acceptance (binomial) at the draws that reach it."""
    raw = []
    for c, ((q, p), law) in enumerate(zip(cases, laws)):
        k = p.shape[0]
        out, _drafts, _bonus_ids, vmax = outputs[c]
        present = out != PLACEHOLDER
        for i in range(k + 1):
            reached = present[:, i]
            n = int(reached.sum())
            probs = _pad(law.emitted[i] if i < k else q[k], vmax)
            pv, det, cells = _token_law(out[reached, i], probs, min_expected)
            name, det = ("law", det) if i < k else ("bonus-law", "bonus row: " + det)
            support = int(np.count_nonzero(probs > 0))
            raw.append(
                _record(
                    name,
                    "chi-square",
                    pv,
                    n,
                    det,
                    c,
                    i,
                    _cells=cells,
                    _support=support,
                    _reach=float(law.reach[i]),
                )
            )
            if i == k:
                break
            pv, det = _binomial(int(present[reached, i + 1].sum()), n, float(law.acceptance[i]))
            raw.append(_record("acceptance", "binomial", pv, n, det, c, i))
            raw += _recovery_check(out, present, law, i, c, vmax, min_expected)
    return raw


def _recovery_check(out, present, law, i, c, vmax, min_expected) -> list[dict]:
    r"""The token emitted at position i by the draws that stop there (reached, not going on)
    against the recovery law :math:`(h_{alg,i} - p_i a_i) / (1 - \alpha_i)`: the token drawn
    after a rejection, tested on its own so that its power is stated by its rejection draws."""
    reject = float(1.0 - law.acceptance[i])
    if reject <= 1e-12:  # the position always goes on: no recovery to test
        return []
    stopped = present[:, i] & ~present[:, i + 1]
    probs = np.clip(law.emitted[i] - law.accepted_mass[i], 0.0, None)
    probs = _pad(probs / probs.sum(), vmax)
    n = int(stopped.sum())
    pv, det, cells = _token_law(out[stopped, i], probs, min_expected)
    return [
        _record(
            "recovery",
            "chi-square",
            pv,
            n,
            "after a rejection: " + det,
            c,
            i,
            _cells=cells,
            _support=int(np.count_nonzero(probs > 0)),
            _reach=float(law.reach[i]) * reject,
        )
    ]


def _draft_checks(cases, outputs, min_expected) -> list[dict]:
    """For a sampler that draws its own drafts: the drafts at each position against the drafter
    row (every draw drafts every position, whatever is accepted)."""
    raw = []
    for c, ((_q, p), (_out, drafts, _bonus, vmax)) in enumerate(zip(cases, outputs)):
        for i in range(p.shape[0]):
            probs = _pad(p[i], vmax)
            pv, det, cells = _token_law(drafts[:, i], probs, min_expected)
            raw.append(
                _record(
                    "draft-law",
                    "chi-square",
                    pv,
                    len(drafts),
                    "drafts vs the drafter row: " + det,
                    c,
                    i,
                    _cells=cells,
                    _support=int(np.count_nonzero(probs > 0)),
                    _reach=1.0,
                )
            )
    return raw


def _counter_checks(before, after, laws, outputs, num_samples, skipped) -> list[dict]:
    """vLLM 0.7's counters over the main draws: the emitted, drafted and accepted-prefix counts
    exactly, the non-causal accepted count against its expectation (Bernstein)."""
    if before is None:
        skipped.append("counters: the sampler keeps none")
        return []
    if after is None:
        return []
    n_draft = n_emitted = n_prefix = 0
    acc_mean = acc_var = 0.0
    for law, (out, drafts, _bonus_ids, _vmax) in zip(laws, outputs):
        present = out != PLACEHOLDER
        n_draft += num_samples * drafts.shape[1]
        n_emitted += int(present.sum())
        n_prefix += int(present[:, 1:].sum())
        acc_mean += num_samples * float(law.acceptance.sum())
        acc_var += num_samples * float((law.acceptance * (1 - law.acceptance)).sum())
    delta = {name: after[name] - before.get(name, 0) for name in after}
    exact_counts = {
        "num_draft_tokens": n_draft,
        "num_emitted_tokens": n_emitted,
        "num_accepted_prefix_tokens": n_prefix,
    }
    raw = [
        _exact(
            f"counter:{name}", delta[name] == want, n_draft, f"counted {delta[name]}, the output has {want}"
        )
        for name, want in exact_counts.items()
        if name in delta
    ]
    if "num_accepted_tokens" in delta:
        got = delta["num_accepted_tokens"]
        detail = (
            f"counted {got}, exact expectation {acc_mean:.1f} (every accepted position, vLLM 0.7's "
            f"non-causal count; the accepted prefixes hold {n_prefix})"
        )
        p_value = _bernstein(got, acc_mean, acc_var)
        raw.append(_record("counter:num_accepted_tokens", "bernstein", p_value, n_draft, detail))
    return raw


def assert_sampler_law(
    sampler, rule, target_probs=None, draft_probs=None, *, strict: bool = False, **kwargs
) -> SamplerLawResult:
    r""":func:`check_sampler_law`, raising AssertionError with its report when a check fails.

    Parameters
    ----------
    sampler, rule, target_probs, draft_probs, **kwargs
        As :func:`check_sampler_law` (``num_samples``, ``alpha``, ``seed``,
        ``min_expected``, ``invariants``, ``device``, ``bonus``, ``mixed``, ``power``,
        ``tv_goal``, ...).
    strict : bool
        Also raise when the outcome is ``"underpowered"`` (no check failed, but a reached
        position cannot detect a deviation of ``tv_goal`` with probability ``power``).

    Returns
    -------
    SamplerLawResult
        When every check passed (and, with ``strict``, none is underpowered).

    Raises
    ------
    AssertionError
        A check failed; the message is the report: the diagnosis, the failed checks (where and
        by how much) and each position's power. pytest shows it without this function's source.

    Examples
    --------
    >>> import cactus_theory as ct
    >>> res = assert_sampler_law(ct.make_sampler("sps"), "sps", num_samples=2000)
    >>> res.passed
    True
    """
    __tracebackhide__ = True  # pytest: show the report, not this function's source
    result = check_sampler_law(sampler, rule, target_probs, draft_probs, **kwargs)
    if not result.passed or (strict and result.outcome != "passed"):
        raise AssertionError(result.report())
    return result
