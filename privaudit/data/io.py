"""Reading trajectory logs: a Parquet file or a folder of Parquet parts.

The trajectory table (docs/data-format.md, "The trajectory table") has one row per step
h of an episode. Users' own column names map onto the standard names
(``episode_id, step, state, action, reward, next_state, terminated,
truncated, unit_id, features``) through the domain spec's ``columns``.

Everything here is lazy: :func:`scan_logs` returns a ``polars.LazyFrame``
that reads the files only when collected, so downstream code can aggregate a
log larger than memory with the streaming engine. Only Parquet footers
(schema, row counts) are read eagerly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from privaudit.core.errors import LogReadError, MissingInputError
from privaudit.core.spec import REQUIRED_COLUMNS, STANDARD_COLUMNS, DomainSpec

#: Name of the 0-based row index column added by :func:`scan_logs`.
ROW = "row"

#: Standard column -> a test of its dtype and the words used in error messages.
INT_COLUMNS = ("step", "state", "action", "next_state")
FLAG_COLUMNS = ("terminated", "truncated")
ID_COLUMNS = ("episode_id", "unit_id")


def dtype_problem(std: str, dtype: pl.DataType) -> str | None:
    """Why ``dtype`` is not usable for standard column ``std`` (None if it is).

    Usable types: integers for ``step, state, action, next_state``; any
    numeric type for ``reward``; Boolean for ``terminated, truncated``;
    integer, string or categorical for ``episode_id, unit_id``; a list or
    array of numbers for ``features``.
    """
    if std in INT_COLUMNS:
        if dtype.is_integer():
            return None
        return f"must hold integers; found {dtype}. Cast it to an integer type (e.g. Int64) when writing the file"
    if std == "reward":
        if dtype.is_numeric():
            return None
        return f"must hold numbers; found {dtype}"
    if std in FLAG_COLUMNS:
        if dtype == pl.Boolean:
            return None
        return f"must hold booleans; found {dtype}. Write true/false, not 0/1 or strings"
    if std in ID_COLUMNS:
        if dtype.is_integer() or dtype in (pl.String, pl.Categorical) or isinstance(dtype, (pl.Categorical, pl.Enum)):
            return None
        return f"must hold integers or strings; found {dtype}"
    if std == "features":
        if isinstance(dtype, (pl.List, pl.Array)) and dtype.inner.is_numeric():
            return None
        return f"must hold lists of numbers; found {dtype}"
    return None


@dataclass(frozen=True)
class LogPart:
    """One Parquet file of a log."""

    #: The file.
    file: Path
    #: Rows in this file (from the Parquet footer).
    n_rows: int
    #: Row index (0-based, in the concatenated input) of this file's first row.
    offset: int
    #: Column name (the user's, str) -> polars dtype (``pl.DataType``).
    schema: dict = field(repr=False)



#: Top-level files by which a folder written by privaudit names its kind, and what to do with each.
_OUTPUT_FILES = {"manifest.json": "a release is read by `train --release DIR`",
                 "policy.json": "a policy is read by `evaluate POLICY`",
                 "summary.json": "a pipeline run's release is DIR/release, its policies DIR/policies/NAME"}


def refuse_privaudit_output(path) -> None:
    """``LogReadError`` when ``path`` is a local folder privaudit wrote (a release, a policy, a pipeline run).

    For commands to call before any other check: ``train REL --algo dp-apvi`` without a budget said
    "give a budget" before the read named the mistake (train on a release with ``--release``). Any
    other path (a file, a Spark URL, a missing one) passes; the read checks it.
    """
    p = Path(path)
    if p.is_dir():
        _refuse_privaudit_output(p)


def _refuse_privaudit_output(p: Path) -> None:
    """Refuse a folder that privaudit wrote (its ``kind`` says so) as LOGS: its Parquet files hold DP counts
    or a policy table, and reading them as logs gave a puzzling error about a missing `action` column."""
    for name, advice in _OUTPUT_FILES.items():
        try:
            kind = json.loads((p / name).read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(kind, str) and kind.startswith("privaudit-"):
            raise LogReadError(f"{p}: a privaudit output ({name} of kind {kind!r}), not trajectory logs: {advice}. "
                               "Point LOGS at the Parquet logs themselves.")

def list_parts(path: str | Path) -> list[LogPart]:
    """The Parquet files of a log, in reading order, with their row offsets.

    A folder is read as the files ``*.parquet`` inside it and inside its
    sub-folders (Hive-style partitions such as ``year=2021/part-0.parquet``;
    the partition values in folder names are not columns of the log), sorted
    by path; their rows are concatenated in that order. Hidden files and
    folders (names starting with ``.``, e.g. temporaries) are skipped.

    Parameters
    ----------
    path : str or Path
        A Parquet file or a folder of Parquet parts.

    Returns
    -------
    list of LogPart
        At least one part.

    Raises
    ------
    MissingInputError
        If the path does not exist (a usage error, exit 2).
    LogReadError
        If a folder holds no ``*.parquet`` file, is a privaudit output (a release, policy or pipeline folder:
        its Parquet files are not logs), or a file is not readable Parquet (the message names the file).
    """
    p = Path(path)
    if p.is_dir():
        if not os.access(p, os.R_OK | os.X_OK):  # else rglob finds nothing: "holds no *.parquet file"
            raise LogReadError(f"{p}: cannot list the folder (permission denied). Let the user running "
                               "privaudit read it (chmod, or run as its owner).")
        _refuse_privaudit_output(p)
        files = sorted(f for f in p.rglob("*.parquet") if f.is_file()
                       and not any(part.startswith(".") for part in f.relative_to(p).parts))
        if not files:
            raise LogReadError(f"{p}: folder holds no *.parquet file. Point LOGS at a Parquet file or a folder of Parquet parts.")
    elif p.is_file():
        files = [p]
    else:
        raise MissingInputError(f"{p}: no such file or folder.")
    parts, offset = [], 0
    for f in files:
        if not os.access(f, os.R_OK):  # else pyarrow's "[Errno 13] Failed to open" and advice to rewrite it
            raise LogReadError(f"{f}: cannot read the file (permission denied). Let the user running "
                               "privaudit read it (chmod, or run as its owner).")
        try:
            n = pq.read_metadata(f).num_rows
            schema = dict(pl.read_parquet_schema(f))
        except Exception as e:  # pyarrow / polars raise many types for bad files
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise LogReadError(f"{f}: not a readable Parquet file ({reason}). "
                               "Write the logs with a Parquet writer (polars, pyarrow, pandas.to_parquet).") from None
        parts.append(LogPart(file=f, n_rows=int(n), offset=offset, schema=schema))
        offset += int(n)
    return parts


@dataclass(frozen=True)
class OpenLog:
    """A lazily scanned log before strict checks (used by validation)."""

    #: Standard column names for every present column, plus ``row``.
    frame: pl.LazyFrame
    #: The log's files, a list of ``LogPart``.
    parts: list
    #: Standard name -> the user's column name (str -> str), for present columns.
    source: dict
    #: Standard name -> dtype as stored (``pl.DataType``), for present columns.
    dtypes: dict
    #: Required standard columns (str) absent from the files.
    missing: tuple
    #: True when the spec names no privacy-unit column (``unit_id`` is then a copy of ``episode_id``).
    unit_is_episode: bool

    def locate(self, rows: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Map global row indices to (file, row within that file)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = np.array([p.offset for p in self.parts], dtype=np.int64)
        idx = np.clip(np.searchsorted(starts, rows, side="right") - 1, 0, len(self.parts) - 1)
        return [str(self.parts[i].file) for i in idx], rows - starts[idx]


def _common_dtype(a: pl.DataType, b: pl.DataType) -> pl.DataType | None:
    """The type two parts' columns are read as: equal types as they are; integers of different widths as the
    widest (Int64 when signedness differs); integers and floats as Float64; else None (refused)."""
    if a == b:
        return a
    if a.is_integer() and b.is_integer():
        if a.is_signed_integer() == b.is_signed_integer():
            widths = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)
            return max(a, b, key=lambda t: widths.index(t) % 4)
        return pl.Int64
    if a.is_numeric() and b.is_numeric():
        return pl.Float64
    return None


def open_log(path: str | Path, spec: DomainSpec) -> OpenLog:
    """Scan a log lazily, renaming present columns to the standard names.

    Unlike :func:`scan_logs` this does not refuse missing columns or unusable
    types; it reports them so that validation can list every problem.

    Raises
    ------
    LogReadError
        Unreadable files, or parts whose schemas disagree on a used column.
    """
    parts = list_parts(path)
    first = parts[0]
    unit_is_episode = spec.unit_column is None
    wanted = [c for c in STANDARD_COLUMNS if not (c == "unit_id" and unit_is_episode)]
    source = {c: spec.column(c) for c in wanted if spec.column(c) in first.schema}
    dtypes = {std: first.schema[name] for std, name in source.items()}
    for part in parts[1:]:
        for std, name in source.items():
            if name not in part.schema:
                raise LogReadError(f"{part.file}: column '{name}' ({std}) is missing, but {first.file} has it. "
                                   "All parts of a log must have the same columns.")
            common = _common_dtype(dtypes[std], part.schema[name])
            if common is None:
                raise LogReadError(f"{part.file}: column '{name}' has type {part.schema[name]}, but {first.file} "
                                   f"has {first.schema[name]}. Write all parts with the same schema.")
            dtypes[std] = common
    required = list(REQUIRED_COLUMNS) + ([] if unit_is_episode else ["unit_id"])
    missing = tuple(c for c in required if c not in source)
    files = [str(p.file) for p in parts]
    same_types = all(p.schema[name] == dtypes[std] for p in parts for std, name in source.items())
    if same_types and not any(ROW in p.schema for p in parts):
        lf = pl.scan_parquet(files, row_index_name=ROW, glob=False, extra_columns="ignore", hive_partitioning=False)
        source_in_lf = source
    else:  # parts of different integer widths (or int/float rewards): each part cast to the common type; also
        # when a file has a column named ROW (an ignored column of the user's, or one mapped in the spec), which
        # the scan's row index would collide with: only the used columns are read, then the index is added
        lf = pl.concat([pl.scan_parquet(f, glob=False, hive_partitioning=False)
                        .select([pl.col(name).cast(dtypes[std]).alias(std) for std, name in source.items()])
                        for f in files], how="vertical").with_row_index(ROW)
        source_in_lf = {std: std for std in source}
    exprs = [pl.col(ROW)]
    for std, name in source_in_lf.items():
        e = pl.col(name)
        if std in ID_COLUMNS and isinstance(dtypes[std], (pl.Categorical, pl.Enum)):
            e = e.cast(pl.String)
        exprs.append(e.alias(std))
    if unit_is_episode and "episode_id" in source:
        exprs.append(pl.col(source_in_lf["episode_id"]).alias("unit_id"))
    return OpenLog(frame=lf.select(exprs), parts=parts, source=source, dtypes=dtypes,
                   missing=missing, unit_is_episode=unit_is_episode)


def scan_logs(path: str | Path, spec: DomainSpec) -> pl.LazyFrame:
    """Lazily scan trajectory logs with the standard column names.

    Parameters
    ----------
    path : str or Path
        A Parquet file, or a folder whose ``*.parquet`` files (sorted by name)
        are the parts of one log.
    spec : DomainSpec
        Maps the user's column names to the standard ones (``spec.column``).

    Returns
    -------
    pl.LazyFrame
        Columns ``row`` (UInt32 or UInt64: 0-based position of the row in the
        concatenated input), ``episode_id, step, state, action, reward,
        next_state, unit_id`` always; ``terminated, truncated, features`` when
        the files have them. ``unit_id`` is a copy of ``episode_id`` when the
        spec names no privacy-unit column (each episode its own unit). Other
        columns of the files are dropped. Nothing is read until collected.

    Raises
    ------
    LogReadError
        If the path is missing, a folder holds no Parquet part, a file is not
        readable Parquet, parts disagree on a column's type, or a required
        column is missing or has an unusable type (the message names the file
        and the column). Errors in the data pages themselves surface when the
        frame is collected (as polars exceptions).

    Notes
    -----
    This only reads; it checks no row. Run :func:`privaudit.data.validate.validate_logs`
    to check the rows against the spec (ranges, steps, horizon, units).
    """
    log = open_log(path, spec)
    where = str(log.parts[0].file) if len(log.parts) == 1 else f"{path} (first part {log.parts[0].file})"
    if log.missing:
        names = ", ".join(f"'{spec.column(c)}' ({c})" for c in log.missing)
        raise LogReadError(f"{where}: required column(s) missing: {names}. "
                           "Rename them in the file or map them in the spec's \"columns\".")
    for std, dt in log.dtypes.items():
        why = dtype_problem(std, dt)
        if why:
            raise LogReadError(f"{where}: column '{log.source[std]}' ({std}) {why}.")
    return log.frame
