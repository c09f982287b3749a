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

Every part size derives from one number, :func:`part_rows`: 8·10^6 rows, or
the environment variable ``PRIVAUDIT_PART_ROWS`` when it is set. It is a
testing and tuning knob, read on every call: the memory guard
(``tests/perf/test_memory_guard.py``) shrinks the parts so that its logs span
many of them and memory must be flat, and a machine short of memory may
shrink them too, at the cost of one more pass over the rows per part. No
result depends on it (``tests/data/test_parts.py`` runs the seeded
pipeline at two part sizes and compares the files byte for byte).
"""

from __future__ import annotations

import os

import polars as pl

from privaudit.core.errors import UsageError

#: The environment variable that sets :func:`part_rows` (a testing and tuning knob; unset in normal use).
PART_ROWS_VARIABLE = "PRIVAUDIT_PART_ROWS"
#: Rows per part when ``PRIVAUDIT_PART_ROWS`` is unset: a part's per-episode state (about 150 bytes per
#: episode of the streaming group-by, ~8 rows per ICU-Sepsis stay) stays near 150 MiB.
PART_ROWS = 8_000_000


def part_rows(per: int = 1) -> int:
    """The part size: ``PRIVAUDIT_PART_ROWS`` (or :data:`PART_ROWS`) divided by ``per``, at least 1.

    Parameters
    ----------
    per : int
        What one unit of the caller's size costs in rows: 1 for a size in rows, 8 for one in episodes
        (about 8 rows per ICU-Sepsis stay), 2 or 4 for state heavier per row than a group-by's.

    Returns
    -------
    int
        >= 1.

    Raises
    ------
    UsageError
        ``PRIVAUDIT_PART_ROWS`` is set but is not a whole number >= 1 (``400000``, ``4e5`` and
        ``400_000`` are accepted).
    """
    raw = os.environ.get(PART_ROWS_VARIABLE)
    if raw is None or not raw.strip():
        return max(1, PART_ROWS // per)
    try:
        value = float(raw.strip().replace("_", ""))
    except ValueError:
        value = float("nan")
    if not (value >= 1 and value.is_integer()):
        raise UsageError(f"the environment variable {PART_ROWS_VARIABLE} must be a whole number of rows >= 1 "
                         f"(e.g. 400000 or 4e5). Found {raw!r}; unset it for the default {PART_ROWS:.0e}.")
    return max(1, int(value) // per)


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
