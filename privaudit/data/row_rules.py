"""The row rules of validation: one polars expression per rule, each true on the rows that break it.

:func:`privaudit.data.validate.validate_logs` sums them all in one streaming
pass over the rows (plus one pass per broken rule for its first examples);
the rules' names and meanings are ``privaudit.data.validate.RULES``. Each
expression reads one row only, so the pass holds no state per row or
episode. The Spark engine (``privaudit.data.spark.fatal_rules``) shares the
public reward's table.
"""

from __future__ import annotations

import polars as pl

from privaudit.core.spec import DomainSpec
from privaudit.data.io import OpenLog


def public_reward_table(spec: DomainSpec) -> tuple[list[int], list[float]]:
    """The declared public reward as (states, values), for a join-free lookup of r(next_state).

    Parameters
    ----------
    spec : DomainSpec
        A spec that declares ``public_reward`` (kind ``next_state``).

    Returns
    -------
    states : list of int
        The states ``$.public_reward.values`` lists (each in [0, S), checked by the spec).
    values : list of float
        r(s') of each, in reward units. Unlisted states earn 0.
    """
    values = spec.public_reward["values"]
    return [int(k) for k in values], [float(v) for v in values.values()]


def per_row_feature_length(spec: DomainSpec) -> int | None:
    """m = ``$.features.dim`` / A, each row's features length under the ``column-x-action`` map; else None
    (no per-row features, or a ``dim`` that the learners refuse with their own SpecError)."""
    f = spec.features or {}
    if f.get("map") != "column-x-action" or not isinstance(f.get("dim"), int) or f["dim"] % spec.n_actions:
        return None
    return f["dim"] // spec.n_actions


def row_rules(log: OpenLog, spec: DomainSpec, usable: set[str]) -> list[tuple]:
    """(rule, column, expr, message template) for the row rules whose columns are usable.

    The template is a polars expression giving the message from the row.
    """
    c, S, A, H = pl.col, spec.n_states, spec.n_actions, spec.horizon
    lo, hi = spec.reward_range
    out = []
    for std in log.source:
        if std in usable:
            out.append(("null_value", std, c(std).is_null(), pl.lit(f"{std} is null")))
    if "reward" in usable and log.dtypes["reward"].is_float():
        out.append(("not_finite", "reward", c("reward").is_not_null() & ~c("reward").is_finite(),
                    pl.format("reward is {}", "reward")))
    if "features" in usable:
        f = c("features")
        if isinstance(log.dtypes["features"], pl.Array):
            f = f.arr.to_list()
        el = pl.element()
        bad = f.list.eval(el.is_null() | ~el.cast(pl.Float64).is_finite()).list.any()
        out.append(("not_finite", "features", bad.fill_null(False), pl.lit("features hold a null, NaN or infinity")))
        m = per_row_feature_length(spec)
        if m is not None:  # else DP-VAPVI refused the row only after the pipeline had charged its release
            out.append(("features_length", "features", (f.list.len() != m).fill_null(False),
                        pl.format(f"features hold {{}} numbers; the spec's $.features.dim / A = {m} per row",
                                  f.list.len())))
    for std, n, sym in (("state", S, "S"), ("action", A, "A"), ("next_state", S, "S")):
        if std in usable:
            out.append((f"{std}_out_of_range", std, (c(std) < 0) | (c(std) >= n),
                        pl.format(f"{std} {{}} is outside [0, {sym}={n})", std)))
    if "reward" in usable:
        r = c("reward").cast(pl.Float64)
        out.append(("reward_out_of_range", "reward", r.is_finite() & ((r < lo) | (r > hi)),
                    pl.format(f"reward {{}} is outside reward_range [{lo}, {hi}]", "reward")))
    if "step" in usable:
        out.append(("episode_too_long", "step", c("step") >= H,
                    pl.format(f"step {{}} >= H={H}: the episode has more than H steps", "step")))
    if {"terminated", "truncated"} <= usable:
        out.append(("terminated_and_truncated", "truncated", c("terminated") & c("truncated"),
                    pl.lit("both terminated and truncated are true; at most one may be")))
    if spec.public_reward is not None and {"reward", "next_state"} <= usable:
        out.append(reward_not_public(spec, "state" in usable))
    terminals = list(spec.terminal_states)
    if terminals and "state" in usable:
        out.append(("continues_after_terminal", "state", c("state").is_in(terminals),
                    pl.format("state {} is terminal; the episode should have ended at the step entering it", "state")))
    if terminals and {"terminated", "next_state"} <= usable:
        into = c("next_state").is_in(terminals)
        out.append(("terminated_mismatch", "terminated", c("terminated") != into,
                    pl.when(into).then(pl.format("next_state {} is terminal but terminated is false", "next_state"))
                    .otherwise(pl.format("terminated is true but next_state {} is not a terminal state",
                                         "next_state"))))
    return out


def reward_not_public(spec: DomainSpec, state_usable: bool) -> tuple:
    """The row rule ``reward_not_public``: |reward - r(next_state)| > ``spec.public_reward_tolerance()``.

    Rows whose reward is null or not finite, whose next_state is null or
    outside [0, S), or whose state is terminal are left to the rules that
    already report them (``null_value``, ``not_finite``,
    ``next_state_out_of_range``, ``continues_after_terminal``): r(next_state)
    is undefined there, or the row should not exist. A reward outside
    ``reward_range`` is compared as logged: the declared values lie inside
    the range, so it differs from r(next_state) unless within the tolerance
    (both rules then report the row; clipping would not make it the declared
    reward function).
    """
    c, S = pl.col, spec.n_states
    tol = spec.public_reward_tolerance()
    r = c("reward").cast(pl.Float64)
    ns = c("next_state")
    # r(next_state): a gather from r of shape (S,) at next_state clipped into [0, S - 1] (rows outside are
    # not checked), evaluated batch by batch. replace_strict over the declared states is not streamed: it
    # held the whole column and made validation's peak grow with the rows (issue 33, docs/benchmarks.md).
    pub = pl.lit(pl.Series("r", spec.public_reward_vector(), dtype=pl.Float64)).gather(ns.clip(0, S - 1))
    checked = r.is_finite() & (ns >= 0) & (ns < S)
    if spec.terminal_states and state_usable:
        checked = checked & ~c("state").is_in(list(spec.terminal_states)).fill_null(False)
    bad = (checked & ((r - pub).abs() > tol)).fill_null(False)
    msg = pl.format(f"reward {{}} differs from the spec's public reward r(next_state={{}}) = {{}} "
                    f"(tolerance {tol:g}; $.public_reward)", "reward", "next_state", pub)
    return ("reward_not_public", "reward", bad, msg)
