"""Anyone's mechanism: neighbouring inputs of any type, and variable-length outputs.

The auditor runs ``fn(data, rng)`` on the two datasets of a pair and never looks
inside ``data``, so a mechanism may take any input: a number (a count), a
vector (query answers, a histogram), a polars table with a privacy-unit
column, or trajectory logs. :func:`input_pair` builds the pair from two such
inputs and records the claim's neighbouring relation (substitution or
add/remove) in the report; :class:`SequenceOutput` encodes a variable-length
output (e.g. the answered prefix of the sparse vector technique) into the
fixed shape the attacks need, so that the user does not pad it.
docs/audit.md, "Auditing your own mechanism".
"""

from __future__ import annotations

import numbers

import numpy as np
import polars as pl

from privaudit.audit.explicit_pairs import check_neighbours
from privaudit.audit.pairs import NeighbouringPair
from privaudit.audit.protocol import is_batched, numeric_output
from privaudit.core.errors import UsageError, UserCodeError

#: The neighbouring relations a claim may state (recorded as ``neighbouring_pair.relation``).
RELATIONS = ("substitution", "add/remove")
#: Entries of a number or vector input shown in the report's pair description.
SHOWN_ENTRIES = 6


def _show(x: np.ndarray) -> str:
    """A number or vector in words: every entry up to SHOWN_ENTRIES; a longer vector of at most that many
    runs of equal entries as ``value xcount`` runs ("(1 x10, 0 x10)"); else its first entries and its size."""
    flat = x.ravel()
    starts = np.flatnonzero(np.concatenate([[True], flat[1:] != flat[:-1]])) if flat.size else np.zeros(0, int)
    if flat.size <= SHOWN_ENTRIES:
        body = ", ".join(f"{v:g}" for v in flat)
    elif len(starts) <= SHOWN_ENTRIES:
        lengths = np.diff(np.append(starts, flat.size))
        body = ", ".join(f"{flat[i]:g}" if n == 1 else f"{flat[i]:g} x{n}" for i, n in zip(starts, lengths))
    else:
        body = ", ".join(f"{v:g}" for v in flat[:SHOWN_ENTRIES]) + f", ... ({flat.size} entries)"
    return f"({body})" if x.ndim else body


def input_pair(d, d_prime, *, relation: str = "substitution", unit: str | None = None) -> NeighbouringPair:
    """A neighbouring pair of two inputs of any type, for ``run_audit(pair=...)``.

    Parameters
    ----------
    d, d_prime : number, array-like, polars.DataFrame or any object
        D and D', passed unchanged to the mechanism ``fn(data, rng)``. Numbers
        and array-likes become float64 arrays (same shape required) and are
        shown in the report (``neighbouring_pair.inputs``, e.g. ``(1, 1, 1) vs
        (2, 0, 0)``, or runs of equal entries ``(1 x10, 0 x10)``): a report of a pair of real data is not shareable. Tables
        are checked to be neighbours under ``relation`` unit by unit
        (:func:`privaudit.audit.explicit_pairs.check_neighbours`); other
        objects are taken as the user states.
    relation : {"substitution", "add/remove"}
        The claim's neighbouring relation: D' is D with one privacy unit's data
        replaced, or D' is D with one unit added or removed. The Clopper-Pearson
        test is the same for both (DP is symmetric in D and D' under either);
        the relation is what a violation refutes, so the report records it.
    unit : str, optional
        Tables only: the privacy unit's column (default ``unit_id``).

    Returns
    -------
    NeighbouringPair
        ``description``: ``kind`` "custom", ``relation``, ``input`` (number,
        vector, table, object), ``inputs`` (numbers and vectors) or the units
        changed (tables).

    Raises
    ------
    UsageError
        Unknown relation; numbers or vectors of different shapes or not
        finite; a table without the unit column (named, with the columns it
        has); tables that are not neighbours under ``relation``.
    """
    if relation not in RELATIONS:
        raise UsageError(f"`relation` must be one of {RELATIONS}. Found {relation!r}.")
    desc = {"kind": "custom", "relation": relation}
    if isinstance(d, pl.DataFrame) and isinstance(d_prime, pl.DataFrame):
        info = check_neighbours(d, d_prime, unit=unit or "unit_id", relation=relation)
        desc.update(input="table", removed_units=info["removed_units"], added_units=info["added_units"],
                    inputs=f"tables of {d.height} and {d_prime.height} rows, {info['removed_units']} unit(s) "
                           f"removed and {info['added_units']} added")
        return NeighbouringPair(d, d_prime, desc)
    if isinstance(d, pl.DataFrame) or isinstance(d_prime, pl.DataFrame):
        raise UsageError("`d` and `d_prime` must both be polars tables, or neither.")
    if _is_numeric(d) and _is_numeric(d_prime):
        a, b = np.asarray(d, dtype=np.float64), np.asarray(d_prime, dtype=np.float64)
        if a.shape != b.shape:
            raise UsageError(f"D and D' must have the same shape; found {a.shape} and {b.shape}.")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise UsageError("D and D' must hold finite numbers (a NaN or inf input).")
        desc.update(input="number" if a.ndim == 0 else "vector", inputs=f"{_show(a)} vs {_show(b)}")
        return NeighbouringPair(a, b, desc)
    desc.update(input="object", inputs=f"{type(d).__name__} vs {type(d_prime).__name__} (as given)")
    return NeighbouringPair(d, d_prime, desc)


def _is_numeric(x) -> bool:
    if isinstance(x, numbers.Real):
        return True
    try:
        return np.asarray(x).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


class SequenceOutput:
    """A mechanism whose run returns a variable-length sequence, encoded to a fixed shape.

    The encoded run is ``[length, x_0, ..., x_{L-1}]`` (``L = max_length``,
    each x_i of ``width`` numbers) with NaN after the sequence's end: the
    length is a cell of its own, absent entries are NaN (not a number a
    score would read as data: the linear scores see them as 0 and the
    non-finite indicator and the learned attack see them as absent).

    Parameters
    ----------
    fn : callable
        ``fn(data, rng)`` returning a sequence (list, tuple or array of shape
        (length,) or (length, width)); or, if it takes ``n_runs``,
        ``fn(data, rng, n_runs=N)`` returning N such sequences.
    max_length : int
        The longest sequence a run can return (e.g. the number of queries of
        an SVT), >= 1.
    width : int
        Numbers per element (default 1).

    Raises
    ------
    UsageError
        ``max_length`` or ``width`` < 1 (on construction).
    UserCodeError
        A run returns a longer sequence, non-numbers, or elements of another
        width (on call).
    """

    def __init__(self, fn, max_length: int, width: int = 1):
        if not (isinstance(max_length, (int, np.integer)) and max_length >= 1):
            raise UsageError(f"`max_length` must be an integer >= 1. Found {max_length!r}.")
        if not (isinstance(width, (int, np.integer)) and width >= 1):
            raise UsageError(f"`width` must be an integer >= 1. Found {width!r}.")
        self.fn, self.max_length, self.width = fn, int(max_length), int(width)
        self.name = getattr(fn, "name", None) or getattr(fn, "__name__", "sequence mechanism")

    def cell_name(self, j: int) -> str:
        """Words for cell ``j`` of the encoded output (for the report's event description)."""
        if j == 0:
            return "length"
        i, k = divmod(j - 1, self.width)
        return f"element {i}" + (f" (part {k})" if self.width > 1 else "")

    def encode(self, runs) -> np.ndarray:
        """Encode a list of sequences, shape (n, 1 + max_length * width) float64."""
        out = np.full((len(runs), 1 + self.max_length * self.width), np.nan)
        for r, seq in enumerate(runs):  # one row per run: the sequences are ragged
            arr = numeric_output(seq, f"mechanism {self.name}").astype(np.float64)
            if arr.ndim == 0 or arr.ndim > 2 or arr.size % self.width:
                raise UserCodeError(f"mechanism {self.name} must return a sequence of elements of {self.width} "
                                    f"number(s); it returned shape {arr.shape}.")
            n = arr.size // self.width
            if n > self.max_length:
                raise UserCodeError(f"mechanism {self.name} returned a sequence of length {n}, more than "
                                    f"max_length={self.max_length}.")
            out[r, 0] = n
            out[r, 1:1 + arr.size] = arr.ravel()
        return out

    def __call__(self, data, rng):
        return self.encode([self.fn(data, rng)])[0]


class BatchedSequenceOutput(SequenceOutput):
    """:class:`SequenceOutput` of a mechanism that takes ``n_runs`` (returns a list of N sequences)."""

    def __call__(self, data, rng, n_runs: int = 1):
        runs = self.fn(data, rng, n_runs=n_runs)
        if len(runs) != n_runs:
            raise UserCodeError(f"mechanism {self.name} returned {len(runs)} sequences for n_runs={n_runs}.")
        return self.encode(runs)


def sequence_output(fn, max_length: int, width: int = 1) -> SequenceOutput:
    """``fn`` (returning a variable-length sequence per run) as a fixed-shape mechanism for ``run_audit``.

    Batched (:class:`BatchedSequenceOutput`) when ``fn`` takes ``n_runs``; see :class:`SequenceOutput`
    for the encoding and the errors.
    """
    cls = BatchedSequenceOutput if is_batched(fn) else SequenceOutput
    return cls(fn, max_length, width)
