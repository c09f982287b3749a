"""``privaudit validate``: check Parquet trajectory logs against a domain spec."""

from __future__ import annotations

import click

from privaudit.cli.common import PathArg, echo_json, handle_errors
from privaudit.data.validate import RULES, validate_logs
from privaudit.core.spec import load_spec

_HELP = """Check trajectory logs against a domain spec; writes nothing.

LOGS is a Parquet file or a folder of Parquet parts (*.parquet, read in name
order). Prints the rows, episodes and units, the violations per rule and the
first examples of each broken rule (rule, episode, step, row, column).
These figures describe the private data: they are for the data holder only.

Broken rules come in two kinds. FATAL rules block a release (missing
columns, nulls, NaN rewards, states or actions outside the domain, broken
episodes, ...): fix them at the source. Three rules are REPAIRED by
contribution bounding, which release, train and pipeline apply anyway: more
than k episodes per unit (the first k are kept), steps h >= H (dropped) and
rewards outside the declared range (clipped). They are listed for
information; there is nothing to fix, and counting stays per patient
is not needed.

Exit codes: 0 no fatal rule broken (the logs can be released; repairs are
listed); 1 a fatal rule is broken, or the logs cannot be read; 2 usage or
spec error.
"""


@click.command("validate", help=_HELP, short_help="Check Parquet trajectory logs against a domain spec.")
@click.argument("logs", type=PathArg(readable=False, path_type=str))
@click.option("--spec", "spec_path", required=True, type=PathArg(readable=False, path_type=str),
              help="Domain spec (JSON) with S, A, H, reward range, privacy unit, column mapping.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON report on stdout.")
@click.option("--max-errors", type=click.IntRange(min=0), default=20, show_default=True,
              help="Most examples listed per broken rule (counts are always complete).")
@handle_errors
def command(logs: str, spec_path: str, as_json: bool, max_errors: int) -> None:
    spec = load_spec(spec_path)
    report = validate_logs(logs, spec, max_errors=max_errors)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(_human(report, RULES))
    if not report.releasable:
        raise SystemExit(1)


def _human(report, rules) -> str:
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
        count_lines("repaired by contribution bounding (release, train and pipeline do it; nothing to fix)",
                    repaired)
    if report.skipped:
        lines.append("not checked (a column they need is missing or unusable): " + ", ".join(report.skipped))
    if report.violations:
        lines += ["", f"first violations (at most {report.max_errors} per rule):"]
        for v in report.violations:
            col = v["column"]
            if col and v.get("file_column") not in (None, col):
                col = f"{col} = '{v['file_column']}' in the file"
            tag = f"{v['rule']}, repaired by bounding" if v["rule"] in report.repaired else v["rule"]
            lines.append(f"  [{tag}] {v['message']}" + (f" (column {col})" if col else ""))
    return "\n".join(lines)
