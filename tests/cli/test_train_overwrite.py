"""`train --overwrite` (fresh-user pass): the other commands that write an output folder had it, train did not.

Its semantics are theirs: an existing --out is refused without it; with it, --out is replaced only when it
holds an earlier policy (never someone's folder), the new policy only once it is complete (a failed run
leaves the earlier one as it was), and a release made from LOGS (OUT.release) is never replaced (it spent
budget; `release` never replaces one either).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.spec import load_spec, write_spec
from privaudit.learners.policy import load_policy
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.privacy.ledger import init_ledger, ledger_status

MDP = random_tabular_mdp(4, 2, 3, instance_seed=8)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("overwrite")
    doc = random_tabular_spec_doc(MDP)
    (d / "spec.json").write_text(json.dumps(doc))
    df = simulate(MDP, uniform_policy(MDP), 400, np.random.default_rng(0))
    write_logs(df, d / "logs.parquet")
    X = np.eye(4)
    write_logs(df.with_columns(pl.Series("features", X[df["state"].to_numpy()].tolist())), d / "rows.parquet")
    doc["features"] = {"map": "column-x-action", "dim": 8, "norm": "clip"}
    write_spec(doc, d / "rows.json")
    return d


def _train(d, out, *extra, algo="apvi", logs="logs.parquet", spec="spec.json"):
    return run("train", d / logs, "--spec", d / spec, "--algo", algo, "--out", out, *extra)


def test_existing_out_is_refused_without_overwrite_and_replaced_with_it(world, tmp_path):
    out = tmp_path / "pol"
    assert _train(world, out, "--per-step").exit_code == 0
    res = _train(world, out, "--stationary")
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"error: `--out` {out} already exists; choose another path, remove it, or pass `--overwrite`, which "
        "replaces only an earlier policy (a folder whose policy.json has kind 'privaudit-policy').")
    assert load_policy(out).stationary is False
    res = _train(world, out, "--stationary", "--overwrite")
    assert res.exit_code == 0, res.output
    assert load_policy(out).stationary is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pol"]  # no temporary left


def test_overwrite_never_deletes_a_folder_that_is_no_policy(world, tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "mine.csv").write_text("a,b\n")
    res = _train(world, out, "--overwrite")
    assert res.exit_code == 2, res.output
    assert "`--overwrite` replaces only an earlier policy" in res.output and "Traceback" not in res.output
    assert [p.name for p in out.iterdir()] == ["mine.csv"]


def test_a_failed_run_leaves_the_earlier_policy_as_it_was(world, tmp_path):
    """A run stopped by its ledger (exit 3) after --overwrite was accepted: the earlier policy is untouched."""
    out = tmp_path / "pol"
    assert _train(world, out, "--per-step").exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    led = tmp_path / "budget.jsonl"
    init_ledger(led, load_spec(world / "spec.json").dataset_id, 0.5)
    res = _train(world, out, "--rho", "1", "--ledger", led, "--overwrite", algo="dp-apvi")
    assert res.exit_code == 3, res.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert ledger_status(led)["n_entries"] == 0 and not (tmp_path / "pol.release").exists()


def test_overwrite_never_replaces_a_release_made_from_logs(world, tmp_path):
    out = tmp_path / "pol"
    assert _train(world, out, "--rho", "1", algo="dp-apvi").exit_code == 0
    release = (tmp_path / "pol.release" / "manifest.json").read_bytes()
    res = _train(world, out, "--rho", "1", "--overwrite", algo="dp-apvi")
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'pol.release'} already exists (the release an earlier run made for this --out). A "
        "release spent budget and is never replaced, not even with --overwrite (it replaces the policy only): "
        f"train on it with --release {tmp_path / 'pol.release'}, move it away, or choose another --out.")
    assert (tmp_path / "pol.release" / "manifest.json").read_bytes() == release
    res = run("train", "--release", tmp_path / "pol.release", "--algo", "dp-apvi", "--out", out, "--overwrite")
    assert res.exit_code == 0, res.output


def test_linear_overwrite_replaces_the_policy_and_its_private_log_together(world, tmp_path):
    out, log = tmp_path / "pol", tmp_path / "pol.local-log.json"
    assert _train(world, out, algo="pevi", logs="rows.parquet", spec="rows.json").exit_code == 0
    first = json.loads(log.read_text())["created"]
    res = _train(world, out, "--overwrite", algo="pevi", logs="rows.parquet", spec="rows.json")
    assert res.exit_code == 0, res.output
    assert json.loads(log.read_text())["bounding"] and load_policy(out).algorithm == "pevi"
    assert first <= json.loads(log.read_text())["created"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pol", "pol.local-log.json"]
    log.unlink()
    log.write_text('{"mine": 1}\n')  # not a private log privaudit wrote: never replaced
    res = _train(world, out, "--overwrite", algo="pevi", logs="rows.parquet", spec="rows.json")
    assert res.exit_code == 2 and "replaces only the private bounding log of an earlier policy" in res.output
    assert log.read_text() == '{"mine": 1}\n'
