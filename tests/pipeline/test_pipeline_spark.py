"""``privaudit pipeline --engine spark``: the same release and policy as polars; refusals before Spark starts.

Uses the session-scoped local[2] SparkSession of tests/conftest.py; skipped (with the reason) where
pyspark or Java is absent, and failed instead in CI (PRIVAUDIT_REQUIRE_SPARK=1).
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from tests._spark import skip_without_spark

skip_without_spark()

from privaudit.cli import main  # noqa: E402
from privaudit.data.validate import validate_logs  # noqa: E402
from privaudit.mdp.simulate import write_logs  # noqa: E402
from privaudit.privacy.ledger import init_ledger, ledger_status  # noqa: E402
from privaudit.core.spec import load_spec  # noqa: E402
from privaudit.data.spark import prepare as spark_prepare  # noqa: E402
from tests.pipeline.test_pipeline import world  # noqa: E402,F401  the pipeline tests' small world (a module fixture)

pytestmark = pytest.mark.spark


def run(*args):
    return CliRunner().invoke(main, ["pipeline", *[str(a) for a in args]])


@pytest.mark.slow  # 7-24 s; test_pipeline_spark_identity.py's default case checks every file byte for byte
def test_spark_pipeline_gives_the_polars_release_and_policy(spark, world, tmp_path):
    """Same logs and seed: release tables, manifest's guarantee, policy, values and the clinicians' DP value (the
    default value share on both engines) are the polars run's."""
    outs = {}
    for engine in ("polars", "spark"):
        outs[engine] = tmp_path / engine
        res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1, "--per-step",
                  "--mdp", world["dir"] / "mdp.npz", "--audit-trials", 0, "--seed", 5, "--out", outs[engine],
                  "--engine", engine)
        assert res.exit_code == 0, res.output
    p, s = outs["polars"], outs["spark"]
    tables = sorted(f.relative_to(p) for f in (p / "release").rglob("*.parquet"))
    assert len(tables) >= 3 and tables == sorted(f.relative_to(s) for f in (s / "release").rglob("*.parquet"))
    for f in tables + sorted(f.relative_to(p) for f in (p / "policies").rglob("*.parquet")):
        assert pl.read_parquet(p / f).equals(pl.read_parquet(s / f)), f
    summaries = [json.loads((o / "summary.json").read_text()) for o in (p, s)]
    assert summaries[0]["privacy"] == summaries[1]["privacy"]
    assert [x["value"] for x in summaries[0]["policies"]] == [x["value"] for x in summaries[1]["policies"]]
    assert summaries[0]["behaviour_value"]["interval"][0] > 0  # the value part ran, on Spark too: the same floats
    assert summaries[0]["behaviour_value"] == summaries[1]["behaviour_value"]
    assert summaries[1]["config"]["value_share"] == 0.1
    private = [json.loads((o / "private" / "local-log.json").read_text()) for o in (p, s)]
    assert private[0]["bounding"] == private[1]["bounding"] and private[1]["engine"] == "spark"


def test_budget_and_ledger_are_checked_before_spark_reads(spark, world, tmp_path, monkeypatch):
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "rt-pipeline", 0.5)
    reads = []
    monkeypatch.setattr(spark_prepare, "read_logs", lambda *a, **kw: reads.append(a))
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1, "--audit-trials", 0,
              "--ledger", ledger, "--out", tmp_path / "out", "--engine", "spark")
    assert res.exit_code == 3, res.output
    assert reads == [] and not (tmp_path / "out").exists() and ledger_status(ledger)["rho_spent_float"] == 0
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec_linear.json", "--rho", 0.4,
              "--audit-trials", 0, "--ledger", ledger, "--out", tmp_path / "out", "--engine", "spark")
    assert res.exit_code == 2 and "feature map" in res.output, res.output
    assert reads == [] and not (tmp_path / "out").exists()
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 0.4,
              "--audit-trials", 0, "--out", tmp_path / "out", "--master", "local[1]")
    assert res.exit_code == 2 and "--master needs --engine spark" in res.output


def test_invalid_logs_stop_the_spark_pipeline_with_nothing_written_or_charged(spark, world, tmp_path):
    bad = world["df"].with_columns(pl.when(pl.int_range(pl.len()) == 5).then(7).otherwise(pl.col("action"))
                                   .alias("action"))
    write_logs(bad, tmp_path / "bad.parquet")
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "rt-pipeline", 1)
    res = run(tmp_path / "bad.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1, "--audit-trials", 0,
              "--ledger", ledger, "--out", tmp_path / "out", "--engine", "spark")
    assert res.exit_code == 1 and "action_out_of_range (1)" in res.output, res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "out").exists() and ledger_status(ledger)["rho_spent_float"] == 0
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())  # no temporary folder left


def test_a_public_reward_the_logs_contradict_stops_the_spark_pipeline(spark, world, tmp_path):
    """The spec declares r(s') = 1{s' = 0}; the logs' rewards are the random MDP's r_h(s, a): Spark's fatal rules
    refuse them (reward_not_public) with nothing written or charged, as polars' validation does."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**world["doc"], "public_reward": {"kind": "next_state", "values": {"0": 1.0}}}))
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "rt-pipeline", 1)
    before = ledger.read_bytes()
    res = run(world["dir"] / "logs.parquet", "--spec", spec, "--rho", 1, "--audit-trials", 0,
              "--ledger", ledger, "--out", tmp_path / "out", "--engine", "spark")
    assert res.exit_code == 1 and "reward_not_public (" in res.output, res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "out").exists() and ledger.read_bytes() == before
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_a_return_bound_the_logs_break_below_stops_the_spark_pipeline(spark, world, tmp_path):
    """The logs earn the public reward r(s') = 1{s' = 0} (so reward_not_public holds); the spec declares
    return_bound [1, 4], which the episodes that never enter state 0 break (return 0): Spark's fatal rules refuse
    them (return_below_bound, the count polars' validation gives) with nothing written or charged."""
    logs = tmp_path / "logs.parquet"
    write_logs(world["df"].with_columns(reward=(pl.col("next_state") == 0).cast(pl.Float64)), logs)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**world["doc"], "public_reward": {"kind": "next_state", "values": {"0": 1.0}},
                                "return_bound": [1.0, 4.0]}))
    report = validate_logs(logs, load_spec(spec))
    below = report.counts["return_below_bound"]
    assert report.fatal == {"return_below_bound": below} and 0 < below < report.episodes
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "rt-pipeline", 1)
    before = ledger.read_bytes()
    res = run(logs, "--spec", spec, "--rho", 1, "--audit-trials", 0, "--ledger", ledger, "--out", tmp_path / "out",
              "--engine", "spark")
    assert res.exit_code == 1 and f"return_below_bound ({below})" in res.output, res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "out").exists() and ledger.read_bytes() == before
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


@pytest.mark.slow
def test_bundled_sample_with_spark_trains_dp_pbb_as_polars(spark, tmp_path):
    """ICU-Sepsis declares a public reward: Spark trains DP-PBB with the share polars gives it, computes the
    clinicians' value part on the cluster, and the run's parts, policies and guarantee are polars' (same seed)."""
    summaries = {}
    for engine in ("polars", "spark"):
        res = run("--rho", 1, "--audit-trials", 0, "--out", tmp_path / engine, "--engine", engine, "--json",
                  "--seed", 3)
        assert res.exit_code == 0, res.output
        assert "dp-pbb is not trained" not in res.output
        summaries[engine] = json.loads((tmp_path / engine / "summary.json").read_text())
    p, s = summaries["polars"], summaries["spark"]
    assert [x["name"] for x in s["policies"]] == [x["name"] for x in p["policies"]] and "dp-pbb" in \
        [x["name"] for x in s["policies"]]
    assert {x["name"] for x in s["privacy"]["details"]["parts"]} == {"release", "behaviour-value", "dp-pbb"}
    assert s["privacy"] == p["privacy"] and s["policies"] == p["policies"]
    assert s["behaviour_value"] == p["behaviour_value"]
    for f in ("policies/dp-pbb/policy.parquet", "release/transitions.parquet"):
        assert (tmp_path / "polars" / f).read_bytes() == (tmp_path / "spark" / f).read_bytes(), f
