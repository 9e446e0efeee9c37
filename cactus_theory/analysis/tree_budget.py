r"""Trees under a sequence-level budget: the spend of a verification and one multiplier for all nodes.

A node-wise verifier at trie node u emits the next token with law :math:`o_u` (its emitted law
at u, averaged over the drafts) and moves into the child of token x with probability
:math:`A_u(x)` (its accepted-token law). So one verification reaches node u with probability

.. math:: r_{root} = 1, \qquad r_{c(u,x)} = r_u A_u(x),

accepts :math:`E[L] = \sum_{u \ne root} r_u` drafts, and emits a block of tokens whose law P,
against the verifier's law Q of the same block, has (chain rule of KL)

.. math:: KL(P\|Q) = \sum_u r_u\, KL(o_u \| q_u)

(a leaf's bonus token comes from :math:`q_u`: no spend). :func:`tree_spend` computes both
exactly; for divergences other than KL the same sum is the reported *sequence divergence*.

**One multiplier.** With the reach weights :math:`r_u` held fixed the problem
:math:`\max \sum_u r_u F_u(e_u)` s.t. :math:`\sum_u r_u e_u \le B` (:math:`F_u` the node's
k-draft frontier) separates with one multiplier: every node maximises
:math:`F_u(e) - \lambda e`, the weights cancel, and by Lagrangian sufficiency (Everett 1963)
the allocation is optimal for the spend it produces; this is the ``optimal-multiplier``
verifier, the tree analogue of ``sequence-budget-kl`` on a chain.
:func:`tree_sequence_budget` calibrates :math:`\lambda` (regula falsi on :math:`1/\lambda`) so
that the *exact* spend, with the reach the targets themselves produce, meets B, and
:func:`tree_constant_budget` calibrates a per-node budget :math:`\delta` (``optimal-budget``
or ``cactus-rrs``) to the same spend: the comparison at equal sequence divergence. The
multiplier's optimality holds at fixed reach; with the reach moving, a test reports how the
two compare rather than assuming it.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), o emitted law, B the
budget per verification, :math:`\lambda` the multiplier.

References
----------
Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 1; Cover & Thomas, Thm 2.5.3 (chain rule);
H. Everett, Operations Research 11 (1963); Miao et al., SpecInfer (arXiv 2305.09781) for trees.
"""

from __future__ import annotations

import math

import numpy as np

from .._search import illinois
from .._validation import as_budget, choice
from ..divergences import get_divergence
from ..drafts import MultiDraft, TokenTree
from ..results import TreeBudgetResult, TreeSpend
from ..rules.multidraft import get_verifier
from ..rules.multidraft.base import NodeVerifier
from .multidraft import _as_token_tree, multidraft_emitted

__all__ = [
    "tree_spend",
    "tree_sequence_budget",
    "tree_constant_budget",
    "tree_budget_rows",
]

#: Most regula-falsi steps on the calibrated knob (1/lambda, or delta).
_CALIBRATION_STEPS = 40
#: The calibration stops once the spend is within this fraction of the budget (below it).
_SPEND_RTOL = 1e-7


def tree_spend(verifier, structure, divergence="kl") -> TreeSpend:
    r"""Reach, emitted laws, sequence divergence and :math:`E[L]` of one verification, exactly.

    Parameters
    ----------
    verifier : str or MultiDraftVerifier
        A node-wise verifier of :data:`cactus_theory.rules.multidraft.VERIFIERS`.
    structure : TokenTree or MultiDraft
    divergence : str

    Returns
    -------
    TreeSpend

    Symbols: q verifier, p drafter, o emitted. Source: this module's docstring.
    """
    ver = get_verifier(verifier)
    if not isinstance(ver, NodeVerifier):
        raise ValueError(f"verifier: {ver.name!r} is not node-wise; the reach recursion needs node laws")
    tree: TokenTree = _as_token_tree(structure)
    d = get_divergence(divergence)
    n = tree.num_nodes
    reach = np.zeros(n)
    reach[0] = 1.0
    emitted = np.array(tree.target_probs, dtype=np.float64)
    for u in range(n):
        w = int(tree.widths[u])
        if w == 0:
            continue
        q, p = tree.target_probs[u], tree.draft_probs[u]
        a = ver.accepted_token_law(q, p, w, tree.drafting)
        for x, c in tree.children(u).items():
            reach[c] = reach[u] * a[x]
        target = getattr(ver, "target", None)
        if target is not None:  # the targeted verifiers emit their target exactly
            emitted[u] = target(q, p, w, tree.drafting)
        else:
            emitted[u] = multidraft_emitted(ver, MultiDraft(q, p, w, tree.drafting))
    node_div = np.asarray(d.unchecked(emitted, tree.target_probs), dtype=np.float64)
    return TreeSpend(reach, emitted, node_div, float(reach @ node_div), float(reach[1:].sum()))


def _calibrate(make, budget, cap):
    """Largest knob in [0, cap] with spend <= budget (the spend grows with the knob).

    The bracket's top doubles from 1/16 until its spend exceeds the budget (or reaches
    ``cap``: the budget is then never binding); then the Illinois variant of regula falsi
    (:func:`cactus_theory._search.illinois`) on ``spend - budget`` until the spend is within
    :data:`_SPEND_RTOL` of the budget or :data:`_CALIBRATION_STEPS` steps, keeping the feasible
    end. Returns (knob, its spend record, status): ``"calibrated"`` within
    :data:`_SPEND_RTOL`, ``"range-end"`` where the budget is not binding up to ``cap``,
    ``"above"`` where even 0 spends more, ``"step"`` where the steps ran out short of the
    budget (the spend jumps over it).
    """
    best, lo, hi = make(0.0), 0.0, 1.0 / 16.0
    if best.spend > budget:
        return 0.0, best, "above"
    while True:
        s = make(hi)
        if s.spend > budget:
            break
        lo, best = hi, s
        if hi >= cap:
            return lo, best, "range-end"
        hi = min(cap, 2.0 * hi)
    tol = _SPEND_RTOL * max(budget, 1e-300)
    seen = {lo: best, hi: s}

    def excess(x):
        x = float(x[0])
        if x not in seen:
            seen[x] = make(x)
        return np.array([seen[x].spend - budget])

    lo_a, _ = illinois(excess, np.array([lo]), np.array([hi]), steps=_CALIBRATION_STEPS, tol=tol)
    lo = float(lo_a[0])
    return lo, seen[lo], "calibrated" if budget - seen[lo].spend <= tol else "step"


def tree_sequence_budget(structure, budget, divergence="kl") -> TreeBudgetResult:
    r"""``optimal-multiplier`` with :math:`\lambda` calibrated to a spend per verification.

    Regula falsi on :math:`t = 1/\lambda \in [0, 10^6]` (:math:`t = 0`: lossless) for the
    largest t whose exact spend (:func:`tree_spend`) is at most ``budget`` (the spend is
    taken to grow with t: each node's spend does, and so does each node's acceptance).

    Parameters
    ----------
    structure : TokenTree or MultiDraft
    budget : float
        B >= 0, the sequence divergence per verification.
    divergence : str

    Returns
    -------
    TreeBudgetResult

    Symbols: B budget, :math:`\lambda` multiplier. Source: this module's docstring.
    """
    B = as_budget(budget, "budget")
    d = get_divergence(divergence)
    tree = _as_token_tree(structure)

    def make(t):
        lam = math.inf if t == 0 else 1.0 / t
        return tree_spend(get_verifier("optimal-multiplier", lam=lam, divergence=d.name), tree, d.name)

    t, s, status = _calibrate(make, B, 1e6)
    return TreeBudgetResult(
        "optimal-multiplier",
        "lam",
        math.inf if t == 0 else 1.0 / t,
        s.spend,
        s.expected_accepted,
        d.name,
        status,
    )


def tree_constant_budget(structure, budget, divergence="kl", verifier="optimal-budget") -> TreeBudgetResult:
    r"""A per-node budget :math:`\delta`, the same at every node, calibrated to a spend.

    Parameters
    ----------
    structure : TokenTree or MultiDraft
    budget : float
    divergence : str
    verifier : {"optimal-budget", "cactus-rrs"}

    Returns
    -------
    TreeBudgetResult

    Symbols: :math:`\delta` per-node budget, B budget. Source: this module's docstring.
    """
    B = as_budget(budget, "budget")
    d = get_divergence(divergence)
    name = choice(verifier, ("optimal-budget", "cactus-rrs"), "verifier")
    tree = _as_token_tree(structure)

    def make(delta):
        return tree_spend(get_verifier(name, delta=delta, divergence=d.name), tree, d.name)

    delta, s, status = _calibrate(make, B, 1e3)
    return TreeBudgetResult(name, "delta", delta, s.spend, s.expected_accepted, d.name, status)


def tree_budget_rows(trees, budget, divergence="kl", lossless=("optimal",)) -> list[dict]:
    r"""Verifiers on a set of trees at one sequence divergence per verification (means over trees).

    Rows: each lossless verifier of ``lossless`` (spend 0), ``optimal-budget`` with one
    per-node :math:`\delta` and ``optimal-multiplier`` with one :math:`\lambda`, each
    calibrated per tree to the spend ``budget`` (:func:`tree_constant_budget`,
    :func:`tree_sequence_budget`), and ``cactus-rrs`` likewise where every tree is i.i.d.
    (for top-k children it coincides with ``optimal-budget``). Keys: ``verifier``, ``knob``
    (how it is set), ``expected_accepted`` (mean :math:`E[L]`), ``spend`` (mean), ``gain``
    (mean :math:`E[L]` minus that of the first lossless verifier).

    Symbols: B budget, :math:`E[L]` accepted drafts per verification. Source: this module.
    """
    from .multidraft import expected_accepted_length

    trees = [_as_token_tree(t) for t in trees]
    if not trees:
        raise ValueError("trees: empty; give at least one tree")
    B = as_budget(budget, "budget")
    d = get_divergence(divergence)
    rows = []
    for name in lossless:
        ver = get_verifier(name)
        method = "dp" if isinstance(ver, NodeVerifier) else "enumerate"
        el = [expected_accepted_length(ver, t, method) for t in trees]
        rows.append(dict(verifier=name, knob="lossless", expected_accepted=float(np.mean(el)), spend=0.0))
    calibrated = [("optimal-multiplier", lambda t: tree_sequence_budget(t, B, d.name))]
    calibrated.append(("optimal-budget", lambda t: tree_constant_budget(t, B, d.name)))
    if all(t.drafting == "iid" for t in trees):
        calibrated.append(("cactus-rrs", lambda t: tree_constant_budget(t, B, d.name, "cactus-rrs")))
    for name, fit in calibrated:
        res = [fit(t) for t in trees]
        knob = "one lam per tree" if name == "optimal-multiplier" else "one delta per tree"
        rows.append(
            dict(
                verifier=name,
                knob=knob,
                expected_accepted=float(np.mean([r.expected_accepted for r in res])),
                spend=float(np.mean([r.spend for r in res])),
            )
        )
    base = rows[0]["expected_accepted"]
    for r in rows:
        r["gain"] = r["expected_accepted"] - base
    return rows


def _top_chain(structure) -> TokenTree:
    r"""The chain of a tree's most likely drafts: from the root, the child of the drafter's top-1
    token, until a leaf (one draft per node, ``drafting="top_k"``).

    With one deterministic draft per node the lossless optimum accepts :math:`q_u(x)` there
    (SpS against a point-mass drafter), and ``optimal-budget`` is Cactus's exact per-draft
    target (Theorem 2) on that chain: the single-chain baseline of a tree.

    Symbols: q verifier, p drafter. Source: Hao & Mou, ICLR 2026, Theorem 2.
    """
    from ..drafts.internal import top_k_tokens

    tree = _as_token_tree(structure)
    path, u = [0], 0
    while int(tree.widths[u]) > 0:
        x = int(top_k_tokens(tree.draft_probs[u], 1)[0])
        c = tree.child(u, x)
        if c < 0:
            break
        path.append(c)
        u = c
    n = len(path)
    return TokenTree(
        parents=np.arange(-1, n - 1),
        token_ids=np.array([-1] + [int(tree.token_ids[i]) for i in path[1:]]),
        target_probs=tree.target_probs[path],
        draft_probs=tree.draft_probs[path],
        widths=np.array([1] * (n - 1) + [0]),
        drafting="top_k",
    )
