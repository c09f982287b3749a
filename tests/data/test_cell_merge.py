"""The batched running cell table (``privaudit.data.cell_merge``) is polars' group-by, row for row (issue 33).

The counts of the release and of DP-PBB are pulled in batches and merged into a running table instead of one
streaming group-by (whose memory grows with the rows when the cells are many). The table must be the sorted
group-by exactly, whatever the batch size: with one row per batch, with batches that bring new keys late (the
pending keys merged in several flushes), and with no row at all.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from privaudit.core.errors import ValidationFailed
from privaudit.core.spec import DomainSpec
from privaudit.data import counts
from privaudit.data.cell_merge import RunningCells, cell_table, group_sums
from tests._release_logs import spec_doc


def reference(frame: pl.DataFrame, sums: list[str]) -> pl.DataFrame:
    return (frame.group_by("i").agg(pl.len().cast(pl.Int64).alias("n"), *[pl.col(c).sum() for c in sums])
            .sort("i"))


def keyed_rows(seed: int, rows: int, keys: int) -> pl.DataFrame:
    """Skewed keys (a few frequent, many rare, some negative) and two integer value columns."""
    rng = np.random.default_rng(seed)
    i = np.where(rng.random(rows) < 0.5, rng.integers(0, 50, rows), rng.integers(-3, keys, rows))
    return pl.DataFrame({"i": i.astype(np.int64), "r": rng.integers(0, 1000, rows),
                         "q": rng.integers(-(2**40), 2**40, rows)})


@pytest.mark.parametrize("batch_rows", [1, 7, 5_000, 1 << 20])
@pytest.mark.parametrize("sums", [["r", "q"], ["r"], ["q"]])
def test_cell_table_is_the_sorted_group_by_at_any_batch_size(batch_rows, sums):
    # 2e5 rows over 3e5 possible keys: with small batches new keys keep arriving, and more than 2**16 of them
    # wait at once, so the pending keys are merged into the table several times. One small non-negative sum
    # ("r") takes the packed sort, a signed wide one ("q") or two sums the argsort.
    frame = keyed_rows(5, 1 if batch_rows == 1 else 200_000, 300_000)
    got = cell_table(frame.lazy(), "i", sums, batch_rows=batch_rows)
    assert got.equals(reference(frame, sums))
    assert got.schema == pl.Schema({"i": pl.Int64, "n": pl.Int64, **{c: pl.Int64 for c in sums}})


def test_cell_table_counts_only_and_no_rows():
    frame = keyed_rows(6, 30_000, 10_000)
    assert cell_table(frame.lazy(), "i", [], batch_rows=999).equals(reference(frame, []))
    empty = cell_table(frame.lazy().filter(pl.col("i") > 10**9), "i", ["r"])
    assert empty.height == 0 and empty.columns == ["i", "n", "r"]


def test_group_sums_packed_and_argsort_paths_agree():
    rng = np.random.default_rng(8)
    keys = rng.integers(-1, 1 << 30, 50_000)
    keys[::3] = keys[0]  # repeated keys
    v = rng.integers(0, 1 << 32, 50_000)
    packed = group_sums(keys, [v])
    sorted_ = group_sums(keys, [v, v])
    assert np.array_equal(packed[0], sorted_[0]) and np.array_equal(packed[1], sorted_[1])
    assert np.array_equal(packed[2][0], sorted_[2][0]) and np.array_equal(packed[2][0], sorted_[2][1])
    assert packed[2][0][packed[0] == keys[0]][0] == v[keys == keys[0]].sum()


def test_running_cells_merges_repeated_and_new_keys():
    run = RunningCells(1)
    for keys, vals in (([3, 1, 3], [10, 1, 5]), ([2, 3], [7, 1]), ([9, 1, 2], [0, 4, 4])):
        run.add(*group_sums(np.array(keys, np.int64), [np.array(vals, np.int64)]))
    run.flush()
    assert run.keys.tolist() == [1, 2, 3, 9]
    assert run.counts.tolist() == [2, 2, 3, 1]
    assert run.sums[0].tolist() == [5, 11, 16, 0]


def test_a_null_index_is_refused():
    spec = DomainSpec.from_dict(spec_doc(H=2, S=4, A=2, terminals=()))
    df = pl.DataFrame({"step": [0, 1], "state": [0, 1], "action": [1, None], "next_state": [1, 2],
                       "reward": [0.5, 0.2]})
    for kw in ({"rewards": False}, {"quantum": 8}, {"quantum": None}):
        with pytest.raises(ValidationFailed, match="outside the declared domain"):
            counts.sparse_counts(df, spec, **kw)
