"""Issue 29 item 4: what the pipeline paid for survives a failure or Ctrl-C in a later stage, and the same command
again finishes the run without charging the ledger a second time.

A small world (random tabular MDP S=5, A=3, H=4, 400 episodes) with a one-hot feature map, so three parts are
charged before the audit: the release, the behaviour value and DP-VAPVI (a policy).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import privaudit.pipeline.certify as certify_mod
import privaudit.pipeline.stages as stages_mod
from privaudit.cli import main
from privaudit.core.errors import ArtifactError
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.pipeline import render
from privaudit.learners.policy import load_policy
from privaudit.privacy.ledger import init_ledger, ledger_status
from privaudit.release.tabular import load_release

CHARGED = ["release", "behaviour-value", "dp-vapvi"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=3)
    doc = dict(random_tabular_spec_doc(mdp, dataset_id="rt-resume"), features={"map": "one-hot"})
    (d / "spec.json").write_text(json.dumps(doc))
    write_logs(simulate(mdp, behaviour_policy("mix:0.5", mdp), 400, np.random.default_rng(5)), d / "logs.parquet")
    return d


def _run(world, out, ledger, *extra, logs=None):
    return CliRunner().invoke(main, ["pipeline", str(logs or world / "logs.parquet"), "--spec",
                                     str(world / "spec.json"), "--rho", "1", "--out", str(out), "--ledger",
                                     str(ledger), "--audit-trials", "0", *map(str, extra)])


def _files(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _ledger(tmp_path):
    led = tmp_path / "budget.jsonl"
    init_ledger(led, "rt-resume", 3)
    return led


def _charged_parts(led):
    return [e["description"].split(" part:")[0].removeprefix("pipeline, ") for e in ledger_status(led)["entries"]]


def _check_kept(out, led, stopped_in):
    """The paid-for outputs, marked incomplete, and nothing else that is shareable."""
    marker = json.loads((out / "INCOMPLETE.json").read_text())
    assert marker["status"] == "incomplete" and marker["stopped_in"] == stopped_in
    assert marker["charged"] == CHARGED and marker["kept"] == ["policies/dp-vapvi", "release"]
    assert stopped_in in marker["missing_stages"] and "report" in marker["missing_stages"]
    shared = {p for p in _files(out) if not p.startswith("private/")}
    assert {p.split("/")[0] for p in shared} == {"INCOMPLETE.json", "release", "policies"}
    assert {p.split("/")[1] for p in shared if p.startswith("policies/")} == {"dp-vapvi"}
    assert {p for p in _files(out) if p.startswith("private/")} == {"private/checkpoint.json",
                                                                    "private/checkpoint.npz"}
    assert _charged_parts(led) == CHARGED and marker["run_id"] == ledger_status(led)["entries"][0]["run"]
    load_release(out / "release").transitions_at(0)  # every kept file whole and readable
    load_policy(out / "policies" / "dp-vapvi")
    assert not any(p.name.startswith(f".{out.name}.") for p in out.parent.iterdir())  # no temporary left


def _check_finished(out, led, kept, spent):
    """The rerun: exit 0, complete output, the kept release and policy reused as they were, no new charge."""
    assert ledger_status(led)["rho_spent"] == spent and _charged_parts(led) == CHARGED
    files = _files(out)
    assert "summary.json" in files and "report.md" in files and "INCOMPLETE.json" not in files
    assert not any(p.startswith("private/checkpoint") for p in files)
    for name, data in kept.items():
        if name.startswith(("release/", "policies/dp-vapvi/")):
            assert files[name] == data, name
    g = json.loads(files["summary.json"])["privacy"]  # the guarantee composes the reused parts' events
    assert [p["name"] for p in g["details"]["parts"]] == CHARGED and 1.0 <= g["rho"] <= 1.0 * (1 + 1e-12)


def _stop_in(monkeypatch, stage, error):
    """Make ``stage`` raise ``error``: the audit's run, or the report's markdown (after summary.json is written in
    the temporary folder: it must not be kept, an incomplete run is not a result)."""
    def stop(*a, **k):
        raise error("simulated failure") if error is ArtifactError else error
    if stage == "audit":
        monkeypatch.setattr(stages_mod, "audit_release", stop)
    else:
        monkeypatch.setattr(render, "render_markdown", stop)


@pytest.mark.parametrize("stage,error", [
    ("audit", ArtifactError), ("report", KeyboardInterrupt),
    pytest.param("audit", KeyboardInterrupt, marks=pytest.mark.slow),
    pytest.param("report", ArtifactError, marks=pytest.mark.slow)])
def test_a_stop_after_the_charges_keeps_them_and_the_same_command_finishes_without_charging(
        world, tmp_path, monkeypatch, stage, error):
    led, out = _ledger(tmp_path), tmp_path / "run"
    _stop_in(monkeypatch, stage, error)
    res = _run(world, out, led, "--audit-trials", 500 if stage == "audit" else 0)  # the audit stops at once
    assert "Traceback" not in res.output
    if error is KeyboardInterrupt:
        assert res.exit_code == 130, res.output
        assert f"interrupted: the pipeline stopped in its {stage} stage" in res.stderr
        assert "nothing was written" not in res.stderr
    else:
        assert res.exit_code == 1 and "simulated failure" in res.stderr, res.output
    assert f"kept in {out}, marked incomplete (INCOMPLETE.json): run the same command again" in res.stderr
    assert "the same command again reuses it without charging" in res.stderr
    assert "a retry spends it again" not in res.stderr
    _check_kept(out, led, stage)
    kept, spent = _files(out), ledger_status(led)["rho_spent"]
    monkeypatch.undo()
    # the same command, except the audit's trials: it spends nothing, so a rerun may skip a failing audit
    res = _run(world, out, led, "--audit-trials", 0)
    assert res.exit_code == 0, res.output
    assert f"resuming the incomplete run in {out}" in res.stderr and "nothing is charged again" in res.stderr
    _check_finished(out, led, kept, spent)


def test_an_incomplete_run_is_never_reused_for_other_data(world, tmp_path, monkeypatch):
    """Other logs (one reward changed), or another budget: refused before any row is read, nothing charged, the
    kept run untouched; --overwrite discards it and spends again."""
    led, out = _ledger(tmp_path), tmp_path / "run"
    monkeypatch.setattr(render, "render_markdown", lambda s: (_ for _ in ()).throw(KeyboardInterrupt))
    assert _run(world, out, led).exit_code == 130
    monkeypatch.undo()
    kept, entries = _files(out), ledger_status(led)["n_entries"]
    df = pl.read_parquet(world / "logs.parquet")
    other = tmp_path / "other.parquet"
    df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(1.0 - pl.col("reward")).otherwise(pl.col("reward"))
                    .alias("reward")).write_parquet(other)
    refused = ((_run(world, out, led, logs=other), "logs"), (_run(world, out, led, "--seed", 4), "configuration"))
    for res, what in refused:
        assert res.exit_code == 2, res.output
        assert f"holds an incomplete run (charged: {', '.join(CHARGED)}) of other inputs (not the same: {what})" \
            in res.stderr and "Traceback" not in res.output
        assert _files(out) == kept and ledger_status(led)["n_entries"] == entries
    res = _run(world, out, led, "--overwrite", logs=other)
    assert res.exit_code == 0, res.output
    assert ledger_status(led)["n_entries"] == 2 * entries and not (out / "INCOMPLETE.json").exists()


def test_a_failure_before_any_charge_keeps_nothing(world, tmp_path, monkeypatch):
    led, out = _ledger(tmp_path), tmp_path / "run"
    monkeypatch.setattr(stages_mod, "release_logs", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    res = _run(world, out, led)
    assert res.exit_code == 130 and "interrupted: nothing was written" in res.stderr, res.output
    assert not out.exists() and ledger_status(led)["n_entries"] == 0


def _without_times(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("created", "software")}


@pytest.mark.slow  # three pipeline runs on 3000 episodes: about 5 s
def test_a_resumed_dp_pbb_run_reports_what_an_uninterrupted_one_reports(world, tmp_path, monkeypatch):
    """With a public reward DP-PBB is charged too; its policy is kept and its V_0 and Q checkpointed. With the same
    (test-only) seed, the resumed run writes the uninterrupted run's summary (certified values, diagnostics,
    guarantee), policies and release, and charges what that run charged, once."""
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=3)  # the world's MDP; 3000 episodes: a certified value > 0
    logs = simulate(mdp, behaviour_policy("mix:0.5", mdp), 3000, np.random.default_rng(5))
    logs.with_columns(reward=(pl.col("next_state") == 2).cast(pl.Float64)).write_parquet(tmp_path / "logs.parquet")
    doc = {k: v for k, v in json.loads((world / "spec.json").read_text()).items() if k != "features"}
    (tmp_path / "spec.json").write_text(json.dumps({**doc, "public_reward": {"kind": "next_state",
                                                                             "values": {"2": 1.0}}}))

    def run(out, led):
        return CliRunner().invoke(main, ["pipeline", str(tmp_path / "logs.parquet"), "--spec",
                                         str(tmp_path / "spec.json"), "--rho", "4", "--out", str(out), "--ledger",
                                         str(led), "--audit-trials", "0", "--seed", "7"])
    init_ledger(tmp_path / "a.jsonl", "rt-resume", 5)
    init_ledger(tmp_path / "b.jsonl", "rt-resume", 5)
    assert run(tmp_path / "a", tmp_path / "a.jsonl").exit_code == 0
    _stop_in(monkeypatch, "report", KeyboardInterrupt)
    assert run(tmp_path / "b", tmp_path / "b.jsonl").exit_code == 130
    monkeypatch.undo()
    marker = json.loads((tmp_path / "b" / "INCOMPLETE.json").read_text())
    assert marker["charged"] == ["release", "behaviour-value", "dp-pbb"] and "policies/dp-pbb" in marker["kept"]
    res = run(tmp_path / "b", tmp_path / "b.jsonl")
    assert res.exit_code == 0 and "resuming the incomplete run" in res.stderr, res.output
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    pbb = json.loads(b["summary.json"])["policies"][0]
    assert pbb["name"] == "dp-pbb" and pbb["certified_value"] > 0  # DP-PBB's restored V_0 is used (0.0498 here)
    assert _without_times(json.loads(a["summary.json"])) == _without_times(json.loads(b["summary.json"]))
    for name in a:
        if name.startswith(("policies/", "release/")) and not name.endswith((".json",)):
            assert a[name] == b[name], name
    spent = [[e["rho"] for e in ledger_status(tmp_path / f"{x}.jsonl")["entries"]] for x in "ab"]
    assert spent[0] == spent[1] and len(spent[1]) == 3


@pytest.mark.slow  # two pipeline runs with the held-out evaluations: about 3 s
def test_a_finished_held_out_certification_is_not_charged_again(world, tmp_path, monkeypatch):
    """--hold-out charges each held-out evaluation to the ledger in its own stage; a stop in the report after it
    keeps the certification (DP estimates) in the checkpoint, and the rerun charges nothing at all."""
    led, out = _ledger(tmp_path), tmp_path / "run"
    _stop_in(monkeypatch, "report", KeyboardInterrupt)
    assert _run(world, out, led, "--hold-out").exit_code == 130
    monkeypatch.undo()
    entries = ledger_status(led)["entries"]
    assert len(entries) > len(CHARGED)  # the held-out evaluations were charged too
    res = _run(world, out, led, "--hold-out")
    assert res.exit_code == 0, res.output
    assert ledger_status(led)["entries"] == entries
    resumed = next(line for line in res.stderr.splitlines() if line.startswith("resuming the incomplete run"))
    assert "held-out certification of" in resumed  # session 11: it listed the release parts only
    assert json.loads((out / "summary.json").read_text())["held_out_certification"]["policies"]


@pytest.mark.slow  # two pipeline runs with DP-PBB and two held-out evaluations: about 6 s
def test_a_stop_inside_the_held_out_certification_reuses_the_evaluations_it_finished(tmp_path, monkeypatch):
    """The certify stage charges one evaluation per policy; a Ctrl-C between them used to re-run (and re-charge)
    the finished one on resume. Now each finished evaluation is checkpointed: the rerun charges only the rest,
    and the ledger ends with what an uninterrupted run charges."""
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=3)
    logs = simulate(mdp, behaviour_policy("mix:0.5", mdp), 3000, np.random.default_rng(5))
    logs.with_columns(reward=(pl.col("next_state") == 2).cast(pl.Float64)).write_parquet(tmp_path / "logs.parquet")
    doc = dict(random_tabular_spec_doc(mdp, dataset_id="rt-resume"),
               public_reward={"kind": "next_state", "values": {"2": 1.0}})
    (tmp_path / "spec.json").write_text(json.dumps(doc))

    def run(out, led):
        return CliRunner().invoke(main, ["pipeline", str(tmp_path / "logs.parquet"), "--spec",
                                         str(tmp_path / "spec.json"), "--rho", "4", "--out", str(out), "--ledger",
                                         str(led), "--audit-trials", "0", "--hold-out"])
    init_ledger(tmp_path / "a.jsonl", "rt-resume", 50)
    init_ledger(tmp_path / "b.jsonl", "rt-resume", 50)
    assert run(tmp_path / "a", tmp_path / "a.jsonl").exit_code == 0
    uninterrupted = [e["description"] for e in ledger_status(tmp_path / "a.jsonl")["entries"]]
    assert sum("held-out certification" in d for d in uninterrupted) == 2  # dp-pbb and dp-apvi
    real, calls = certify_mod.evaluate_policy_on_logs, []

    def second_one_stops(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(certify_mod, "evaluate_policy_on_logs", second_one_stops)
    assert run(tmp_path / "b", tmp_path / "b.jsonl").exit_code == 130
    monkeypatch.undo()
    first = [e["description"] for e in ledger_status(tmp_path / "b.jsonl")["entries"]]
    assert sum("held-out certification" in d for d in first) == 1  # one evaluation finished and was charged
    res = run(tmp_path / "b", tmp_path / "b.jsonl")
    assert res.exit_code == 0, res.output
    assert "the evaluations it finished are reused" in res.stderr
    assert sorted(e["description"] for e in ledger_status(tmp_path / "b.jsonl")["entries"]) == sorted(uninterrupted)
    cert = json.loads((tmp_path / "b" / "summary.json").read_text())["held_out_certification"]["policies"]
    assert set(cert) == {"dp-pbb", "dp-apvi"}


def test_held_out_charges_name_the_run_and_its_kept_output(world, tmp_path, monkeypatch):
    """Session 10 (fresh user): a Ctrl-C after the held-out certification printed `run ?, output ?` and `a retry
    spends it again` for its charge, though the rerun reuses it: its ledger entry named neither the run nor the
    output, unlike the release's. Every charge of the run now names both."""
    led, out = _ledger(tmp_path), tmp_path / "run"
    _stop_in(monkeypatch, "report", KeyboardInterrupt)
    res = _run(world, out, led, "--hold-out")
    assert res.exit_code == 130
    run_id = json.loads((out / "INCOMPLETE.json").read_text())["run_id"]
    entries = ledger_status(led)["entries"]
    assert any("held-out certification" in e["description"] for e in entries)
    assert all(e.get("run") == run_id and e.get("output") == str(out.absolute()) for e in entries), entries
    assert "a retry spends it again" not in res.stderr and "run ?" not in res.stderr
    marker = json.loads((out / "INCOMPLETE.json").read_text())["charged"]  # names every charge, as the ledger does
    held = [e["description"].removeprefix("pipeline, ") for e in entries if "held-out" in e["description"]]
    assert all(h in marker for h in held) and all(h in res.stderr for h in held), (marker, held)


def test_an_incomplete_run_keeps_no_empty_policies_folder(tmp_path):
    """Session 10's fresh user: a run stopped before any policy was charged kept an empty `policies/`."""
    from privaudit.pipeline.resume import _prune

    for rel in ("release/a.json", "policies/dp-apvi/policy.json", "summary.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    _prune(tmp_path, {"release"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]
    (tmp_path / "policies" / "dp-pbb").mkdir(parents=True)
    (tmp_path / "policies" / "dp-pbb" / "policy.json").write_text("{}")
    _prune(tmp_path, {"release", "policies/dp-pbb"})  # a kept policy keeps its folder
    assert (tmp_path / "policies" / "dp-pbb" / "policy.json").exists()


def test_a_ledger_refusing_a_hold_out_run_says_why_it_asks_for_twice_the_budget(world, tmp_path):
    """Session 10's fresh user: a ledger with 0.3 left refused `pipeline --rho 0.3 --hold-out` with "rho=~0.6" and
    no reason. The held-out evaluations are charged as their own entries (the conservative reading of parallel
    composition): the message says so, and nothing is charged or written."""
    led = tmp_path / "budget.jsonl"
    init_ledger(led, "rt-resume", 0.3)
    res = CliRunner().invoke(main, ["pipeline", str(world / "logs.parquet"), "--spec", str(world / "spec.json"),
                                    "--rho", "0.3", "--out", str(tmp_path / "o"), "--ledger", str(led),
                                    "--audit-trials", "0", "--hold-out"])
    assert res.exit_code == 3, res.output
    assert "held-out certification (0.3)" in res.stderr and "parallel composition" in res.stderr
    assert "Give the ledger twice the budget" in res.stderr and "Traceback" not in res.output
    assert ledger_status(led)["entries"] == [] and not (tmp_path / "o").exists()
