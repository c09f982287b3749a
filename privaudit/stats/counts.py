"""Exact sufficient statistics of bounded tabular logs, as dense arrays.

The statistics of DP-APVI (ALGORITHMS.md 1.2 step 2, [Q:ICLR]) over the
*declared* domain (S, A, H from the spec, never from the data):

* visits      n_h(s, a)      shape (H, S, A)      int64
* transitions n_h(s, a, s')  shape (H, S, A, S)   int64, produced one h at a time
* reward sums R_h(s, a)      shape (H, S, A)      sum of scaled rewards in [0, 1]

Steps are 0-based, h = 0..H-1 (the papers' h = 1..H shifted by one).
With ``stationary=True`` the counts are pooled over h: (S, A), (S, A, S), (S, A).

Every function expects *bounded* logs (``privaudit.data.bounding``): at most k
episodes per unit, step < H, rewards scaled into [0, 1]. A row whose state is
a terminal state is not counted: the MDP is absorbing there, so it carries no
information (and validation rejects rows after a terminal anyway). The row
*into* a terminal state (next_state terminal) is a real transition and is
counted.

All aggregation is a polars group-by over one integer cell index; the sparse
group-by result is scattered into a dense numpy array, one h-slice at a time
for transitions, so that a domain like ICU-Sepsis (H=20, S=716, A=25: 256 M
transition cells) never exists in memory as a whole.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import polars as pl

from privaudit.errors import ValidationFailed
from privaudit.spec import DomainSpec

Frame = pl.LazyFrame | pl.DataFrame


def _lazy(frame: Frame) -> pl.LazyFrame:
    return frame.lazy() if isinstance(frame, pl.DataFrame) else frame


def _counted_rows(frame: Frame, spec: DomainSpec, columns: list[str]) -> pl.LazyFrame:
    """Rows that count: state not terminal; the index columns cast to Int64."""
    lf = _lazy(frame)
    if spec.terminal_states:
        lf = lf.filter(~pl.col("state").is_in(list(spec.terminal_states)))
    return lf.select([pl.col(c).cast(pl.Int64) for c in columns]
                     + ([pl.col("reward")] if "reward" in lf.collect_schema().names() else []))


def _check_domain(cells: pl.DataFrame, spec: DomainSpec, columns: list[str]) -> None:
    """Refuse indices outside the declared domain (a privacy invariant: no assert).

    Validation rejects such rows before a release; this is the last guard so
    that an unvalidated frame can never be scattered out of bounds or wrap.
    """
    bound = {"step": spec.H, "state": spec.S, "action": spec.A, "next_state": spec.S}
    for c in columns:
        if cells.height == 0:
            return
        lo, hi = cells[c].min(), cells[c].max()
        if lo < 0 or hi >= bound[c]:
            raise ValidationFailed(
                f"column '{c}' holds values in [{lo}, {hi}] outside the declared domain [0, {bound[c]}) "
                f"(after bounding). Run `privaudit validate` on the logs and fix the rows it lists."
            )


def _cell_index(columns: list[str], sizes: list[int]) -> pl.Expr:
    """Row-major flat index over ``columns`` with the given sizes (Int64)."""
    idx = pl.lit(0, dtype=pl.Int64)
    for c, n in zip(columns, sizes):
        idx = idx * n + pl.col(c)
    return idx


def _sa_table(frame: Frame, spec: DomainSpec, stationary: bool, value: pl.Expr | None,
              dtype) -> np.ndarray:
    """Dense (H, S, A) or (S, A) table of ``sum(value)`` (``count`` if value is None)."""
    H, S, A = spec.H, spec.S, spec.A
    cols = (["state", "action"] if stationary else ["step", "state", "action"])
    sizes = [S, A] if stationary else [H, S, A]
    lf = _counted_rows(frame, spec, cols)
    agg = pl.len().alias("v") if value is None else value.sum().alias("v")
    cells = lf.group_by(cols).agg(agg).collect()
    _check_domain(cells, spec, cols)
    out = np.zeros(int(np.prod(sizes)), dtype=dtype)
    if cells.height:
        flat = np.ravel_multi_index(tuple(cells[c].to_numpy() for c in cols), sizes)
        out[flat] = cells["v"].to_numpy().astype(dtype, copy=False)
    return out.reshape(sizes)


def visit_counts(frame: Frame, spec: DomainSpec, *, stationary: bool = False) -> np.ndarray:
    """Exact visit counts n_h(s, a) = #{episodes tau : (s_h, a_h) = (s, a)}.

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame
        Bounded logs with columns ``step``, ``state``, ``action``.
    spec : DomainSpec
        Declared domain (H, S, A, terminal states).
    stationary : bool
        Pool over h.

    Returns
    -------
    ndarray of int64, shape (H, S, A), or (S, A) if ``stationary``.

    Raises
    ------
    ValidationFailed
        If an index lies outside the declared domain (unvalidated input).

    References
    ----------
    Qiao & Wang, Offline RL with DP, Alg. 1 raw counts; ALGORITHMS.md 1.2 step 2.
    """
    return _sa_table(frame, spec, stationary, None, np.int64)


def reward_sums(frame: Frame, spec: DomainSpec, *, stationary: bool = False,
                quantum: int | None = None) -> np.ndarray:
    """Exact reward sums R_h(s, a) = sum of scaled rewards r in [0, 1] at (h, s, a).

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame
        Bounded logs (rewards already clipped and scaled into [0, 1]).
    spec : DomainSpec
    stationary : bool
        Pool over h.
    quantum : int or None
        If given, each row's reward is first rounded to a multiple of
        1/quantum and the sum is returned as an int64 count of 1/quantum
        units (``round(r * quantum)`` summed). A per-row, data-independent
        rounding: a row still contributes at most ``quantum`` units, so the
        sensitivity in these units is ``quantum`` times the sensitivity for
        rewards in [0, 1]. None returns the float64 sums.

    Returns
    -------
    ndarray, shape (H, S, A) or (S, A); float64, or int64 when ``quantum`` is set.
    """
    if quantum is None:
        return _sa_table(frame, spec, stationary, pl.col("reward").cast(pl.Float64), np.float64)
    q = (pl.col("reward").cast(pl.Float64) * int(quantum)).round(0).cast(pl.Int64)
    return _sa_table(frame, spec, stationary, q, np.int64)


def iter_transition_counts(frame: Frame, spec: DomainSpec, *,
                           stationary: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """Exact transition counts n_h(s, a, s'), one step h at a time.

    Parameters
    ----------
    frame : polars LazyFrame or DataFrame
        Bounded logs with ``step``, ``state``, ``action``, ``next_state``.
    spec : DomainSpec
    stationary : bool
        Pool over h: yields a single ``(0, counts)`` pair of the pooled table.

    Yields
    ------
    h : int
        Step, 0..H-1 (0 for the pooled table).
    counts : ndarray of int64, shape (S, A, S)
        n_h(s, a, s'); a fresh array each time (the caller may keep or free it).

    Notes
    -----
    One polars group-by over the flat cell index ``((h*S + s)*A + a)*S + s'``
    gives the observed cells (at most one per row), sorted; each h-slice is
    scattered into a dense (S, A, S) array only when requested. Peak memory:
    the sparse result plus one dense h-slice (ICU-Sepsis: 12.8 M cells, 102 MB).
    """
    H, S, A = spec.H, spec.S, spec.A
    cols = ["state", "action", "next_state"] if stationary else ["step", "state", "action", "next_state"]
    sizes = [S, A, S] if stationary else [H, S, A, S]
    cells = (_counted_rows(frame, spec, cols).group_by(cols).agg(pl.len().alias("v"))
             .collect())
    _check_domain(cells, spec, cols)
    cells = cells.select(_cell_index(cols, sizes).alias("i"), pl.col("v")).sort("i")
    flat = cells["i"].to_numpy()
    counts = cells["v"].to_numpy().astype(np.int64)
    del cells
    per_h = S * A * S
    n_slices = 1 if stationary else H
    bounds = np.searchsorted(flat, np.arange(n_slices + 1, dtype=np.int64) * per_h)
    for h in range(n_slices):
        lo, hi = bounds[h], bounds[h + 1]
        out = np.zeros(per_h, dtype=np.int64)
        out[flat[lo:hi] - h * per_h] = counts[lo:hi]
        yield h, out.reshape(S, A, S)


def transition_counts(frame: Frame, spec: DomainSpec, *, stationary: bool = False) -> np.ndarray:
    """All transition counts at once, shape (H, S, A, S) (or (S, A, S) if stationary), int64.

    For small domains (tests, toy MDPs). Large domains should use
    :func:`iter_transition_counts`.
    """
    slices = [c for _, c in iter_transition_counts(frame, spec, stationary=stationary)]
    return slices[0] if stationary else np.stack(slices)
