"""``privaudit budget``: create and inspect a privacy-budget ledger.

The ledger (``privaudit.privacy.ledger``) records every release of a dataset
against a total zCDP budget; ``privaudit release --ledger FILE`` charges it
and is refused (exit 3) when the budget would be exceeded.
"""

from __future__ import annotations

import click

from privaudit.cli.common import echo_json, handle_errors


@click.group("budget", short_help="Create or show a privacy-budget ledger (append-only, exact amounts).")
def command():
    """Privacy-budget ledger: one total zCDP budget per dataset; every release
    is charged against it and refused (exit 3) once it would be exceeded.

    A pure eps-DP release is charged rho = eps^2/2 (a valid zCDP bound).
    """


@command.command("init")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--dataset", "dataset_id", required=True, help="Identifier of the dataset the budget protects.")
@click.option("--rho-total", required=True, help="Total zCDP budget rho (> 0), stored exactly as written.")
@click.option("--json", "as_json", is_flag=True, help="Print the header entry as JSON.")
@handle_errors
def init_cmd(file, dataset_id, rho_total, as_json):
    """Create the ledger FILE (refused if it exists).

    Example: privaudit budget init icu.ledger --dataset icu-2024 --rho-total 2
    """
    from privaudit.privacy.ledger import init_ledger

    head = init_ledger(file, dataset_id, rho_total)
    if as_json:
        echo_json(head)
    else:
        click.echo(f"created ledger {file} for dataset {dataset_id!r} with rho_total = {head['rho_total']}")


@command.command("show")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print only JSON: totals and every entry.")
@handle_errors
def show_cmd(file, as_json):
    """Show the dataset, total, spent and remaining budget and every charge of FILE.

    Example: privaudit budget show icu.ledger --json
    """
    from privaudit.privacy.ledger import ledger_status

    st = ledger_status(file)
    if as_json:
        echo_json(st)
        return
    click.echo(f"dataset   {st['dataset_id']}")
    click.echo(f"rho total {st['rho_total']}")
    click.echo(f"spent     {st['rho_spent']}")
    click.echo(f"remaining {st['rho_remaining']}")
    click.echo(f"entries   {st['n_entries']}")
    for e in st["entries"]:
        click.echo(f"  #{e['seq']:<3} {e['timestamp']}  rho={e['rho']:<12} {e['description']}")
