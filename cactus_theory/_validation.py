"""Input validation for the numpy (float64) core: one place, ValueError naming the argument."""

from __future__ import annotations

import math

import numpy as np

from .conventions import normalization_tolerance


def as_probs(x, name: str, *, normalize: bool = True) -> np.ndarray:
    """Validate a probability array ``[..., V]`` and return it as float64 (rows renormalized).

    Raises
    ------
    ValueError
        If ``x`` is empty, has no vocabulary axis, holds NaN, inf or negative entries, or a row
        whose sum differs from 1 by more than :func:`normalization_tolerance`.
    """
    dtype = getattr(x, "dtype", np.float64)
    try:
        arr = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a numeric array ({exc})") from None
    if arr.ndim == 0:
        raise ValueError(f"{name}: expected an array of shape (..., V), got a scalar")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name}: the vocabulary axis (last) is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite probabilities")
    if np.any(arr < 0):
        raise ValueError(f"{name}: contains negative probabilities (min {arr.min():.3g})")
    sums = arr.sum(axis=-1)
    tol = normalization_tolerance(dtype)
    bad = np.abs(sums - 1.0) > tol
    if np.any(bad):
        worst = sums[bad].flat[0] if sums.ndim else float(sums)
        raise ValueError(f"{name}: rows must sum to 1 within {tol:g}; found a row summing to {worst:.9g}")
    if normalize:
        arr = arr / sums[..., None]
    return arr


def as_prob_pair(
    target_probs, draft_probs, *, target_name="target_probs", draft_name="draft_probs", normalize: bool = True
):
    """Validate ``(q, p)``: both probability arrays with the same shape ``[..., V]``."""
    q = as_probs(target_probs, target_name, normalize=normalize)
    p = as_probs(draft_probs, draft_name, normalize=normalize)
    if q.shape[-1] != p.shape[-1]:
        raise ValueError(
            f"{draft_name}: vocabulary size {p.shape[-1]} differs from {target_name}'s {q.shape[-1]}"
        )
    if q.shape != p.shape:
        try:
            shape = np.broadcast_shapes(q.shape, p.shape)
        except ValueError:
            raise ValueError(
                f"{draft_name}: shape {p.shape} does not match {target_name}'s shape {q.shape}"
            ) from None
        q, p = np.broadcast_to(q, shape), np.broadcast_to(p, shape)
    return q, p


def as_token_ids(token_ids, vocab_size: int, batch_shape, name: str = "draft_token_ids") -> np.ndarray:
    """Validate integer token ids in ``[0, V)`` broadcastable to ``batch_shape``."""
    arr = np.asarray(token_ids.detach().cpu() if hasattr(token_ids, "detach") else token_ids)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name}: token ids must be integers, got dtype {arr.dtype}")
    if np.any(arr < 0) or np.any(arr >= vocab_size):
        raise ValueError(f"{name}: token id out of range [0, {vocab_size})")
    try:
        return np.broadcast_to(arr.astype(np.int64), tuple(batch_shape))
    except ValueError:
        raise ValueError(
            f"{name}: shape {arr.shape} does not match the batch shape {tuple(batch_shape)}"
        ) from None


def token_ids_of(rows, token_ids, name: str = "token_ids"):
    """``token_ids`` for gathering from ``rows`` along the last axis: numpy rows get
    :func:`as_token_ids` (integers in ``[0, V)``, so a fractional id is never truncated and -1
    never wraps); other arrays (the samplers' tensors, whose entry validation has clamped and
    flagged the ids on the device) are returned as given."""
    if isinstance(rows, np.ndarray):
        return as_token_ids(token_ids, rows.shape[-1], rows.shape[:-1], name)
    return token_ids


def as_real(value, name: str, expected: str = "must be a real number") -> float:
    """A Python float from ``value``; ValueError naming ``name`` for a non-number or NaN.

    ``expected`` completes the message for a value that is not a number at all
    (``"{name}: {expected}, got {value!r}"``); bools are rejected.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: {expected}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {expected}, got {value!r}") from None
    if math.isnan(v):
        raise ValueError(f"{name}: is NaN")
    return v


def as_budget(delta, name: str = "delta") -> float:
    """Validate a scalar divergence budget: finite or +inf, and >= 0."""
    value = as_real(delta, name)
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return value


def as_budget_array(delta, name: str = "delta") -> np.ndarray:
    """Validate an array of budgets (each >= 0, no NaN)."""
    arr = np.asarray(delta, dtype=np.float64)
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name}: contains NaN")
    if np.any(arr < 0):
        raise ValueError(f"{name}: must be >= 0 (min {arr.min()})")
    return arr


def choice(value, options, name: str):
    """Return ``value`` if it is one of ``options``, else raise a ValueError listing them."""
    if value not in options:
        raise ValueError(f"{name}: unknown value {value!r}; valid: {', '.join(map(str, options))}")
    return value


def as_matching_probs(x, shape, name: str, *, normalize: bool = True) -> np.ndarray:
    """A probability array (:func:`as_probs`) whose shape must equal ``shape``."""
    arr = as_probs(x, name, normalize=normalize)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name}: shape {arr.shape} does not match target_probs' {tuple(shape)}")
    return arr


def as_int_array(x, shape, name: str) -> np.ndarray:
    """An int64 array (integer-valued input) of shape ``shape`` (None: any 1-D shape)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size == 0:
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name}: must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if shape is None:
        if arr.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    elif arr.shape != tuple(shape):
        raise ValueError(f"{name}: shape {arr.shape} does not match the expected {tuple(shape)}")
    return arr


def random_generator(rng, name: str = "rng") -> np.random.Generator:
    """``numpy.random.default_rng(rng)`` for None, a non-negative integer seed or a
    Generator; ValueError naming ``name`` for anything else (a string, a negative or
    non-integer seed), instead of numpy's TypeError from SeedSequence."""
    if rng is None or isinstance(rng, np.random.Generator):
        return np.random.default_rng(rng)
    if isinstance(rng, (bool, np.bool_)) or not isinstance(rng, (int, np.integer)):
        raise ValueError(
            f"{name}: expected None, a non-negative integer seed or a numpy.random.Generator, got {rng!r}"
        )
    if rng < 0:
        raise ValueError(f"{name}: a seed must be >= 0, got {rng}")
    return np.random.default_rng(int(rng))


def positive_int(x, name: str) -> int:
    """``x`` as an int >= 1; ValueError naming ``name`` otherwise (:func:`as_count` with minimum 1)."""
    return as_count(x, name, minimum=1)


def one_row(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` if it is one row of shape (V,), else ValueError naming ``name``."""
    if x.ndim != 1:
        raise ValueError(f"{name}: expected one row of shape (V,), got shape {x.shape}")
    return x


def token_id(token, vocab_size: int, name: str = "token") -> int:
    """One integer token id in ``[0, V)`` (bools and non-integers rejected)."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer token id, got {token!r}")
    if not 0 <= token < vocab_size:
        raise ValueError(f"{name}: {token} out of range [0, {vocab_size})")
    return int(token)


def as_temperature(t, name: str = "temperature") -> float:
    """A sampling temperature: a positive finite number."""
    v = as_real(t, name, "must be a positive finite number")
    if not v > 0 or not math.isfinite(v):
        raise ValueError(f"{name}: must be a positive finite number, got {t!r}")
    return v


def as_top_k(k, name: str = "top_k") -> int:
    """A top-k cut: an integer >= 1 (:func:`as_count`)."""
    return as_count(k, name, minimum=1)


def as_top_p(p, name: str = "top_p") -> float:
    """A nucleus mass in (0, 1]."""
    v = as_real(p, name, "must lie in (0, 1]")
    if not 0 < v <= 1:
        raise ValueError(f"{name}: must lie in (0, 1], got {p!r}")
    return v


# -- validators of the exported solver and analysis functions ---------------------------------


def _is_torch(x) -> bool:
    """True for a torch tensor (checked by type name: importing torch is never needed here)."""
    return type(x).__module__.startswith("torch")


def as_unit_interval(x, name: str) -> np.ndarray:
    """Validate numbers in [0, 1] (probabilities of single tokens, e.g. q_n or gamma) as float64."""
    return as_finite_number(x, name, low=0.0, high=1.0)


def spike_arguments(q_n, delta, *, q_name: str = "q_n", delta_name: str = "delta"):
    """Validate ``(q_n, delta)`` of the spike solvers; torch tensors pass through unchecked.

    numpy arrays and Python numbers: ``q_n`` in [0, 1] (no NaN), ``delta`` >= 0 (no NaN;
    ``inf`` allowed), returned as float64 arrays. torch tensors are the samplers' internal path,
    whose values :func:`cactus_theory.samplers.base.validate_sampler_entry` has flagged on the
    device (checking them here would synchronize the host with the device).
    """
    if _is_torch(q_n):
        return q_n, delta
    q_arr = as_unit_interval(q_n, q_name)
    if isinstance(q_n, np.ndarray) and q_n.dtype.kind == "f":
        q_arr = q_n  # keep the caller's float dtype (values checked above)
    if _is_torch(delta):
        return q_arr, delta
    d_arr = as_budget_array(delta, delta_name)
    return q_arr, (d_arr if np.ndim(delta) else float(d_arr))


def as_nonempty_values(values, name: str, *, minimum: float | None = 0.0) -> np.ndarray:
    """Validate a non-empty 1-D list of real numbers (no NaN; each >= ``minimum`` if given)."""
    try:
        arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a list of numbers ({exc})") from None
    if arr.size == 0:
        raise ValueError(f"{name}: is empty; give at least one value")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name}: contains NaN")
    if minimum is not None and np.any(arr < minimum):
        raise ValueError(f"{name}: must be >= {minimum:g} (min {arr.min():g})")
    return arr


def as_count(n, name: str, minimum: int = 1) -> int:
    """Validate an integer count ``>= minimum`` (bools and non-integral floats rejected)."""
    if (
        isinstance(n, bool)
        or not isinstance(n, (int, np.integer, float, np.floating))
        or not math.isfinite(float(n))
        or int(n) != n
    ):
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {n!r}")
    if int(n) < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {int(n)}")
    return int(n)


def as_probs_or_tensor(x, name: str):
    """:func:`as_probs` for numpy arrays and lists; torch tensors pass through (samplers' path)."""
    return x if _is_torch(x) else as_probs(x, name)


def as_finite_number(x, name: str, *, low: float = -math.inf, high: float = math.inf, slack: float = 0.0):
    """Validate real numbers (array or scalar) with no NaN, within ``[low, high]``.

    ``slack``: values outside the interval by at most this much (rounding of a computed
    quantity, e.g. an acceptance summed over tokens that comes out at 1 + 2e-16) are clipped
    into it instead of rejected.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not numeric ({exc})") from None
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name}: contains NaN")
    outside = (arr < low - slack) | (arr > high + slack)
    if np.any(outside):
        raise ValueError(f"{name}: must lie in [{low:g}, {high:g}], got {arr[outside].flat[0]:g}")
    return np.clip(arr, low, high) if slack else arr
