"""Contribution bounding: make the declared sensitivities true for any valid-structure logs.

Before any statistic (docs/release.md, "The privacy model"):

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
4. **When the spec declares a ``return_bound``: the running scaled return
   clipped at B** = ``spec.scaled_return_max`` (the bound's image in scaled
   units, B = G_max / r_max when r_min = 0): in step order, with G_t the
   running sum of the scaled rewards, r_t <- min(G_t, B) - min(G_{t-1}, B).
   Each reward stays in [0, r_t], no prefix of the episode returns more than
   B, and later rules (the per-cell cap) only drop steps, so every bounded
   episode's scaled return is at most B, and its value-to-go from any step
   too (``DomainSpec.value_bounds``). Only episodes whose scaled rewards sum
   above B are touched. With r_min = 0 this is exactly the declared G_max;
   with r_min != 0 it enforces the scaled bound the learners use, which
   every episode within [G_min, G_max] satisfies.

What validation rejects (nulls, states/actions/next states outside the
domain, broken episode structure, an episode split across units, rows after a
terminal, a return below the declared G_min) is *not* repaired here: those rules are
fatal before a release (see ``privaudit.release.tabular``). Only the rules above are enforced by
bounding instead of refusal. The bounds hold for any logs that pass those
fatal rules, whatever their number of episodes per unit, lengths or rewards.

The :class:`BoundingReport` counts what was dropped or clipped. Those numbers
are facts about the private data: they are shown to the data holder (stderr
and a local log file next to, never inside, the release) and never released.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import polars as pl
import polars_hash as plh

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.parts import hash_parts, part_count, part_rows

#: Seed of XXH64 in the episode priority key. A public constant, not a noise
#: seed: the keep-k rule must be deterministic and data-independent. 42 is the
#: seed of Spark's built-in ``xxhash64``, so Spark computes the same key.
PRIORITY_HASH_SEED = 42

#: Bounding's per-unit and per-episode aggregates take at most ``part_rows(EPISODE_ROWS)`` episodes per pass
#: (``privaudit.data.parts``: 10^6 by default; a streaming group-by holds about 150 bytes per group; issue 33)
#: when the episodes are counted; the hash splitting them has a public seed (a part changes nothing).
EPISODE_ROWS, BOUNDING_PASS_SEED = 8, 0xB0

#: The keep-k priority key, as recorded in the release manifest.
PRIORITY_KEY = (f"xxh64(utf8(string(episode_id)), seed={PRIORITY_HASH_SEED}) as signed int64, "
                "ties broken by string(episode_id) in UTF-8 byte order; string(x) of an integer id is "
                "its decimal text (e.g. -7, 12345)")


@dataclass(frozen=True)
class BoundingReport:
    """What contribution bounding changed. PRIVATE: never put it in a release."""

    #: Privacy units in the input.
    units: int
    #: Episodes in the input.
    episodes: int
    #: Units that had more than k episodes.
    units_over_k: int
    #: Episodes dropped by the keep-k rule.
    episodes_dropped: int
    #: Rows (steps) of those dropped episodes.
    rows_dropped_with_episodes: int
    #: Kept episodes longer than H steps.
    episodes_truncated: int
    #: Rows with step h >= H dropped from kept episodes.
    steps_dropped: int
    #: Kept rows whose reward lay outside ``reward_range`` and was clipped.
    rewards_clipped: int
    #: The bound k used.
    k: int
    #: The horizon H used.
    H: int
    #: Kept episodes whose scaled return exceeded ``spec.scaled_return_max`` (declared ``return_bound``) and had
    #: their running return clipped.
    returns_clipped: int = 0
    #: c of the per-cell cap (:func:`cap_per_cell`), None when not applied.
    max_per_cell: int | None = None
    #: The cap's cells: (s, a) pooled over h (True) or (h, s, a) (False).
    cell_cap_stationary: bool | None = None
    #: Steps (rows) dropped by the per-cell cap; None until the capped rows are counted (:func:`cap_per_cell` runs
    #: no pass of its own; the statistics that count the kept rows complete it: :meth:`with_cell_kept`).
    cell_steps_dropped: int | None = 0
    #: Steps the cap looked at (rows after the three rules above).
    cell_steps_seen: int = 0
    #: Rows after the keep-k and truncate-to-H rules (the rows every statistic sees); None in a report not made by
    #: :func:`bound_contributions`.
    rows_kept: int | None = None
    #: Kept episodes with at least one row whose reward was clipped (``rewards_clipped``) (None: not counted, a
    #: report made before this count existed).
    episodes_rewards_clipped: int | None = None

    @property
    def changed(self) -> bool:
        """True if bounding dropped or clipped anything."""
        return bool(self.episodes_dropped or self.steps_dropped or self.rewards_clipped
                    or self.returns_clipped or self.cell_steps_dropped)

    def to_dict(self) -> dict:
        """Plain dict (for the local log), with ``repairs``: rule -> count, of, share (:meth:`repair_counts`)."""
        return {**asdict(self), "repairs": {r: {"count": n, "of": d, "share": n / d if d else 0.0}
                                            for r, (n, d) in self.repair_counts().items()}}

    def repair_counts(self) -> dict[str, tuple[int, int]]:
        """Rule -> (changed, out of): what each repair changed and what it counts in (the shares' one definition).

        Each declared bound is counted in episodes, the unit of a return (a
        -1 coded once per stay is 1 row in 10 but 1 stay in 4):
        ``too_many_episodes``: episodes dropped of the episodes;
        ``episode_too_long``: kept episodes truncated at H of the kept
        episodes; ``reward_out_of_range``: kept episodes with a clipped reward
        of the kept episodes (rows clipped of the rows kept when that count is
        unknown); ``return_above_bound``: returns clipped of the kept
        episodes; ``max_per_cell`` (only when the cap ran and its count is
        known): steps dropped of the steps it saw.
        """
        kept = self.episodes - self.episodes_dropped
        rewards = ((self.rewards_clipped, self.rows_kept or 0) if self.episodes_rewards_clipped is None
                   else (self.episodes_rewards_clipped, kept))
        out = {"too_many_episodes": (self.episodes_dropped, self.episodes),
               "episode_too_long": (self.episodes_truncated, kept),
               "reward_out_of_range": rewards,
               "return_above_bound": (self.returns_clipped, kept)}
        if self.max_per_cell is not None and self.cell_steps_dropped is not None:
            out["max_per_cell"] = (self.cell_steps_dropped, self.cell_steps_seen)
        return out

    def summary(self) -> str:
        """A few lines for the data holder's terminal: each repair as a count and a share."""
        share = {r: f"{n / d:.2%}" if d else "0.00%" for r, (n, d) in self.repair_counts().items()}
        return (
            "contribution bounding (PRIVATE facts about the logs; not part of the release):\n"
            f"  {self.units} privacy units, {self.episodes} episodes\n"
            f"  keep at most k={self.k} episodes per unit: {self.units_over_k} units over k, "
            f"{self.episodes_dropped} episodes ({share['too_many_episodes']}; "
            f"{self.rows_dropped_with_episodes} rows) dropped\n"
            f"  keep steps h < H={self.H}: {self.episodes_truncated} episodes truncated "
            f"({share['episode_too_long']} of the kept episodes), {self.steps_dropped} steps dropped\n"
            f"  rewards clipped into the declared range: {self.rewards_clipped}"
            + (f" rows ({share['reward_out_of_range']} of the rows kept)" if self.episodes_rewards_clipped is None
               else f" rows, in {self.episodes_rewards_clipped} episodes ({share['reward_out_of_range']} of the "
                    "kept episodes)")
            + (f"\n  episodes whose return was clipped at the declared return bound: {self.returns_clipped} "
               f"({share['return_above_bound']})" if self.returns_clipped else "")
            + ("" if self.max_per_cell is None else
               f"\n  at most c={self.max_per_cell} steps per unit and "
               f"{'(s, a)' if self.cell_cap_stationary else '(h, s, a)'} cell: "
               + (f"{self.cell_steps_dropped} of {self.cell_steps_seen} steps dropped ({self.cell_drop_share:.2%})"
                  if self.cell_steps_dropped is not None else f"{self.cell_steps_seen} steps seen"))
        )

    def with_cell_kept(self, kept: int) -> "BoundingReport":
        """This report with ``cell_steps_dropped`` = seen - ``kept`` (the rows the capped statistics counted).

        Raises
        ------
        UsageError
            No per-cell cap was applied, or ``kept`` is not in [0, seen].
        """
        if self.max_per_cell is None or not 0 <= int(kept) <= self.cell_steps_seen:
            raise UsageError(f"`kept` must count the rows a per-cell cap kept, in [0, {self.cell_steps_seen}]"
                             f" (cap c={self.max_per_cell}). Found {kept!r}.")
        return replace(self, cell_steps_dropped=self.cell_steps_seen - int(kept))

    @property
    def cell_drop_share(self) -> float:
        """Share of the steps the per-cell cap dropped (0 when it did not run or saw no step)."""
        return (self.cell_steps_dropped or 0) / self.cell_steps_seen if self.cell_steps_seen else 0.0

    def __repr__(self) -> str:  # private counts: do not leak through reprs in logs
        return f"BoundingReport(k={self.k}, H={self.H}, c={self.max_per_cell}, changed={self.changed})"


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


def bound_contributions(lf: pl.LazyFrame, spec: DomainSpec,
                        n_episodes: int | None = None) -> tuple[pl.LazyFrame, BoundingReport]:
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
    n_episodes : int, optional
        The number of episodes when known (validation counts them): above
        ``part_rows(EPISODE_ROWS)`` the per-unit and per-episode
        aggregates run in parts, split by a hash of the unit or episode, so
        that memory holds one part's groups. The result does not depend on
        it. None: one pass each.

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
    passes = part_count(n_episodes, part_rows(EPISODE_ROWS))
    starts = lf.filter(c("step") == 0).select(c("episode_id"), c(unit).alias("_unit"))

    def per_unit(rows: pl.LazyFrame) -> pl.LazyFrame:
        return rows.unique().group_by("_unit").agg(pl.len().cast(pl.Int64).alias("_m"))

    # the units in parts (a hash of the unit, whole units per part: the sums add up exactly), so that the
    # unique and the group-by hold one part's episodes (issue 33); one part when the episodes are not known
    unit_stats = [per_unit(part).select(pl.len().alias("units"), c("_m").sum().alias("episodes"),
                                        (c("_m") > k).sum().alias("over"),
                                        (c("_m") - k).clip(lower_bound=0).sum().alias("dropped"))
                  .collect(engine="streaming") for part in hash_parts(starts, "_unit", passes, BOUNDING_PASS_SEED)]
    n_units, n_episodes, units_over_k, n_dropped = (sum(int(st[x][0] or 0) for st in unit_stats)
                                                    for x in ("units", "episodes", "over", "dropped"))
    kept = lf
    if n_dropped:
        def dropped_of(rows: pl.LazyFrame) -> pl.DataFrame:
            """The episodes keep-k drops from ``rows`` (whole units): ranked within each unit over k."""
            return (rows.unique().join(per_unit(rows).filter(c("_m") > k), on="_unit")
                    .with_columns(episode_priority(c("episode_id")).alias("_key"),
                                  episode_id_text(c("episode_id")).alias("_text"))
                    .sort(["_unit", "_key", "_text"])
                    .filter(pl.int_range(pl.len()).over("_unit") >= k)
                    .select("episode_id").collect())

        # the same parts of whole units: one part's episodes ranked at a time (issue 33; the set is the same)
        dropped = pl.concat([dropped_of(part) for part in hash_parts(starts, "_unit", passes, BOUNDING_PASS_SEED)])
        kept = lf.join(dropped.lazy(), on="episode_id", how="anti")
    out_of_range = (c("reward") < lo) | (c("reward") > hi)
    row_stats = [kept.select((c("step") >= H).sum().alias("over_H"), (c("step") == H).sum().alias("truncated"),
                             ((c("step") < H) & out_of_range).sum().alias("clipped"), pl.len().alias("rows")),
                 # the clipped rows' episodes filtered first: inside the select, n_unique held every row's id
                 kept.filter((c("step") < H) & out_of_range).select(c("episode_id").n_unique()
                                                                     .alias("clipped_episodes"))]
    if n_dropped:
        row_stats.append(lf.select(pl.len().alias("rows")))
    # one streaming query each: collect_all would cache the scan they share (all its rows) in memory
    stats = [q.collect(engine="streaming") for q in row_stats]
    rows_dropped = int(stats[2]["rows"][0]) - int(stats[0]["rows"][0]) if n_dropped else 0
    report = BoundingReport(
        units=n_units, episodes=n_episodes, units_over_k=units_over_k, episodes_dropped=n_dropped,
        rows_dropped_with_episodes=rows_dropped, episodes_truncated=int(stats[0]["truncated"][0]),
        steps_dropped=int(stats[0]["over_H"][0]), rewards_clipped=int(stats[0]["clipped"][0]), k=k, H=H,
        episodes_rewards_clipped=int(stats[1]["clipped_episodes"][0]),
        rows_kept=int(stats[0]["rows"][0]) - int(stats[0]["over_H"][0]))
    bounded = kept.filter(c("step") < H).with_columns(
        ((c("reward").cast(pl.Float64).clip(lo, hi) - lo) / (hi - lo)).alias("reward"))
    if spec.return_bound is not None and spec.scaled_return_max < H:
        kept_episodes = None if passes == 1 else n_episodes - n_dropped
        bounded, n_clipped = clip_returns(bounded, spec.scaled_return_max, kept_episodes)
        report = replace(report, returns_clipped=n_clipped)
    return bounded, report


def clip_returns(bounded: pl.LazyFrame, bound: float, n_episodes: int | None = None) -> tuple[pl.LazyFrame, int]:
    """Clip each episode's running scaled return at ``bound`` (rule 4 of the module docstring).

    Parameters
    ----------
    bounded : polars.LazyFrame
        Rows with ``episode_id``, ``step`` and ``reward`` scaled into [0, 1].
    bound : float
        B >= 0, the largest scaled return an episode may keep.
    n_episodes : int, optional
        Episodes in ``bounded`` if known: the returns are summed in parts of
        at most ``part_rows(EPISODE_ROWS)`` episodes (same result).

    Returns
    -------
    clipped : polars.LazyFrame
        Same rows and columns; in episodes whose rewards sum above B,
        r_t <- min(G_t, B) - min(G_t - r_t, B) with G_t the running sum in step
        order (rows of other episodes unchanged; row order not preserved).
    n_episodes : int
        Episodes changed (PRIVATE).
    """
    c = pl.col
    over = pl.concat([part.group_by("episode_id").agg(c("reward").sum().alias("_G"))
                      .filter(c("_G") > bound).select("episode_id").collect(engine="streaming")
                      for part in hash_parts(bounded, "episode_id", part_count(n_episodes, part_rows(EPISODE_ROWS)),
                                             BOUNDING_PASS_SEED)])
    if over.height == 0:
        return bounded, 0
    run = c("reward").cum_sum().over("episode_id", order_by="step")
    fixed = (bounded.join(over.lazy(), on="episode_id", how="semi")
             .with_columns((pl.min_horizontal(run, pl.lit(bound)) - pl.min_horizontal(run - c("reward"), pl.lit(bound)))
                           .clip(lower_bound=0.0).alias("reward")))
    return pl.concat([bounded.join(over.lazy(), on="episode_id", how="anti"), fixed]), over.height


#: The per-cell cap ranks at most ``part_rows(CAP_PER)`` rows at once (half a part, 4·10^6 by default; one
#: part's windows are in memory, about 90 bytes per row at c = 1): above it, the units are split by a hash of
#: the unit (public seed) and capped part by part. Every window lies inside one unit: the split keeps the same rows.
CAP_PER, CAP_PARTITION_SEED = 2, 0x19A

#: The per-cell keep rule, as recorded in the release manifest.
CELL_KEEP_RULE = ("per privacy unit and cell, the first c steps in the unit's own order: its episodes by the "
                  "keep-k priority key (episode_key), then by step h")


def cell_columns(stationary: bool) -> list[str]:
    """The cell a per-cell cap counts in: ``[state, action]`` pooled, ``[step, state, action]`` per step."""
    return ["state", "action"] if stationary else ["step", "state", "action"]


def cap_parts_of(bounded: pl.LazyFrame, report: BoundingReport, max_per_cell: int, *,
                 stationary: bool) -> tuple[list[pl.LazyFrame], BoundingReport]:
    """Keep at most c steps of each privacy unit in each cell (per-partition contribution bound).

    Parameters
    ----------
    bounded : polars.LazyFrame
        Output of :func:`bound_contributions` (standard columns, at most k
        episodes per unit, steps h < H, one row per step).
    report : BoundingReport
        Its report; returned with the cap's counts added.
    max_per_cell : int
        c >= 1.
    stationary : bool
        True: the cell is (s, a), pooled over h; False: (h, s, a). Transition
        cells (s, a, s') and reward sums follow the (s, a) (or (h, s, a))
        cap: the cap drops whole steps, so every family is counted from the
        same kept steps and n(s, a) = sum over s' of n(s, a, s') still holds.

    Returns
    -------
    capped : list of polars.LazyFrame
        The kept rows, same columns, in parts of whole units (one part when
        the rows fit in ``part_rows(CAP_PER)``); read them one after the
        other to hold one part's windows at a time.
    report : BoundingReport
        ``report`` with ``max_per_cell``, ``cell_cap_stationary`` and
        ``cell_steps_seen`` set, and ``cell_steps_dropped`` None: the cap
        reads no row itself (it is a lazy filter), so whoever counts the
        capped rows completes it with ``report.with_cell_kept(kept)``
        (PRIVATE).

    Raises
    ------
    UsageError
        ``max_per_cell`` not an integer >= 1.

    Notes
    -----
    Keep rule (:data:`CELL_KEEP_RULE`): within a unit, steps are ordered by
    their episode's keep-k priority key (:func:`episode_priority`, ties by
    the id's text), then by step h; the first c steps of the unit in each
    cell are kept. The order depends on the unit's own rows only, so which of
    a unit's steps survive never depends on another unit: the substitution
    sensitivities with the cap (``privaudit.privacy.sensitivity``:
    L2 = sqrt(2 f(kH, c)) pooled, sqrt(2 H f(k, c)) per step) hold for any
    input. Vectorised and lazy: one ordinal rank over (unit, cell) windows,
    evaluated by the query that counts the capped rows (plus one group-by
    over episodes when a unit may hold several). With c = 1 the rank is a
    window minimum: the order is unique inside a unit for logs that pass
    validation (one row per episode and step, ``step_duplicate`` is fatal),
    so the row with the smallest order is the one ranked first (a window
    minimum costs about half of a rank). Memory: one part of the units at a
    time (:data:`CAP_PER`; the same rows kept, in another order) when the
    parts are read one after the other. Per step
    with c >= k, and pooled with c >= kH, nothing can be dropped.

    The cap biases the counts: a dropped revisit of (s, a) removes a real
    transition and reward (docs/release.md, "Per-cell contribution bound").

    References
    ----------
    Per-partition contribution bounding of DP SQL engines: Wilson et al.,
    "Differentially Private SQL with Bounded User Contribution", PoPETs 2020
    (arXiv:1909.01917); PipelineDP's ``max_contributions_per_partition``.
    """
    if isinstance(max_per_cell, bool) or not isinstance(max_per_cell, int) or max_per_cell < 1:
        raise UsageError(f"`max_per_cell` must be an integer >= 1. Found {max_per_cell!r}.")
    c = pl.col
    H = report.H
    unit = unit_column_of(bounded)
    cell = cell_columns(stationary)
    ranked_episodes = not (unit == "episode_id" or report.k == 1)
    window = [unit] + cell

    def capped_rows(frame: pl.LazyFrame) -> pl.LazyFrame:
        """The kept rows of ``frame`` (whole units only)."""
        if not ranked_episodes:  # at most one episode per unit: its own steps in order
            order = c("step").cast(pl.Int64)
        else:  # rank the unit's (at most k) episodes by the keep-k key, then steps inside them
            episodes = (frame.filter(c("step") == 0).select("episode_id", c(unit).alias("_unit"))
                        .with_columns(episode_priority(c("episode_id")).alias("_key"),
                                      episode_id_text(c("episode_id")).alias("_text"))
                        .sort(["_unit", "_key", "_text"])
                        .select("episode_id", pl.int_range(pl.len(), dtype=pl.Int64).over("_unit").alias("_ep")))
            frame = frame.join(episodes, on="episode_id", how="left")
            order = c("_ep") * H + c("step").cast(pl.Int64)
        if max_per_cell == 1:  # the unit's first step in the cell: its order is unique, so min == ordinal rank 1
            keep = order == order.min().over(window)
        else:
            keep = order.rank("ordinal").over(window) <= max_per_cell
        kept = frame.filter(keep)
        return kept.drop("_ep") if ranked_episodes else kept

    seen = report.rows_kept
    if seen is None:  # a report not made by bound_contributions: count the rows (a pass without the window)
        seen = int(bounded.select(pl.len()).collect().item())
    # whole units per part: the windows of one part in memory, not of all rows, when the parts are read one
    # after the other (cap_parts_of); their concatenation is read by polars' streaming engine all at once
    parts = hash_parts(bounded, unit, part_count(seen, part_rows(CAP_PER)), CAP_PARTITION_SEED)
    capped = [capped_rows(p) for p in parts] if len(parts) > 1 else [capped_rows(bounded)]
    report = replace(report, max_per_cell=max_per_cell, cell_cap_stationary=bool(stationary),
                     cell_steps_dropped=None, cell_steps_seen=seen)
    return capped, report


def cap_per_cell(bounded: pl.LazyFrame, report: BoundingReport, max_per_cell: int, *,
                 stationary: bool) -> tuple[pl.LazyFrame, BoundingReport]:
    """:func:`cap_parts_of`'s kept rows as one lazy frame (its parts concatenated), and its report.

    Same arguments, errors and keep rule as :func:`cap_parts_of`. Memory: polars' streaming engine reads the
    concatenated parts together (all their windows in memory: about 60-90 bytes per kept row, issue 33), so
    a consumer that reads every row should read :func:`cap_parts_of`'s parts one after the other instead.
    """
    parts, report = cap_parts_of(bounded, report, max_per_cell, stationary=stationary)
    return (pl.concat(parts, parallel=False) if len(parts) > 1 else parts[0]), report
