"""``privaudit train`` (and ``evaluate`` on its output): artifacts, privacy plumbing, refusals."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.learners.tabular.apvi import APVI
from privaudit.learners.policy import load_policy
from privaudit.learners.tabular.counts import exact_counts
from privaudit.mdp.io import save_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.mdp.tabular import evaluate_policy
from privaudit.core.spec import DomainSpec


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    mdp = random_tabular_mdp(4, 2, 3, instance_seed=8)
    doc = random_tabular_spec_doc(mdp)
    (d / "spec.json").write_text(json.dumps(doc))
    other = dict(doc, dataset_id="another-dataset")
    (d / "other_spec.json").write_text(json.dumps(other))
    df = simulate(mdp, uniform_policy(mdp), 5000, np.random.default_rng(0))
    write_logs(df, d / "logs.parquet")
    save_mdp(mdp, d / "mdp.npz")
    return {"dir": d, "mdp": mdp, "spec": DomainSpec.from_dict(doc), "df": df}


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res


def test_non_private_train_warns_and_round_trips(world):
    d = world["dir"]
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "apvi", "--per-step", "--out",
              d / "p_apvi")
    assert res.exit_code == 0, res.output
    assert "NOT differentially private" in res.stderr
    pol = load_policy(d / "p_apvi")
    direct = APVI().fit(exact_counts(world["df"], world["spec"]), terminal_states=())
    np.testing.assert_array_equal(pol.table, direct.policy_.table)
    assert pol.privacy.private is False and pol.algorithm == "apvi"
    assert pol.spec_hash == world["spec"].hash()
    # evaluate reads the folder and reports the same exact value
    ev = run("evaluate", d / "p_apvi", "--mdp", d / "mdp.npz", "--json")
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.stdout)["value"] == pytest.approx(evaluate_policy(world["mdp"], direct.policy_.table))


def test_dp_train_releases_first_then_release_is_reused(world):
    d = world["dir"]
    init = run("budget", "init", d / "ledger.jsonl", "--dataset", world["spec"].dataset_id, "--rho-total", "10")
    assert init.exit_code == 0, init.output
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "dp-apvi", "--rho", "5",
              "--ledger", d / "ledger.jsonl", "--seed", "3", "--per-step", "--out", d / "p_dp", "--json")
    assert res.exit_code == 0, res.output
    assert "releasing DP counts" in res.stderr
    rel = d / "p_dp.release"
    assert (rel / "manifest.json").is_file()
    summary = json.loads(res.stdout)
    assert summary["private"] is False and summary["release"] == str(rel)  # --seed: seeded-insecure, not private
    pol = load_policy(d / "p_dp")
    man = json.loads((rel / "manifest.json").read_text())
    assert pol.privacy.private is False and pol.privacy.guarantee["rng"] == "seeded-insecure"
    assert pol.privacy.guarantee["rho"] == man["guarantee"]["rho"] == 5.0
    charged = (d / "ledger.jsonl").read_text()
    assert len(charged.splitlines()) == 2                                 # header + this release
    # from the release: same policy (post-processing is deterministic), nothing more spent
    res2 = run("train", "--release", rel, "--spec", d / "spec.json", "--algo", "dp-apvi", "--out", d / "p_dp2")
    assert res2.exit_code == 0, res2.output
    np.testing.assert_array_equal(load_policy(d / "p_dp2").table, pol.table)
    assert (d / "ledger.jsonl").read_text() == charged
    # a release spends nothing more: budget options are refused
    res3 = run("train", "--release", rel, "--algo", "dp-apvi", "--rho", "1", "--out", d / "p_dp3")
    assert res3.exit_code == 2 and "spends nothing more" in res3.stderr
    # the stationary flag must match the release
    res4 = run("train", "--release", rel, "--algo", "dp-apvi", "--stationary", "--out", d / "p_dp4")
    assert res4.exit_code == 2 and "per-step" in res4.stderr


def test_release_with_another_spec_is_refused(world):
    d = world["dir"]
    res = run("release", d / "logs.parquet", "--spec", d / "spec.json", "--rho", "1", "--seed", "1",
              "--out", d / "rel_a")
    assert res.exit_code == 0, res.output
    bad = run("train", "--release", d / "rel_a", "--spec", d / "other_spec.json", "--algo", "dp-apvi",
              "--out", d / "p_bad")
    assert bad.exit_code == 2  # a --spec the release was not made under: a spec error, as everywhere
    assert "another spec" in bad.stderr and "Traceback" not in bad.output
    assert not (d / "p_bad").exists()


def test_missing_manifest_is_refused(world, tmp_path):
    empty = tmp_path / "not_a_release"
    empty.mkdir()
    res = run("train", "--release", empty, "--algo", "dp-apvi", "--out", tmp_path / "p")
    assert res.exit_code == 1 and "manifest.json is missing" in res.stderr
    assert not (tmp_path / "p").exists()


def test_usage_errors(world, tmp_path):
    d = world["dir"]
    both = run("train", d / "logs.parquet", "--release", d / "x", "--algo", "apvi", "--out", tmp_path / "p")
    assert both.exit_code == 2 and "exactly one input" in both.stderr
    budget = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "apvi", "--rho", "1",
                 "--out", tmp_path / "p")
    assert budget.exit_code == 2 and "not private" in budget.stderr
    nobudget = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "dp-apvi",
                   "--out", tmp_path / "p")
    assert nobudget.exit_code == 2 and "give a budget" in nobudget.stderr
    assert not (tmp_path / "p.release").exists()
    nonprivate_on_release = run("train", "--release", d / "rel_a", "--algo", "ve", "--out", tmp_path / "p")
    assert nonprivate_on_release.exit_code == 2 and "dp-apvi" in nonprivate_on_release.stderr


def test_evaluate_refuses_unknown_policy_version(world, tmp_path):
    d = world["dir"]
    assert run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "ve",
               "--out", tmp_path / "p").exit_code == 0
    doc = json.loads((tmp_path / "p" / "policy.json").read_text())
    doc["format_version"] = 99
    (tmp_path / "p" / "policy.json").write_text(json.dumps(doc))
    res = run("evaluate", tmp_path / "p", "--mdp", d / "mdp.npz")
    assert res.exit_code == 1 and "format_version" in res.stderr


def test_penalty_constants_from_the_cli(world, tmp_path):
    d = world["dir"]
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "apvi", "--penalty-c1", 0.5,
              "--penalty-c", 3, "--per-step", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    pol = load_policy(tmp_path / "p")
    assert pol.parameters["C1"] == 0.5 and pol.parameters["C"] == 3.0
    direct = APVI(C1=0.5, C=3.0).fit(exact_counts(world["df"], world["spec"]), terminal_states=())
    np.testing.assert_array_equal(pol.table, direct.policy_.table)
    # C2 is DP-APVI's privacy term only; C <= 1 is refused by its range
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "apvi", "--penalty-c2", 0,
              "--out", tmp_path / "q")
    assert res.exit_code == 2 and "dp-apvi only" in res.output and not (tmp_path / "q").exists()
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "ve", "--penalty-c1", 1,
              "--out", tmp_path / "r")
    assert res.exit_code == 2 and not (tmp_path / "r").exists()
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "apvi", "--penalty-c", 1,
              "--out", tmp_path / "s")
    assert res.exit_code == 2


def test_dp_apvi_penalty_c2_is_recorded(world, tmp_path):
    d = world["dir"]
    res = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "dp-apvi", "--rho", 50,
              "--penalty-c2", 0, "--seed", 1, "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    pol = load_policy(tmp_path / "p")
    assert pol.parameters["C2"] == 0.0 and pol.privacy.private is False


def test_budgets_are_printed_as_every_command_prints_them(world):
    """``--epsilon 5 --delta 1e-6`` resolves to rho = 0.4630649901377737...; train printed it in full
    (``rho=0.4630649901377737``) and dp-apvi's delta as ``1e-06``, where release prints
    ``formatting.privacy_param`` (4 significant digits rounded up, ``1e-6``)."""
    from privaudit.core.formatting import privacy_param as num
    from privaudit.privacy.budget import resolve_budget
    d = world["dir"]
    rho = resolve_budget(epsilon=5, delta=1e-6).rho
    doc = json.loads((d / "spec.json").read_text())  # dp-pbb backs up a public next-state reward
    (d / "spec_pbb.json").write_text(json.dumps({**doc, "public_reward": {"kind": "next_state", "values": {"0": 1.0}}}))
    # logs whose reward is that r(s') (validation refuses a public reward the logged rewards contradict)
    write_logs(world["df"].with_columns((pl.col("next_state") == 0).cast(pl.Float64).alias("reward")),
               d / "logs_pbb.parquet")
    pbb = run("train", d / "logs_pbb.parquet", "--spec", d / "spec_pbb.json", "--algo", "dp-pbb", "--epsilon", "5",
              "--delta", "1e-6", "--seed", "1", "--out", d / "p_pbb_fmt")
    assert pbb.exit_code == 0, pbb.output
    assert f"rho={num(rho)})" in pbb.stderr and repr(rho) not in pbb.output and num(rho) == "0.4631"
    apvi = run("train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "dp-apvi", "--epsilon", "5",
               "--delta", "1e-6", "--seed", "1", "--out", d / "p_apvi_fmt")
    assert apvi.exit_code == 0, apvi.output
    assert "(gaussian noise, epsilon=5, delta=1e-6" in apvi.stderr and "1e-06" not in apvi.stderr
