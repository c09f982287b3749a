"""Exact integer statistics per cell, streamed in batches with memory bounded by the observed cells.

Polars' streaming group-by (polars 2.1) keeps every row whose key misses its small table of frequent keys
until the input ends: with the hundreds of thousands of transition cells of a registry log (ICU-Sepsis:
466,226 observed (h, s, a, s') cells in 10^5 stays) that is almost every row, about 9 bytes per row
(issue 33; docs/benchmarks.md). :func:`cell_table` instead pulls the rows' flat cell index (and integer
reward sum terms) in batches from the streaming engine (``LazyFrame.collect_batches``, which waits for the
consumer), reduces each batch to its distinct cells with numpy and merges them into one running table,
sorted by cell. Memory: the running table (the observed cells) plus one batch and the batches polars
buffers ahead, whatever the number of rows.

Integer sums are exact in any order, so the result is the group-by's, row for row: the cells sorted and
unique, their counts and sums. Float sums are not (their order changes the last bits): they stay on the
group-by (``privaudit.data.counts``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: Rows per batch pulled from polars: one batch's index and its sort are about 8 MiB each.
BATCH_ROWS = 1 << 20


def group_sums(keys: np.ndarray, values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Distinct keys (sorted), how often each occurs, and the sum of each value array per key.

    Parameters
    ----------
    keys : ndarray of int64, shape (m,)
    values : list of ndarray of int64, each shape (m,)
        Summed exactly (int64; overflow is the caller's bound, as for polars' Int64 sum).

    Returns
    -------
    (u, counts, sums)
        ``u`` sorted unique keys (int64), ``counts`` int64 of the same length, ``sums`` one int64 array per
        value array. Empty inputs give empty arrays.
    """
    if not values:
        u, counts = np.unique(keys, return_counts=True)
        return u, counts.astype(np.int64, copy=False), []
    if len(values) == 1 and len(keys) and _packable(keys, values[0]):
        # one key and one small value per int64, sorted without an argsort (a sort is several times faster)
        packed = np.sort(((keys.astype(np.int64) + 1) << 32) | values[0].astype(np.int64))
        k = (packed >> 32) - 1
        start = _starts(k)
        return k[start], _lengths(start, len(k)), [np.add.reduceat(packed & _LOW, start)]
    order = np.argsort(keys)  # not stable: integer sums are exact in any order
    k = keys[order]
    start = _starts(k)
    sums = [np.add.reduceat(v[order], start) if len(k) else np.empty(0, np.int64) for v in values]
    return k[start], _lengths(start, len(k)), sums


#: The low 32 bits of a packed (key, value) pair.
_LOW = (1 << 32) - 1


def _packable(keys: np.ndarray, v: np.ndarray) -> bool:
    """True when every key is in [-1, 2^30) and every value in [0, 2^32): (key + 1, value) packs into an int64."""
    return bool(keys.min() >= -1 and keys.max() < (1 << 30) and v.min() >= 0 and v.max() <= _LOW)


def _starts(k: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``k`` starts."""
    if not len(k):
        return np.empty(0, np.intp)
    return np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))


def _lengths(start: np.ndarray, n: int) -> np.ndarray:
    """The runs' lengths (int64) from their starts and the total length ``n``."""
    return np.diff(np.append(start, n)).astype(np.int64)


class RunningCells:
    """A running sparse table of cells: sorted unique keys, their counts and integer sums.

    Batches already reduced to distinct keys are merged in: keys already in the table are added in place
    (a binary search); new keys wait in a pending list, merged into the table (one sort) once they
    outnumber a quarter of it, so the table and the pending keys together stay within a small multiple
    of the distinct keys seen.

    Parameters
    ----------
    n_values : int
        How many integer sums each cell carries besides its count.
    """

    def __init__(self, n_values: int):
        #: The merged keys, sorted and unique (int64); keys still pending are not in it until :meth:`flush`.
        self.keys = np.empty(0, np.int64)
        #: Rows per key in :attr:`keys` (int64, same length).
        self.counts = np.empty(0, np.int64)
        #: One int64 array of sums per value, aligned with :attr:`keys`.
        self.sums = [np.empty(0, np.int64) for _ in range(n_values)]
        self._pending: list[tuple[np.ndarray, np.ndarray, list[np.ndarray]]] = []
        self._n_pending = 0

    def add(self, keys: np.ndarray, counts: np.ndarray, sums: list[np.ndarray]) -> None:
        """Merge distinct ``keys`` (sorted, unique) with their ``counts`` and ``sums`` (int64 arrays)."""
        if len(self.keys) and len(keys):
            pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            hit = self.keys[pos] == keys
            at = pos[hit]  # unique: the keys are
            self.counts[at] += counts[hit]
            for total, v in zip(self.sums, sums):
                total[at] += v[hit]
            miss = ~hit
            keys, counts, sums = keys[miss], counts[miss], [v[miss] for v in sums]
        if len(keys):
            self._pending.append((keys, counts, sums))
            self._n_pending += len(keys)
            if self._n_pending > max(len(self.keys) // 4, 1 << 16):
                self.flush()

    def flush(self) -> None:
        """Merge the pending keys into the table."""
        if not self._pending:
            return
        keys = np.concatenate([self.keys, *(p[0] for p in self._pending)])
        counts = np.concatenate([self.counts, *(p[1] for p in self._pending)])
        sums = [np.concatenate([s, *(p[2][j] for p in self._pending)]) for j, s in enumerate(self.sums)]
        self._pending, self._n_pending = [], 0
        self.keys, _, merged = group_sums(keys, [counts, *sums])
        self.counts, self.sums = merged[0], merged[1:]


def cell_table(query: pl.LazyFrame | list[pl.LazyFrame], key: str, sums: list[str], *,
               batch_rows: int = BATCH_ROWS) -> pl.DataFrame:
    """Per distinct ``key``: its row count and the sum of each ``sums`` column; streamed, memory bounded.

    The same table as ``query.group_by(key).agg(pl.len(), *[pl.col(c).sum() for c in sums]).sort(key)``
    for integer columns without nulls, computed without holding the rows (see the module docstring).

    Parameters
    ----------
    query : polars.LazyFrame or list of polars.LazyFrame
        Int64 columns ``key`` and ``sums``, no nulls (the caller maps a null key to a sentinel). A list is
        read one frame after the other into the same table (the table of their concatenation; polars'
        streaming engine would read a concatenation's inputs together).
    key : str
    sums : list of str
    batch_rows : int
        Rows per batch pulled from polars (a tuning knob; no result depends on it).

    Returns
    -------
    polars.DataFrame
        Columns ``key`` (sorted, unique), ``n`` and the ``sums`` columns, all Int64.

    Raises
    ------
    polars.exceptions.PolarsError
        Reading the rows failed (the caller turns it into its own error).
    """
    running = RunningCells(len(sums))
    for frame in (query if isinstance(query, list) else [query]):
        batches = frame.select(key, *sums).collect_batches(chunk_size=batch_rows, maintain_order=False,
                                                           engine="streaming")
        for batch in batches:
            if batch.height:
                running.add(*group_sums(batch[key].to_numpy(), [batch[c].to_numpy() for c in sums]))
    running.flush()
    return pl.DataFrame({key: running.keys, "n": running.counts, **dict(zip(sums, running.sums))},
                        schema={key: pl.Int64, "n": pl.Int64, **{c: pl.Int64 for c in sums}})
