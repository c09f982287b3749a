"""Apache Spark engine for the data side of a release: fatal rules, bounding, exact counts.

For logs too large for one machine (10^8-10^9 rows on a data platform that
runs Spark). The same three steps as the polars path
(``privaudit.data.validate``, ``privaudit.data.bounding``,
``privaudit.data.counts``) run as Spark DataFrame jobs on the cluster; only
the exact sparse cell table (one row per *observed* cell: flat index, count,
reward sum in integer units of 1/quantum) comes back to the driver, as Arrow,
into the same :class:`privaudit.data.counts.SparseCounts` the polars path
builds. Noise, ledger, manifest and artifacts then run on the driver,
unchanged.

Identity with the polars path:

* keep-k ranks a unit's episodes by the portable key
  ``(xxhash64(cast(episode_id as string)), cast(episode_id as string))``,
  Spark's built-in XXH64 with its fixed seed 42 (= ``PRIORITY_HASH_SEED``), the key of
  :func:`privaudit.data.bounding.episode_priority`;
* rewards are clipped, scaled and rounded per row in float64 with the same
  operations, then summed as int64 units of 1/quantum (float sums are not
  reproducible across partitions, so the engine requires ``quantum`` when it
  sums rewards);
* cells are the same flat index ``((h*S + s)*A + a)*S + s'``;
* the fatal rules count what validation counts, rule by rule
  (:func:`~privaudit.data.spark.fatal_rules.fatal_rule_counts`; ``return_below_bound`` too when the spec
  declares a ``return_bound``), so Spark refuses the logs polars refuses.

The modules, in the order :func:`spark_sparse_counts` runs them:

* :mod:`privaudit.data.spark.session`: sessions (classic JVM started quiet, Spark
  Connect) and :func:`~privaudit.data.spark.session.spark_errors`;
* :mod:`privaudit.data.spark.logs`: :func:`~privaudit.data.spark.logs.read_logs`
  (standard names, usable types);
* :mod:`privaudit.data.spark.fatal_rules`: the fatal validation rules;
* :mod:`privaudit.data.spark.bounding`: keep-k, cut at H, reward and return
  clipping, per-cell cap;
* :mod:`privaudit.data.spark.counts`: the exact cells
  (:class:`~privaudit.data.spark.counts.SparkSparseCounts`).

Failures of Spark itself (the JVM cannot start, a query fails analysis, a
job fails: out of memory, a lost executor, a corrupt part; the JVM dies; a
Spark Connect server cannot be reached) are turned into one-line
:class:`privaudit.core.errors.EngineError` messages by
:func:`~privaudit.data.spark.session.spark_errors`; they
happen before any output is written or any budget charged.

Sessions: a classic session (``local[*]``, ``spark://``, ``yarn``; its JVM
started by :func:`~privaudit.data.spark.session.spark_session` with Spark's log at ERROR from the first
line and its start-up notices dropped from stderr), a Spark Connect session
(``sc://HOST:PORT``, :func:`~privaudit.data.spark.session.connect_session`: no JVM here), or any session
the caller passes (a notebook's ``spark``, classic or Connect).

Driver memory: the exact cells stay cached on the cluster; the (H, S, A)
tables come back once and the transition cells one step h at a time
(:class:`~privaudit.data.spark.counts.SparkSparseCounts`), so the driver holds one (S, A, S) slice.

pyspark is imported only in :mod:`privaudit.data.spark` (the ``privaudit[spark]`` extra).
"""

from __future__ import annotations

from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import BoundingReport
from privaudit.data.spark.counts import SparkSparseCounts
from privaudit.data.spark.prepare import SparkPreparedLogs, prepare_spark_logs
from privaudit.data.spark.session import spark_errors


def spark_sparse_counts(source, spec: DomainSpec, *, spark=None, stationary: bool = False,
                        rewards: bool = True, quantum: int | None = None,
                        max_per_cell: int | None = None) -> tuple[SparkSparseCounts, BoundingReport]:
    """Read, check the fatal rules, bound and count logs with Spark (the whole data side of a release).

    Parameters
    ----------
    source : pyspark DataFrame, str, Path or SparkPreparedLogs
        A DataFrame (e.g. a Databricks table; classic or Spark Connect), a
        path Spark reads, or logs a run already prepared
        (:func:`~privaudit.data.spark.prepare.prepare_spark_logs`: not read,
        checked or bounded again).
    spec : DomainSpec
    spark : SparkSession or str, optional
        The session to read a path with (a notebook passes its ``spark``,
        classic or Spark Connect), or a master / Spark Connect URL.
    stationary, rewards, quantum
        As :func:`exact_counts`.
    max_per_cell : int, optional
        Cap each unit's steps per cell at c (:func:`cap_per_cell`).

    Returns
    -------
    counts : SparkSparseCounts
        Exact cell counts, cached on the cluster, fetched to the driver
        table by table and step by step (PRIVATE: the release noises them).
        ``counts.close()`` drops the cache.
    report : BoundingReport
        PRIVATE bounding facts for the data holder.

    Raises
    ------
    LogReadError, ValidationFailed, UsageError
    EngineError
        Spark itself failed (:func:`spark_errors`); nothing was returned.
    """
    if isinstance(source, SparkPreparedLogs):
        source.check_spec(spec)
        prepared = source
    else:  # one consumer: the bounded rows are not cached
        prepared = prepare_spark_logs(source, spec, spark=spark, cache=False)
    capped = prepared.with_cell_cap(max_per_cell, stationary=stationary)
    counts = capped.count_cells(stationary=stationary, rewards=rewards, quantum=quantum)
    report = capped.bounding
    if report.max_per_cell is not None and report.cell_steps_dropped is None:
        # the cap's drop count from the rows counted (no row of validated logs sits in a terminal state)
        with spark_errors("counting the logs"):
            report = report.with_cell_kept(int(counts.visits.sum()))
    return counts, report
