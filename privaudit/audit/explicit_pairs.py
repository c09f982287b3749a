"""Explicit neighbouring pairs: two log files checked to be substitution neighbours.

A pair given by the user (``privaudit audit --pair D D2``, :func:`load_pair`)
supports a violation finding only if D' is D with the data of one privacy
unit replaced: :func:`check_neighbours` compares the two unit by unit through
order-free fingerprints of their rows, and refuses anything else (an addition
or removal, two units changed, different columns).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from privaudit.audit.pairs import NeighbouringPair, unit_column
from privaudit.core.errors import LogReadError, UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.io import scan_logs


def _unit_fingerprints(df: pl.DataFrame, unit: str) -> pl.DataFrame:
    """One row per unit: (unit, a, b, n), order-free sums of its rows' hashes."""
    h = df.with_columns(pl.struct(pl.all()).hash(seed=7).alias("_h"))
    return h.group_by(unit).agg(
        (pl.col("_h") // (1 << 33)).cast(pl.Int64).sum().alias("a"),
        (pl.col("_h") % (1 << 32)).cast(pl.Int64).sum().alias("b"),
        pl.len().alias("n"))


def check_neighbours(d: pl.DataFrame, d_prime: pl.DataFrame, unit: str | None = None,
                     relation: str = "substitution") -> dict:
    """Check that (D, D') differ by the substitution of at most one unit (or, with
    ``relation="add/remove"``, by one unit added or removed).

    ``unit``: the privacy unit's column (default ``unit_id``, else ``episode_id``, the trajectory
    schema's).

    Returns
    -------
    dict
        ``{"kind": "identical" | "explicit", "relation": relation,
        "removed_units": int, "added_units": int}``.

    Raises
    ------
    UsageError
        If the columns differ, the unit column is missing, or the pair is not
        a neighbour under ``relation`` (e.g. an addition or removal under
        substitution: a lower bound above the claim would not show a violation
        of a substitution claim).
    """
    if set(d.columns) != set(d_prime.columns):
        raise UsageError(f"the pair's columns differ: D has {sorted(d.columns)}, D' has {sorted(d_prime.columns)}.")
    d_prime = d_prime.select(d.columns).cast(d.schema)
    unit = unit or unit_column(d)
    if unit not in d.columns:
        raise UsageError(f"the tables have no privacy-unit column `{unit}` (columns: {', '.join(d.columns)}); "
                         "name the column that identifies a privacy unit (`unit=`).")
    f0, f1 = _unit_fingerprints(d, unit), _unit_fingerprints(d_prime, unit)
    both = f0.join(f1, on=unit, how="full", suffix="_1", coalesce=True)
    same = (pl.col("a") == pl.col("a_1")) & (pl.col("b") == pl.col("b_1")) & (pl.col("n") == pl.col("n_1"))
    differ = both.filter(~same.fill_null(False))                  # a unit absent on one side differs too
    removed = differ.filter(pl.col("n").is_not_null()).height      # units of D with no identical twin in D'
    added = differ.filter(pl.col("n_1").is_not_null()).height      # units of D' with no identical twin in D
    if relation == "add/remove":
        if (removed, added) not in ((1, 0), (0, 1)):
            raise UsageError(f"D and D' must differ by adding or removing exactly one privacy unit ({unit}); found "
                             f"{removed} unit(s) of D not in D' and {added} unit(s) of D' not in D.")
        return {"kind": "explicit", "relation": relation, "removed_units": removed, "added_units": added}
    if (removed, added) not in ((0, 0), (1, 1)):
        raise UsageError(
            f"D and D' must differ by replacing exactly one privacy unit ({unit}); "
            f"found {removed} unit(s) of D not in D' and {added} unit(s) of D' not in D. "
            "Build D' from D by removing one unit and adding one (or use `canary`).")
    return {"kind": "identical" if not removed else "explicit", "relation": "substitution",
            "removed_units": removed, "added_units": added}


def load_pair(path_d: str | Path, path_d_prime: str | Path, spec: DomainSpec | None = None) -> NeighbouringPair:
    """Read an explicit pair of Parquet logs and check it.

    Parameters
    ----------
    path_d, path_d_prime : str or Path
        D and D' (Parquet file or folder of parts).
    spec : DomainSpec, optional
        When given, both are read through :func:`privaudit.data.io.scan_logs`,
        which maps the spec's column names to the standard ones (and sets
        ``unit_id`` from the spec's privacy unit); without it the files must
        use the standard column names.

    Raises
    ------
    LogReadError
        If a file cannot be read or lacks a required column.
    UsageError
        If the two are not substitution neighbours (see ``check_neighbours``).
    """
    frames = []
    for p in (path_d, path_d_prime):
        if spec is not None:
            lf = scan_logs(p, spec)
            try:
                frames.append(lf.drop("row").collect())
            except Exception as e:  # data-page errors surface on collect
                raise LogReadError(f"cannot read logs {p}: {e}") from None
            continue
        try:
            frames.append(pl.read_parquet(p))
        except Exception as e:  # polars raises several types for unreadable files
            raise LogReadError(f"cannot read logs {p}: {e}") from None
    desc = check_neighbours(*frames)
    return NeighbouringPair(frames[0], frames[1].select(frames[0].columns).cast(frames[0].schema), desc)
