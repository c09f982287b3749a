"""The count statistics a tabular learner reads: exact (from logs) or noisy (a release).

:class:`TabularCounts` holds n_h(s, a), n_h(s, a, s') (one h-slice at a time,
so ICU-Sepsis' 256 M transition cells never sit in memory together) and
optionally the reward sums R_h(s, a). Steps are 0-based, h = 0..H-1. A
stationary container holds counts pooled over h: visits (S, A) and one
(S, A, S) transition table returned for every h.

Constructors:

* :func:`exact_counts`: exact counts of bounded logs (``PreparedLogs.bounded``
  from ``privaudit.data.prepare.prepare_logs``) via ``privaudit.stats.counts``
  (non-private; for APVI, VE and experiments);
* :func:`counts_from_release`: the noisy, unclipped counts of a release
  (``privaudit.stats.release.load_release``), for DP-APVI;
* :meth:`TabularCounts.from_arrays`: dense arrays (tests, small MDPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from privaudit.errors import UsageError
from privaudit.spec import DomainSpec


class _SparseSlices:
    """n_h(s, a, s') stored sparsely per h; dense (S, A, S) slices on request."""

    def __init__(self, S: int, A: int, slices: list[tuple[np.ndarray, np.ndarray]]):
        self._shape = (S, A, S)
        self._slices = slices  # per h: (flat index into S*A*S, count)

    def __call__(self, h: int) -> np.ndarray:
        idx, val = self._slices[0 if len(self._slices) == 1 else h]
        out = np.zeros(int(np.prod(self._shape)), dtype=val.dtype)
        out[idx] = val
        return out.reshape(self._shape)

    @classmethod
    def from_dense(cls, dense_slices) -> "_SparseSlices":
        slices, shape = [], None
        for arr in dense_slices:
            arr = np.asarray(arr)
            shape = arr.shape
            flat = arr.reshape(-1)
            idx = np.flatnonzero(flat)
            slices.append((idx, flat[idx].copy()))
        if shape is None:
            raise UsageError("no transition slice was given.")
        return cls(shape[0], shape[1], slices)


@dataclass(frozen=True, repr=False)
class TabularCounts:
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

    @property
    def n_states(self) -> int:
        """S."""
        return self.visits.shape[-2]

    @property
    def n_actions(self) -> int:
        """A."""
        return self.visits.shape[-1]

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A) (the pooled table if stationary)."""
        return self.visits if self.stationary else self.visits[h]

    def reward_sums_at(self, h: int) -> np.ndarray | None:
        """R_h(s, a), shape (S, A), or None."""
        if self.reward_sums is None:
            return None
        return self.reward_sums if self.stationary else self.reward_sums[h]

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
                 rewards: bool = True) -> TabularCounts:
    """Exact (non-private) counts of bounded logs.

    Parameters
    ----------
    bounded : polars LazyFrame or DataFrame
        Logs after ``privaudit.data.bounding.bound_contributions`` (or
        simulated logs, which already respect the spec).
    spec : DomainSpec
        Declared domain.
    stationary : bool
        Pool over h.
    rewards : bool
        Also compute the reward sums (skipped when the spec's reward is public).

    Returns
    -------
    TabularCounts
        ``noisy=False``; transitions stored sparsely (observed cells only).

    Notes
    -----
    NOT private: a policy trained on these counts can reveal any patient's
    record. Use it for the non-private baselines and for experiments.
    """
    from privaudit.stats.counts import iter_transition_counts, reward_sums, visit_counts

    visits = visit_counts(bounded, spec, stationary=stationary)
    sparse = _SparseSlices.from_dense(c for _, c in iter_transition_counts(bounded, spec, stationary=stationary))
    rsum = None
    if rewards and spec.public_reward is None:
        rsum = reward_sums(bounded, spec, stationary=stationary)
    return TabularCounts(visits=visits, transitions=sparse, horizon=spec.H, reward_sums=rsum,
                         stationary=stationary, noisy=False)


def counts_from_release(release) -> TabularCounts:
    """The noisy counts of a loaded release (``privaudit.stats.release.Release``).

    Reward sums are converted to scaled-reward units with the manifest's
    ``value_unit`` of the rewards family. Nothing is clipped here: clipping
    at 0 and the projection are DP-APVI's post-processing.
    """
    man = release.manifest
    dom = man["domain"]
    stationary = bool(dom["stationary"])
    rsum = getattr(release, "rewards", None)
    if rsum is not None:
        unit = float(man["families"].get("rewards", {}).get("value_unit", 1.0))
        rsum = np.asarray(rsum, dtype=np.float64) * unit
    return TabularCounts(visits=np.asarray(release.visits), transitions=release.transitions_h,
                         horizon=int(dom["H"]), reward_sums=rsum, stationary=stationary, noisy=True)
