"""Inputs that exist but cannot be read (permissions): one line, exit 1, nothing written (fresh-user pass).

Before: a single unreadable LOGS was refused by click with a three-line usage error, exit 2 (README: an
input that exists but is unreadable is exit 1); an unreadable part of a folder was "not a readable
Parquet file ([Errno 13] ...). Write the logs with a Parquet writer", and a folder that cannot be
listed "holds no *.parquet file". Tests run as root, who may read anything, so ``os.access`` is made
to deny the chosen paths, as it does for a user without the permission.
"""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from tests.conftest import tiny_spec_doc

ADVICE = "(permission denied). Let the user running privaudit read it (chmod, or run as its owner)."


@pytest.fixture
def files(tmp_path, monkeypatch):
    logs = pl.DataFrame({"episode_id": [0, 0], "step": [0, 1], "state": [0, 1], "action": [0, 1],
                         "reward": [0.0, 1.0], "next_state": [1, 3]})
    logs.write_parquet(tmp_path / "one.parquet")
    (tmp_path / "parts").mkdir()
    logs.write_parquet(tmp_path / "parts" / "part-0.parquet")
    logs.with_columns(pl.col("episode_id") + 1).write_parquet(tmp_path / "parts" / "part-1.parquet")
    (tmp_path / "closed").mkdir()
    logs.write_parquet(tmp_path / "closed" / "part-0.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(tiny_spec_doc()))
    denied = {str(tmp_path / "one.parquet"), str(tmp_path / "parts" / "part-1.parquet"), str(tmp_path / "closed")}
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: str(p) not in denied and real(p, mode, *a, **k))
    return tmp_path


@pytest.mark.parametrize("logs,where,what", [
    ("one.parquet", "one.parquet", "cannot read the file"),
    ("parts", "parts/part-1.parquet", "cannot read the file"),
    ("closed", "closed", "cannot list the folder"),
])
@pytest.mark.parametrize("cmd", [["validate"], ["release", "--rho", "1", "--out", "OUT"],
                                 ["pipeline", "--rho", "1", "--audit-trials", "0", "--out", "OUT"]])
def test_unreadable_logs_one_line_exit_1(files, logs, where, what, cmd):
    args = [cmd[0], str(files / logs), "--spec", str(files / "spec.json")] + [
        str(files / "out") if a == "OUT" else a for a in cmd[1:]]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-1] == f"error: {files / where}: {what} {ADVICE}"
    assert not (files / "out").exists()
    assert sorted(p.name for p in files.iterdir()) == ["closed", "one.parquet", "parts", "spec.json"]


@pytest.mark.parametrize("cmd", [["validate"], ["release", "--rho", "1", "--out", "OUT"],
                                 ["train", "--algo", "dp-apvi", "--rho", "1", "--out", "OUT"],
                                 # fresh-user pass: without a budget (none is needed on a release) it said
                                 # "--algo dp-apvi releases the counts first: give a budget"
                                 ["train", "--algo", "dp-apvi", "--out", "OUT"]])
def test_a_privaudit_output_given_as_logs_is_named_not_read(tmp_path, cmd):
    """Session 11 (fresh user): `train REL --algo dp-apvi` (for `--release REL`) read the release's Parquet files
    as log parts and said "column 'action' is missing, but rewards.parquet has it"; now one line names the
    folder as a release and says what reads it, exit 1, nothing written."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(tiny_spec_doc()))
    logs = tmp_path / "logs.parquet"
    pl.DataFrame({"episode_id": [0, 0], "step": [0, 1], "state": [0, 1], "action": [0, 1],
                  "reward": [0.0, 1.0], "next_state": [1, 3]}).write_parquet(logs)
    rel = tmp_path / "rel"
    assert CliRunner().invoke(main, ["release", str(logs), "--spec", str(spec), "--rho", "1", "--out",
                                     str(rel)]).exit_code == 0
    args = [cmd[0], str(rel), "--spec", str(spec)] + [str(tmp_path / "out") if a == "OUT" else a for a in cmd[1:]]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {rel}: a privaudit output (manifest.json of kind 'privaudit-release')")
    assert "`train --release DIR`" in last and not (tmp_path / "out").exists()
