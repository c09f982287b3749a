"""Tester findings: the MDP instance seed travels in the spec; dp-vapvi CLI refusals, local log,
column-x-action in the pipeline, placeholder tables refused by evaluate."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import UsageError
from privaudit.learners.policy import load_policy
from privaudit.mdp.evaluation import resolve_mdp
from privaudit.mdp.io import save_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.mdp.synthetic_linear import synthetic_linear_mdp
from privaudit.mdp.tabular import evaluate_policy, value_iteration
from privaudit.pipeline import run_pipeline
from privaudit.core.spec import load_spec, write_spec
from tests._spy import watch_reads

MDP = random_tabular_mdp(4, 2, 3, 0)
S, A, H = 4, 2, 3


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def lin(tmp_path_factory):
    """Synthetic-linear logs of instance 3 and instance 0 (same simulation seed)."""
    d = tmp_path_factory.mktemp("lin")
    for i in (0, 3):
        r = run("simulate", "synthetic-linear", "--episodes", 60, "--seed", 1, "--instance-seed", i,
                "--horizon", 5, "--out", d / f"l{i}.parquet", "--spec-out", d / f"s{i}.json")
        assert r.exit_code == 0, r.output
    r = run("train", d / "l3.parquet", "--spec", d / "s3.json", "--algo", "vapvi", "--out", d / "pol")
    assert r.exit_code == 0, r.output
    return d


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """Random-tabular logs with a per-row `features` column; units of 2 episodes (k = 1 drops one)."""
    d = tmp_path_factory.mktemp("rows")
    df = simulate(MDP, uniform_policy(MDP), 400, np.random.default_rng(3))
    X = np.eye(S)
    df = df.with_columns(pl.Series("features", X[df["state"].to_numpy()].tolist()))
    write_logs(df, d / "logs.parquet")
    write_logs(df.with_columns(pl.col("unit_id") // 2), d / "pairs.parquet")  # unit_id = 2 episodes
    np.save(d / "x.npy", X)
    save_mdp(MDP, d / "mdp.npz")
    doc = random_tabular_spec_doc(MDP)
    doc["features"] = {"map": "column-x-action", "dim": S * A, "norm": "clip", "state_table": "x.npy"}
    write_spec(doc, d / "rows.json")
    del doc["features"]["state_table"]
    write_spec(doc, d / "rows_notable.json")
    return d


# ------------------------------------------------------------------ 1. instance seed in the spec

def test_simulate_records_instance_seed(lin):
    s0, s3 = load_spec(lin / "s0.json"), load_spec(lin / "s3.json")
    assert s3.raw["mdp"] == {"name": "synthetic-linear", "instance_seed": 3}
    assert "instance 3" in s3.raw["description"]
    assert s0.hash() != s3.hash()


def test_evaluate_takes_instance_from_spec_or_option_and_refuses_guessing(lin):
    pol = load_policy(lin / "pol")
    want = evaluate_policy(synthetic_linear_mdp(3, 5), pol.table)
    assert want != pytest.approx(evaluate_policy(synthetic_linear_mdp(0, 5), pol.table))  # instances differ
    for extra in (["--spec", lin / "s3.json"], ["--instance-seed", 3], ["--spec", lin / "s3.json", "--instance-seed", 3]):
        r = run("evaluate", lin / "pol", "--mdp", "synthetic-linear", "--horizon", 5, "--json", *extra)
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["value"] == pytest.approx(want, abs=1e-12)
    r = run("evaluate", lin / "pol", "--mdp", "synthetic-linear", "--horizon", 5)
    assert r.exit_code == 2 and "instance is unknown" in r.output
    r = run("evaluate", lin / "pol", "--mdp", "synthetic-linear", "--horizon", 5, "--spec", lin / "s3.json",
            "--instance-seed", 0)
    assert r.exit_code == 2 and "contradicts" in r.output
    r = run("evaluate", lin / "pol", "--mdp", "synthetic-linear", "--spec", lin / "s0.json")
    assert r.exit_code == 2 and "another spec" in r.output  # policy trained under instance 3's spec: a spec error


def test_random_tabular_built_from_its_spec(tmp_path):
    r = run("simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 4, "--instance-seed", 7,
            "--episodes", 5, "--seed", 0, "--out", tmp_path / "l.parquet", "--spec-out", tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    m = resolve_mdp("random-tabular", spec=load_spec(tmp_path / "s.json"))
    assert np.array_equal(m.P, random_tabular_mdp(3, 2, 4, 7).P)
    with pytest.raises(UsageError, match="contradicts"):
        resolve_mdp("random-tabular", instance_seed=8, spec=load_spec(tmp_path / "s.json"))
    with pytest.raises(UsageError, match="declares logs simulated from the random-tabular"):
        resolve_mdp("synthetic-linear", spec=load_spec(tmp_path / "s.json"))


def test_negative_instance_seed_exit_2(lin, tmp_path):
    r = run("simulate", "synthetic-linear", "--episodes", 5, "--instance-seed", -1,
            "--out", tmp_path / "x.parquet", "--spec-out", tmp_path / "x.json")
    assert r.exit_code == 2 and not (tmp_path / "x.parquet").exists()
    r = run("evaluate", lin / "pol", "--mdp", "synthetic-linear", "--instance-seed", -1)
    assert r.exit_code == 2 and "Traceback" not in r.output
    with pytest.raises(UsageError, match="instance_seed"):
        synthetic_linear_mdp(-1)


def test_pipeline_instance_seed(lin, tmp_path):
    s = run_pipeline(lin / "l3.parquet", lin / "s3.json", rho=1.0, out=tmp_path / "run", mdp="synthetic-linear",
                     audit_trials=0, seed=5)
    assert s["evaluation"]["optimal_value"] == pytest.approx(value_iteration(synthetic_linear_mdp(3, 5))[2])
    with pytest.raises(UsageError, match="contradicts"):
        run_pipeline(lin / "l3.parquet", lin / "s3.json", rho=1.0, out=tmp_path / "run2", mdp="synthetic-linear",
                     instance_seed=0, audit_trials=0, seed=5)
    assert not (tmp_path / "run2").exists()
    r = run("pipeline", lin / "l0.parquet", "--spec", lin / "s0.json", "--rho", 1, "--mdp", "synthetic-linear",
            "--instance-seed", 0, "--audit-trials", 0, "--seed", 5, "--out", tmp_path / "run3", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["evaluation"]["optimal_value"] == pytest.approx(
        value_iteration(synthetic_linear_mdp(0, 5))[2])


# ------------------------------------------------------------------ 3, 4. column-x-action

def test_pipeline_runs_column_x_action(rows, tmp_path):
    s = run_pipeline(rows / "logs.parquet", rows / "rows.json", rho=2.0, out=tmp_path / "t", mdp=rows / "mdp.npz",
                     audit_trials=0, seed=1)
    vals = {p["name"]: p["value"] for p in s["policies"]}
    pol = load_policy(tmp_path / "t" / "policies" / "dp-vapvi")
    assert pol.parameters["table"] == "state_table"
    assert vals["dp-vapvi"] == pytest.approx(evaluate_policy(MDP, pol.table), abs=1e-12)
    s = run_pipeline(rows / "logs.parquet", rows / "rows_notable.json", rho=2.0, out=tmp_path / "nt",
                     mdp=rows / "mdp.npz", audit_trials=0, seed=1)
    vals = {p["name"]: p["value"] for p in s["policies"]}
    assert vals["dp-vapvi"] is None and vals["dp-apvi"] is not None  # placeholder table: not scored


def test_evaluate_refuses_placeholder_table(rows, tmp_path):
    r = run("train", rows / "logs.parquet", "--spec", rows / "rows_notable.json", "--algo", "dp-vapvi", "--rho", 1,
            "--seed", 0, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    assert load_policy(tmp_path / "p").parameters["table"] == "placeholder"
    r = run("evaluate", tmp_path / "p", "--mdp", rows / "mdp.npz")
    assert r.exit_code == 2 and "placeholder" in r.output and "state_table" in r.output


# ------------------------------------------------------------------ 5. train --algo dp-vapvi gaps

@pytest.mark.parametrize("extra, msg", [
    (["--rho", 1, "--stationary"], "--stationary does not apply"),
    (["--rho", 1, "--noise", "exact"], "--noise does not apply"),
    (["--mechanism", "laplace", "--epsilon", 5], "Gaussian / zCDP only"),
])
def test_dp_vapvi_refuses_tabular_options(rows, tmp_path, extra, msg):
    r = run("train", rows / "logs.parquet", "--spec", rows / "rows.json", "--algo", "dp-vapvi", *extra,
            "--out", tmp_path / "p")
    assert r.exit_code == 2 and msg in r.output, r.output
    assert not (tmp_path / "p").exists()


def test_dp_vapvi_local_log_path_taken_by_a_folder_refused_before_charging(rows, tmp_path):
    """Before: with a folder at POLICY.local-log.json, dp-vapvi read the logs, fitted, charged the ledger
    (rho 1) and ended with exit 2 "...: Is a directory; nothing was written" (fresh-user pass)."""
    led = tmp_path / "budget.jsonl"
    assert run("budget", "init", led, "--dataset", load_spec(rows / "rows.json").dataset_id,
               "--rho-total", 5).exit_code == 0
    before = led.read_bytes()
    (tmp_path / "p.local-log.json").mkdir()
    r = run("train", rows / "logs.parquet", "--spec", rows / "rows.json", "--algo", "dp-vapvi", "--rho", 1,
            "--ledger", led, "--out", tmp_path / "p")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'p.local-log.json'} (where the policy's private bounding log goes) is not a file; "
        "remove it or choose another `--out`.")
    assert led.read_bytes() == before and not (tmp_path / "p").exists()


@pytest.mark.parametrize("algo,budget", [("dp-vapvi", ["--rho", "1"]), ("pevi", [])])
def test_an_earlier_policys_local_log_is_never_overwritten(rows, tmp_path, algo, budget):
    """Before: with POLICY.local-log.json left by an earlier policy whose folder was removed, train replaced it
    silently (release refuses, since a1eb5b2) (fresh-user pass)."""
    led = tmp_path / "budget.jsonl"
    assert run("budget", "init", led, "--dataset", load_spec(rows / "rows.json").dataset_id,
               "--rho-total", 5).exit_code == 0
    before = led.read_bytes()
    (tmp_path / "p.local-log.json").write_text('{"earlier": true}\n')
    with watch_reads(rows / "logs.parquet") as reads:
        r = run("train", rows / "logs.parquet", "--spec", rows / "rows.json", "--algo", algo, *budget,
                *(["--ledger", led] if budget else []), "--out", tmp_path / "p")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'p.local-log.json'} already exists: the private bounding log of an earlier policy "
        "written to this `--out`; move it away (keep it with that policy's records) or choose another `--out`.")
    assert (tmp_path / "p.local-log.json").read_text() == '{"earlier": true}\n'
    assert led.read_bytes() == before and not (tmp_path / "p").exists() and reads == []


def test_dp_vapvi_failure_prob_and_local_log(rows, tmp_path):
    spec = load_spec(rows / "rows.json").to_dict()
    spec["dataset_id"] = "pairs"
    write_spec(spec, tmp_path / "k1.json")
    (tmp_path / "x.npy").write_bytes((rows / "x.npy").read_bytes())
    out = tmp_path / "p"
    r = run("train", rows / "pairs.parquet", "--spec", tmp_path / "k1.json", "--algo", "dp-vapvi", "--rho", 1,
            "--failure-prob", 0.2, "--seed", 0, "--out", out, "--accept-repairs")  # half the episodes dropped
    assert r.exit_code == 0, r.output
    assert load_policy(out).parameters["delta_fail"] == 0.2
    log = json.loads((tmp_path / "p.local-log.json").read_text())
    assert log["bounding"]["episodes_dropped"] == 200 and log["bounding"]["units_over_k"] == 200
    assert "200 episodes" in r.stderr and "PRIVATE" in r.stderr
    assert not any("local-log" in p.name for p in out.iterdir())
    r = run("train", rows / "logs.parquet", "--spec", rows / "rows.json", "--algo", "vapvi", "--failure-prob", 0.2,
            "--out", tmp_path / "q")
    assert r.exit_code == 2 and "`--failure-prob` applies to dp-vapvi" in r.output
