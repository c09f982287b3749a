"""Issue 13 item 4: an unwritable output location is refused before any work, exit 2, one line.

The tests run as any user (root ignores permission bits), so "unwritable" is
made two ways: an output whose parent is a file (not a folder), and a folder
where creating a file fails (the temporary-file probe raises EACCES / EROFS,
as on a read-only mount), and a disk with no free space.
"""

from __future__ import annotations

import errno
import json
from collections import namedtuple

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core import outputs
from privaudit.mdp.io import save_mdp
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.mdp.random_tabular import random_tabular_mdp
from tests._release_logs import spec_doc
from tests._spy import patch_everywhere, watch_reads

H, S, A = 3, 4, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("out")
    logs = d / "logs"
    logs.mkdir()
    mdp = random_tabular_mdp(S, A, H, 0)
    write_logs(simulate(mdp, np.full((S, A), 1.0 / A), 40, np.random.default_rng(0)), logs / "part-0.parquet")
    (d / "spec.json").write_text(json.dumps(spec_doc(H=H, S=S, A=A, terminals=())))
    (d / "a_file").write_text("not a folder\n")
    return d


def _commands(d, out):
    logs, spec = str(d / "logs"), str(d / "spec.json")
    return {
        "release": ["release", logs, "--spec", spec, "--rho", "1", "--out", out],
        "pipeline": ["pipeline", logs, "--spec", spec, "--rho", "1", "--out", out, "--audit-trials", "0"],
        "train": ["train", logs, "--spec", spec, "--algo", "apvi", "--out", out],
        "simulate": ["simulate", "random-tabular", "--horizon", "3", "--states", "4", "--actions", "2",
                     "--instance-seed", "1", "--episodes", "10", "--out", out, "--spec-out", str(d / "s_new.json")],
        "audit": ["audit", "--mechanism", "release", "--logs", logs, "--spec", spec, "--claim-rho", "1",
                  "--trials", "1000", "--out", out],
        "budget init": ["budget", "init", out, "--dataset", "x", "--rho-total", "1"],
    }


def _check_refused(res, needle):
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("cmd", ["release", "pipeline", "train", "simulate", "audit", "budget init"])
def test_output_under_a_file_is_refused_before_reading_the_logs(files, cmd):
    out = str(files / "a_file" / "result")
    with watch_reads(files / "logs") as reads:
        res = CliRunner().invoke(main, _commands(files, out)[cmd])
    _check_refused(res, "is not a folder")
    assert reads == []


@pytest.mark.parametrize("cmd", ["release", "pipeline", "train", "simulate", "audit", "budget init"])
def test_read_only_location_is_refused_before_any_work(files, tmp_path, cmd, monkeypatch):
    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)
    out = str(tmp_path / "ro" / "result")
    with watch_reads(files / "logs") as reads:
        res = CliRunner().invoke(main, _commands(files, out)[cmd])
    _check_refused(res, "Read-only file system")
    assert reads == [] and not (tmp_path / "ro").exists()


def test_full_disk_is_refused_up_front(files, tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda p: usage(10, 10, 0))
    with watch_reads(files / "logs") as reads:
        res = CliRunner().invoke(main, _commands(files, str(tmp_path / "r"))["release"])
    _check_refused(res, "no free space")
    assert reads == []


def test_a_write_failing_mid_run_is_one_line_exit_2(files, tmp_path, monkeypatch):
    """The disk filling up after the check: still one line and the usage exit code, no traceback."""
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "r"))

    patch_everywhere(monkeypatch, write_logs, full)  # whichever name the CLI calls it by
    res = CliRunner().invoke(main, _commands(files, str(tmp_path / "r.parquet"))["simulate"])
    _check_refused(res, "No space left on device")


@pytest.mark.parametrize("overwrite", [False, True])
def test_simulate_failing_on_its_last_output_leaves_none_of_them(files, tmp_path, monkeypatch, overwrite):
    """simulate's logs, spec and MDP belong together: before, a failure writing the MDP (disk full) left the
    logs and the spec behind (with --overwrite: new logs beside the old MDP); now none is written, and
    files replaced with --overwrite keep their old bytes (fresh-user pass)."""
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "m.npz"))

    outs = {"--out": tmp_path / "x.parquet", "--spec-out": tmp_path / "s.json", "--mdp-out": tmp_path / "m.npz"}
    args = _commands(files, str(outs["--out"]))["simulate"][:-2] + [
        "--spec-out", str(outs["--spec-out"]), "--mdp-out", str(outs["--mdp-out"])]
    if overwrite:  # an earlier simulate's outputs (--overwrite replaces nothing else)
        assert CliRunner().invoke(main, args).exit_code == 0
        old = {k: p.read_bytes() for k, p in outs.items()}
    patch_everywhere(monkeypatch, save_mdp, full)
    res = CliRunner().invoke(main, args + (["--overwrite"] if overwrite else []))
    _check_refused(res, "No space left on device")
    if overwrite:
        assert all(p.read_bytes() == old[k] for k, p in outs.items())
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in outs.values())
    else:
        assert list(tmp_path.iterdir()) == []
