"""Contribution bounding: make the declared sensitivities true for any input.

Before any statistic (DESIGN.md "The privacy model"):

1. **At most k episodes per privacy unit.** When a unit has more than
   k = ``spec.max_episodes_per_unit`` episodes, the k kept are those with the
   smallest *priority key* ``(hash(episode_id), episode_id)`` inside the unit
   (see :func:`episode_priority`). The key is a function of the episode's own
   id only, so which of a unit's episodes are kept depends on that unit's data
   alone: replacing another unit never changes it, which is what the
   substitution sensitivity proofs need. A hash (rather than "the first k ids")
   avoids systematically keeping, say, the earliest admissions.
2. **At most H steps per episode.** Rows with step h >= H are dropped
   (steps are 0-based and contiguous, so this keeps the first H steps).
3. **Rewards clipped into ``spec.reward_range`` = [r_min, r_max] and scaled
   to [0, 1]**: r <- (clip(r, r_min, r_max) - r_min) / (r_max - r_min).

What validation rejects (nulls, states/actions/next states outside the
domain, broken episode structure, an episode split across units, rows after a
terminal) is *not* repaired here: those rules are fatal before a release (see
``privaudit.stats.release``). Only the three rules above are enforced by
bounding instead of refusal.

The :class:`BoundingReport` counts what was dropped or clipped. Those numbers
are facts about the private data: they are shown to the data holder (stderr
and a local log file next to, never inside, the release) and never released.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from privaudit.spec import DomainSpec

#: Fixed seed of polars' hash for the episode priority key. Public constants,
#: not noise seeds: the keep-k rule must be deterministic and data-independent.
_PRIORITY_HASH_SEED = 0x5EED0DDB


@dataclass(frozen=True)
class BoundingReport:
    """What contribution bounding changed. PRIVATE: never put it in a release.

    Attributes
    ----------
    units : int
        Privacy units in the input.
    episodes : int
        Episodes in the input.
    units_over_k : int
        Units that had more than k episodes.
    episodes_dropped : int
        Episodes dropped by the keep-k rule.
    rows_dropped_with_episodes : int
        Rows (steps) of those dropped episodes.
    episodes_truncated : int
        Kept episodes longer than H steps.
    steps_dropped : int
        Rows with step h >= H dropped from kept episodes.
    rewards_clipped : int
        Kept rows whose reward lay outside ``reward_range`` and was clipped.
    k : int
        The bound k used.
    H : int
        The horizon H used.
    """

    units: int
    episodes: int
    units_over_k: int
    episodes_dropped: int
    rows_dropped_with_episodes: int
    episodes_truncated: int
    steps_dropped: int
    rewards_clipped: int
    k: int
    H: int

    @property
    def changed(self) -> bool:
        """True if bounding dropped or clipped anything."""
        return bool(self.episodes_dropped or self.steps_dropped or self.rewards_clipped)

    def to_dict(self) -> dict:
        """Plain dict (for the local log)."""
        return asdict(self)

    def summary(self) -> str:
        """A few lines for the data holder's terminal."""
        return (
            "contribution bounding (PRIVATE facts about the logs; not part of the release):\n"
            f"  {self.units} privacy units, {self.episodes} episodes\n"
            f"  keep at most k={self.k} episodes per unit: {self.units_over_k} units over k, "
            f"{self.episodes_dropped} episodes ({self.rows_dropped_with_episodes} rows) dropped\n"
            f"  keep steps h < H={self.H}: {self.episodes_truncated} episodes truncated, "
            f"{self.steps_dropped} steps dropped\n"
            f"  rewards clipped into the declared range: {self.rewards_clipped}"
        )

    def __repr__(self) -> str:  # private counts: do not leak through reprs in logs
        return f"BoundingReport(k={self.k}, H={self.H}, changed={self.changed})"


def episode_priority(episode_id: pl.Expr) -> pl.Expr:
    """Priority key of an episode for the keep-k rule (smaller is kept first).

    Parameters
    ----------
    episode_id : polars expression
        The episode id column (any hashable dtype).

    Returns
    -------
    polars expression, UInt64
        polars' hash of the id with a fixed public seed. Ties (hash collisions)
        are broken by the id itself in :func:`bound_contributions`. The value
        depends on the episode's own id only; it is stable for a given polars
        version (polars does not promise the same hash across versions, which
        changes which episodes are kept but never the privacy guarantee).
    """
    return episode_id.hash(seed=_PRIORITY_HASH_SEED)


def unit_column_of(lf: pl.LazyFrame) -> str:
    """The column holding the privacy unit: ``unit_id`` if present, else ``episode_id``."""
    return "unit_id" if "unit_id" in lf.collect_schema().names() else "episode_id"


def bound_contributions(lf: pl.LazyFrame, spec: DomainSpec) -> tuple[pl.LazyFrame, BoundingReport]:
    """Apply the keep-k, truncate-to-H and clip-and-scale-rewards rules.

    Parameters
    ----------
    lf : polars.LazyFrame
        Validated logs with the standard column names (``episode_id``,
        ``step``, ``state``, ``action``, ``reward``, ``next_state``, optional
        ``unit_id``), as returned by ``privaudit.data.io.scan_logs``. One row
        per step; steps 0-based and contiguous inside an episode.
    spec : DomainSpec
        Supplies k (``max_episodes_per_unit``), H and ``reward_range``.

    Returns
    -------
    bounded : polars.LazyFrame
        Same columns; at most k episodes per unit, steps h in [0, H), and
        ``reward`` (Float64) in [0, 1] (scaled).
    report : BoundingReport
        Counts of what was dropped or clipped (PRIVATE).

    Notes
    -----
    One pass over the logs computes a per-episode summary (unit, steps,
    steps >= H, rewards out of range); the keep-k decision is taken on that
    summary and applied with a semi-join, so no Python loop touches rows.
    The bounded frame guarantees, for any input, the contribution bounds the
    sensitivities assume (``privaudit.privacy.sensitivity``): one unit adds at
    most k episodes of at most H steps each, each reward in [0, 1].
    """
    H, k = spec.horizon, spec.max_episodes_per_unit
    lo, hi = spec.reward_range
    unit = unit_column_of(lf)
    out_of_range = (pl.col("reward") < lo) | (pl.col("reward") > hi)
    per_episode = (
        lf.group_by("episode_id")
        .agg(
            pl.col(unit).first().alias("_unit") if unit != "episode_id" else pl.col("episode_id").first().alias("_unit"),
            pl.len().alias("_rows"),
            (pl.col("step") >= H).sum().alias("_over_H"),
            ((pl.col("step") < H) & out_of_range).sum().alias("_clipped"),
        )
        .with_columns(episode_priority(pl.col("episode_id")).alias("_key"))
        .sort(["_unit", "_key", "episode_id"])
        .with_columns(pl.int_range(pl.len()).over("_unit").alias("_rank"))
        .collect()
    )
    keep = per_episode["_rank"] < k
    kept = per_episode.filter(keep)
    dropped = per_episode.filter(~keep)
    report = BoundingReport(
        units=int(per_episode["_unit"].n_unique()) if per_episode.height else 0,
        episodes=per_episode.height,
        units_over_k=int(dropped["_unit"].n_unique()) if dropped.height else 0,
        episodes_dropped=dropped.height,
        rows_dropped_with_episodes=int(dropped["_rows"].sum()) if dropped.height else 0,
        episodes_truncated=int((kept["_over_H"] > 0).sum()),
        steps_dropped=int(kept["_over_H"].sum()) if kept.height else 0,
        rewards_clipped=int(kept["_clipped"].sum()) if kept.height else 0,
        k=k,
        H=H,
    )
    bounded = lf
    if dropped.height:
        bounded = bounded.join(kept.lazy().select("episode_id"), on="episode_id", how="semi")
    bounded = bounded.filter(pl.col("step") < H).with_columns(
        ((pl.col("reward").cast(pl.Float64).clip(lo, hi) - lo) / (hi - lo)).alias("reward")
    )
    return bounded, report
