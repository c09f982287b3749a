"""``privaudit simulate`` and ``privaudit evaluate`` from the command line."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import ArtifactError
from privaudit.mdp import evaluate_policy, load_mdp, value_iteration
from privaudit.learners.policy import load_policy_table
from privaudit.mdp.evaluation import evaluate_report
from privaudit.mdp.icu_sepsis import clinicians_policy
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.core.spec import load_spec


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def random_files(tmp_path):
    """A random-tabular log, spec and MDP file written by the CLI."""
    res = run("simulate", "random-tabular", "--states", 5, "--actions", 3, "--horizon", 4, "--instance-seed", 9,
              "--episodes", 200, "--behaviour", "uniform", "--seed", 1, "--out", tmp_path / "logs.parquet",
              "--spec-out", tmp_path / "spec.json", "--mdp-out", tmp_path / "mdp.npz")
    assert res.exit_code == 0, res.output
    return tmp_path


def test_simulate_cli_writes_logs_spec_and_mdp(random_files):
    spec = load_spec(random_files / "spec.json")
    assert (spec.S, spec.A, spec.H, spec.dataset_id) == (5, 3, 4, "random-tabular-simulated")
    df = pl.read_parquet(random_files / "logs.parquet")
    assert df["episode_id"].n_unique() == 200 and df.height == 800  # no terminal states: 4 steps each
    mdp = load_mdp(random_files / "mdp.npz")
    np.testing.assert_array_equal(mdp.P, random_tabular_mdp(5, 3, 4, 9).P)


def test_simulate_cli_icu_sepsis_json(tmp_path):
    res = run("simulate", "icu-sepsis", "--episodes", 50, "--seed", 3, "--horizon", 10, "--json",
              "--out", tmp_path / "l.parquet", "--spec-out", tmp_path / "s.json", "--dataset-id", "ward-7")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["episodes"] == 50 and summary["horizon"] == 10
    spec = load_spec(tmp_path / "s.json")
    assert spec.dataset_id == "ward-7" and spec.H == 10 and spec.public_reward["values"] == {"714": 1.0}
    assert pl.read_parquet(tmp_path / "l.parquet")["step"].max() <= 9


def test_sample_data_matches_its_command(repo_root, tmp_path):
    # The bundled sample is what its documented command (sample_data/make_icu_sepsis_sample.sh)
    # produces. Tables are compared, not bytes: another polars version may encode differently.
    sample = repo_root / "sample_data"
    res = run("simulate", "icu-sepsis", "--episodes", 20000, "--behaviour", "clinicians", "--seed", 2026,
              "--out", tmp_path / "l.parquet", "--spec-out", tmp_path / "s.json", "--dataset-id", "icu-sepsis-sample")
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(sample / "icu_sepsis_clinicians_20k.parquet").equals(pl.read_parquet(tmp_path / "l.parquet"))
    assert json.loads((sample / "icu_sepsis_spec.json").read_text()) == json.loads((tmp_path / "s.json").read_text())
    spec = load_spec(sample / "icu_sepsis_spec.json")
    assert spec.dataset_id == "icu-sepsis-sample" and (spec.S, spec.A, spec.H) == (716, 25, 20)
    assert (sample / "icu_sepsis_clinicians_20k.parquet").stat().st_size < 3_000_000
    assert (sample / "icu-sepsis" / "LICENSE.txt").exists()


def test_evaluate_icu_sepsis_json(tmp_path):
    np.save(tmp_path / "pi.npy", clinicians_policy())
    res = run("evaluate", tmp_path / "pi.npy", "--mdp", "icu-sepsis", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"value", "optimal_value", "references"} <= set(out)
    assert set(out["references"]) == {"clinicians", "uniform"}
    assert abs(out["value"] - 0.6920) <= 5e-4 and abs(out["optimal_value"] - 0.7922) <= 5e-4
    assert abs(out["references"]["uniform"] - 0.6854) <= 5e-4
    assert out["value"] == out["references"]["clinicians"]
    text = run("evaluate", tmp_path / "pi.npy", "--mdp", "icu-sepsis")
    assert text.exit_code == 0 and "0.6920" in text.output and "0.7922" in text.output


def test_evaluate_refuses_a_spec_that_does_not_describe_the_mdp(tmp_path, repo_root, random_files):
    np.save(tmp_path / "pi.npy", clinicians_policy())
    doc = json.loads((repo_root / "sample_data" / "icu_sepsis_spec.json").read_text())
    (tmp_path / "ok.json").write_text(json.dumps(doc))
    ok = run("evaluate", tmp_path / "pi.npy", "--mdp", "icu-sepsis", "--spec", tmp_path / "ok.json", "--json")
    assert ok.exit_code == 0, ok.output
    doc["public_reward"]["values"] = {"713": 1.0}  # the fresh-user edit: death rewarded instead of survival
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    bad = run("evaluate", tmp_path / "pi.npy", "--mdp", "icu-sepsis", "--spec", tmp_path / "bad.json")
    assert bad.exit_code == 2 and "$.public_reward {'713': 1.0} is not the reward of `--mdp` icu-sepsis" in bad.output
    assert "Traceback" not in bad.output
    small = json.loads((random_files / "spec.json").read_text())
    small.pop("mdp")  # (its $.mdp would name random-tabular, refused first)
    (tmp_path / "small.json").write_text(json.dumps(small))
    other = run("evaluate", tmp_path / "pi.npy", "--mdp", "icu-sepsis", "--spec", tmp_path / "small.json")
    assert other.exit_code == 2 and "($.n_states, $.n_actions) = (5, 3)" in other.output, other.output


def test_evaluate_npz_per_step_policy(random_files):
    mdp = load_mdp(random_files / "mdp.npz")
    pi = np.random.default_rng(0).dirichlet(np.ones(3), size=(4, 5))  # (H, S, A)
    np.save(random_files / "pi.npy", pi)
    res = run("evaluate", random_files / "pi.npy", "--mdp", random_files / "mdp.npz", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["value"] == pytest.approx(evaluate_policy(mdp, pi), abs=1e-12)
    assert out["optimal_value"] == pytest.approx(value_iteration(mdp)[2], abs=1e-12)
    assert out["optimal_value"] >= out["value"] and "references" not in out
    assert evaluate_report(pi, mdp)["value"] == pytest.approx(out["value"], abs=1e-15)


def test_load_policy_table_broadcasts_and_checks(tmp_path):
    np.save(tmp_path / "p.npy", np.full((2, 3), 1 / 3))
    assert load_policy_table(tmp_path / "p.npy", S=2, A=3, H=4).shape == (4, 2, 3)


def test_bad_rows_are_counted_in_the_file_not_in_its_broadcast(tmp_path):
    """An (S, A) table is used at every step h; its bad rows are counted once (they were counted H times: a
    (716, 25) table of NaN was '14320 bad rows in all')."""
    pi = np.full((5, 3), 1 / 3)
    pi[[1, 3]] = np.nan
    np.save(tmp_path / "sa.npy", pi)
    with pytest.raises(ArtifactError, match=r"state s=1\) .* 2 bad rows of 5 in all"):
        load_policy_table(tmp_path / "sa.npy", S=5, A=3, H=4)
    np.save(tmp_path / "hsa.npy", np.broadcast_to(pi, (4, 5, 3)))
    with pytest.raises(ArtifactError, match=r"step h=0, state s=1\) .* 8 bad rows of 20 in all"):
        load_policy_table(tmp_path / "hsa.npy", S=5, A=3, H=4)


def _corrupt(shape, index, row):
    pi = np.full(shape, 1 / 3)
    pi[index] = row
    return pi


@pytest.mark.parametrize("array, message", [
    (np.full((3, 3), 1 / 3), r"has shape \(3, 3\)"),
    (_corrupt((5, 3), 1, [0.7, 0.7, -0.4]), r"pi\(\. \| state s=1\)"),
    (_corrupt((4, 5, 3), (2, 3), [0.5, 0.5, np.nan]), r"step h=2, state s=3"),
    (_corrupt((4, 5, 3), (0, 4), [0.5, 0.4, 0.0]), r"step h=0, state s=4"),
    (np.full((5, 3), "a"), "dtype"),
])
def test_evaluate_refuses_bad_policy(random_files, array, message):
    np.save(random_files / "bad.npy", array)
    res = run("evaluate", random_files / "bad.npy", "--mdp", random_files / "mdp.npz")
    assert res.exit_code == 1
    assert res.stderr.startswith("error:") and re.search(message, res.stderr), res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args, code, message", [
    (["evaluate", "{d}/missing.npy", "--mdp", "{d}/mdp.npz"], 2, "no such policy file"),  # missing: usage
    (["evaluate", "{d}/pi.npy", "--mdp", "nope"], 2, "neither a known MDP"),
    (["evaluate", "{d}/pi.npy", "--mdp", "{d}/mdp.npz", "--horizon", "3"], 2, "`--horizon` applies only"),
    (["evaluate", "{d}/pi.npy", "--mdp", "random-tabular"], 2, "`--mdp` MDP.npz"),
    (["evaluate", "{d}/pi.npy", "--mdp", "{d}/v2.npz"], 1, "format_version 2"),
    (["simulate", "random-tabular", "-n", "5", "--states", "3", "--out", "{d}/x.parquet", "--spec-out",
      "{d}/x.json"], 2, "needs --horizon, --actions"),
    (["simulate", "icu-sepsis", "-n", "5", "--states", "3", "--out", "{d}/x.parquet", "--spec-out",
      "{d}/x.json"], 2, "--states does not apply"),
    (["simulate", "random-tabular", "-n", "5", "--states", "3", "--actions", "2", "--horizon", "2",
      "--behaviour", "clinicians", "--out", "{d}/x.parquet", "--spec-out", "{d}/x.json"], 2,
     "not defined for the random-tabular MDP"),
    (["simulate", "icu-sepsis", "-n", "5", "--behaviour", "mix:x", "--out", "{d}/x.parquet", "--spec-out",
      "{d}/x.json"], 2, "mix:W"),
    (["simulate", "icu-sepsis", "-n", "0", "--out", "{d}/x.parquet", "--spec-out", "{d}/x.json"], 2, "episodes"),
    (["simulate", "gridworld", "-n", "5", "--out", "{d}/x.parquet", "--spec-out", "{d}/x.json"], 2, "gridworld"),
    (["simulate", "random-tabular", "-n", "5", "--states", "0", "--actions", "2", "--horizon", "2",
      "--behaviour", "uniform", "--out", "{d}/x.parquet", "--spec-out", "{d}/x.json"], 2, "`--states` must be >= 1"),
])
def test_cli_bad_arguments(random_files, args, code, message):
    d = random_files
    np.save(d / "pi.npy", np.full((5, 3), 1 / 3))
    with np.load(d / "mdp.npz") as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(d / "v2.npz", **{**arrays, "format_version": np.int64(2)})
    res = run(*[a.format(d=d) for a in args])
    assert res.exit_code == code, res.output
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.output
    assert not (d / "x.parquet").exists() and not (d / "x.json").exists()  # nothing written on error


def test_simulate_random_tabular_defaults_to_uniform_behaviour(tmp_path):
    # random-tabular names no behaviour of its own: the default must be uniform,
    # not the icu-sepsis-only "clinicians" (which would exit 2).
    res = run("simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 2,
               "--episodes", 50, "--seed", 0, "--out", tmp_path / "l.parquet",
               "--spec-out", tmp_path / "s.json")
    assert res.exit_code == 0, res.output
    assert "behaviour uniform" in res.output
    assert pl.read_parquet(tmp_path / "l.parquet")["episode_id"].n_unique() == 50


def test_simulate_refuses_to_overwrite_existing_files(tmp_path):
    logs = tmp_path / "l.parquet"
    logs.write_bytes(b"precious hospital logs")
    args = ["simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 2,
            "--episodes", 5, "--seed", 0, "--out", logs, "--spec-out", tmp_path / "s.json"]
    res = run(*args)
    assert res.exit_code == 2 and "already exist" in res.output and "--overwrite" in res.output
    assert logs.read_bytes() == b"precious hospital logs" and not (tmp_path / "s.json").exists()
    # issue 29 item 3: before, --overwrite replaced the hospital's logs; it replaces only simulated ones
    res = run(*args, "--overwrite")
    assert res.exit_code == 2 and res.output.strip() == (
        f"error: `--overwrite` replaces only simulated logs (a Parquet file written by privaudit simulate); "
        f"{logs} is not one, and it would be deleted. Choose another `--out`."), res.output
    assert logs.read_bytes() == b"precious hospital logs" and not (tmp_path / "s.json").exists()
    (tmp_path / "s.json").write_text('{"description": "my own spec"}\n')
    assert run(*args[:-4], "--out", tmp_path / "sim.parquet", "--spec-out", tmp_path / "s2.json").exit_code == 0
    res = run(*args[:-4], "--out", tmp_path / "sim.parquet", "--spec-out", tmp_path / "s.json", "--overwrite")
    assert res.exit_code == 2 and "replaces only an unedited spec written by privaudit simulate" in res.output
    assert (tmp_path / "s.json").read_text() == '{"description": "my own spec"}\n'
    res = run(*args[:-4], "--out", tmp_path / "sim.parquet", "--spec-out", tmp_path / "s2.json", "--overwrite")
    assert res.exit_code == 0, res.output  # an earlier simulate's logs and spec are replaced
    assert pl.read_parquet(tmp_path / "sim.parquet").height == 10
    res = run("simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 2, "--episodes", 5,
              "--out", tmp_path / "x.parquet", "--spec-out", tmp_path / "x.parquet")
    assert res.exit_code == 2 and "different files" in res.output


def test_garbage_policy_and_mdp_files_say_not_numpy_not_unpickle(tmp_path):
    """A policy .npy or an MDP .npz that is neither NumPy's format nor a zip said "This file contains pickled
    (object) data. If you trust the file you can load it unsafely using allow_pickle=": wrong, and advice to
    unpickle an untrusted file. It says the file is not NumPy's format (fresh-user pass, hfu)."""
    (tmp_path / "p.npy").write_bytes(b"xx")
    (tmp_path / "m.npz").write_bytes(b"xx")
    res = run("evaluate", tmp_path / "p.npy", "--mdp", "icu-sepsis")
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "not a NumPy .npy/.npz file" in res.output and "allow_pickle" not in res.output
    res = run("evaluate", tmp_path / "p.npy", "--mdp", tmp_path / "m.npz")
    assert res.exit_code == 1 and "cannot read MDP file" in res.output
    assert "not a NumPy .npy/.npz file" in res.output and "allow_pickle" not in res.output


def test_an_object_array_policy_is_named_as_such(tmp_path):
    """A real .npy of dtype object was called "not a NumPy .npy/.npz file (no NumPy header or zip signature)"
    (fresh-user pass)."""
    np.save(tmp_path / "p.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    res = run("evaluate", tmp_path / "p.npy", "--mdp", "icu-sepsis")
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.stderr.strip() == (f"error: cannot read policy {tmp_path / 'p.npy'}: a NumPy array of Python objects "
                                  "(dtype object: pickled data, never loaded); save numbers. Expected a .npy array "
                                  "of shape (20, 716, 25) or (716, 25).")
