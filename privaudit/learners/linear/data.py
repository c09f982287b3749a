"""Per-step aggregated transitions for the linear learners (finite states).

Every statistic of PEVI / VAPVI / DP-VAPVI at step h is a sum over the rows
of step h of a function of (s, a, r, s'). With finite states the rows with the
same (s, a) share phi(s, a) and those with the same (s, a, s') share V(s'),
so the sums are computed exactly from

* n_h(s, a) and the reward sums R_h(s, a) over the distinct pairs, and
* n_h(s, a, s') over the distinct transitions,

with s' = -1 standing for "V_{h+1} = 0" (the next state is terminal, or h is
the last step). This is the dedupe of the task: V_{h+1} is computed on the S
states once per step, then indexed, whatever the number of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.privacy.fixed_point import to_grid_nearest

#: Rewards enter DP-VAPVI's statistics rounded to the nearest multiple of 2^-REWARD_BITS, per row and
#: before any sum (``StepData.r_fixed``), so the sums lie on a lattice (``privacy.grid()``).
REWARD_BITS = 8

#: Largest key space aggregated with ``np.bincount``; larger ones use ``np.unique``.
_BINCOUNT_MAX = 20_000_000


@dataclass(frozen=True, repr=False)
class StepData:
    """Aggregated rows of one step h."""

    #: Shape (m,), int64: the states s of the distinct (state, action) pairs seen at step h.
    s: np.ndarray
    #: Shape (m,), int64: the actions a of those pairs.
    a: np.ndarray
    #: Shape (m,), float64: n_h(s, a), rows per pair.
    n: np.ndarray
    #: Shape (m,), float64: sum of the (scaled, [0, 1]) rewards of those rows.
    r_sum: np.ndarray
    #: Shape (m,), float64 holding integers: sum over those rows of rint(r * 2^REWARD_BITS), each row's reward
    #: rounded to the grid before summing (DP-VAPVI's lattice statistics).
    r_fixed: np.ndarray
    #: Shape (t,), int64: index into the pairs of each distinct transition (s, a, s').
    t_pair: np.ndarray
    #: Shape (t,), int64: s'; -1 where V_{h+1} = ``end_value`` (terminal next state or last step); -2 where the
    #: next state is unknown (V_{h+1} = 0, per-row data).
    t_next: np.ndarray
    #: Shape (t,), float64: n_h(s, a, s').
    t_n: np.ndarray
    #: V_{h+1} of a terminal next state: the terminal states' per-step reward times the H - h - 1 steps left
    #: (0 at h = H - 1, and 0 when the declared reward range starts at 0; see
    #: ``privaudit.learners.tabular.pessimism.RewardFrame``).
    end_value: float = 0.0

    def __repr__(self) -> str:
        return f"StepData(pairs={len(self.s)}, transitions={len(self.t_pair)})"


@dataclass(frozen=True, repr=False)
class LinearData:
    """Aggregated logs: one ``StepData`` per step h = 0..H-1."""

    #: Horizon (from the spec).
    H: int
    #: States (from the spec).
    S: int
    #: Actions (from the spec).
    A: int
    #: K, the number of episodes in the data. A fact about the private logs (with k > 1 episodes per unit it differs
    #: between neighbours): the non-private learners use it in their penalty; DP-VAPVI never does (its D/K term
    #: takes a declared ``episodes_public``).
    n_episodes: int
    #: One ``StepData`` per step, length H.
    steps: tuple

    def __repr__(self) -> str:
        return f"LinearData(H={self.H}, S={self.S}, A={self.A}, steps={len(self.steps)})"

    @classmethod
    def from_rows(cls, h, s, a, r, s_next, end, *, H: int, S: int, A: int, n_episodes: int,
                  terminal_value: float = 0.0) -> "LinearData":
        """Aggregate rows (one per transition) into per-step sums.

        Parameters
        ----------
        h, s, a, s_next : ndarray, shape (n,), int
            Step (0-based), state, action, next state; in [0, H), [0, S), [0, A), [0, S).
        r : ndarray, shape (n,), float
            Reward, already clipped and scaled into [0, 1].
        end : ndarray, shape (n,), bool
            True where V_{h+1}(s') = 0 (terminal s' or h = H - 1).
        H, S, A : int
            Domain from the spec.
        n_episodes : int
            K.
        terminal_value : float in [0, 1], default 0
            Per-step reward of the terminal states in the units of ``r``
            (``RewardFrame.terminal``): V_{h+1} of a terminal next state is
            ``terminal_value * (H - h - 1)``.

        Raises
        ------
        UsageError
            If an index is outside the domain or a reward outside [0, 1].
        """
        # memory: inputs keep their (possibly small) dtypes; one int64 key array at a time
        h, s, a, s_next = (np.asarray(x) for x in (h, s, a, s_next))
        r = np.asarray(r, dtype=np.float64)
        end = np.asarray(end, dtype=bool) | (h == H - 1)
        for name, x, hi in (("step", h, H), ("state", s, S), ("action", a, A), ("next_state", s_next, S)):
            if not np.issubdtype(x.dtype, np.integer) and len(x):
                raise UsageError(f"column `{name}` must hold integers. Found dtype {x.dtype}.")
            if len(x) and (x.min() < 0 or x.max() >= hi):
                raise UsageError(f"column `{name}` must lie in [0, {hi}); bound and validate the logs first.")
        if len(r) and (r.min() < 0 or r.max() > 1 or not np.isfinite(r).all()):
            raise UsageError("rewards must be clipped and scaled into [0, 1] before the linear learners.")
        key = h.astype(np.int64)
        key *= S
        key += s
        key *= A
        key += a
        pair_keys, pair_inv, n = _aggregate(key, H * S * A)
        del key
        r_sum = np.bincount(pair_inv, weights=r, minlength=len(pair_keys))
        r_fixed = np.bincount(pair_inv, weights=to_grid_nearest(r, REWARD_BITS), minlength=len(pair_keys))
        tkey = pair_inv
        tkey *= S + 1
        tkey += np.where(end, 0, s_next.astype(np.int64) + 1)
        t_keys, _, t_n = _aggregate(tkey, len(pair_keys) * (S + 1))
        del tkey
        t_pair, t_next = t_keys // (S + 1), t_keys % (S + 1) - 1
        ph = pair_keys // (S * A)
        bounds = np.searchsorted(ph, np.arange(H + 1))
        tb = np.searchsorted(t_pair, bounds)  # transitions are sorted by pair index
        steps = []
        for k in range(H):  # loop over steps only
            lo, hi = bounds[k], bounds[k + 1]
            pk = pair_keys[lo:hi] % (S * A)
            tl, th = tb[k], tb[k + 1]
            steps.append(StepData(s=pk // A, a=pk % A, n=n[lo:hi].astype(np.float64), r_sum=r_sum[lo:hi],
                                  r_fixed=r_fixed[lo:hi],
                                  t_pair=t_pair[tl:th] - lo, t_next=t_next[tl:th], t_n=t_n[tl:th].astype(np.float64),
                                  end_value=float(terminal_value) * (H - k - 1)))
        return cls(H=H, S=S, A=A, n_episodes=int(n_episodes), steps=tuple(steps))


def _aggregate(key: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct sorted keys, the inverse index of each row and the counts."""
    if space <= _BINCOUNT_MAX:
        counts = np.bincount(key, minlength=space)
        keys = np.flatnonzero(counts)
        lookup = np.empty(space, dtype=np.int64)
        lookup[keys] = np.arange(len(keys))
        return keys, lookup[key], counts[keys]
    keys, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    return keys, inv.reshape(-1), counts
