"""Result types of the accepted-length checks (:mod:`cactus_theory.analysis.accepted_length`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import Result


@dataclass(frozen=True)
class CurveCheck(Result):
    """The shape checks of an accepted-length curve (:func:`~cactus_theory.analysis.accepted_length.check_accepted_length_curve`).

    Attributes
    ----------
    survival : ndarray
        :math:`S_k`, the curve's increments in the drafts-only convention.
    negative_increments : tuple of int
        Draft counts k (1-based) where the curve falls: :math:`S_k < 0`.
    rising_increments : tuple of int
        k where the increment rises: :math:`S_k > S_{k-1}` (the survival cannot rise).
    above_one : tuple of int
        k where an increment exceeds 1 (a round cannot accept more than one more draft).
    ok : bool
        No flag raised.
    """

    survival: np.ndarray
    negative_increments: tuple
    rising_increments: tuple
    above_one: tuple

    @property
    def ok(self) -> bool:
        return not (self.negative_increments or self.rising_increments or self.above_one)

    def summary(self) -> str:
        """One line: "ok", or each flag with its draft counts."""
        if self.ok:
            return "ok"
        parts = []
        for label, ks in (
            ("falls at k =", self.negative_increments),
            ("increment rises at k =", self.rising_increments),
            ("increment above 1 at k =", self.above_one),
        ):
            if ks:
                parts.append(f"{label} {', '.join(map(str, ks))}")
        return "; ".join(parts)


@dataclass(frozen=True)
class PositionComparison(Result):
    """Engine counters against the exact survival, position by position (:func:`~cactus_theory.analysis.accepted_length.compare_position_counts`).

    Attributes
    ----------
    observed : ndarray
        Accepted fraction at each position, counts / rounds.
    expected : ndarray
        The exact survival :math:`S_j` (mean over the recorded rounds).
    low, high : ndarray
        Clopper-Pearson interval of each observed fraction at level ``1 - alpha``.
    outside : tuple of int
        Positions (1-based) whose expected value lies outside its interval.
    """

    observed: np.ndarray
    expected: np.ndarray
    low: np.ndarray
    high: np.ndarray
    outside: tuple

    @property
    def ok(self) -> bool:
        return not self.outside
