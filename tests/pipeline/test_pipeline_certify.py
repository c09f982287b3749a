"""``privaudit pipeline --hold-out`` (issue 28, item 3): learned policies certified on held-out units.

Before issue 28 the pipeline had no held-out certification and no rule for claiming an improvement.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from privaudit.core.errors import UsageError
from privaudit.core.spec import load_spec
from privaudit.data.parts import PART_ROWS_VARIABLE
from privaudit.data.prepare import prepare_logs
from privaudit.data.repairs import RepairLimit
from privaudit.pipeline.certify import (IMPROVEMENT, certification_lines, held_out_units_estimate,
                                       improvement_certified, split_held_out)
from privaudit.pipeline.config import PipelineConfig
from privaudit.pipeline.resume import fingerprint
from privaudit.privacy.ledger import ledger_status
from tests._release_logs import random_log, write_spec
from tests.cli.test_evaluate_logs_cli import run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """8,000 stays of a random per-step MDP (4 states, 2 actions, H = 3) with its spec and MDP file."""
    d = tmp_path_factory.mktemp("hold")
    args = ["random-tabular", "--states", 4, "--actions", 2, "--horizon", 3, "--instance-seed", 2, "--episodes", 8000]
    res = run("simulate", *args, "--behaviour", "uniform", "--seed", 1, "--out", d / "logs.parquet",
              "--spec-out", d / "spec.json", "--mdp-out", d / "mdp.npz")
    assert res.exit_code == 0, res.output
    return d


@pytest.mark.parametrize("lower, interval, said", [(0.71, [0.68, 0.70], True), (0.70, [0.68, 0.70], False),
                                                   (0.69, [0.68, 0.70], False), (0.9, None, False)])
def test_improvement_is_said_only_above_the_clinicians_upper_end(lower, interval, said):
    assert improvement_certified(lower, interval) is said
    cert = {"p": {"lower_bound": lower, "interval": [lower, 1.0], "confidence": 0.95,
                  "improvement_certified": improvement_certified(lower, interval)}}
    text = "\n".join(certification_lines(cert, interval))
    assert (IMPROVEMENT in text) is said


def test_split_is_disjoint_and_a_function_of_the_unit_id(files):
    spec = load_spec(files / "spec.json")
    prepared = prepare_logs(files / "logs.parquet", spec)
    train, held = split_held_out(prepared)
    a = set(train.bounded.select("unit_id").collect()["unit_id"])
    b = set(held.bounded.select("unit_id").collect()["unit_id"])
    assert a and b and not (a & b) and len(a | b) == 8000
    assert 0.45 < len(b) / 8000 < 0.55  # a fair hash: 8,000 units, sd 0.56%: false failure < 1e-15
    # the same ids in another order and with other data fall in the same parts
    shuffled = prepared.bounded.collect().sample(fraction=1.0, shuffle=True, seed=0).with_columns(
        pl.col("reward") * 0.5).lazy()
    _, held2 = split_held_out(type(prepared)(**{**prepared.__dict__, "bounded": shuffled}))
    assert set(held2.bounded.select("unit_id").collect()["unit_id"]) == b


def test_pipeline_hold_out_certifies_each_policy_and_charges_the_ledger(files, tmp_path):
    spec = load_spec(files / "spec.json")
    ledger = tmp_path / "b.ledger"
    assert run("budget", "init", ledger, "--dataset", spec.dataset_id, "--rho-total", "10").exit_code == 0
    res = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--out",
              tmp_path / "o", "--hold-out", "--audit-trials", 0, "--ledger", ledger, "--mdp", files / "mdp.npz")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    held = summary["held_out_certification"]
    assert set(held["policies"]) == {p["name"] for p in summary["policies"]} & {"dp-pbb", "dp-apvi"} != set()
    for name, c in held["policies"].items():
        exact = next(p for p in summary["policies"] if p["name"] == name)["value"]
        assert c["lower_bound"] <= exact  # fails with probability < 5% (OS noise)
        assert f"{name}: certified value {c['lower_bound']:.4f}" in res.stdout
    assert "clinicians: DP interval" in res.stdout
    assert "**Held-out certification**" in (tmp_path / "o" / "report.md").read_text()
    notes = [line for line in res.stdout.splitlines() if "is a pessimistic estimate" in line]
    assert notes and all("held-out lower bound is the certificate" in line for line in notes)
    assert "--hold-out)" not in res.stdout + (tmp_path / "o" / "report.md").read_text()  # no advice to do what was done
    entries = ledger_status(ledger)["entries"]
    assert sum("held-out certification" in e.get("description", "") for e in entries) == len(held["policies"])


def test_a_refused_hold_out_run_says_the_ledger_counts_the_held_out_part_too(files, tmp_path):
    """--rho 0.6 --hold-out on 1 left: refused as rho=~1.2, which named no reason before (the held-out part)."""
    spec = load_spec(files / "spec.json")
    ledger = tmp_path / "b.ledger"
    assert run("budget", "init", ledger, "--dataset", spec.dataset_id, "--rho-total", "1").exit_code == 0
    res = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 0.6, "--out",
              tmp_path / "o", "--hold-out", "--audit-trials", 0, "--ledger", ledger)
    assert res.exit_code == 3 and "Traceback" not in res.output
    msg = " ".join(res.output.split())
    assert "would exceed the budget" in msg and "the run's parts (0.6) plus the held-out certification" in msg
    assert "parallel composition" in msg and "Give the ledger twice the budget" in msg
    assert not (tmp_path / "o").exists() and ledger_status(ledger)["n_entries"] == 0


def test_pipeline_hold_out_fraction_from_the_cli(files, tmp_path):
    """--hold-out-fraction 0.3: 30% of the units certify, with m from the coverage rule (not the default)."""
    res = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--out",
              tmp_path / "o", "--hold-out", "--hold-out-fraction", 0.3, "--audit-trials", 0, "--mdp",
              files / "mdp.npz", "--seed", 3)
    assert res.exit_code == 0, res.output
    held = json.loads((tmp_path / "o" / "summary.json").read_text())["held_out_certification"]
    assert held["hold_out_fraction"] == 0.3 and "< 0.3 * 2^32" in held["split"]
    assert held["policies"] and all(c["coverage"] != 10_000.0 for c in held["policies"].values())


@pytest.mark.parametrize("extra, said", [(["--hold-out", "--hold-out-fraction", "1.2"],
                                          "held-out fraction must lie strictly between 0 and 1"),
                                         (["--hold-out-fraction", "0.3"], "`--hold-out-fraction` needs `--hold-out`")])
def test_pipeline_bad_hold_out_fraction_is_one_line_and_writes_nothing(files, tmp_path, extra, said):
    res = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--out",
              tmp_path / "o", "--audit-trials", 0, *extra)
    assert res.exit_code != 0 and said in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_pipeline_dp_apvi_c2_is_used_certified_on_held_out_units_and_resumes_only_with_the_same_c2(files, tmp_path):
    """--dp-apvi-c2 0: DP-APVI without its privacy term C2 S H E iota / n (the paper's 16 by default); its own
    pessimistic value is never a certificate; --hold-out certifies the policy on held-out units instead."""
    res = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--out",
              tmp_path / "o", "--hold-out", "--audit-trials", 0, "--mdp", files / "mdp.npz", "--seed", 4,
              "--dp-apvi-c2", 0)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    apvi = next(p for p in summary["policies"] if p["name"] == "dp-apvi")
    assert json.loads((tmp_path / "o" / apvi["path"] / "policy.json").read_text())["parameters"]["C2"] == 0.0
    assert apvi["certified_value"] is None and apvi["pessimistic_estimate"] is not None
    c = summary["held_out_certification"]["policies"]["dp-apvi"]
    assert c["lower_bound"] <= apvi["value"]  # seeded; fails w.p. < 5% for a fresh seed
    assert "dp-apvi: certified value" in res.stdout and "is a pessimistic estimate, not a certificate" in res.stdout
    spec = load_spec(files / "spec.json")
    conf = dict(logs=str(files / "logs.parquet"), spec=str(files / "spec.json"), rho=1.0, out="o")
    assert (fingerprint(PipelineConfig(**conf, dp_apvi_c2=0.0), spec, files / "logs.parquet")["configuration"]
            != fingerprint(PipelineConfig(**conf), spec, files / "logs.parquet")["configuration"])
    for bad in (-1.0, float("nan"), "0"):
        with pytest.raises(UsageError, match="`dp_apvi_c2` must be a finite number >= 0"):
            PipelineConfig(**conf, dp_apvi_c2=bad)


def test_pbb_share_zero_gives_the_release_its_part_and_certifies_dp_apvi_alone(files, tmp_path):
    """--pbb-share 0: DP-PBB is not trained (said in summary.json), the release gets 1 - value_share of the
    budget, and --hold-out certifies DP-APVI with the whole held-out budget (docs/results.md's setting)."""
    sample = Path(__file__).resolve().parents[2] / "sample_data"  # a public reward: DP-PBB would run
    res = run("pipeline", sample / "icu_sepsis_clinicians_20k.parquet", "--spec", sample / "icu_sepsis_spec.json",
              "--rho", 2, "--out", tmp_path / "o", "--hold-out", "--hold-out-fraction", 0.2, "--audit-trials", 0,
              "--seed", 6, "--dp-apvi-c2", 0, "--pbb-share", 0)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [p["name"] for p in summary["policies"]] == ["dp-apvi"]
    assert any(n["name"] == "dp-pbb" and "pbb_share 0" in n["reason"] for n in summary["not_trained"])
    parts = {p["name"]: p["rho"] for p in summary["privacy"]["details"]["parts"]}
    assert parts["release"] == pytest.approx(0.9 * 2)
    held = summary["held_out_certification"]["policies"]
    assert list(held) == ["dp-apvi"] and held["dp-apvi"]["guarantee"]["rho"] == pytest.approx(2.0)
    for bad in ("1", "-0.1"):
        r = run("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--out",
                tmp_path / f"b{bad}", "--pbb-share", bad)
        assert r.exit_code == 2 and "pbb-share` must be a number in [0, 1)" in r.output and "Traceback" not in r.output


def test_held_out_units_estimate_scales_the_training_count():
    """N'/k training units at least; times f/(1-f) held out; None without the clinicians' release."""
    stats = SimpleNamespace(episodes=14_000.0, max_episodes=2)
    assert held_out_units_estimate(stats, 0.3) == pytest.approx(7_000 * 0.3 / 0.7)
    assert held_out_units_estimate(SimpleNamespace(episodes=-5.0, max_episodes=1), 0.5) == 0.0
    assert held_out_units_estimate(None, 0.5) is None


def test_resume_fingerprint_holds_the_held_out_fraction(files):
    """A run stopped with one split is not resumed with another (its policies trained on other units)."""
    spec = load_spec(files / "spec.json")
    conf = dict(logs=str(files / "logs.parquet"), spec=str(files / "spec.json"), rho=1.0, out="o", hold_out=True)
    a = fingerprint(PipelineConfig(**conf), spec, files / "logs.parquet")["configuration"]
    b = fingerprint(PipelineConfig(**conf, hold_out_fraction=0.3), spec, files / "logs.parquet")["configuration"]
    assert a != b


def test_hold_out_with_negative_rewards_certifies_in_declared_units(files, tmp_path):
    """Before: a -1/0/+1 spec with --hold-out was refused (the evaluation needed reward_range [0, r_max]). Now the
    evaluation shifts by the range's lower end (docs/certificates.md, "Reward ranges"): the same logs under
    reward_range [-1, 1] are certified, and the bound lies in the declared value range [-H, H]."""
    doc = json.loads((files / "spec.json").read_text())
    doc["reward_range"] = [-1.0, 1.0]
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    res = run("pipeline", files / "logs.parquet", "--spec", tmp_path / "spec.json", "--rho", 2, "--out",
              tmp_path / "o", "--hold-out", "--audit-trials", 0, "--mdp", files / "mdp.npz", "--seed", 5)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    held = summary["held_out_certification"]["policies"]
    assert held
    for name, c in held.items():
        exact = next(p for p in summary["policies"] if p["name"] == name)["value"]
        assert -3.0 <= c["lower_bound"] <= exact <= c["interval"][1] <= 3.0  # fails w.p. < 10% per policy (seeded)


def test_the_held_out_clinicians_interval_says_its_level():
    """Session 10 (fresh user): the held-out block printed `clinicians: DP interval [lo, hi]` with no level."""
    cert = {"p": {"lower_bound": 0.5, "interval": [0.5, 1.0], "confidence": 0.95, "improvement_certified": False}}
    lines = certification_lines(cert, [0.68, 0.70], clinicians_confidence=0.95)
    assert "clinicians: DP interval [0.6800, 0.7000] (two-sided, 95%)" in lines


def test_an_improvement_states_the_probability_that_both_claims_hold():
    """The verdict needs the policy's lower bound and the clinicians' upper end together: a union bound."""
    from privaudit.pipeline.certify import IMPROVEMENT, certification_lines

    cert = {"dp-apvi": {"lower_bound": 0.71, "interval": [0.70, 0.80], "confidence": 0.95,
                        "improvement_certified": True},
            "dp-pbb": {"lower_bound": 0.60, "interval": [0.58, 0.79], "confidence": 0.95,
                       "improvement_certified": False}}
    lines = certification_lines(cert, (0.68, 0.69), 0.95)
    assert IMPROVEMENT in lines[0] and "probability >= 90%" in lines[0]
    assert "probability" not in lines[1] and "no improvement certified" in lines[1]


def test_certify_is_the_pre_registered_preset(files, tmp_path):
    """`--certify` = --hold-out --hold-out-fraction 0.3 --dp-apvi-c2 0 --pbb-share 0 (docs/results.md): the same
    summary as those flags for a seed; refused with another value of one of them (one line, nothing written)."""
    common = ("pipeline", files / "logs.parquet", "--spec", files / "spec.json", "--rho", 2, "--audit-trials", 0,
              "--mdp", files / "mdp.npz", "--seed", 4, "--json")
    a = run(*common, "--out", tmp_path / "a", "--certify")
    b = run(*common, "--out", tmp_path / "b", "--hold-out", "--hold-out-fraction", 0.3, "--dp-apvi-c2", 0,
            "--pbb-share", 0)
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    held = sa["held_out_certification"]
    assert held["hold_out_fraction"] == 0.3 and set(held["policies"]) == {"dp-apvi"}
    drop = ("created", "out", "private_log", "run_id")
    assert json.dumps({k: v for k, v in sa.items() if k not in drop}, sort_keys=True, default=str).replace(
        str(tmp_path / "a"), "X") == json.dumps({k: v for k, v in sb.items() if k not in drop}, sort_keys=True,
                                                default=str).replace(str(tmp_path / "b"), "X")
    bad = run(*common, "--out", tmp_path / "c", "--certify", "--hold-out-fraction", 0.5)
    assert bad.exit_code == 2 and "--certify sets --hold-out-fraction 0.3" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "c").exists()
    same = run(*common, "--out", tmp_path / "d", "--certify", "--pbb-share", 0)  # the preset's own value: fine
    assert same.exit_code == 0, same.output


def test_held_out_split_of_capped_logs_keeps_no_stale_parts(tmp_path, monkeypatch):
    """Capped logs counted part by part (``bounded_parts``, issue 33), then split: each side's parts must hold
    its own units only. ``replace(prepared, bounded=...)`` used to keep the whole log's parts, so a count of the
    training side read the held-out units too (latent: the pipeline splits before it caps)."""
    df = random_log(np.random.default_rng(5), 300, H=4, S=4, A=2, n_units=90)
    df.write_parquet(tmp_path / "logs.parquet")
    spec = load_spec(write_spec(tmp_path, H=4, S=4, A=2, k=4, terminals=(), unit_column="patient"))
    monkeypatch.setenv(PART_ROWS_VARIABLE, "200")  # parts of about 100 rows: several parts
    capped = prepare_logs(tmp_path / "logs.parquet", spec, repairs=RepairLimit(accept=True)).with_cell_cap(
        1, stationary=True)
    assert len(capped.bounded_parts()) > 3

    def units(frames):
        return pl.concat([f.select("unit_id") for f in frames]).collect()["unit_id"].to_list()

    train, held = split_held_out(capped, 0.4)
    for side in (train, held):
        in_parts = units(side.bounded_parts())
        assert sorted(in_parts) == sorted(units([side.bounded]))
        assert len(side.bounded_parts()) == len(capped.bounded_parts())  # still counted part by part
    assert not set(units([train.bounded])) & set(units([held.bounded]))
    assert sorted(units([train.bounded]) + units([held.bounded])) == sorted(units([capped.bounded]))
    # any other replace of the frame drops the parts rather than keep those of another frame
    other = replace(capped, bounded=capped.bounded.filter(pl.col("unit_id") < 10))
    assert len(other.bounded_parts()) == 1 and sorted(units(other.bounded_parts())) == sorted(units([other.bounded]))
