"""Shared pytest fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling

from tests._spy import heal_patches

#: BLAS thread-count variables set to 1 for the test run (unless already set), here, before any test module
#: imports numpy; pytest-xdist's workers and the CLI subprocesses of the tests inherit them.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# One BLAS thread per process: pytest-xdist already runs one worker per core, and the tests' matrices are small
# (the audits' learned attack fits a logistic regression on ~2,000 x 700 float32 features). With OpenBLAS's
# default of a thread per core, each worker's BLAS threads wait for a core the other worker holds, spinning:
# on the 2-core machine under load, one catalogue audit took 3.6 CPU s, 3.3 of them in the 100 L-BFGS steps,
# against 0.23 s with one thread (tests/audit/mechanisms/test_catalogue.py: 70 -> 10 CPU s), same results.
for _var in BLAS_THREAD_VARS:
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data"


@pytest.fixture
def repo_root() -> Path:
    return REPO


def tiny_spec_doc(H=3, S=4, A=2, k=1, terminals=(3,), unit_column=None, reward_range=(0.0, 1.0)):
    """A small valid spec document (dict) for tests."""
    return {
        "format_version": 1,
        "dataset_id": "tiny",
        "horizon": H,
        "n_states": S,
        "n_actions": A,
        "terminal_states": list(terminals),
        "reward_range": list(reward_range),
        "privacy_unit": {"column": unit_column, "max_episodes": k},
    }


@pytest.fixture
def tiny_spec_file(tmp_path) -> Path:
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(tiny_spec_doc()))
    return p


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession shared by every Spark test of the run (tests/_spark.py)."""
    from tests._spark import make_session, skip_without_spark

    skip_without_spark()
    s = make_session()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def connect_url(spark):
    """A Spark Connect server on the test session's JVM (tests/_spark.py); stopped with the session."""
    from tests._spark import start_connect_server

    return start_connect_server(spark)


@pytest.fixture(autouse=True)
def _heal_patches():
    """After each test (and after monkeypatch's undo): rebind what a patch left in modules imported meanwhile."""
    yield
    heal_patches()


@pytest.fixture(scope="session", autouse=True)
def early_runs(request, tmp_path_factory):
    """Slow subprocess checks started with the session's first test, for tests that wait for them later.

    The quiet-start test's CLI release (tests/_spark.py, :class:`QuietCliRelease`) starts its own JVM and
    takes ~50 s of CPU, nearly all in that JVM: started here, it runs on the second core while the
    single-threaded tests run on the first, and the test only waits for what is left of it. Started only
    when that test is selected, Spark can run here and the tests run in one process (under pytest-xdist
    both cores are busy already); the test starts the run itself otherwise (same command, same check), so
    no test depends on the order of the others.
    """
    runs = {}
    if "PYTEST_XDIST_WORKER" not in os.environ and any(item.nodeid == "tests/data/spark/test_spark_connect.py::test_cli_spark_start_is_quiet"
           for item in request.session.items):
        from tests._spark import spark_missing, start_quiet_cli_release

        if spark_missing() is None:
            runs["quiet_start"] = start_quiet_cli_release(tmp_path_factory.mktemp("quiet-start"))
    yield runs
    for run in runs.values():
        run.stop()


#: The test modules whose tests use the shared Spark session (the ``spark`` fixture, or ``connect_url`` on it).
#: Under pytest-xdist they all run on one worker: one JVM, one ``local[2]`` session, one Spark Connect server.
#: A test that uses the session from another module is a collection error (below), so this list cannot drift.
SPARK_SESSION_MODULES = frozenset({
    "tests/data/spark/test_spark_connect.py",
    "tests/data/spark/test_spark_engine.py",
    "tests/data/spark/test_spark_errors.py",
    "tests/data/spark/test_spark_pbb.py",
    "tests/data/spark/test_spark_stats.py",
    "tests/pipeline/test_pipeline_spark.py",
    "tests/pipeline/test_pipeline_spark_identity.py",
})
SPARK_SCOPE = "spark-session"


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Put the tests on the shared Spark session first, and refuse a Spark-session test outside
    :data:`SPARK_SESSION_MODULES`.

    First: under pytest-xdist their module group (one work unit, :func:`pytest_xdist_make_scheduler`) is the
    longest, so it starts at once on one worker while the other worker takes the rest. The reorder is stable
    and the same in every worker (xdist checks that the workers collected the same list).
    """
    stray = sorted({_module_of(item.nodeid) for item in items
                    if "spark" in getattr(item, "fixturenames", ())
                    and _module_of(item.nodeid) not in SPARK_SESSION_MODULES})
    if stray:
        raise pytest.UsageError(
            f"tests/conftest.py: {', '.join(stray)} use the shared Spark session (the `spark` fixture) but are not "
            "in SPARK_SESSION_MODULES: add them there, so that pytest-xdist runs them on the session's worker.")
    items.sort(key=lambda item: _module_of(item.nodeid) not in SPARK_SESSION_MODULES)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (pyproject's addopts): every test of :data:`SPARK_SESSION_MODULES` on one worker,
    the other tests one by one on whichever worker is free.

    Why not xdist's own ``xdist_group`` marker: pytest-xdist 3.5-3.8 groups by a ``@group`` suffix it writes
    into ``item._nodeid``, and pytest 9 reads a test's id from another attribute, so under pytest 9 the marker
    is silently ignored (pytest-xdist issue 1386) and the Spark tests ran on both workers, two JVMs on two
    cores. Grouping by module path works with every pytest and pytest-xdist the project allows.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    return SparkSessionScheduling(config, log)


class SparkSessionScheduling(LoadGroupScheduling):
    """xdist's group scheduling with one group: the modules of :data:`SPARK_SESSION_MODULES`."""

    def _split_scope(self, nodeid: str) -> str:
        if _module_of(nodeid) in SPARK_SESSION_MODULES:
            return SPARK_SCOPE
        return super()._split_scope(nodeid)
