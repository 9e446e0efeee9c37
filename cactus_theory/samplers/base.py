r"""A batched torch sampler for any registered rule, with vLLM 0.7.3's rejection-sampler interface.

:class:`RuleSampler` is a drop-in for vLLM 0.7.3's V0 ``RejectionSampler`` /
``TypicalAcceptanceSampler`` (``vllm/model_executor/layers/rejection_sampler.py``,
``typical_acceptance_sampler.py``, ``spec_decode_base_sampler.py``): same ``forward`` signature,
same ``[B, k+1]`` output layout, same three counters. What it verifies with is any rule of
:data:`cactus_theory.rules.RULES`: it calls the rule's array-agnostic ``plan`` on float32
torch tensors, so the formulas are the ones the exact analysis uses
(:mod:`cactus_theory.analysis.one_step`), conventions included
(:mod:`cactus_theory.conventions`).

Per position i < k of row b, with q = verifier (``target_with_bonus_probs[:, :k]``),
p = drafter (``draft_probs``), n = drafted token (``draft_token_ids``):

.. math::
    \text{accepted}_{b,i} = [\,u_{b,i} < a_n\,], \quad u \sim U[0, 1), \qquad
    N_b = \max\{j : \text{accepted}_{b,0..j-1}\ \text{all true}\}

and the row emits the N accepted drafts, then one extra token: a sample of the recovery
distribution :math:`r^{(n)}` at position N if N < k, else the pre-sampled bonus token
(``bonus_token_ids``, drawn by the caller from q at position k), then ``-1``. The emitted token
at one position is distributed as :math:`h_{alg}` (paper, Theorem 3).

Deterministic rules (``RuleSpec.deterministic``: TAS, top-k, fuzzy SD) accept iff
:math:`a_n > 1/2` (their :math:`a_n` is 0 or 1) and draw no acceptance uniforms, as vLLM's
``TypicalAcceptanceSampler`` draws none.

Memory, passes and synchronization: the entry validation reads q (its k draft positions) and p
once for the float32 row sums and once for the row minimum (the negative check; a NaN or inf
makes the sum non-finite, an all-zero row sums to 0), and ``forward`` reuses those sums.
The sampler's steps are assembled once, when it is made (:mod:`._program`): the cheapest
accept path the rule's declaration and kernels allow (a spike's gamma once at the [B, k]
drafted tokens, reused by the recovery; an elementwise target at the drafted tokens' values;
a registered kernel on the un-normalized rows with their sums, in the compiled core on CPU
tensors after its bounds where it has some; else ``Rule.accept_probs_at`` on float32
row-normalized copies, the path derived from the rule alone, which also runs where a kernel
is missing, declined or its guard fails, and for any rule given raw distributions). The recovery works on ``[B, V]`` rows
only (the first rejected position of each row): un-normalized weights from
``Rule.recovery_weights_at`` or the rule's kernel (Cactus: one scaled copy of q with the
spike written in place, the row sums folded into :math:`c_n`), drawn by inverse CDF
(:func:`inverse_cdf_sample`: one uniform per row, a two-level search over float32 sums of
256-token blocks and float64 running sums). Nothing in ``forward`` reads a device value
on the host (no ``.item()``, ``nonzero``, boolean masking or ``torch.multinomial``) unless
``strict_mode`` is on (the bounds path above selects rows with ``nonzero``, on CPU tensors
only); seeded rows add host-to-device index copies only.

``fused=True`` (:mod:`.fused`): the same steps, with the tensor part of a call
(:func:`._core.verify_core`: row checks, accept path, accepted prefix, recovery weights and
their block sums, inverse CDF, output) compiled by ``torch.compile`` per configured rule: the row
checks read each tensor once (sum and negative check in one loop, the sum in two levels),
a rule's own row pass joins that read where its formula allows, and the recovery rows are
indexed inside the formulas (no copies). The uniforms are drawn before the compiled part in
the order above, so the stream is the eager one.

Random streams: per call, the k acceptance uniforms of each row (float32, ``[B, k]``; none for
deterministic rules), then one float64 uniform per row for the recovery draw (rows with a
generator in ``seeded_seqs`` draw theirs from it, in that order; the others share one
``torch.rand`` call on the default generator). Seeded outputs therefore differ from versions
that drew the recovery by an exponential race (V exponentials per row; :func:`exponential_race`,
kept public) and from vLLM's streams; the law is the same.

Bad values (the choice: clamp-and-flag on the device, always on): every public call first runs
:func:`validate_sampler_entry`. A token id outside ``[0, V)`` (negative included, draft or
bonus) or a probability row that is NaN/inf, negative or all zero marks its row invalid; the
ids are clamped into range so no kernel indexes out of bounds, and the row's whole output is
``-1`` (nothing emitted), counted in ``num_invalid_rows`` and flagged in
``last_invalid_rows`` (both on the device). So an out-of-range id, or a token drawn from a
NaN or all-zero row, is never emitted, and no synchronization is added (two reductions over
the probability tensors). ``strict_mode=True`` raises ValueError naming the argument instead.
A numpy array or a non-Generator in ``seeded_seqs`` raises TypeError naming the argument.

.. warning::
    Conventions differ between engines (engines.md 1.4, 1.9):

    * p_n = 0 at a drafted token: here (the core's convention 2) :math:`a_n = 1` if
      :math:`h_n > 0`, else 0. vLLM V0 computes q/0 = inf -> accept, 0/0 = NaN -> reject (the
      same decisions); vLLM V1 *rejects* whenever p_n = 0.
    * Empty recovery residual: here :math:`r = \mathrm{normalize}(h)`; vLLM V0 clamps the
      residual at ``finfo(float32).tiny`` (uniform over the vocabulary when empty); V1 and the
      official Cactus code return token 0.
    * Acceptance test: ``u < a`` with float32 uniforms (vLLM V0); V1 uses ``u <= a`` with
      float64 uniforms. The two differ on a set of measure zero.
    * The recovery is sampled only at the first rejected position of each row (``[B, V]``),
      not at all k positions as vLLM V0 does (``[B, k, V]``), and by inverse CDF rather
      than vLLM's exponential race; the emitted tokens have the same law, but the random
      streams (hence seeded outputs) are not vLLM's.
"""

from __future__ import annotations

import numbers

import torch

from ..rules import Rule, get_rule
from . import _fused as fused_kernels
from ._core import CoreInputs, core_accept, verify_core
from ._entry import validate_sampler_entry
from ._kernels import RuleKernels, kernels_for
from ._program import as_float32, build_program, compiles_whole
from .draws import _row_uniforms, _uniforms

__all__ = ["RuleSampler"]


class RuleSampler(torch.nn.Module):
    r"""Batched speculative-sampling verifier for one configured rule (vLLM 0.7.3 V0 interface).

    Parameters
    ----------
    rule : str or Rule
        A registry name (with ``**knobs``) or a configured rule (:func:`~cactus_theory.rules.get_rule`).
    strict_mode : bool
        As vLLM's: validate values (ids in range, probabilities finite and non-negative, rows
        not all zero) before sampling, at the cost of host-device synchronizations. Shapes,
        dtypes and devices are always checked (metadata only, no synchronization). Violations
        raise ValueError naming the argument (vLLM asserts).
    fused : bool
        Compile the tensor part of each call (:func:`._core.verify_core`: row checks and sums,
        accept path, recovery weights and their block sums, draw, output) with
        ``torch.compile`` (:mod:`.fused`): fewer reads of the [B, k, V] inputs and fewer
        kernels, two-level row sums. The same formulas, random stream and law;
        the first call compiles (seconds), and if compiling fails the kernels warn once and
        run eagerly. On a CPU whose cores other processes hold, the compiled kernels' OpenMP
        regions slow down sharply (:mod:`.fused`). Default False: eager torch, nothing
        compiled.
    **knobs
        The rule's knobs when ``rule`` is a name.

    Attributes
    ----------
    num_accepted_tokens : Tensor (0-dim int64, on the device) or None
        vLLM V0 semantics: the number of **every** True of the non-causal ``[B, k]`` accept
        matrix, i.e. positions after the first rejection of a row count when their own test
        passes (``spec_decode_base_sampler.py::_create_output``; vLLM's ``metrics.py`` calls it a
        draft/target alignment measure). It is a per-position (marginal) count, not the
        accepted-prefix length that sets the speed.
    num_accepted_prefix_tokens : Tensor (0-dim int64) or None
        Not in vLLM V0: the prefix-causal count :math:`\sum_b N_b` (what vLLM V1 calls
        ``num_accepted_tokens``, and the numerator of the paper's AL).
    num_emitted_tokens : Tensor (0-dim int64) or None
        Non-``-1`` output entries: :math:`\sum_b (N_b + 1)` (accepted drafts plus one
        recovered-or-bonus token each).
    num_draft_tokens : int
        ``B * k`` summed over calls (a Python int, as in vLLM).
    last_accepted : Tensor (B, k) bool or None
        The non-causal accept matrix of the latest call.

    Notes
    -----
    vLLM creates the device counters in ``init_gpu_tensors`` / ``init_tensors`` and crashes
    when ``forward`` runs before; here they are created on the input's device at the first
    call if needed.

    References
    ----------
    vLLM 0.7.3 ``vllm/model_executor/layers/spec_decode_base_sampler.py``,
    ``rejection_sampler.py``, ``typical_acceptance_sampler.py``; engines.md sections 1.1-1.7.
    """

    probs_dtype = torch.float32
    token_id_dtype = torch.int64
    _num_bonus_tokens = 1

    def __init__(self, rule, *, strict_mode: bool = False, fused: bool = False, **knobs):
        super().__init__()
        self.rule: Rule = get_rule(rule, **knobs)
        self._strict_mode = bool(strict_mode)
        if not isinstance(fused, bool):
            raise ValueError(f"fused: expected True or False, got {fused!r}")
        self.fused = fused
        #: The rule's torch speed paths (:func:`._kernels.kernels_for`); assigning another
        #: :class:`._kernels.RuleKernels` assembles the sampler's programs again.
        self.kernels = kernels_for(self.rule)
        self.num_accepted_tokens: torch.Tensor | None = None
        self.num_accepted_prefix_tokens: torch.Tensor | None = None
        self.num_emitted_tokens: torch.Tensor | None = None
        self.num_draft_tokens = 0
        self.last_accepted: torch.Tensor | None = None
        self.num_invalid_rows: torch.Tensor | None = None
        self.last_invalid_rows: torch.Tensor | None = None

    @property
    def kernels(self) -> RuleKernels:
        """The rule's kernels the sampler's programs were assembled from."""
        return self._kernels

    @kernels.setter
    def kernels(self, kernels: RuleKernels) -> None:
        # Everything a call runs is chosen here, once: the eager program, and the compiled
        # core's when ``fused`` and the rule's acceptance reads no plan (the others' rows stay
        # eager, with the fused entry checks). A call only picks between the two by its inputs
        # (raw distributions given: eager).
        self._kernels = kernels
        self._eager = build_program(self.rule, kernels, traced=False)
        whole = self.fused and compiles_whole(self.rule, kernels)
        self._traced = build_program(self.rule, kernels, traced=True) if whole else None
        self._cores: dict = {}  # (V, k) -> the compiled core
        self._strict = self._check_values if self._strict_mode else _no_check
        self._check_entry = self._check_entry_strict if self._strict_mode else _no_check

    # -- counters (vLLM names) ------------------------------------------------------------
    def init_gpu_tensors(self, device) -> None:
        """Create the device counters on ``device`` (an int is a CUDA ordinal, as in vLLM)."""
        if isinstance(device, int):
            device = f"cuda:{device}"
        self.init_tensors(device)

    def init_tensors(self, device, device_type: str | None = None) -> None:
        """Create the counters on ``device`` (``device_type`` prefixes an int ordinal)."""
        if isinstance(device, int):
            device = f"{device_type or 'cuda'}:{device}"
        zero = lambda: torch.tensor(0, dtype=torch.long, device=device)  # noqa: E731
        self.num_accepted_tokens = zero()
        self.num_accepted_prefix_tokens = zero()
        self.num_emitted_tokens = zero()

    # -- validation ---------------------------------------------------------------------------
    def _check_shapes(self, target, bonus, draft_probs, draft_ids, raw_target, raw_draft):
        if target.dim() != 3:
            raise ValueError(
                f"target_with_bonus_probs: expected [B, k+1, V], got shape {tuple(target.shape)}"
            )
        b, k1, v = target.shape
        k = k1 - 1
        if k < 1:
            raise ValueError("target_with_bonus_probs: needs k+1 >= 2 positions (k >= 1 drafts)")
        if draft_probs is not None and tuple(draft_probs.shape) != (b, k, v):
            raise ValueError(f"draft_probs: expected shape {(b, k, v)}, got {tuple(draft_probs.shape)}")
        if tuple(draft_ids.shape) != (b, k):
            raise ValueError(f"draft_token_ids: expected shape {(b, k)}, got {tuple(draft_ids.shape)}")
        if tuple(bonus.shape) != (b, 1):
            raise ValueError(f"bonus_token_ids: expected shape {(b, 1)}, got {tuple(bonus.shape)}")
        for name, t, floating in (
            ("target_with_bonus_probs", target, True),
            ("draft_probs", draft_probs, True),
            ("draft_token_ids", draft_ids, False),
            ("bonus_token_ids", bonus, False),
            ("raw_target_probs", raw_target, True),
            ("raw_draft_probs", raw_draft, True),
        ):
            if t is None:
                continue
            if floating and not t.is_floating_point():
                raise ValueError(f"{name}: must be a floating tensor, got {t.dtype}")
            if not floating and t.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{name}: must be int64 (or int32), got {t.dtype}")
            if t.device != target.device:
                raise ValueError(f"{name}: on {t.device}, target_with_bonus_probs on {target.device}")
        if raw_target is not None and (
            raw_target.dim() != 3
            or raw_target.shape[0] != b
            or raw_target.shape[1] not in (k, k + 1)
            or raw_target.shape[2] != v
        ):
            raise ValueError(
                f"raw_target_probs: expected [B, k or k+1, V] = [{b}, {k}|{k + 1}, {v}], "
                f"got {tuple(raw_target.shape)}"
            )
        if raw_draft is not None and tuple(raw_draft.shape) != (b, k, v):
            raise ValueError(f"raw_draft_probs: expected shape {(b, k, v)}, got {tuple(raw_draft.shape)}")
        return b, k, v

    @staticmethod
    def _check_values(v, **tensors):
        """Strict mode: value checks (they synchronize with the host)."""
        for name, t in tensors.items():
            if t is None:
                continue
            if t.is_floating_point():
                tf = t.float()
                if not bool(torch.isfinite(tf).all()):
                    raise ValueError(f"{name}: contains NaN or infinite values")
                if bool((tf < 0).any()):
                    raise ValueError(f"{name}: contains negative probabilities")
                if t.numel() and bool((tf.sum(-1) <= 0).any()):
                    raise ValueError(f"{name}: a row sums to 0")
            elif t.numel() and bool(((t < 0) | (t >= v)).any()):
                raise ValueError(f"{name}: token id outside [0, {v})")

    # -- the sampler ---------------------------------------------------------------------------
    def forward(
        self,
        target_with_bonus_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        draft_probs: torch.Tensor,
        draft_token_ids: torch.Tensor,
        seeded_seqs: dict[int, torch.Generator] | None = None,
        *,
        raw_target_probs: torch.Tensor | None = None,
        raw_draft_probs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        r"""Verify k drafted tokens per row and return the emitted tokens.

        Parameters
        ----------
        target_with_bonus_probs : Tensor, shape (B, k+1, V)
            Processed verifier distributions q at the k draft positions plus the bonus position
            (only the first k enter; the bonus comes pre-sampled). float32; bf16/fp16 are cast
            to float32. Rows are renormalized (convention 1), not validated.
        bonus_token_ids : Tensor, shape (B, 1), int64
            Token sampled by the caller from q at position k; emitted iff all k are accepted.
        draft_probs : Tensor, shape (B, k, V)
            Drafter distributions p (read even by rules that ignore p, for the shape).
        draft_token_ids : Tensor, shape (B, k), int64
            The drafted tokens n, sampled from ``draft_probs``.
        seeded_seqs : dict of int to torch.Generator, optional
            Row index -> generator, as vLLM's: a seeded row draws its k acceptance uniforms and
            then its recovery uniform (one float64, :func:`inverse_cdf_sample`) from its own
            generator, so its output depends only on its inputs and its generator's state. Generators must live on the
            inputs' device (as vLLM's); keys outside ``[0, B)`` raise ValueError.
        raw_target_probs, raw_draft_probs : Tensor, optional
            Raw (temperature-1) distributions for rules that decide on them
            (``RuleSpec.needs_raw``), shapes (B, k or k+1, V) and (B, k, V); default: the
            processed ones.

        Returns
        -------
        Tensor, shape (B, k+1), int64
            Per row: the accepted prefix of drafts, one recovered-or-bonus token, then -1.

        Raises
        ------
        ValueError
            Wrong shapes, dtypes or devices (always); bad values (strict mode only; otherwise
            the row is flagged and emits only -1, see :func:`validate_sampler_entry`).
        TypeError
            A numpy array (or other non-tensor) for a tensor argument; ``seeded_seqs`` not a
            dict of ``torch.Generator``.
        """
        # the compiled core checks the rows itself, in the same read as its accept path
        compiled = self._traced is not None and raw_target_probs is None and raw_draft_probs is None
        args = (target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, seeded_seqs)
        raw = dict(raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs)
        draft_ids, bonus, invalid, probs, sums = validate_sampler_entry(
            *args, **raw, return_sums=True, fused=self.fused, row_checks=not compiled
        )
        self._check_entry(*args, **raw)  # strict mode: raise on the original values
        if invalid is not None and invalid.shape[:1] != draft_ids.shape[:1]:
            invalid = None  # (shapes the checks below reject)
        try:
            return self._verify(
                probs[0], bonus, probs[1], draft_ids, seeded_seqs, *probs[2:], sums=sums, invalid=invalid
            )
        except (ValueError, ArithmeticError, RuntimeWarning):  # (warnings raised as errors)
            if invalid is None:
                raise
            # a rule that validates on the host met an invalid row: retry on sanitized rows
            # (a valid batch raises again, unchanged); the sanitizing pass checks every row
            _, _, invalid, probs = validate_sampler_entry(*args, **raw, sanitize=True)
            return self._verify(
                probs[0], bonus, probs[1], draft_ids, seeded_seqs, *probs[2:], invalid=invalid
            )

    def _check_entry_strict(self, target, bonus, draft_probs, draft_ids, seeded_seqs, **raw):
        """Strict mode's checks of a public call's original arguments (they name them)."""
        self._check_shapes(
            target, bonus, draft_probs, draft_ids, raw["raw_target_probs"], raw["raw_draft_probs"]
        )
        self._check_values(
            target.shape[-1],
            target_with_bonus_probs=target,
            draft_probs=draft_probs,
            **raw,
            draft_token_ids=draft_ids,
            bonus_token_ids=bonus,
        )

    def _program(self, raw_target=None, raw_draft=None):
        """The program a call runs: the compiled core's, unless raw distributions are given or
        the sampler has none (eager)."""
        if self._traced is not None and raw_target is None and raw_draft is None:
            return self._traced
        return self._eager

    def accept_probs_at_drafts(self, target, draft_probs, draft_token_ids, target_sums, draft_sums):
        r""":math:`a_n` at the drafted tokens by the path a call takes, and the recovery's state.

        The compiled core's program when ``fused`` (a rule's bounds first and the exact test
        on the rows they leave undecided), else the eager one; no raw distributions.

        Parameters
        ----------
        target : Tensor, shape (B, k, V)
            Verifier rows at the k draft positions, un-normalized.
        draft_probs : Tensor, shape (B, k, V)
            Drafter rows, un-normalized.
        draft_token_ids : Tensor, shape (B, k), int64
        target_sums, draft_sums : Tensor, shape (B, k)
            Their positive float32 row sums.

        Returns
        -------
        (Tensor, AcceptState)
            The acceptance [B, k] (float32) and what :meth:`recovery_weights` needs.
        """
        program = self._program()
        return core_accept(program, target, draft_probs, draft_token_ids, None, None, target_sums, draft_sums)

    def recovery_weights(
        self, target, draft_probs, draft_token_ids, positions, state, target_sums, draft_sums
    ):
        """Recovery weights at ``positions`` ([B] int64) of each row, by the path a call takes:
        ``(weights, fallback, block sums, fallback block sums)``; ``state`` from
        :meth:`accept_probs_at_drafts`. ``target`` [B, k(+1), V]."""
        return self._program().recover(
            target, draft_probs, draft_token_ids, positions, state, target_sums, draft_sums
        )

    def compiled_core(self, vocab_size: int, k: int):
        """The compiled core (:func:`.fused.compiled_for` of :func:`._core.verify_core`) this
        sampler's fused calls with vocabulary ``vocab_size`` and ``k`` drafts run."""
        core = self._cores.get((vocab_size, k))  # (the call's shape)
        if core is None:
            core = self._cores[vocab_size, k] = fused_kernels.compiled_for(
                self.rule, verify_core, vocab_size, k
            )
        return core

    def _verify(
        self,
        target,
        bonus,
        draft_probs,
        draft_ids,
        seeded_seqs,
        raw_target,
        raw_draft,
        num_drafts: torch.Tensor | None = None,
        counts=None,
        sums=None,
        invalid: torch.Tensor | None = None,
    ):
        """The call after the entry validation. ``invalid`` (bool [B], from
        :func:`validate_sampler_entry`, or per request in the ragged layout): rows whose
        output is replaced by -1 and taken out of the counters, counted in
        ``num_invalid_rows`` and flagged in ``last_invalid_rows`` (with the rows the compiled
        core flags itself); None: no masking."""
        b, k, v = self._check_shapes(target, bonus, draft_probs, draft_ids, raw_target, raw_draft)
        device = target.device
        if self.num_accepted_tokens is None:
            self.init_tensors(device)
        self._strict(
            v,
            target_with_bonus_probs=target,
            draft_probs=draft_probs,
            raw_target_probs=raw_target,
            raw_draft_probs=raw_draft,
            draft_token_ids=draft_ids,
            bonus_token_ids=bonus,
        )
        _check_seeds(seeded_seqs, b)
        if b == 0:
            self.last_accepted = torch.zeros((0, k), dtype=torch.bool, device=device)
            return torch.empty((0, k + 1), dtype=self.token_id_dtype, device=device)
        program = self._program(raw_target, raw_draft)
        u_acc, u_rec = _draws(program, seeded_seqs, b, k, device, counts)
        sq, sp = (None, None) if sums is None else sums[:2]
        if program.traced:
            # Other float dtypes are cast to float32 before the compiled core (the eager
            # core's values): one kernel per rule and shape for every input dtype. Cast
            # inside, bf16 and fp16 rows each compiled a kernel of their own (20-90 s each).
            inputs = CoreInputs(
                as_float32(target), bonus.to(torch.int64), as_float32(draft_probs), draft_ids.to(torch.int64),
                None, None, u_acc(), u_rec(), num_drafts, sq, sp, invalid,
            )  # fmt: skip
            result = self.compiled_core(v, k)(program, inputs)
        else:
            inputs = CoreInputs(
                target, bonus.to(torch.int64), draft_probs, draft_ids.to(torch.int64),
                raw_target, raw_draft, u_acc, u_rec, num_drafts, sq, sp, invalid,
            )  # fmt: skip
            result = verify_core(program, inputs)
        return self._count(result, b * k if counts is None else int(sum(counts)), device)

    def _count(self, result, drafts: int, device):
        """Add a call's counts to the counters (in place: the same tensors, without
        nn.Module's ``__setattr__``) and return its output."""
        out, accepted, counts_, invalid = result
        self.last_accepted = accepted
        self.num_accepted_tokens.add_(counts_[0])
        self.num_accepted_prefix_tokens.add_(counts_[1])
        self.num_emitted_tokens.add_(counts_[2])
        self.num_draft_tokens += drafts
        if invalid is not None:
            if self.num_invalid_rows is None:
                self.num_invalid_rows = torch.zeros((), dtype=torch.long, device=device)
            self.num_invalid_rows.add_(counts_[3])
            self.last_invalid_rows = invalid
        return out

    def extra_repr(self) -> str:
        return f"rule={self.rule!r}, strict_mode={self._strict_mode}, fused={self.fused}"


def _no_check(*args, **kwargs) -> None:
    """Outside strict mode: no value checks (the entry validation flags bad rows)."""


def _check_seeds(seeded_seqs, b: int) -> None:
    if seeded_seqs:
        bad = [
            i
            for i in seeded_seqs
            if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < b
        ]
        if bad:
            raise ValueError(f"seeded_seqs: row indices {bad} outside [0, {b})")


def _draws(program, seeded_seqs, b: int, k: int, device, counts):
    """The call's random numbers, in stream order, as callables: the k acceptance uniforms of
    each row (none for deterministic rules), then one recovery uniform per row (float64;
    Apple's MPS has no float64: float32 there). The eager core calls them where it uses them,
    so that a rule raising on the host before any draw leaves the seeded generators untouched
    for ``forward``'s retry; the compiled core gets them drawn, in the same order."""
    if program.draws_acceptance:

        def u_acc():
            return _uniforms(seeded_seqs, b, k, device, counts)

    else:

        def u_acc():
            return None

    def u_rec():
        gens = [seeded_seqs.get(i) for i in range(b)] if seeded_seqs else None
        return _row_uniforms(b, device, gens, torch.float32 if device.type == "mps" else torch.float64)

    return u_acc, u_rec
