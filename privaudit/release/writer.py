"""The release's table writers (format version 3): the dense (h, state, action) tables and the transition slices.

The layout is described in :mod:`privaudit.release.artifact` (the one reader) and docs/release.md, "Release
format and storage layout". Arrays go to Arrow through their buffers (:func:`arrow_of`), never through
``pa.array(ndarray)``, which imports pandas (about 1 s of CPU per run, issue 19).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from privaudit.release.layout import action_columns
from privaudit.release.manifest import RELEASE_FORMAT_VERSION, WIDE_ORDER

#: zstd level 1; dictionary encoding for the noisy values only: the sorted, periodic index
#: columns compress as well with plain encoding + zstd and are ~30% faster to write.
_WRITE_OPTS = dict(compression="zstd", compression_level=1, use_dictionary=["value"], write_statistics=False)


def index_type(n: int) -> pa.DataType:
    """Smallest signed integer Arrow type holding 0..n-1 (at least int16)."""
    return pa.int16() if n <= 2**15 else pa.int32()


def arrow_of(v: np.ndarray) -> pa.Array:
    """Arrow array over the memory of a 1-D numpy integer array (no copy when C-contiguous).

    ``pa.array(ndarray)`` would do the same but first asks whether the array
    is a pandas object, which imports pandas: about 1 s of CPU on every run
    that writes a table (issue 19). Built from the buffer instead.
    """
    v = np.ascontiguousarray(v)
    return pa.Array.from_buffers(pa.from_numpy_dtype(v.dtype), v.size, [None, pa.py_buffer(v)])


def value_array(values: np.ndarray) -> pa.Array:
    """int32 Arrow array of ``values`` (int64 if any value needs it)."""
    v = np.asarray(values).ravel()
    if v.size and (v.min() < -(2**31) or v.max() >= 2**31):
        return arrow_of(v.astype(np.int64, copy=False))
    return arrow_of(v.astype(np.int32))


def _index_arrays(shape: tuple[int, ...], names: list[str]) -> dict[str, pa.Array]:
    """Row-major index columns of a dense table of ``shape`` (without h)."""
    out = {}
    total = int(np.prod(shape))
    for i, (name, n) in enumerate(zip(names, shape)):
        inner = int(np.prod(shape[i + 1:]))
        outer = total // (n * inner)
        dtype = index_type(n).to_pandas_dtype()
        out[name] = arrow_of(np.tile(np.repeat(np.arange(n, dtype=dtype), inner), outer))
    return out


def write_sa_table(path: Path, values: np.ndarray, *, stationary: bool) -> None:
    """Write a dense (H, S, A) or (S, A) table with columns (h,) state, action, value.

    One row group per h (a single one when stationary).
    """
    names = ["state", "action"]
    shape = values.shape if stationary else values.shape[1:]
    cols = _index_arrays(shape, names)
    schema = _schema(["h"] if not stationary else [], values.shape, names, value_array(values).type)
    with pq.ParquetWriter(path, schema, **_WRITE_OPTS) as w:
        slices = [values] if stationary else list(values)
        for h, sl in enumerate(slices):
            tab = _slice_table(schema, h, cols, sl, stationary)
            w.write_table(tab, row_group_size=tab.num_rows)


def _schema(h_cols: list[str], full_shape: tuple[int, ...], names: list[str], vtype) -> pa.Schema:
    fields = [pa.field("h", index_type(full_shape[0]))] if h_cols else []
    dims = full_shape[1:] if h_cols else full_shape
    fields += [pa.field(n, index_type(d)) for n, d in zip(names, dims)]
    fields.append(pa.field("value", vtype))
    return pa.schema(fields)


def _slice_table(schema: pa.Schema, h: int, cols: dict, values: np.ndarray, stationary: bool) -> pa.Table:
    arrays = {}
    n = values.size
    if not stationary:
        arrays["h"] = arrow_of(np.full(n, h, dtype=schema.field("h").type.to_pandas_dtype()))
    arrays.update(cols)
    v = value_array(values)
    if v.type != schema.field("value").type:
        v = v.cast(schema.field("value").type)  # int32 slice into an int64 file
    arrays["value"] = v
    return pa.table(arrays, schema=schema)


class TransitionWriter:
    """Write ``transitions.parquet`` (format version 3) one h-slice (S, A, S) at a time, one row group each.

    Row group h holds S*S rows sorted row-major by (state, next_state), with
    index columns (h,) state, next_state and one count column per action:
    ``action_<a>`` of row (s, s') is n'_h(s, a, s')
    (:data:`~privaudit.release.manifest.WIDE_ORDER`). The index columns are
    built once (h: one constant array per slice); the count columns are the
    slice transposed to (A, S, S) (one copy). The file's Parquet key-value
    metadata records the format version, the full shape, the dimension names
    and the order.

    Parameters
    ----------
    path : Path
    H, S, A : int
        Declared domain; ``stationary`` writes a single slice (shape (S, A, S)) and no ``h`` column.
    value_type : pyarrow DataType
        int32 normally; the caller passes int64 when values may not fit.
    """

    def __init__(self, path: Path, H: int, S: int, A: int, *, stationary: bool,
                 value_type: pa.DataType = pa.int32()):
        self.stationary = stationary
        self.slice_shape = (S, A, S)
        shape = [S, A, S] if stationary else [H, S, A, S]
        dims = ["state", "action", "next_state"] if stationary else ["h", "state", "action", "next_state"]
        meta = {"privaudit.format_version": str(RELEASE_FORMAT_VERSION), "privaudit.shape": json.dumps(shape),
                "privaudit.dims": json.dumps(dims), "privaudit.row_group_shape": json.dumps([S, A, S]),
                "privaudit.order": WIDE_ORDER}
        counts = action_columns(A)
        fields = [] if stationary else [pa.field("h", index_type(H), nullable=False)]
        fields += [pa.field("state", index_type(S), nullable=False),
                   pa.field("next_state", index_type(S), nullable=False)]
        fields += [pa.field(c, value_type, nullable=False) for c in counts]
        self.schema = pa.schema(fields, metadata=meta)
        self.value_dtype = np.dtype(value_type.to_pandas_dtype())
        ss = _index_arrays((S, S), ["state", "next_state"])
        self.index = [ss["state"], ss["next_state"]]
        self.writer = pq.ParquetWriter(path, self.schema, **{**_WRITE_OPTS, "use_dictionary": counts})

    def write(self, h: int, values: np.ndarray) -> None:
        """Append the slice of step ``h`` (row group h): ``values`` of shape (S, A, S), integers."""
        if tuple(values.shape) != self.slice_shape:
            raise ValueError(f"a transition slice must have shape {self.slice_shape}; got {values.shape}")
        if values.dtype.itemsize > self.value_dtype.itemsize and values.size:  # never wrap around silently
            info = np.iinfo(self.value_dtype)
            if values.min() < info.min or values.max() > info.max:
                raise ValueError(f"a transition count of step {h} does not fit the file's {self.value_dtype}")
        by_action = np.ascontiguousarray(np.moveaxis(values, 1, 0), dtype=self.value_dtype)  # (A, S, S)
        rows = len(self.index[0])
        lead = [] if self.stationary else [
            arrow_of(np.full(rows, h, dtype=self.schema.field("h").type.to_pandas_dtype()))]
        arrays = lead + self.index + [arrow_of(col.ravel()) for col in by_action]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema), row_group_size=rows)

    def close(self) -> None:
        self.writer.close()
