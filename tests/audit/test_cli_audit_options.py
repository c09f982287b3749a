"""``privaudit audit``: budget overrides, options for built-ins only, mapped explicit
pairs, sys.exit in user code, k > 1 canaries, the canary name printed."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit import check_neighbours, load_report, make_pair
from privaudit.audit.claim import Claim
from privaudit.cli import main
from privaudit.cli.audit import builtin_budget
from privaudit.core.errors import UsageError
from tests.audit.helpers import H, tiny_logs, tiny_spec


@pytest.fixture
def files(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps(tiny_spec().to_dict()))
    tiny_logs().write_parquet(tmp_path / "logs.parquet")
    (tmp_path / "exits.py").write_text(
        "import sys\n\ndef exit3(logs, rng):\n    sys.exit(3)\n\ndef exit0(logs, rng):\n    sys.exit(0)\n"
        "\ndef fine(logs, rng):\n    return rng.normal(size=3)\n")
    (tmp_path / "exit_on_import.py").write_text("import sys\nsys.exit(0)\n\ndef f(logs, rng):\n    return 1.0\n")
    return tmp_path


def _run(args):
    return CliRunner().invoke(main, ["audit", *map(str, args)])


def _base(files, *extra, mech="release", out="rep.json"):
    return ["--mechanism", mech, "--logs", files / "logs.parquet", "--spec", files / "spec.json",
            "--trials", "2000", "--seed", "1", "--out", files / out, *extra]


# ------------------------------------------------------------------ budget overrides

RHO1 = Claim.from_rho(1.0, 1e-6)
EPS_PURE = Claim.from_epsilon(2.0, 0.0)
EPS_APPROX = Claim.from_epsilon(2.0, 1e-5)


@pytest.mark.parametrize("claim, fam, m_rho, m_eps, expected", [
    (RHO1, None, None, None, ("gaussian", {"rho": 1.0})),
    (RHO1, None, 50.0, None, ("gaussian", {"rho": 50.0})),
    (RHO1, None, None, 60.0, ("gaussian", {"epsilon": 60.0, "delta": 1e-6})),      # was ignored
    (EPS_APPROX, None, None, None, ("gaussian", {"epsilon": 2.0, "delta": 1e-5})),
    (EPS_APPROX, None, 3.0, None, ("gaussian", {"rho": 3.0})),
    (EPS_APPROX, None, None, 9.0, ("gaussian", {"epsilon": 9.0, "delta": 1e-5})),
    (EPS_APPROX, "laplace", None, 9.0, ("laplace", {"epsilon": 9.0})),
    (EPS_PURE, None, None, None, ("laplace", {"epsilon": 2.0})),
    (EPS_PURE, None, None, 9.0, ("laplace", {"epsilon": 9.0})),
    (EPS_PURE, "gaussian", 3.0, None, ("gaussian", {"rho": 3.0})),
])
def test_overrides_set_the_mechanism_budget_exactly(claim, fam, m_rho, m_eps, expected):
    assert builtin_budget(claim, fam, m_rho, m_eps) == expected


@pytest.mark.parametrize("claim, fam, m_rho, m_eps, match", [
    (EPS_PURE, None, 50.0, None, "Laplace has no rho budget"),                     # was ignored
    (RHO1, "laplace", None, None, "rho claim"),                                    # was Laplace vs Gaussian claim
    (Claim.from_epsilon(2.0, 1e-5, kind="gaussian"), "laplace", None, None, "GDP test"),
    (EPS_PURE, "gaussian", None, None, "delta 0"),
    (EPS_PURE, "gaussian", None, 3.0, "delta 0"),
    (RHO1, None, 1.0, 1.0, "at most one"),
    (RHO1, None, 0.0, None, "> 0"),
    (RHO1, None, None, -1.0, "> 0"),
])
def test_overrides_that_cannot_run_as_asked_are_refused(claim, fam, m_rho, m_eps, match):
    with pytest.raises(UsageError, match=match):
        builtin_budget(claim, fam, m_rho, m_eps)


def test_mechanism_epsilon_override_under_a_rho_claim_runs_and_keeps_the_claim(files):
    """Claim rho = 0.5 (mu = 1); mechanism at epsilon 60, delta 1e-6 (rho ~ 24, mu ~ 7):
    the pair (L2 = sqrt(2H) = sensitivity) separates at mu ~ 7, far above mu = 1; with 700
    evaluation runs per side mu_lb is above 3 except with negligible probability."""
    res = _run(_base(files, "--claim-rho", "0.5", "--mechanism-epsilon", "60", "--claim-kind", "gaussian",
                       "--noise", "rounded"))
    assert res.exit_code == 3, res.output
    assert "--mechanism-epsilon" in res.output and "gaussian noise at epsilon=60, delta=1e-6 => rho=" in res.output
    doc = load_report(files / "rep.json")
    assert doc["claim"]["rho"] == 0.5 and doc["verdict"] == "violation"


def test_mechanism_rho_override_under_a_pure_claim_is_refused_at_the_cli(files):
    res = _run(_base(files, "--claim-epsilon", "2", "--delta", "0", "--mechanism-rho", "50"))
    assert res.exit_code == 2 and "Laplace has no rho budget" in res.output and "Traceback" not in res.output
    assert not (files / "rep.json").exists()


def test_laplace_release_under_a_rho_claim_is_refused_at_the_cli(files):
    res = _run(_base(files, "--claim-rho", "1", "--release-mechanism", "laplace"))
    assert res.exit_code == 2 and "rho claim" in res.output
    assert not (files / "rep.json").exists()


# ------------------------------------------------------------------ options of built-ins only

@pytest.mark.parametrize("extra", [["--mechanism-rho", "5"], ["--mechanism-epsilon", "5"], ["--stationary"],
                                   ["--noise", "exact"], ["--release-mechanism", "gaussian"]])
def test_builtin_only_options_are_refused_for_a_user_mechanism(files, extra):
    res = _run(_base(files, "--claim-rho", "1", *extra, mech=f"{files / 'exits.py'}:fine"))
    assert res.exit_code == 2, res.output
    assert extra[0] in res.output and "built-in" in res.output
    assert not (files / "rep.json").exists()


# ------------------------------------------------------------------ sys.exit in user code

@pytest.mark.parametrize("ref", ["exits.py:exit3", "exits.py:exit0", "exit_on_import.py:f"])
def test_sys_exit_in_user_code_is_a_user_code_error(files, ref):
    res = _run(_base(files, "--claim-rho", "1", mech=f"{files}/{ref}"))
    assert res.exit_code == 2, res.output
    assert ref.rpartition(":")[2] in res.output and "SystemExit" in res.output
    assert not (files / "rep.json").exists()


# ------------------------------------------------------------------ explicit pair with a mapped spec

def test_pair_is_read_through_the_spec_column_mapping(files):
    spec = tiny_spec().to_dict()
    names = {"episode_id": "stay_id", "step": "window", "state": "cluster", "action": "dose",
             "reward": "outcome", "next_state": "next_cluster"}
    spec["columns"] = names
    spec["privacy_unit"] = {"column": "patient", "max_episodes": 1}
    (files / "mapped.json").write_text(json.dumps(spec))
    p = make_pair(tiny_logs(), tiny_spec(), "rare", rng=np.random.default_rng(0))
    for df, name in ((p.d, "d.parquet"), (p.d_prime, "d2.parquet")):
        df.rename({**names, "unit_id": "patient"}).write_parquet(files / name)
    res = _run(["--mechanism", "release", "--pair", files / "d.parquet", files / "d2.parquet",
                "--spec", files / "mapped.json", "--claim-rho", "1", "--trials", "200", "--seed", "0", "--per-step",
                "--out", files / "rep.json"])
    assert res.exit_code == 0, res.output
    doc = load_report(files / "rep.json")
    assert doc["neighbouring_pair"]["kind"] == "explicit"
    visits = next(f for f in doc["graybox"]["families"] if f["name"] == "visits")
    assert visits["l2"] == pytest.approx(math.sqrt(2 * H))  # the rare pair: H cells -1, H cells +1


# ------------------------------------------------------------------ k > 1 canaries

def _paired_units(identical: bool) -> pl.DataFrame:
    """tiny_logs with units of 2 episodes; identical=True: each unit's 2nd episode repeats its 1st."""
    logs = tiny_logs(40)
    if identical:
        first = logs.filter(pl.col("episode_id") % 2 == 0)
        logs = pl.concat([first, first.with_columns(pl.col("episode_id") + 1)]).sort("episode_id", "step")
    return logs.with_columns((pl.col("episode_id") // 2).alias("unit_id"))


def _visits_l2(d, d2):
    from privaudit.audit.pairs import visit_counts
    return float(np.linalg.norm((visit_counts(d2, H, 5, 2) - visit_counts(d, H, 5, 2)).ravel()))


def test_rare_canary_unit_has_k_episodes_and_attains_k_sqrt_2H():
    spec = tiny_spec(k=2)
    p = make_pair(_paired_units(identical=True), spec, "rare", rng=np.random.default_rng(0))
    canary = p.d_prime.join(p.d, on=list(p.d.columns), how="anti")
    assert canary.height == 2 * H and canary["episode_id"].n_unique() == 2 and canary["unit_id"].n_unique() == 1
    assert check_neighbours(p.d, p.d_prime)["kind"] == "explicit"
    # removed: 2 identical episodes (-2 at H cells); canary: +2 at H unvisited cells (state 4)
    assert _visits_l2(p.d, p.d_prime) == pytest.approx(2 * math.sqrt(2 * H))
    assert p.description["visits_change"]["l2"] == pytest.approx(p.description["visits_change"]["declared_l2"])
    assert "warning" not in p.description and p.description["canary"]["episodes"] == 2


def test_k2_canary_warns_when_no_unit_reaches_the_declared_change():
    """Every unit holds 1 episode here: removing one is -1 at H cells, the canary +2 at H
    other cells: L2 = sqrt(H + 4H) = sqrt(15) < 2 sqrt(2H) = sqrt(24)."""
    logs = tiny_logs(40)
    p = make_pair(logs, tiny_spec(k=2), "rare", rng=np.random.default_rng(0))
    ch = p.description["visits_change"]
    assert ch["l2"] == pytest.approx(math.sqrt(5 * H)) and ch["declared_l2"] == pytest.approx(2 * math.sqrt(2 * H))
    assert "below the declared sensitivity" in p.description["warning"]


def test_k2_warning_reaches_the_report_messages_and_the_default_synthetic_pair_needs_none(tmp_path):
    """k = 2 and no unit of D with 2 full-length episodes: `rare` falls short of the declared
    2 sqrt(2H) (warned); the default synthetic pair, built from the spec, attains it."""
    (tmp_path / "spec.json").write_text(json.dumps(tiny_spec(k=2).to_dict()))
    tiny_logs().write_parquet(tmp_path / "logs.parquet")
    args = ["--mechanism", "release", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
            "--claim-rho", "1", "--trials", "200", "--seed", "0", "--per-step"]
    res = _run([*args, "--canary", "rare", "--out", tmp_path / "r.json"])
    assert res.exit_code == 0, res.output
    assert "pair: the canary pair changes the visits per step h by L2 3.873" in res.output
    res = _run([*args, "--out", tmp_path / "s.json"])
    assert res.exit_code == 0 and "pair:" not in res.output, res.output
    pair = load_report(tmp_path / "s.json")["neighbouring_pair"]
    assert pair["kind"] == "synthetic" and "warning" not in pair
    assert pair["visits_change"]["l2"] == pytest.approx(2 * math.sqrt(2 * H), rel=1e-12)
    assert pair["visits_change"]["declared_l2"] == pytest.approx(2 * math.sqrt(2 * H), rel=1e-12)


# ------------------------------------------------------------------ canary name printed

def test_dpvapvi_prints_the_canary_it_uses(tmp_path):
    from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
    from privaudit.mdp.simulate import simulate, uniform_policy

    mdp = random_tabular_mdp(3, 2, 2, 0)
    doc = random_tabular_spec_doc(mdp)
    doc["features"] = {"map": "one-hot"}
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    simulate(mdp, uniform_policy(mdp), 40, np.random.default_rng(1)).write_parquet(tmp_path / "logs.parquet")
    args = ["--mechanism", "dp-vapvi", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
            "--claim-rho", "5", "--trials", "200", "--seed", "0"]
    res = _run([*args, "--canary", "rare", "--out", tmp_path / "r.json"])
    assert res.exit_code == 0, res.output
    assert "canary: linear" in res.output and "canary: rare" not in res.output
    assert load_report(tmp_path / "r.json")["neighbouring_pair"]["kind"] == "canary-linear"
    res = _run([*args, "--out", tmp_path / "s.json"])  # default: synthetic units, features at their norm bound
    assert res.exit_code == 0 and "canary: synthetic (default" in res.output, res.output
    pair = load_report(tmp_path / "s.json")["neighbouring_pair"]
    assert pair["kind"] == "synthetic" and pair["gram_change"]["l2"] == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("with_spec", [True, False])
def test_unknown_mechanism_names_the_option_and_the_choices(files, with_spec):
    """A typo in --mechanism used to say 'expected FILE.py:NAME' (with --spec) or
    '--spec is required' (without), neither naming the option nor the built-ins."""
    args = _base(files, "--claim-rho", "1", mech="nonsense") if with_spec else [
        "--mechanism", "nonsense", "--claim-rho", "1", "--trials", "2000", "--out", files / "rep.json"]
    res = _run(args)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    msg = res.output.strip()
    assert msg.count("\n") == 0, msg
    assert "--mechanism 'nonsense'" in msg and "release" in msg and "dp-apvi" in msg and "explore:ALGO" in msg
    assert "FILE.py:NAME" in msg
    assert not (files / "rep.json").exists()
