"""Issue 13 item 5: budget spent leaves a trace; one writer per output; no stale temporaries left forever."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.atomic import atomic_dir
from privaudit.core.outputs import output_lock
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.privacy.ledger import init_ledger, ledger_status
from tests._release_logs import spec_doc

H, S, A = 3, 4, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    mdp = random_tabular_mdp(S, A, H, 0)
    write_logs(simulate(mdp, np.full((S, A), 1.0 / A), 60, np.random.default_rng(0)), d / "logs.parquet")
    (d / "spec.json").write_text(json.dumps(spec_doc(H=H, S=S, A=A, terminals=(), dataset_id="traces")))
    return d


def _release(files, out, *extra):
    return CliRunner().invoke(main, ["release", str(files / "logs.parquet"), "--spec", str(files / "spec.json"),
                                     "--rho", "0.5", "--out", str(out), "--seed", "1", *map(str, extra)])


def _pipeline(files, out, led):
    return CliRunner().invoke(main, ["pipeline", str(files / "logs.parquet"), "--spec", str(files / "spec.json"),
                                     "--rho", "0.5", "--out", str(out), "--audit-trials", "0", "--ledger", str(led),
                                     "--seed", "1"])


def test_ledger_entry_names_the_run_and_its_output(files, tmp_path):
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)
    assert _release(files, tmp_path / "r1", "--ledger", led).exit_code == 0
    assert _release(files, tmp_path / "r2", "--ledger", led).exit_code == 0
    e1, e2 = ledger_status(led)["entries"]
    assert e1["output"] == str((tmp_path / "r1").absolute()) and e2["output"] == str((tmp_path / "r2").absolute())
    assert re.fullmatch(r"[0-9a-f]{16}", e1["run"]) and e1["run"] != e2["run"]


def test_pipeline_interrupted_after_its_release_says_what_it_charged(files, tmp_path, monkeypatch):
    """The issue's case: exit 130 after the release stage; the ledger was charged; the message names it."""
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)

    def interrupt(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(DPAPVI, "fit", interrupt)
    out = tmp_path / "run"
    res = _pipeline(files, out, led)
    assert res.exit_code == 130, res.output
    # two charges before the interrupt: the release and the behaviour-value part (default share 0.1)
    entry, value = ledger_status(led)["entries"]
    assert entry["output"] == value["output"] == str(out.absolute()) and entry["run"] == value["run"]
    assert float(entry["rho"]) == pytest.approx(0.45, rel=1e-9) and float(value["rho"]) == pytest.approx(0.05, rel=1e-9)
    assert "interrupted" in res.output and f"ledger {led} was charged" in res.output
    assert f"entry #1, rho={entry['rho']}, run {entry['run']}, output {out.absolute()}" in res.output
    assert f"entry #2, rho={value['rho']}" in res.output
    # issue 29: what was charged is kept, marked incomplete, and the same command again does not spend it again
    assert json.loads((out / "INCOMPLETE.json").read_text())["charged"] == ["release", "behaviour-value"]
    assert "a retry spends it again" not in res.output and "reuses it without charging" in res.output


def test_ctrl_c_in_a_lazy_import_after_a_charge_keeps_the_paid_parts(files, tmp_path, monkeypatch):
    """Ctrl-C inside a compiled module's import (pybind11 re-raises it as ImportError, e.g. matplotlib's at
    the figures) is the interrupt: exit 130, the charged parts kept; before, a traceback (fresh-user pass)."""
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)

    def interrupt(self, *a, **k):
        raise ImportError("initialization failed") from KeyboardInterrupt()

    monkeypatch.setattr(DPAPVI, "fit", interrupt)
    out = tmp_path / "run"
    res = _pipeline(files, out, led)
    assert res.exit_code == 130, res.output
    assert isinstance(res.exception, SystemExit)
    assert "interrupted" in res.output and "reuses it without charging" in res.output
    assert json.loads((out / "INCOMPLETE.json").read_text())["charged"] == ["release", "behaviour-value"]


def test_ctrl_c_in_a_lazy_import_before_a_charge_writes_nothing(files, tmp_path, monkeypatch):
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)
    monkeypatch.setattr("privaudit.privacy.mechanisms.add_noise",
                        lambda *a, **k: (_ for _ in ()).throw(ImportError("initialization failed")))
    res = _release(files, tmp_path / "r", "--ledger", led)
    assert isinstance(res.exception, ImportError)  # a real ImportError is not an interrupt
    monkeypatch.setattr("privaudit.privacy.mechanisms.add_noise",
                        lambda *a, **k: _raise_import_from_interrupt())
    res = _release(files, tmp_path / "r", "--ledger", led)
    assert res.exit_code == 130 and "interrupted: nothing was written" in res.output
    assert not (tmp_path / "r").exists() and ledger_status(led)["n_entries"] == 0


def _raise_import_from_interrupt():
    raise ImportError("initialization failed") from KeyboardInterrupt()


def test_train_interrupted_after_its_release_names_the_kept_release(files, tmp_path, monkeypatch):
    """Before: "interrupted: nothing was written" and "a retry spends it again", while POLICY.release was kept
    and the same command again is refused (it never replaces a release) (fresh-user pass)."""
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)
    monkeypatch.setattr(DPAPVI, "fit", lambda self, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    out = tmp_path / "pol"
    res = CliRunner().invoke(main, ["train", str(files / "logs.parquet"), "--spec", str(files / "spec.json"),
                                    "--algo", "dp-apvi", "--rho", "0.5", "--out", str(out), "--ledger", str(led)])
    assert res.exit_code == 130, res.output
    release = tmp_path / "pol.release"
    assert not out.exists() and (release / "manifest.json").exists()
    assert ledger_status(led)["n_entries"] == 1
    assert f"interrupted: the policy was not written, but the release {release} was made" in res.output
    assert f"privaudit train --release {release} --spec {files / 'spec.json'} --algo dp-apvi" in res.output
    assert "its output is kept: use it rather than spending again" in res.output
    assert "nothing was written" not in res.output and "a retry spends it again" not in res.output


def test_a_failure_before_any_charge_mentions_no_ledger(files, tmp_path, monkeypatch):
    led = tmp_path / "b.jsonl"
    init_ledger(led, "traces", 2)
    monkeypatch.setattr("privaudit.privacy.mechanisms.add_noise",
                        lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    res = _release(files, tmp_path / "r", "--ledger", led)
    assert res.exit_code == 130 and "was charged" not in res.output
    assert ledger_status(led)["n_entries"] == 0


@pytest.mark.parametrize("cmd", ["release", "pipeline", "train"])
def test_a_second_run_on_the_same_out_is_refused_at_once(files, tmp_path, cmd):
    """Another run holds the output (its lock): refused before any work, exit 2, its output untouched."""
    out = tmp_path / "same"
    args = {"release": ["release", files / "logs.parquet", "--spec", files / "spec.json", "--rho", "1"],
            "pipeline": ["pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", "1",
                         "--audit-trials", "0"],
            "train": ["train", files / "logs.parquet", "--spec", files / "spec.json", "--algo", "apvi"]}[cmd]
    with output_lock(out):  # the first run, still working
        res = CliRunner().invoke(main, [*map(str, args), "--out", str(out)])
        assert res.exit_code == 2 and "another run is writing it now" in res.output, res.output
        assert not out.exists()
    res = CliRunner().invoke(main, [*map(str, args), "--out", str(out)])  # once it is done: accepted
    assert res.exit_code == 0, res.output


def test_a_folder_created_meanwhile_is_never_replaced(tmp_path):
    """The backstop without a lock: the later rename refuses to replace the earlier output."""
    out = tmp_path / "o"
    with pytest.raises(FileExistsError, match="created by another run meanwhile"):
        with atomic_dir(out) as late:
            (late / "x").write_text("late")
            with atomic_dir(out) as early:
                (early / "x").write_text("early")
    assert (out / "x").read_text() == "early"
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


def test_stale_temporaries_of_a_killed_run_are_removed_and_reported(files, tmp_path):
    stale = tmp_path / ".r.a1b2c3d4.tmp"
    stale.mkdir()
    (stale / "visits.parquet").write_text("half written")
    other = tmp_path / ".r.local-log.json.a1b2c3d4.tmp"  # another output's temporary: not ours
    other.write_text("x")
    res = _release(files, tmp_path / "r")
    assert res.exit_code == 0, res.output
    assert not stale.exists() and other.exists()
    assert "removed 1 stale temporary folder(s)" in res.output and str(stale) in res.output
