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
from privaudit.data.bounding import episode_id_text

__all__ = ["SPLIT_HASH_SEED", "HELD_OUT", "HOLD_OUT_DEFAULT", "check_fraction", "in_part", "unit_part"]

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


def unit_part(unit: pl.Expr, fraction: float = HOLD_OUT_DEFAULT) -> pl.Expr:
    """0 (train) or 1 (held out) for each row, from its privacy unit's id and the public ``fraction``.

    Held out when (xxh64(id text, seed 28) mod 2^32) < floor(fraction 2^32).

    Raises
    ------
    UsageError
        ``fraction`` not strictly between 0 and 1.
    """
    threshold = math.floor(check_fraction(fraction) * 2 ** _BITS)
    h = plh.NonCryptographicHashingNameSpace(episode_id_text(unit)).xxhash64(seed=SPLIT_HASH_SEED)
    return ((h % (2 ** _BITS)) < threshold).cast(pl.Int8)


def in_part(unit_column: str, part: int, fraction: float = HOLD_OUT_DEFAULT) -> pl.Expr:
    """Filter expression: the rows whose unit (column ``unit_column``) is in ``part`` (0 or 1)."""
    return unit_part(pl.col(unit_column), fraction) == part
