"""The suite's own scheduling under pytest-xdist (tests/conftest.py): the Spark-session modules share one worker."""

from __future__ import annotations

import pytest

from tests.conftest import (SPARK_SCOPE, SPARK_SESSION_MODULES, SparkSessionScheduling,
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
