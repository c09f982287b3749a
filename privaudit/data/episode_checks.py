"""Validation rules across the rows of an episode or a privacy unit.

Checking that the steps of every episode are 0..L-1 and that ``next_state``
of step h equals ``state`` of step h+1 exactly would need the whole table
in a hash table or sorted (memory proportional to the rows). Instead one
streaming pass aggregates every episode into a few numbers (memory
proportional to the episodes), and only the episodes that this pass flags
are re-read and checked exactly, in chunks of bounded size.

The flagging test is a telescoping sum of hashes. With g a 64-bit hash of an
Int64, the rows i of an episode with steps h_i, and h_max their largest,

    sum_i g(h_i + 1) == sum_{i: h_i != 0} g(h_i) + g(h_max + 1)

holds for every g iff the multiset {h_i} is exactly {0, ..., h_max}: the
multiplicities c_j must satisfy c_{-1} = 0 and c_{j-1} - c_j = [j = h_max + 1]
for j != 0, so c_j = 1 on 0..h_max and 0 elsewhere. With pair keys
k(h, s) = h * 2^32 + s and s'_last the next_state at step h_max,

    sum_i g(k(h_i + 1, s'_i)) == sum_{i: h_i != 0} g(k(h_i, s_i)) + g(k(h_max + 1, s'_last))

holds for every g iff the steps are exactly 0..h_max (map each pair (h, s)
to h: the identity above) and s'_h = s_{h+1} for h < h_max; so this one
test screens both the step rules and the next_state chain (the step-only
test is used when state or next_state is unusable). Steps are clipped into
[-1, 2^30] and states into [0, 2^32) first, which keeps every key in Int64
and changes no valid episode. Each side is summed
separately on the low and high 32-bit halves of g (no overflow below 2^32
rows per episode). A broken episode passes both halves only if a fixed
non-zero integer combination of hash values vanishes: about 2^-64 for a
hash that behaves randomly, i.e. no practical chance of a missed
violation. A valid episode always passes (no false alarm), and every
flagged episode is then checked exactly, so reported violations are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl

from privaudit.data.io import ROW, OpenLog
from privaudit.data.parts import hash_parts, part_count, part_rows

#: Fixed hash seed (a constant of the algorithm, not randomness).
HASH_SEED = 0x5EED_0F_A11
#: Most rows re-read at once when checking flagged episodes exactly: ``part_rows(CHUNK_PER)``, a quarter
#: of a part (2·10^6 rows by default; held in memory with their window columns).
CHUNK_PER = 4
#: The episode table aggregates at most ``part_rows()`` rows (``privaudit.data.parts``, 8·10^6 by
#: default) in one pass: above it, the episodes are split into parts by a hash of the id and aggregated
#: one part after the other (the streaming group-by holds about 150 bytes per episode of the part; issue
#: 33). The table does not depend on the split: every row of an episode falls in the same part.
#: Seed of the hash that splits the episodes into parts (which part an episode falls in changes nothing).
EPISODE_PASS_SEED = 0x33
_P32 = 2**32


#: Steps are clipped into [-1, _STEP_CLIP] before the episode aggregates (no overflow in the hash keys).
_STEP_CLIP = 2**30


def _clipped(name: str, dtype: pl.DataType, lo: int, hi: int) -> pl.Expr:
    """Integer column ``name`` clipped into [lo, hi] as Int64 (no overflow for any integer type)."""
    if dtype.is_unsigned_integer():
        return pl.col(name).cast(pl.UInt64).clip(upper_bound=hi).cast(pl.Int64).clip(lower_bound=lo)
    return pl.col(name).cast(pl.Int64).clip(lo, hi)


def _half_diffs(up: pl.Expr, at: pl.Expr) -> list[pl.Expr]:
    """Per row: g(up) - g(at) on the low and high 32-bit halves (Int64, exact)."""
    gu, ga = up.hash(HASH_SEED), at.hash(HASH_SEED)
    lo_a = pl.when(at.is_null()).then(0).otherwise((ga % _P32).cast(pl.Int64))
    hi_a = pl.when(at.is_null()).then(0).otherwise((ga // _P32).cast(pl.Int64))
    return [((gu % _P32).cast(pl.Int64) - lo_a).alias("_dlo"), ((gu // _P32).cast(pl.Int64) - hi_a).alias("_dhi")]


def _balanced(at_extra: pl.Expr) -> pl.Expr:
    """sum(g(up)) == sum(g(at)) + g(at_extra), on both halves.

    The per-episode sums of ``_dlo``/``_dhi`` are below 2^32 * rows in size,
    so Int64 is exact for episodes of fewer than 2^31 rows.
    """
    ga = at_extra.hash(HASH_SEED)
    lo = pl.col("dlo") - (ga % _P32).cast(pl.Int64)
    hi = pl.col("dhi") - (ga // _P32).cast(pl.Int64)
    return (lo == 0) & (hi == 0)


@dataclass(frozen=True)
class ReturnBounds:
    """What the return rules compare: steps h < H, rewards clipped into [r_lo, r_hi], the return bound
    [g_lo, g_hi] (the spec's ``horizon``, ``reward_range`` and ``return_bound``, declared units)."""

    H: int
    r_lo: float
    r_hi: float
    g_lo: float
    g_hi: float


def _any_flag(flags: Sequence[str]) -> pl.Expr:
    """True on a row carrying any of the flag columns (a null flag is false)."""
    return pl.any_horizontal([pl.col(f).fill_null(False) for f in flags])


@dataclass
class EpisodeTable:
    """One row per episode (memory proportional to the number of episodes).

    Columns: ``episode_id``; ``n`` (rows); ``hmax`` (largest step, clipped
    into [-1, 2^30], Int32); ``row0`` (first row index); ``suspect`` (bool: the hash
    test flags broken steps, a broken next_state chain or several units);
    ``unit`` (the episode's smallest unit_id) when units are checked;
    ``flag_suspect``, ``return_low``, ``return_high`` when asked for
    (:func:`episode_table`).
    """

    frame: pl.DataFrame


def episode_table(log: OpenLog, check_chain: bool, check_units: bool, flags: Sequence[str] = (),
                  returns: ReturnBounds | None = None) -> EpisodeTable:
    """Aggregate every episode in one streaming pass (see module docstring).

    Rows with a null ``episode_id`` are left out (the null rule reports them).
    Above ``part_rows()`` rows (``privaudit.data.parts``), one pass per part of the episodes
    (a hash of the id): memory about 150 bytes per episode of a part, plus
    the table itself (about 40 bytes per episode); the table is the same.

    ``flags`` (the usable terminated/truncated columns) adds ``flag_suspect``:
    the episode has two flagged rows or one before its largest step, a
    superset of the episodes :func:`flag_not_last` reports. ``returns`` adds
    ``return_low`` / ``return_high``: the episode's return (rewards clipped
    into ``reward_range``, steps h < H) is below G_min / its positive part
    exceeds G_max (the episodes :func:`return_rules` reports). Both are
    screened in this same pass, so those rules re-read only the rows of the
    episodes they flag (issue 33: a join or group-by over every episode held
    memory proportional to the episodes on top of the table).
    """
    c = pl.col
    hc = _clipped("step", log.dtypes["step"], -1, _STEP_CLIP)
    aggs = [pl.len().alias("n"), c(ROW).min().alias("row0"), c("_dlo").sum().alias("dlo"),
            c("_dhi").sum().alias("dhi")]
    not0 = pl.when(hc != 0)
    if check_chain:
        # the pair test alone implies steps 0..h_max (see module docstring)
        s = _clipped("state", log.dtypes["state"], 0, _P32 - 1)
        ns = _clipped("next_state", log.dtypes["next_state"], 0, _P32 - 1)
        rows = [*_half_diffs((hc + 1) * _P32 + ns, not0.then(hc * _P32 + s)), (hc * _P32 + ns).alias("_k")]
        aggs += [c("_k").max().alias("klast")]
        post = [(c("klast") // _P32).alias("hmax")]
        ok = _balanced(c("klast") + _P32)
    else:
        rows = [*_half_diffs(hc + 1, not0.then(hc)), hc.alias("_k")]
        aggs += [c("_k").max().alias("hmax")]
        post = []
        ok = _balanced(c("hmax") + 1)
    suspect = ~ok
    if check_units:
        aggs += [c("unit_id").min().alias("unit"), c("unit_id").max().alias("unit_max")]
        suspect = suspect | (c("unit") != c("unit_max")).fill_null(False)
    keep = ["episode_id", "n", "hmax", "row0", "suspect"] + (["unit"] if check_units else [])
    flagged = []
    if flags:
        any_flag = _any_flag(flags)
        aggs += [any_flag.sum().alias("_nflag"), hc.filter(any_flag).max().alias("_hflag")]
        flagged.append(((c("_nflag") > 1) | (c("_hflag") < c("hmax"))).fill_null(False).alias("flag_suspect"))
        keep.append("flag_suspect")
    if returns is not None:
        r = c("reward").cast(pl.Float64)
        counted = (c("step") < returns.H) & r.is_finite()
        clipped = pl.when(counted).then(r.clip(returns.r_lo, returns.r_hi))
        aggs += [counted.sum().alias("_nr"), clipped.sum().alias("_G"),
                 clipped.clip(lower_bound=0.0).sum().alias("_P")]
        some = c("_nr") > 0
        flagged += [(some & (c("_G") < returns.g_lo)).fill_null(False).alias("return_low"),
                    (some & (c("_P") > returns.g_hi)).fill_null(False).alias("return_high")]
        keep += ["return_low", "return_high"]

    def table_of(rows_in: pl.LazyFrame) -> pl.DataFrame:
        return (rows_in.filter(c("episode_id").is_not_null())
                .with_columns(rows)
                .group_by("episode_id").agg(aggs)
                .with_columns(post)
                .with_columns(suspect.fill_null(True).alias("suspect"), *flagged)
                .select(keep).with_columns(c("hmax").cast(pl.Int32))  # in [-1, 2^30]: 4 bytes per episode
                .collect(engine="streaming"))

    # whole episodes per pass, one pass after the other: the group-by's state is that of one part's episodes
    passes = part_count(sum(p.n_rows for p in log.parts), part_rows())
    return EpisodeTable(pl.concat([table_of(f) for f in hash_parts(log.frame, "episode_id", passes,
                                                                    EPISODE_PASS_SEED)]))


def _chunks(suspects: pl.DataFrame) -> list[pl.Series]:
    """Split the suspect episodes (sorted by first row) into chunks of at most
    ``part_rows(CHUNK_PER)`` rows (an episode larger than that is a chunk of its own)."""
    if suspects.height == 0:
        return []
    n = suspects["n"].to_numpy().astype(np.int64)
    ends = np.cumsum(n)
    chunk = (ends - n) // part_rows(CHUNK_PER)
    ids = suspects["episode_id"]
    return [ids.filter(pl.Series(chunk == k)) for k in np.unique(chunk)]


def exact_episode_checks(log: OpenLog, table: EpisodeTable, check_chain: bool,
                         check_units: bool) -> dict[str, pl.DataFrame]:
    """Check the flagged episodes exactly; return the violating rows per rule.

    Returns
    -------
    dict
        rule -> DataFrame with columns ``row, episode_id, step, column, detail``
        (all violations, in row order), for rules ``step_duplicate``,
        ``step_gap``, ``next_state_mismatch`` and ``unit_not_unique``.
        Memory: at most about ``part_rows(CHUNK_PER)`` rows at a time (plus the output).
    """
    out: dict[str, list[pl.DataFrame]] = {r: [] for r in
                                          ("step_duplicate", "step_gap", "next_state_mismatch", "unit_not_unique")}
    suspects = table.frame.filter(pl.col("suspect")).sort("row0")
    cols = [ROW, "episode_id", "step"] + (["state", "next_state"] if check_chain else []) \
        + (["unit_id"] if check_units else [])
    for ids in _chunks(suspects):
        d = (log.frame.filter(pl.col("episode_id").is_in(ids.implode()) & pl.col("step").is_not_null())
             .select(cols).collect(engine="streaming"))
        for rule, df in _exact(d, check_chain, check_units).items():
            out[rule].append(df)
    return {r: (pl.concat(v).sort(ROW) if v else None) for r, v in out.items()}


def _exact(d: pl.DataFrame, check_chain: bool, check_units: bool) -> dict[str, pl.DataFrame]:
    """Exact checks on the rows ``d`` of whole episodes (in memory)."""
    c, ep = pl.col, "episode_id"
    res = {}
    key = [ep, "step"]
    d = d.with_columns(pl.len().over(key).alias("_k"), c(ROW).min().over(key).alias("_first"))
    dup = d.filter((c("_k") > 1) & (c(ROW) != c("_first")))
    res["step_duplicate"] = dup.select(ROW, ep, "step", pl.lit("step").alias("column"),
                                       pl.format("step {} also at row {}", "step", "_first").alias("detail"))
    u = d.filter(c(ROW) == c("_first")).sort(ep, "step")
    prev = c("step").shift(1).over(ep)
    u = u.with_columns(prev.alias("_prev"))
    gap = u.filter((c("_prev").is_null() & (c("step") != 0))
                   | (c("_prev").is_not_null() & (c("step") != c("_prev") + 1)))
    res["step_gap"] = gap.select(
        ROW, ep, "step", pl.lit("step").alias("column"),
        pl.when(c("_prev").is_null()).then(pl.format("episode starts at step {}; steps must start at 0", "step"))
        .otherwise(pl.format("step {} follows step {}; the steps between are missing", "step", "_prev"))
        .alias("detail"))
    bad = pl.concat([dup.select(ep), gap.select(ep)]).unique()
    if check_chain:
        ok = d.join(bad, on=ep, how="anti").sort(ep, "step")
        nxt_state, nxt_row = c("state").shift(-1).over(ep), c(ROW).shift(-1).over(ep)
        ok = ok.with_columns(nxt_state.alias("_ns"), nxt_row.alias("_nr"))
        mis = ok.filter(c("_ns").is_not_null() & c("next_state").is_not_null() & (c("next_state") != c("_ns")))
        res["next_state_mismatch"] = mis.select(
            ROW, ep, "step", pl.lit("next_state").alias("column"),
            pl.format("next_state {} but the next step (row {}) has state {}", "next_state", "_nr", "_ns")
            .alias("detail"))
    if check_units:
        s = d.sort(ROW).with_columns(c("unit_id").first().over(ep).alias("_u0"),
                                     c(ROW).first().over(ep).alias("_r0"))
        mix = s.filter(c("unit_id").is_not_null() & (c("unit_id") != c("_u0")))
        res["unit_not_unique"] = mix.select(
            ROW, ep, "step", pl.lit("unit_id").alias("column"),
            pl.format("unit_id {} differs from unit_id {} on the episode's first row {}", "unit_id", "_u0", "_r0")
            .alias("detail"))
    return res


def flag_not_last(log: OpenLog, table: EpisodeTable, flags: list[str]) -> pl.DataFrame:
    """Rows carrying a terminated/truncated flag before their episode's last step.

    Only the episodes the table's ``flag_suspect`` screen flags are re-read
    (none in valid logs), joined with their largest step. Columns: ``row,
    episode_id, step, column, detail``. The table must have been built with
    the same ``flags``.
    """
    c = pl.col
    which = c(flags[0]).fill_null(False)
    col = (pl.when(which).then(pl.lit(flags[0])).otherwise(pl.lit(flags[-1]))) if len(flags) > 1 else pl.lit(flags[0])
    last = table.frame.filter(c("flag_suspect")).select("episode_id", "hmax")
    hc = _clipped("step", log.dtypes["step"], -1, _STEP_CLIP)
    rows = log.frame if last.height else log.frame.head(0)
    # hmax is clipped at _STEP_CLIP: a larger last step is named as ">= 2^30", not as 2^30 itself
    until = pl.when(c("hmax") >= _STEP_CLIP).then(pl.lit(f"a step >= {_STEP_CLIP}")).otherwise(
        pl.format("step {}", "hmax"))
    return (rows.filter(_any_flag(flags) & c("step").is_not_null())
            .select(ROW, "episode_id", "step", hc.alias("_h"), col.alias("column"))
            .join(last.lazy(), on="episode_id", how="inner")
            .filter(c("_h") < c("hmax"))
            .select(ROW, "episode_id", "step", "column",
                    pl.format("{} flag at step {} but the episode continues to {}", "column", "step", until)
                    .alias("detail"))
            .collect(engine="streaming"))


def units_and_surplus(table: EpisodeTable, k: int,
                      examples: int | None = None) -> tuple[int, int, pl.DataFrame | None]:
    """The number of privacy units and the units with more than k episodes (rule ``too_many_episodes``).

    Parameters
    ----------
    table : EpisodeTable
        Built with ``check_units`` (column ``unit``).
    k : int
        Most episodes per unit (the spec's ``privacy_unit.max_episodes``).
    examples : int or None
        Most example rows wanted: those of the units whose (k+1)-th episode
        starts first. None: one row for every unit over k.

    Returns
    -------
    units : int
        Distinct ``unit`` values of the table (a null unit counts as one value, as ``n_unique``).
    over : int
        Units with more than k episodes (exact whatever ``examples``).
    examples : DataFrame or None
        For each unit over k, in the order of first rows and at most
        ``examples`` of them, its (k+1)-th episode by first row (columns
        ``row, episode_id, step, column, detail``); None when no unit is over
        k or ``examples`` is 0.

    Notes
    -----
    The episodes per unit come from a sort of the unit column (the units'
    runs), not a hash group-by: the group-by held about 60 bytes per unit
    beside the table (issue 33); the sort holds a sorted copy of the column
    and the runs' starts. The examples are ranked in a prefix of the
    episodes by first row (:func:`_surplus_examples`), not over every unit
    over k: only the rows reported are formatted.
    """
    u = table.frame["unit"]
    s = u.drop_nulls().sort()
    units = int(u.null_count() > 0)
    if s.len() == 0:
        return units, 0, None
    # a run starts where the sorted value changes (slices compare without a shifted copy)
    change = (s.slice(1) != s.slice(0, s.len() - 1)).arg_true() + 1
    per_unit = np.diff(np.concatenate(([0], change.to_numpy(), [s.len()])))
    over = int((per_unit > k).sum())
    units += len(per_unit)
    del change, per_unit
    if over == 0 or examples == 0:
        return units, over, None
    return units, over, _surplus_examples(table, s, k, over if examples is None else min(examples, over))


#: Episodes of the first prefix :func:`_surplus_examples` ranks (at least; it grows fourfold).
SURPLUS_PREFIX = 2**16


def _surplus_examples(table: EpisodeTable, s: pl.Series, k: int, n: int) -> pl.DataFrame:
    """The n units over k whose (k+1)-th episode by first row starts first, that episode's row each.

    The episodes with first row below a threshold T are ranked within their
    unit by first row: an episode's rank there is its rank in the whole
    table (every earlier episode of its unit is below T too), so the
    episodes of rank k found are (k+1)-th episodes, and any other one starts
    at T or later. When n are found, they are the first n; else T grows
    fourfold, up to every episode. Memory: the prefix ranked, about
    max(``SURPLUS_PREFIX``, 4 n (k+1)) episodes on logs where most units are
    over k, the whole table (the previous cost) in the worst case. ``s`` is
    the sorted non-null units (each example's episode count is a binary
    search in it). Columns: ``row, episode_id, step, column, detail``.
    """
    c = pl.col
    frame = table.frame
    last = int(frame["row0"].max()) + 1
    want = max(SURPLUS_PREFIX, 4 * n * (k + 1))
    # first rows are spread over [0, last): a prefix of about `want` episodes, then fourfold
    bound = max(1, -(-last * want // frame.height))
    while True:
        ex = (frame.lazy().filter((c("row0") < bound) & c("unit").is_not_null())
              .select("unit", "row0", "episode_id").sort("row0")
              .filter(pl.int_range(pl.len()).over("unit") == k)
              .head(n).collect())
        if ex.height >= n or bound >= last:
            break
        bound = min(4 * bound, last)
    m = s.search_sorted(ex["unit"], side="right") - s.search_sorted(ex["unit"], side="left")
    return (ex.with_columns(pl.Series("_m", m, dtype=pl.Int64))
            .select(c("row0").alias(ROW), "episode_id", pl.lit(None, dtype=pl.Int64).alias("step"),
                    pl.lit("unit_id").alias("column"),
                    pl.format("unit {} has {} episodes; at most {} allowed (spec privacy_unit.max_episodes); "
                              "this is its episode number {}", "unit", "_m", pl.lit(k), pl.lit(k + 1))
                    .alias("detail")))


def return_rules(log: OpenLog, table: EpisodeTable, returns: ReturnBounds) -> dict[str, pl.DataFrame]:
    """One row per episode breaking the declared return bound: ``row, episode_id, step, column, detail``.

    The return sums the episode's finite rewards over steps h < H, each
    clipped into ``reward_range`` (what bounding keeps). Above: the running
    return (in step order) exceeds G_max at some step; reported at the first
    such step. Only episodes whose positive rewards sum above G_max can
    (``return_high`` of the table, built with the same ``returns``); the
    ordered running sum runs on their rows only. Below: the whole return is
    under G_min (``return_low``); reported at the last step < H. Only the
    flagged episodes' rows are read (none in logs that keep the bound).
    """
    c, H = pl.col, returns.H
    g_lo, g_hi = returns.g_lo, returns.g_hi
    r = c("reward").cast(pl.Float64)
    rows = (log.frame.filter((c("step") < H) & r.is_finite())
            .select(ROW, "episode_id", "step", r.clip(returns.r_lo, returns.r_hi).alias("_r")))
    low = table.frame.filter(c("return_low")).select("episode_id")
    high = table.frame.filter(c("return_high")).select("episode_id")
    below = ((rows.join(low.lazy(), on="episode_id", how="semi") if low.height else rows.head(0))
             .group_by("episode_id")
             .agg(c("_r").sum().alias("_G"), c(ROW).sort_by("step").last().alias(ROW), c("step").max().alias("step"))
             .select(ROW, "episode_id", "step", pl.lit("reward").alias("column"),
                     pl.format(f"the episode's return {{}} is below return_bound G_min={g_lo}", c("_G"))
                     .alias("detail"))
             .collect(engine="streaming"))
    above = (rows.join(high.lazy(), on="episode_id", how="semi")
             .with_columns(c("_r").cum_sum().over("episode_id", order_by="step").alias("_run"))
             .filter(c("_run") > g_hi).sort(["episode_id", "step"]).unique("episode_id", keep="first")
             .select(ROW, "episode_id", "step", pl.lit("reward").alias("column"),
                     pl.format(f"the episode's running return {{}} exceeds return_bound G_max={g_hi} "
                               "(bounding clips it)", c("_run")).alias("detail"))
             .collect()) if high.height else below.clear()
    return {"return_above_bound": above, "return_below_bound": below}
