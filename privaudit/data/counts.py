"""Exact sufficient statistics of bounded tabular logs, as dense arrays.

The statistics of DP-APVI (Qiao & Wang (2023), Section 3; docs/release.md) over the
*declared* domain (S, A, H from the spec, never from the data):

* visits      n_h(s, a)      shape (H, S, A)      int64
* transitions n_h(s, a, s')  shape (H, S, A, S)   int64, produced one h at a time
* reward sums R_h(s, a)      shape (H, S, A)      sum of scaled rewards in [0, 1]

Steps are 0-based, h = 0..H-1 (the papers' h = 1..H shifted by one).
With ``stationary=True`` the counts are pooled over h: (S, A), (S, A, S), (S, A).

Every function expects *bounded* logs (``privaudit.data.bounding``): at most k
episodes per unit, step < H, rewards scaled into [0, 1]. A row whose state is
a terminal state is not counted: the MDP is absorbing there, so it carries no
information (and validation rejects rows after a terminal anyway). The row
*into* a terminal state (next_state terminal) is a real transition and is
counted.

All aggregation runs over one integer cell index: integer statistics (counts,
and reward sums in units of 1/quantum) are pulled from polars' streaming
engine in batches and merged into a running table of the observed cells
(``privaudit.data.cell_merge``), float reward sums are one in-memory polars
group-by. The sparse result is scattered into a dense numpy array, one
h-slice at a time for transitions, so that a domain like ICU-Sepsis (H=20,
S=716, A=25: 256 M transition cells) never exists in memory as a whole.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import polars as pl

from privaudit.core.errors import ValidationFailed
from privaudit.core.spec import DelegatedSizes, DomainSpec
from privaudit.data.cell_merge import cell_table
from privaudit.data.counts_protocol import step_index

Frame = pl.LazyFrame | pl.DataFrame


def _lazy(frame: Frame) -> pl.LazyFrame:
    return frame.lazy() if isinstance(frame, pl.DataFrame) else frame


def _counted_rows(frame: Frame, spec: DomainSpec, columns: list[str]) -> pl.LazyFrame:
    """Rows that count: state not terminal; the index columns cast to Int64."""
    lf = _lazy(frame)
    if spec.terminal_states:
        lf = lf.filter(~pl.col("state").is_in(list(spec.terminal_states)))
    return lf.select([pl.col(c).cast(pl.Int64) for c in columns]
                     + ([pl.col("reward")] if "reward" in lf.collect_schema().names() else []))


def _check_domain(bounds: pl.DataFrame, spec: DomainSpec, columns: list[str]) -> None:
    """Refuse indices outside the declared domain (a privacy invariant: no assert).

    ``bounds`` holds ``<col>_lo`` / ``<col>_hi`` (min and max; null when no
    row counts). Validation rejects such rows before a release; this is the
    last guard so that an unvalidated frame can never be scattered out of
    bounds or alias another cell through the flat index.
    """
    bound = {"step": spec.H, "state": spec.S, "action": spec.A, "next_state": spec.S}
    for c in columns:
        lo, hi = bounds[c + "_lo"][0], bounds[c + "_hi"][0]
        if lo is None:
            continue
        if lo < 0 or hi >= bound[c]:
            raise ValidationFailed(
                f"column '{c}' holds values in [{lo}, {hi}] outside the declared domain [0, {bound[c]}) "
                f"(after bounding). Run `privaudit validate` on the logs and fix the rows it lists."
            )


def _cell_index(columns: list[str], sizes: list[int]) -> pl.Expr:
    """Row-major flat index over ``columns`` with the given sizes (Int64)."""
    idx = pl.lit(0, dtype=pl.Int64)
    for c, n in zip(columns, sizes):
        idx = idx * n + pl.col(c)
    return idx


class SparseCounts(DelegatedSizes):
    """The observed cells of one log, from a single polars group-by.

    Every statistic (visits, reward sums, transition slices) is a dense
    scatter of this sparse table, so the rows are aggregated once. Answers
    the counts protocol (``privaudit.data.counts_protocol.Counts``) with
    ``noisy=False``. The whole tables have the names a read-back release
    (``privaudit.release.artifact.Release``) uses: :attr:`visits`,
    :attr:`rewards` (stored units) and :meth:`iter_transitions`; the release
    mechanism reads them, one vocabulary for exact and released counts.

    Attributes
    ----------
    spec : DomainSpec
    stationary : bool
    cells : polars.DataFrame
        Columns ``i`` (Int64, flat transition-cell index
        ``((h*S + s)*A + a)*S + s'``, or ``(s*A + a)*S + s'`` if stationary;
        sorted, unique), ``n`` (Int64 count) and, when rewards were asked
        for, ``r`` (sum of rewards of the cell: Float64, or Int64 in units of
        1/quantum). At most one row per log row; PRIVATE exact statistics.
    quantum : int or None
        Reward sums are stored in units of 1/quantum (None: float sums).
    """

    noisy = False

    def __init__(self, spec: DomainSpec, stationary: bool, cells: pl.DataFrame, quantum: int | None = None):
        self.spec, self.stationary, self.cells, self.quantum = spec, stationary, cells, quantum
        S, A = spec.S, spec.A
        self._per_h = S * A * S
        flat = cells["i"].to_numpy()
        n_slices = 1 if stationary else spec.H
        self._bounds = np.searchsorted(flat, np.arange(n_slices + 1, dtype=np.int64) * self._per_h)
        self._tables: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:  # exact counts are private: shapes only
        return f"SparseCounts(H={self.spec.H}, S={self.spec.S}, A={self.spec.A}, stationary={self.stationary})"

    def _domain(self) -> DomainSpec:
        return self.spec

    @property
    def has_reward_sums(self) -> bool:
        """True when the rewards were aggregated (``rewards=True``)."""
        return "r" in self.cells.columns

    @property
    def sa_shape(self) -> tuple[int, ...]:
        """(S, A) if stationary else (H, S, A)."""
        sp = self.spec
        return (sp.S, sp.A) if self.stationary else (sp.H, sp.S, sp.A)

    def _sa(self, column: str, dtype) -> np.ndarray:
        if column not in self._tables:
            S = self.spec.S
            agg = (self.cells.lazy().group_by((pl.col("i") // S).alias("j")).agg(pl.col(column).sum())
                   .collect())
            out = np.zeros(int(np.prod(self.sa_shape)), dtype=dtype)
            out[agg["j"].to_numpy()] = agg[column].to_numpy().astype(dtype, copy=False)
            self._tables[column] = out.reshape(self.sa_shape)
        return self._tables[column]

    @property
    def visits(self) -> np.ndarray:
        """n_h(s, a), shape (H, S, A) or (S, A), int64 (= sum over s' of the transitions); as ``Release.visits``."""
        return self._sa("n", np.int64)

    @property
    def rewards(self) -> np.ndarray | None:
        """R_h(s, a) in stored units, shape (H, S, A) or (S, A): int64 units of 1/quantum (float64 sums
        without a quantum); None without reward sums. As ``Release.rewards``."""
        if not self.has_reward_sums:
            return None
        return self._sa("r", np.int64 if self.cells.schema["r"].is_integer() else np.float64)

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A), int64 (the pooled table if stationary)."""
        g = step_index(h, self.spec.H, self.stationary)
        return self.visits if self.stationary else self.visits[g]

    def reward_sums_at(self, h: int) -> np.ndarray | None:
        """R_h(s, a), shape (S, A), float64 in [0, 1]-scaled reward units; None without reward sums."""
        g = step_index(h, self.spec.H, self.stationary)
        if not self.has_reward_sums:
            return None
        r = self.rewards if self.stationary else self.rewards[g]
        return r.astype(np.float64) / self.quantum if self.quantum is not None else r

    #: transitions_at returns a new array on every call: TabularRelease.apply noises it in place.
    fresh_transitions = True

    def cells_at(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The observed transition cells of step h (the pooled slice if stationary): ``(j, n)``, int64.

        ``j`` is the index ``(s*A + a)*S + s'`` inside the slice (sorted), ``n`` its count (> 0).
        """
        g = step_index(h, self.spec.H, self.stationary)
        lo, hi = self._bounds[g], self._bounds[g + 1]
        return (self.cells["i"][lo:hi].to_numpy() - g * self._per_h,
                self.cells["n"][lo:hi].to_numpy().astype(np.int64, copy=False))

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s') of step h (the pooled table if stationary), shape (S, A, S), int64, fresh."""
        S, A = self.spec.S, self.spec.A
        j, n = self.cells_at(h)
        out = np.zeros(self._per_h, dtype=np.int64)
        out[j] = n
        return out.reshape(S, A, S)

    def iter_transitions(self) -> Iterator[tuple[int, np.ndarray]]:
        """Yield (h, n_h of shape (S, A, S)) for h = 0..H-1 (once, h = 0, if stationary)."""
        for h in range(1 if self.stationary else self.spec.H):
            yield h, self.transitions_at(h)

    def close(self) -> None:
        """Release what the counts hold outside this process (nothing here; Spark's cached cells in
        ``privaudit.data.spark.counts.SparkSparseCounts``)."""


def sparse_counts(frame: Frame, spec: DomainSpec, *, stationary: bool = False,
                  rewards: bool = True, quantum: int | None = None) -> SparseCounts:
    """Aggregate bounded logs once into their observed transition cells.

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame, or a list of them
        Bounded logs (``privaudit.data.bounding``) with ``step, state,
        action, next_state`` and, if ``rewards``, ``reward`` scaled into [0, 1].
        A list (``PreparedLogs.bounded_parts``) is counted as its
        concatenation, one frame after the other when the statistics are
        integers (so that one part's query is in memory at a time).
    spec : DomainSpec
        Declared domain (H, S, A, terminal states).
    stationary : bool
        Pool over h.
    rewards : bool
        Also sum the rewards per cell.
    quantum : int or None
        Round each row's reward to a multiple of 1/quantum and sum integers
        (``round(r * quantum)``; see :func:`reward_sums`). None sums floats.

    Returns
    -------
    SparseCounts

    Raises
    ------
    ValidationFailed
        If an index lies outside the declared domain or is null (unvalidated input).

    Notes
    -----
    One pass over the rows, aggregated by the flat cell index; rows whose
    state is terminal are left out (see the module docstring); a null index
    is refused as an index outside the domain is. Memory: the sparse
    result, at most one row per observed cell. Integer statistics (counts,
    and reward sums with a ``quantum``) are streamed in batches into a
    running table of the observed cells (``privaudit.data.cell_merge``), so
    neither the rows nor a per-row state of polars' group-by are held (issue
    33); float sums (``quantum`` None) run one in-memory polars group-by,
    whose summation order they keep.
    """
    H, S, A = spec.H, spec.S, spec.A
    cols = ["state", "action", "next_state"] if stationary else ["step", "state", "action", "next_state"]
    sizes = [S, A, S] if stationary else [H, S, A, S]
    frames = [_counted_rows(f, spec, cols) for f in (frame if isinstance(frame, list) else [frame])]
    lf = frames[0] if len(frames) == 1 else pl.concat(frames, parallel=False)
    # a row with an index outside the domain, or a null one, falls in cell -1, so one pass both counts and
    # detects it; the ranges for the error message are read only then. (Collecting the ranges beside the
    # count with pl.collect_all made polars cache the shared scan: memory grew with the rows, issue 33.)
    outside = pl.any_horizontal([(pl.col(c) < 0) | (pl.col(c) >= n) for c, n in zip(cols, sizes)])
    cell = (pl.when(outside).then(pl.lit(-1, dtype=pl.Int64)).otherwise(_cell_index(cols, sizes))
            .fill_null(-1).alias("i"))
    if not rewards or quantum is not None:
        # integer statistics: pulled in batches and merged into a running table of the observed cells
        # (data.cell_merge), whose memory does not grow with the rows as polars' streaming group-by's does
        r = ([(pl.col("reward").cast(pl.Float64) * int(quantum)).round(0).cast(pl.Int64).fill_null(0).alias("r")]
             if rewards else [])
        cells = cell_table([f.select(cell, *r) for f in frames], "i", ["r"] if rewards else [])
    else:  # float sums keep the in-memory engine's group-by and its summation order
        cells = (lf.group_by(cell).agg(pl.len().cast(pl.Int64).alias("n"),
                                       pl.col("reward").cast(pl.Float64).sum().alias("r"))
                 .sort("i").collect(engine="auto"))
    if (cells["i"] == -1).any():
        _check_domain(lf.select([e for c in cols for e in (pl.col(c).min().alias(c + "_lo"),
                                                           pl.col(c).max().alias(c + "_hi"))])
                      .collect(engine="streaming"), spec, cols)
        raise ValidationFailed("a row's index lies outside the declared domain (after bounding). "
                               "Run `privaudit validate` on the logs and fix the rows it lists.")
    return SparseCounts(spec, stationary, cells, quantum if rewards else None)


def visit_counts(frame: Frame, spec: DomainSpec, *, stationary: bool = False) -> np.ndarray:
    """Exact visit counts n_h(s, a) = #{episodes tau : (s_h, a_h) = (s, a)}.

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame
        Bounded logs with columns ``step``, ``state``, ``action``, ``next_state``.
    spec : DomainSpec
        Declared domain (H, S, A, terminal states).
    stationary : bool
        Pool over h.

    Returns
    -------
    ndarray of int64, shape (H, S, A), or (S, A) if ``stationary``.

    Raises
    ------
    ValidationFailed
        If an index lies outside the declared domain (unvalidated input).

    References
    ----------
    Qiao & Wang (2023), Section 3, "Private Model-based Components": the counts n_{s_h, a_h}.
    """
    return sparse_counts(frame, spec, stationary=stationary, rewards=False).visits


def reward_sums(frame: Frame, spec: DomainSpec, *, stationary: bool = False,
                quantum: int | None = None) -> np.ndarray:
    """Exact reward sums R_h(s, a) = sum of scaled rewards r in [0, 1] at (h, s, a).

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame
        Bounded logs (rewards already clipped and scaled into [0, 1]).
    spec : DomainSpec
    stationary : bool
        Pool over h.
    quantum : int or None
        If given, each row's reward is first rounded to a multiple of
        1/quantum and the sum is returned as an int64 count of 1/quantum
        units (``round(r * quantum)`` summed). A per-row, data-independent
        rounding: a row still contributes at most ``quantum`` units, so the
        sensitivity in these units is ``quantum`` times the sensitivity for
        rewards in [0, 1]. None returns the float64 sums.

    Returns
    -------
    ndarray, shape (H, S, A) or (S, A); float64, or int64 when ``quantum`` is set.
    """
    return sparse_counts(frame, spec, stationary=stationary, quantum=quantum).rewards


def iter_transition_counts(frame: Frame, spec: DomainSpec, *,
                           stationary: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """Exact transition counts n_h(s, a, s'), one step h at a time.

    Yields
    ------
    h : int
        Step, 0..H-1 (a single h = 0 for the pooled stationary table).
    counts : ndarray of int64, shape (S, A, S)
        n_h(s, a, s'); a fresh array each time.

    Notes
    -----
    Peak memory: the sparse cells plus one dense h-slice (ICU-Sepsis:
    12.8 M cells, 102 MB), never the whole (H, S, A, S) table.
    """
    yield from sparse_counts(frame, spec, stationary=stationary, rewards=False).iter_transitions()


def transition_counts(frame: Frame, spec: DomainSpec, *, stationary: bool = False) -> np.ndarray:
    """All transition counts at once, shape (H, S, A, S) (or (S, A, S) if stationary), int64.

    For small domains (tests, toy MDPs). Large domains should use
    :func:`iter_transition_counts`.
    """
    slices = [c for _, c in iter_transition_counts(frame, spec, stationary=stationary)]
    return slices[0] if stationary else np.stack(slices)
