"""``privaudit validate``: check Parquet trajectory logs against a domain spec."""

from __future__ import annotations

from pathlib import Path

import click

from privaudit.cli.numbers import FloatRange, IntRange
from privaudit.cli.common import PathArg, echo_json, handle_errors
from privaudit.data.prepare import bound_logs
from privaudit.data.repairs import MAX_REPAIR_SHARE_DEFAULT, RepairLimit, check_repairs, repairs_text
from privaudit.data.validate import RULES, validate_logs, violation_line
from privaudit.core.spec import load_spec

_HELP = """Check trajectory logs against a domain spec; writes nothing.

LOGS is a Parquet file or a folder of Parquet parts (*.parquet, read in name
order). Prints the rows, episodes and units, the violations per rule and the
first examples of each broken rule (rule, episode, step, row, column).
These figures describe the private data: they are for the data holder only.

Broken rules come in two kinds. FATAL rules block a release (missing
columns, nulls, NaN rewards, states or actions outside the domain, broken
episodes, ...): fix them at the source. Four rules are REPAIRED by
contribution bounding, which release, train and pipeline apply: more than k
episodes per unit (the k with the smallest hash of their episode id are
kept), steps h >= H (dropped), rewards outside the declared range (clipped)
and returns above a declared return_bound (clipped). A repair changes the
data the results describe: validate says how much (counts and shares of
the logs), and release, train and pipeline stop before spending anything
when a share is above --max-repair-share (default 0.05) unless given
--accept-repairs. A large share usually means a wrong declaration in the
spec (e.g. reward_range [0, 1] for rewards coded -1/0/+1, or H too short).

Exit codes: 0 the logs can be released (no fatal rule broken, and every
repair within --max-repair-share or --accept-repairs given; repairs are
listed with their shares); 1 a fatal rule is broken, the logs cannot be
read, or a repair is above --max-repair-share without --accept-repairs
(release, train and pipeline would stop: their exit 1 for it too; --json
tells the two apart: `releasable`, `repairs_over_max_share`); 2 usage or
spec error. So `privaudit validate ... && privaudit release ...` goes on
only when release would (given the same two options).
"""


@click.command("validate", help=_HELP, short_help="Check Parquet trajectory logs against a domain spec.")
@click.argument("logs", type=PathArg(readable=False, path_type=str))
@click.option("--spec", "spec_path", required=True, type=PathArg(readable=False, path_type=str),
              help="Domain spec (JSON) with S, A, H, reward range, privacy unit, column mapping.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON report on stdout.")
@click.option("--max-errors", type=IntRange(min=0), default=20, show_default=True,
              help="Most examples listed per broken rule (counts are always complete).")
@click.option("--max-repair-share", type=FloatRange(0, 1), default=MAX_REPAIR_SHARE_DEFAULT,
              show_default=True,
              help="Say whether release, train and pipeline would stop on these logs: they do when a repair "
                   "of contribution bounding changes a larger share of the logs (unless --accept-repairs); "
                   "exit 1 when they would.")
@click.option("--accept-repairs", is_flag=True,
              help="As for release, train and pipeline: repairs above --max-repair-share do not stop them, so "
                   "validate exits 0 for them (they are still listed).")
@handle_errors
def command(logs: str, spec_path: str, as_json: bool, max_errors: int, max_repair_share: float,
            accept_repairs: bool) -> None:
    spec = load_spec(spec_path)
    report = validate_logs(logs, spec, max_errors=max_errors)
    # what bounding changes, as counts and shares: only for logs a release accepts (else nothing is bounded)
    bounding = bound_logs(Path(logs), spec, report.episodes)[2] if report.releasable and report.repaired else None
    over = [] if bounding is None else check_repairs(bounding, RepairLimit(max_repair_share, accept=True), logs)
    if as_json:
        echo_json({**report.to_dict(),
                   "bounding": None if bounding is None else bounding.to_dict(),
                   "repairs_over_max_share": [r.rule for r in over], "max_repair_share": max_repair_share,
                   "accept_repairs": accept_repairs})
    else:
        click.echo(_human(report, RULES, bounding=bounding, over=over, max_share=max_repair_share,
                          accept=accept_repairs))
    # the exit code a script can chain on: non-zero whenever release (with the same options) would refuse
    if not report.releasable or (over and not accept_repairs):
        raise SystemExit(1)


def _human(report, rules, *, bounding=None, over=(), max_share=MAX_REPAIR_SHARE_DEFAULT, accept=False) -> str:
    ep = "unknown" if report.episodes is None else f"{report.episodes:,}"
    un = "unknown" if report.units is None else f"{report.units:,}"
    lines = [f"{report.path}: {report.rows:,} rows, {ep} episodes, {un} privacy units",
             "(private figures: for the data holder only, never to be released)", ""]
    fatal, repaired = report.fatal, report.repaired
    width = max((len(r) for r in {**fatal, **repaired}), default=0)

    def count_lines(head: str, broken: dict) -> None:
        n, r = sum(broken.values()), len(broken)
        lines.append(f"{head}: {n:,} violation{'s' * (n != 1)} of {r} rule{'s' * (r != 1)}")
        lines.extend(f"  {rule:<{width}}  {k:>10,}  {rules[rule][1]}" for rule, k in broken.items())

    if not fatal and not repaired:
        lines.append(f"valid: all {len(report.counts)} rules checked hold.")
    if fatal:
        count_lines("INVALID (fatal: a release refuses these logs; fix them at the source)", fatal)
    elif repaired:
        lines.append("valid for release: no fatal rule is broken.")
    if repaired:
        if fatal:
            lines.append("")
        count_lines("repaired by contribution bounding (release, train and pipeline clip or drop these rows; "
                    "the results then describe the repaired logs)", repaired)
    if bounding is not None:
        lines += ["", "what contribution bounding changes (counts and shares of the logs):", repairs_text(bounding)]
        if over and accept:
            lines.append(f"{len(over)} repair(s) change more than --max-repair-share {max_share:g} of the logs; "
                         "with --accept-repairs, release, train and pipeline apply them and go on (and print "
                         "them). Check the spec's declarations (reward_range, H, k, return_bound).")
        elif over:
            lines.append(f"STOP: {len(over)} repair(s) change more than --max-repair-share {max_share:g} of the "
                         "logs: release, train and pipeline stop before spending anything unless given "
                         "--accept-repairs. Check the spec's declarations (reward_range, H, k, return_bound).")
        else:
            lines.append(f"every repair is within --max-repair-share {max_share:g}: release, train and pipeline "
                         "apply them and go on (and print them).")
    if report.skipped:
        lines.append("not checked (a column they need is missing or unusable): " + ", ".join(report.skipped))
    if report.violations:
        lines += ["", f"first violations (at most {report.max_errors} per rule):"]
        lines += [violation_line(v, f"{v['rule']}, repaired by bounding" if v["rule"] in report.repaired else None)
                  for v in report.violations]
    return "\n".join(lines)
