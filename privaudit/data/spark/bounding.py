"""Contribution bounding on Spark: keep k episodes per unit, cut at H, clip rewards and returns, cap per cell.

The Spark twins of :func:`privaudit.data.bounding.bound_contributions`,
:func:`privaudit.data.bounding.clip_returns` and :func:`privaudit.data.bounding.cap_per_cell`: the
same rules, the same kept rows, the same :class:`privaudit.data.bounding.BoundingReport`. Keep-k
ranks a unit's episodes by the portable key ``(xxhash64(cast(episode_id as string)), cast(episode_id
as string))``, Spark's built-in XXH64 with its fixed seed 42 (= ``PRIORITY_HASH_SEED``), the key of
:func:`privaudit.data.bounding.episode_priority`.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import BoundingReport
from privaudit.data.spark.logs import clipped_reward


def bound_contributions(df: DataFrame, spec: DomainSpec, *, by_unit: bool = False) -> tuple[DataFrame, BoundingReport]:
    """Keep k episodes per unit by the portable key, cut at H, clip and scale rewards (Spark).

    The Spark twin of :func:`privaudit.data.bounding.bound_contributions`
    (same rules, same kept episodes, same :class:`BoundingReport`).

    Parameters
    ----------
    df : pyspark DataFrame
        Logs from :func:`read_logs` that pass the fatal rules.
    spec : DomainSpec
    by_unit : bool
        Hash-partition the bounded rows by ``unit_id`` (one shuffle, before
        the return clipping, whose window then needs none): for rows cached
        for several consumers, whose windows and group-bys by unit (the
        cell cap, the per-episode value sums, the held-out stays) then read
        them without a shuffle of their own. The same rows either way.

    Returns
    -------
    bounded : pyspark DataFrame
        At most k episodes per unit (the k with the smallest
        ``(xxhash64(string(id)), string(id))``), steps h < H, ``reward``
        (double) clipped into ``reward_range`` and scaled to [0, 1]; when
        the spec declares a ``return_bound``, each episode's running scaled
        return clipped at ``spec.scaled_return_max`` (:func:`clip_returns`).
    report : BoundingReport
        PRIVATE counts of what was dropped or clipped (one Spark action),
        ``returns_clipped`` included.
    """
    H, k = spec.horizon, spec.max_episodes_per_unit
    lo, hi = spec.reward_range
    c = F.col
    text = c("episode_id").cast("string")
    episodes = df.filter(c("step") == 0).select("episode_id", "unit_id").distinct()
    rank = Window.partitionBy("unit_id").orderBy(F.xxhash64(text), text)
    kept_ids = (episodes.withColumn("_rank", F.row_number().over(rank))
                .withColumn("_m", F.count(F.lit(1)).over(Window.partitionBy("unit_id"))))
    facts = kept_ids.agg(F.countDistinct("unit_id").alias("units"), F.count(F.lit(1)).alias("episodes"),
                         F.countDistinct(F.when(c("_m") > k, c("unit_id"))).alias("over"),
                         F.sum((c("_rank") > k).cast("long")).alias("dropped"))
    kept = df.join(kept_ids.filter(c("_rank") <= k).select("episode_id"), "episode_id", "left_semi")
    out_of_range = (c("reward") < lo) | (c("reward") > hi)
    rows = kept.agg(F.sum((c("step") >= H).cast("long")).alias("over_H"),
                    F.sum((c("step") == H).cast("long")).alias("truncated"),
                    F.sum(((c("step") < H) & out_of_range).cast("long")).alias("clipped"),
                    F.countDistinct(F.when((c("step") < H) & out_of_range, c("episode_id"))).alias("clipped_episodes"),
                    F.count(F.lit(1)).alias("rows"))
    reward = (clipped_reward(spec) - lo) / (hi - lo)
    bounded = kept.filter(c("step") < H).withColumn("reward", reward)
    facts = facts.crossJoin(rows).crossJoin(df.agg(F.count(F.lit(1)).alias("all_rows")))
    bound = spec.scaled_return_max
    clip = spec.return_bound is not None and bound < H  # rule 4 of privaudit.data.bounding
    if clip:  # episodes whose scaled return exceeds B, counted in the same action
        facts = facts.crossJoin(bounded.groupBy("episode_id").agg(F.sum("reward").alias("_G"))
                                .agg(F.sum((c("_G") > bound).cast("long")).alias("returns")))
    r = facts.collect()[0].asDict()
    report = BoundingReport(units=int(r["units"]), episodes=int(r["episodes"]), units_over_k=int(r["over"]),
                            episodes_dropped=int(r["dropped"] or 0),
                            rows_dropped_with_episodes=int(r["all_rows"]) - int(r["rows"]),
                            episodes_truncated=int(r["truncated"] or 0), steps_dropped=int(r["over_H"] or 0),
                            rewards_clipped=int(r["clipped"] or 0), k=k, H=H,
                            episodes_rewards_clipped=int(r["clipped_episodes"] or 0),
                            rows_kept=int(r["rows"]) - int(r["over_H"] or 0),
                            returns_clipped=int(r.get("returns") or 0))
    if by_unit:
        bounded = bounded.repartition("unit_id")
    if clip:
        bounded = clip_returns(bounded, bound)
    return bounded, report


def clip_returns(bounded: DataFrame, bound: float) -> DataFrame:
    """Clip each episode's running scaled return at ``bound`` (Spark).

    The Spark twin of :func:`privaudit.data.bounding.clip_returns` (rule 4
    of that module): in an episode whose scaled rewards sum above B,
    r_t <- max(min(G_t, B) - min(G_t - r_t, B), 0) with G_t the running sum
    in step order; other episodes unchanged. Lazy: two window columns over
    the episode (one shuffle, evaluated by the job that counts the rows).

    Parameters
    ----------
    bounded : pyspark DataFrame
        Rows with ``episode_id``, ``unit_id``, ``step`` and ``reward`` (double, scaled
        into [0, 1]), steps h < H.
    bound : float
        B >= 0 (``DomainSpec.scaled_return_max``).

    Returns
    -------
    pyspark DataFrame, same columns.

    Notes
    -----
    The running sum is a rows frame ordered by step, added one row at a
    time in step order as polars' ``cum_sum``, with the same float64
    operations, so the clipped rewards are the same floats. Which episodes
    are touched compares the episode's sum with B; both engines sum it in
    an unspecified order, so an episode whose sum equals B up to rounding
    may be touched by one engine only (its rewards then differ by rounding
    at most).
    """
    c = F.col
    b = F.lit(float(bound))
    episode = Window.partitionBy("unit_id", "episode_id")  # an episode is in one unit: rows partitioned by unit
    run = F.sum("reward").over(episode.orderBy("step").rowsBetween(Window.unboundedPreceding, Window.currentRow))
    fixed = F.greatest(F.least(c("_run"), b) - F.least(c("_run") - c("reward"), b), F.lit(0.0))
    return (bounded.withColumn("_G", F.sum("reward").over(episode))
            .withColumn("_run", run)
            .withColumn("reward", F.when(c("_G") > b, fixed).otherwise(c("reward")))
            .drop("_G", "_run"))


def episode_rank():
    """Each row's episode's rank (1, 2, ...) among its unit's episodes by the keep-k key (Spark column).

    ``dense_rank`` over the unit's rows ordered by ``(xxhash64(string(id)), string(id))``: the rows of
    one episode share the key, so the rank counts the unit's distinct episodes up to this one, the
    ``row_number`` of the episode among the unit's episodes. A window over the rows themselves (one
    shuffle by unit, which the cap's window over (unit, cell) reuses) instead of ranking the
    episodes apart and joining the ranks back by episode.
    """
    text = F.col("episode_id").cast("string")
    return F.dense_rank().over(Window.partitionBy("unit_id").orderBy(F.xxhash64(text), text))


def cap_per_cell(bounded: DataFrame, report: BoundingReport, max_per_cell: int, *,
                 stationary: bool) -> tuple[DataFrame, BoundingReport]:
    """Keep at most c steps of each privacy unit in each cell (Spark).

    The Spark twin of :func:`privaudit.data.bounding.cap_per_cell`: the same
    keep rule (``CELL_KEEP_RULE``: a unit's steps ordered by their episode's
    keep-k key ``(xxhash64(string(id)), string(id))``, then by h; the first c
    in each (s, a) cell, or (h, s, a) per step, are kept), so the same rows.

    Parameters
    ----------
    bounded : pyspark DataFrame
        From :func:`bound_contributions` (``unit_id`` present, at most k
        episodes per unit, steps h < H).
    report : BoundingReport
        Its report; returned with the cap's counts.
    max_per_cell : int
        c >= 1.
    stationary : bool
        Cells (s, a) pooled over h, or (h, s, a).

    Returns
    -------
    capped : pyspark DataFrame
        The kept rows, same columns.
    report : BoundingReport
        With ``max_per_cell``, ``cell_cap_stationary``, ``cell_steps_seen``
        (the rows bounding kept) and ``cell_steps_dropped`` None, as polars:
        no pass of its own; :func:`spark_sparse_counts` sets the drop count
        from the rows the counts kept (``BoundingReport.with_cell_kept``).

    Raises
    ------
    UsageError
        ``max_per_cell`` not an integer >= 1.
    """
    if isinstance(max_per_cell, bool) or not isinstance(max_per_cell, int) or max_per_cell < 1:
        raise UsageError(f"`max_per_cell` must be an integer >= 1. Found {max_per_cell!r}.")
    c = F.col
    cell = ["state", "action"] if stationary else ["step", "state", "action"]
    if report.k == 1:  # one episode per unit: its own steps in order
        order = c("step").cast("long")
        ranked = bounded
    else:  # rank the unit's (at most k) kept episodes by the keep-k key, then steps inside them
        ranked = bounded.withColumn("_ep", episode_rank() - 1)
        order = c("_ep").cast("long") * report.H + c("step").cast("long")
    keep = F.row_number().over(Window.partitionBy("unit_id", *cell).orderBy(order)) <= max_per_cell
    capped = ranked.withColumn("_keep", keep).filter(c("_keep")).drop("_keep", "_ep")
    report = replace(report, max_per_cell=max_per_cell, cell_cap_stationary=bool(stationary),
                     cell_steps_dropped=None, cell_steps_seen=report.rows_kept)
    return capped, report
