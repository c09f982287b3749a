"""``privaudit pipeline``: artifacts, summary schema and consistency, refusals, nothing half-written.

A small world: a random tabular MDP (S=5, A=3, H=4, non-stationary), 2000
episodes of a mix:0.5 behaviour, its MDP file, and two specs (tabular only;
with a one-hot feature map, which adds DP-VAPVI and splits the budget).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import UsageError
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.policy import load_policy
from privaudit.mdp.io import save_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.mdp.tabular import evaluate_policy, value_iteration
from privaudit.pipeline import load_summary, run_pipeline
from privaudit.pipeline.render import format_table, render_markdown
from privaudit.pipeline.run import _child_seeds
from privaudit.pipeline.values import upgrade_policy_entry
from privaudit.privacy import accounting
from privaudit.core.schemas import schema_errors
from privaudit.release.behaviour_value import BehaviourValueRelease, estimate_behaviour_value
from privaudit.release.tabular import load_release

#: A distinctive seed: its digits (and those of its child seeds) must appear in no output.
SEED = 918273645


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=2)
    doc = random_tabular_spec_doc(mdp, dataset_id="rt-pipeline")
    (d / "spec.json").write_text(json.dumps(doc))
    (d / "spec_linear.json").write_text(json.dumps(dict(doc, features={"map": "one-hot"})))
    df = simulate(mdp, behaviour_policy("mix:0.5", mdp), 2000, np.random.default_rng(11))
    write_logs(df, d / "logs.parquet")
    save_mdp(mdp, d / "mdp.npz")
    return {"dir": d, "mdp": mdp, "doc": doc, "df": df}


def run(*args):
    return CliRunner().invoke(main, ["pipeline", *[str(a) for a in args]])


def tree(path: Path) -> dict:
    """Relative path -> bytes of every file under ``path``."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def linear_run(world):
    """One full run with a feature map: both learners, (epsilon, delta) budget, MDP file."""
    out = world["dir"] / "run_linear"
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec_linear.json", "--epsilon", 4,
              "--delta", 1e-6, "--mdp", world["dir"] / "mdp.npz", "--out", out, "--seed", SEED,
              "--audit-trials", 600)
    assert res.exit_code == 0, res.output
    return out, res


def test_every_artifact_and_a_valid_summary(linear_run):
    out, res = linear_run
    for rel in ("summary.json", "report.md", "figures/values.png", "figures/audit_tradeoff.png",
                "release/manifest.json", "release/visits.parquet", "release/transitions.parquet",
                "release/rewards.parquet", "policies/dp-apvi/policy.json", "policies/dp-apvi/policy.parquet",
                "policies/dp-vapvi/policy.json", "audit/audit_report.json", "private/local-log.json"):
        assert (out / rel).is_file(), rel
    for png in out.glob("figures/*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = load_summary(out / "summary.json")  # format version + schema
    assert schema_errors(s, "summary") == []
    # every path the summary names exists, relative to the output folder
    arts = s["artifacts"]
    named = [arts["summary"], arts["report"], arts["release"], arts["audit_report"], arts["private_log"],
             *arts["policies"].values(), *arts["figures"].values()]
    assert all((out / p).exists() for p in named)
    assert set(arts["policies"]) == {"dp-apvi", "dp-vapvi"}
    apvi = next(p for p in s["policies"] if p["name"] == "dp-apvi")
    dg = apvi["diagnostics"]  # DP-APVI's pessimistic value: an estimate, not a certificate (not proven here)
    assert 0.0 <= dg["fallback_share"] <= 1.0 and dg["certified_value"] is None
    assert apvi["pessimistic_estimate"] is not None
    assert "How much `dp-apvi` learned" in (out / "report.md").read_text()
    # a --seed run is for tests only: anyone who knows the seed can subtract the noise
    assert s["sharing"]["may_leave"] == [] and s["rng"] == "seeded-insecure"
    assert {"private/", "release/", "policies/"} <= set(s["sharing"]["must_not_leave"])
    # ... and report.md's table and the policies say so too
    table = (out / "report.md").read_text().split("## Files: what may leave the building")[1].split("\n\n|")[1]
    rows = [r for r in ("|" + table).splitlines() if r.startswith("| `")]
    assert len(rows) >= 5 and all("| yes |" not in r for r in rows) and all("**no**" in r for r in rows)
    for name in ("dp-apvi", "dp-vapvi"):
        priv = json.loads((out / "policies" / name / "policy.json").read_text())["privacy"]
        assert priv["private"] is False and "seeded" in priv["note"]
    # the stdout table names both policies
    assert "dp-apvi" in res.output and "dp-vapvi" in res.output and "guarantee" in res.output
    # nothing is left beside the output folder (the temporary build folder was renamed)
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".run_linear")] == []


def test_the_summary_records_the_public_choices_and_old_summaries_load(linear_run, tmp_path):
    out, _ = linear_run
    s = load_summary(out / "summary.json")
    # what was chosen (PipelineConfig.public): the MDP is a file (its path is not repeated), no seed, no path
    assert s["config"] == {"bundled_sample": False, "mdp": "file", "stationary": None, "audit_trials": 600,
                           "linear_share": None, "value_share": 0.1, "engine": "polars", "ledger": False,
                           "overwrite": False, "hold_out": False}
    # a summary written before the config field existed still loads
    old = {k: v for k, v in s.items() if k != "config"}
    (tmp_path / "summary.json").write_text(json.dumps(old))
    assert load_summary(tmp_path / "summary.json") == old


def test_composed_guarantee_is_what_was_asked(linear_run):
    out, _ = linear_run
    s = load_summary(out / "summary.json")
    g = s["privacy"]
    # the total is the request: epsilon 4 at delta 1e-6 (CKS; dp_to_zcdp returns rho with eps(rho) <= 4)
    assert g["requested"] == {"epsilon": 4.0, "delta": 1e-6} and g["delta"] == 1e-6
    assert g["epsilon"] <= 4.0 * (1 + 1e-9) and g["epsilon"] >= 4.0 * (1 - 1e-9)
    asked_rho = accounting.dp_to_zcdp(4.0, 1e-6)
    assert math.isclose(g["rho"], asked_rho, rel_tol=1e-9)
    # composition: the parts add up; each part is what its artifact records
    parts = {p["name"]: p for p in g["details"]["parts"]}
    assert set(parts) == {"release", "dp-vapvi", "behaviour-value"}
    assert math.isclose(sum(p["rho"] for p in parts.values()), g["rho"], rel_tol=1e-12)
    # default shares: DP-VAPVI 0.5, the behaviour value 0.1, the release the rest
    assert g["details"]["split"] == pytest.approx({"release": 0.4, "dp-vapvi": 0.5, "behaviour-value": 0.1}, rel=1e-12)
    assert math.isclose(parts["behaviour-value"]["rho"], 0.1 * asked_rho, rel_tol=1e-9)
    manifest = json.loads((out / "release/manifest.json").read_text())
    assert manifest["guarantee"]["rho"] == parts["release"]["rho"]
    assert manifest["rng"] == "seeded-insecure" and s["rng"] == "seeded-insecure"
    lin = load_policy(out / "policies/dp-vapvi")
    assert lin.privacy.guarantee["rho"] == parts["dp-vapvi"]["rho"]
    apvi = load_policy(out / "policies/dp-apvi")
    assert apvi.privacy.guarantee["rho"] == parts["release"]["rho"]  # post-processing of the release
    # each part alone is weaker than the whole
    assert all(p["epsilon_alone"] < g["epsilon"] for p in parts.values())
    # the audit tested the release's own claim
    assert math.isclose(s["audit"]["claim"]["rho"], parts["release"]["rho"], rel_tol=1e-12)
    # one statement: the total is the parts' exact sum rounded up once (never above the request), the audit
    # claims the number the release states, the parts are the budget's exact split (no float re-composition)
    assert g["rho"] == accounting.round_up(sum(Fraction(p["rho"]) for p in parts.values())) <= asked_rho
    assert s["audit"]["claim"]["rho"] == parts["release"]["rho"]


def test_values_are_exact_and_consistent(world, linear_run):
    out, _ = linear_run
    s = load_summary(out / "summary.json")
    mdp = world["mdp"]
    _, _, v_star = value_iteration(mdp)
    ev = s["evaluation"]
    assert ev["source"].endswith("mdp.npz") and ev["references"] == {}
    assert math.isclose(ev["optimal_value"], v_star, rel_tol=1e-12)
    for p in s["policies"]:
        v = evaluate_policy(mdp, load_policy(out / p["path"]).table)  # independent re-evaluation
        assert math.isclose(p["value"], v, rel_tol=1e-12, abs_tol=1e-12)
        assert p["value"] <= p["optimal_value"] + 1e-9
        assert math.isclose(p["gap"], p["optimal_value"] - p["value"], abs_tol=1e-12)
        assert p["clinicians_value"] is None  # random-tabular has no clinicians' policy
    # the MDP file fixes the structure: random-tabular is per-step, so the release is too
    assert s["domain"]["stationary"] is False
    assert json.loads((out / "release/manifest.json").read_text())["domain"]["stationary"] is False


def test_no_seed_and_no_private_count_in_shared_outputs(world, linear_run):
    out, _ = linear_run
    seeds = [SEED, *_child_seeds(SEED, 4)]
    for rel, data in tree(out).items():
        text = data.decode("latin-1")
        for sd in seeds:
            assert str(sd) not in text, (rel, sd)
    s = load_summary(out / "summary.json")
    flat = json.dumps(s)
    for key in ("rows", "episodes", "units", "timings", "seed", "bounding"):
        assert f'"{key}"' not in flat, key
    # the bounding facts are kept, but only in the private log
    private = json.loads((out / "private/local-log.json").read_text())
    assert private["bounding"]["episodes"] == world["df"]["episode_id"].n_unique()
    assert "timings_s" in private
    assert not (out / "release.local-log.json").exists()
    assert list((out / "release").iterdir()) and all(
        p.suffix in (".json", ".parquet") for p in (out / "release").iterdir())


def test_rho_budget_without_features_and_no_audit(world, tmp_path):
    out = tmp_path / "run"
    s = run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=0.5, out=out,
                     mdp=world["dir"] / "mdp.npz", stationary=True, audit_trials=0, seed=3, value_share=0)
    g = s["privacy"]
    # the accountant rounds up by at most a few ulps, never down
    assert 0.5 <= g["rho"] <= 0.5 * (1 + 1e-12)
    assert [p["name"] for p in g["details"]["parts"]] == ["release"] and g["details"]["split"] == {"release": 1.0}
    assert math.isclose(g["epsilon"], accounting.zcdp_to_dp(0.5, 1e-6), rel_tol=1e-12)
    assert s["audit"] is None and not (out / "audit").exists()
    assert s["artifacts"]["figures"] == {"values": "figures/values.png"}
    assert s["domain"]["stationary"] is True
    assert [p["name"] for p in s["policies"]] == ["dp-apvi"]
    assert Path(s["private_log"]).is_file()
    # --value-share 0: no behaviour value; a stationary release has no h = 0 visits, so the certified
    # value is averaged over the known MDP's (public) d0
    assert s["behaviour_value"] is None and s["start_distribution"]["source"] == "mdp"
    # DP-APVI's pessimistic value rests on its paper's analysis, not proven in docs/certificates.md: an
    # estimate, not a certificate (issue 28 item 2; before, it was printed as *certified*)
    p = s["policies"][0]
    assert p["certified_value"] is None and p["certified_start"] is None and p["certificate_held"] is None
    assert p["pessimistic_estimate"] is not None


def test_stationary_release_is_audited_on_the_pooled_worst_case(world, tmp_path):
    out = tmp_path / "run"
    s = run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=out,
                     stationary=True, audit_trials=200, seed=8)
    assert s["evaluation"] is None and all(p["value"] is None for p in s["policies"])
    a = s["audit"]
    assert a["pair"] == "synthetic-repeat" and a["graybox"] == {"checked": True, "violation": False}
    # exact discrete Gaussian noise: the generic test (the GDP test is valid only for continuous noise)
    # the release's part: the rest after the default behaviour-value share 0.1
    assert a["claim"]["kind"] == "generic" and math.isclose(a["claim"]["rho"], 0.9, rel_tol=1e-9)
    # no MDP: the certified value is averaged over the released start counts; nothing to check it against
    p = s["policies"][0]
    assert p["name"] == "dp-apvi" and p["certified_value"] is None and p["pessimistic_estimate"] is not None
    assert p["certificate_held"] is None and s["start_distribution"]["source"] == "value-release"
    lo, hi = s["behaviour_value"]["interval"]
    assert lo <= s["behaviour_value"]["estimate"] <= hi
    # no MDP, yet a values figure: the certified values and the clinicians' DP estimate (all public)
    assert s["artifacts"]["figures"]["values"] == "figures/values.png" and (out / "figures" / "values.png").is_file()
    assert "](figures/values.png)" in (out / "report.md").read_text()
    report = json.loads((out / a["report"]).read_text())
    visits = next(f for f in report["graybox"]["families"] if f["name"] == "visits")
    # u* and v* each put H = 4 visits (k = 1) in one cell: L2 = H sqrt(2), the pooled declared sensitivity
    H = world["doc"]["horizon"]
    assert visits["l2"] == pytest.approx(H * math.sqrt(2), rel=1e-12) == pytest.approx(visits["declared_l2"])


def broken_logs(world, path: Path) -> Path:
    bad = world["df"].with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(7).otherwise(pl.col("action")).alias("action"))
    write_logs(bad, path)
    return path


def test_invalid_logs_stop_at_validation_and_write_nothing(world, tmp_path):
    logs = broken_logs(world, tmp_path / "bad.parquet")
    out = tmp_path / "out"
    res = run(logs, "--spec", world["dir"] / "spec.json", "--rho", 1, "--out", out, "--audit-trials", 0)
    assert res.exit_code == 1, res.output
    assert "action_out_of_range" in res.output and "row 5" in res.output  # located
    assert "Traceback" not in res.output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]  # no temporary folder left


def test_existing_dir_refused_unless_overwrite_of_a_pipeline_output(world, tmp_path):
    args = [world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1,
            "--audit-trials", 0]
    # a folder that is not a pipeline output: refused, with or without --overwrite, untouched
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        res = run(*args, "--out", other, *extra)
        assert res.exit_code == 2, res.output
        assert tree(other) == {"notes.txt": b"keep me"}
    # a previous pipeline output: refused without --overwrite, replaced with it
    out = tmp_path / "out"
    assert run(*args, "--out", out).exit_code == 0
    (out / "marker").write_text("old")
    before = tree(out)
    res = run(*args, "--out", out)
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert tree(out) == before
    # invalid logs with --overwrite: stops at validation, the old output is unchanged
    bad = broken_logs(world, tmp_path / "bad.parquet")
    res = run(bad, *args[1:], "--out", out, "--overwrite")
    assert res.exit_code == 1 and tree(out) == before
    res = run(*args, "--out", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert not (out / "marker").exists() and (out / "summary.json").is_file()


def test_refusals_before_any_work(world, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="needs `spec`"):
        run_pipeline(world["dir"] / "logs.parquet", rho=1, out=out)
    with pytest.raises(UsageError, match="declares"):  # the MDP does not fit the spec
        run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=out, mdp="icu-sepsis")
    with pytest.raises(UsageError):
        run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, epsilon=1, out=out)
    with pytest.raises(UsageError, match="audit_trials"):
        run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=out, audit_trials=5)
    with pytest.raises(UsageError, match="audit_trials"):  # a typo'd 10^20 would charge the budget, then never end
        run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=out,
                     audit_trials=10**20)
    assert not out.exists()
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", -1, "--out", out)
    assert res.exit_code == 2 and not out.exists()


# --------------------------------------------------------------------------- the audit stage

def test_a_release_noisier_on_paper_than_in_fact_is_a_violation(world, tmp_path, monkeypatch):
    """A broken noise sampler (20x too little noise) must be flagged: exit 3, nothing may leave.

    ``privaudit.privacy.mechanisms.add_noise`` is patched, so the release and
    the audited mechanism (the library's own code path) are both broken, as
    they would be by a real bug; the manifest still claims rho = 1.

    The claim is rho = 0.05 (epsilon ~ 1.4 at delta = 1e-6; the generic test
    used for exact discrete Gaussian noise cannot certify more than about
    log(420) ~ 6 with 420 evaluation runs, so a larger claim could not be
    refuted). The broken noise makes the pair's outputs about 20x further
    apart (mu ~ 6), so the evaluation runs per side nearly separate and the
    generic test's Clopper-Pearson bounds give an epsilon lower bound (~4.7
    when they separate) above the claim.
    """
    from privaudit.privacy import mechanisms

    real = mechanisms.add_noise

    def broken(values, *, mechanism, scale, rng, noise="exact", **kw):
        return real(values, mechanism=mechanism, scale=scale / 20, rng=rng, noise=noise, **kw)

    monkeypatch.setattr(mechanisms, "add_noise", broken)
    out = tmp_path / "out"
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 0.05, "--out", out,
              "--mdp", world["dir"] / "mdp.npz", "--audit-trials", 600, "--seed", 4)
    assert res.exit_code == 3, res.output
    s = load_summary(out / "summary.json")
    assert s["audit"]["verdict"] == "violation"
    report = json.loads((out / "audit/audit_report.json").read_text())
    # the release noise is exact (discrete Gaussian): the generic test's bound exceeds the claim
    assert report["method"]["generic"]["epsilon_lower_bound"] > report["claim"]["epsilon"]
    assert s["sharing"]["may_leave"] == []
    assert "release/" in s["sharing"]["must_not_leave"]


def test_learner_diagnostics_by_hand():
    # S = 2, A = 2, H = 2, start in state 0; action 0 moves 0 -> 1, action 1 stays; state 1 absorbs.
    from privaudit.mdp.tabular import TabularMDP
    from privaudit.pipeline.report import learner_diagnostics

    P = np.zeros((2, 2, 2))
    P[0, 0, 1] = P[0, 1, 0] = P[1, :, 1] = 1.0
    mdp = TabularMDP(P, np.zeros((2, 2)), np.array([1.0, 0.0]), 2)
    Q = np.zeros((2, 2, 2))
    Q[0, 0] = [0.5, 0.0]                    # only (h=0, s=0) has a positive pessimistic value
    table = np.zeros((2, 2, 2))
    table[:, :, 0] = 1.0                    # always action 0
    V0 = Q[0].max(-1)
    d = learner_diagnostics(Q, V0, table, mdp)
    # occupancy: h=0 all mass at s=0 (learned), h=1 all mass at s=1 (fallback) -> 1/2
    assert d["certified_value"] == pytest.approx(0.5)
    assert d["fallback_share"] == pytest.approx(0.5)
    # without an MDP: 3 of the 4 (h, s) cells are fallback
    u = learner_diagnostics(Q, V0, table)
    assert u["certified_value"] is None and u["fallback_share"] == pytest.approx(0.75)
    # a released start distribution (no MDP): the certified value is averaged over it
    r = learner_diagnostics(Q, V0, table, d0=np.array([0.25, 0.75]))
    assert r["certified_value"] == pytest.approx(0.125) and r["fallback_share"] == pytest.approx(0.75)
    # a terminal state is excluded from the share
    assert learner_diagnostics(Q, V0, table, terminal_states=(1,))["fallback_share"] == pytest.approx(0.5)


def test_sharing_rules():
    from privaudit.pipeline.report import _sharing

    ok = {"verdict": "no violation found"}
    plain = _sharing(ok, seeded=False)
    assert {"release/", "policies/", "summary.json"} <= set(plain["may_leave"])
    assert "private/" in plain["must_not_leave"] and "audit/" not in plain["must_not_leave"]
    # the audit runs on a synthetic pair from the spec: its report may leave with the release
    assert {"audit/", "figures/audit_tradeoff.png"} <= set(plain["may_leave"])
    for shut in (_sharing({"verdict": "violation"}, seeded=False), _sharing(ok, seeded=True)):
        assert shut["may_leave"] == [] and "release/" in shut["must_not_leave"]


def test_ledger_refuses_before_any_work_and_charges_what_was_spent(world, tmp_path):
    from privaudit.privacy.ledger import init_ledger, ledger_status

    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "rt-pipeline", 1.0)
    args = (world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--mdp", world["dir"] / "mdp.npz",
            "--audit-trials", 0, "--ledger", ledger)
    res = run(*args, "--rho", 2, "--out", tmp_path / "too_much")
    assert res.exit_code == 3, res.output
    assert not (tmp_path / "too_much").exists() and ledger_status(ledger)["rho_spent_float"] == 0
    res = run(*args, "--rho", 0.75, "--out", tmp_path / "ok")
    assert res.exit_code == 0, res.output
    assert ledger_status(ledger)["rho_spent_float"] == pytest.approx(0.75, rel=1e-12)
    res = run(*args, "--rho", 0.5, "--out", tmp_path / "second")  # 0.75 + 0.5 > 1
    assert res.exit_code == 3 and not (tmp_path / "second").exists()


def test_a_split_above_the_total_is_refused_before_any_read_or_charge(world, tmp_path, monkeypatch):
    """The parts' composition is checked on the planned split, before any part is charged: before, it was
    checked only after the release, behaviour-value and DP-PBB parts had charged the ledger (composed_guarantee),
    so a bad split (here: the release alone takes the whole budget) spent budget and wrote nothing."""
    import privaudit.pipeline.run as run_mod
    from privaudit.privacy.ledger import init_ledger

    real_split, reads = run_mod.split_budget, []

    def over(budget, **kw):
        return {**real_split(budget, **kw), "release": budget}

    def prepare(*a, **kw):
        reads.append(a)
        return real_prepare(*a, **kw)
    real_prepare = run_mod.prepare_on
    monkeypatch.setattr(run_mod, "split_budget", over)
    monkeypatch.setattr(run_mod, "prepare_on", prepare)
    led = tmp_path / "ledger"
    led.mkdir()
    init_ledger(led / "budget.jsonl", "rt-pipeline", 10.0)
    before = tree(led)
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--mdp", world["dir"] / "mdp.npz",
              "--rho", 1, "--audit-trials", 0, "--ledger", led / "budget.jsonl", "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "above the total budget 1.0 (internal error)" in res.output and "Traceback" not in res.output
    assert "release 1" in res.output  # the parts are named
    assert tree(led) == before                                  # ledger (and its head file) byte-identical
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger"] and reads == []


def test_value_estimates_are_post_processing_of_the_noisy_statistics(world, tmp_path, monkeypatch):
    """Issue 13 item 2: the clinicians' estimate and the certified value reach summary.json only through
    the behaviour-value release's noisy statistics (and the release), never through an exact statistic."""
    seen = {}
    noisy = BehaviourValueRelease.noisy

    def spy(self, exact, *, rng):
        seen["exact"], seen["noisy"] = exact, noisy(self, exact, rng=rng)
        return seen["noisy"]

    monkeypatch.setattr(BehaviourValueRelease, "noisy", spy)
    out = tmp_path / "run"
    s = run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=out,
                     mdp=world["dir"] / "mdp.npz", audit_trials=0, seed=5)
    b = s["behaviour_value"]
    again = estimate_behaviour_value(seen["noisy"])
    assert b["estimate"] == again["estimate"] and b["interval"] == again["interval"]
    assert b["mechanism"]["version"] == 2 and b["mechanism"]["interval_unit"].startswith("episode")
    # a summary written before version 2 (no version, i.i.d. episodes) stays readable, and says what it was
    old = json.loads((out / "summary.json").read_text())
    for key in ("version", "interval_unit"):
        del old["behaviour_value"]["mechanism"][key]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "version 1" in render_markdown(load_summary(tmp_path / "old.json"))
    assert "version 1" not in render_markdown(s)
    # noise was added: the logs' exact mean return differs from the estimate, by about the noise
    df = world["df"]
    exact_mean = float(df.group_by("episode_id").agg(pl.col("reward").sum())["reward"].mean())
    assert seen["exact"]["episode_count"] == df["episode_id"].n_unique()
    assert b["estimate"] != exact_mean and abs(b["estimate"] - exact_mean) < 6 * b["noise_sd"]
    # the exact behaviour value of the MDP is inside the interval (mix:0.5 at d0; a 95% interval: this
    # fixed seed covers, and the rate is tested in tests/release/test_behaviour_value.py)
    mdp = world["mdp"]
    v_b = evaluate_policy(mdp, behaviour_policy("mix:0.5", mdp))
    assert b["interval"][0] <= v_b <= b["interval"][1]
    # the certified value: DP-APVI's V_0 (post-processing of the release) at the known MDP's public d0
    # (preferred to the released start counts, which need margins)
    learner = DPAPVI().fit(load_release(out / "release"))
    p = next(p for p in s["policies"] if p["name"] == "dp-apvi")
    assert s["start_distribution"]["source"] == "mdp"
    assert p["pessimistic_estimate"] == pytest.approx(float(mdp.d0 @ learner.declared_values()[0]), rel=1e-12,
                                                      abs=1e-12)
    assert p["certified_value"] is None and p["certificate_held"] is None  # not a certificate (not proven here)
    assert schema_errors(load_summary(out / "summary.json"), "summary") == []
    # a summary written before `pessimistic_estimate` existed called DP-APVI's number certified: it is read as
    # today's (pipeline.values.upgrade_policy_entry); DP-PBB's certificate would stay one
    older = json.loads((out / "summary.json").read_text())
    for q in older["policies"]:
        q.pop("pessimistic_estimate")
        q.update(certified_value=0.123, certified_start="mdp", certificate_held=True)
    (out.parent / "older.json").write_text(json.dumps(older))
    back = {q["name"]: q for q in load_summary(out.parent / "older.json")["policies"]}
    assert back["dp-apvi"]["pessimistic_estimate"] == 0.123 and back["dp-apvi"]["certified_value"] is None
    assert back["dp-apvi"]["certificate_held"] is None
    assert upgrade_policy_entry({"name": "dp-pbb", "certified_value": 0.2})["certified_value"] == 0.2
    # shown in report.md and in the table
    md = (out / "report.md").read_text()
    assert "| policy | value | certified | held | clinicians | optimal |" in md
    assert f"{b['estimate']:.4f}" in md and "estimated with DP" in md
    table = format_table(load_summary(out / "summary.json"), str(out))
    assert f"DP estimate {b['estimate']:.4f}" in table and "certified" in table
    assert f"dp-apvi: {p['pessimistic_estimate']:.4f} is a pessimistic estimate, not a certificate" in table
    assert "**Pessimistic estimates, not certificates**" in md


def test_certified_value_from_h0_visits_without_value_share(world, tmp_path):
    """--value-share 0, per-step release, no MDP: d0 is the release's noisy h = 0 visits, for which no
    margin is derived: no certified value (a plug-in average over a noisy d0 is not a bound)."""
    s = run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=tmp_path / "r",
                     stationary=False, audit_trials=0, seed=6, value_share=0)
    assert s["behaviour_value"] is None and s["start_distribution"]["source"] == "release-h0"
    p = s["policies"][0]
    assert p["certified_value"] is None and p["certified_start"] is None
    assert p["certificate_held"] is None and p["value"] is None
    assert [x["name"] for x in s["privacy"]["details"]["parts"]] == ["release"]


def test_value_share_refusals(world, tmp_path):
    for share in (-0.1, 1.0, float("nan")):
        with pytest.raises(UsageError, match="value_share"):
            run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec.json", rho=1, out=tmp_path / "x",
                         value_share=share)
    with pytest.raises(UsageError, match="below 1"):
        run_pipeline(world["dir"] / "logs.parquet", world["dir"] / "spec_linear.json", rho=1,
                     out=tmp_path / "x", value_share=0.5, linear_share=0.5)
    assert not (tmp_path / "x").exists()
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1, "--out",
              tmp_path / "y", "--value-share", 1)
    assert res.exit_code == 2 and "--value-share" in res.output


def test_a_spec_the_audit_cannot_pair_is_refused_before_the_budget_is_spent(tmp_path):
    """S = A = 1: no two synthetic units on disjoint cells. Before: the pipeline validated, released, trained and
    charged the ledger (rho 0.9 + 0.1), then stopped at the audit with exit 2 (fresh-user pass)."""
    mdp = random_tabular_mdp(1, 1, 2, 0)
    write_logs(simulate(mdp, np.ones((1, 1)), 10, np.random.default_rng(0)), tmp_path / "l.parquet")
    (tmp_path / "s.json").write_text(json.dumps(random_tabular_spec_doc(mdp, dataset_id="one-cell")))
    led = tmp_path / "b.jsonl"
    assert CliRunner().invoke(main, ["budget", "init", str(led), "--dataset", "one-cell", "--rho-total", "5"]).exit_code == 0
    before = led.read_bytes()
    args = [tmp_path / "l.parquet", "--spec", tmp_path / "s.json", "--rho", 1, "--out", tmp_path / "o",
            "--ledger", led]
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines()[-1] == (
        "error: the spec has fewer than two non-terminal (state, action) cells: no two units on disjoint cells "
        "exist, so no audit pair attains the declared sensitivity. The pipeline's audit cannot run on this spec: "
        "pass `--audit-trials` 0.")
    assert led.read_bytes() == before and not (tmp_path / "o").exists()
    assert run(*args, "--audit-trials", 0).exit_code == 0


def test_a_linear_share_for_a_spec_without_features_is_refused(world, tmp_path):
    """Before: `--linear-share 0.3` on a spec without a feature map was ignored silently (fresh-user pass)."""
    res = run(world["dir"] / "logs.parquet", "--spec", world["dir"] / "spec.json", "--rho", 1, "--out",
              tmp_path / "y", "--linear-share", 0.3)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == ("error: `--linear-share` 0.3 is DP-VAPVI's share of the budget, and this spec "
                                  "declares no feature map ($.features): there is no DP-VAPVI to give it to. Drop it.")
    assert not (tmp_path / "y").exists()


def test_default_pipeline_states_exact_decimal_shares(tmp_path):
    """`privaudit pipeline --rho 1` on the bundled sample: the split (release 0.3, behaviour value 0.1, DP-PBB 0.6)
    is stated as exact decimals in summary.json, on stdout and in the ledger, and the stated parts add up to rho
    exactly (before: "release": 0.30000000000000004 in the summary, and 0.0999999999999999 in the ledger next to
    a 0.9 part)."""
    from privaudit.privacy.ledger import init_ledger, ledger_status
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, "icu-sepsis-sample", 10.0)
    res = run("--rho", 1, "--out", tmp_path / "run", "--ledger", ledger, "--audit-trials", 0)
    assert res.exit_code == 0, res.output
    g = load_summary(tmp_path / "run" / "summary.json")["privacy"]
    want = {"release": "0.3", "dp-pbb": "0.6", "behaviour-value": "0.1"}
    assert {k: repr(v) for k, v in g["details"]["split"].items()} == want
    assert {p["name"]: repr(p["rho"]) for p in g["details"]["parts"]} == want
    assert sum(Fraction(repr(p["rho"])) for p in g["details"]["parts"]) == 1 and g["rho"] == 1.0
    assert sum(Fraction(v) for v in want.values()) == 1
    assert "release rho=0.3, behaviour-value rho=0.1, dp-pbb rho=0.6" in res.output
    charges = [e["rho"] for e in ledger_status(ledger)["entries"]]
    assert sorted(charges) == sorted(want.values()) and ledger_status(ledger)["rho_spent"] == "1"


@pytest.mark.parametrize("rho", [0.6, 0.7, 1.0, 0.3, 2.2, 0.9])
def test_composed_guarantee_of_a_decimal_rho_whose_double_is_below_it(rho):
    """pipeline --rho 0.6 stopped with "the parts state rho = 0.6 together, above the total budget 0.6
    (internal error)" after charging the ledger (fresh-user pass): the parts' decimals (0.18 + 0.06 + 0.36) add up
    to the decimal 3/5, whose smallest double above it exceeds the double 0.6. The total states the request."""
    from privaudit.pipeline.guarantee import composed_guarantee, split_budget
    from privaudit.privacy.budget import resolve_budget
    from privaudit.privacy.events import GaussianEvent, PrivacyUnit
    from privaudit.core.spec import DomainSpec
    spec = DomainSpec.from_dict(random_tabular_spec_doc(random_tabular_mdp(4, 2, 3, 0),
                                                        dataset_id="split"))
    budget = resolve_budget(rho=rho)
    parts = split_budget(budget, linear=False, linear_share=0.5, value_share=0.1, pbb_share=0.6)
    shares = {"release": 0.3, "dp-pbb": 0.6, "behaviour-value": 0.1}
    unit = PrivacyUnit("episode_id", 1)
    events = {name: GaussianEvent(family=name, unit=unit, l2=1.0, sigma=float(np.nextafter(
        1.0 / math.sqrt(2 * p.rho), math.inf))) for name, p in parts.items()}
    g = composed_guarantee(budget, parts, events, spec, shares=shares, rng="secure")
    assert g["rho"] == rho  # the request, as written
    assert sum(Fraction(repr(p["rho"])) for p in g["details"]["parts"]) == Fraction(repr(rho))
