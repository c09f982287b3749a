"""Sums of bounded logs that every engine computes to the same bits: rewards as integer limbs.

A float sum depends on the order of its terms, and neither polars' streaming
group-by nor Spark's partitions fix that order, so two engines (or two runs
with different partitions) may disagree in the last bits of a sum of
rewards. The statistics that must be identical across engines (the
clinicians' value, ``privaudit.release.behaviour_value``; the capped model of
the policy evaluation, ``privaudit.ope.model``) therefore sum each scaled
reward r in [0, 1] as the integer x = floor(r 2^52) (exact: scaling by a
power of two, then a floor), split into two int64 limbs hi = x div 2^26 and
lo = x mod 2^26 whose sums cannot overflow before 2^37 rows per group.
:func:`limbs_value` turns summed limbs back into one float with the same
operations in every engine (x 2^-52 up to one rounding of the float sum
hi 2^26 + lo). The floor loses less than 2^-52 per row: below the rounding
of any float sum of the same rewards.

The Spark twins of these expressions are in ``privaudit.data.spark.stats``.
This module also holds the per-episode arithmetic of the clinicians' value
that both engines run on the summed limbs (:func:`centred_returns`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["REWARD_BITS", "LIMB_BITS", "reward_limbs", "limbs_value", "centred_returns", "value_sums",
           "exact_sum"]

#: A scaled reward r in [0, 1] is summed as floor(r 2^REWARD_BITS).
REWARD_BITS = 52
#: ... split into hi = x div 2^LIMB_BITS and lo = x mod 2^LIMB_BITS.
LIMB_BITS = 26


def reward_limbs(reward: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(hi, lo) int64 expressions of a scaled reward column in [0, 1] (module docstring)."""
    x = (reward * float(2 ** REWARD_BITS)).floor().cast(pl.Int64)
    return (x // 2 ** LIMB_BITS).alias("r_hi"), (x % 2 ** LIMB_BITS).alias("r_lo")


def limbs_value(hi, lo) -> np.ndarray:
    """sum of r from summed limbs: (float(hi) 2^26 + float(lo)) 2^-52, float64 (the Spark twin: same operations).

    Parameters
    ----------
    hi, lo : array-like of int64, same shape
        Summed limbs of :func:`reward_limbs`.
    """
    hi = np.asarray(hi, dtype=np.int64).astype(np.float64)
    lo = np.asarray(lo, dtype=np.int64).astype(np.float64)
    return (hi * float(2 ** LIMB_BITS) + lo) * 2.0 ** -REWARD_BITS


def centred_returns(length, hi, lo, *, reward_range, low: float, high: float, bits: int, c_max: int) -> np.ndarray:
    """Each episode's centred return c on the lattice 2^-bits (int64), from its length and summed limbs.

    G = L r_min + (r_max - r_min) R in declared units (R = :func:`limbs_value`, the scaled return; L
    the episode's kept rows), clipped into [low, high]; c = trunc((G - mid) 2^bits) with mid =
    (low + high) / 2, clipped into [-c_max, c_max] (``privaudit.release.behaviour_value``). The Spark
    twin (``privaudit.data.spark.stats``) runs the same float64 operations in the same order.

    Parameters
    ----------
    length, hi, lo : array-like of int64, shape (n,)
        Per episode: kept rows L and the summed limbs of its scaled rewards.
    reward_range : (r_min, r_max)
    low, high : float
        The declared return range.
    bits, c_max : int
        Lattice exponent b and the bound C on |c| in lattice units.

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    r_lo, r_hi = (float(x) for x in reward_range)
    G = np.asarray(length, dtype=np.int64).astype(np.float64) * r_lo + (r_hi - r_lo) * limbs_value(hi, lo)
    G = np.minimum(np.maximum(G, float(low)), float(high))
    c = np.trunc((G - 0.5 * (float(low) + float(high))) * 2.0 ** int(bits)).astype(np.int64)
    return np.clip(c, -int(c_max), int(c_max))


def exact_sum(x: np.ndarray) -> int:
    """Exact sum of an int64 array as a Python int (no overflow for fewer than 2^31 terms).

    Each x = hi 2^32 + lo with 0 <= lo < 2^32: both partial sums fit int64.
    """
    x = np.asarray(x, dtype=np.int64)
    return (int((x >> 32).sum()) << 32) + int((x & 0xFFFFFFFF).sum())


def value_sums(bounded: pl.LazyFrame | pl.DataFrame, unit: str, *, n_states: int, max_episodes: int,
               reward_range, low: float, high: float, bits: int, c_max: int) -> dict:
    """The clinicians' value statistics of bounded logs, in lattice units, exact (polars). PRIVATE.

    Parameters
    ----------
    bounded : polars frame
        Bounded logs: ``episode_id``, ``step``, ``state``, ``reward`` (scaled into [0, 1]) and the
        unit column ``unit``; at most k episodes per unit, steps h < H, every episode with its step 0.
    unit : str
        The unit column (``episode_id`` when each episode is its own unit).
    n_states, max_episodes : int
        S and k.
    reward_range, low, high, bits, c_max
        As :func:`centred_returns`.

    Returns
    -------
    dict
        ``episode_count`` N, ``return_sum`` T, ``return_squares`` Q (Python ints), ``start_states``
        (int64, shape (S,)) and, when k > 1, ``unit_return_cross`` B and ``unit_count_squares`` D
        (``privaudit.release.behaviour_value``). The Spark twin:
        ``privaudit.data.spark.stats.spark_value_sums``.
    """
    lf = bounded.lazy() if isinstance(bounded, pl.DataFrame) else bounded
    c = pl.col
    hi, lo = reward_limbs(c("reward"))
    # one streaming group-by with plain aggregations (the rows stay on disk; a filter().first() inside the
    # aggregation kept every row in memory, issue 33): validated logs have one step-0 row per episode
    # and one unit per episode, so the minimum is that row's state and that unit
    per_ep = (lf.group_by("episode_id")
              .agg(hi.sum(), lo.sum(), pl.len().alias("L"),
                   pl.when(c("step") == 0).then(c("state")).min().alias("s0"), c(unit).min().alias("_unit"))
              .select("r_hi", "r_lo", "L", "s0", "_unit").collect(engine="streaming"))
    cl = centred_returns(per_ep["L"].to_numpy(), per_ep["r_hi"].to_numpy(), per_ep["r_lo"].to_numpy(),
                         reward_range=reward_range, low=low, high=high, bits=bits, c_max=c_max)
    out = {"episode_count": int(cl.size), "return_sum": exact_sum(cl),
           "start_states": np.bincount(per_ep["s0"].to_numpy().astype(np.int64),
                                       minlength=n_states).astype(np.int64)}
    if int(max_episodes) == 1:  # one episode per unit: t_u = c, B = T, D = N
        out["return_squares"] = exact_sum(cl * cl)
        return out
    per_unit = (pl.DataFrame({"_unit": per_ep["_unit"], "c": cl}).group_by("_unit")
                .agg(c("c").sum().alias("t"), pl.len().cast(pl.Int64).alias("n")))
    t, n = per_unit["t"].to_numpy().astype(np.int64), per_unit["n"].to_numpy().astype(np.int64)
    out.update(return_squares=exact_sum(t * t), unit_return_cross=exact_sum(t * n),
               unit_count_squares=exact_sum(n * n))
    return out
