"""``train --release`` with an algorithm that reads logs: the message says what to pass instead."""

from __future__ import annotations

import pytest

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.train import train_from_release


@pytest.mark.parametrize("algo,needle", [
    ("dp-pbb", "dp-pbb reads the logs"),      # used to list only ve/apvi/apvi-hoeffding as log readers
    ("apvi", "ve/apvi/apvi-hoeffding read exact logs"),
])
def test_release_refused_with_what_to_pass(tmp_path, algo, needle):
    with pytest.raises(UsageError, match=needle):
        train_from_release(tmp_path, algo=algo)


@pytest.mark.parametrize("algo", ["dp-apv", "banana"])
def test_unknown_algorithm_is_named_as_unknown(tmp_path, algo):
    """A typo is 'unknown algorithm' with the registered names; it was told that it 'cannot train on a release:
    a release holds noisy counts ...', as if it were a real learner that reads logs."""
    with pytest.raises(UsageError, match=rf"unknown algorithm '{algo}'; choose one of .*dp-apvi") as e:
        train_from_release(tmp_path, algo=algo)
    assert "holds noisy counts" not in str(e.value)
