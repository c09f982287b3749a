"""Reading the logs into Spark with the standard column names, and the row expressions the checks share.

The Spark twin of the renaming and type checks of :func:`privaudit.data.io.scan_logs`;
:func:`nan_or_inf` and :func:`clipped_reward` are used by both the fatal rules
(:mod:`privaudit.data.spark.fatal_rules`) and bounding (:mod:`privaudit.data.spark.bounding`).
"""

from __future__ import annotations

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from privaudit.core.errors import LogReadError, ValidationFailed
from privaudit.core.spec import REQUIRED_COLUMNS, STANDARD_COLUMNS, DomainSpec
from privaudit.data.spark.session import _reason, spark_session

_INT = ("step", "state", "action", "next_state")


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
    next_state, unit_id`` and the optional flags and ``features`` that exist
    (``unit_id`` is a copy of the episode id when each episode is its own
    unit; ``features`` is only checked, as validation checks it: the counts
    never read it, and Spark prunes it from their jobs).

    Raises
    ------
    LogReadError
        The path cannot be read.
    ValidationFailed
        A required column is missing or has an unusable type.
    """
    if isinstance(source, DataFrame):
        df = source
        names = set(df.columns)
    else:
        spark = spark or spark_session()
        try:  # Spark Connect reads lazily: the schema (df.columns) is where a missing path fails
            df = spark.read.option("recursiveFileLookup", "true").parquet(str(source))
            names = set(df.columns)
        except (PySparkException, Py4JJavaError) as e:  # a missing path, not Parquet, no file system for it
            raise LogReadError(f"{source}: Spark could not read the logs ({_reason(e)}).") from None
    unit_is_episode = spec.unit_column is None
    required = list(REQUIRED_COLUMNS) + ([] if unit_is_episode else ["unit_id"])
    missing = [c for c in required if spec.column(c) not in names]
    if missing:
        raise ValidationFailed("the logs break fatal validation rules: missing_column ("
                               + ", ".join(f"'{spec.column(c)}' ({c})" for c in missing) + ").")
    wanted = [c for c in STANDARD_COLUMNS if not (c == "unit_id" and unit_is_episode)]
    cols = [F.col(f"`{spec.column(c)}`").alias(c) for c in wanted if spec.column(c) in names]
    if unit_is_episode:
        cols.append(F.col(f"`{spec.column('episode_id')}`").alias("unit_id"))
    df = df.select(cols)
    bad = [f"{c} ({df.schema[c].dataType.simpleString()})" for c in df.columns if not _usable(c, df.schema[c].dataType)]
    if bad:
        raise ValidationFailed("the logs break fatal validation rules: column_type (" + ", ".join(bad)
                               + "). Integers for step/state/action/next_state, numbers for reward, booleans "
                               "for flags, integer or string ids, lists of numbers for features.")
    return df


def _usable(std: str, t: T.DataType) -> bool:
    if std in _INT:
        return isinstance(t, T.IntegralType)
    if std == "reward":
        return isinstance(t, T.NumericType)
    if std in ("terminated", "truncated"):
        return isinstance(t, T.BooleanType)
    if std == "features":
        return isinstance(t, T.ArrayType) and isinstance(t.elementType, T.NumericType)
    return isinstance(t, (T.IntegralType, T.StringType))


def nan_or_inf(x):
    """True where the number ``x`` is NaN or +-infinity, False where finite, null where null."""
    return F.isnan(x.cast("double")) | (F.abs(x.cast("double")) == float("inf"))


def clipped_reward(spec: DomainSpec):
    """The reward (double) clipped into the spec's ``reward_range`` (what bounding keeps, before scaling)."""
    lo, hi = spec.reward_range
    return F.least(F.greatest(F.col("reward").cast("double"), F.lit(float(lo))), F.lit(float(hi)))
