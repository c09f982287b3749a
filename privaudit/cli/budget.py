"""``privaudit budget``: create and inspect a privacy-budget ledger.

The ledger (``privaudit.privacy.ledger``) records every release of a dataset
against a total zCDP budget; ``privaudit release --ledger FILE`` charges it
and is refused (exit 3) when the budget would be exceeded.
"""

from __future__ import annotations

from fractions import Fraction

import click

from privaudit.cli.common import PathArg, echo_json, handle_errors
from privaudit.core.errors import UsageError
from privaudit.core.outputs import check_writable
from privaudit.core.formatting import bound
from privaudit.privacy.ledger import charge, init_ledger, ledger_status, rho_of_pure_dp, upgrade_ledger


@click.group("budget", short_help="Create, show or charge a privacy-budget ledger (append-only, exact amounts).")
def command():
    """Privacy-budget ledger: one total zCDP budget per dataset; every release
    is charged against it and refused (exit 3) once it would be exceeded.

    Entries are hash-chained (FILE.head holds the last one); an edited or
    truncated ledger refuses to spend (exit 3, the line named). Set
    PRIVAUDIT_LEDGER_KEY_FILE (a key file kept elsewhere) before `init` to
    authenticate the chain with HMAC-SHA256; while it is set, every command
    refuses a ledger not keyed with that key (exit 3), and with
    PRIVAUDIT_LEDGER_ID set (the id `show` prints) any other ledger.

    A pure eps-DP release is charged rho = eps^2/2 (a valid zCDP bound).
    """


@command.command("init")
@click.argument("file", metavar="FILE", type=PathArg(readable=False, dir_okay=False))
@click.option("--dataset", "dataset_id", required=True, help="Identifier of the dataset the budget protects.")
@click.option("--rho-total", required=True, help="Total zCDP budget rho (> 0), stored exactly as written.")
@click.option("--json", "as_json", is_flag=True, help="Print the header entry as JSON.")
@handle_errors
def init_cmd(file, dataset_id, rho_total, as_json):
    """Create the ledger FILE (refused if it exists).

    Example: privaudit budget init icu.ledger --dataset icu-2024 --rho-total 2
    """

    check_writable(file, "FILE")
    head = init_ledger(file, dataset_id, rho_total)
    if as_json:
        echo_json(head)
    else:
        click.echo(f"created ledger {file} for dataset {dataset_id!r} with rho_total = {head['rho_total']}")


@command.command("show")
@click.argument("file", metavar="FILE", type=PathArg(readable=False, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print only JSON: totals and every entry.")
@handle_errors
def show_cmd(file, as_json):
    """Show the dataset, total, spent and remaining budget and every charge of FILE.

    Example: privaudit budget show icu.ledger --json
    """

    st = ledger_status(file)
    if as_json:
        echo_json(st)
        return
    click.echo(f"dataset   {_one_line(st['dataset_id'])}")
    shown = {"total": _readable(st["rho_total"], "down"), "spent": _readable(st["rho_spent"], "up"),
             "remaining": _readable(st["rho_remaining"], "down")}
    click.echo(f"rho total {shown['total']}")
    click.echo(f"spent     {shown['spent']}")
    click.echo(f"remaining {shown['remaining']}")
    click.echo(f"entries   {st['n_entries']}")
    if st["verified"]:
        click.echo(f"chain     verified ({st['auth']}); head #{st['head']['seq']} {st['head']['digest']}")
        click.echo(f"ledger id {st['ledger_id']}" + (f" (key id {st['key_id']})" if st["key_id"] else ""))
        click.echo("          (note the head elsewhere: it also catches a rollback of the ledger and its .head)")
    else:
        click.echo(f"chain     none (format_version {st['format_version']}): edits cannot be detected; "
                   f"`privaudit budget upgrade {file}` chains it")
    for e in st["entries"]:
        rho = _readable(e["rho"], "up")
        shown[e["seq"]] = rho
        click.echo(f"  #{e['seq']:<3} {e.get('timestamp', '?')}  rho={rho:<12} {_one_line(e.get('description', ''))}")
    if any(v.startswith("~") for v in shown.values()):
        click.echo("(~: rounded to 6 significant digits, spent up, total and remaining down;\n"
                   " `budget show --json` gives the exact values)")


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped (a line break as ``\\n``), so that one entry is one line:
    a description written through the Python API (or an edited-then-resealed ledger) cannot print as entries."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _readable(exact: str, direction: str) -> str:
    """An exact ledger amount with at most 6 significant digits, rounded towards ``direction`` ('~' if rounded)."""
    return bound(Fraction(exact.split(" ")[0]), direction)  # 'p/q (~float)' -> 'p/q'


@command.command("upgrade")
@click.argument("file", metavar="FILE", type=PathArg(readable=False, dir_okay=False))
@handle_errors
def upgrade_cmd(file):
    """Chain a format_version 1 ledger FILE (kept as FILE.v1), or seal an
    unkeyed one with the key set in PRIVAUDIT_LEDGER_KEY_FILE (kept as
    FILE.unkeyed), trusting its current content.

    Check its entries with `budget show` first (without the key set, for an
    unkeyed ledger). Example: privaudit budget upgrade icu.ledger
    """

    st = upgrade_ledger(file)
    click.echo(f"upgraded {file} (format_version {st['format_version']}, {st['auth']}, ledger id {st['ledger_id']}); "
               f"{st['n_entries']} charges kept, spent {st['rho_spent']}; the old copy is {st['backup']}")


@command.command("charge")
@click.argument("file", metavar="FILE", type=PathArg(readable=False, dir_okay=False))
@click.option("--dataset", "dataset_id", required=True, help="Dataset the ledger protects (must match).")
@click.option("--rho", default=None, help="zCDP rho spent (> 0), stored exactly as written.")
@click.option("--epsilon", default=None, help="Pure eps-DP spent instead; charged as rho = eps^2/2.")
@click.option("--description", required=True, help="What was released (kept in the ledger).")
@click.option("--json", "as_json", is_flag=True, help="Print the entry appended as JSON.")
@handle_errors
def charge_cmd(file, dataset_id, rho, epsilon, description, as_json):
    """Record a release made outside `privaudit release` (exit 3 if it does not fit).

    Example: privaudit budget charge icu.ledger --dataset icu-2024 --rho 0.25 --description "manual table"
    """

    if (rho is None) == (epsilon is None):
        raise UsageError("give exactly one of --rho or --epsilon.")
    if not description.strip():  # the ledger's only record of what spent the budget
        raise UsageError("`--description` is empty: say what was released (it is kept in the ledger).")
    if not description.isprintable():  # a line break would print as a line of its own in `budget show`
        raise UsageError(f"`--description` holds a line break or another control character: write it on one "
                         f"line. Found {description!r}.")
    amount = rho if rho is not None else rho_of_pure_dp(epsilon)
    entry = charge(file, dataset_id, amount, description)
    if as_json:
        echo_json(entry)
    else:
        click.echo(f"charged rho = {entry['rho']} to {file} (entry #{entry['seq']})")
