"""A fixed public split of the privacy units into a training part and a held-out part.

The part of a unit is a function of its id alone (XXH64 of the id's text,
public seed), so replacing one unit's data changes one part only and the two
parts hold disjoint units (docs/certificates.md, "Held-out certification").
"""

from __future__ import annotations

import polars as pl
import polars_hash as plh

from privaudit.data.bounding import episode_id_text

__all__ = ["SPLIT_HASH_SEED", "HELD_OUT", "in_part", "unit_part"]

#: Seed of XXH64 in the split (public, not a noise seed; differs from the keep-k key's seed 42).
SPLIT_HASH_SEED = 28
#: The held-out (certification) part; part 0 trains.
HELD_OUT = 1


def unit_part(unit: pl.Expr) -> pl.Expr:
    """0 (train) or 1 (held out) for each row, from its privacy unit's id: xxh64(text, 28) mod 2."""
    h = plh.NonCryptographicHashingNameSpace(episode_id_text(unit)).xxhash64(seed=SPLIT_HASH_SEED)
    return (h % 2).cast(pl.Int8)


def in_part(unit_column: str, part: int) -> pl.Expr:
    """Filter expression: the rows whose unit (column ``unit_column``) is in ``part`` (0 or 1)."""
    return unit_part(pl.col(unit_column)) == part
