"""Spark's failures as one line (``spark_errors``): out-of-memory advice also when Spark wraps the error.

Spark seldom hands the ``OutOfMemoryError`` up as it is: a task's error aborts the job (a ``SparkException``
whose cause is the error), adaptive execution wraps several failed stages as
``STAGE_MATERIALIZATION_MULTIPLE_FAILURES`` (the first as the cause, the others suppressed), Spark Connect
sends the chain as text. Seen at 10^8 rows with a 4 GB driver (benchmarks/results/bench_spark_pipeline.md).
The first tests build the Java side as stand-ins (no JVM); the last one wraps a real ``OutOfMemoryError``
with Spark's own wrapper in the test session's JVM.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from py4j.protocol import Py4JJavaError  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402

from privaudit.core.errors import EngineError  # noqa: E402
from privaudit.data.spark.session import spark_errors  # noqa: E402

WRAPPER = ("org.apache.spark.SparkException: [STAGE_MATERIALIZATION_MULTIPLE_FAILURES] Multiple failures (2) in "
           "stage materialization: SQLSTATE: XX000")
ABORTED = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 12.0 failed 1 times, "
           "most recent failure: Lost task 1.0 in stage 12.0 (TID 40) (localhost executor driver): see its cause")
OOM = "java.lang.OutOfMemoryError: Java heap space"


class FakeThrowable:
    """What Py4J hands over for a Java exception, as far as ``spark_errors`` looks at it."""

    _target_id = "o1"

    def __init__(self, text, cause=None, suppressed=()):
        self.text, self.cause, self.suppressed = text, cause, list(suppressed)

    def toString(self):
        return self.text

    def getCause(self):
        return self.cause

    def getSuppressed(self):
        return self.suppressed


class GoneThrowable(FakeThrowable):
    """A Java exception whose JVM stopped answering: every call fails."""

    def toString(self):
        raise ConnectionError("the JVM is gone")

    getCause = getSuppressed = toString


def _message(exc) -> str:
    with pytest.raises(EngineError) as e:
        with spark_errors("validating the logs"):
            raise exc
    assert "\n" not in str(e.value)
    return str(e.value)


def _java(top) -> Py4JJavaError:
    return Py4JJavaError("An error occurred while calling o99.collectToPython.\n", top)


@pytest.mark.parametrize("where", ["cause_of_cause", "suppressed", "message_line", "connect_text"])
def test_a_wrapped_out_of_memory_error_gets_the_memory_advice(where):
    if where == "cause_of_cause":  # wrapper -> job aborted -> OutOfMemoryError
        exc = _java(FakeThrowable(WRAPPER, FakeThrowable(ABORTED, FakeThrowable(OOM))))
    elif where == "suppressed":  # the first failure is not the OOM; a suppressed one's cause is
        exc = _java(FakeThrowable(WRAPPER, FakeThrowable(ABORTED.replace("see its cause", "FetchFailed")),
                                  [FakeThrowable(ABORTED, FakeThrowable(OOM))]))
    elif where == "message_line":  # the details in later lines of the wrapper's own message
        exc = _java(FakeThrowable(f"{WRAPPER}\n1. {ABORTED}\n\tcaused by {OOM}\n2. {ABORTED}"))
    else:  # Spark Connect / a captured pyspark error: one Python exception whose text holds the chain
        exc = PySparkException(message=f"{WRAPPER}\n\nJVM stacktrace:\n{ABORTED}\nCaused by: {OOM}\n\tat x.y(z)")
    msg = _message(exc)
    assert msg.startswith("Spark ran out of memory while validating the logs ("), msg
    assert "STAGE_MATERIALIZATION_MULTIPLE_FAILURES" in msg and f"caused by {OOM}" in msg, msg
    assert "spark.driver.memory" in msg and "no budget was charged" in msg, msg


def test_a_plain_out_of_memory_error_is_not_repeated():
    msg = _message(_java(FakeThrowable(OOM)))
    assert f"({OOM})" in msg and "caused by" not in msg and "spark.driver.memory" in msg, msg


def test_a_wrapped_error_without_out_of_memory_gets_no_memory_advice():
    """The control: the same wrappers around a corrupt part are a plain Spark failure."""
    exc = _java(FakeThrowable(WRAPPER, FakeThrowable(ABORTED, FakeThrowable(
        "org.apache.parquet.io.ParquetDecodingException: Can not read value at 0 in block -1"))))
    msg = _message(exc)
    assert msg.startswith("Spark failed while validating the logs: ") and WRAPPER.split(": ", 1)[1][:40] in msg, msg
    assert "memory" not in msg, msg


def test_a_cause_chain_in_a_jvm_that_stopped_answering_still_gives_one_line():
    exc = Py4JJavaError("An error occurred while calling o7.count.\n", GoneThrowable(""))
    msg = _message(exc)
    assert msg.startswith("Spark failed while validating the logs: An error occurred while calling o7.count"), msg


@pytest.mark.spark
def test_spark_own_stage_materialization_wrapper_of_a_real_out_of_memory_error(spark):
    """Spark's own wrapper (``QueryExecutionErrors.multiFailuresInStageMaterializationError``) around a job
    aborted by a real ``OutOfMemoryError``, all made in the JVM, as Py4J delivers them."""
    jvm = spark._jvm
    aborted = jvm.org.apache.spark.SparkException(ABORTED.split(": ", 1)[1], jvm.java.lang.OutOfMemoryError(
        "Java heap space"))
    failures = jvm.java.util.ArrayList()
    failures.add(aborted)
    failures.add(jvm.org.apache.spark.SparkException("Job aborted due to stage failure: FetchFailed"))
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(failures).toList()  # a scala immutable Seq
    wrapped = jvm.org.apache.spark.sql.errors.QueryExecutionErrors.multiFailuresInStageMaterializationError(seq)
    assert "STAGE_MATERIALIZATION_MULTIPLE_FAILURES" in wrapped.toString()
    msg = _message(_java(wrapped))
    assert msg.startswith("Spark ran out of memory while validating the logs (") and f"caused by {OOM}" in msg, msg
    assert "spark.driver.memory" in msg, msg
