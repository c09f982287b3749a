"""Issue 13 item 10, the smaller items: partitioned folders and mixed integer widths are read; a tiny budget
fails up front; numbers are printed as users write them; train refuses a manifest that disagrees with the spec."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.data.prepare import prepare_logs
from privaudit.data.validate import validate_logs
from privaudit.core.errors import ArtifactError
from privaudit.core.formatting import num
from privaudit.learners.tabular.train import train_from_release
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.simulate import simulate
from privaudit.core.spec import load_spec
from privaudit.release.tabular import release_logs
from tests._release_logs import spec_doc
from tests._spy import watch_reads

H, S, A = 3, 4, 2


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    df = simulate(random_tabular_mdp(S, A, H, 0), np.full((S, A), 1.0 / A), 60, np.random.default_rng(0))
    df.write_parquet(d / "logs.parquet")
    (d / "spec.json").write_text(json.dumps(spec_doc(H=H, S=S, A=A, terminals=(), unit_column="unit_id", k=2)))
    return d, df


def test_hive_partitions_with_mixed_integer_widths_are_read(logs, tmp_path):
    d, df = logs
    root = tmp_path / "parts"
    (root / "year=2021").mkdir(parents=True)
    (root / "year=2022").mkdir()
    (root / ".tmp-hidden").mkdir()
    first = df.filter(pl.col("episode_id") < 30).with_columns(pl.col("state", "next_state").cast(pl.Int16),
                                                             pl.col("reward").cast(pl.Float32))
    second = df.filter(pl.col("episode_id") >= 30).with_columns(pl.col("state", "next_state", "step")
                                                               .cast(pl.Int64))
    first.write_parquet(root / "year=2021" / "part-0.parquet")
    second.write_parquet(root / "year=2022" / "part-0.parquet")
    df.head(3).write_parquet(root / ".tmp-hidden" / "junk.parquet")  # a hidden temporary: not part of the log
    spec = load_spec(d / "spec.json")
    report = validate_logs(root, spec)
    assert report.ok and report.rows == df.height, report.counts
    bounded = prepare_logs(root, spec).bounded.collect().sort("row")
    whole = prepare_logs(d / "logs.parquet", spec).bounded.collect().sort("row")
    for c in ("episode_id", "step", "state", "action", "next_state"):
        np.testing.assert_array_equal(bounded[c].to_numpy(), whole[c].to_numpy())
    np.testing.assert_allclose(bounded["reward"].to_numpy(), whole["reward"].to_numpy(), rtol=1e-6)
    res = CliRunner().invoke(main, ["validate", str(root), "--spec", str(d / "spec.json")])
    assert res.exit_code == 0, res.output


def test_ids_of_different_kinds_across_parts_are_still_refused(logs, tmp_path):
    d, df = logs
    root = tmp_path / "parts"
    root.mkdir()
    df.head(6).write_parquet(root / "a.parquet")
    df.tail(6).with_columns(pl.col("episode_id").cast(pl.String)).write_parquet(root / "b.parquet")
    res = CliRunner().invoke(main, ["validate", str(root), "--spec", str(d / "spec.json")])
    assert res.exit_code == 1 and "same schema" in res.output


@pytest.mark.parametrize("cmd", ["release", "pipeline"])
def test_a_tiny_budget_fails_up_front(logs, tmp_path, cmd):
    d, _ = logs
    part = tmp_path / "logs"
    part.mkdir()
    pl.read_parquet(d / "logs.parquet").write_parquet(part / "p.parquet")
    with watch_reads(part) as reads:
        res = CliRunner().invoke(main, [cmd, str(part), "--spec", str(d / "spec.json"), "--rho", "1e-12",
                                        "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "is too small" in res.output and "1e-12" in res.output, res.output
    assert "internal error" not in res.output and reads == [] and not (tmp_path / "o").exists()


def test_numbers_are_printed_as_users_write_them(logs, tmp_path):
    assert [num(x) for x in (1e-06, 1.0000000000000002, 4.999999999999816, 2.5e20)] == ["1e-6", "1", "5", "2.5e20"]
    d, _ = logs
    res = CliRunner().invoke(main, ["release", str(d / "logs.parquet"), "--spec", str(d / "spec.json"),
                                    "--epsilon", "5", "--delta", "1e-6", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "epsilon=5, delta=1e-6)" in res.output and "e-06" not in res.output


@pytest.mark.parametrize("edit,needle", [
    # k lowered by hand, in the stored event too (the manifest's own sensitivities, made for k = 2, still pass
    # its consistency check; lowering k without the event is refused by the reader already)
    (lambda m: [u.update(max_episodes=1) for u in (m["privacy_unit"], m["guarantee"]["privacy_unit"])]
     + [leaf["unit"].update(k=1) for leaf in m["event"]["events"] + m["guarantee"]["event"]["events"]],
     "k (privacy_unit.max_episodes): manifest 1, spec 2"),
    (lambda m: m["domain"].update(reward_range=[-1.0, 1.0]), "reward_range"),
    (lambda m: m["domain"].update(terminal_states=[3]), "terminal_states"),
    # before: accepted, and the policy named the edited dataset (fresh-user pass)
    (lambda m: m.update(dataset_id="another-dataset"), "dataset_id: manifest another-dataset, spec "),
])
def test_train_refuses_a_manifest_that_disagrees_with_the_spec(logs, tmp_path, edit, needle):
    d, _ = logs
    spec = load_spec(d / "spec.json")
    rel = release_logs(d / "logs.parquet", spec, rho=1.0, out=tmp_path / "r", seed=1).out
    train_from_release(rel, spec=spec)  # as written: accepted
    mpath = rel / "manifest.json"
    m = json.loads(mpath.read_text())
    edit(m)
    mpath.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="disagrees with the spec") as info:
        train_from_release(rel, spec=spec)
    assert needle in str(info.value)


def test_a_table_of_the_wrong_size_is_named_without_an_empty_missing_list(logs, tmp_path):
    """Before: "... must hold 8 rows with columns [...]; found 16 rows, missing []." (fresh-user pass)."""
    d, _ = logs
    spec = load_spec(d / "spec.json")
    rel = release_logs(d / "logs.parquet", spec, rho=1.0, out=tmp_path / "r", seed=1).out
    m = json.loads((rel / "manifest.json").read_text())
    S = m["domain"]["S"]
    m["domain"]["S"] = S - 1
    (rel / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError) as info:
        train_from_release(rel)
    H, A = m["domain"]["H"], m["domain"]["A"]  # a per-step release (the library's default)
    assert str(info.value) == (f"{rel / 'visits.parquet'}: must hold {H * (S - 1) * A} rows with columns "
                               f"['h', 'state', 'action', 'value']; found {H * S * A} rows. The release is corrupt.")


def test_audit_trials_minimum_is_the_real_one(logs, tmp_path):
    """`audit --trials` used to accept 20..64 and then refuse them after validation (issue 13 item 10)."""
    from privaudit.audit.choice import MIN_TRIALS, selection_size

    assert all(selection_size(t, None) >= 20 and t - selection_size(t, None) >= 10
               for t in range(MIN_TRIALS, MIN_TRIALS + 500))
    assert selection_size(MIN_TRIALS - 1, None) < 20
    d, _ = logs
    args = ["audit", "--mechanism", "release", "--logs", str(d / "logs.parquet"), "--spec", str(d / "spec.json"),
            "--claim-rho", "1", "--seed", "0"]
    low = CliRunner().invoke(main, args + ["--trials", str(MIN_TRIALS - 1), "--out", str(tmp_path / "a.json")])
    assert low.exit_code == 2 and f"range{MIN_TRIALS}<=x" in low.output.replace(" ", ""), low.output
    ok = CliRunner().invoke(main, args + ["--trials", str(MIN_TRIALS), "--out", str(tmp_path / "b.json")])
    assert ok.exit_code in (0, 3) and "selection and" not in ok.output, ok.output


MECHS = '''
import numpy as np


def constant_stat(logs, rng):
    """A statistic the pair leaves unchanged: a constant plus noise."""
    return np.array([3.0 + rng.normal(0, 1.0)])


def count_rows(logs, rng):
    """Rows with far too little noise: the pair (k episodes added, one removed) separates perfectly."""
    return np.array([float(logs.height) + rng.normal(0, 0.3)])
'''


def _audit_mine(logs, tmp_path, name, trials="200"):
    d, _ = logs
    (tmp_path / "mine.py").write_text(MECHS)
    res = CliRunner().invoke(main, ["audit", "--mechanism", f"{tmp_path / 'mine.py'}:{name}", "--logs",
                                    str(d / "logs.parquet"), "--spec", str(d / "spec.json"), "--claim-epsilon", "1",
                                    "--delta", "1e-6", "--trials", trials, "--seed", "0",
                                    "--out", str(tmp_path / f"{name}.json")])
    return res, json.loads((tmp_path / f"{name}.json").read_text())


def test_audit_says_when_the_pair_does_not_change_the_output(logs, tmp_path):
    res, rep = _audit_mine(logs, tmp_path, "constant_stat")
    assert "does not change the mechanism's output" in " ".join(rep["messages"]), rep["messages"]
    res, rep = _audit_mine(logs, tmp_path, "count_rows")
    assert not any("does not change" in m for m in rep["messages"])


def test_audit_says_when_the_bound_is_the_resolution_limit(logs, tmp_path):
    """The release run at rho = 1e4 (noise sd < 0.03 per count) against a rho = 0.5 claim: the pair
    (counts changed by >= 1) separates perfectly; the bound is then the cap of the evaluation runs.
    False failure: a noisy count crossing half its change at sd < 0.03, probability < 1e-60 per run."""
    d, _ = logs
    res = CliRunner().invoke(main, ["audit", "--mechanism", "release", "--logs", str(d / "logs.parquet"), "--spec",
                                    str(d / "spec.json"), "--claim-rho", "0.5", "--mechanism-rho", "10000",
                                    "--trials", "200", "--seed", "0", "--per-step", "--out",
                                        str(tmp_path / "r.json")])
    assert res.exit_code in (0, 3), res.output  # 140 runs per side cannot reach the claim's epsilon
    rep = json.loads((tmp_path / "r.json").read_text())
    assert any("equals the resolution limit" in m for m in rep["messages"]), rep["messages"]


def test_every_command_applies_and_says_the_same_step_rule(logs, tmp_path):
    """Issue 13 item 7: one default for pooling over h (privaudit.release.tabular.default_stationary) in
    release, train, audit and pipeline: pooled without an MDP, printed on stderr when it applies, silent
    when --stationary / --per-step is given. Before, release/train/audit counted per step by default."""
    d, _ = logs
    L, Sp = str(d / "logs.parquet"), str(d / "spec.json")
    rule = "counts pooled over the steps h (no MDP is given"
    run = CliRunner().invoke
    res = run(main, ["release", L, "--spec", Sp, "--rho", "1", "--seed", "1", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert rule in res.stderr and "`--per-step` overrides" in res.stderr  # the CLI's flag, not the parameter
    assert "`--per-step` is given" in res.stderr and "`stationary`" not in res.stderr
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["domain"]["stationary"] is True
    res = run(main, ["release", L, "--spec", Sp, "--rho", "1", "--seed", "1", "--per-step", "--out",
                     str(tmp_path / "r2")])
    assert res.exit_code == 0 and rule not in res.stderr, res.output
    assert json.loads((tmp_path / "r2" / "manifest.json").read_text())["domain"]["stationary"] is False
    res = run(main, ["train", L, "--spec", Sp, "--algo", "apvi", "--json", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0 and rule in res.stderr, res.output
    assert json.loads(res.stdout)["stationary"] is True
    res = run(main, ["audit", "--mechanism", "release", "--logs", L, "--spec", Sp, "--claim-rho", "1",
                     "--trials", "100", "--seed", "0", "--out", str(tmp_path / "a.json")])
    assert res.exit_code in (0, 3) and rule in res.stderr, res.output
    assert "canary: synthetic-repeat" in res.stderr  # the pooled release's canary
    said = []
    from privaudit.pipeline import run_pipeline

    run_pipeline(L, Sp, rho=1.0, out=tmp_path / "pl", audit_trials=0, seed=1, echo=said.append)
    # the library names its parameter (issue 11: library messages name parameters, the CLI maps them)
    assert any(rule in s and "`stationary`=False overrides" in s for s in said)
    assert not any("--per-step" in s for s in said)
    said.clear()
    run_pipeline(L, Sp, rho=1.0, out=tmp_path / "q", audit_trials=0, seed=1, stationary=False, echo=said.append)
    assert not any("counts pooled" in s or "counts per step" in s for s in said)  # asked: nothing to explain


def test_library_errors_of_audit_and_linear_training_name_parameters(logs):
    """Issue 13 item 8: run_audit and the linear train_from_logs name their Python parameters, not CLI
    flags (the CLI turns `name` into its `--flag`: privaudit.cli.common.as_flags)."""
    from privaudit.audit import run_audit
    from privaudit.core.errors import UsageError
    from privaudit.learners.linear.logs import train_from_logs as train_linear
    from privaudit.learners.options import BudgetRequest

    d, _ = logs
    spec = load_spec(d / "spec.json")
    with pytest.raises(UsageError, match=r"^`trials` must be an integer in \[20, "):
        run_audit(lambda logs, rng: np.zeros(1), None, spec, claim=None, trials=5)
    with pytest.raises(UsageError, match="^`failure_prob` applies to dp-vapvi"):
        train_linear(d / "logs.parquet", spec, "pevi", params={"failure_prob": 0.1})
    with pytest.raises(UsageError, match="^`algo` pevi is not private: it takes no budget"):
        train_linear(d / "logs.parquet", spec, "pevi", budget=BudgetRequest(rho=1.0))


@pytest.mark.parametrize("epsilon", ["1e-300", "1e-100", "1e-20"])
def test_a_tiny_epsilon_is_refused_naming_the_flag(logs, tmp_path, epsilon):
    """Before: epsilon 1e-100 and below failed with "dp_to_zcdp found no bracket for epsilon=1e-300,
    delta=1e-06." (the bracket search doubled from epsilon and never reached rho ~1e-12), and 1e-20 named
    "`rho converted from epsilon` = 1.35914e-12" instead of the flag the user gave."""
    d, _ = logs
    res = CliRunner().invoke(main, ["release", str(d / "logs.parquet"), "--spec", str(d / "spec.json"),
                                    "--epsilon", epsilon, "--delta", "1e-6", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert f"`--epsilon` = {epsilon} is too small" in res.output and "bracket" not in res.output, res.output
    assert not (tmp_path / "r").exists()
