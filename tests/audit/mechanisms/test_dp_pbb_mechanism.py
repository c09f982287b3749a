"""The DP-PBB audit adapter's gray-box view: noisy capped visit counts and start counts.

Setting: the bundled ICU-Sepsis spec (H = 20, S = 716, A = 25, k = 1, public
reward, cap c = 1), DP-PBB at rho = 1 pooled over h. The view's share of the
claim is (0.1 + 0.05) rho = 0.15 (epsilon 2.673 at delta 1e-6), mu =
sqrt(0.3) = 0.548 when the pair attains the declared sensitivities (it does:
the first test). Statistical tests run with fixed seeds; their outcome is
deterministic, and each statement below gives the measured margin:

* correct, 2e4 runs per side, design events (z = 2, 3, midpoint): eps_lb 1.00-1.23
  over seeds 0-4 (0.41 of the claim; 0.48 at 1e5). A false alarm has probability at most
  alpha = 0.05 by the audit's construction (its bound is valid);
* sensitivity halved (sigma from half the declared L2, event stating it):
  the gray-box check sees L2 6.32 against a declared 3.16 (deterministic);
  sampling alone at 1e5 runs: eps_lb 2.83-3.10 > 2.673 in 5 of 5 seeds
  (expected 3.04 from the Gaussian trade-off);
* per-cell cap not applied, ``synthetic-repeat`` pair (20 transitions in one
  cell): gray-box L2 28.3 against 6.32; sampling alone at 2e4 runs: eps_lb
  3.68-4.54 > 2.673 in 8 of 8 seeds (true mu 2.02 against 0.548); the correct
  twin on that pair: eps_lb 0.04-0.05 (the cap leaves a change of sqrt(2)).
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit import AuditSettings, run_audit
from privaudit.audit.mechanisms import dp_pbb as dp_pbb_adapter
from privaudit.audit.mechanisms.dp_pbb import DPPBBMechanism
from privaudit.audit.mechanisms.registry import ADAPTERS
from privaudit.audit.graybox import graybox_check
from privaudit.audit.runner import default_canary
from privaudit.cli import main
from privaudit.learners.tabular import pbb_noise
from privaudit.privacy import accounting
from privaudit.core.package_data import sample_dir
from privaudit.core.spec import load_spec

SPEC = load_spec(sample_dir() / "icu_sepsis_spec.json")
CLAIM_EPS = 2.67293585691811  # rho 0.15 at delta 1e-6 (the view's share of rho = 1)


def _audit(mech, strategy="synthetic", trials=20_000, seed=0, graybox=True):
    pair = mech.make_pair(None, SPEC, strategy, rng=np.random.default_rng(0))
    claim = mech.audited_claim(1e-6, rho_total=1.0)
    return run_audit(mech, pair=pair, claim=claim, trials=trials, seed=seed, fixed="design",
                     settings=AuditSettings(graybox=graybox)), claim


@pytest.mark.parametrize("stationary,c", [(True, 1), (True, 2), (False, 1)])
def test_synthetic_pair_attains_the_declared_capped_sensitivities(stationary, c):
    mech = DPPBBMechanism(SPEC, rho=1.0, stationary=stationary, max_per_cell=c)
    assert ADAPTERS["dp-pbb"] is DPPBBMechanism and default_canary(mech) == "synthetic"
    pair = mech.make_pair(None, SPEC, "synthetic", rng=np.random.default_rng(0))
    assert pair.description["kind"] == "synthetic-spread"
    mech.prepare(pair.d, pair.d_prime)
    gb = graybox_check(mech, pair, 1e-6)
    assert gb["checked"] and not gb["violation"]
    H, k = SPEC.H, SPEC.max_episodes_per_unit
    cc = min(c, k * H if stationary else k)
    fams = {f["name"]: f for f in gb["families"]}
    assert fams["visits"]["l2"] == pytest.approx(math.sqrt(2 * cc * k * H)) == fams["visits"]["declared_l2"]
    assert fams["starts"]["l2"] == pytest.approx(math.sqrt(2) * k) == fams["starts"]["declared_l2"]
    # the units are valid episodes: each step's next state is the next step's state
    for frame in (pair.d, pair.d_prime):
        f = frame.sort(["episode_id", "step"])
        nxt = f.group_by("episode_id", maintain_order=True).agg(pl.col("next_state").head(H - 1).alias("n"),
                                                                pl.col("state").tail(H - 1).alias("s"))
        assert all(a == b for a, b in zip(nxt["n"].to_list(), nxt["s"].to_list()))
    # the claim is the accountant's rho of the two released leaves
    claim = mech.audited_claim(1e-6)
    assert claim.rho == pytest.approx(accounting.event_rho(mech.view_event()), rel=1e-12)
    assert claim.rho == pytest.approx(0.15, rel=1e-9)


def test_the_view_is_the_learners_noise_at_the_plans_scales(monkeypatch):
    """Mean and sd of 4000 runs per cell match the exact values and the plan's sigma (visits sigma 14.1,
    starts 4.47): the mean of 4000 is within 5 standard errors, the pooled sd within 5% (its relative
    standard error is 1/sqrt(2 n) = 0.1-0.5% over >= 2e5 draws); false failure < 1e-4. Then the learner's
    noise function is patched to add nothing: the audit sees it (perfect separation, violation)."""
    mech = DPPBBMechanism(SPEC, rho=1.0, stationary=True)
    pair = mech.make_pair(None, SPEC, "synthetic", rng=np.random.default_rng(0))
    mech.prepare(pair.d, pair.d_prime)
    out = mech(pair.d_prime, np.random.default_rng(3), n_runs=4000)
    exact = np.concatenate([mech.values["d_prime"]["visits"], mech.values["d_prime"]["starts"]])
    nv = mech.values["d"]["visits"].size
    sig = np.r_[np.full(nv, mech.plan.sigma_visits), np.full(exact.size - nv, mech.plan.sigma_starts)]
    assert np.all(np.abs(out.mean(axis=0) - exact) < 5 * sig / math.sqrt(4000))
    for sl, s in ((slice(0, nv), mech.plan.sigma_visits), (slice(nv, None), mech.plan.sigma_starts)):
        assert abs((out[:, sl] - exact[sl]).std() / s - 1) < 0.05
    monkeypatch.setattr(pbb_noise, "add_noise", lambda values, sigma, rng: np.asarray(values, dtype=np.float64))
    rep, claim = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True), trials=2000)
    assert rep.verdict == "violation" and rep.epsilon_lower_bound > claim.epsilon


def test_correct_dp_pbb_is_not_flagged_and_the_view_sees_it():
    """The policy view saw nothing (the default pair left the greedy policy unchanged: eps_lb 0); the
    statistics view proves a clear share of the claim and stays below it."""
    rep, claim = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True))
    assert claim.epsilon == pytest.approx(CLAIM_EPS, rel=1e-9)
    assert rep.verdict == "no violation found" and not rep.data["graybox"]["violation"]
    assert 0.8 < rep.epsilon_lower_bound < claim.epsilon
    method = rep.data["method"]
    assert method["bonferroni"]["events"] == 3 and "DP-PBB statistics view" in method["selection"]


def test_sigma_from_a_halved_sensitivity_is_flagged(monkeypatch):
    real = pbb_noise.pbb_sensitivities

    def halved(*a, **kw):
        s = dict(real(*a, **kw))
        s["visits_l2"] /= 2
        s["starts_l2"] /= 2
        return s

    monkeypatch.setattr(pbb_noise, "pbb_sensitivities", halved)
    mech = DPPBBMechanism(SPEC, rho=1.0, stationary=True)
    assert mech.plan.sigma_visits == pytest.approx(math.sqrt(40) / 2 / math.sqrt(2 * 0.1), rel=1e-9)
    rep, _ = _audit(mech)
    assert rep.verdict == "violation" and rep.data["graybox"]["violation"]   # deterministic: L2 6.32 > 3.16
    rep, claim = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True), trials=100_000, graybox=False)
    assert rep.verdict == "violation" and rep.epsilon_lower_bound > claim.epsilon  # by sampling alone


def test_cap_not_applied_is_flagged_on_the_repeat_pair(monkeypatch):
    rep, _ = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True), strategy="synthetic-repeat")
    assert rep.verdict == "no violation found"          # the cap bites: the correct twin shows little
    monkeypatch.setattr(dp_pbb_adapter, "cap_per_cell", lambda bounded, report, c, stationary: (bounded, None))
    rep, _ = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True), strategy="synthetic-repeat")
    gb = {f["name"]: f for f in rep.data["graybox"]["families"]}
    assert rep.verdict == "violation" and gb["visits"]["l2"] == pytest.approx(20 * math.sqrt(2))
    rep, claim = _audit(DPPBBMechanism(SPEC, rho=1.0, stationary=True), strategy="synthetic-repeat",
                        graybox=False)
    assert rep.verdict == "violation" and rep.epsilon_lower_bound > claim.epsilon


def test_cli_audits_dp_pbb_through_its_statistics(tmp_path):
    df = pl.read_parquet(sample_dir() / "icu_sepsis_clinicians_20k.parquet")
    ids = df["episode_id"].unique().sort()[:300]
    df.filter(pl.col("episode_id").is_in(ids.implode())).write_parquet(tmp_path / "logs.parquet")
    res = CliRunner().invoke(main, ["audit", "--mechanism", "dp-pbb", "--logs", str(tmp_path / "logs.parquet"),
                                    "--spec", str(sample_dir() / "icu_sepsis_spec.json"), "--claim-rho", "1",
                                    "--trials", "4000", "--seed", "1", "--out", str(tmp_path / "rep.json")])
    assert res.exit_code == 0, res.output
    assert "noisy capped visit counts and start counts" in res.output and "rho=0.15" in res.output
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["claim"]["rho"] == pytest.approx(0.15, rel=1e-9)
    assert rep["neighbouring_pair"]["kind"] == "synthetic-spread" and rep["epsilon_lower_bound"] > 0
