"""Whether the Spark tests can run here, the one test SparkSession, the Spark tests' logs, and the
quiet-start test's CLI run in a fresh JVM.

CI (``.ci/run``) sets ``PRIVAUDIT_REQUIRE_SPARK=1``: there a missing pyspark or
Java fails the run instead of skipping the Spark tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from privaudit.core.spec import DomainSpec
from tests._release_logs import random_log, spec_doc

REPO = Path(__file__).resolve().parents[1]

REQUIRE_SPARK = os.environ.get("PRIVAUDIT_REQUIRE_SPARK") == "1"

# JVM options for many tiny jobs: the C1 compiler only (warms up in a fraction of C2's CPU time) and the
# serial collector (no GC threads competing for the 2 cores). Measured on the spark tests' count job:
# JVM CPU of the first run 17 s vs 38 s with the defaults, 4-5 s vs 10-13 s for the next ones.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_missing() -> str | None:
    """Why the Spark engine cannot run here (None: it can)."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (python -m pip install -e '.[spark]')"
    from privaudit.core.errors import UsageError
    from privaudit.data.spark.session import ensure_java

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


def spark_test_logs(tmp_path: Path, *, ids: str, k: int, n_units: int, parts: int = 1, seed: int = 5):
    """Random logs (120 episodes, H=4, S=5, A=3, unit column ``patient``) in ``tmp_path`` and their spec.

    ``ids``: "int", "string" (non-ASCII text ids, text units) or "negative"; ``parts`` > 1 writes a folder
    of Parquet parts (rows of one episode may sit in different parts). Returns (path, DomainSpec).
    """
    H, S, A = 4, 5, 3
    rng = np.random.default_rng(seed)
    df = random_log(rng, 120, H=H, S=S, A=A, terminals=(4,), max_len=H + 2, n_units=n_units,
                    reward_spill=0.3)
    if ids == "string":  # non-ASCII text ids; units as text too
        df = df.with_columns(("épisode-€-" + pl.col("episode_id").cast(pl.String)).alias("episode_id"),
                             ("p" + pl.col("patient").cast(pl.String)).alias("patient"))
    elif ids == "negative":
        df = df.with_columns((-pl.col("episode_id") * 7919 - 3).alias("episode_id"))
    spec = DomainSpec.from_dict(spec_doc(H=H, S=S, A=A, k=k, terminals=(4,), unit_column="patient"))
    if parts == 1:
        path = tmp_path / "logs.parquet"
        df.write_parquet(path)
    else:
        path = tmp_path / "parts"
        path.mkdir()
        for i in range(parts):  # rows of one episode may sit in different parts
            df[i::parts].write_parquet(path / f"part-{i:03d}.parquet")
    return path, spec


#: r(s') of :func:`spark_pbb_logs`: exact binary fractions, so both engines' float sums (returns, clipping) agree.
PUBLIC_REWARD = {0: 1.0, 1: 0.5, 2: 0.25, 3: 0.0, 4: 0.75}


def spark_pbb_logs(tmp_path: Path, *, ids: str, k: int, n_units: int, parts: int = 1, seed: int = 5,
                   return_bound=None):
    """:func:`spark_test_logs` whose rewards are the public r(s') of :data:`PUBLIC_REWARD` (DP-PBB's input).

    Returns (path, spec document with ``public_reward`` and, if given, ``return_bound``, DomainSpec).
    """
    path, _ = spark_test_logs(tmp_path, ids=ids, k=k, n_units=n_units, parts=parts, seed=seed)
    files = [path] if parts == 1 else sorted(path.iterdir())
    for f in files:
        df = pl.read_parquet(f)
        df.with_columns(reward=pl.col("next_state").replace_strict(PUBLIC_REWARD, return_dtype=pl.Float64)
                        ).write_parquet(f)
    doc = spec_doc(H=4, S=5, A=3, k=k, terminals=(4,), unit_column="patient", public_reward=PUBLIC_REWARD)
    if return_bound is not None:
        doc["return_bound"] = list(return_bound)
    return path, doc, DomainSpec.from_dict(doc)


#: The quiet-start test (tests/data/spark/test_spark_connect.py) whose CLI run :func:`start_quiet_cli_release` starts.
QUIET_START_TEST = "tests/data/spark/test_spark_connect.py::test_cli_spark_start_is_quiet"


class QuietCliRelease:
    """``privaudit release --engine spark --master local[1]`` in a fresh Python process, hence a fresh JVM.

    Started by :func:`start_quiet_cli_release`; :meth:`result` waits for it. Its stdout and stderr go to
    files (no pipe to fill while nobody reads it).
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.logs, self.spec = spark_test_logs(folder, ids="int", k=2, n_units=20)
        spec_file = folder / "spec.json"
        spec_file.write_text(json.dumps(spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient")))
        self.out = folder / "spark"
        self.args = [sys.executable, "-c", "from privaudit.cli import main; main()", "release", str(self.logs),
                     "--spec", str(spec_file), "--rho", "1", "--seed", "5", "--stationary", "--out", str(self.out),
                     "--engine", "spark", "--master", "local[1]", "--accept-repairs"]  # heavy repairs on purpose
        env = {**os.environ, "SPARK_SUBMIT_OPTS": TEST_JVM_OPTIONS, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
            self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=env, text=True)

    def result(self, timeout: float = 900) -> subprocess.CompletedProcess:
        """Wait for the run (at most ``timeout`` s); its exit code, stdout and stderr."""
        code = self.proc.wait(timeout=timeout)
        return subprocess.CompletedProcess(self.args, code, (self.folder / "stdout").read_text(),
                                           (self.folder / "stderr").read_text())

    def stop(self) -> None:
        """Kill the run if it is still going (a session that ended before its test ran)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_quiet_cli_release(folder: Path) -> QuietCliRelease:
    """Start the quiet-start test's CLI run in ``folder`` (its logs, spec and outputs go there)."""
    return QuietCliRelease(folder)
