r"""Batched torch samplers for the multi-draft verifiers (trees, k drafts at one position, chains).

:class:`TreeSampler` verifies B drawn trees of one topology (the static shapes and top-k
trees engines build: one ``parents`` array for the batch) with any verifier of
:data:`cactus_theory.rules.multidraft.VERIFIERS`, by the verifier's own algorithm (coins,
residual updates), not by its exact law: the tests compare the two by chi-square.

Inputs (vocabulary last, nodes in depth-first preorder as
:class:`~cactus_theory.drafts.DrawnTree`): ``target_probs`` [B, M, V] (q at each node),
``draft_probs`` [B, M, V] (p at each node; a leaf's row unused), ``token_ids`` [B, M] (the
drafted token of each node; entry 0 ignored), ``parents`` [M] (``parents[0] = -1``).
float32 inside (bf16/fp16 inputs are cast; rows are normalized by their sums), on the
inputs' device. Random stream: ``torch.rand`` on ``generator`` (or the default one) in the
order the algorithm consumes it; the correction/bonus token by inverse CDF
(:func:`~cactus_theory.samplers.draws.inverse_cdf_sample`).

Node-wise verifiers run node by node in preorder (rows whose accepted path reached the node
verify its children: RRS and k-SEQ in torch; the LP-optimal verifier evaluates its node law
on the host, one LP per distinct row pair, cached — its stated limit). Traversal verification
keeps per-row state (removed nodes, weights, current rows) and steps leaf by leaf; block
verification runs Algorithm 2 on chains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..rules.multidraft import get_verifier
from ..rules.multidraft.internal import KSequential, RecursiveRejection
from ._kernels import RuleKernels, kernels_for, register_kernels
from .draws import inverse_cdf_sample

__all__ = ["TreeSample", "TreeSampler", "make_tree_sampler", "verify_chain"]

_DRAFTING = ("iid", "without_replacement", "top_k")


@dataclass(frozen=True)
class TreeSample:
    """One verification of each of B drawn trees.

    Attributes
    ----------
    end_nodes : Tensor (B,) int64
        The node where the accepted path ends (0: no draft accepted).
    num_accepted : Tensor (B,) int64
        Accepted drafts (the end node's depth).
    tokens : Tensor (B, D + 1) int64
        The accepted drafts, then the correction or bonus token, then -1.
    """

    end_nodes: torch.Tensor
    num_accepted: torch.Tensor
    tokens: torch.Tensor


def _rows(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float32)
    s = x.sum(-1, keepdim=True)
    return x / torch.where(s > 0, s, torch.ones_like(s))


def _normalize(w: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    w = w.clamp_min(0.0)
    s = w.sum(-1, keepdim=True)
    return torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), fallback)


def _drafting_law(p: torch.Tensor, previous: torch.Tensor | None, token: torch.Tensor, drafting: str):
    """The law of the next child (rows of p; ``previous`` [R, j] tokens drafted before; ``token``
    [R] the child's token, for the top-k point mass)."""
    if drafting == "iid":
        return p
    if drafting == "top_k":
        return torch.nn.functional.one_hot(token, p.shape[-1]).to(p.dtype)
    law = p
    if previous is not None and previous.shape[-1]:
        law = p.scatter(-1, previous, 0.0)
    return _normalize(law, p)


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """min(1, num / den), with den = 0: 1 if num > 0 else 0 (the toolkit's convention 2)."""
    safe = torch.where(den > 0, den, torch.ones_like(den))
    return torch.where(den > 0, (num / safe).clamp(max=1.0), (num > 0).to(num.dtype))


def _take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, -1, idx.unsqueeze(-1)).squeeze(-1)


def _division_factor(q: torch.Tensor, p: torch.Tensor, k: int) -> torch.Tensor:
    """SpecTr's smallest feasible rho per row: grid scan then bisection (as the numpy rule)."""
    rows = q.shape[0]
    if k == 1:
        return torch.ones(rows, dtype=q.dtype, device=q.device)

    def feasible(rho):
        b = torch.minimum(p, q / rho[:, None]).sum(-1)
        f = torch.where(b > 0, (1 - (1 - b) ** k) / torch.where(b > 0, b, torch.ones_like(b)), float(k))
        return rho >= f * (1 - 1e-6)  # float32: the numpy rule's slack scaled to float32 rounding

    grid = torch.linspace(1.0, float(k), 257, dtype=q.dtype, device=q.device)
    ok = torch.stack(
        [feasible(torch.full((rows,), float(g), dtype=q.dtype, device=q.device)) for g in grid], 1
    )
    first = torch.where(ok.any(1), ok.to(torch.int64).argmax(1), torch.full((rows,), 256, device=q.device))
    hi = grid[first]
    lo = grid[(first - 1).clamp(min=0)]
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        f = feasible(mid)
        hi = torch.where(f, mid, hi)
        lo = torch.where(f, lo, mid)
    return torch.where(first == 0, torch.ones_like(hi), hi)


def _rrs_step(ver, qv, pv, kids_tok, drafting, g):
    """Recursive rejection sampling at one node for R rows: accepted slot (-1 none), residual."""
    r_rows, k = kids_tok.shape
    slot = torch.full((r_rows,), -1, dtype=torch.int64, device=qv.device)
    u = torch.rand(r_rows, k, device=qv.device, generator=g)
    r = qv
    for j in range(k):
        law = _drafting_law(pv, kids_tok[:, :j], kids_tok[:, j], drafting)
        a = _ratio(_take(r, kids_tok[:, j]), _take(law, kids_tok[:, j]))
        slot = torch.where((slot < 0) & (u[:, j] < a), torch.full_like(slot, j), slot)
        r = _normalize(r - law, r)
    return slot, r


def _kseq_step(ver, qv, pv, kids_tok, drafting, g):
    """SpecTr's k-SEQ at one node for R rows: accepted slot (-1 none), residual."""
    r_rows, k = kids_tok.shape
    slot = torch.full((r_rows,), -1, dtype=torch.int64, device=qv.device)
    u = torch.rand(r_rows, k, device=qv.device, generator=g)
    rho = _division_factor(qv, pv, k)
    mass = torch.minimum(pv, qv / rho[:, None])
    beta = mass.sum(-1, keepdim=True)
    scale = torch.where(
        beta > 0, (1 - (1 - beta) ** k) / torch.where(beta > 0, beta, torch.ones_like(beta)), 0
    )
    for j in range(k):
        x = kids_tok[:, j]
        a = _ratio(_take(qv, x), rho * _take(pv, x))
        slot = torch.where((slot < 0) & (u[:, j] < a), torch.full_like(slot, j), slot)
    return slot, _normalize(qv - mass * scale, qv)


register_kernels(RecursiveRejection, RuleKernels(node_step=_rrs_step))
register_kernels(KSequential, RuleKernels(node_step=_kseq_step))


class TreeSampler:
    r"""A batched torch sampler for one multi-draft verifier (module docstring).

    Parameters
    ----------
    verifier : str or MultiDraftVerifier
        A name of :data:`~cactus_theory.rules.multidraft.VERIFIERS` (with ``**knobs``) or a
        configured verifier.

    Call
    ----
    ``sampler(target_probs, draft_probs, token_ids, parents, drafting="iid", generator=None)``
    returns a :class:`TreeSample`.
    """

    def __init__(self, verifier, **knobs):
        self.verifier = get_verifier(verifier, **knobs)
        #: The verifier's torch node step from the kernel registry (RRS, k-SEQ), or None (its
        #: exact node law on the host); node-wise or not as its declaration says.
        self._torch_node_step = kernels_for(self.verifier).node_step
        self._nodewise_verifier = self.verifier.spec.nodewise

    def __call__(self, target_probs, draft_probs, token_ids, parents, drafting: str = "iid", generator=None):
        if drafting not in _DRAFTING:
            raise ValueError(f"drafting: unknown value {drafting!r}; valid: {', '.join(_DRAFTING)}")
        if drafting not in self.verifier.spec.drafting:
            raise ValueError(f"drafting: verifier {self.verifier.name!r} does not verify {drafting!r} drafts")
        if target_probs.ndim != 3:
            raise ValueError(f"target_probs: expected shape (B, M, V), got {tuple(target_probs.shape)}")
        b, m, v = target_probs.shape
        if tuple(draft_probs.shape) != (b, m, v):
            raise ValueError(f"draft_probs: expected shape {(b, m, v)}, got {tuple(draft_probs.shape)}")
        token_ids = torch.as_tensor(token_ids, device=target_probs.device)
        if token_ids.ndim == 1:
            token_ids = token_ids.expand(b, m)
        if tuple(token_ids.shape) != (b, m):
            raise ValueError(f"token_ids: expected shape {(b, m)}, got {tuple(token_ids.shape)}")
        token_ids = token_ids.to(torch.int64).clone()
        token_ids[:, 0] = 0
        if m > 1 and (bool((token_ids[:, 1:] < 0).any()) or bool((token_ids[:, 1:] >= v).any())):
            raise ValueError(f"token_ids: drafted tokens must lie in [0, {v})")
        par = [int(x) for x in np.asarray(parents).reshape(-1)]
        if len(par) != m or par[0] != -1 or any(not 0 <= par[i] < i for i in range(1, m)):
            raise ValueError("parents: expected M entries, parents[0] = -1 and 0 <= parents[i] < i")
        children = [[] for _ in range(m)]
        for i in range(1, m):
            children[par[i]].append(i)
        depth = [0] * m
        for i in range(1, m):
            depth[i] = depth[par[i]] + 1
        q = _rows(target_probs)
        p = _rows(draft_probs)
        is_chain = all(len(c) <= 1 for c in children)
        self.verifier.check_structure(is_chain, all(not children[i] for i in range(1, m)), "parents")
        g = generator
        if self._nodewise_verifier:
            end, weights = self._nodewise(q, p, token_ids, children, drafting, g)
        else:
            end, weights = self._traversal(q, p, token_ids, par, children, drafting, g)
        u = torch.rand(b, 1, dtype=torch.float64, device=q.device, generator=g)
        last = inverse_cdf_sample(weights, uniforms=u)
        max_depth = max(depth)
        dep = torch.tensor(depth, device=q.device)[end]
        tokens = torch.full((b, max_depth + 1), -1, dtype=torch.int64, device=q.device)
        node = end.clone()
        par_t = torch.tensor(par, device=q.device).clamp(min=0)
        rows = torch.arange(b, device=q.device)
        for _ in range(max_depth):
            has = node > 0
            pos = (torch.tensor(depth, device=q.device)[node] - 1).clamp(min=0)
            tokens[rows[has], pos[has]] = token_ids[rows[has], node[has]]
            node = torch.where(has, par_t[node], node)
        tokens[rows, dep] = last
        return TreeSample(end, dep, tokens)

    # -- node-wise verifiers ---------------------------------------------------------------

    def _node_step(self, qv, pv, kids_tok, drafting, g):
        """Verify one node's children for R rows: accepted slot (-1 none) and residual rows."""
        r_rows, k = kids_tok.shape
        ver = self.verifier
        if self._torch_node_step is not None:
            return self._torch_node_step(ver, qv, pv, kids_tok, drafting, g)
        # any other node-wise verifier (the LP optimum): its exact node law on the host
        u = torch.rand(r_rows, 1, dtype=torch.float64, device=qv.device, generator=g)
        qn = qv.detach().cpu().double().numpy()
        pn = pv.detach().cpu().double().numpy()
        kt = kids_tok.detach().cpu().numpy()
        probs = np.zeros((r_rows, k + 1))
        res = np.zeros_like(qn)
        for i in range(r_rows):
            law = ver.node_law(qn[i] / qn[i].sum(), pn[i] / pn[i].sum(), [int(t) for t in kt[i]], drafting)
            probs[i, :k] = law.accept_probs
            probs[i, k] = law.reject_prob
            res[i] = law.residual
        cdf = torch.as_tensor(np.cumsum(probs, 1), device=qv.device)
        pick = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp(max=k)[:, 0]
        slot = torch.where(pick < k, pick, torch.full_like(pick, -1))
        return slot, torch.as_tensor(res, dtype=torch.float32, device=qv.device)

    def _nodewise(self, q, p, token_ids, children, drafting, g):
        b, m, v = q.shape
        cur = torch.zeros(b, dtype=torch.int64, device=q.device)
        done = torch.zeros(b, dtype=torch.bool, device=q.device)
        weights = torch.zeros(b, v, dtype=torch.float32, device=q.device)
        for node in range(m):
            here = (cur == node) & ~done
            if not children[node]:
                weights = torch.where(here[:, None], q[:, node], weights)
                done = done | here
                continue
            idx = torch.nonzero(here).flatten()  # rows at this node (host sync; the tree is small)
            if idx.numel() == 0:
                continue
            kids = torch.tensor(children[node], device=q.device)
            slot, residual = self._node_step(q[idx, node], p[idx, node], token_ids[idx][:, kids], drafting, g)
            moved = slot >= 0
            cur[idx[moved]] = kids[slot[moved]]
            stop = idx[~moved]
            weights[stop] = residual[~moved]
            done[stop] = True
        return cur, weights

    # -- sequence-level verifiers (traversal; block = traversal on a chain) ---------------

    def _traversal(self, q, p, token_ids, par, children, drafting, g):
        r"""Traversal verification per row (:mod:`cactus_theory.rules.multidraft._traversal`);
        block verification is its chain case (Algorithm 2's :math:`h_i = Z_i/(Z_i+1-w_i)`)."""
        b, m, v = q.shape
        dev = q.device
        big_q = q.clone()
        active = torch.ones(b, m, dtype=torch.bool, device=dev)
        updated = torch.zeros(b, m, dtype=torch.bool, device=dev)
        w = torch.zeros(b, m, dtype=torch.float32, device=dev)
        w[:, 0] = 1.0
        # tokens of removed children per node, as a mask over the vocabulary (without replacement)
        removed = torch.zeros(b, m, v, dtype=torch.bool, device=dev)
        finished = torch.zeros(b, dtype=torch.bool, device=dev)
        end = torch.zeros(b, dtype=torch.int64, device=dev)
        weights = torch.zeros(b, v, dtype=torch.float32, device=dev)
        rows = torch.arange(b, device=dev)

        def law_at(y, rsel, child):
            """Drafting law at node y (rows rsel) of its next child ``child`` [R]."""
            py = p[rsel, y]
            if drafting == "iid":
                return py
            if drafting == "top_k":
                return torch.nn.functional.one_hot(token_ids[rsel, child], v).to(py.dtype)
            return _normalize(py.masked_fill(removed[rsel, y], 0.0), py)

        for _ in range(m):
            # weights top-down for not-updated nodes, first leaf per row
            for c in range(1, m):
                y = par[c]
                sel = active[:, c] & ~updated[:, c] & ~finished
                if not bool(sel.any()):
                    continue
                rsel = rows[sel]
                law = law_at(y, rsel, torch.full((rsel.numel(),), c, device=dev))
                x = token_ids[rsel, c]
                w[rsel, c] = _ratio(w[rsel, y] * _take(big_q[rsel, y], x), _take(law, x))
            has_kid = torch.zeros(b, m, dtype=torch.bool, device=dev)
            for c in range(1, m):
                has_kid[:, par[c]] |= active[:, c]
            leaf = active & ~has_kid
            first = leaf.to(torch.int64).argmax(1)  # smallest-index active leaf: the first leaf
            u = torch.rand(b, device=dev, generator=g)
            a = torch.where(first == 0, torch.ones_like(u), w[rows, first])
            acc = (u < a) & ~finished
            end = torch.where(acc, first, end)
            weights = torch.where(acc[:, None], big_q[rows, first], weights)
            finished = finished | acc
            if bool(finished.all()):
                break
            # reject: remove the leaf, update its parent
            rej = rows[~finished]
            u_node = first[rej]
            y_node = torch.tensor(par, device=dev)[u_node]
            if drafting == "top_k":
                laws = torch.nn.functional.one_hot(token_ids[rej, u_node], v).to(q.dtype)
            else:
                laws = _stack_laws(p, removed, rej, y_node, drafting)
            wy = w[rej, y_node]
            bq = big_q[rej, y_node]
            raw = (wy[:, None] * bq - laws).clamp_min(0.0)
            z = raw.sum(-1)
            big_q[rej, y_node] = _normalize(raw, bq)
            denom = z + 1.0 - wy
            new_w = torch.where(
                denom > 0, z / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(z)
            )
            w[rej, y_node] = torch.where(y_node == 0, torch.ones_like(new_w), new_w)
            updated[rej, y_node] = True
            removed[rej, y_node, token_ids[rej, u_node]] = True
            active[rej, u_node] = False
        return end, weights


def _stack_laws(p, removed, rej, y_node, drafting):
    """Drafting laws at nodes ``y_node`` for rows ``rej`` (i.i.d. or without replacement)."""
    py = p[rej, y_node]
    if drafting == "iid":
        return py
    return _normalize(py.masked_fill(removed[rej, y_node], 0.0), py)


def make_tree_sampler(verifier, **knobs) -> TreeSampler:
    """A :class:`TreeSampler` for one verifier (a registry name with its knobs, or a verifier)."""
    return TreeSampler(verifier, **knobs)


def verify_chain(
    verifier, target_with_bonus_probs, draft_probs, draft_token_ids, *, generator=None, **knobs
) -> torch.Tensor:
    r"""Verify B drafted chains in vLLM's rejection-sampler layout with a multi-draft verifier.

    Parameters
    ----------
    verifier : str or MultiDraftVerifier
        E.g. ``"block"`` (block verification) or ``"rrs"`` (token-wise SpS on a chain).
    target_with_bonus_probs : Tensor, shape (B, gamma + 1, V)
        q at the gamma draft positions and at the bonus position.
    draft_probs : Tensor, shape (B, gamma, V)
    draft_token_ids : Tensor, shape (B, gamma)
    generator : torch.Generator, optional

    Returns
    -------
    Tensor, shape (B, gamma + 1), int64
        The accepted drafts, then the correction token (or the bonus token, drawn here from
        q at position gamma), then -1: the layout of :class:`~cactus_theory.samplers.RuleSampler`.
    """
    if target_with_bonus_probs.ndim != 3:
        raise ValueError(
            f"target_with_bonus_probs: expected shape (B, gamma + 1, V), got {tuple(target_with_bonus_probs.shape)}"
        )
    b, g1, v = target_with_bonus_probs.shape
    gamma = g1 - 1
    if tuple(draft_probs.shape) != (b, gamma, v):
        raise ValueError(f"draft_probs: expected shape {(b, gamma, v)}, got {tuple(draft_probs.shape)}")
    if tuple(draft_token_ids.shape) != (b, gamma):
        raise ValueError(f"draft_token_ids: expected shape {(b, gamma)}, got {tuple(draft_token_ids.shape)}")
    p = torch.cat([draft_probs.to(torch.float32), torch.ones(b, 1, v, device=draft_probs.device)], 1)
    tokens = torch.cat(
        [torch.zeros(b, 1, dtype=torch.int64, device=draft_token_ids.device), draft_token_ids], 1
    )
    parents = np.arange(-1, gamma)
    return TreeSampler(verifier, **knobs)(
        target_with_bonus_probs, p, tokens, parents, "iid", generator
    ).tokens
