"""Will a release fit on this machine? Its peak memory, from the public domain alone, checked before any row is read."""

from __future__ import annotations

import os

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec

__all__ = ["check_release_size", "release_memory_estimate", "physical_memory_bytes", "MEMORY_PER_SLICE_BYTE",
           "MAX_SLICE_CELLS"]

#: Peak working memory of a release per byte of one dense (S, A, S) int64
#: transition slice: the exact slice (noised in place), the previous noisy
#: slice being written, its int32 Arrow copy and the encoder's buffers.
#: Measured 2.5 x (benchmarks/bench_release_memory.py: peak RSS over the
#: start, S = 1000 and 1500, A = 10, both mechanisms); 4 leaves a margin.
#: (6 while the noise was copied and index columns written: 3.8-4.9 x.)
MEMORY_PER_SLICE_BYTE = 4
#: Most cells of one (S, A, S) slice: one Parquet row group of Arrow arrays
#: with int32 dictionary indices and int32 index columns (``artifact``).
MAX_SLICE_CELLS = 2**31 - 1


def physical_memory_bytes() -> int | None:
    """The machine's physical memory (``SC_PAGE_SIZE * SC_PHYS_PAGES``), None where unknown."""
    try:
        n = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return n if n > 0 else None


def release_memory_estimate(spec: DomainSpec, *, stationary: bool, n_sa_families: int = 2) -> dict:
    """Estimated peak working memory of :func:`privaudit.release.tabular.release_logs` from the public domain alone.

    Parameters
    ----------
    spec : DomainSpec
    stationary : bool
    n_sa_families : int
        (H, S, A) tables noised at once: visits, and rewards when private.

    Returns
    -------
    dict
        ``slice_cells`` = S*A*S (cells of one transition slice), ``bytes`` =
        MEMORY_PER_SLICE_BYTE x 8 x (S*A*S + n_sa_families x H*S*A) (the
        (H, S, A) tables go through the same noise path; H is 1 when
        stationary). Rows of the logs add a sparse table on top (at most one
        cell per row), not counted here.
    """
    S, A = int(spec.S), int(spec.A)
    h = 1 if stationary else int(spec.H)
    cells = S * A * S
    return {"slice_cells": cells, "bytes": MEMORY_PER_SLICE_BYTE * 8 * (cells + n_sa_families * h * S * A)}


def check_release_size(spec: DomainSpec, *, stationary: bool, n_sa_families: int = 2) -> dict:
    """Refuse a domain whose release cannot run on this machine, before any row is read.

    Raises
    ------
    UsageError
        One (S, A, S) slice holds more than MAX_SLICE_CELLS cells, or the
        estimate of :func:`release_memory_estimate` exceeds the physical
        memory (:func:`physical_memory_bytes`). The message names both figures.
    """
    est = release_memory_estimate(spec, stationary=stationary, n_sa_families=n_sa_families)
    S, A = spec.S, spec.A
    if est["slice_cells"] > MAX_SLICE_CELLS:
        raise UsageError(
            f"the domain is too large to release: one transition slice n_h(s, a, s') has S*A*S = "
            f"{S}*{A}*{S} = {est['slice_cells']:,} cells, above the {MAX_SLICE_CELLS:,} that one Parquet "
            f"row group with int32 indexing holds. Coarsen the state space (n_states) in the spec.")
    phys = physical_memory_bytes()
    if phys is not None and est["bytes"] > phys:
        raise UsageError(
            f"the domain is too large to release on this machine: the estimated peak working memory is "
            f"{est['bytes'] / 2**30:,.1f} GiB ({MEMORY_PER_SLICE_BYTE} x one dense int64 (S, A, S) slice of "
            f"{S}*{A}*{S} cells, plus the (H, S, A) tables), above the physical memory of "
            f"{phys / 2**30:,.1f} GiB. Coarsen the state space (n_states) in the spec, or use a larger machine.")
    return est
