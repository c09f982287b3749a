"""The ``privaudit`` command line: a click group over the Python API.

Each command lives in its own module ``privaudit/cli/<name>.py`` exposing a
click command named ``command``; this group loads them lazily so that one
command's import cost is not paid by another.
"""

from __future__ import annotations

import importlib
import importlib.util
import signal

import click

from privaudit import __version__
from privaudit.cli.common import Terminated

#: command name -> module under privaudit.cli (ordered as in --help)
COMMANDS = {
    "validate": "validate",
    "simulate": "simulate",
    "release": "release",
    "budget": "budget",
    "train": "train",
    "evaluate": "evaluate",
    "audit": "audit",
    "pipeline": "pipeline",
    "explore": "explore",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx):
        return [name for name, mod in COMMANDS.items()
                if importlib.util.find_spec(f"privaudit.cli.{mod}") is not None]

    def get_command(self, ctx, name):
        mod = COMMANDS.get(name)
        if mod is None or importlib.util.find_spec(f"privaudit.cli.{mod}") is None:
            return None
        return importlib.import_module(f"privaudit.cli.{mod}").command

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            rows.append((name, cmd.get_short_help_str(limit=90)))
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
