r"""Speed goals, measured in one run as ratios with a pass/fail column (``cactus-theory benchmark``).

The lab beside the library: this folder of a checkout, not the installed package, which never
imports it (``cactus-theory benchmark`` is :mod:`benchmarks.command`, plugged in by
``pyproject.toml``'s entry-point group ``cactus_theory.commands``; ``python benchmarks/run.py`` is
the same command). :mod:`benchmarks.length` is the length check (``scripts/length_check.py``).

The machines are shared and noisy, so nothing here is a timed test: each timing is the median
of ``repeats`` calls (the samplers' rows: of ``SAMPLER_PAIRS * repeats`` calls alternated with
the read pass, as those calls take milliseconds and one burst of another process's load would
otherwise cover most of them), and every goal is a ratio of two timings taken side by side in
the same process (or an absolute budget where the goal states one). Before anything is timed,
the fast result is checked against the slow reference path on the same inputs; a goal whose
check fails is reported as failed whatever its speed.

Goals (q verifier ``target_probs``, p drafter ``draft_probs``, V = 151,936 unless stated;
q and p are softmaxes of correlated Gumbel logits, delta = 0.1):

* ``spike``: Theorem 2's root by safeguarded Newton vs the 64-step bisection, over all V
  entries of q (checked: same root up to the problem's conditioning, both feasible).
* ``exact_emitted_ms``: the exact (KL-root) emitted distribution :math:`h_{alg}`
  (Theorem 3) per position, under 50 ms.
* ``exact_vs_taylor``: exact over Taylor emitted distribution, at most 2.
* ``row blocks``: Theorem 3's mixture of a batch of short rows (2,111 x 24 rows of V = 129,
  the real-data calibration's grid) by ``emitted_distribution``, in blocks of rows
  (:func:`cactus_theory._threads.in_row_blocks`), against one call of the same formula over
  the whole batch: at least 1.5 (checked: the same floats).
* ``taylor_vs_floor``: the Taylor emitted distribution over a plain numpy implementation of the
  same O(V log V) formula (:func:`floor_emitted_taylor`: sort once, prefix sums,
  searchsorted), at most 1.5 (checked: same distribution to 1e-12).
* ``analysis_rows_per_s``: :func:`cactus_theory.analysis.one_step.analyze` on a batch of rows,
  numpy vs torch (CPU, and CUDA where available), rows per second (checked: same numbers).
* ``sampler/<rule>/<shape>``: each rule's batched torch sampler over one read pass of p and q
  (``q.sum(-1), p.sum(-1)``), float32, on ``threads`` threads (:data:`SAMPLER_THREADS`): the
  fused sampler (``fused=True``, the compiled kernels of :mod:`cactus_theory.samplers._fused`)
  at most 3, the eager one (the default) reported (checked, for each: the accept
  probabilities of the path forward takes, on the un-normalized rows, and the recovery
  weights the inverse CDF draws from, normalized, equal the full plan's to 1e-5, the
  acceptance's difference scaled by its condition number 1 + q_n/p_n). The fused kernels
  are compiled before the timing.
* ``sampler_exact_vs_taylor``: exact-root Cactus sampler over the Taylor one, at most 1.5,
  fused and eager.
* the samplers' entry validation alone over the read pass (reported): the row sums and the
  row minimum (the clamp-and-flag negative check) of q's k positions and p; eager torch reads
  the [B, k, V] inputs twice (``sum``, ``amin``), the fused kernel once.
* ``scale``: the chunked analysis (:func:`cactus_theory.analysis.analyze`, default memory
  bound) of ``cactus-exact`` at V = 1,000 (n = 1,000, 10,000, 100,000) and V = 151,936
  (n = 64, 1,024), each in a fresh process: peak extra memory over the input (flat in n,
  under 1 GB) and rows per second within 1.2x of the in-memory path at the smallest n
  (checked: the same numbers as 1,000-row blocks analysed one by one). The full sizes with
  ``scale=True`` (``cactus-theory benchmark --scale``).
* ``frontier_vs_cvxpy``: cvxpy over :func:`cactus_theory.solvers._frontier.frontier` at
  V = 1,000, at least 100 (checked: same acceptance to 1e-5); ``frontier_ms``: V = 151,936
  under 50 ms (checked: acceptance and divergence equal the 64-step bisection's,
  ``solve_mentored(..., method="bisect")``, to 1e-9 relative, divergence within delta).
* ``multidraft_ms``: at V = 151,936 the optimal k-draft acceptance
  :func:`cactus_theory.solvers._multidraft.min_cut_acceptance` (k = 4) and the budgeted
  optimum :func:`cactus_theory.solvers._multidraft.multidraft_frontier` (k = 4, KL,
  budget 0.01), reported (checked: at k = 1 the min-cut value is sum min(p, q) and the
  multi-draft frontier equals the single-draft frontier, both to 1e-9 relative; the k = 4
  target within delta).

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 2 and 3, Corollary 5.
"""
