"""The on-disk release format: Parquet tables + ``manifest.json``; the one reader.

Layout of a release folder (format version 3, written now; see docs/release.md):

``visits.parquet``       columns (h, state, action, value): n'_h(s, a)
``transitions.parquet``  columns (h, state, next_state, action_0, ..., action_<A-1>): column
                         action_<a> of row (h, s, s') is n'_h(s, a, s'); one row group per h
``rewards.parquet``      columns (h, state, action, value): R'_h(s, a), only when
                         the reward function is private
``manifest.json``        the guarantee, validated by ``schemas/release_manifest.schema.json``

Every table is dense over the declared domain and names its cells with index
columns and column names, so pyarrow or polars alone reads it
(``pl.read_parquet(...).unpivot(index=["h", "state", "next_state"],
variable_name="action")`` gives one row per cell). ``transitions.parquet``
holds one row group per h (one when stationary) of S*S rows sorted by
(state, next_state); the manifest (``families.transitions.dense``,
``manifest.WIDE_ORDER``) and the file's Parquet key-value metadata
(``privaudit.format_version``, ``privaudit.shape``, ``privaudit.dims``,
``privaudit.order``) record the layout, so a learner reads one h-slice at a
time. Stationary releases have no ``h`` column. Index columns are int16
(int32 when S or A exceed 32767), values int32 (int64 only if a value needs
it); zstd level 1, dictionary encoding for the values. No column is nested
and the index columns have S*S rows per h, so naming every cell costs no more
write CPU than version 2's bare value column and 1.5% more space
(docs/release.md, "Release format and storage layout").

Versions 2 (the bare ``value`` column, row-major over (state, action,
next_state): ``manifest.DENSE_ORDER``) and 1 (index columns h, state,
action, next_state beside ``value``) are read, no longer written.
:func:`load_release` reads all three and refuses any other (``ArtifactError``
naming the format version); every reader of a release (learners,
``train --release``, the pipeline, benchmarks) goes through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from privaudit.core.errors import ArtifactError, MissingInputError, SpecError
from privaudit.release.layout import FILES, MANIFEST, action_columns
from privaudit.release.manifest import DENSE_ORDER, WIDE_ORDER, ReleaseManifest
from privaudit.release.manifest_check import check_manifest_guarantee
from privaudit.data.counts_protocol import step_index

def numpy_of(col: pa.ChunkedArray | pa.Array, where: str) -> np.ndarray:
    """The values of an integer Arrow column without nulls, as a read-only numpy array over its buffers.

    ``to_numpy`` would convert through pyarrow's pandas layer, which imports
    pandas (about 1 s of CPU per run, issue 19). ``where`` names the file and
    column in the error.

    Raises
    ------
    ArtifactError
        The column holds nulls or is not of an integer type.
    """
    if col.null_count or not pa.types.is_integer(col.type):
        raise ArtifactError(f"{where}: must hold integers without nulls; found type {col.type} with "
                            f"{col.null_count} nulls. The release is corrupt.")
    dtype = np.dtype(col.type.to_pandas_dtype())
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts = [np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c), offset=c.offset * dtype.itemsize)
             for c in chunks if len(c)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)



# --------------------------------------------------------------------------- reading
@dataclass(frozen=True, repr=False)
class Release:
    """A private release read back from its folder (see :func:`load_release`).

    Attributes
    ----------
    path : Path
        The release folder.
    manifest : ReleaseManifest
        ``manifest.json`` (format version, schema and guarantee checked).
    visits : ndarray of int64, shape (H, S, A), or (S, A) if stationary
        Noisy visit counts n'_h(s, a) (may be negative: no clipping applied).
    rewards : ndarray of int64 or None, same shape as ``visits``
        Noisy reward sums in units of ``manifest.families["rewards"].value_unit``
        of the [0, 1]-scaled reward; None when the reward is public.

    Notes
    -----
    Answers the counts protocol (``privaudit.data.counts_protocol.Counts``) with
    ``noisy=True``. Transition counts n'_h(s, a, s') are read lazily, one h
    at a time, with :meth:`transitions_at` (ICU-Sepsis: 12.8 M cells per h).
    """

    noisy = True

    path: Path
    manifest: ReleaseManifest
    visits: np.ndarray
    rewards: np.ndarray | None = None
    _n_row_groups: int = field(default=0)

    @property
    def H(self) -> int:  # noqa: N802
        return self.manifest.domain.H

    @property
    def S(self) -> int:  # noqa: N802
        return self.manifest.domain.S

    @property
    def A(self) -> int:  # noqa: N802
        return self.manifest.domain.A

    @property
    def stationary(self) -> bool:
        return self.manifest.domain.stationary

    @property
    def spec_hash(self) -> str:
        return self.manifest.spec_hash

    horizon = H
    n_states = S
    n_actions = A

    @property
    def has_reward_sums(self) -> bool:
        """False when the spec declared the reward public (no rewards family)."""
        return self.rewards is not None

    def visits_at(self, h: int) -> np.ndarray:
        """Noisy n'_h(s, a), shape (S, A), int64 (the pooled table if stationary)."""
        g = step_index(h, self.H, self.stationary)
        return self.visits if self.stationary else self.visits[g]

    def reward_sums_at(self, h: int) -> np.ndarray | None:
        """Noisy R'_h(s, a), shape (S, A), float64 in [0, 1]-scaled reward units (stored values x value_unit)."""
        g = step_index(h, self.H, self.stationary)
        if self.rewards is None:
            return None
        unit = float(self.manifest.families["rewards"].value_unit)
        return (self.rewards if self.stationary else self.rewards[g]).astype(np.float64) * unit

    def check_spec(self, spec) -> None:
        """Raise unless ``spec`` (a DomainSpec) is the spec this release was made with.

        Compares ``spec.hash()`` with the manifest's ``spec_hash`` (SpecError: another spec was given,
        exit 2), then H, S, A (ArtifactError: the same spec hash over another domain, an edited manifest).
        """
        if spec.hash() != self.spec_hash:
            raise SpecError(f"{self.path}: the release was made with spec hash {self.spec_hash[:12]}..., "
                                f"not with this spec ({spec.hash()[:12]}...). Use the spec the release was made with.")
        if (spec.H, spec.S, spec.A) != (self.H, self.S, self.A):
            raise ArtifactError(f"{self.path}: release domain (H, S, A) = {(self.H, self.S, self.A)} differs from "
                                f"the spec's {(spec.H, spec.S, spec.A)}.")

    def transitions_at(self, h: int) -> np.ndarray:
        """Noisy transition counts n'_h(s, a, s') of step ``h``, shape (S, A, S), int64.

        For a stationary release every h in [0, H) returns the pooled table.
        Format version 3 reads row group h (S*S rows: index columns checked
        to list every (state, next_state) once, sorted, at step h; the A
        count columns stacked); version 2 reads the ``value`` column of row group h
        (S*A*S values, row-major over (state, action, next_state)); version
        1 reads the row group with its index columns and checks they list
        every cell once, in that order.

        Raises
        ------
        UsageError
            If ``h`` is not an integer in [0, H).
        ArtifactError
            If the row group is not the dense, sorted (S, A, S) slice the
            format promises.
        """
        group = step_index(h, self.H, self.stationary)
        S, A = self.S, self.A
        path = self.path / FILES["transitions"]
        version = self.manifest.format_version
        try:
            pf = pq.ParquetFile(path)
            tab = pf.read_row_group(group, columns=["value"] if version == 2 else None)
        except (OSError, pa.ArrowException) as e:
            raise ArtifactError(f"{path}: cannot read row group {group}: {e}") from None
        lead = [] if self.stationary else ["h"]
        if version >= 3:
            return _wide_slice(path, tab, group, (S, A), None if self.stationary else int(h))
        if version == 2:
            col = tab.column("value")
            if tab.num_rows != S * A * S or col.null_count or not pa.types.is_integer(col.type):
                raise ArtifactError(f"{path}: row group {group} must hold {S * A * S} integer values, no nulls "
                                    f"(the dense (S, A, S) slice); found {tab.num_rows} values of type {col.type} "
                                    f"with {col.null_count} nulls. The release is corrupt.")
            return numpy_of(col, f"{path}: value").astype(np.int64).reshape(S, A, S)
        want = ["state", "action", "next_state", "value"] + lead
        missing = [c for c in want if c not in tab.column_names]
        if missing or tab.num_rows != S * A * S:
            raise ArtifactError(f"{path}: row group {group} must hold {S * A * S} rows with columns {want}; "
                                f"found {tab.num_rows} rows{_missing(missing)}. The release is corrupt.")
        _check_dense(path, tab, ["state", "action", "next_state"], (S, A, S),
                     None if self.stationary else int(h))
        return numpy_of(tab.column("value"), f"{path}: value").astype(np.int64).reshape(S, A, S)

    def iter_transitions(self):
        """Yield (h, n'_h of shape (S, A, S)) for h = 0..H-1 (once if stationary)."""
        for h in range(1 if self.stationary else self.H):
            yield h, self.transitions_at(h)

    def __repr__(self) -> str:
        fam = list(self.manifest.families)
        r = None if self.rewards is None else self.rewards.shape
        return (f"Release(H={self.H}, S={self.S}, A={self.A}, stationary={self.stationary}, "
                f"families={fam}, visits{self.visits.shape}, rewards={r}, "
                f"mechanism={self.manifest.mechanism!r}, rho={self.manifest.rho:.6g})")


def _wide_slice(path: Path, tab: pa.Table, group: int, shape: tuple[int, int], h: int | None) -> np.ndarray:
    """Format version 3: the (S, A, S) int64 slice of one row group (index columns checked, one column per action).

    Raises
    ------
    ArtifactError
        Not S*S rows listing every (state, next_state) once, sorted (and only step ``h``), or a count column
        missing or holding nulls or non-integers.
    """
    S, A = shape
    counts = action_columns(A)
    names = (["state", "next_state"] if h is None else ["h", "state", "next_state"]) + counts
    missing = [c for c in names if c not in tab.column_names]
    if missing or tab.num_rows != S * S:
        raise ArtifactError(f"{path}: row group {group} must hold {S * S} rows with columns {names[:-A]} and "
                            f"action_0 .. action_{A - 1}; found {tab.num_rows} rows{_missing(missing[:5])}. "
                            "The release is corrupt.")
    _check_dense(path, tab, ["state", "next_state"], (S, S), h)
    cols = [numpy_of(tab.column(c), f"{path}: {c}").reshape(S, S) for c in counts]
    return np.stack(cols, axis=1).astype(np.int64, copy=False)  # (S, A, S)


def _check_dense(path: Path, tab: pa.Table, names: list[str], shape: tuple[int, ...], h: int | None) -> None:
    """Raise ArtifactError unless ``tab`` lists every cell of ``shape`` once, row-major.

    Column ``names[i]``, reshaped to ``shape``, must equal ``arange(shape[i])``
    along axis i (a broadcast comparison: no int64 copy of the columns).
    """
    for i, (n, d) in enumerate(zip(names, shape)):
        col = tab.column(n)
        if col.null_count:
            raise ArtifactError(f"{path}: column '{n}' holds nulls. The release is corrupt.")
        along = np.arange(d).reshape([d if j == i else 1 for j in range(len(shape))])
        if not np.array_equal(numpy_of(col, f"{path}: {n}").reshape(shape), np.broadcast_to(along, shape)):
            raise ArtifactError(f"{path}: rows must list every cell of {names} of shape {shape} once, "
                                f"sorted row-major. The release is corrupt.")
    if h is not None:
        hc = numpy_of(tab.column("h"), f"{path}: h")
        if hc.size and (hc.min() != h or hc.max() != h):
            raise ArtifactError(f"{path}: row group {h} must hold h = {h} only. The release is corrupt.")


def _cannot_read(path: Path, e: Exception) -> str:
    """The one-line reason a release file cannot be read (a missing file says so, not only its path)."""
    if isinstance(e, FileNotFoundError):
        return f"{path}: missing: the release is incomplete (every file the manifest lists must be present)."
    return f"{path}: cannot read: {e}"


def _missing(columns: list[str]) -> str:
    """", missing ['h']" for a message; nothing when no column is missing (only the row count is wrong)."""
    return f", missing {columns}" if columns else ""


def _read_sa(path: Path, H: int, S: int, A: int, stationary: bool) -> np.ndarray:
    try:  # ParquetFile, not pq.read_table: that loads pyarrow.dataset, which imports pandas (~1 s, issue 19)
        with pq.ParquetFile(path) as pf:
            tab = pf.read()
    except (OSError, pa.ArrowException) as e:
        raise ArtifactError(_cannot_read(path, e)) from None
    names = ["state", "action"] if stationary else ["h", "state", "action"]
    shape = (S, A) if stationary else (H, S, A)
    missing = [c for c in names + ["value"] if c not in tab.column_names]
    if missing or tab.num_rows != int(np.prod(shape)):
        raise ArtifactError(f"{path}: must hold {int(np.prod(shape))} rows with columns {names + ['value']}; "
                            f"found {tab.num_rows} rows{_missing(missing)}. The release is corrupt.")
    _check_dense(path, tab, names, shape, None)
    return numpy_of(tab.column("value"), f"{path}: value").astype(np.int64).reshape(shape)


def read_manifest(path: Path) -> ReleaseManifest:
    """Read and check ``manifest.json`` of a release folder.

    Raises
    ------
    ArtifactError
        Missing or unreadable manifest, unknown ``format_version``, a
        manifest that breaks ``schemas/release_manifest.schema.json``
        (:meth:`ReleaseManifest.from_dict`), or one whose stated guarantee or
        sensitivities are smaller than its own mechanism facts imply
        (``privaudit.release.manifest_check``). The manifest is not
        authenticated: this checks consistency, not provenance.
    """
    mpath = Path(path) / MANIFEST
    if not Path(path).exists():
        raise MissingInputError(f"{path}: no such release folder.")
    try:
        doc = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path} is not a privaudit release: {MANIFEST} is missing.") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(_cannot_read(mpath, e)) from None
    m = ReleaseManifest.from_dict(doc, mpath)
    check_manifest_guarantee(m, mpath)  # the stated guarantee must follow from the mechanism facts
    return m


def load_release(path: str | Path) -> Release:
    """Read a release folder written by ``privaudit release``.

    Parameters
    ----------
    path : str or Path
        The release folder.

    Returns
    -------
    Release
        Visits (and rewards) loaded; transitions read per h on demand.

    Raises
    ------
    ArtifactError
        Missing files, unknown format version, a manifest that breaks its
        schema or states a guarantee its own mechanism facts do not support
        (:func:`read_manifest`), or tables that are not dense over the
        declared domain.
    """
    path = Path(path)
    m = read_manifest(path)
    H, S, A, st = m.domain.H, m.domain.S, m.domain.A, m.domain.stationary
    visits = _read_sa(path / FILES["visits"], H, S, A, st)
    rewards = _read_sa(path / FILES["rewards"], H, S, A, st) if m.has_rewards else None
    tpath = path / FILES["transitions"]
    try:
        pf = pq.ParquetFile(tpath)
    except (OSError, pa.ArrowException) as e:
        raise ArtifactError(_cannot_read(tpath, e)) from None
    n_groups = pf.num_row_groups
    if n_groups != (1 if st else H):
        raise ArtifactError(f"{tpath}: must hold {1 if st else H} row groups (one per h); found {n_groups}. "
                            f"The release is corrupt.")
    if m.format_version >= 2:
        _check_dense_layout(tpath, m, pf.schema_arrow)
    return Release(path=path, manifest=m, visits=visits, rewards=rewards, _n_row_groups=n_groups)


def _check_dense_layout(path: Path, m: ReleaseManifest, schema: pa.Schema) -> None:
    """Format versions 2 and 3: the manifest's dense layout and the file's columns must be the ones the format
    defines.

    Raises
    ------
    ArtifactError
        ``families.transitions`` records another shape, row group shape or
        order than (H, S, A, S) / (S, A, S) / ``DENSE_ORDER`` (version 2) or
        ``WIDE_ORDER`` (version 3), or the file holds other columns than one
        integer ``value`` (version 2) or (h,) state, next_state and an
        integer column ``action_<a>`` per action (version 3).
    """
    d = m.domain
    fam = m.families["transitions"]
    v3 = m.format_version >= 3
    want_shape = (d.S, d.A, d.S) if d.stationary else (d.H, d.S, d.A, d.S)
    dense = fam.dense
    got = (tuple(fam.shape), dense.row_groups, tuple(dense.row_group_shape), dense.order)
    want = (want_shape, 1 if d.stationary else d.H, (d.S, d.A, d.S), WIDE_ORDER if v3 else DENSE_ORDER)
    if got != want:
        raise ArtifactError(f"{path.parent / MANIFEST}: families.transitions records shape {got[0]}, {got[1]} row "
                            f"groups of shape {got[2]}, order {got[3]!r}; format version {m.format_version} with this "
                            f"domain means shape {want[0]}, {want[1]} row groups of shape {want[2]}, order "
                            f"{want[3]!r}. The manifest is inconsistent; do not use this release.")
    value = schema.field("value").type if "value" in schema.names else None
    if not v3:
        if schema.names != ["value"] or not pa.types.is_integer(value):
            raise ArtifactError(f"{path}: format version 2 stores one integer column 'value'; found columns "
                                f"{schema.names}. The release is corrupt (or its manifest's format version is wrong).")
        return
    names = ([] if d.stationary else ["h"]) + ["state", "next_state"] + action_columns(d.A)
    types = [schema.field(n).type for n in schema.names[len(names) - d.A:]] if schema.names == names else []
    if schema.names != names or not all(pa.types.is_integer(t) for t in types):
        raise ArtifactError(f"{path}: format version 3 stores integer columns {names[:-d.A]} and action_0 .. "
                            f"action_{d.A - 1} (a count column per action); found columns {schema.names[:6]}"
                            f"{' ...' if len(schema.names) > 6 else ''}. The release is corrupt (or its manifest's "
                            "format version is wrong).")
