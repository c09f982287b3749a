"""privaudit.data.prepare: logs validated once and bounded once per entry point; one fatal-rule gate.

The counts are taken with :func:`tests._spy.spy_everywhere`, which replaces
the function under every name that holds it, so they do not depend on where
the library imports it.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.data import bounding, io, validate
from privaudit.data.prepare import BOUNDING_RULES, prepare_logs
from privaudit.core.errors import ValidationFailed
from privaudit.learners.linear import train_from_logs as linear_train
from privaudit.learners.tabular.train import train_from_logs as tabular_train
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.pipeline import run_pipeline
from privaudit.privacy import budget as budget_mod
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.ledger import init_ledger, ledger_status
from privaudit.core.spec import load_spec
from privaudit.release.tabular import release_logs
from tests._spy import spy_everywhere


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("prepare")
    mdp = random_tabular_mdp(4, 2, 3, instance_seed=3)
    doc = random_tabular_spec_doc(mdp, dataset_id="prep")
    (d / "spec.json").write_text(json.dumps(doc))
    (d / "spec_linear.json").write_text(json.dumps(dict(doc, features={"map": "one-hot"})))
    df = simulate(mdp, behaviour_policy("mix:0.5", mdp), 300, np.random.default_rng(4))
    write_logs(df, d / "logs.parquet")
    bad = df.with_columns(reward=pl.when(pl.int_range(pl.len()) == 7).then(float("nan")).otherwise(pl.col("reward")))
    bad.write_parquet(d / "bad.parquet")
    return d


def test_pipeline_with_features_and_ledger_validates_once_and_bounds_once(world, tmp_path, monkeypatch):
    validated = spy_everywhere(monkeypatch, validate.validate_logs)
    bounded = spy_everywhere(monkeypatch, bounding.bound_contributions)
    scanned = spy_everywhere(monkeypatch, io.scan_logs)
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "prep", 10.0)
    resolved = spy_everywhere(monkeypatch, budget_mod.resolve_budget)
    checked = spy_everywhere(monkeypatch, ledger_mod.check_budget)
    charged = spy_everywhere(monkeypatch, ledger_mod.charge)
    res = CliRunner().invoke(main, ["pipeline", str(world / "logs.parquet"), "--spec", str(world / "spec_linear.json"),
                                    "--rho", "2", "--out", str(tmp_path / "run"), "--ledger", str(ledger),
                                    "--audit-trials", "65", "--seed", "5"])  # 65: the real minimum
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {p["name"] for p in summary["policies"]} == {"dp-apvi", "dp-vapvi"}  # both learners read the logs
    assert ledger_status(ledger)["rho_spent_float"] == pytest.approx(2.0, rel=1e-12)
    assert len(validated) == 1
    assert len(scanned) == 1
    # the auditor bounds each neighbouring dataset it builds (that is the audited mechanism);
    # every other bounding is of the logs, and there is one.
    of_logs = [c for c in bounded if not any(m.startswith("privaudit.audit") for m in c["stack"])]
    assert len(of_logs) == 1, [c["stack"][:3] for c in bounded]
    assert len(bounded) > 1  # the audit ran and its own boundings were seen, so the filter above is not vacuous
    # the budget: resolved once (the pipeline's entry point; parts, release, DP-VAPVI and the audit take it
    # from there), the ledger checked once (the whole budget, before any row is read) and charged once per
    # part, from each part's event, the parts adding up to the budget
    assert len(resolved) == 1 and resolved[0]["kwargs"]["rho"] == 2.0
    assert len(checked) == 1
    assert len(charged) == 3
    descriptions = [c["args"][3] for c in charged]
    assert [d.split(":")[0] for d in descriptions] == ["pipeline, release part", "pipeline, behaviour-value part",
                                                       "pipeline, dp-vapvi part"]
    parts = {p["name"]: p["rho"] for p in summary["privacy"]["details"]["parts"]}
    assert sorted(float(c["args"][2]) for c in charged) == sorted(parts.values())
    assert sum(parts.values()) <= 2.0 and summary["privacy"]["event"]["kind"] == "composed"


@pytest.mark.parametrize("entry", ["release", "tabular", "linear", "pipeline"])
def test_one_gate_one_message(world, tmp_path, entry):
    """Every entry point refuses fatally broken logs with the same message, before writing anything."""
    spec = load_spec(world / "spec_linear.json")
    bad = world / "bad.parquet"
    with pytest.raises(ValidationFailed) as ref:
        prepare_logs(bad, spec)
    calls = {
        "release": lambda: release_logs(bad, spec, rho=1.0, out=tmp_path / "r", seed=1),
        "tabular": lambda: tabular_train(bad, spec, algo="ve"),
        "linear": lambda: linear_train(bad, spec, "vapvi"),
        "pipeline": lambda: run_pipeline(bad, world / "spec_linear.json", rho=1.0, out=tmp_path / "p", audit_trials=0),
    }
    with pytest.raises(ValidationFailed) as got:
        calls[entry]()
    assert str(got.value) == str(ref.value)
    assert "[not_finite] row 7" in str(got.value) and "refused before anything was computed" in str(got.value)
    assert list(tmp_path.iterdir()) == []


def test_bounding_rules_pass_the_gate_and_are_bounded(world, tmp_path):
    """Rules bounding repairs are not fatal: a reward above the range is clipped, the report says so."""
    spec = load_spec(world / "spec.json")
    df = pl.read_parquet(world / "logs.parquet")
    hi = spec.reward_range[1]
    df.with_columns(reward=pl.when(pl.int_range(pl.len()) == 0).then(hi + 5.0).otherwise(pl.col("reward"))) \
        .write_parquet(tmp_path / "over.parquet")
    p = prepare_logs(tmp_path / "over.parquet", spec)
    assert p.validation.counts["reward_out_of_range"] == 1 and "reward_out_of_range" in BOUNDING_RULES
    assert p.bounding.rewards_clipped == 1
    rows = p.collect(["row", "reward"]).sort("row")
    assert rows["reward"][0] == 1.0 and rows["reward"].max() <= 1.0  # clipped to r_max, scaled to 1
    assert p.raw.collect()["reward"][0] == hi + 5.0  # the raw view is the logs as written
    assert "row" not in p.raw.collect_schema().names()
    assert repr(p) == f"PreparedLogs(path={str(tmp_path / 'over.parquet')!r}, spec_hash={spec.hash()!r})"  # no counts
