"""The ``privaudit`` command line: a click group over the Python API.

Each command lives in its own module ``privaudit/cli/<name>.py`` exposing a
click command named ``command``; this group loads them lazily so that one
command's import cost is not paid by another.
"""

from __future__ import annotations

import importlib
import signal
import sys

import click

from privaudit import __version__
from privaudit.core.errors import Terminated, interrupted_import

#: command name -> its short help; the command lives in ``privaudit/cli/<name>.py``. Ordered as in
#: --help; the short help is repeated here so that ``privaudit --help`` imports no command module (a
#: test keeps the two equal).
COMMANDS = {
    "validate": "Check Parquet trajectory logs against a domain spec.",
    "simulate": "Simulate logs (Parquet) and their spec from a known MDP.",
    "release": "Release DP counts of tabular logs (Parquet + manifest).",
    "budget": "Create, show or charge a privacy-budget ledger (append-only, exact amounts).",
    "train": "Train an offline policy (DP-APVI, APVI, VE, ...) from logs or a release.",
    "evaluate": "Value of a policy: exact on a known MDP, or DP from logs with a lower bound.",
    "audit": "Audit a DP claim empirically: epsilon lower bound from neighbouring runs.",
    "pipeline": "The main job: validate, release, train, evaluate, audit, report.",
    "explore": "Online exploration under joint DP (PUCB, UCB-VI, LSVI-UCB, Luyo, Ngo, LSVI-UCB++, DP-LSVI-UCB++): regret on a simulated user stream.",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def invoke(self, ctx):
        # Ctrl-C while a subcommand is being imported (before its handle_errors runs) would otherwise be
        # click's "Aborted!" with exit 1; the help promises 130, as inside a command.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(130)
        except ImportError as e:  # Ctrl-C inside a compiled module's initialisation (core.errors.interrupted_import)
            if not interrupted_import(e):
                raise
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(130)
        except Terminated:
            click.echo("terminated: nothing was written", err=True)
            sys.exit(143)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"privaudit.cli.{name}").command

    def format_commands(self, ctx, formatter):
        rows = list(COMMANDS.items())
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privaudit")
def main():
    """privaudit: differentially private offline RL on treatment logs.

    Validate Parquet logs against a public domain spec, release DP
    statistics, train policies (DP-APVI, DP-VAPVI and baselines), evaluate
    them on a known MDP, and audit DP claims empirically.

    Exit codes: 0 ok; 1 invalid data or a finding; 2 usage or spec error;
    3 budget exceeded or a DP violation found by an audit; 130 interrupted
    (Ctrl-C) and 143 terminated (SIGTERM), with nothing half-written.
    """
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum, frame):
    """SIGTERM (``timeout``, a job scheduler) unwinds like Ctrl-C, so every
    temporary output is removed by its context manager before the exit."""
    raise Terminated()
