"""Contribution bounding: make the declared sensitivities true for any valid-structure logs.

Before any statistic (DESIGN.md "The privacy model"):

1. **At most k episodes per privacy unit.** When a unit has more than
   k = ``spec.max_episodes_per_unit`` episodes, the k kept are those with the
   smallest *priority key* ``(xxh64(str(episode_id)), str(episode_id))`` inside
   the unit (see :func:`episode_priority` and :data:`PRIORITY_KEY`). The key is a function of the episode's own
   id only, so which of a unit's episodes are kept depends on that unit's data
   alone: replacing another unit never changes it, which is what the
   substitution sensitivity proofs need. A hash (rather than "the first k ids")
   avoids systematically keeping, say, the earliest admissions. The key is
   *portable*: XXH64 (seed 42) of the id's UTF-8 text read as a signed int64,
   which Spark's built-in ``xxhash64`` computes too, so every engine and every
   library version keeps the same episodes.
2. **At most H steps per episode.** Rows with step h >= H are dropped
   (steps are 0-based and contiguous, so this keeps the first H steps).
3. **Rewards clipped into ``spec.reward_range`` = [r_min, r_max] and scaled
   to [0, 1]**: r <- (clip(r, r_min, r_max) - r_min) / (r_max - r_min).

What validation rejects (nulls, states/actions/next states outside the
domain, broken episode structure, an episode split across units, rows after a
terminal) is *not* repaired here: those rules are fatal before a release (see
``privaudit.stats.release``). Only the three rules above are enforced by
bounding instead of refusal. The bounds hold for any logs that pass those
fatal rules, whatever their number of episodes per unit, lengths or rewards.

The :class:`BoundingReport` counts what was dropped or clipped. Those numbers
are facts about the private data: they are shown to the data holder (stderr
and a local log file next to, never inside, the release) and never released.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl
import polars_hash as plh

from privaudit.spec import DomainSpec

#: Seed of XXH64 in the episode priority key. A public constant, not a noise
#: seed: the keep-k rule must be deterministic and data-independent. 42 is the
#: seed of Spark's built-in ``xxhash64``, so Spark computes the same key.
PRIORITY_HASH_SEED = 42

#: The keep-k priority key, as recorded in the release manifest.
PRIORITY_KEY = (f"xxh64(utf8(string(episode_id)), seed={PRIORITY_HASH_SEED}) as signed int64, "
                "ties broken by string(episode_id) in UTF-8 byte order; string(x) of an integer id is "
                "its decimal text (e.g. -7, 12345)")


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


def episode_id_text(episode_id: pl.Expr) -> pl.Expr:
    """The id as text, the input of the priority key: decimal for integers (``-7``, ``12345``)."""
    return episode_id.cast(pl.String)


def episode_priority(episode_id: pl.Expr) -> pl.Expr:
    """Priority key of an episode for the keep-k rule (smaller is kept first).

    Parameters
    ----------
    episode_id : polars expression
        The episode id column (integer, string or categorical).

    Returns
    -------
    polars expression, Int64
        XXH64 (Collet's xxHash, 64-bit) of the UTF-8 text of the id with the
        public seed :data:`PRIORITY_HASH_SEED` = 42, its 64 bits read as a
        signed int64 (:data:`PRIORITY_KEY`). Integer ids hash their decimal
        text. This equals Spark's ``xxhash64(cast(episode_id as string))``
        and ``xxhash.xxh64_intdigest(text.encode(), 42)`` viewed as int64, and
        does not change with the polars version. Ties (hash collisions) are
        broken by the id's text in :func:`bound_contributions`. The value
        depends on the episode's own id only.
    """
    text = episode_id_text(episode_id)
    return plh.NonCryptographicHashingNameSpace(text).xxhash64(seed=PRIORITY_HASH_SEED).reinterpret(signed=True)


def unit_column_of(lf: pl.LazyFrame) -> str:
    """The column holding the privacy unit: ``unit_id`` if present, else ``episode_id``."""
    return "unit_id" if "unit_id" in lf.collect_schema().names() else "episode_id"


def bound_contributions(lf: pl.LazyFrame, spec: DomainSpec) -> tuple[pl.LazyFrame, BoundingReport]:
    """Apply the keep-k, truncate-to-H and clip-and-scale-rewards rules.

    Parameters
    ----------
    lf : polars.LazyFrame
        Logs with the standard column names (``episode_id``, ``step``,
        ``state``, ``action``, ``reward``, ``next_state``, optional
        ``unit_id``), as returned by ``privaudit.data.io.scan_logs``, that pass
        validation's fatal rules (``privaudit.data.validate.BOUNDING_RULES``
        lists the only rules allowed to fail): one row per step, steps
        0..L-1 once each, one unit per episode.
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
    An episode is identified by its step-0 row (exactly one per episode in
    validated logs), which gives its unit. Episodes per unit come from a
    group-by over those rows; only units with more than k episodes are
    ranked, and their surplus episodes are removed with an anti-join. One
    more streaming pass counts the steps dropped and rewards clipped. No
    Python loop touches rows. For such logs the bounded frame guarantees the
    contribution bounds the sensitivities assume
    (``privaudit.privacy.sensitivity``): one unit adds at most k episodes of
    at most H steps each, each reward in [0, 1].
    """
    H, k = spec.horizon, spec.max_episodes_per_unit
    lo, hi = spec.reward_range
    unit = unit_column_of(lf)
    c = pl.col
    episodes = (lf.filter(c("step") == 0)
                .select(c("episode_id"), c(unit).alias("_unit")).unique())
    per_unit = episodes.group_by("_unit").agg(pl.len().cast(pl.Int64).alias("_m"))
    unit_stats, = pl.collect_all([per_unit.select(pl.len().alias("units"), c("_m").sum().alias("episodes"),
                                                  (c("_m") > k).sum().alias("over"),
                                                  (c("_m") - k).clip(lower_bound=0).sum().alias("dropped"))])
    n_units, n_episodes, units_over_k, n_dropped = (int(unit_stats[x][0] or 0)
                                                    for x in ("units", "episodes", "over", "dropped"))
    kept = lf
    if n_dropped:
        dropped = (episodes.join(per_unit.filter(c("_m") > k), on="_unit")
                   .with_columns(episode_priority(c("episode_id")).alias("_key"),
                                 episode_id_text(c("episode_id")).alias("_text"))
                   .sort(["_unit", "_key", "_text"])
                   .filter(pl.int_range(pl.len()).over("_unit") >= k)
                   .select("episode_id").collect())
        kept = lf.join(dropped.lazy(), on="episode_id", how="anti")
    out_of_range = (c("reward") < lo) | (c("reward") > hi)
    row_stats = [kept.select((c("step") >= H).sum().alias("over_H"), (c("step") == H).sum().alias("truncated"),
                             ((c("step") < H) & out_of_range).sum().alias("clipped"), pl.len().alias("rows"))]
    if n_dropped:
        row_stats.append(lf.select(pl.len().alias("rows")))
    stats = pl.collect_all(row_stats)
    rows_dropped = int(stats[1]["rows"][0]) - int(stats[0]["rows"][0]) if n_dropped else 0
    report = BoundingReport(
        units=n_units, episodes=n_episodes, units_over_k=units_over_k, episodes_dropped=n_dropped,
        rows_dropped_with_episodes=rows_dropped, episodes_truncated=int(stats[0]["truncated"][0]),
        steps_dropped=int(stats[0]["over_H"][0]), rewards_clipped=int(stats[0]["clipped"][0]), k=k, H=H)
    bounded = kept.filter(c("step") < H).with_columns(
        ((c("reward").cast(pl.Float64).clip(lo, hi) - lo) / (hi - lo)).alias("reward"))
    return bounded, report
