"""Whole-key parts of a lazy frame: bounded memory for aggregates over many episodes or units.

A streaming group-by holds one state per group (about 150 bytes per episode
in polars 2.1), so an aggregate over every episode of a registry grows with
the episodes. Splitting the rows by a hash of the key into parts of at most
``max_rows`` rows, and aggregating one part after the other, bounds that
state by one part's groups. Every row of a key falls in the same part, so a
per-key aggregate is the same whatever the split; an aggregate across keys
(a sum of per-episode values) is combined by the caller. The hash is
polars' ``Expr.hash`` with a fixed, public seed: which part a key falls in
changes no result, only the order of the parts' rows (issue 33).
"""

from __future__ import annotations

import polars as pl


def part_count(rows: int | None, max_rows: int) -> int:
    """How many parts keep each under ``max_rows`` rows on average: ceil(rows / max_rows), at least 1.

    ``rows`` None (unknown) gives one part. Raises nothing; ``max_rows`` must be >= 1.
    """
    return 1 if rows is None else max(1, -(-int(rows) // int(max_rows)))


def hash_parts(frame: pl.LazyFrame, key: str, parts: int, seed: int) -> list[pl.LazyFrame]:
    """``frame`` split into ``parts`` lazy frames by ``hash(key, seed) % parts`` (``[frame]`` when parts is 1).

    Parameters
    ----------
    frame : polars.LazyFrame
        The rows (not read here).
    key : str
        The column whose every value falls in exactly one part (episode or unit id); a null key falls
        in the part of polars' hash of null.
    parts : int
        >= 1.
    seed : int
        The hash seed (a public constant of the caller, not randomness).

    Returns
    -------
    list of polars.LazyFrame
        Disjoint filters of ``frame`` whose union is ``frame``; each collected on its own by the caller.
    """
    if parts <= 1:
        return [frame]
    part = pl.col(key).hash(seed) % parts
    return [frame.filter(part == p) for p in range(parts)]
