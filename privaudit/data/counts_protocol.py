"""The counts protocol: what every container of tabular count statistics answers.

Four containers hold the statistics of DP-APVI (Qiao & Wang (2023), Section 3)
over the declared domain, and all answer the same questions in the same
words, so the release, the learners and the auditor read any of them:

* :class:`privaudit.data.counts.SparseCounts`: exact counts of bounded logs
  (PRIVATE; the release noises them, the non-private learners read them);
* :class:`privaudit.release.artifact.Release`: a release read back from its
  folder (noisy, public);
* :class:`privaudit.learners.tabular.counts.TabularCounts`: counts held as
  arrays (noisy counts drawn by the auditor and the experiments, small MDPs,
  tests);
* :class:`privaudit.learners.tabular.pbb_counts.CappedCounts`: exact counts of logs
  capped per unit and cell, held as sparse matrices (PRIVATE; DP-PBB noises
  them; no reward sums: its reward is public).

Steps are 0-based, h = 0..H-1 (the papers' 1..H shifted by one). A
stationary container pools over h and answers the pooled table for every h.
Reward sums are in units of the [0, 1]-scaled reward, whatever the
container stores.

The whole tables have one vocabulary too: ``visits`` (an array, (H, S, A)
or (S, A) when stationary) and ``iter_transitions()`` (yields (h, (S, A, S))
for h = 0..H-1, once when stationary) in all four containers; ``rewards``
(reward sums in the container's stored units, 1/quantum of the scaled
reward; None without them) in the two the release writes and reads
(``SparseCounts``, ``Release``); ``TabularCounts`` holds ``reward_sums`` in
scaled units. The release mechanism (``TabularRelease.apply``) reads
``visits``, ``rewards`` and ``iter_transitions()``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from privaudit.core.errors import UsageError


@runtime_checkable
class Counts(Protocol):
    """Visit, transition and reward-sum statistics at step h.

    Attributes
    ----------
    horizon : int
        H (also for a stationary container).
    n_states, n_actions : int
        S and A of the declared domain.
    stationary : bool
        Counts pooled over h: every h answers the same tables.
    noisy : bool
        True for released (noisy, possibly negative, unclipped) counts; the
        non-private learners refuse them, DP-APVI clips and projects them.
    has_reward_sums : bool
        False when the reward is public or was not aggregated.
    """

    horizon: int
    n_states: int
    n_actions: int
    stationary: bool
    noisy: bool
    has_reward_sums: bool

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A)."""

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S) (a fresh array or a read-only view)."""

    def reward_sums_at(self, h: int) -> np.ndarray | None:
        """R_h(s, a), shape (S, A), in [0, 1]-scaled reward units; None without reward sums."""


def step_index(h, horizon: int, stationary: bool) -> int:
    """The stored slice of step ``h``: 0 for a stationary container, else h.

    Raises
    ------
    UsageError
        If ``h`` is not an integer in [0, horizon).
    """
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < horizon:
        raise UsageError(f"`h` must be an integer step in [0, {horizon}). Found {h!r}.")
    return 0 if stationary else int(h)


__all__ = ["Counts", "step_index"]
