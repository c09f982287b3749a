"""The pipeline plans every part's privacy event up front (``privaudit.pipeline.plans``).

A small world with all four parts: a random tabular MDP (S=5, A=3, H=4), a
public next-state reward (DP-PBB), a one-hot feature map (DP-VAPVI), the
default behaviour-value share, and a privacy unit of up to 3 episodes.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import privaudit.pipeline.run as run_mod
from privaudit.cli import main
from privaudit.core.errors import AccountingError
from privaudit.learners.tabular import dp_pbb
from privaudit.learners.linear import privacy as linear_privacy
from privaudit.learners.policy import load_policy
from privaudit.mdp.io import save_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.mdp.tabular import TabularMDP
from privaudit.pipeline.guarantee import VALUE_PART
from privaudit.pipeline.plans import PartsPlan, plan_parts
from privaudit.privacy import accounting
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.ledger import init_ledger, ledger_status

ALL_PARTS = {"release", VALUE_PART, "dp-pbb", "dp-vapvi"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=2)
    df = simulate(mdp, behaviour_policy("mix:0.5", mdp), 900, np.random.default_rng(5))
    df = df.with_columns((pl.col("next_state") == 0).cast(pl.Float64).alias("reward"),
                         (pl.col("episode_id") // 3).alias("unit_id"))
    write_logs(df, d / "logs.parquet")
    doc = dict(random_tabular_spec_doc(mdp, dataset_id="rt-plans"),
               public_reward={"kind": "next_state", "values": {"0": 1.0}},
               privacy_unit={"column": "unit_id", "max_episodes": 3}, features={"map": "one-hot"})
    (d / "spec.json").write_text(json.dumps(doc))
    # the MDP of these logs: the random tabular dynamics with the declared reward r(s, a, s') = 1{s' = 0} (a
    # spec whose public reward is not the --mdp's reward is refused, privaudit.mdp.spec_check)
    r = np.broadcast_to((np.arange(mdp.n_states) == 0).astype(float), mdp.P.shape).copy()
    save_mdp(TabularMDP(P=mdp.P, r=r, d0=mdp.d0, horizon=mdp.horizon, name="random-tabular-r-next"), d / "mdp.npz")
    return d


def run(*args):
    return CliRunner().invoke(main, ["pipeline", *[str(a) for a in args]])


def tree(path: Path) -> dict:
    """Relative path -> bytes of every file under ``path``."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _spy_plans(monkeypatch) -> list:
    """Record every PartsPlan the pipeline builds."""
    plans, real = [], run_mod.plan_parts

    def spy(*a, **kw):
        plans.append(real(*a, **kw))
        return plans[-1]
    monkeypatch.setattr(run_mod, "plan_parts", spy)
    return plans


def test_the_plans_are_what_the_parts_charge(world, tmp_path, monkeypatch):
    """The events checked before any row is read are the events each part charges, in order, and the
    ledger is charged exactly the planned total: the up-front check is of what is spent."""
    plans, charges, real_charge = _spy_plans(monkeypatch), [], ledger_mod.charge_event

    def spy_charge(path, dataset_id, event, description, budget=None, **kw):
        charges.append((event, budget))
        return real_charge(path, dataset_id, event, description, budget, **kw)
    monkeypatch.setattr(ledger_mod, "charge_event", spy_charge)
    led = tmp_path / "budget.jsonl"
    init_ledger(led, "rt-plans", 10.0)
    res = run(world / "logs.parquet", "--spec", world / "spec.json", "--mdp", world / "mdp.npz", "--rho", 2,
              "--audit-trials", 0, "--ledger", led, "--out", tmp_path / "out", "--seed", 3)
    assert res.exit_code == 0, res.output
    assert len(plans) == 1
    plan = plans[0]
    assert set(plan.events) == ALL_PARTS
    # each part charged once, in the planned order, with exactly the planned event
    assert [ev for ev, _ in charges] == list(plan.events.values())
    assert Fraction(ledger_status(led)["rho_spent"]) == plan.total == 2
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [p["name"] for p in summary["privacy"]["details"]["parts"]] == list(plan.events)
    # the artifacts record the planned events too (release manifest, policy manifests)
    manifest = json.loads((tmp_path / "out" / "release" / "manifest.json").read_text())
    assert manifest["event"] == plan.events["release"].to_dict()
    for name in ("dp-pbb", "dp-vapvi"):
        pol = load_policy(tmp_path / "out" / "policies" / name)
        assert pol.privacy.event == plan.events[name].to_dict(), name


def _too_little_noise(part: str, monkeypatch) -> None:
    """Break one later part's calibration: its noise planned for twice its rho (costs 2x its share)."""
    if part == "dp-pbb":
        real = dp_pbb.plan_noise
        monkeypatch.setattr(dp_pbb, "plan_noise", lambda rho, **kw: real(2 * rho, **kw))
    else:
        real = linear_privacy.noise_scales
        monkeypatch.setattr(linear_privacy, "noise_scales", lambda rho, *a, **kw: real(2 * rho, *a, **kw))


@pytest.mark.parametrize("part", ["dp-pbb", "dp-vapvi"])
def test_a_later_part_calibrated_above_its_share_is_refused_before_any_read_or_charge(world, tmp_path,
                                                                                        monkeypatch, part):
    """Before, a part's calibration was checked only at its own charge: the release, behaviour-value (and
    DP-PBB) parts had been charged and the logs read when DP-VAPVI's (or DP-PBB's) charge refused."""
    reads, real_prepare = [], run_mod.prepare_on

    def prepare(*a, **kw):
        reads.append(a)
        return real_prepare(*a, **kw)
    monkeypatch.setattr(run_mod, "prepare_on", prepare)
    _too_little_noise(part, monkeypatch)
    led = tmp_path / "ledger"
    led.mkdir()
    init_ledger(led / "budget.jsonl", "rt-plans", 10.0)
    before = tree(led)
    res = run(world / "logs.parquet", "--spec", world / "spec.json", "--mdp", world / "mdp.npz", "--rho", 1,
              "--audit-trials", 0, "--ledger", led / "budget.jsonl", "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert f"the {part} part's planned privacy event does not fit its share" in res.output, res.output
    assert "(internal error)" in res.output and "Traceback" not in res.output
    assert tree(led) == before                                  # ledger (and its head file) byte-identical
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger"] and reads == []


def test_plan_parts_checks_each_part_and_the_composition(world):
    """Unit level: the planned events cost at most their parts (the exact rational cost), add up within
    the total, and a part's event at its charge must be the planned one."""
    from privaudit.pipeline.guarantee import split_budget
    from privaudit.privacy.budget import resolve_budget
    from privaudit.core.spec import load_spec

    spec = load_spec(world / "spec.json")
    budget = resolve_budget(rho=1.0, mechanism="gaussian")
    parts = split_budget(budget, linear=True, linear_share=0.5, value_share=0.1, pbb_share=0.26)
    plan = plan_parts(spec, budget, parts, stationary=False)
    assert isinstance(plan, PartsPlan) and set(plan.events) == ALL_PARTS
    for name, ev in plan.events.items():
        assert accounting.event_rho(ev) <= parts[name].rho, name
    assert plan.total == 1                                      # 0.14 + 0.1 + 0.26 + 0.5, exactly
    assert plan.charged("dp-pbb", plan.events["dp-pbb"]) is plan.events["dp-pbb"]
    with pytest.raises(AccountingError, match="dp-pbb part's privacy event differs from the one planned"):
        plan.charged("dp-pbb", plan.events["dp-vapvi"])
    # a split missing a plan (an unknown part) is refused, not silently unchecked
    with pytest.raises(AccountingError, match="no plan for the part"):
        plan_parts(spec, budget, {**parts, "mystery": parts["dp-pbb"]}, stationary=False)
