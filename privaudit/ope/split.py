"""A fixed public split of the privacy units into a training part and a held-out part.

The part of a unit is a function of its id alone (XXH64 of the id's text,
public seed) and of a public fraction f, so replacing one unit's data changes
one part only and the two parts hold disjoint units (docs/certificates.md,
"Held-out certification"). A unit is held out when the low 32 bits of its
hash, read as an integer u, satisfy u < floor(f 2^32): about a fraction f of
the units.
"""

from __future__ import annotations

import math

import polars as pl
import polars_hash as plh

from privaudit.core.errors import UsageError
from privaudit.data.bounding import episode_id_text, unit_column_of

__all__ = ["SPLIT_HASH_SEED", "HELD_OUT", "HOLD_OUT_DEFAULT", "check_fraction", "in_part", "unit_part", "part_of"]

#: Seed of XXH64 in the split (public, not a noise seed; differs from the keep-k key's seed 42).
SPLIT_HASH_SEED = 28
#: The held-out (certification) part; part 0 trains.
HELD_OUT = 1
#: Default fraction of the units held out for certification.
HOLD_OUT_DEFAULT = 0.5
_BITS = 32


def check_fraction(fraction: float) -> float:
    """``fraction`` as a float in (0, 1), else UsageError naming it."""
    try:
        f = float(fraction)
    except (TypeError, ValueError):
        f = math.nan
    if isinstance(fraction, bool) or not (0.0 < f < 1.0):
        raise UsageError(f"the held-out fraction must lie strictly between 0 and 1. Found {fraction!r}.")
    return f


def _threshold(fraction: float) -> int:
    return math.floor(check_fraction(fraction) * 2 ** _BITS)


def unit_part(unit: pl.Expr, fraction: float = HOLD_OUT_DEFAULT) -> pl.Expr:
    """0 (train) or 1 (held out) for each row, from its privacy unit's id and the public ``fraction``.

    Held out when (xxh64(id text, seed 28) mod 2^32) < floor(fraction 2^32).

    Raises
    ------
    UsageError
        ``fraction`` not strictly between 0 and 1.
    """
    threshold = _threshold(fraction)
    h = plh.NonCryptographicHashingNameSpace(episode_id_text(unit)).xxhash64(seed=SPLIT_HASH_SEED)
    return ((h % (2 ** _BITS)) < threshold).cast(pl.Int8)


def in_part(unit_column: str, part: int, fraction: float = HOLD_OUT_DEFAULT) -> pl.Expr:
    """Filter expression: the rows whose unit (column ``unit_column``) is in ``part`` (0 or 1)."""
    return unit_part(pl.col(unit_column), fraction) == part


def part_of(bounded, part: int, fraction: float = HOLD_OUT_DEFAULT):
    """The rows of bounded logs whose privacy unit is in ``part`` (0 train, 1 held out), either engine.

    Parameters
    ----------
    bounded : polars LazyFrame / DataFrame, or pyspark DataFrame
        Bounded logs; the unit column is ``unit_id`` (a polars frame without it: ``episode_id``, each
        episode its own unit; the Spark engine always has ``unit_id``).
    part : {0, 1}
    fraction : float
        The public held-out fraction, strictly between 0 and 1.

    Returns
    -------
    The same kind of frame, filtered (lazily).

    Raises
    ------
    UsageError
        ``fraction`` not strictly between 0 and 1.
    """
    if isinstance(bounded, (pl.LazyFrame, pl.DataFrame)):
        return bounded.filter(in_part(unit_column_of(bounded.lazy()), part, fraction))
    from privaudit.data.spark import stats  # optional dependency: pyspark only with a Spark frame

    return bounded.filter(stats.spark_unit_part(bounded["unit_id"], _threshold(fraction), SPLIT_HASH_SEED)
                          == int(part))
