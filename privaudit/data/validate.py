"""Validate trajectory logs against a domain spec.

Every rule is a polars expression over a lazy scan of the log, collected
with the streaming engine: row rules (:mod:`privaudit.data.row_rules`) in
one pass that sums their violations (plus one pass per broken rule for its
first examples); episode and unit rules from one per-episode aggregate that
screens them all, after which only the flagged episodes' rows are re-read
(:mod:`privaudit.data.episode_checks`). Memory grows with the number of
episodes (about 40 bytes each), not of rows; no Python loop runs over rows.
Validation reads and never writes.

The rule names below are stable (scripts may match on them); see
docs/validate.md for examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from privaudit.data import episode_checks as ec
from privaudit.data.io import FLAG_COLUMNS, ROW, OpenLog, dtype_problem, open_log
from privaudit.data.row_rules import per_row_feature_length, row_rules
from privaudit.core.errors import LogReadError, UsageError
from privaudit.core.spec import DomainSpec


def _counted_per(per: str, meanings: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{rule: (per, meaning)}`` for rules counted per the same thing (a table row of :data:`RULES`)."""
    return {rule: (per, meaning) for rule, meaning in meanings.items()}


#: rule -> (counted per, meaning). Order is the order of reports.
RULES: dict[str, tuple[str, str]] = {
    **_counted_per("column", {
        "missing_column": "a required column is absent (after the spec's column mapping)",
        "column_type": "a column has an unusable type (integers for step/state/action/next_state, "
                       "numbers for reward, booleans for flags, int or string ids, lists of numbers for features)",
    }),
    **_counted_per("log", {
        "empty_log": "the log has no rows",
    }),
    **_counted_per("row and column", {
        "null_value": "a value is null",
        "not_finite": "reward is NaN or infinite, or features hold a null, NaN or infinity",
        "features_length": "a row's features list is not of the spec's length $.features.dim / A (checked "
                           "with the column-x-action map)",
    }),
    **_counted_per("row", {
        "state_out_of_range": "state is outside [0, S)",
        "action_out_of_range": "action is outside [0, A)",
        "next_state_out_of_range": "next_state is outside [0, S)",
        "reward_out_of_range": "reward is outside the spec's reward_range [r_min, r_max]",
        "reward_not_public": "reward differs from the spec's public reward r(next_state) by more than the "
                             "tolerance (checked when the spec declares public_reward)",
        "episode_too_long": "step h >= H: the episode has more than H steps",
        "terminated_and_truncated": "a row is flagged both terminated and truncated",
        "continues_after_terminal": "the row's state is a terminal state: the episode should have ended "
                                    "at the step that entered it",
        "terminated_mismatch": "terminated is not equal to 'next_state is a terminal state' "
                               "(checked when the spec declares terminal states)",
        "step_duplicate": "(episode_id, step) repeats an earlier row",
        "step_gap": "the steps of an episode are not contiguous from 0 (reported at the first step after a gap, "
                    "or at a first step other than 0)",
        "next_state_mismatch": "next_state of step h differs from state of step h+1 "
                               "(checked in episodes whose steps are 0..L-1)",
        "flag_not_last": "a terminated/truncated flag sits on a row that is not the episode's last step",
        "unit_not_unique": "an episode's rows carry different unit_id values",
    }),
    **_counted_per("unit", {
        "too_many_episodes": "a privacy unit has more episodes than the spec's privacy_unit.max_episodes (k)",
    }),
    **_counted_per("episode", {
        "return_above_bound": "the episode's running return (rewards clipped into reward_range, steps h < H) "
                              "exceeds the spec's return_bound G_max (reported at the first step above it)",
        "return_below_bound": "the episode's return (rewards clipped into reward_range, steps h < H) is "
                              "below the spec's return_bound G_min (reported at its last step)",
    }),
}

#: Rules that contribution bounding enforces instead of refusing the logs: more
#: than k episodes per unit (keep k), steps h >= H (truncate), rewards outside
#: the declared range (clip), a return above the declared return bound (clip the
#: running return). A return below it is fatal: no repair short of inventing
#: reward would lift it, and the declared fact is false for these logs. Every other rule (missing columns, nulls, NaN
#: rewards, states/actions outside the domain, broken episode structure, rows
#: after a terminal, an episode split across units, a logged reward that is not
#: the declared public reward, ...) is fatal: bounding
#: cannot repair it without guessing, and counting such rows would break the
#: domain or the sensitivity argument.
BOUNDING_RULES = ("too_many_episodes", "episode_too_long", "reward_out_of_range", "return_above_bound")


@dataclass(frozen=True)
class ValidationReport:
    """Result of :func:`validate_logs` (immutable).

    The counts here (rows, episodes, units, violations) are facts about the
    private data: they are shown only to the data holder, locally, and must
    never be copied into a release.

    Attributes
    ----------
    ok : bool
        True when no rule is broken.
    releasable : bool (property)
        True when no *fatal* rule is broken: only rules that contribution
        bounding repairs (:data:`BOUNDING_RULES`) may be broken, and
        ``release``, ``train`` and ``pipeline`` accept the logs.
    fatal, repaired (properties)
        Rule -> count of the broken fatal rules / of the broken rules that
        bounding repairs.
    rows : int
        Rows in the log (all parts).
    episodes, units : int or None
        Distinct non-null episode ids / privacy units; None when the columns
        needed to count them are missing or unusable.
    counts : dict[str, int]
        Rule -> number of violations, for every rule that was checked
        (0 included); unit of counting in :data:`RULES`.
    violations : list of dict
        At most ``max_errors`` examples of each broken rule, in rule order then
        row order; keys ``rule, episode_id, step, row, column, file_column,
        message, file, file_row`` (``column`` the standard name,
        ``file_column`` the name in the file; ``row`` 0-based in the
        concatenated input, ``file_row`` 0-based within ``file``; None where
        not applicable).
    skipped : tuple of str
        Rules not checked because a column they need is missing or unusable.
    path : str
        The log that was checked.
    """

    ok: bool
    rows: int
    episodes: int | None
    units: int | None
    counts: dict
    violations: list
    skipped: tuple = ()
    path: str = ""
    max_errors: int = field(default=20, repr=False)

    @property
    def fatal(self) -> dict:
        """Broken rules that block a release (rule -> count)."""
        return {r: n for r, n in self.counts.items() if n and r not in BOUNDING_RULES}

    @property
    def repaired(self) -> dict:
        """Broken rules that contribution bounding repairs (rule -> count)."""
        return {r: n for r, n in self.counts.items() if n and r in BOUNDING_RULES}

    @property
    def releasable(self) -> bool:
        """No fatal rule broken (a missing column is itself the fatal rule ``missing_column``)."""
        return not self.fatal

    def to_dict(self) -> dict:
        """JSON-ready dict (keys as the attributes, plus ``releasable``, ``fatal``, ``repaired_by_bounding``)."""
        return {"ok": self.ok, "releasable": self.releasable, "path": self.path, "rows": self.rows,
                "episodes": self.episodes, "units": self.units, "counts": dict(self.counts),
                "fatal": self.fatal, "repaired_by_bounding": self.repaired, "skipped": list(self.skipped),
                "max_errors": self.max_errors, "violations": [dict(v) for v in self.violations]}


def violation_line(v: dict, tag: str | None = None) -> str:
    """One located violation as printed everywhere: ``[rule] message (column c = 'name' in the file)``.

    ``v`` is an entry of ``ValidationReport.violations``; the file's own column
    name is given when the spec maps it to another standard name. ``tag``
    replaces the rule in the brackets (e.g. ``"rule, repaired by bounding"``).
    """
    col = v["column"]
    if col and v.get("file_column") not in (None, col):
        col = f"{col} = '{v['file_column']}' in the file"
    return f"  [{tag or v['rule']}] {v['message']}" + (f" (column {col})" if col else "")


def _records(df: pl.DataFrame | None, rule: str, log: OpenLog, n: int) -> list[dict]:
    """Violation dicts from a frame with ``row, episode_id, step, column, detail``."""
    if df is None or df.height == 0:
        return []
    df = df.sort(ROW).head(n)
    rows = df[ROW].to_list()
    files, file_rows = log.locate(rows)
    ep = df["episode_id"].to_list() if "episode_id" in df.columns else [None] * len(rows)
    st = df["step"].to_list() if "step" in df.columns else [None] * len(rows)
    out = []
    for i, r in enumerate(rows):
        where = f"row {r}" + (f" ({files[i]} row {int(file_rows[i])})" if len(log.parts) > 1 else "")
        if ep[i] is not None:
            where += f", episode {ep[i]}"
        if st[i] is not None:
            where += f", step {st[i]}"
        col = df["column"][i]
        out.append({"rule": rule, "episode_id": ep[i], "step": st[i], "row": int(r),
                    "column": col, "file_column": log.source.get(col, col), "message": f"{where}: {df['detail'][i]}",
                    "file": files[i], "file_row": int(file_rows[i])})
    return out


def _schema_violation(rule: str, column: str | None, message: str, log: OpenLog,
                      file_column: str | None = None) -> dict:
    files = sorted({str(p.file) for p in log.parts})
    return {"rule": rule, "episode_id": None, "step": None, "row": None, "column": column,
            "file_column": file_column, "message": message, "file": files[0] if len(files) == 1 else None, "file_row": None}


def validate_logs(path: str | Path, spec: DomainSpec, max_errors: int = 20) -> ValidationReport:
    """Check a trajectory log against the domain spec, every rule of :data:`RULES`.

    Parameters
    ----------
    path : str or Path
        A Parquet file or a folder of Parquet parts (see
        :func:`privaudit.data.io.scan_logs`).
    spec : DomainSpec
        The public domain: S, A, H, reward range, terminal states, privacy
        unit and k, column mapping.
    max_errors : int
        Most examples listed per broken rule (counts are always complete).

    Returns
    -------
    ValidationReport
        ``ok`` is False when any rule is broken. Rows, episodes, units and
        counts are private facts, shown only to the data holder (validation
        output is local and never a release).

    Raises
    ------
    LogReadError
        If the log cannot be read (missing, not Parquet, corrupt, parts with
        different schemas). Broken rows are not errors: they are reported.
    UsageError
        If ``max_errors`` < 0.

    Notes
    -----
    Terminal states: a row whose state is terminal is a violation
    (``continues_after_terminal``), so a step into a terminal state must be
    the episode's last. When the log has a ``terminated`` column and the spec
    declares terminal states, ``terminated`` must be true exactly on rows
    whose next_state is terminal (``terminated_mismatch``).
    Public reward: when the spec declares ``public_reward`` (r(s') of the
    next state, 0 for unlisted states), every row's logged reward must equal
    r(next_state) within ``DomainSpec.public_reward_tolerance``
    (``reward_not_public``, fatal): the learners plan with the declared
    function instead of the logged rewards, so a false declaration would
    train a policy for another reward without a word. The last row of an
    episode is checked too (its next_state is where the step led, also when
    the log was truncated there).
    Steps are 0-based (h = 0..H-1; the papers count 1..H).
    """
    if max_errors < 0:
        raise UsageError(f"max_errors must be >= 0. Got {max_errors}.")
    log = open_log(path, spec)
    try:
        return _validate(log, spec, max_errors, str(path))
    except pl.exceptions.PolarsError as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LogReadError(f"{path}: reading the log failed ({reason}). "
                           "A file may be corrupt; rewrite it with a Parquet writer.") from None


def _validate(log: OpenLog, spec: DomainSpec, n: int, path: str) -> ValidationReport:
    counts: dict[str, int] = {}
    viol: dict[str, list[dict]] = {}
    rows = sum(p.n_rows for p in log.parts)
    for std in log.missing:
        counts["missing_column"] = counts.get("missing_column", 0) + 1
        viol.setdefault("missing_column", []).append(_schema_violation(
            "missing_column", std, f"required column '{spec.column(std)}' ({std}) is missing; rename it in the "
            "file or map it in the spec's \"columns\"", log, spec.column(std)))
    usable = set()
    for std, dt in log.dtypes.items():
        why = dtype_problem(std, dt)
        if why:
            counts["column_type"] = counts.get("column_type", 0) + 1
            viol.setdefault("column_type", []).append(_schema_violation(
                "column_type", std, f"column '{log.source[std]}' ({std}) {why}", log, log.source[std]))
        else:
            usable.add(std)
    if log.unit_is_episode and "episode_id" in usable:
        usable.add("unit_id")
    counts.setdefault("missing_column", 0)
    counts.setdefault("column_type", 0)
    counts["empty_log"] = int(rows == 0)
    if rows == 0:
        viol["empty_log"] = [_schema_violation("empty_log", None, "the log has no rows", log)]
        return _report(counts, viol, rows, 0, 0, set(RULES) - set(counts), path, n)

    # --- row rules: one streaming pass for all counts, one per broken rule for examples
    rules = row_rules(log, spec, usable)
    ctx = [c for c in ("episode_id", "step") if c in usable]
    if rules:
        sums = log.frame.select([e.sum().alias(str(i)) for i, (_, _, e, _) in enumerate(rules)]) \
            .collect(engine="streaming").row(0)
    else:
        sums = ()
    for (rule, col, expr, msg), k in zip(rules, sums):
        counts[rule] = counts.get(rule, 0) + int(k or 0)
        if k and n:
            df = (log.frame.filter(expr).select(ROW, *ctx, pl.lit(col).alias("column"), msg.alias("detail"))
                  .sort(ROW).head(n).collect(engine="streaming"))
            viol.setdefault(rule, []).extend(_records(df, rule, log, n))

    # --- episode and unit rules: one aggregate per episode screens them all; flagged episodes are re-read
    episodes = units = None
    if {"episode_id", "step"} <= usable:
        check_chain = {"state", "next_state"} <= usable
        check_units = not log.unit_is_episode and "unit_id" in usable
        flags = [f for f in FLAG_COLUMNS if f in usable]
        returns = (ec.ReturnBounds(spec.horizon, *spec.reward_range, *spec.return_bound)
                   if spec.return_bound is not None and "reward" in usable else None)
        table = ec.episode_table(log, check_chain, check_units, flags, returns)
        episodes = table.frame.height
        units = episodes if log.unit_is_episode else None
        for rule, df in ec.exact_episode_checks(log, table, check_chain, check_units).items():
            if rule == "next_state_mismatch" and not check_chain or rule == "unit_not_unique" and not check_units:
                continue
            counts[rule] = 0 if df is None else df.height
            viol[rule] = _records(df, rule, log, n)
        if flags:
            fl = ec.flag_not_last(log, table, flags)
            counts["flag_not_last"] = fl.height
            viol["flag_not_last"] = _records(fl, "flag_not_last", log, n)
        if check_units:
            units, k, df = ec.units_and_surplus(table, spec.max_episodes_per_unit, n)
            counts["too_many_episodes"] = k
            viol["too_many_episodes"] = _records(df, "too_many_episodes", log, n)
        if returns is not None:
            for rule, df in ec.return_rules(log, table, returns).items():
                counts[rule] = df.height
                viol[rule] = _records(df, rule, log, n)
    skipped = set(RULES) - set(counts)
    if spec.return_bound is None:  # nothing declared: nothing to check
        skipped -= {"return_above_bound", "return_below_bound"}
        counts.setdefault("return_above_bound", 0)
        counts.setdefault("return_below_bound", 0)
    if log.unit_is_episode:  # one episode per unit: the unit rules hold by construction
        skipped -= {"unit_not_unique", "too_many_episodes"}
        counts.setdefault("unit_not_unique", 0)
        counts.setdefault("too_many_episodes", 0)
    if not spec.terminal_states:
        skipped -= {"continues_after_terminal", "terminated_mismatch"}
    if spec.public_reward is None:  # rewards are private: nothing declared to compare with
        skipped -= {"reward_not_public"}
    if "terminated" not in log.source:
        skipped -= {"terminated_mismatch", "terminated_and_truncated"}
    if not (set(FLAG_COLUMNS) & set(log.source)):
        skipped -= {"flag_not_last"}
    if "truncated" not in log.source:
        skipped -= {"terminated_and_truncated"}
    if per_row_feature_length(spec) is None:  # no per-row feature map: no declared length to check
        skipped -= {"features_length"}
    if "features" not in log.source and "reward" in usable and not log.dtypes["reward"].is_float():
        skipped -= {"not_finite"}
    return _report(counts, viol, rows, episodes, units, skipped, path, n)


def _report(counts, viol, rows, episodes, units, skipped, path, n) -> ValidationReport:
    order = list(RULES)
    counts = {r: counts[r] for r in order if r in counts}
    by_row = lambda v: (v["row"] is None, v["row"] or 0)  # noqa: E731
    violations = [v for r in order for v in sorted(viol.get(r, []), key=by_row)[: n]]
    return ValidationReport(ok=not any(counts.values()), rows=int(rows), episodes=episodes, units=units,
                            counts=counts, violations=violations,
                            skipped=tuple(r for r in order if r in skipped), path=path, max_errors=n)
