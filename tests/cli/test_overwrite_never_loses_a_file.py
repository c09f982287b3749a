"""Issue 29 item 3: an output never replaces an input, and --overwrite replaces only an earlier output of its kind.

Before: `audit --plot mylogs.parquet --overwrite` replaced the user's logs with a PNG, `--out spec.json
--overwrite` the spec it had just read; `pipeline --out run1 --overwrite` deleted a ledger kept in run1;
`explore --out FILE/x` failed with a raw `Errno 17` after the whole exploration. One check
(`privaudit.core.outputs.check_outputs`) now runs before any work in every command that writes
(validate and evaluate write nothing; simulate's refusal of someone's logs is in test_evaluate_cli.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.mdp.io import save_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.online.manifest import EXPLORE_KIND
from privaudit.pipeline.report import SUMMARY_KIND
from privaudit.privacy.ledger import init_ledger, ledger_status
from tests._release_logs import random_log, write_spec

H, S, A = 3, 4, 2


@pytest.fixture
def files(tmp_path):
    random_log(np.random.default_rng(1), 30, H=H, S=S, A=A).write_parquet(tmp_path / "logs.parquet")
    write_spec(tmp_path, H=H, S=S, A=A, terminals=(), dataset_id="icu")
    return tmp_path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _refused(res, needle):
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and line.startswith("error: ") and needle in line, res.output


def _audit(files, *extra):
    return _run("audit", "--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "1", "--trials", "100", *extra)


def _bytes(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_audit_never_writes_over_the_logs_or_the_spec_it_reads(files):
    before = _bytes(files)
    res = _audit(files, "--out", files / "rep.json", "--plot", files / "logs.parquet", "--overwrite")
    _refused(res, f"`--plot` {files / 'logs.parquet'} is the file `--logs` this command reads: an output never "
                  "replaces an input. Choose another `--plot`.")
    res = _audit(files, "--out", files / "spec.json", "--overwrite")
    _refused(res, f"`--out` {files / 'spec.json'} is the file `--spec` this command reads")
    (files / "notes.json").write_text('{"mine": 1}\n')  # a JSON file that is no audit report
    res = _audit(files, "--out", files / "notes.json", "--overwrite")
    _refused(res, "`--overwrite` replaces only an earlier audit report")
    assert _bytes(files) == {**before, "notes.json": b'{"mine": 1}\n'}


def test_pipeline_overwrite_never_deletes_a_ledger_or_spec_kept_in_the_output(files, tmp_path):
    run1 = tmp_path / "run1"
    run1.mkdir()
    (run1 / "summary.json").write_text(json.dumps({"kind": SUMMARY_KIND}))  # an earlier pipeline output
    init_ledger(run1 / "budget.jsonl", "icu", 2)
    res = _run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", "1", "--audit-trials", "0",
               "--ledger", run1 / "budget.jsonl", "--out", run1, "--overwrite")
    _refused(res, f"`--out` {run1} holds `--ledger` {run1 / 'budget.jsonl'}, which this command reads")
    assert ledger_status(run1 / "budget.jsonl")["n_entries"] == 0  # kept, nothing charged
    (run1 / "spec.json").write_text((files / "spec.json").read_text())
    res = _run("pipeline", files / "logs.parquet", "--spec", run1 / "spec.json", "--rho", "1", "--audit-trials", "0",
               "--out", run1, "--overwrite")
    _refused(res, "holds `--spec`")
    assert (run1 / "spec.json").is_file()


def test_explore_checks_its_out_before_any_user_and_keeps_the_mdp_it_reads(files, tmp_path, monkeypatch):
    args = ["explore", "--algo", "pucb", "--episodes", "3", "--epsilon", "1"]
    res = _run(*args, "--env", "riverswim", "--out", files / "logs.parquet" / "x")
    _refused(res, f"`--out` {files / 'logs.parquet' / 'x'}: {files / 'logs.parquet'} is not a folder")
    prev = tmp_path / "prev"
    prev.mkdir()
    (prev / "manifest.json").write_text(json.dumps({"kind": EXPLORE_KIND}))  # an earlier explore output
    save_mdp(random_tabular_mdp(S, A, H, 0), prev / "env.npz")
    res = _run(*args, "--env", prev / "env.npz", "--out", prev, "--overwrite")
    _refused(res, f"`--out` {prev} holds `--env` {prev / 'env.npz'}, which this command reads")
    assert (prev / "env.npz").is_file()


@pytest.mark.parametrize("command", ["release", "train"])
def test_release_and_train_name_the_input_an_out_would_replace(files, command):
    """They never replace anything (no --overwrite); an --out that is an input is now named as one."""
    args = {"release": ["release", files / "logs.parquet", "--spec", files / "spec.json", "--rho", "1"],
            "train": ["train", files / "logs.parquet", "--spec", files / "spec.json", "--algo", "apvi"]}[command]
    before = _bytes(files)
    _refused(_run(*args, "--out", files / "spec.json"), f"`--out` {files / 'spec.json'} is the file `--spec` this "
                                                        "command reads")
    _refused(_run(*args, "--out", files / "logs.parquet"), "is the file `LOGS` this command reads")
    assert _bytes(files) == before


def test_budget_init_never_replaces_a_file_beside_it(tmp_path):
    (tmp_path / "notes.head").write_text("my notes\n")  # where `budget init notes` writes its head file
    res = _run("budget", "init", tmp_path / "notes", "--dataset", "icu", "--rho-total", "1")
    _refused(res, f"{tmp_path / 'notes.head'} exists, the head file of an earlier ledger")
    assert (tmp_path / "notes.head").read_text() == "my notes\n" and not (tmp_path / "notes").exists()
