"""Exact cell counts on Spark: aggregated and cached on the cluster, fetched to the driver one step h at a time.

Cells are the flat index ``((h*S + s)*A + a)*S + s'`` of :mod:`privaudit.data.counts`; rewards are
clipped, scaled and rounded per row in float64 with the same operations as polars, then summed as
int64 units of 1/quantum (float sums are not reproducible across partitions, so the engine requires
``quantum`` when it sums rewards). Only the observed cells come back, as Arrow, into a
:class:`privaudit.data.counts.SparseCounts`.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from privaudit.core.errors import UsageError, ValidationFailed
from privaudit.core.spec import DomainSpec
from privaudit.data.counts import SparseCounts, _check_domain
from privaudit.data.spark.session import spark_errors


def to_polars(df: DataFrame) -> pl.DataFrame:
    """Collect a (small) Spark result to the driver as Arrow. Every collection of cells goes through here."""
    return pl.from_arrow(df.toArrow())


class SparkSparseCounts(SparseCounts):
    """The exact cells of Spark-bounded logs, kept on the cluster and fetched one step h at a time.

    Answers what :class:`privaudit.data.counts.SparseCounts` answers, with
    the same values. The cell table (flat index ``i``, count ``n``, reward
    sum ``r`` in int64 units of 1/quantum) stays cached on the cluster;
    the (H, S, A) tables (visits, reward sums) come back once (at most
    H*S*A rows), and :meth:`transitions_at` brings back the observed cells
    of one step h only (at most S*A*S rows), so the driver holds one slice
    while the release noises and writes it.

    Attributes
    ----------
    spec : DomainSpec
    stationary : bool
    quantum : int or None
    cells : polars.DataFrame
        The whole cell table, collected on first access (for tests and
        benchmarks on logs whose cells fit on the driver; the release never
        reads it).
    """

    def __init__(self, spec: DomainSpec, stationary: bool, cells: DataFrame, quantum: int | None, *,
                 cached: DataFrame | None = None):
        self.spec, self.stationary, self.quantum = spec, stationary, quantum
        self._cells, self._cached = cells, cached
        self._rewards = "r" in cells.columns
        self._starts = "n0" in cells.columns
        self._per_h = spec.S * spec.A * spec.S
        self._tables: dict[str, np.ndarray] = {}
        self._sa_cells: pl.DataFrame | None = None
        self._all: pl.DataFrame | None = None

    @property
    def cells(self) -> pl.DataFrame:
        if self._all is None:
            with spark_errors("collecting the exact cells"):
                self._all = to_polars(self._cells.drop("n0")).sort("i")
        return self._all

    @property
    def has_reward_sums(self) -> bool:
        return self._rewards

    @property
    def rewards(self) -> np.ndarray | None:
        return self._sa("r", np.int64) if self._rewards else None

    def _sa(self, column: str, dtype) -> np.ndarray:
        if self._sa_cells is None:  # visits and reward sums of every (h, s, a): one collection
            sums = [F.sum(x).cast("long").alias(x) for x in
                    ["n"] + (["r"] if self._rewards else []) + (["n0"] if self._starts else [])]
            with spark_errors("collecting the visit counts"):
                self._sa_cells = to_polars(self._cells.groupBy(F.expr(f"i div {int(self.spec.S)}").alias("j"))
                                            .agg(*sums))
        if column not in self._tables:
            out = np.zeros(int(np.prod(self.sa_shape)), dtype=dtype)
            out[self._sa_cells["j"].to_numpy()] = self._sa_cells[column].to_numpy().astype(dtype, copy=False)
            self._tables[column] = out.reshape(self.sa_shape)
        return self._tables[column]

    def start_counts(self) -> np.ndarray | None:
        """Step-0 rows counted per state, shape (S,), int64, from the (h, s, a) collection; None unless
        counted with ``starts``. PRIVATE."""
        if not self._starts:
            return None
        S, A = self.spec.S, self.spec.A
        return self._sa("n0", np.int64).reshape(-1, S, A).sum(axis=(0, 2))

    def cells_at(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The observed transition cells of step h only, collected now (Arrow): ``(j, n)``, int64.

        ``j`` is the index ``(s*A + a)*S + s'`` inside the slice (sorted), ``n`` its count; the pooled
        slice for every h when stationary. At most S*A*S rows reach the driver.
        """
        g = 0 if self.stationary else int(h)
        if not 0 <= g < (1 if self.stationary else self.spec.H):
            raise UsageError(f"`h` must be in [0, {self.spec.H}). Found {h!r}.")
        lo = g * self._per_h
        with spark_errors(f"collecting the transition counts of step {g}"):
            part = to_polars(self._cells.filter((F.col("i") >= lo) & (F.col("i") < lo + self._per_h))
                             .select("i", "n")).sort("i")
        return part["i"].to_numpy() - lo, part["n"].to_numpy().astype(np.int64, copy=False)

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S), int64: the observed cells of step h only, collected now."""
        j, n = self.cells_at(h)
        out = np.zeros(self._per_h, dtype=np.int64)
        out[j] = n
        return out.reshape(self.spec.S, self.spec.A, self.spec.S)

    def close(self) -> None:
        """Drop the cached cells from the cluster (best effort: the release is complete by then, and a
        session that is gone has dropped its cache anyway)."""
        if self._cached is not None:
            try:
                self._cached.unpersist()
            except (PySparkException, Py4JError, ConnectionError):
                pass


def exact_counts(bounded: DataFrame, spec: DomainSpec, *, stationary: bool = False, rewards: bool = True,
                 quantum: int | None = None, starts: bool = False) -> SparkSparseCounts:
    """The exact cell table of bounded logs, aggregated and cached by Spark.

    Parameters
    ----------
    bounded : pyspark DataFrame
        From :func:`bound_contributions` (and :func:`cap_per_cell`).
    spec : DomainSpec
    stationary : bool
        Pool over h.
    rewards : bool
        Also sum the rewards per cell (then ``quantum`` is required).
    quantum : int
        Each row's scaled reward is rounded to ``round(r * quantum)`` (half
        away from zero, as polars on r >= 0) and summed as int64.
    starts : bool
        Also count each cell's step-0 rows (column ``n0``), so that
        :meth:`SparkSparseCounts.start_counts` answers from the (h, s, a)
        collection instead of a pass of its own. For validated logs only
        (no row in a terminal state: every step-0 row is counted).

    Returns
    -------
    SparkSparseCounts
        Identical values to ``privaudit.data.counts.sparse_counts`` on the
        same bounded logs. One pass over the rows aggregates the cells by
        their index columns and caches them on the cluster; the domain check
        reads the cached cells. Only observed cells leave the cluster, the
        transitions one step h at a time.

    Raises
    ------
    UsageError
        ``rewards`` without ``quantum``.
    ValidationFailed
        An index outside the declared domain (unvalidated input).
    """
    if rewards and quantum is None:
        raise UsageError("the Spark engine sums rewards as integers: give `quantum` (float sums are not "
                         "reproducible across partitions).")
    H, S, A = spec.H, spec.S, spec.A
    cols = ["state", "action", "next_state"] if stationary else ["step", "state", "action", "next_state"]
    sizes = [S, A, S] if stationary else [H, S, A, S]
    c = F.col
    lf = bounded
    if spec.terminal_states:
        lf = lf.filter(~c("state").isin(list(spec.terminal_states)))
    aggs = [F.count(F.lit(1)).cast("long").alias("n")]
    if rewards:
        aggs.append(F.sum(F.round(c("reward") * int(quantum), 0).cast("long")).alias("r"))
    if starts:
        aggs.append(F.sum((c("step") == 0).cast("long")).alias("n0"))
    by_columns = lf.groupBy(*[c(col).cast("long").alias(col) for col in cols]).agg(*aggs)
    if not stationary:  # one cached partition per step h: each per-h fetch is H small tasks, not one per
        by_columns = by_columns.repartitionByRange(H, "step")  # shuffle partition (200 by default)
    by_columns = by_columns.persist()
    bounds = by_columns.agg(*[e for col in cols for e in (F.min(col).alias(col + "_lo"),
                                                          F.max(col).alias(col + "_hi"))])
    try:
        _check_domain(to_polars(bounds), spec, cols)
    except ValidationFailed:
        by_columns.unpersist()
        raise
    idx = F.lit(0).cast("long")
    for col, n in zip(cols, sizes):
        idx = idx * n + c(col)
    cells = by_columns.select(idx.alias("i"), "n", *(["r"] if rewards else []), *(["n0"] if starts else []))
    return SparkSparseCounts(spec, stationary, cells, quantum if rewards else None, cached=by_columns)
