"""DP-PBB's exact statistics: transition counts capped per unit and cell. PRIVATE: never release them.

:class:`CappedCounts` is what :class:`privaudit.learners.tabular.dp_pbb.DPPBB` noises;
:func:`capped_counts_from_logs` builds it from prepared logs (the cap is the keep rule of
``privaudit release --max-per-cell``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import polars as pl
from scipy import sparse

from privaudit.core.errors import UsageError
from privaudit.core.spec import StateActionSizes
from privaudit.data.counts import sparse_counts
from privaudit.data.counts_protocol import step_index

__all__ = ["CappedCounts", "capped_counts_from_logs", "capped_counts_from_frames"]


@dataclass(frozen=True, repr=False)
class CappedCounts(StateActionSizes):
    """Exact transition counts after the per-unit per-cell cap. PRIVATE: never release them.

    Answers the counts protocol (:class:`privaudit.data.counts_protocol.Counts`)
    in its words: ``visits_at(h)``, ``transitions_at(h)``, ``reward_sums_at(h)``
    (None: DP-PBB's reward is public), the whole table ``visits`` ((S, A)
    pooled, (H, S, A) per step) and ``iter_transitions()``; ``noisy`` is
    False. DP-PBB itself reads the sparse ``transitions`` matrices (one
    backup is a sparse product) and the start counts, which the protocol
    does not hold.

    Attributes
    ----------
    transitions : tuple of scipy.sparse.csr_matrix, each shape (S * A, S), int64
        N(s, a, s'): one matrix pooled over h (``stationary``) or one per step h.
        Row s * A + a. Only transitions kept by the cap are counted.
    starts : ndarray (S,) of int64, or None
        Episodes starting in each state (for the certificate without a public d0).
    horizon : int
        H.
    max_episodes : int
        k, the most episodes one privacy unit contributes (after bounding).
    max_per_cell : int or None
        c: the most transitions one unit contributes to one (s, a) row (pooled)
        or one (h, s, a) row (per step); None: no cap beyond k and H.
    unit_column : str
        The privacy unit's column (recorded in the privacy events).
    stationary : bool
        Pooled over h.
    """

    transitions: tuple = field(repr=False)
    starts: np.ndarray | None
    horizon: int
    max_episodes: int
    max_per_cell: int | None
    unit_column: str = "episode_id"
    stationary: bool = True

    def __post_init__(self):
        tr = tuple(sparse.csr_matrix(t, dtype=np.int64) for t in self.transitions)
        want = 1 if self.stationary else self.horizon
        if len(tr) != want:
            raise UsageError(f"`transitions` must hold {want} matrices ({'pooled' if self.stationary else 'one per h'}). "
                             f"Got {len(tr)}.")
        shapes = {t.shape for t in tr}
        if len(shapes) != 1:
            raise UsageError(f"`transitions` matrices must share one shape (S * A, S). Got {sorted(shapes)}.")
        SA, S = shapes.pop()
        if S < 1 or SA % S:
            raise UsageError(f"`transitions` must have shape (S * A, S). Got ({SA}, {S}).")
        if any(t.nnz and t.data.min() < 0 for t in tr):
            raise UsageError("`transitions` must hold counts >= 0 (exact, not noisy).")
        if isinstance(self.max_episodes, bool) or int(self.max_episodes) < 1:
            raise UsageError(f"`max_episodes` (k) must be an integer >= 1. Got {self.max_episodes!r}.")
        if self.max_per_cell is not None and (isinstance(self.max_per_cell, bool) or int(self.max_per_cell) < 1):
            raise UsageError(f"`max_per_cell` (c) must be an integer >= 1 or None. Got {self.max_per_cell!r}.")
        if self.starts is not None:
            st = np.asarray(self.starts, dtype=np.int64)
            if st.shape != (S,) or (st < 0).any():
                raise UsageError(f"`starts` must be counts >= 0 of shape ({S},). Got shape {st.shape}.")
            object.__setattr__(self, "starts", st)
        object.__setattr__(self, "transitions", tr)

    def _sizes(self) -> tuple:
        S = self.transitions[0].shape[1]
        return S, self.transitions[0].shape[0] // S

    #: Exact counts (the protocol's ``noisy``): DP-PBB adds its own noise.
    noisy = False
    #: No reward sums: DP-PBB backs up a public reward.
    has_reward_sums = False

    @cached_property
    def visits(self) -> np.ndarray:
        """n(s, a) = sum_s' N(s, a, s'), int64: shape (S, A) pooled, (H, S, A) per step (the protocol's table)."""
        S, A = self.n_states, self.n_actions
        n = np.stack([np.asarray(t.sum(axis=1)).ravel() for t in self.transitions]).astype(np.int64)
        n = n.reshape(len(self.transitions), S, A)
        n.setflags(write=False)
        return n[0] if self.stationary else n

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A) (the pooled table for every h when stationary)."""
        i = step_index(h, self.horizon, self.stationary)
        return self.visits if self.stationary else self.visits[i]

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S), a fresh dense array (DP-PBB reads the sparse ``transitions``)."""
        i = step_index(h, self.horizon, self.stationary)
        S, A = self.n_states, self.n_actions
        return self.transitions[i].toarray().reshape(S, A, S)

    def reward_sums_at(self, h: int) -> None:
        """None: no reward sums (DP-PBB's reward is public). Checks ``h`` as every container does."""
        step_index(h, self.horizon, self.stationary)
        return None

    def iter_transitions(self):
        """Yield (h, n_h(s, a, s') of shape (S, A, S)) for h = 0..H-1, once (h = 0) when stationary."""
        for h in range(1 if self.stationary else self.horizon):
            yield h, self.transitions_at(h)

    @classmethod
    def from_arrays(cls, transitions: np.ndarray, *, horizon: int, max_episodes: int = 1,
                    max_per_cell: int | None = None, starts: np.ndarray | None = None,
                    unit_column: str = "episode_id") -> "CappedCounts":
        """From dense counts (S, A, S) (pooled) or (H, S, A, S) (per step).

        The caller guarantees that the counts come from logs bounded to k
        episodes per unit, H steps per episode and (if ``max_per_cell``) c
        transitions per unit and (s, a) row: the privacy proof rests on it.
        """
        t = np.asarray(transitions)
        if t.ndim not in (3, 4) or t.shape[-1] != t.shape[-3]:
            raise UsageError(f"`transitions` must have shape (S, A, S) or (H, S, A, S). Got {t.shape}.")
        S, A = t.shape[-3], t.shape[-2]
        mats = [t.reshape(S * A, S)] if t.ndim == 3 else [t[h].reshape(S * A, S) for h in range(t.shape[0])]
        return cls(tuple(mats), starts, int(horizon), int(max_episodes),
                   None if max_per_cell is None else int(max_per_cell), unit_column, t.ndim == 3)

    @classmethod
    def from_sparse(cls, counts, *, starts: np.ndarray | None, max_episodes: int, max_per_cell: int | None,
                    unit_column: str = "episode_id") -> "CappedCounts":
        """From exact sparse counts of capped logs (one sparse matrix per slice, one slice at a time).

        ``counts`` is a :class:`privaudit.data.counts.SparseCounts` or its Spark
        twin (``privaudit.data.spark.counts.SparkSparseCounts``): each slice's
        observed cells are read with ``counts.cells_at(h)`` (on Spark, collected
        one step h at a time), never the whole cell table at once.
        """
        S, A, H = counts.n_states, counts.n_actions, counts.horizon
        mats = []
        for h in range(1 if counts.stationary else H):
            j, n = counts.cells_at(h)
            mats.append(sparse.csr_matrix((n, (j // S, j % S)), shape=(S * A, S)))
        return cls(tuple(mats), starts, H, int(max_episodes), max_per_cell, unit_column, bool(counts.stationary))

    def __repr__(self) -> str:  # shapes only
        return (f"CappedCounts(H={self.horizon}, S={self.n_states}, A={self.n_actions}, "
                f"stationary={self.stationary}, k={self.max_episodes}, c={self.max_per_cell})")


def capped_counts_from_logs(prepared, spec, *, stationary: bool, max_per_cell: int | None) -> CappedCounts:
    """Exact capped counts of prepared logs (PRIVATE): what :class:`DPPBB` noises.

    Parameters
    ----------
    prepared : PreparedLogs or SparkPreparedLogs
        Validated and bounded logs (k episodes per unit, h < H, rewards
        clipped and scaled, returns clipped at the spec's return bound):
        ``privaudit.data.prepare.PreparedLogs`` (polars) or
        ``privaudit.data.spark.prepare.SparkPreparedLogs`` (Spark aggregates
        the capped cells and the start states; only the observed cells reach
        the driver, as Arrow, one step h at a time; the same counts).
    spec : DomainSpec
    stationary : bool
        Pool over h (the cap's cells are then (s, a); per step (h, s, a)).
    max_per_cell : int or None
        c: at most c steps per unit and cell (``PreparedLogs.with_cell_cap``,
        the keep rule of ``privaudit release --max-per-cell``).

    Returns
    -------
    CappedCounts
        See :func:`capped_counts_from_frames`.
    """
    capped = prepared.with_cell_cap(max_per_cell, stationary=stationary)
    if prepared.engine == "polars":
        # the capped parts counted one after the other: one part's per-cell windows in memory (issue 33)
        return capped_counts_from_frames(capped.bounded_parts(), prepared.bounded, spec, stationary=stationary,
                                         max_per_cell=max_per_cell)
    # Spark (privaudit.data.spark.prepare.SparkPreparedLogs): the cells aggregated and cached on the cluster,
    # collected one step h at a time; the start counts, S rows at most
    counts = capped.count_cells(stationary=stationary, rewards=False)
    try:
        return CappedCounts.from_sparse(counts, starts=prepared.start_counts(), max_episodes=spec.max_episodes_per_unit,
                                        max_per_cell=max_per_cell, unit_column=spec.unit_column or "episode_id")
    finally:
        counts.close()


def capped_counts_from_frames(capped, bounded, spec, *, stationary: bool, max_per_cell: int | None) -> CappedCounts:
    """:class:`CappedCounts` from capped bounded rows (transitions) and bounded rows (start states).

    ``capped`` is a frame or a list of frames counted as their concatenation (``sparse_counts``).

    Starts come from the uncapped bounded rows (step 0 of each kept episode):
    each unit starts at most k episodes, whatever the cap.
    """
    sc = sparse_counts(capped, spec, stationary=stationary, rewards=False)
    st = (bounded.lazy().filter(pl.col("step") == 0).group_by("state").agg(pl.len().alias("n"))
          .collect(engine="streaming"))
    starts = np.zeros(spec.S, dtype=np.int64)
    starts[st["state"].to_numpy().astype(np.int64)] = st["n"].to_numpy()
    return CappedCounts.from_sparse(sc, starts=starts, max_episodes=spec.max_episodes_per_unit,
                                    max_per_cell=max_per_cell, unit_column=spec.unit_column or "episode_id")
