"""The clinicians' value, the evaluated stays' cells and the held-out split on Spark, identical to polars.

The Spark twins of :mod:`privaudit.data.exact_sums` (the clinicians' value statistics,
``privaudit.release.behaviour_value``), of the one-stay-per-unit cell tables of
``privaudit.ope.model`` and of the unit split of ``privaudit.ope.split``. Spark does every pass over
the rows; only aggregates come back to the driver, as Arrow: the value statistics' scalars and S
start counts, the observed (h, s, a, s') cells of the kept stays.

Identity with polars: rewards are summed as integer limbs (:mod:`privaudit.data.exact_sums`), every
other sum is an integer sum (long, or decimal(38, 0) where a sum of squares could pass 2^63), and the
per-episode float arithmetic runs the same IEEE float64 operations in the same order as numpy. The
split's XXH64 with seed 28 is Spark's built-in ``xxhash64`` (fixed seed 42) chained from a long whose
hash with seed 42 is 28 (:func:`seed_preimage`): Spark hashes a row's columns in turn, each with the
previous hash as its seed.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from privaudit.data.exact_sums import LIMB_BITS, REWARD_BITS
from privaudit.data.spark.bounding import episode_rank
from privaudit.data.spark.counts import to_polars

__all__ = ["reward_limbs", "limbs_value", "centred_returns", "spark_value_sums", "spark_stay_cells",
           "seed_preimage", "xxhash64_seeded", "spark_unit_part"]

_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_SPARK_SEED = 42
_EXACT = "decimal(38,0)"  # sums of squares: exact to 10^38 (int64 would pass 2^63 on 10^9 units)


def reward_limbs(reward: Column) -> tuple[Column, Column]:
    """(hi, lo) of a scaled reward in [0, 1]: the twin of :func:`privaudit.data.exact_sums.reward_limbs`."""
    x = F.floor(reward.cast("double") * F.lit(float(2 ** REWARD_BITS))).cast("long")
    return F.shiftright(x, LIMB_BITS).alias("r_hi"), x.bitwiseAND(F.lit(2 ** LIMB_BITS - 1)).alias("r_lo")


def limbs_value(hi: Column, lo: Column) -> Column:
    """(double(hi) 2^26 + double(lo)) 2^-52: the twin of :func:`privaudit.data.exact_sums.limbs_value`."""
    return (hi.cast("double") * F.lit(float(2 ** LIMB_BITS)) + lo.cast("double")) * F.lit(2.0 ** -REWARD_BITS)


def centred_returns(length: Column, hi: Column, lo: Column, *, reward_range, low: float, high: float, bits: int,
                    c_max: int) -> Column:
    """The episode's c in lattice units (long): the twin of :func:`privaudit.data.exact_sums.centred_returns`,
    the same float64 operations in the same order (a double-to-long cast truncates toward zero)."""
    r_lo, r_hi = (float(x) for x in reward_range)
    G = length.cast("double") * F.lit(r_lo) + F.lit(r_hi - r_lo) * limbs_value(hi, lo)
    G = F.least(F.greatest(G, F.lit(float(low))), F.lit(float(high)))
    c = ((G - F.lit(0.5 * (float(low) + float(high)))) * F.lit(2.0 ** int(bits))).cast("long")
    return F.least(F.greatest(c, F.lit(-int(c_max))), F.lit(int(c_max)))


def spark_value_sums(bounded: DataFrame, *, n_states: int, max_episodes: int, reward_range, low: float,
                     high: float, bits: int, c_max: int) -> dict:
    """The clinicians' value statistics of Spark-bounded logs: :func:`privaudit.data.exact_sums.value_sums`'s.

    Parameters
    ----------
    bounded : pyspark DataFrame
        Bounded logs (``privaudit.data.spark.bounding.bound_contributions``): ``episode_id``,
        ``unit_id``, ``step``, ``state``, ``reward`` (scaled into [0, 1]).
    n_states, max_episodes, reward_range, low, high, bits, c_max
        As :func:`privaudit.data.exact_sums.value_sums`.

    Returns
    -------
    dict
        The same keys and the same integers as :func:`privaudit.data.exact_sums.value_sums`. PRIVATE.

    Notes
    -----
    One group-by per episode (cached on the cluster), one per unit when k > 1; two small results come
    back (the scalar sums, and at most S start-state counts).
    """
    c = F.col
    hi, lo = reward_limbs(c("reward"))
    per_ep = (bounded.groupBy(c("unit_id").alias("_u"), "episode_id")  # by unit first: no shuffle of rows cached by unit
              .agg(F.sum(hi).alias("r_hi"), F.sum(lo).alias("r_lo"), F.count(F.lit(1)).alias("L"),
                   F.min(F.when(c("step") == 0, c("state"))).cast("long").alias("s0"))
              .select(centred_returns(c("L"), c("r_hi"), c("r_lo"), reward_range=reward_range, low=low, high=high,
                                      bits=bits, c_max=c_max).alias("c"), "s0", "_u")
              .persist())
    try:
        if int(max_episodes) == 1:
            sums = per_ep.agg(F.count(F.lit(1)).alias("episode_count"), F.sum("c").alias("return_sum"),
                              F.sum((c("c") * c("c")).cast(_EXACT)).alias("return_squares"))
        else:
            sums = (per_ep.groupBy("_u").agg(F.sum("c").alias("t"), F.count(F.lit(1)).alias("n"))
                    .agg(F.sum("n").alias("episode_count"), F.sum("t").alias("return_sum"),
                         F.sum((c("t") * c("t")).cast(_EXACT)).alias("return_squares"),
                         F.sum((c("t") * c("n")).cast(_EXACT)).alias("unit_return_cross"),
                         F.sum((c("n") * c("n")).cast(_EXACT)).alias("unit_count_squares")))
        row = to_polars(sums).row(0, named=True)
        starts = to_polars(per_ep.groupBy("s0").agg(F.count(F.lit(1)).alias("n")))
    finally:
        per_ep.unpersist()
    out = {k: int(v or 0) for k, v in row.items()}
    out["start_states"] = np.zeros(int(n_states), dtype=np.int64)
    out["start_states"][starts["s0"].to_numpy().astype(np.int64)] = starts["n"].to_numpy().astype(np.int64)
    return out


def spark_stay_cells(bounded: DataFrame, *, max_episodes: int, horizon: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One stay per unit, aggregated into its cells: the twin of ``privaudit.ope.model.stay_tables``.

    Parameters
    ----------
    bounded : pyspark DataFrame
        Bounded logs (``episode_id``, ``unit_id``, ``step``, ``state``, ``action``, ``next_state``,
        ``reward`` scaled into [0, 1]), steps h < ``horizon``.
    max_episodes : int
        k: when k > 1, each unit keeps its stay with the smallest keep-k key
        ``(xxhash64(string(id)), string(id))``, as polars.
    horizon : int
        H: the cells come to the driver one step h < H at a time.

    Returns
    -------
    cells : polars.DataFrame
        ``step, state, action, next_state, n, r_hi, r_lo`` (int64), one row per observed cell of the
        kept stays, sorted by the four indices: n transitions, their rewards' summed limbs.
    starts : polars.DataFrame
        ``state, n`` (int64): kept stays starting in each state, sorted by state.

    Notes
    -----
    One pass over the rows aggregates the cells, cached on the cluster with one partition per step h;
    then H collections, one step's cells each (at most S*A*S rows), so that no single transfer holds
    the whole table. The starts are the step-0 cells summed per state (each stay has one step-0 row,
    and validated logs have no row in a terminal state): no pass of their own.
    """
    c = F.col
    rows = bounded
    if int(max_episodes) > 1:  # the unit's first stay by the keep-k key (no join: a window over the rows)
        rows = bounded.withColumn("_first", episode_rank() == 1).filter(c("_first")).drop("_first")
    hi, lo = reward_limbs(c("reward"))
    keys = [c(x).cast("long").alias(x) for x in ("step", "state", "action", "next_state")]
    cells = (rows.groupBy(*keys).agg(F.count(F.lit(1)).alias("n"), F.sum(hi).alias("r_hi"), F.sum(lo).alias("r_lo"))
             .repartitionByRange(int(horizon), "step").persist())
    as64 = [pl.col(x).cast(pl.Int64) for x in ("n", "r_hi", "r_lo")]
    try:
        steps = [to_polars(cells.filter(c("step") == h)).with_columns(as64) for h in range(int(horizon))]
    finally:
        cells.unpersist()
    out = pl.concat(steps).sort("step", "state", "action", "next_state")
    starts = (steps[0].group_by("state").agg(pl.col("n").sum().cast(pl.Int64)).sort("state")
              .select(pl.col("state").cast(pl.Int64), "n"))
    return out, starts


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _rotr(x: int, r: int) -> int:
    return _rotl(x, 64 - r)


def _unxorshift(x: int, s: int) -> int:
    """The inverse of x ^= x >> s on 64 bits."""
    y = x
    for _ in range(64 // s + 1):
        y = x ^ (y >> s)
    return y & _M64


def seed_preimage(seed: int) -> int:
    """The signed long v whose Spark ``xxhash64`` (seed 42, the 8 bytes of v) is ``seed``.

    XXH64 of one 8-byte input is a bijection of the input (a round, a rotation, multiplications by
    odd constants and xor-shifts, each invertible mod 2^64), so each step is undone in turn. So
    ``xxhash64(lit(v), x)`` = XXH64(x, seed): Spark seeds each column's hash with the previous one.
    """
    h = int(seed) & _M64
    h = _unxorshift(h, 32)
    h = (h * pow(_P3, -1, 1 << 64)) & _M64
    h = _unxorshift(h, 29)
    h = (h * pow(_P2, -1, 1 << 64)) & _M64
    h = _unxorshift(h, 33)                                   # undo the avalanche
    h = _rotr(((h - _P4) * pow(_P1, -1, 1 << 64)) & _M64, 27)  # undo rotl(h, 27) * P1 + P4
    k1 = h ^ ((_SPARK_SEED + _P5 + 8) & _M64)                  # undo h ^= k1 on the initial state
    v = (_rotr((k1 * pow(_P1, -1, 1 << 64)) & _M64, 31) * pow(_P2, -1, 1 << 64)) & _M64  # undo the round
    return v - (1 << 64) if v >= 1 << 63 else v


def xxhash64_seeded(x: Column, seed: int) -> Column:
    """XXH64 of ``x`` (as Spark hashes it: a string's UTF-8 bytes) with any ``seed``, a signed long."""
    return F.xxhash64(F.lit(seed_preimage(seed)).cast("long"), x)


def spark_unit_part(unit: Column, threshold: int, seed: int) -> Column:
    """1 where the low 32 bits of XXH64(string(unit), ``seed``) are below ``threshold``, else 0 (int).

    The twin of ``privaudit.ope.split.unit_part`` (which computes ``threshold`` and passes its seed).
    """
    low32 = xxhash64_seeded(unit.cast("string"), seed).bitwiseAND(F.lit(0xFFFFFFFF).cast("long"))
    return (low32 < F.lit(int(threshold)).cast("long")).cast("int")
