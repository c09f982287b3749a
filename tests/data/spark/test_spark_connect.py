"""Spark Connect (``--remote sc://HOST:PORT``, a Connect session in Python) and a quiet Spark start.

The Connect server is Spark's own, started inside the test session's JVM (``connect_url`` in
conftest.py); the clients run in fresh Python processes, as a user's would (a process holds either
a classic session or a Connect one). The quiet-start test starts one JVM the way the CLI does.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys

import polars as pl
import pytest

from tests._spark import skip_without_spark, start_quiet_cli_release

skip_without_spark()

from click.testing import CliRunner  # noqa: E402

from privaudit.cli import main  # noqa: E402
from privaudit.data.prepare import prepare_logs  # noqa: E402
from privaudit.privacy import ledger as ledger_mod  # noqa: E402
from privaudit.data.spark import session as spark_sessions  # noqa: E402
from privaudit.data.counts import sparse_counts  # noqa: E402
from privaudit.data.repairs import RepairLimit  # noqa: E402
from privaudit.release.tabular import ReleaseOptions, release_logs  # noqa: E402
from tests._release_logs import spec_doc  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.data.spark.test_spark_engine import Q, _logs  # noqa: E402

pytestmark = pytest.mark.spark

SPEC = dict(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient")


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -c code args...`` from the repository root (it imports this checkout's privaudit)."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=900)


CLI = "from privaudit.cli import main; main()"


def _noise(stderr: str) -> list[str]:
    """Lines of stderr that are Spark's chatter: start-up notices, log4j INFO/WARN lines, Python warnings."""
    log = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN) ")
    return [ln for ln in stderr.splitlines()
            if spark_sessions.is_startup_notice(ln) or log.match(ln) or "Warning:" in ln]


def _same_release(a, b):
    for f in ("visits.parquet", "rewards.parquet", "transitions.parquet"):
        assert pl.read_parquet(a / f).equals(pl.read_parquet(b / f)), f


@pytest.mark.slow
def test_cli_release_through_spark_connect_equals_polars(spark, connect_url, tmp_path):
    """release --engine spark --remote sc://...: the polars release, byte for byte; a quiet stderr."""
    path, spec = _logs(tmp_path, ids="string", k=2, n_units=30)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(**SPEC)))
    common = ["--spec", str(spec_file), "--rho", "1", "--seed", "3", "--per-step"]
    res = _run(CLI, "release", str(path), *common, "--out", str(tmp_path / "connect"), "--engine", "spark",
               "--remote", connect_url, "--accept-repairs")  # the random logs are bounded heavily on purpose
    assert res.returncode == 0, res.stderr
    assert not _noise(res.stderr), res.stderr
    ref = release_logs(path, spec, rho=1, out=tmp_path / "polars", seed=3, stationary=False,
                       options=ReleaseOptions(repairs=RepairLimit(accept=True)))
    _same_release(ref.out, tmp_path / "connect")


API = """
import json, sys
from pyspark.sql import SparkSession
from privaudit.core.spec import load_spec
from privaudit.data.spark import engine as se
url, logs, spec, out, q = sys.argv[1:]
session = SparkSession.builder.remote(url).getOrCreate()
counts, report = se.spark_sparse_counts(session.read.parquet(logs), load_spec(spec), stationary=True,
                                        quantum=int(q), max_per_cell=2)
counts.cells.write_parquet(out)
print(json.dumps({"session": type(session).__module__, "report": report.to_dict()}))
"""


@pytest.mark.slow
def test_python_api_takes_a_spark_connect_session(spark, connect_url, tmp_path):
    """A notebook's Connect session and DataFrame: the polars counts and bounding facts (per-cell cap too)."""
    path, spec = _logs(tmp_path, ids="int", k=3, n_units=25, seed=11)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(**{**SPEC, "k": 3})))
    res = _run(API, connect_url, str(path), str(spec_file), str(tmp_path / "cells.parquet"), str(Q))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["session"] == "pyspark.sql.connect.session"
    prepared = prepare_logs(path, spec).with_cell_cap(2, stationary=True)
    cols = [pl.col(c).cast(pl.Int32) for c in ("step", "state", "action", "next_state")]
    exp = sparse_counts(prepared.bounded.select(cols + [pl.col("reward")]).collect(), spec, stationary=True,
                        quantum=Q)
    expected_report = prepared.bounding.with_cell_kept(int(exp.cells["n"].sum()))
    assert expected_report.cell_steps_dropped > 0
    assert pl.read_parquet(tmp_path / "cells.parquet").equals(exp.cells)
    assert got["report"] == expected_report.to_dict()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("remote,code,needle", [
    (None, 1, "no Spark Connect server answers at 127.0.0.1:"),  # nothing listens on a free port
    ("sc://", 2, "is not a Spark Connect URL"),
    ("http://127.0.0.1:15002", 2, "--remote takes a Spark Connect URL"),
])
def test_unreachable_or_malformed_remote_is_one_line_nothing_written_or_charged(tmp_path, remote, code, needle):
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=10)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(**SPEC)))
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 10)
    before = led.read_text()
    url = remote or f"sc://127.0.0.1:{_free_port()}"
    res = CliRunner().invoke(main, ["release", str(path), "--spec", str(spec_file), "--rho", "1", "--stationary",
                                    "--out", str(tmp_path / "rel"), "--ledger", str(led), "--engine", "spark",
                                    "--remote", url])
    err = res.output.strip()
    assert res.exit_code == code and needle in err and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 or err.startswith("Usage:"), err  # one line, or click's usage block
    assert not (tmp_path / "rel").exists() and led.read_text() == before


@pytest.mark.parametrize("args,needle", [
    (["--remote", "sc://h:1"], "--remote needs --engine spark"),
    (["--engine", "spark", "--master", "local[1]", "--remote", "sc://h:1"], "not both"),
    (["--engine", "spark", "--master", "sc://h:1"], "use --remote sc://h:1"),
])
def test_remote_and_master_usage_errors(tmp_path, args, needle):
    res = CliRunner().invoke(main, ["release", "x.parquet", "--spec", "s.json", "--rho", "1", "--out",
                                    str(tmp_path / "rel"), *args])
    assert res.exit_code == 2 and needle in res.output, res.output


# ------------------------------------------------------------------ Spark's start-up notices stay off stderr


def test_startup_notices_are_dropped_and_other_lines_kept(monkeypatch):
    sink = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", sink)
    lines = ["WARNING: Using incubator modules: jdk.incubator.vector",
             "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties",
             'Setting default log level to "WARN".',
             "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
             "26/12/01 09:36:50 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform...",
             "26/12/01 09:37:01 ERROR Executor: Exception in task 0.0 in stage 1.0",
             "java.lang.OutOfMemoryError: Java heap space",
             "Error: A JNI error has occurred, please check your installation and try again"]
    spark_sessions._forward_stderr(io.BytesIO("\n".join(lines).encode() + b"\n"))
    assert sink.getvalue().splitlines() == lines[5:]


@pytest.mark.slow
def test_cli_spark_start_is_quiet(early_runs, tmp_path):
    """A JVM started by the CLI prints none of Spark's start-up notices (log4j at ERROR from its first line).

    The CLI run (a fresh process, so a fresh JVM: ``release --engine spark --master local[1]``) is started
    with the session's first test (``early_runs`` in conftest.py) and runs beside the other tests."""
    run = early_runs.get("quiet_start") or start_quiet_cli_release(tmp_path)
    res = run.result()
    assert res.returncode == 0, res.stderr
    assert "contribution bounding" in res.stderr and not _noise(res.stderr), res.stderr
    ref = release_logs(run.logs, run.spec, rho=1, out=tmp_path / "polars", seed=5, stationary=True,
                       options=ReleaseOptions(repairs=RepairLimit(accept=True)))
    _same_release(ref.out, run.out)
