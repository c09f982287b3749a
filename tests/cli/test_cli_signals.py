"""SIGTERM and Ctrl-C leave nothing half-written and exit 143 / 130."""

import os
import signal
import time

import click
from click.testing import CliRunner

from privaudit.cli import _terminated
from privaudit.cli.common import handle_errors
from privaudit.core.atomic import atomic_dir


def _command(out, how):
    @click.command()
    @handle_errors
    def cmd():
        with atomic_dir(out) as tmp:
            (tmp / "half.parquet").write_bytes(b"partial")
            if how == "term":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
            raise KeyboardInterrupt
    return cmd


def test_sigterm_removes_temporary_output_and_exits_143(tmp_path):
    old = signal.signal(signal.SIGTERM, _terminated)
    try:
        res = CliRunner().invoke(_command(tmp_path / "out", "term"))
    finally:
        signal.signal(signal.SIGTERM, old)
    assert res.exit_code == 143
    assert "terminated" in res.output
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary folder


def test_ctrl_c_removes_temporary_output_and_exits_130(tmp_path):
    res = CliRunner().invoke(_command(tmp_path / "out", "int"))
    assert res.exit_code == 130 and "interrupted" in res.output
    assert list(tmp_path.iterdir()) == []
