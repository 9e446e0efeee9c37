r"""The sampler rows: the entry validation, each rule's eager and fused sampler over one read
pass of p and q, the data-dependent shortcuts' other branch, exact-root over Taylor
(``samplers`` section).

Each row is checked before it is timed: the accept probabilities of the path forward takes (on
the un-normalized rows) and the recovery weights the inverse CDF draws from, both computed by
the sampler itself (``accept_probs_at_drafts``, ``recovery_weights``), against the rule's full
plan on normalized copies (the reference).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ._goals import SAMPLER_PAIRS, SAMPLER_THREADS, goal
from ._load import LoadWindows

#: The other branch of each data-dependent shortcut of the fused CPU samplers, timed as a
#: reported row: (rule, knobs, scale of q's rows, label). Fuzzy SD at scale 1 has its bounds
#: turned off (the exact divergence on every row); at 1.01 its sums are too far apart for the
#: one-pass bounds, which then take the normalized rows (a second pass).
_FALLBACKS = (
    ("fuzzy", {}, 1.0, "exact JS on every row"),
    ("fuzzy", {}, 1.01, "rows summing to 1.01"),
    ("tas", {}, 1.01, "rows summing to 1.01"),
    ("cascade-token-v3", {"alpha": 0.999}, 1.0, "alpha 0.999"),
)


@dataclass(frozen=True)
class _Rows:
    """One shape's inputs: q [B, k+1, V], p [B, k, V], the drafted ids, one position per row,
    the row sums, the normalized copies and the acceptance's condition number 1 + q_n / p_n."""

    B: int
    k: int
    V: int
    q: object
    p: object
    ids: object
    bonus: object
    pos: object
    sq: object
    sp: object
    qq: object
    pp: object
    cond: object
    read: object  # the read pass every sampler row is timed against: q.sum(-1), p.sum(-1)

    @property
    def shape(self) -> str:
        return f"[{self.B},{self.k},{self.V}]"


def _rows(gen, B, k, V) -> _Rows:
    import torch

    logits = torch.randn(B, k + 1, V, generator=gen) * 3
    q = torch.softmax(logits, -1)
    p = torch.softmax(0.8 * logits[:, :k] + 0.6 * torch.randn(B, k, V, generator=gen) * 3, -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=gen).reshape(B, k)
    pos = torch.randint(0, k, (B,), generator=gen)
    sq, sp = q[:, :k].sum(-1), p.sum(-1)
    qq, pp = q[:, :k] / sq[..., None], p / sp[..., None]
    # the acceptance ratio h_n / p_n amplifies an error in h_n by q_n / p_n
    cond = 1.0 + torch.gather(qq, -1, ids[..., None])[..., 0] / torch.gather(pp, -1, ids[..., None])[..., 0]
    bonus = torch.zeros(B, 1, dtype=torch.int64)
    read = lambda: (q.sum(-1), p.sum(-1))  # noqa: E731
    return _Rows(B, k, V, q, p, ids, bonus, pos, sq, sp, qq, pp, cond, read)


@dataclass
class _Timed:
    """One row timed in interleaved rounds: ``fn`` alternated with its baseline ``ref`` (the
    read pass, or the Taylor sampler) in :meth:`time_round`, the row built by ``make(t, t_ref,
    load)`` from the medians over every round (:meth:`row`)."""

    fn: Callable
    ref: Callable
    make: Callable
    threads: int
    t_fn: list = field(default_factory=list)
    t_ref: list = field(default_factory=list)
    ref_rounds: list = field(default_factory=list)
    windows: LoadWindows | None = None

    def time_round(self, pairs: int) -> None:
        """``pairs`` alternated calls of the baseline and ``fn``, in one load window."""
        if self.windows is None:
            self.windows = LoadWindows(self.threads)
        t_ref = []
        self.windows.start()
        for _ in range(pairs):
            t0 = time.perf_counter()
            self.ref()
            t1 = time.perf_counter()
            self.fn()
            t2 = time.perf_counter()
            t_ref.append(t1 - t0)
            self.t_fn.append(t2 - t1)
        self.windows.stop()
        self.t_ref += t_ref
        self.ref_rounds.append(float(np.median(t_ref)))

    def row(self):
        load = self.windows.record(self.ref_rounds)
        return self.make(float(np.median(self.t_fn)), float(np.median(self.t_ref)), load)


def _validation_rows(x: _Rows, threads: int) -> list:
    """The entry validation alone (row sums and row minimum of q's k positions and p: the
    clamp-and-flag check every call runs), eager and fused, reported: the floor under every
    rule (:class:`_Timed` items)."""
    import torch

    from cactus_theory.samplers._entry import validate_sampler_entry

    q, p, ids, bonus, k = x.q, x.p, x.ids, x.bonus, x.k
    val = lambda: validate_sampler_entry(q, bonus, p, ids, return_sums=True)  # noqa: E731
    sums = val()[4]
    ok_sums = bool(torch.equal(sums[0], q[:, :k].sum(-1)) and torch.equal(sums[1], p.sum(-1)))
    out = [
        _Timed(
            val,
            x.read,
            lambda t_val, t_r, load: goal(
                f"sampler entry validation eager {x.shape} / read pass",
                f"{t_val * 1e3:.2f} ms vs read {t_r * 1e3:.2f} ms",
                t_val / t_r,
                "reported",
                True,
                ok_sums,
                f"its row sums equal q[:, :k].sum(-1), p.sum(-1) bit for bit: {ok_sums}",
                load,
            ),
            threads,
        )
    ]
    # the fused kernel (one read per tensor; float32 sums of 256-entry blocks, then their
    # float64 sum): its sums against the float64 sums, relative, in float32 eps, beside torch's
    # own float32 sum's error on the same rows. Within 2 eps: what a pairwise sum achieves; a
    # skipped block errs by a share of the row's mass.
    val_f = lambda: validate_sampler_entry(q, bonus, p, ids, return_sums=True, fused=True)  # noqa: E731
    sums_f = val_f()[4]
    eps32 = torch.finfo(torch.float32).eps

    def rel_eps(s, rows):
        ref = rows.double().sum(-1)
        return float(((s.double() - ref).abs() / ref).max()) / eps32

    err = max(rel_eps(sums_f[0], q[:, :k]), rel_eps(sums_f[1], p))
    err_torch = max(rel_eps(q[:, :k].sum(-1), q[:, :k]), rel_eps(p.sum(-1), p))
    out.append(
        _Timed(
            val_f,
            x.read,
            lambda t_val, t_r, load: goal(
                f"sampler entry validation fused {x.shape} / read pass",
                f"{t_val * 1e3:.2f} ms vs read {t_r * 1e3:.2f} ms",
                t_val / t_r,
                "reported",
                True,
                err <= 2.0,
                f"its row sums vs the float64 sums: {err:.2f} float32 eps relative (<= 2; torch's "
                f"sum: {err_torch:.2f})",
                load,
            ),
            threads,
        )
    )
    return out


def _accept_diff(s, x: _Rows, q):
    """The sampler's own accept path on q's un-normalized rows (``q`` is ``x.q`` or a multiple)
    against the full plan on the normalized copies: max |difference| / (1 + q_n / p_n), and the
    accept path's state (the recovery reads it)."""
    k = x.k
    sq = q[:, :k].sum(-1)
    a_fast, state = s.accept_probs_at_drafts(q[:, :k], x.p, x.ids, sq, x.sp)
    a_ref = s.rule.plan(q[:, :k] / sq[..., None], x.pp).accept_probs_at(x.ids)
    return float(((a_fast - a_ref).abs() / x.cond).max()), state


def _recovery_diff(s, x: _Rows, state) -> float:
    """The recovery weights the inverse CDF draws from (normalized), at one position per row, and
    the block sums the fused draw reads, against the full plan's recovery distribution."""
    import torch

    from cactus_theory.samplers._blocked import BlockWeights
    from cactus_theory.samplers._fused import block_sums

    w = s.recovery_weights(x.q, x.p, x.ids, x.pos, state, x.sq, x.sp)[0]
    bs_diff = 0.0
    if isinstance(w, BlockWeights):  # the fused residual: its formula everywhere
        bs, w = w.block_sums, w.dense()
        # and the block sums the draw reads, against the sums of those weights
        bs_diff = float(((bs - block_sums(w)).abs() / w.sum(-1, keepdim=True)).max())
    rows = torch.arange(x.B)
    r_ref = s.rule.plan(x.qq[rows, x.pos], x.pp[rows, x.pos]).recovery_at(x.ids[rows, x.pos])
    return max(float((w / w.sum(-1, keepdim=True) - r_ref).abs().max()), bs_diff)


def _rule_row(name: str, fused: bool, x: _Rows, threads: int) -> _Timed:
    """One rule's sampler (fused: the goal, at most 3 read passes; eager: reported), checked
    and called once (the fused kernels compile), to be timed in rounds."""
    from cactus_theory.samplers import make_sampler

    s = make_sampler(name, fused=fused)
    # float32: the same formulas on values that differ by the rounding of the normalization
    # (folded into scale factors on the fast paths) and by summation order (pairwise: ~log2(V)
    # eps32 < 3e-6 of a row's mass); the acceptance's difference is divided by 1 + q_n / p_n.
    # A wrong path (or a flipped 0/1 decision) differs by far more than the 1e-5 allowed.
    diff, state = _accept_diff(s, x, x.q)
    diff_r = _recovery_diff(s, x, state)
    # the fused kernels compile at their first call, before the timed ones (its time is
    # reported: a warm inductor cache on disk shortens it); the read pass is timed alternately
    # with the sampler (same window of a shared, noisy machine)
    q, bonus, p, ids = x.q, x.bonus, x.p, x.ids
    t0 = time.perf_counter()
    s(q, bonus, p, ids)
    first = time.perf_counter() - t0

    def make(t, t_read, load):
        return goal(
            f"sampler {name} {'fused' if fused else 'eager'} {x.shape} / read pass",
            f"{t * 1e3:.1f} ms vs read {t_read * 1e3:.2f} ms"
            + (f" (first call {first:.1f} s)" if fused else ""),
            t / t_read,
            "<= 3" if fused else "reported",
            t / t_read <= 3 or not fused,
            max(diff, diff_r) <= 1e-5,
            f"accept path vs plan: max diff {diff:.1e}; recovery weights "
            f"(and block sums) vs plan: max diff {diff_r:.1e}",
            load,
        )

    return _Timed(lambda: s(q, bonus, p, ids), x.read, make, threads)


def _fallback_rows(x: _Rows, timed, threads: int) -> list:
    """The data-dependent shortcuts' other branch, reported beside the goal rows (fused): fuzzy
    SD's exact divergence on every row (its bounds disabled: the worst case, every row
    undecided), TAS on rows summing to 1.01 (vLLM's entropy then takes its exact second pass),
    the token cascade with alpha = 0.999 (its set spans most blocks: the full masked sum)."""
    from cactus_theory.samplers import make_sampler

    out = []
    for name, knobs, scale, what in _FALLBACKS:
        if (name, True) not in timed:
            continue
        s = make_sampler(name, fused=True, **knobs)
        if name == "fuzzy" and scale == 1.0:
            s.kernels = replace(s.kernels, accept_decided_from_rows=None)
        qs, bonus, p, ids = x.q * scale, x.bonus, x.p, x.ids
        diff, _ = _accept_diff(s, x, qs)
        s(qs, bonus, p, ids)

        def make(t, t_read, load, name=name, what=what, diff=diff):
            return goal(
                f"sampler {name} fused, {what} {x.shape} / read pass",
                f"{t * 1e3:.1f} ms vs read {t_read * 1e3:.2f} ms",
                t / t_read,
                "reported",
                True,
                diff <= 1e-5,
                f"accept path vs plan: max diff {diff:.1e}",
                load,
            )

        call = lambda s=s, qs=qs: s(qs, bonus, p, ids)  # noqa: E731
        out.append(_Timed(call, x.read, make, threads))
    return out


def _exact_vs_taylor_rows(x: _Rows, timed, threads: int) -> list:
    """The exact-root sampler over the Taylor one, fused and eager, timed alternately (same
    window of the shared machine; the Taylor sampler is the baseline): at most 1.5."""
    from cactus_theory.samplers import make_sampler

    # the exact rule under either name (cactus-exact's default divergence is the KL)
    exact = next((n for n in ("cactus-exact-kl", "cactus-exact") if (n, True) in timed), None)
    q, bonus, p, ids = x.q, x.bonus, x.p, x.ids
    out = []
    for fused in (True, False):
        if exact is None or ("cactus-taylor", fused) not in timed:
            continue
        se = make_sampler(exact, fused=fused)
        st = make_sampler("cactus-taylor", fused=fused)
        se(q, bonus, p, ids), st(q, bonus, p, ids)

        def make(te, tt, load, fused=fused):
            return goal(
                f"sampler exact-kl / taylor {'fused' if fused else 'eager'} {x.shape}",
                f"{te * 1e3:.1f} ms vs {tt * 1e3:.1f} ms",
                te / tt,
                "<= 1.5",
                te / tt <= 1.5,
                True,
                "same run",
                load,
            )

        out.append(
            _Timed(lambda se=se: se(q, bonus, p, ids), lambda st=st: st(q, bonus, p, ids), make, threads)
        )
    return out


def bench_samplers(rules, shapes, repeats, threads=SAMPLER_THREADS, rounds=SAMPLER_PAIRS) -> list:
    """Every sampler row at each (B, k, V) of ``shapes`` for ``rules`` (fused and eager), on
    ``threads`` intra-op torch threads (restored afterwards).

    Each row is checked and called once first (the fused kernels compile); then ``rounds``
    interleaved rounds each time every row of every shape in turn, ``repeats`` calls alternated
    with its baseline, so that a burst of another process's load falls on every row and its
    baseline alike. A row's ratio is the median of its calls over the median of its baseline's
    (``rounds * repeats`` pairs); its load record covers its rounds, and its baseline's spread
    over the rounds flags an inconsistent measurement (:mod:`._load`).
    """
    import torch

    out = []
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        items = []
        for B, k, V in shapes:
            x = _rows(gen, B, k, V)
            shape_items = _validation_rows(x, threads)
            timed = {}
            for name, fused in [(n, f) for n in rules for f in (True, False)]:
                shape_items.append(_rule_row(name, fused, x, threads))
                timed[name, fused] = True
            shape_items += _fallback_rows(x, timed, threads)
            shape_items += _exact_vs_taylor_rows(x, timed, threads)
            items += shape_items
        for _ in range(rounds):
            for item in items:
                item.time_round(repeats)
        out = [item.row() for item in items]
    finally:
        torch.set_num_threads(before)
    return out
