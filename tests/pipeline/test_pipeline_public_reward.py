"""A spec whose public reward or terminal states are false stops the pipeline before anything is written or charged.

The fresh-user case: the bundled ICU-Sepsis sample with its spec's public reward moved from 714 (survival)
to 713 (death). Before, validate said valid and DP-PBB learned a worse policy (0.684 against 0.707) in
silence. Now validation's ``reward_not_public`` refuses the logs (exit 1) and, with ``--mdp``, the spec is
refused against the MDP before any row is read (exit 2). The correct spec still runs: see
tests/pipeline/test_pipeline.py::test_pipeline_split_is_stated_in_exact_decimals (bundled sample, --mdp icu-sepsis).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import privaudit.pipeline.run as run_mod
from privaudit.cli import main
from privaudit.privacy.ledger import init_ledger


@pytest.fixture
def wrong(tmp_path, repo_root):
    """(logs, spec with r(713) = 1 instead of r(714) = 1, a fresh ledger, its bytes)."""
    sample = repo_root / "sample_data"
    doc = json.loads((sample / "icu_sepsis_spec.json").read_text())
    doc["public_reward"]["values"] = {"713": 1.0}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(doc))
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, doc["dataset_id"], 10.0)
    return sample / "icu_sepsis_clinicians_20k.parquet", spec, ledger, ledger.read_bytes()


def test_pipeline_refuses_logs_that_contradict_the_public_reward(wrong, tmp_path):
    logs, spec, ledger, before = wrong
    res = CliRunner().invoke(main, ["pipeline", str(logs), "--spec", str(spec), "--rho", "1", "--audit-trials", "0",
                                    "--ledger", str(ledger), "--out", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert "reward_not_public" in res.output and "Traceback" not in res.output
    # located: row, episode, step, column, the declared value
    assert "row 51, episode 2, step 11: reward 0.0 differs from the spec's public reward r(next_state=713) = 1.0" \
        in res.output and "(column reward)" in res.output
    assert ledger.read_bytes() == before
    assert not any(p.name.startswith(".out") or p.name == "out" for p in tmp_path.iterdir())


def test_pipeline_with_mdp_refuses_the_spec_before_reading_a_row(wrong, tmp_path, monkeypatch):
    logs, spec, ledger, before = wrong
    reads = []
    monkeypatch.setattr(run_mod, "prepare_on", lambda *a, **kw: reads.append(a))
    res = CliRunner().invoke(main, ["pipeline", str(logs), "--spec", str(spec), "--rho", "1", "--audit-trials", "0",
                                    "--mdp", "icu-sepsis", "--ledger", str(ledger), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "$.public_reward" in res.output and "is not the reward of `--mdp` icu-sepsis" in res.output
    assert "Traceback" not in res.output and reads == []
    assert ledger.read_bytes() == before
    assert not any(p.name.startswith(".out") or p.name == "out" for p in tmp_path.iterdir())


def test_pipeline_with_mdp_refuses_other_terminal_states(tmp_path, repo_root):
    doc = json.loads((repo_root / "sample_data" / "icu_sepsis_spec.json").read_text())
    doc["terminal_states"] = [713, 714]
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["pipeline", str(repo_root / "sample_data" / "icu_sepsis_clinicians_20k.parquet"),
                                    "--spec", str(tmp_path / "spec.json"), "--rho", "1", "--audit-trials", "0",
                                    "--mdp", "icu-sepsis", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "$.terminal_states [713, 714]" in res.output and "[715] are terminal in the MDP" in res.output
    assert not (tmp_path / "out").exists()
