"""Whether the Spark tests can run here, and the one test SparkSession.

CI (``.ci/run``) sets ``PRIVAUDIT_REQUIRE_SPARK=1``: there a missing pyspark or
Java fails the run instead of skipping the Spark tests.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

REQUIRE_SPARK = os.environ.get("PRIVAUDIT_REQUIRE_SPARK") == "1"

# JVM options for many tiny jobs: the C1 compiler only (warms up in a fraction of C2's CPU time) and the
# serial collector (no GC threads competing for the 2 cores). Measured on the spark tests' count job:
# JVM CPU of the first run 17 s vs 38 s with the defaults, 4-5 s vs 10-13 s for the next ones.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_missing() -> str | None:
    """Why the Spark engine cannot run here (None: it can)."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (python -m pip install -e '.[spark]')"
    from privaudit.errors import UsageError
    from privaudit.stats.spark_engine import ensure_java

    try:
        ensure_java()
    except UsageError as e:
        return str(e)
    return None


def skip_without_spark() -> None:
    """Skip the calling test module (module level) unless Spark can run; in CI, fail instead."""
    why = spark_missing()
    if why is None:
        return
    if REQUIRE_SPARK:
        raise RuntimeError(f"PRIVAUDIT_REQUIRE_SPARK=1 but the Spark tests cannot run: {why}")
    pytest.skip(why, allow_module_level=True)


def make_session():
    """The test session: local[2], 2 shuffle partitions, no UI, quiet, JVM tuned for tiny jobs."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("privaudit-tests")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
         .config("spark.driver.memory", "512m").config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
         .config("spark.sql.session.timeZone", "UTC")
         # a Spark Connect server, if a test starts one (start_connect_server), on a free loopback port
         .config("spark.connect.grpc.binding.address", "127.0.0.1").config("spark.connect.grpc.binding.port", "0")
         .getOrCreate())
    s.sparkContext.setLogLevel("FATAL")  # failed tasks of the error tests would print stack traces
    return s


def start_connect_server(session) -> str:
    """Start a Spark Connect server inside the test session's JVM; its URL ``sc://127.0.0.1:PORT``.

    The server is Spark's own (``SparkConnectService``, as ``sbin/start-connect-server.sh`` runs it), on
    the test JVM: no second JVM to start. A client in another process talks to it over gRPC exactly as to
    a cluster's server.
    """
    jvm = session._jvm
    jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(session._jsc.sc())
    service = getattr(getattr(jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
    return f"sc://127.0.0.1:{service.localPort()}"
