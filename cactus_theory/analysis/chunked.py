r"""The row-wise analyses in chunks of rows, with a memory bound the caller sets.

Every analysis of :mod:`cactus_theory.api` and :func:`cactus_theory.analysis.analyze` is
row-wise: each position's acceptance, emitted distribution :math:`h_{alg}` (Theorem 3),
divergences, frontier :math:`F(\epsilon)` (Theorem 1) or calibrated delta depends on its own
(q, p) only. The functions here run that per-row computation on consecutive chunks of rows of
a :class:`~cactus_theory.rows.RowSource` (in-memory arrays, a file, a folder of shards) and
join the per-row results in order; the corpus statistics (means, maxima, quantiles, a global
delta) are then taken over all the per-row values, exactly as the in-memory call takes them.
So the numbers are the in-memory numbers bit for bit (tested), and the memory is that of one
chunk's temporaries plus the per-row results (8 bytes per row and statistic; plus the
(N, V) arrays the caller asks for, e.g. ``emitted``).

Statistics that need all rows are exact, not sampled: a mean or a quantile is taken over the
joined per-row values (:func:`numpy.mean`, :func:`numpy.quantile` with ``method="higher"``,
the in-memory calls' own). A corpus maximum that sets a grid (the frontier's saturation
budget, the global delta's saturation delta) takes a first pass over the rows. The global
delta (:func:`global_delta`) evaluates the corpus statistic at each scan point in one pass
and then at each refinement step (at most
:data:`~cactus_theory.analysis.calibration.REFINE_STEPS`) in one pass each: the in-memory
algorithm's own evaluations, in the same order.

The chunk size: ``chunk_rows`` rows, or the most rows whose temporaries fit ``max_memory``
(default :data:`DEFAULT_MAX_MEMORY`), from the measured count of float64 (rows, V) arrays each
analysis holds at once (:data:`WORK_ARRAYS`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, V the
vocabulary size, N rows, delta the per-draft budget, eps a target on the emitted divergence.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1-3, Corollary 5.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["RowChunk", "RowSource", "ArrayRows", "as_rows", "DEFAULT_MAX_MEMORY", "WORK_ARRAYS",
           "parse_memory", "rows_per_chunk", "wants_chunks", "is_dask", "LocalRunner", "analyze",
           "emitted_distribution", "analyze_rules", "optimal_frontier", "calibrate_delta",
           "global_delta"]

#: Default bound on an analysis' working memory beyond its input and its returned arrays.
DEFAULT_MAX_MEMORY = 256 * 2**20

#: float64 arrays of V values each analysis holds at once per row of a chunk: the tracemalloc
#: peak beyond the input (numpy, V = 1,000, chunks of 40-1,000 rows; ``cactus-exact``) over
#: ``8 V`` bytes a row, rounded up: ``analyze`` 31.5, ``analyze_rules`` 38.6 (one rule),
#: ``optimal_frontier`` 26.8, ``calibrate_delta`` and ``global_delta`` 692 (their scan
#: evaluates 24 deltas a row at once). Rows of V >= 1,024 hold fewer (about 12 for
#: ``analyze`` at V = 151,936: one row at a time).
WORK_ARRAYS = {"analyze": 34, "emitted": 34, "rules": 44, "frontier": 32, "calibrate": 768}

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_memory(value, name: str = "max_memory") -> int:
    """Bytes from ``256MB``, ``"1.5 GiB"``, ``"512k"`` or a number of bytes (> 0).

    Raises
    ------
    ValueError
        Naming ``name``: an unknown unit, an unreadable string, or a value <= 0.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a size such as '256MB' or a number of bytes, got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        nbytes = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{name}: expected a size such as '256MB', '1.5GiB' or a number of bytes, "
                             f"got {value!r}")
        nbytes = float(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"{name}: expected a size such as '256MB' or a number of bytes, got {value!r}")
    if not math.isfinite(nbytes) or nbytes <= 0:
        raise ValueError(f"{name}: must be a positive size, got {value!r}")
    return int(nbytes)


def _chunk_count(chunk_rows) -> int | None:
    if chunk_rows is None:
        return None
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise ValueError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows: must be >= 1, got {chunk_rows}")
    return int(chunk_rows)


def rows_per_chunk(kind: str, *, chunk_rows=None, max_memory=None):
    """The chunk rule: a function ``V -> rows`` (``chunk_rows`` as given, or the most rows
    whose :data:`WORK_ARRAYS` temporaries of V float64 each fit ``max_memory``; at least 1).

    Raises ValueError naming ``chunk_rows`` (<= 0, not an integer) or ``max_memory``
    (unknown size string, <= 0), or both given.
    """
    rows = _chunk_count(chunk_rows)
    if rows is not None and max_memory is not None:
        raise ValueError("max_memory: give chunk_rows or max_memory, not both")
    budget = DEFAULT_MAX_MEMORY if max_memory is None else parse_memory(max_memory)
    per_value = 8 * WORK_ARRAYS[kind]

    def rule(V: int) -> int:
        if rows is not None:
            return rows
        return max(1, budget // (per_value * max(1, int(V))))

    return rule


def wants_chunks(target_probs, kind: str, *, chunk_rows=None, max_memory=None) -> bool:
    """True where the call must take the chunked path: a row source or a path, or arrays of
    more rows than one chunk. Validates ``chunk_rows`` and ``max_memory`` either way."""
    rule = rows_per_chunk(kind, chunk_rows=chunk_rows, max_memory=max_memory)
    if isinstance(target_probs, RowSource) or isinstance(target_probs, (str,)) or hasattr(
            target_probs, "__fspath__"):
        return True
    if is_dask(target_probs):
        return True
    shape = getattr(target_probs, "shape", None)
    if shape is None or len(shape) < 2:
        return False
    n = math.prod(shape[:-1])
    return n > rule(shape[-1])


def is_dask(x) -> bool:
    return type(x).__module__.split(".")[0] == "dask"


class LocalRunner:
    """Runs a per-chunk kernel over a source in this process, chunk by chunk, in order.

    Parameters
    ----------
    source : RowSource
    rows_for : callable
        V -> rows per chunk (:func:`rows_per_chunk`).
    progress : bool
        A tqdm progress bar over chunks (on stderr).
    """

    def __init__(self, source: RowSource, rows_for, progress: bool = False, desc: str = "rows"):
        self.source, self.rows_for, self.progress, self.desc = source, rows_for, progress, desc

    @property
    def n_rows(self) -> int:
        return self.source.n_rows

    def map(self, kernel, *args) -> list:
        """``[kernel(chunk, *args) for chunk in source]``, in row order."""
        chunks = self.source.chunks(self.rows_for)
        if self.progress:
            from tqdm.auto import tqdm

            total = sum(-(-n // self.rows_for(V)) for n, V in self.source.widths())
            chunks = tqdm(chunks, total=total, desc=self.desc, unit="chunk", leave=False)
        out = []
        for c in chunks:
            out.append(_with_file(kernel, c, *args))
            del c                   # a chunk is a view: it would keep its rows' file alive
        return out


def _with_file(fn, chunk, *args):
    """Run ``fn`` on a chunk; a ValueError from a file's rows names the file."""
    try:
        return fn(chunk, *args)
    except ValueError as exc:
        if chunk.where and not str(exc).startswith(chunk.where):
            raise ValueError(f"{chunk.where}: {exc}") from None
        raise


def _cat(parts, xp=None):
    """Concatenate per-chunk arrays along the rows (numpy or torch)."""
    if not parts:
        return np.zeros((0,))
    if type(parts[0]).__module__.split(".")[0] == "torch":
        import torch

        return torch.cat(parts, dim=0)
    return np.concatenate(parts, axis=0)


def _runner(source, kind, chunk_rows, max_memory, progress, runner):
    if runner is not None:
        return runner
    return LocalRunner(source, rows_per_chunk(kind, chunk_rows=chunk_rows, max_memory=max_memory),
                       progress, desc=kind)


# --------------------------------------------------------------------------- row sources

@dataclass(frozen=True)
class RowChunk:
    """Consecutive rows ``start .. start + n - 1`` of a source.

    Attributes
    ----------
    start : int
        Index of the first row in the whole source.
    target_probs, draft_probs : ndarray or tensor, shape (n, V)
        q and p (not yet validated: the analysis validates them as it would whole arrays).
    raw_target_probs, raw_draft_probs : ndarray, tensor or None, shape (n, V)
        Raw (temperature-1) distributions where the source has them.
    where : str
        The file the rows come from (empty for arrays), for error messages.
    """

    start: int
    target_probs: object
    draft_probs: object
    raw_target_probs: object = None
    raw_draft_probs: object = None
    where: str = ""

    @property
    def n_rows(self) -> int:
        return int(self.target_probs.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])


class RowSource:
    """Rows of (q, p) read chunk by chunk (subclasses: :class:`ArrayRows`, :class:`FileRows`,
    :class:`ShardRows`).

    Attributes
    ----------
    n_rows : int
        Rows in the whole source (read from array shapes and file headers, not from the rows).
    """

    #: True where the rows are in memory already (the analysis may hand them over whole).
    in_memory = False

    @property
    def n_rows(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def widths(self) -> list[tuple[int, int]]:
        """``(rows, V)`` of each part (one for arrays and files, one per shard for a folder)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def chunks(self, rows_for_width) -> Iterator[RowChunk]:
        """Yield the rows in order, in chunks of ``rows_for_width(V)`` rows (V of the part)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def parts(self) -> list["RowSource"]:
        """Independent parts (the shards of a folder; the source itself otherwise), for
        workers that each read their own."""
        return [self]

    def __len__(self) -> int:
        return self.n_rows


def _flat_rows(x):
    """``x`` (..., V) as (rows, V) without a copy where possible (numpy or torch)."""
    if hasattr(x, "reshape") and hasattr(x, "shape") and len(x.shape) >= 1:
        return x.reshape(-1, x.shape[-1])
    arr = np.asarray(x)
    return arr.reshape(-1, arr.shape[-1])


class ArrayRows(RowSource):
    """In-memory rows: arrays of shape (..., V), batch axes flattened in C order.

    Parameters
    ----------
    target_probs, draft_probs : array_like or tensor, shape (..., V)
    raw_target_probs, raw_draft_probs : optional, same shape
    """

    in_memory = True

    def __init__(self, target_probs, draft_probs, raw_target_probs=None, raw_draft_probs=None):
        arrays = [target_probs, draft_probs, raw_target_probs, raw_draft_probs]
        arrays = [None if a is None else (a if hasattr(a, "shape") else np.asarray(a)) for a in arrays]
        names = ("target_probs", "draft_probs", "raw_target_probs", "raw_draft_probs")
        for name, a in zip(names, arrays):
            if a is not None and (len(a.shape) == 0 or a.shape[-1] == 0):
                raise ValueError(f"{name}: expected an array of shape (..., V) with V >= 1, "
                                 f"got shape {tuple(a.shape)}")
        for name, a in zip(names[1:], arrays[1:]):
            if a is not None and tuple(a.shape) != tuple(arrays[0].shape):
                raise ValueError(f"{name}: shape {tuple(a.shape)} does not match target_probs' "
                                 f"shape {tuple(arrays[0].shape)}")
        self.arrays = tuple(arrays)
        self.batch_shape = tuple(arrays[0].shape[:-1])
        self._flat = tuple(None if a is None else _flat_rows(a) for a in arrays)

    @property
    def n_rows(self) -> int:
        return int(self._flat[0].shape[0])

    def widths(self):
        return [(self.n_rows, int(self._flat[0].shape[-1]))]

    def chunks(self, rows_for_width):
        n, V = self.widths()[0]
        step = rows_for_width(V)
        for a in range(0, n, step):
            b = min(n, a + step)
            q, p, rq, rp = (None if x is None else x[a:b] for x in self._flat)
            yield RowChunk(a, q, p, rq, rp)



def as_rows(target_probs, draft_probs=None, raw_target_probs=None, raw_draft_probs=None) -> RowSource:
    """A :class:`RowSource` as is, or :class:`ArrayRows` of arrays (files and folders:
    :func:`cactus_theory.rows.as_row_source`)."""
    if isinstance(target_probs, RowSource):
        if draft_probs is not None or raw_target_probs is not None or raw_draft_probs is not None:
            raise ValueError("draft_probs: give either a row source alone, or target_probs and "
                             "draft_probs arrays")
        return target_probs
    if isinstance(target_probs, str) or hasattr(target_probs, "__fspath__"):
        raise ValueError("target_probs: a path; read it with cactus_theory.rows.as_row_source(path)")
    if draft_probs is None:
        raise ValueError("draft_probs: required with a target_probs array")
    return ArrayRows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)


# --------------------------------------------------------------------------- analyze


def _analyze_kernel(chunk, rule, divergences, per_token):
    from .one_step import analyze_block

    res = analyze_block(rule, chunk.target_probs, chunk.draft_probs,
                        raw_target_probs=chunk.raw_target_probs,
                        raw_draft_probs=chunk.raw_draft_probs, divergences=divergences)
    if per_token:
        return res
    return type(res)(res.rule, None, res.acceptance, None, res.divergences)


def analyze(rule, target_probs, draft_probs=None, *, raw_target_probs=None, raw_draft_probs=None,
            divergences=None, per_token=None, chunk_rows=None, max_memory=None, progress=False,
            runner=None):
    r"""Acceptance, emitted distribution and its divergences from q, chunk by chunk.

    :func:`cactus_theory.analysis.analyze` on every chunk of rows:
    :math:`\alpha = \sum_n p_n a_n` and :math:`D(h_{alg}\|q)` per row, with
    :math:`h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n) r^{(n)}_j` (Theorem 3).

    Parameters
    ----------
    rule : str or Rule
    target_probs : array_like, tensor, RowSource or path
        q, shape (..., V), or a row source (then ``draft_probs`` is None).
    draft_probs : array_like or tensor, optional
        p, with array q.
    divergences : sequence of str, optional
        Divergences of :math:`h_{alg}` from q (default KL, reverse KL, TV).
    per_token : bool, optional
        Keep the (N, V) arrays ``accept_probs`` and ``emitted`` (default: True for arrays,
        False for a row source). False returns them as None and holds only per-row values.
    chunk_rows, max_memory : optional
        The chunk size, or the bound on the working memory (``"256MB"``, bytes; default
        :data:`DEFAULT_MAX_MEMORY`).
    progress : bool
        A progress bar over chunks.

    Returns
    -------
    OneStepResult
        The rows' results joined in order (batch shape of array input kept), bit for bit those
        of the in-memory call.

    Symbols: q verifier, p drafter, n drafted token. Source: Hao & Mou, ICLR 2026
    (arXiv 2604.04987), Theorem 3.
    """
    from ..rules import get_rule
    from .one_step import DEFAULT_DIVERGENCES, OneStepResult

    rule = get_rule(rule)
    divergences = tuple(DEFAULT_DIVERGENCES if divergences is None else divergences)
    source = as_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    if per_token is None:
        per_token = source.in_memory
    run = _runner(source, "analyze", chunk_rows, max_memory, progress, runner)
    parts = run.map(_analyze_kernel, rule, divergences, bool(per_token))
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)

    def join(xs, trailing=()):
        out = _cat(list(xs))
        return out.reshape(tuple(batch) + tuple(trailing))

    if not parts:
        raise ValueError("target_probs: no rows")
    V = int(parts[0].emitted.shape[-1]) if per_token else 0
    acc = join(r.acceptance for r in parts)
    divs = {d: join(r.divergences[d] for r in parts) for d in divergences}
    a = join((r.accept_probs for r in parts), (V,)) if per_token else None
    h = join((r.emitted for r in parts), (V,)) if per_token else None
    return OneStepResult(repr(rule), a, acc, h, divs)


def _emitted_kernel(chunk, rule, method):
    from .one_step import emitted_distribution as _emitted

    return _emitted(rule, chunk.target_probs, chunk.draft_probs,
                    raw_target_probs=chunk.raw_target_probs, raw_draft_probs=chunk.raw_draft_probs,
                    method=method)


def emitted_distribution(rule, target_probs, draft_probs=None, *, raw_target_probs=None,
                         raw_draft_probs=None, method="fast", chunk_rows=None, max_memory=None,
                         progress=False, runner=None):
    r""":math:`h_{alg}` (Theorem 3) of every row, chunk by chunk (shape batch + (V,)).

    See :func:`cactus_theory.analysis.emitted_distribution`; the rows' distributions are
    joined in order (the returned array is N x V; the working memory is one chunk's).

    Symbols: q verifier, p drafter. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3.
    """
    from ..rules import get_rule

    rule = get_rule(rule)
    source = as_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    run = _runner(source, "emitted", chunk_rows, max_memory, progress, runner)
    parts = run.map(_emitted_kernel, rule, method)
    if not parts:
        raise ValueError("target_probs: no rows")
    out = _cat(parts)
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    return out.reshape(tuple(batch) + (out.shape[-1],))


# --------------------------------------------------------------------------- rule table


def _rules_kernel(chunk, names, per_rule):
    """Per rule, the per-row columns of :func:`cactus_theory.api.analyze_rules` (n,) each."""
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from ..rules import get_rule
    from .frontier import gap_to_frontier
    from .one_step import emitted_distribution as _emitted, make_plan, per_draft_divergence

    # validated as the in-memory call validates them: once for the per-draft columns, again
    # for the table's (each renormalization may move the last bit)
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = as_prob_pair(q, p)
    drafted = p > 0
    out = {}
    for name in names:
        rule = get_rule(name, **per_rule[name])
        plan = make_plan(rule, q2, p2)
        h = _emitted(plan)
        acc = np.sum(plan.draft_probs * np.clip(plan.accept_probs(), 0, 1), axis=-1)
        cols = {"acceptance": acc}
        for d in ("kl", "reverse_kl", "tv"):
            cols[d] = get_divergence(d).unchecked(h, plan.target_probs)
        for d in ("kl", "tv"):
            _, cols[f"gap_{d}"] = gap_to_frontier(plan.target_probs, plan.draft_probs, acc, cols[d], d)
        plan = make_plan(rule, q, p)
        try:
            per = per_draft_divergence(plan, divergence="kl")
        except ValueError:            # a decision rule has no per-draft target
            cols["per_sum"] = cols["per_max"] = None
        else:
            w = np.where(drafted, per, 0.0)
            cols["per_sum"] = np.sum(np.where(drafted, p * w, 0.0), axis=-1)
            cols["per_max"] = np.max(w, axis=-1)
        out[name] = cols
    return out


def analyze_rules(target_probs, draft_probs=None, rules=None, *, delta=None, knobs=None,
                  chunk_rows=None, max_memory=None, progress=False, runner=None):
    r"""Rules side by side, chunk by chunk: :func:`cactus_theory.api.analyze_rules` on a
    row source (means over all rows of the per-row values; maxima over all rows).

    Returns
    -------
    RuleTable

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget. Source: Hao &
    Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from .._validation import as_budget, choice
    from ..results import RuleTable
    from ..rules import RULES, get_rule

    names = list(RULES) if rules is None else [choice(r, RULES.all_names(), "rules")
                                               for r in ([rules] if isinstance(rules, str) else rules)]
    if delta is not None:
        delta = as_budget(delta, "delta")
    if knobs is not None and not isinstance(knobs, dict):
        raise ValueError(f"knobs: expected a dict of rule name -> dict of knobs, got {type(knobs).__name__}")
    per_rule = {}
    for name in names:
        k = {}
        if delta is not None and any(kn.name == "delta" for kn in RULES[name].knobs):
            k["delta"] = delta
        k.update((knobs or {}).get(name, {}))
        per_rule[name] = k
    source = as_rows(target_probs, draft_probs)
    run = _runner(source, "rules", chunk_rows, max_memory, progress, runner)
    parts = run.map(_rules_kernel, names, per_rule)
    if not parts:
        raise ValueError("target_probs: no rows")
    table = []
    for name in names:
        col = {k: ([r[name][k] for r in parts]) for k in parts[0][name]}
        row = {"rule": name, "knobs": dict(get_rule(name, **per_rule[name]).knobs)}
        m = {k: float(np.mean(np.concatenate(v))) for k, v in col.items()
             if k not in ("per_sum", "per_max")}
        if col["per_sum"][0] is None:
            per_mean = per_max = None
        else:
            per_mean = float(np.mean(np.concatenate(col["per_sum"])))
            per_max = float(np.max(np.concatenate(col["per_max"])))
        table.append({"rule": name, "knobs": row["knobs"], "acceptance": m["acceptance"],
                      "per_draft_kl_mean": per_mean, "per_draft_kl_max": per_max,
                      "emitted_kl": m["kl"], "emitted_reverse_kl": m["reverse_kl"],
                      "emitted_tv": m["tv"], "gap_kl": m["gap_kl"], "gap_tv": m["gap_tv"]})
    return RuleTable(table=tuple(table), delta=delta, n_positions=int(run.n_rows))


# --------------------------------------------------------------------------- frontier


def _saturation_kernel(chunk, divergence):
    from .._validation import as_prob_pair
    from ..solvers.frontier import saturation_budget

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(saturation_budget(q, p, divergence)).reshape(-1)


def _frontier_kernel(chunk, grid, divergence):
    from .._validation import as_prob_pair
    from ..solvers.frontier import frontier

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = frontier(q, p, grid, divergence)
    acc = np.asarray(res.acceptance, dtype=np.float64).reshape(-1, grid.size)
    div = np.asarray(res.divergence, dtype=np.float64).reshape(-1, grid.size)
    return acc, div, np.sum(np.minimum(q, p), axis=-1)


def optimal_frontier(target_probs, draft_probs=None, *, eps=None, divergence="kl", chunk_rows=None,
                     max_memory=None, progress=False, runner=None):
    r""":math:`F(\epsilon)` (Theorem 1) averaged over the rows of a source, chunk by chunk.

    :func:`cactus_theory.api.optimal_frontier` on a row source: with ``eps`` None a first
    pass finds the largest saturation budget (the grid's top), a second computes the frontier
    of every row on the grid; means over all rows of the per-row values.

    Returns
    -------
    FrontierResult

    Symbols: q verifier, p drafter, eps target on the emitted divergence. Source: Hao & Mou,
    ICLR 2026 (arXiv 2604.04987), Theorem 1.
    """
    from .._validation import as_budget_array
    from ..divergences import get_divergence
    from ..results import FrontierResult
    from ..api import FRONTIER_POINTS

    d = get_divergence(divergence)
    if eps is not None:
        grid = np.atleast_1d(as_budget_array(eps, "eps")).astype(np.float64)
        if grid.ndim != 1 or grid.size == 0:
            raise ValueError(f"eps: expected a scalar or a non-empty 1-D array, got shape {grid.shape}")
    source = as_rows(target_probs, draft_probs)
    run = _runner(source, "frontier", chunk_rows, max_memory, progress, runner)
    sats = run.map(_saturation_kernel, d.name)
    if not sats:
        raise ValueError("target_probs: no rows")
    sat = float(np.max(np.concatenate(sats)))
    if eps is None:
        grid = sat * np.linspace(0.0, 1.0, FRONTIER_POINTS) ** 2
    parts = run.map(_frontier_kernel, grid, d.name)
    flat = np.concatenate([a for a, _, _ in parts])
    div = np.concatenate([v for _, v, _ in parts])
    sps = float(np.mean(np.concatenate([s for _, _, s in parts])))
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    per = flat.reshape(tuple(batch) + (grid.size,))
    if per.ndim == 1 + 1 and len(batch) == 0:
        per = per.reshape(grid.size)
    return FrontierResult(divergence=d.name, eps=grid, acceptance=flat.mean(axis=0),
                          emitted_divergence=div.mean(axis=0), sps_acceptance=sps,
                          saturation_eps=sat, n_positions=flat.shape[0],
                          per_position_acceptance=per)


# --------------------------------------------------------------------------- calibration


def _calibrate_kernel(chunk, eps, base, divergence):
    from .._validation import as_prob_pair
    from .calibration import calibrate_delta as _calibrate

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = _calibrate(q, p, eps, base=base, divergence=divergence)
    return (np.reshape(res.delta, -1), np.reshape(res.divergence, -1), np.reshape(res.acceptance, -1),
            np.reshape(res.saturated, -1))


def calibrate_delta(target_probs, draft_probs=None, eps=0.0, *, rule="cactus-taylor", divergence="kl",
                    chunk_rows=None, max_memory=None, progress=False, runner=None):
    r"""Per position, the delta whose emitted divergence meets eps, chunk by chunk.

    .. math:: \delta^*(q, p) = \sup\{\delta : D(h_{alg}(\delta')\|q) \le \epsilon
              \ \ \forall \delta' \le \delta\}

    :func:`cactus_theory.api.calibrate_delta` on a row source (each row's calibration is its
    own: the refinement stops lane by lane).

    Returns
    -------
    CalibrationResult
        Arrays of shape (N,) (the batch shape of array input).

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    from .._validation import as_budget, choice
    from ..api import CALIBRATION_RULES
    from ..divergences import get_divergence
    from ..results import CalibrationResult

    rule = choice(rule, CALIBRATION_RULES, "rule")
    eps = as_budget(eps, "eps")
    d = get_divergence(divergence)
    source = as_rows(target_probs, draft_probs)
    run = _runner(source, "calibrate", chunk_rows, max_memory, progress, runner)
    parts = run.map(_calibrate_kernel, eps, rule.split("-")[1], d.name)
    if not parts:
        raise ValueError("target_probs: no rows")
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    delta, div, acc, sat = (np.concatenate([r[i] for r in parts]).reshape(batch) for i in range(4))
    if len(batch) == 0:
        return CalibrationResult(rule=rule, divergence=d.name, eps=eps, delta=float(delta),
                                 emitted_divergence=float(div), acceptance=float(acc),
                                 saturated=bool(sat), n_positions=1)
    return CalibrationResult(rule=rule, divergence=d.name, eps=eps, delta=delta,
                             emitted_divergence=div, acceptance=acc, saturated=sat,
                             n_positions=int(run.n_rows))


def _saturation_delta_kernel(chunk, base, divergence):
    from .._validation import as_prob_pair
    from .calibration import saturation_delta

    q, _ = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(saturation_delta(q, base, divergence)).reshape(-1)


def _grid_kernel(chunk, grid, base, divergence, measure):
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from .calibration import _curve

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    D, _ = _curve(q2, p2, grid, base, divergence, get_divergence(measure))
    return D


def _rows_kernel(chunk, delta, base, divergence, measure):
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from .calibration import _curve_rows

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    D, a, _ = _curve_rows(q2, p2, np.full(q2.shape[0], float(delta)), base, divergence,
                          get_divergence(measure))
    return D, a


def global_delta(target_probs, draft_probs=None, eps=0.0, *, statistic="mean", base="taylor",
                 divergence="kl", measure=None, chunk_rows=None, max_memory=None, progress=False,
                 runner=None):
    r"""One delta for a corpus read chunk by chunk: the first crossing of ``statistic`` (the
    mean, or a quantile) over all positions of :math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)`
    with eps, exactly as :func:`cactus_theory.analysis.calibration.global_delta`.

    Passes over the rows: one for the saturation delta (the grid's top), one for the grid
    (:data:`~cactus_theory.analysis.calibration.GRID_POINTS` deltas per row), one per
    refinement step (at most :data:`~cactus_theory.analysis.calibration.REFINE_STEPS`, plus
    two for the bracket's ends), one for the result. Each statistic is taken over all N
    per-row values (exact, ``numpy.quantile(..., method="higher")``).

    Returns
    -------
    GlobalDelta

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    from .._validation import as_budget
    from ..divergences import get_divergence
    from .calibration import GlobalDelta, _check, _grids, _illinois, _stat

    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    eps = as_budget(eps, "eps")
    if statistic != "mean":
        try:
            lv = float(statistic)
        except (TypeError, ValueError):
            raise ValueError(f"statistic: 'mean' or a quantile level in (0, 1], got {statistic!r}") from None
        if not 0 < lv <= 1:
            raise ValueError(f"statistic: quantile level must lie in (0, 1], got {statistic!r}")
        statistic = lv
    source = as_rows(target_probs, draft_probs)
    run = _runner(source, "calibrate", chunk_rows, max_memory, progress, runner)
    sats = run.map(_saturation_delta_kernel, base, d.name)
    if not sats:
        raise ValueError("target_probs: no rows")
    sat = float(np.max(np.concatenate(sats)))

    def at(delta):
        parts = run.map(_rows_kernel, delta, base, d.name, m.name)
        return np.concatenate([D for D, _ in parts]), np.concatenate([a for _, a in parts])

    if eps == 0:
        lo = 0.0
    else:
        grid = _grids(np.array([sat]))[0]
        D = np.concatenate(run.map(_grid_kernel, grid, base, d.name, m.name))
        vals = np.array([_stat(D[:, j], statistic) for j in range(grid.size)])
        over = np.flatnonzero(vals > eps)
        if over.size == 0:
            lo = hi = grid[-1]
        else:
            k = over[0]
            lo, hi = (grid[k - 1] if k > 0 else 0.0), grid[k]
        if hi > lo:
            def excess(x):
                return np.array([_stat(at(float(x[0]))[0], statistic) - eps])

            lo_a, _ = _illinois(excess, np.array([lo]), np.array([hi]))
            lo = float(lo_a[0])
    D, a = at(lo)
    return GlobalDelta(float(lo), statistic, _stat(D, statistic), D, a)
