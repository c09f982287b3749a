"""The suite's own scheduling under pytest-xdist (tests/conftest.py): the Spark-session modules share one worker,
and every process runs one BLAS thread."""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest

from tests.conftest import (BLAS_THREAD_VARS, SPARK_SCOPE, SPARK_SESSION_MODULES, SparkSessionScheduling,
                            pytest_collection_modifyitems)


def _scope(nodeid: str) -> str:
    # _split_scope reads nothing of the scheduler's state: an instance without __init__ is enough.
    return SparkSessionScheduling._split_scope(object.__new__(SparkSessionScheduling), nodeid)


def test_every_spark_session_module_maps_to_one_scope():
    scopes = {_scope(f"{module}::test_x[param-1]") for module in SPARK_SESSION_MODULES}
    assert scopes == {SPARK_SCOPE}


@pytest.mark.parametrize("nodeid", ["tests/privacy/test_noise.py::test_a",
                                    "tests/data/test_counts.py::TestX::test_b[1-2]",
                                    "tests/pipeline/test_pipeline_spark_like.py::test_c"])
def test_other_tests_are_scheduled_one_by_one(nodeid):
    assert _scope(nodeid) == nodeid


def test_a_spark_test_outside_the_list_is_a_collection_error():
    """The list cannot drift: a module that uses the `spark` fixture but is not listed stops collection."""
    class Item:
        nodeid = "tests/release/test_new_spark_thing.py::test_x"
        fixturenames = ("tmp_path", "spark")

    with pytest.raises(pytest.UsageError, match="test_new_spark_thing.py.*SPARK_SESSION_MODULES"):
        pytest_collection_modifyitems(None, [Item()])


def test_the_tests_run_one_blas_thread():
    """tests/conftest.py sets the BLAS thread variables before numpy is imported (an explicit setting is kept),
    so numpy's OpenBLAS in this process (a pytest-xdist worker, or the only process) runs one thread."""
    assert all(var in os.environ for var in BLAS_THREAD_VARS)
    if os.environ["OPENBLAS_NUM_THREADS"] != "1":
        pytest.skip("OPENBLAS_NUM_THREADS is set otherwise in the environment (kept)")
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*.so*"))
    if not libs:
        pytest.skip("numpy's BLAS is not the bundled OpenBLAS (wheel layout) here")
    lib = ctypes.CDLL(libs[0])
    getter = next((getattr(lib, name) for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads")
                   if hasattr(lib, name)), None)
    if getter is None:
        pytest.skip("this OpenBLAS exports no get_num_threads")
    assert getter() == 1
