"""Prepared logs on Spark: read, checked against the fatal rules and bounded once per run, cached on the cluster.

The Spark mirror of :mod:`privaudit.data.prepare`: every consumer of a run (the count release, DP-PBB's
capped counts, the behaviour-value and evaluation statistics) reads the one bounded DataFrame of a
:class:`SparkPreparedLogs`, so Spark reads, checks and bounds the logs once per run.

1. read (:func:`privaudit.data.spark.logs.read_logs`: standard names, usable types);
2. the fatal rules (:func:`privaudit.data.spark.fatal_rules.check_fatal_rules`, one Spark action);
3. contribution bounding (:func:`privaudit.data.spark.bounding.bound_contributions`: keep k episodes per
   unit, steps h < H, rewards clipped and scaled, returns clipped; its report in one Spark action);
4. the data holder's repair limit (:func:`privaudit.data.repairs.check_repairs`), before anything is counted;
5. the bounded frame cached on the cluster (``persist``: memory, then disk), materialized by the first job
   that counts it; :meth:`SparkPreparedLogs.close` drops it.

Only per-cell aggregates leave the cluster (:mod:`privaudit.data.spark.counts`, as Arrow). The reports are
facts about the private data, for the data holder only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import BoundingReport
from privaudit.data.repairs import RepairLimit, check_repairs
from privaudit.data.spark.bounding import bound_contributions, cap_per_cell
from privaudit.data.spark.counts import SparkSparseCounts, exact_counts, to_polars
from privaudit.data.spark.fatal_rules import check_fatal_rules
from privaudit.data.spark.logs import read_logs
from privaudit.data.spark.session import spark_errors, spark_session

__all__ = ["SparkPreparedLogs", "prepare_spark_logs", "logs_name"]


def logs_name(source) -> str:
    """How messages and the private log name the logs: the path or URL as given, or 'a Spark DataFrame'."""
    return str(source) if isinstance(source, (str, Path)) else "a Spark DataFrame"


@dataclass(frozen=True, repr=False)
class SparkPreparedLogs:
    """Logs that passed the fatal rules on Spark, with their bounded view cached on the cluster. PRIVATE.

    Attributes
    ----------
    source : str, Path or pyspark DataFrame
        What Spark read (a path Spark sees, or a DataFrame: a notebook's table).
    spec : DomainSpec
        The spec they were checked and bounded under.
    session : SparkSession or None
        The session that read a path (None for a DataFrame: its own session).
    validation : dict[str, int]
        The fatal rules' counts (all 0: the logs passed;
        :func:`privaudit.data.spark.fatal_rules.fatal_rule_counts`). PRIVATE.
    bounding : BoundingReport
        What bounding dropped or clipped (PRIVATE), the same report polars gives.
    repairs : RepairLimit or None
        The repair limit the bounding report was checked against (None: not checked here).
    bounded : pyspark DataFrame
        Standard columns after keep-k, the cut at H, reward scaling and return
        clipping (:func:`privaudit.data.spark.bounding.bound_contributions`);
        cached (``persist``) unless prepared with ``cache=False``. After
        :meth:`with_cell_cap`, the capped rows (not cached themselves: each
        consumer aggregates them once).
    engine : "spark"
        Which engine prepared the logs (``privaudit.data.prepare.PreparedLogs.engine`` is "polars").
    """

    source: Any
    spec: DomainSpec
    session: Any
    validation: dict
    bounding: BoundingReport
    repairs: RepairLimit | None
    bounded: DataFrame
    cached: DataFrame | None = None
    _counted: dict = field(default_factory=dict, init=False, compare=False)  # this view's uncapped cells

    engine: ClassVar[str] = "spark"

    @property
    def path(self) -> str:
        """The logs' name for messages (the path as given, or 'a Spark DataFrame')."""
        return logs_name(self.source)

    def check_spec(self, spec: DomainSpec) -> None:
        """Raise UsageError unless ``spec`` is the spec these logs were prepared under."""
        if spec.hash() != self.spec.hash():
            raise UsageError(f"{self.path}: the logs were prepared under another spec "
                             f"(hash {self.spec.hash()}, given {spec.hash()}); prepare them with this spec.")

    def with_cell_cap(self, max_per_cell: int | None, *, stationary: bool) -> "SparkPreparedLogs":
        """These logs with at most c steps per unit and cell (:func:`privaudit.data.spark.bounding.cap_per_cell`).

        The Spark twin of ``privaudit.data.prepare.PreparedLogs.with_cell_cap``:
        the same kept rows. None returns ``self``. The capped view shares the
        cache of ``self`` (closing either drops it).

        Raises
        ------
        UsageError
            c not an integer >= 1; the logs were already capped.
        """
        if max_per_cell is None:
            return self
        if self.bounding.max_per_cell is not None:
            raise UsageError(f"{self.path}: the logs are already capped at c={self.bounding.max_per_cell} "
                             "per cell; cap the uncapped prepared logs instead.")
        capped, report = cap_per_cell(self.bounded, self.bounding, max_per_cell, stationary=stationary)
        return replace(self, bounded=capped, bounding=report)

    def restricted(self, keep) -> "SparkPreparedLogs":
        """These logs with ``keep`` (a filter of whole privacy units on a pyspark DataFrame, e.g.
        ``ope.split.part_of``) applied to ``bounded``; the twin of ``PreparedLogs.restricted``. The cells
        a previous :meth:`count_cells` kept are not carried over (``_counted`` is not an ``__init__``
        field: ``replace`` starts it empty), and the cache stays shared (closing either drops it)."""
        return replace(self, bounded=keep(self.bounded))

    def count_cells(self, *, stationary: bool, rewards: bool = True, quantum: int | None = None) -> SparkSparseCounts:
        """The exact cells of ``bounded`` (:func:`privaudit.data.spark.counts.exact_counts`). PRIVATE.

        Cached on the cluster, fetched by table and step h; ``close()`` drops them.
        On uncapped cached logs (a run with several consumers), the cells also count their step-0
        rows, so that a later :meth:`start_counts` reads them instead of passing over the rows.

        Raises
        ------
        EngineError
            Spark failed (one line).
        """
        shared = self.bounding.max_per_cell is None and self.cached is not None  # uncapped, several consumers
        with spark_errors("counting the logs"):
            counts = exact_counts(self.bounded, self.spec, stationary=stationary, rewards=rewards, quantum=quantum,
                                  starts=shared)
        if shared:
            self._counted["cells"] = counts
        return counts

    def start_counts(self) -> np.ndarray:
        """Episodes starting in each state (step 0 of each kept episode), shape (S,), int64. PRIVATE.

        From the (h, s, a) collection of this view's cells when :meth:`count_cells` counted them (the
        release: no job of its own, or a job over the cached cells); else one aggregation by Spark. S
        rows at most come back (Arrow).
        """
        counted = self._counted.get("cells")
        if counted is not None:
            with spark_errors("counting the start states"):
                return counted.start_counts()
        with spark_errors("counting the start states"):
            st = to_polars(self.bounded.filter(F.col("step") == 0)
                           .groupBy(F.col("state").cast("long").alias("state"))
                           .agg(F.count(F.lit(1)).cast("long").alias("n")))
        out = np.zeros(self.spec.S, dtype=np.int64)
        out[st["state"].to_numpy()] = st["n"].to_numpy()
        return out

    def close(self) -> None:
        """Drop the cached bounded rows from the cluster (best effort: a session that is gone dropped them)."""
        if self.cached is not None:
            try:
                self.cached.unpersist()
            except (PySparkException, Py4JError, ConnectionError):
                pass

    def __repr__(self) -> str:  # private counts: shown only through the reports' own summaries
        return f"SparkPreparedLogs(source={self.path!r}, spec_hash={self.spec.hash()!r})"


def prepare_spark_logs(source, spec: DomainSpec, *, spark=None, repairs: RepairLimit | None = None,
                       cache: bool = True) -> SparkPreparedLogs:
    """Read, check the fatal rules and bound the logs once with Spark; stop on large repairs.

    The Spark twin of :func:`privaudit.data.prepare.prepare_logs`.

    Parameters
    ----------
    source : str, Path or pyspark DataFrame
        A Parquet file or folder of parts Spark reads (local, HDFS, cloud
        storage URL), or a DataFrame (e.g. ``spark.table(...)``).
    spec : DomainSpec
    spark : SparkSession or str, optional
        The session (classic or Spark Connect), a master URL (``local[4]``,
        ``yarn``...) or a Spark Connect URL ``sc://HOST:PORT``
        (:func:`privaudit.data.spark.session.spark_session`); None: the active
        session or ``local[*]`` for a path, the DataFrame's own for a DataFrame.
    repairs : RepairLimit, optional
        The data holder's limit on what bounding may change, checked on the
        bounding report before anything is counted; None: not checked.
    cache : bool
        Persist the bounded rows on the cluster (a run with several consumers);
        False for a single consumer (:func:`privaudit.data.spark.engine.spark_sparse_counts`).

    Returns
    -------
    SparkPreparedLogs

    Raises
    ------
    UsageError
        No Java runtime, a malformed Spark Connect URL.
    LogReadError
        Spark cannot read the path.
    ValidationFailed
        A missing or mistyped column, or a fatal rule broken (counts per rule).
    RepairsRefused
        Bounding changes a larger share of the logs than ``repairs`` allows (nothing counted).
    EngineError
        Spark itself failed (one line; nothing was returned).

    Notes
    -----
    Two Spark actions: the fatal rules' counts and the bounding report. The
    bounded rows are cached lazily: the first count job materializes them,
    the next ones read the cache.
    """
    session = spark_session(spark) if isinstance(spark, str) else spark
    if session is None and isinstance(source, (str, Path)):
        session = spark_session()
    with spark_errors("reading, checking and bounding the logs"):
        df = read_logs(source, spec, session)
        validation = check_fatal_rules(df, spec)
        bounded, report = bound_contributions(df, spec, by_unit=cache)  # cached: partitioned by unit
    if repairs is not None:
        check_repairs(report, repairs, logs_name(source))  # before anything is counted or any noise drawn
    cached = None
    if cache:
        with spark_errors("caching the bounded logs"):
            cached = bounded = bounded.persist()
    return SparkPreparedLogs(source=source, spec=spec, session=session, validation=validation, bounding=report,
                             repairs=repairs, bounded=bounded, cached=cached)
