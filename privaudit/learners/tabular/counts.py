"""The count statistics a tabular learner reads: exact (from logs), noisy (a release) or arrays.

Every tabular learner reads the counts protocol
(``privaudit.data.counts_protocol.Counts``: visits, transitions and reward sums at
step h; stationary; noisy), answered by:

* :func:`exact_counts`: exact counts of bounded logs (``PreparedLogs.bounded``
  from ``privaudit.data.prepare.prepare_logs``), a
  ``privaudit.data.counts.SparseCounts`` (non-private; for APVI, VE and
  experiments);
* a release read back by ``privaudit.release.tabular.load_release`` (noisy,
  unclipped; for DP-APVI) as it is;
* :class:`TabularCounts`: counts held as arrays or per-h callables (noisy
  counts drawn by the auditor and the experiments, small MDPs, tests);
  :meth:`TabularCounts.from_arrays` for dense arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec, StateActionSizes
from privaudit.data.counts import SparseCounts, sparse_counts
from privaudit.data.counts_protocol import step_index


@dataclass(frozen=True, repr=False)
class TabularCounts(StateActionSizes):
    """Visit, transition and reward-sum statistics of tabular logs.

    Attributes
    ----------
    visits : ndarray, shape (H, S, A), or (S, A) if ``stationary``
        n_h(s, a): exact (int64) or noisy (int64, may be negative; unclipped).
    transitions : callable h -> ndarray (S, A, S)
        n_h(s, a, s') for step h (the pooled table for every h if stationary).
    horizon : int
        H.
    reward_sums : ndarray like ``visits`` or None
        R_h(s, a), sums of rewards scaled to [0, 1] (noisy for a release); None
        when rewards are public or not available.
    stationary : bool
        Counts pooled over h.
    noisy : bool
        True for a release's noisy counts (the DP learner clips and projects them).
    """

    visits: np.ndarray
    transitions: Callable[[int], np.ndarray]
    horizon: int
    reward_sums: np.ndarray | None = None
    stationary: bool = False
    noisy: bool = False

    def __post_init__(self):
        v = np.asarray(self.visits)
        want = 2 if self.stationary else 3
        if v.ndim != want:
            raise UsageError(f"`visits` must have {want} dimensions "
                             f"({'(S, A)' if self.stationary else '(H, S, A)'}). Got shape {v.shape}.")
        if not self.stationary and v.shape[0] != self.horizon:
            raise UsageError(f"`visits` has {v.shape[0]} steps but horizon is {self.horizon}.")
        if self.reward_sums is not None and np.shape(self.reward_sums) != v.shape:
            raise UsageError(f"`reward_sums` must have the shape of visits {v.shape}. "
                             f"Got {np.shape(self.reward_sums)}.")
        object.__setattr__(self, "visits", v)

    def _sizes(self) -> tuple:
        return self.visits.shape[-2:]

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A) (the pooled table if stationary)."""
        g = step_index(h, self.horizon, self.stationary)
        return self.visits if self.stationary else self.visits[g]

    @property
    def has_reward_sums(self) -> bool:
        """True when reward sums are held."""
        return self.reward_sums is not None

    def reward_sums_at(self, h: int) -> np.ndarray | None:
        """R_h(s, a), shape (S, A), or None."""
        g = step_index(h, self.horizon, self.stationary)
        if self.reward_sums is None:
            return None
        return self.reward_sums if self.stationary else self.reward_sums[g]

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S) (the pooled table if stationary)."""
        step_index(h, self.horizon, self.stationary)
        return self.transitions(h)

    def iter_transitions(self):
        """Yield (h, n_h of shape (S, A, S)) for h = 0..H-1 (once, h = 0, if stationary), as every container."""
        for h in range(1 if self.stationary else self.horizon):
            yield h, self.transitions_at(h)

    @classmethod
    def from_arrays(cls, visits: np.ndarray, transitions: np.ndarray, *, horizon: int,
                    reward_sums: np.ndarray | None = None, noisy: bool = False) -> "TabularCounts":
        """Counts from dense arrays.

        Parameters
        ----------
        visits : ndarray, shape (H, S, A) or (S, A)
            n_h(s, a); a 2-d array means counts pooled over h (stationary).
        transitions : ndarray, shape (H, S, A, S) or (S, A, S)
            n_h(s, a, s'), matching ``visits``.
        horizon : int
            H.
        reward_sums : ndarray like ``visits``, optional
        noisy : bool
            Whether these are noisy (released) counts.

        Raises
        ------
        UsageError
            Inconsistent shapes.
        """
        visits = np.asarray(visits)
        trans = np.asarray(transitions)
        stationary = visits.ndim == 2
        if trans.shape != visits.shape + (visits.shape[-2],):
            raise UsageError(f"`transitions` must have shape {visits.shape + (visits.shape[-2],)} "
                             f"to match visits {visits.shape}. Got {trans.shape}.")
        getter = (lambda h: trans) if stationary else (lambda h: trans[h])
        return cls(visits=visits, transitions=getter, horizon=int(horizon), reward_sums=reward_sums,
                   stationary=stationary, noisy=noisy)

    def __repr__(self) -> str:  # shapes only, never values
        return (f"TabularCounts(H={self.horizon}, S={self.n_states}, A={self.n_actions}, "
                f"stationary={self.stationary}, noisy={self.noisy}, "
                f"rewards={'yes' if self.reward_sums is not None else 'no'})")


def exact_counts(bounded, spec: DomainSpec, *, stationary: bool = False,
                 rewards: bool = True) -> SparseCounts:
    """Exact (non-private) counts of bounded logs, in one aggregation.

    Parameters
    ----------
    bounded : polars LazyFrame or DataFrame
        Logs after contribution bounding (``PreparedLogs.bounded`` from
        ``privaudit.data.prepare.prepare_logs``), or simulated logs, which
        already respect the spec.
    spec : DomainSpec
        Declared domain.
    stationary : bool
        Pool over h.
    rewards : bool
        Also sum the rewards (skipped when the spec's reward is public).

    Returns
    -------
    privaudit.data.counts.SparseCounts
        ``noisy=False``; observed transition cells only, dense (S, A, S)
        slices on request. Answers the counts protocol.

    Notes
    -----
    NOT private: a policy trained on these counts can reveal any patient's
    record. Use it for the non-private baselines and for experiments.
    """
    return sparse_counts(bounded, spec, stationary=stationary,
                         rewards=bool(rewards) and spec.public_reward is None)
