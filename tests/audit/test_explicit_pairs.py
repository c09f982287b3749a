"""Explicit pairs: only a substitution of exactly one privacy unit is accepted, from memory or from files."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from privaudit.audit import check_neighbours, load_pair, make_pair
from privaudit.core.errors import UsageError
from tests.audit.helpers import tiny_logs, tiny_spec


def test_check_neighbours_rejects_non_neighbours(tmp_path):
    logs = tiny_logs()
    two_changed = logs.with_columns(pl.when(pl.col("unit_id").is_in([2, 3])).then(1 - pl.col("action"))
                                    .otherwise(pl.col("action"))
                                    .cast(logs.schema["action"]).alias("action"))
    with pytest.raises(UsageError, match="exactly one privacy unit"):
        check_neighbours(logs, two_changed)
    with pytest.raises(UsageError, match="exactly one privacy unit"):  # add/remove is not substitution
        check_neighbours(logs, logs.filter(pl.col("unit_id") != 5))
    assert check_neighbours(logs, logs)["kind"] == "identical"
    p = make_pair(logs, tiny_spec(), "rare", rng=np.random.default_rng(0))
    p.d.write_parquet(tmp_path / "d.parquet")
    p.d_prime.write_parquet(tmp_path / "d2.parquet")
    q = load_pair(tmp_path / "d.parquet", tmp_path / "d2.parquet")
    assert q.description["kind"] == "explicit" and q.d_prime.height == p.d_prime.height
