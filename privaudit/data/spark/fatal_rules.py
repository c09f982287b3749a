"""The fatal validation rules on Spark: the same counts as :mod:`privaudit.data.validate`, rule by rule.

So Spark refuses the logs polars refuses (``return_below_bound`` too when the spec declares a
``return_bound``); the rules that bounding repairs (``BOUNDING_RULES``) are not checked here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from privaudit.core.errors import ValidationFailed
from privaudit.core.spec import DomainSpec
from privaudit.data.spark.logs import clipped_reward, nan_or_inf
from privaudit.data.row_rules import public_reward_table
from privaudit.data.validate import BOUNDING_RULES


def fatal_rule_counts(df: DataFrame, spec: DomainSpec) -> dict[str, int]:
    """Count the violations of every fatal validation rule, in one pass over the rows.

    Parameters
    ----------
    df : pyspark DataFrame
        From :func:`read_logs` (standard names, usable types).
    spec : DomainSpec

    Returns
    -------
    dict rule -> count (every checked fatal rule, 0 included). The rules and
    their meaning are those of ``privaudit.data.validate.RULES``; the
    structural rules use window functions over each episode ordered by step.
    Counts are PRIVATE facts for the data holder, never released. Rules that
    bounding repairs (``BOUNDING_RULES``) are not checked. Every count equals
    validation's, with one difference in *how many* (never in *whether*):
    ``unit_not_unique`` counts the rows whose unit differs from the unit of
    the episode's first row in step order, validation from its first row in
    file order (Spark reads no row order); the two agree when the log lists
    each episode's rows in step order.

    Notes
    -----
    When the spec declares a ``return_bound`` (G_min, G_max),
    ``return_below_bound`` counts the episodes whose return is below G_min:
    the sum over the episode's rows with step h < H and a finite reward of
    the reward clipped into ``reward_range`` (:func:`_return_term`), as
    ``privaudit.data.validate``; one count per episode, at its last row in
    step order. The sum is a window over the episode, the window the
    structural rules already use, so the rule adds no shuffle and no job:
    one action, three Spark jobs with adaptive query execution (Spark 4,
    ``local[2]``), with or without the rule. Both engines sum in float64 in
    an unspecified order, so an episode whose return equals G_min only up
    to rounding (e.g. 0.1 + 0.2 + 0.3 against 0.6) may be judged differently by
    the two; returns that are exact in binary (sums of multiples of 2^-k)
    are judged the same.
    """
    c, S, A = F.col, spec.S, spec.A
    names = set(df.columns)
    flags = [f for f in ("terminated", "truncated") if f in names]
    terminals = list(spec.terminal_states)
    own = [x for x in df.columns if not (x == "unit_id" and spec.unit_column is None)]  # not read_logs' id copy
    row = {"null_value": sum((c(x).isNull().cast("long") for x in own), F.lit(0)),
           "not_finite": _not_finite(names),
           "state_out_of_range": (c("state") < 0) | (c("state") >= S),
           "action_out_of_range": (c("action") < 0) | (c("action") >= A),
           "next_state_out_of_range": (c("next_state") < 0) | (c("next_state") >= S)}
    if len(flags) == 2:
        row["terminated_and_truncated"] = c("terminated") & c("truncated")
    if spec.public_reward is not None:
        row["reward_not_public"] = _reward_not_public(spec)
    if terminals:
        row["continues_after_terminal"] = c("state").isin(terminals)
        if "terminated" in names:
            row["terminated_mismatch"] = c("terminated") != c("next_state").isin(terminals)
    ep = Window.partitionBy("episode_id").orderBy("step")
    whole = Window.partitionBy("episode_id")
    w = (df.withColumn("_prev", F.lag("step").over(ep)).withColumn("_nstep", F.lead("step").over(ep))
         .withColumn("_nstate", F.lead("state").over(ep))
         .withColumn("_first", F.min("step").over(whole)).withColumn("_last", F.max("step").over(whole))
         .withColumn("_n", F.count(F.lit(1)).over(whole))
         .withColumn("_u0", F.first("unit_id").over(ep)))
    if spec.return_bound is not None:  # the episode's return over the same window: no extra job
        w = (w.withColumn("_return", F.sum(_return_term(spec)).over(whole))
             .withColumn("_final", F.lead(F.lit(1)).over(ep).isNull()))  # one row per episode: its last
    contiguous = (c("_last") == c("_n") - 1) & (c("_first") == 0)
    epi = {"step_duplicate": c("_prev") == c("step"),
           "step_gap": F.when(c("_prev").isNull(), c("step") != 0).otherwise(c("step") > c("_prev") + 1),
           "next_state_mismatch": contiguous & c("_nstep").isNotNull() & (c("_nstate") != c("next_state")),
           "unit_not_unique": c("unit_id") != c("_u0")}
    if flags:
        epi["flag_not_last"] = (sum((c(f).cast("long") for f in flags), F.lit(0)) > 0) & (c("step") != c("_last"))
    if spec.return_bound is not None:  # once per episode, at its last row in step order (``_nstep`` is
        # null there too, but also before a null step: nulls sort first)
        epi["return_below_bound"] = c("_final") & (c("_return") < float(spec.return_bound[0]))
    # rows without an episode id are null_value's: like polars' episode table, the structural rules skip them
    # (return_below_bound does not: polars' group-by over the rewards keeps a null id as one episode)
    epi = {r: e if r == "return_below_bound" else c("episode_id").isNotNull() & e for r, e in epi.items()}
    checks = {**row, **epi}
    aggs = [F.sum(F.coalesce(e.cast("long"), F.lit(0))).alias(r) for r, e in checks.items()]
    got = w.agg(F.count(F.lit(1)).alias("_rows"), *aggs).collect()[0].asDict()
    out = {r: int(got[r] or 0) for r in checks}
    out["empty_log"] = int(got["_rows"] == 0)
    assert not set(out) & set(BOUNDING_RULES)
    return out


def _not_finite(names):
    """``not_finite`` of a row, 0 to 2 (as validation counts it, per row and column): a NaN or infinite reward,
    and, when the logs have ``features``, a list holding a null, NaN or infinity (a null list is null_value's)."""
    out = F.coalesce(nan_or_inf(F.col("reward")).cast("long"), F.lit(0))
    if "features" in names:
        out = out + F.coalesce(F.exists("features", lambda x: x.isNull() | nan_or_inf(x)).cast("long"), F.lit(0))
    return out


def _return_term(spec: DomainSpec):
    """A row's share of its episode's return for ``return_below_bound``, the Spark twin of polars' rule.

    The reward clipped into ``reward_range`` on rows with step h < H and a finite reward; null on the
    other rows (a null, NaN or infinite reward is another rule's, a step h >= H is cut by bounding), so
    ``sum`` over the episode skips them, and an episode with no such row has a null return (no
    violation), as polars' group-by over the kept rows has no group for it.
    """
    kept = (F.col("step") < spec.horizon) & ~nan_or_inf(F.col("reward"))
    return F.when(kept, clipped_reward(spec))


def _reward_not_public(spec: DomainSpec):
    """The Spark twin of ``privaudit.data.validate``'s rule ``reward_not_public`` (same rows, same tolerance).

    |reward - r(next_state)| > ``spec.public_reward_tolerance()`` on rows whose reward is finite, whose
    next_state is in [0, S) and whose state is not terminal (the other rows are the other rules' to report).
    """
    c = F.col
    keys, vals = public_reward_table(spec)
    ns = c("next_state").cast("long")
    if keys:
        table = F.create_map(*[x for k, v in zip(keys, vals) for x in (F.lit(k).cast("long"), F.lit(v).cast("double"))])
        pub = F.coalesce(table[ns], F.lit(0.0))  # a key not listed: null, i.e. r(s') = 0
    else:
        pub = F.lit(0.0)
    r = c("reward").cast("double")
    checked = ~nan_or_inf(r) & (ns >= 0) & (ns < spec.S)
    if spec.terminal_states:
        checked = checked & ~F.coalesce(c("state").isin(list(spec.terminal_states)), F.lit(False))
    return checked & (F.abs(r - pub) > spec.public_reward_tolerance())


def check_fatal_rules(df: DataFrame, spec: DomainSpec) -> dict[str, int]:
    """Raise :class:`ValidationFailed` naming every broken fatal rule; else return the (zero) counts of
    :func:`fatal_rule_counts` (PRIVATE facts, for the data holder)."""
    counts = fatal_rule_counts(df, spec)
    broken = {r: n for r, n in counts.items() if n}
    if broken:
        raise ValidationFailed("the logs break fatal validation rules (contribution bounding cannot repair "
                               "them): " + ", ".join(f"{r} ({n})" for r, n in broken.items())
                               + ". Run `privaudit validate` on a sample to see examples.")
    return counts
