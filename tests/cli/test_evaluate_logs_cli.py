"""``privaudit evaluate POLICY --logs LOGS --spec SPEC`` (issue 28, item 3): a DP value from logs, no MDP.

Before issue 28, ``evaluate`` required --mdp: a hospital without an MDP could not score a policy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.formatting import num
from privaudit.core.spec import load_spec
from privaudit.mdp import evaluate_policy, load_mdp
from privaudit.privacy.ledger import ledger_status


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Random-tabular logs (5 states, 2 actions, H = 3, 20,000 stays), their spec and MDP, a policy table."""
    d = tmp_path_factory.mktemp("ope")
    res = run("simulate", "random-tabular", "--states", 5, "--actions", 2, "--horizon", 3, "--instance-seed", 4,
              "--episodes", 20000, "--behaviour", "uniform", "--seed", 1, "--out", d / "logs.parquet",
              "--spec-out", d / "spec.json", "--mdp-out", d / "mdp.npz")
    assert res.exit_code == 0, res.output
    np.save(d / "pi.npy", np.random.default_rng(0).dirichlet(np.ones(2), size=(3, 5)))
    return d


def _ledger(d, name, total="10"):
    path = d / name
    dataset = load_spec(d / "spec.json").dataset_id
    assert run("budget", "init", path, "--dataset", dataset, "--rho-total", total).exit_code == 0
    return path


def test_logs_mode_reports_a_lower_bound_below_the_truth_and_charges_the_ledger_once(files):
    ledger = _ledger(files, "once.ledger")
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--rho", 1, "--coverage", 1000, "--ledger", ledger, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    truth = evaluate_policy(load_mdp(files / "mdp.npz"), np.load(files / "pi.npy"))
    lo, hi = out["interval"]
    assert out["lower_bound"] <= truth and lo <= truth <= hi  # fails with probability < 5% each (seedless)
    assert out["lower_bound"] > 0.3 * truth  # informative at 20,000 stays
    assert out["guarantee"]["rho"] == 1.0 and out["rng"] == "os-entropy"
    status = ledger_status(ledger)
    assert len(status["entries"]) == 1 and float(status["rho_spent"]) == 1.0, status


def test_logs_mode_text_output_states_level_and_guarantee(files):
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--epsilon", 1, "--delta", "1e-6", "--coverage", 1000, "--confidence", 0.9, "--seed", 3)
    assert res.exit_code == 0, res.output
    assert "lower bound" in res.stdout and "(one-sided, 90%)" in res.stdout
    assert "epsilon=1" in res.stdout and "delta=1e-6" in res.stdout
    assert "seeded noise" in res.stderr


def test_logs_mode_names_the_coverage_the_rule_set_apart_from_the_unit_count(files):
    """Before: "coverage m from the rule on a DP count of the evaluated units: 63" printed the count, not m
    (31.5 on the first line), as if it were m (fresh-user pass)."""
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--rho", 1, "--seed", 3, "--json")
    out = json.loads(res.stdout)
    m, units = out["coverage"], out["mechanism"]["units_released"]
    assert m != units  # the rule's m is not the count itself at 20,000 stays
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--rho", 1, "--seed", 3)
    assert res.exit_code == 0, res.output
    [line] = [x for x in res.stdout.splitlines() if "set by the rule" in x]
    assert line.startswith(f"coverage m = {num(m)}, set by") and line.endswith(f"evaluated units: {units}")


@pytest.mark.parametrize("case, code, needle", [
    ("shape", 1, "has shape (5, 3); the spec needs (3, 5, 2) or (5, 2)"),  # no MDP here (session 11)
    ("both", 2, "give exactly one of --mdp"),
    ("no-spec", 2, "--logs needs --spec"),
    ("no-delta", 2, "Gaussian (zCDP) only"),
    ("logs", 1, "logs"),
    ("huge-m", 2, "the coverage scale m = 1e+308 is too large"),  # a traceback (math domain error) before
    ("tiny-m", 2, "the coverage scale m = 1e-300 is too small"),  # a traceback (float division by zero) before
])
def test_bad_input_is_refused_with_one_line_and_nothing_charged(files, tmp_path, case, code, needle):
    ledger = _ledger(files, f"bad-{case}.ledger")
    pi, logs = files / "pi.npy", files / "logs.parquet"
    extra = ["--rho", 1]
    if case == "shape":
        pi = tmp_path / "bad.npy"
        np.save(pi, np.full((5, 3), 0.5))
    if case == "logs":
        logs = tmp_path / "broken.parquet"
        logs.write_bytes(b"not parquet")
    if case == "no-delta":
        extra = ["--epsilon", 1]
    if case in ("huge-m", "tiny-m"):
        extra += ["--coverage", "1e308" if case == "huge-m" else "1e-300"]
    args = ["evaluate", pi, "--logs", logs, "--ledger", ledger] + extra
    if case != "no-spec":
        args += ["--spec", files / "spec.json"]
    if case == "both":
        args += ["--mdp", files / "mdp.npz"]
    res = run(*args)
    assert res.exit_code == code, res.output
    assert needle in res.stderr and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert len(ledger_status(ledger)["entries"]) == 0


def test_budget_beyond_the_ledger_is_refused_before_reading(files):
    ledger = _ledger(files, "small.ledger", total="0.5")
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--rho", 1, "--ledger", ledger)
    assert res.exit_code == 3, res.output
    assert len(ledger_status(ledger)["entries"]) == 0


@pytest.mark.parametrize("coverage", [1, 10_000_000])
def test_the_estimate_stays_in_the_value_range_and_an_empty_bound_is_said(files, coverage):
    """A fresh user saw `estimate 1460.7300` at --coverage 1 and `-0.0301` with m above the units (at m = 1
    the noise of the model value is large; with m above the units all the mass is absorbed): the printed estimate is
    clipped to [0, V_max] (post-processing) and a mostly absorbed policy is warned about."""
    V_max = load_spec(files / "spec.json").horizon * 1.0  # rewards in [0, 1], H steps
    res = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
              "--rho", 1, "--coverage", coverage, "--seed", 2, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert 0.0 <= out["estimate"] <= V_max and 0.0 <= out["absorbed_mass"] <= 1.0
    text = run("evaluate", files / "pi.npy", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
               "--rho", 1, "--coverage", coverage, "--seed", 2)
    if coverage > 20_000:  # 20,000 stays: m = 1e7 absorbs all the mass (at m = 1 the noise may say so too)
        assert "the coverage caps absorb" in text.stderr


def test_default_coverage_fits_a_small_hospital_and_is_charged_in_the_budget(tmp_path):
    """Session 10's fresh user: 1,329 patients lost 96% of the policy's mass to the fixed default m = 10,000
    (the start cell alone passes n/m = 13%). The default m now comes from a DP count of the evaluated units
    (5% of the budget, inside the stated guarantee and the one ledger charge): m <= n~/2.

    Seeded noise; the count's sigma is about 3.2 at rho 1, so |n~ - 1329| < 30 except with probability < 1e-20."""
    res = run("simulate", "random-tabular", "--states", 5, "--actions", 2, "--horizon", 3, "--instance-seed", 4,
              "--episodes", 1329, "--behaviour", "uniform", "--seed", 1, "--out", tmp_path / "logs.parquet",
              "--spec-out", tmp_path / "spec.json", "--mdp-out", tmp_path / "mdp.npz")
    assert res.exit_code == 0, res.output
    np.save(tmp_path / "pi.npy", np.random.default_rng(0).dirichlet(np.ones(2), size=(3, 5)))
    ledger = _ledger(tmp_path, "small.ledger")
    args = ("evaluate", tmp_path / "pi.npy", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
            "--rho", 1, "--seed", 5, "--json")
    default = json.loads(run(*args, "--ledger", ledger).stdout)
    fixed = json.loads(run(*args, "--coverage", 10_000).stdout)
    assert abs(default["mechanism"]["units_released"] - 1329) < 30
    assert default["coverage"] <= default["mechanism"]["units_released"] / 2
    assert fixed["absorbed_mass"] > 0.8 and default["absorbed_mass"] < 0.3, (fixed, default)
    truth = evaluate_policy(load_mdp(tmp_path / "mdp.npz"), np.load(tmp_path / "pi.npy"))
    assert default["lower_bound"] <= truth and default["estimate"] > fixed["estimate"]
    assert default["guarantee"]["rho"] == 1.0
    assert "units_released" not in fixed["mechanism"]  # a given m: no count, the whole budget evaluates
    status = ledger_status(ledger)
    assert len(status["entries"]) == 1 and float(status["rho_spent"]) == 1.0, status
    text = run(*args[:-1])
    assert text.exit_code == 0 and "DP count of the evaluated units" in text.stdout
