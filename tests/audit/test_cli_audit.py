"""``privaudit audit`` end to end: exit codes, report schema, plot, user mechanisms."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.audit import load_report, make_pair
from privaudit.cli import main
from tests.audit.helpers import tiny_logs, tiny_spec

USER_MECHANISMS = '''
import numpy as np

def _visits(logs):
    v = np.zeros((3, 5, 2))
    np.add.at(v, (logs["step"].to_numpy(), logs["state"].to_numpy(), logs["action"].to_numpy()), 1)
    return v

def laplace_release(logs, rng, n_runs=1):          # correct: L1 = 2H = 6, eps = 1
    return np.rint(_visits(logs) + rng.laplace(0, 6.0, (n_runs, 3, 5, 2)))

def leaky_release(logs, rng):                       # unbatched, noise 10x too small
    return np.rint(_visits(logs) + rng.laplace(0, 0.6, (3, 5, 2)))

def canary_score(outputs):                          # fixed user attack: count in state 4
    return outputs[:, :, 4, :].sum(axis=(1, 2))
'''


@pytest.fixture
def files(tmp_path):
    spec = tiny_spec()
    logs = tiny_logs()
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    logs.write_parquet(tmp_path / "logs.parquet")
    p = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    p.d.write_parquet(tmp_path / "d.parquet")
    p.d_prime.write_parquet(tmp_path / "d2.parquet")
    (tmp_path / "mine.py").write_text(USER_MECHANISMS)
    return tmp_path


def _run(args):
    return CliRunner().invoke(main, ["audit", *map(str, args)])


def test_release_audit_writes_a_valid_report_and_plot(files):
    out, png = files / "rep.json", files / "rep.png"
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "0.5", "--trials", "5000", "--out", out, "--plot", png, "--seed", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = load_report(out)
    assert doc["verdict"] == "no violation found" and doc["claim"]["kind"] == "gaussian"
    assert doc["method"]["valid_for_claim"] == ["generic", "gaussian"]
    assert doc["resolution_limit"]["epsilon"] > 0 and doc["chosen_event"]["counts"]["positives_evaluated"] == 3500
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(res.stdout[res.stdout.index("{"):])["verdict"] == doc["verdict"]


def test_release_run_above_its_claim_exits_3(files):
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "0.5", "--mechanism-rho", "4", "--trials", "10000", "--out", files / "r.json",
                "--seed", "2"])
    assert res.exit_code == 3, res.output
    assert load_report(files / "r.json")["verdict"] == "violation"


def test_user_mechanisms_explicit_pair_and_user_score(files):
    common = ["--pair", files / "d.parquet", files / "d2.parquet", "--spec", files / "spec.json",
              "--claim-epsilon", "1", "--delta", "0", "--seed", "3"]
    ok = _run(["--mechanism", f"{files / 'mine.py'}:laplace_release", *common, "--trials", "10000",
               "--score", f"{files / 'mine.py'}:canary_score", "--out", files / "ok.json"])
    assert ok.exit_code == 0, ok.output
    doc = load_report(files / "ok.json")
    assert "user:canary_score" in doc["candidates"] and doc["neighbouring_pair"]["kind"] == "explicit"
    assert doc["method"]["valid_for_claim"] == ["generic"] and doc["method"]["batched"]
    bad = _run(["--mechanism", f"{files / 'mine.py'}:leaky_release", *common, "--trials", "400",
                "--jobs", "1", "--out", files / "bad.json"])
    assert bad.exit_code == 3, bad.output
    assert not load_report(files / "bad.json")["method"]["batched"]


@pytest.mark.parametrize("extra, match", [
    (["--claim-rho", "1", "--claim-epsilon", "1", "--delta", "1e-5"], "exactly one claim"),
    (["--claim-epsilon", "1"], "--delta"),
    (["--claim-rho", "-1"], "claim-rho"),
    (["--claim-rho", "1", "--mechanism", "dp-vapvi"], "features"),
    (["--claim-rho", "1", "--mechanism", "nofile.py:f"], "no such file"),
])
def test_usage_errors_exit_2_and_write_nothing(files, extra, match):
    args = ["--logs", files / "logs.parquet", "--spec", files / "spec.json", "--trials", "100",
            "--out", files / "never.json"]
    if "--mechanism" not in extra:
        args += ["--mechanism", "release"]
    res = _run(args + extra)
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output
    assert not (files / "never.json").exists()


def test_pair_that_is_not_neighbours_is_refused(files):
    res = _run(["--mechanism", "release", "--pair", files / "d.parquet", files / "logs.parquet", "--spec",
                files / "spec.json", "--claim-rho", "1", "--trials", "100", "--out", files / "x.json"])
    # d.parquet = logs, so this pair is identical: allowed (a null audit), and gives 0
    assert res.exit_code == 0, res.output
    assert load_report(files / "x.json")["epsilon_lower_bound"] == 0.0
    tiny_logs().head(30).write_parquet(files / "short.parquet")
    res = _run(["--mechanism", "release", "--pair", files / "d.parquet", files / "short.parquet", "--spec",
                files / "spec.json", "--claim-rho", "1", "--trials", "100", "--out", files / "y.json"])
    assert res.exit_code == 2 and "exactly one privacy unit" in res.output
