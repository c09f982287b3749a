"""No silent change of the estimand (issue 29, item 2), from the CLI where the user meets it.

A hospital export codes death as -1 and survival as +1; a spec declaring ``reward_range`` [0, 1]
makes contribution bounding clip every death to 0, and an H shorter than the stays drops their last
steps. The data holder is told how much each repair changed, and release / train / pipeline stop
before spending anything above ``--max-repair-share`` unless given ``--accept-repairs``.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import RepairsRefused, UsageError
from privaudit.data.bounding import bound_contributions
from privaudit.data.io import scan_logs
from privaudit.data.repairs import RepairLimit, check_repairs, repairs_of
from privaudit.core.spec import DomainSpec
from privaudit.pipeline import PipelineConfig
from privaudit.pipeline.render import render_markdown

#: 60 stays of 3 steps; every third one ends in death (-1), the others in survival (+1): 20 of 180 rows are -1.
N_EPISODES, LENGTH, DEATHS = 60, 3, 20


def _spec_doc(reward_range, H=LENGTH, public_reward=None):
    doc = {"format_version": 1, "dataset_id": "est", "horizon": H, "n_states": 5, "n_actions": 2,
           "terminal_states": [3, 4], "reward_range": list(reward_range),
           "privacy_unit": {"column": None, "max_episodes": 1}, "columns": {"reward": "outcome"}}
    if public_reward is not None:
        doc["public_reward"] = {"kind": "next_state", "values": public_reward}
    return doc


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(folder, logs): states 0-2 in care, 3 death (-1), 4 survival (+1); the reward column is 'outcome'."""
    d = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(0)
    rows = []
    for e in range(N_EPISODES):
        s = int(rng.integers(0, 3))
        for h in range(LENGTH):
            a = int(rng.integers(2))
            last = h == LENGTH - 1
            s2 = (3 if e % 3 == 0 else 4) if last else int(rng.integers(0, 3))
            rows.append((f"S{e:03d}", h, s, a, {3: -1.0, 4: 1.0}.get(s2, 0.0), s2))
            s = s2
    logs = d / "logs.parquet"
    pl.DataFrame(rows, schema=["episode_id", "step", "state", "action", "outcome", "next_state"],
                 orient="row").write_parquet(logs)
    specs = {"wrong": _spec_doc([0, 1]), "right": _spec_doc([-1, 1]), "short": _spec_doc([-1, 1], H=2),
             "public": _spec_doc([-1, 1], public_reward={"3": -1.0, "4": 1.0})}
    for name, doc in specs.items():
        (d / f"{name}.json").write_text(json.dumps(doc))
    return d, logs


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _ledger(d, name):
    led = d / name
    assert run("budget", "init", led, "--dataset", "est", "--rho-total", "10").exit_code == 0
    return led, led.read_bytes()


def test_validate_says_how_much_bounding_changes_and_never_nothing_to_fix(export):
    d, logs = export
    r = run("validate", logs, "--spec", d / "wrong.json")
    # repairs are not fatal (validate lists them), but this share stops release: validate exits 1 as release does
    assert r.exit_code == 1, r.output
    assert "valid for release: no fatal rule is broken." in r.output and "INVALID" not in r.output
    assert "nothing to fix" not in r.output
    # counted in stays (the unit of a return): one -1 per dying stay is 1 row in 9 here but 1 stay in 3
    assert (f"episodes with a reward clipped into the declared reward_range ({DEATHS} rows clipped): "
            f"{DEATHS} of 60 episodes kept (33.33%)") in r.output
    assert "STOP: 1 repair(s) change more than --max-repair-share 0.05" in r.output
    # the same logs under a right declaration: nothing repaired, nothing said about stopping
    ok = run("validate", logs, "--spec", d / "right.json")
    assert ok.exit_code == 0 and "valid: all" in ok.output and "STOP" not in ok.output
    # H declared too short: the steps h >= 2 are dropped, one per stay
    short = run("validate", logs, "--spec", d / "short.json", "--json")
    rep = json.loads(short.stdout)
    assert rep["bounding"]["repairs"]["episode_too_long"] == {"count": 60, "of": 60, "share": 1.0}
    assert rep["bounding"]["steps_dropped"] == 60
    assert rep["repairs_over_max_share"] == ["episode_too_long"]
    assert short.exit_code == 1 and rep["releasable"] and rep["accept_repairs"] is False


@pytest.mark.parametrize("args,code", [((), 1), (("--accept-repairs",), 0), (("--max-repair-share", 0.34), 0),
                                       (("--max-repair-share", 0.33), 1)])
def test_validate_exits_non_zero_exactly_when_release_would_stop(export, tmp_path, args, code):
    """`privaudit validate ... && privaudit release ...` must not go on to a release that stops on its repairs:
    validate's exit code follows release's stop for the same --max-repair-share / --accept-repairs (20 of 60
    stays clipped: 33.3%)."""
    d, logs = export
    val = run("validate", logs, "--spec", d / "wrong.json", *args)
    assert val.exit_code == code, val.output
    rel = run("release", logs, "--spec", d / "wrong.json", "--rho", 1, "--seed", 1, "--out", tmp_path / "rel", *args)
    assert rel.exit_code == code, rel.output
    if code:
        assert "STOP: 1 repair(s)" in val.output and "max-repair-share" in rel.stderr
    else:
        assert "STOP" not in val.output


def test_pipeline_stops_before_spending_on_a_wrong_reward_range(export):
    d, logs = export
    led, before = _ledger(d, "stop.ledger")
    out = d / "run_stop"
    r = run("pipeline", logs, "--spec", d / "wrong.json", "--rho", 1, "--out", out, "--ledger", led,
            "--audit-trials", 0)
    assert r.exit_code == 1, r.output
    assert "with a reward clipped into the declared reward_range (20 rows clipped): 20 of 60 episodes" in r.stderr
    assert "`--max-repair-share` 0.05" in r.stderr and "`--accept-repairs`" in r.stderr
    assert "Traceback" not in r.output
    assert not out.exists() and led.read_bytes() == before  # nothing written, nothing charged
    assert not [p for p in d.iterdir() if p.name.startswith(".run_stop")]  # no temporary folder left


def test_pipeline_goes_on_when_told_and_keeps_the_decision_private(export):
    d, logs = export
    led, before = _ledger(d, "go.ledger")
    out = d / "run_go"
    r = run("pipeline", logs, "--spec", d / "wrong.json", "--rho", 1, "--out", out, "--ledger", led,
            "--audit-trials", 0, "--accept-repairs", "--json")
    assert r.exit_code == 0, r.output
    assert "rewards clipped into the declared range: 20 rows, in 20 episodes (33.33% of the kept episodes)" in r.stderr
    assert led.read_bytes() != before  # spent, as asked
    private = json.loads((out / "private" / "local-log.json").read_text())
    assert private["bounding"]["repairs"]["reward_out_of_range"]["count"] == DEATHS
    assert private["repair_limit"] == {"max_share": 0.05, "accepted": True}
    shared = (out / "summary.json").read_text()
    assert "repair" not in shared and "accept" not in shared  # the stop/go is in no shareable file
    # item 6: without a public reward DP-PBB is not trained, and the run says so
    summary = json.loads(shared)
    assert [n["name"] for n in summary["not_trained"]] == ["dp-pbb"]
    assert "dp-pbb is not trained: the spec declares no public reward" in r.stderr
    assert "**`dp-pbb` was not trained:**" in (out / "report.md").read_text()
    # item 6: a sampling part clipped to 0 under the noise is said, not printed as "sampling 0.0000"
    b = summary["behaviour_value"]
    b["sampling_sd"] = 0.0123  # the run's own value is noisy (OS entropy) and may itself be clipped to 0
    assert "sampling 0.0123" in render_markdown(summary)
    b["sampling_sd"] = 0.0  # what estimate_behaviour_value returns when the noisy residual sum is clipped
    text = render_markdown(summary)
    assert "sampling 0.0000" not in text and "the sampling part could not be estimated" in text


def test_release_and_train_stop_too_and_a_larger_share_lets_them_go(export):
    d, logs = export
    led, before = _ledger(d, "rt.ledger")
    rel = run("release", logs, "--spec", d / "short.json", "--rho", 1, "--out", d / "rel", "--ledger", led)
    assert rel.exit_code == 1 and "episodes truncated at H=2 (60 steps dropped): 60 of 60 episodes kept" in rel.stderr
    assert not (d / "rel").exists() and not (d / "rel.local-log.json").exists() and led.read_bytes() == before
    for algo, budget in (("dp-apvi", ["--rho", 1]), ("dp-pbb", ["--rho", 1]), ("apvi", [])):
        spec = d / ("public.json" if algo == "dp-pbb" else "wrong.json")
        args = ["train", logs, "--spec", spec, "--algo", algo, *budget, "--out", d / f"pol-{algo}", "--ledger", led]
        if algo == "apvi":
            args = args[:-2]
        if algo == "dp-pbb":  # a right spec with a public reward, declared too short
            doc = json.loads(spec.read_text())
            doc["horizon"] = 2
            spec = d / "public_short.json"
            spec.write_text(json.dumps(doc))
            args[3] = spec
        r = run(*args)
        assert r.exit_code == 1, (algo, r.output)
        assert "stopped before anything was spent, charged or written" in r.stderr
        assert not (d / f"pol-{algo}").exists() and not (d / f"pol-{algo}.release").exists()
    assert led.read_bytes() == before
    ok = run("release", logs, "--spec", d / "short.json", "--rho", 1, "--out", d / "rel", "--max-repair-share", 1)
    assert ok.exit_code == 0, ok.output
    assert json.loads((d / "rel.local-log.json").read_text())["bounding"]["steps_dropped"] == 60


def test_train_dp_pbb_prints_its_certificate(export):
    d, logs = export
    out = d / "pbb"
    r = run("train", logs, "--spec", d / "public.json", "--algo", "dp-pbb", "--rho", 4, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    cert = json.loads(r.stdout)["certificate"]
    # a value in [H r_min, H r_max] (no return_bound declared): 60 stays are too few to certify more than the floor
    assert cert["failure_prob"] == 0.05 and -LENGTH <= cert["value"] <= LENGTH
    human = run("train", logs, "--spec", d / "public.json", "--algo", "dp-pbb", "--rho", 4, "--out", d / "pbb2",
                "--failure-prob", 0.1)
    assert human.exit_code == 0, human.output
    assert "certificate: the policy's value" in human.stdout and "with probability >= 0.9" in human.stdout


def test_fatal_rule_errors_name_the_files_column_everywhere(export, tmp_path):
    d, logs = export
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(logs).with_columns(
        pl.when(pl.int_range(pl.len()) == 4).then(None).otherwise(pl.col("outcome")).alias("outcome")
    ).write_parquet(bad)
    spec = d / "right.json"
    for args in (["release", bad, "--spec", spec, "--rho", 1, "--out", tmp_path / "r"],
                 ["train", bad, "--spec", spec, "--algo", "dp-apvi", "--rho", 1, "--out", tmp_path / "p"],
                 ["pipeline", bad, "--spec", spec, "--rho", 1, "--out", tmp_path / "q", "--audit-trials", 0],
                 ["validate", bad, "--spec", spec]):
        r = run(*args)
        assert r.exit_code == 1, (args[0], r.output)
        assert "reward is null (column reward = 'outcome' in the file)" in r.output, (args[0], r.output)


def test_repair_limit_and_shares_from_python(export):
    d, logs = export
    spec = DomainSpec.from_dict(_spec_doc([0, 1]))
    _, report = bound_contributions(scan_logs(logs, spec), spec)
    shares = {r.rule: r.share for r in repairs_of(report)}
    assert shares["reward_out_of_range"] == pytest.approx(DEATHS / 60) and shares["episode_too_long"] == 0
    with pytest.raises(RepairsRefused, match=r"33\.33%"):
        check_repairs(report, RepairLimit(), logs)
    assert check_repairs(report, RepairLimit(0.34), logs) == []
    assert [r.rule for r in check_repairs(report, RepairLimit(accept=True), logs)] == ["reward_out_of_range"]
    for bad in (1.5, -0.1, float("nan"), True):
        with pytest.raises(UsageError, match="max_repair_share"):
            RepairLimit(bad)
        with pytest.raises(UsageError, match="max_repair_share"):
            PipelineConfig(out=d / "never", rho=1, max_repair_share=bad)
