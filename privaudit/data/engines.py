"""The engine that reads, checks and bounds a run's logs: polars on this machine, or Apache Spark.

:func:`prepare_on` is the one place an entry point (``train``, ``pipeline``, the release) turns logs
into prepared logs for its engine: :func:`privaudit.data.prepare.prepare_logs` (polars) or
:func:`privaudit.data.spark.prepare.prepare_spark_logs` (Spark). Both return prepared logs with the
same interface (``engine``, ``spec``, ``bounding``, ``bounded``, ``with_cell_cap``, ``restricted``,
``check_spec``, ``close``). pyspark is the optional extra ``privaudit[spark]``: :func:`spark_module` imports the
engine's modules only when Spark is asked for.
"""

from __future__ import annotations

import importlib

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.prepare import prepare_logs
from privaudit.data.repairs import RepairLimit

#: The engines every entry point accepts (``--engine``).
ENGINES = ("polars", "spark")


def spark_module(name: str):
    """The module ``privaudit.data.spark.<name>``, imported on demand (pyspark is optional).

    Raises
    ------
    UsageError
        pyspark is not installed (exit 2, before anything is read).
    """
    try:
        return importlib.import_module(f"privaudit.data.spark.{name}")
    except ImportError as e:
        raise UsageError(f"engine='spark' needs pyspark ({e}). Install it with: pip install 'privaudit[spark]' "
                         "(and a Java runtime).") from None


def prepare_on(engine: str, logs, spec: DomainSpec, *, spark=None, repairs: RepairLimit | None = None):
    """Validate (fatal rules) and bound ``logs`` once with ``engine``; stop on large repairs.

    Parameters
    ----------
    engine : {"polars", "spark"}
    logs : str, Path or pyspark DataFrame
        A Parquet file or folder of parts (Spark: any path it reads, or a DataFrame).
    spec : DomainSpec
    spark : SparkSession or str, optional
        Spark only: the session, a master URL or a Spark Connect URL.
    repairs : RepairLimit, optional
        The data holder's limit on what bounding may change (None: not checked).

    Returns
    -------
    privaudit.data.prepare.PreparedLogs or privaudit.data.spark.prepare.SparkPreparedLogs
        PRIVATE; call ``close()`` when the run is done (Spark drops its cached rows).

    Raises
    ------
    UsageError
        An unknown engine, ``spark`` with polars, pyspark missing.
    LogReadError, ValidationFailed, RepairsRefused
        As :func:`privaudit.data.prepare.prepare_logs`.
    EngineError
        Spark failed (one line; nothing returned).
    """
    if engine not in ENGINES:
        raise UsageError(f"`engine` must be 'polars' or 'spark'. Found {engine!r}.")
    if engine == "polars":
        if spark is not None:
            raise UsageError("`spark` (a session or master URL) needs `engine` 'spark'.")
        return prepare_logs(logs, spec, repairs=repairs)
    return spark_module("prepare").prepare_spark_logs(logs, spec, spark=spark, repairs=repairs)


__all__ = ["ENGINES", "prepare_on", "spark_module"]
